//! The pure part of tune: where a curve's knee is, and first versus steady rates.
//!
//! A curve is a list of [`CurvePoint`]s measured at rising concurrency (queue
//! depth, or bytes in flight). Its *knee* is the last point worth its
//! concurrency: the point past which throughput grows by less than
//! [`KNEE_GROWTH`] (5%) while latency keeps rising. [`knee_index`] finds it from
//! the points alone, so the sweep can stop soon after it and tests can feed it
//! synthetic curves.
//!
//! One noisy step must not end a sweep (a shared or cloud disk dips for a
//! moment), so the rule compares against the *candidate*, not the step before:
//!
//! - The first point is the first candidate. A point with at least 5% more
//!   throughput (bytes per second) than the candidate becomes the candidate.
//! - A point with less than 5% more throughput than the candidate and a higher
//!   median latency is *flat*; any other point breaks a run of flat points.
//! - The candidate is the knee once [`KNEE_FLAT_STEPS`] (2) consecutive points
//!   after it are flat. So the earliest knee is confirmed at the third point,
//!   never on the first pair of steps, and a dip followed by growth only moves
//!   the candidate on.
//!
//! A sweep that ends before a knee is confirmed takes its candidate
//! ([`knee_or_candidate`]): the last point that still paid off, which is the
//! last point of a curve that never flattened.
//!
//! Latency "rising" compares medians: a p99 is too noisy at the short steps of
//! a sweep. A drop in throughput counts as growth below 5%.
//!
//! [`first_and_steady`] splits a rate timeline (one value per interval of a
//! sustained run) into the rate of the first seconds and the steady-state rate
//! of the second half: cloud disks burst, then fall to their provisioned rate,
//! and a profile must use the rate that lasts. [`steady_window_s`] says which
//! intervals the steady rate covers, so another tool (fio's `ramp_time` and
//! `runtime`) can measure the same window.

/// Throughput growth below this fraction (5%) means more concurrency no longer pays.
pub const KNEE_GROWTH: f64 = 0.05;

/// A steady rate below this fraction of the first rate is reported as throttling
/// (cloud disks fall to a half or less of their burst; a shared disk's noise
/// alone stays above it).
pub const THROTTLE_RATIO: f64 = 0.8;

/// One step of a sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    /// Requests kept in flight.
    pub queue_depth: u32,
    /// Size of each request.
    pub request_bytes: u64,
    /// Completed requests per second.
    pub iops: f64,
    /// Median latency, µs.
    pub latency_us_p50: f64,
    /// 99th percentile latency, µs.
    pub latency_us_p99: f64,
}

impl CurvePoint {
    /// Bytes in flight: `queue_depth × request_bytes`.
    pub fn in_flight_bytes(&self) -> u64 {
        u64::from(self.queue_depth) * self.request_bytes
    }

    /// Bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.iops * self.request_bytes as f64
    }
}

/// Consecutive flat points after the candidate that confirm it as the knee: one
/// flat step may be noise, two in a row are a plateau.
pub const KNEE_FLAT_STEPS: usize = 2;

/// Where a scan of a curve stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KneeScan {
    /// The last point that paid off.
    candidate: usize,
    /// Consecutive flat points since then.
    flat_steps: usize,
}

/// Scans the points by the rule of the module docs; `None` for no points.
fn scan(points: &[CurvePoint]) -> Option<KneeScan> {
    let first = points.first()?;
    let mut state = KneeScan {
        candidate: 0,
        flat_steps: 0,
    };
    let mut best = first;
    for (index, point) in points.iter().enumerate().skip(1) {
        if state.flat_steps >= KNEE_FLAT_STEPS {
            break;
        }
        // Strictly more: a step that completed nothing did not pay off, even
        // over a best that completed nothing either.
        let grew = point.bandwidth() > best.bandwidth() * (1.0 + KNEE_GROWTH);
        let slower = point.latency_us_p50 > best.latency_us_p50;
        if grew {
            state = KneeScan {
                candidate: index,
                flat_steps: 0,
            };
            best = point;
        } else if slower {
            state.flat_steps += 1;
        } else {
            state.flat_steps = 0;
        }
    }
    Some(state)
}

/// The index of the knee: the candidate (the last point with at least 5% more
/// throughput than the candidate before it) once the two points after it both
/// gained less than 5% over it while their median latency was higher. `None`
/// while that has not happened (fewer than three points, a curve still paying
/// off, or a single flat step).
pub fn knee_index(points: &[CurvePoint]) -> Option<usize> {
    scan(points)
        .filter(|state| state.flat_steps >= KNEE_FLAT_STEPS)
        .map(|state| state.candidate)
}

/// The knee, or when the sweep ended before one was confirmed the last point
/// that paid off (the last point of a curve that never flattened); `None` for
/// no points.
pub fn knee_or_candidate(points: &[CurvePoint]) -> Option<usize> {
    scan(points).map(|state| state.candidate)
}

/// Rates at the start and in steady state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FirstAndSteady {
    /// Mean of the first fifth of the intervals (at least one).
    pub first: f64,
    /// Mean of the second half of the intervals.
    pub steady: f64,
}

impl FirstAndSteady {
    /// Whether the device slowed down markedly during the run.
    pub fn throttled(&self) -> bool {
        self.steady < self.first * THROTTLE_RATIO
    }
}

/// Splits a rate timeline into first and steady rates; `None` when empty.
pub fn first_and_steady(timeline: &[f64]) -> Option<FirstAndSteady> {
    if timeline.is_empty() {
        return None;
    }
    let first_count = (timeline.len() / 5).max(1);
    Some(FirstAndSteady {
        first: mean(&timeline[..first_count]),
        steady: mean(&timeline[steady_start(timeline.len())..]),
    })
}

/// The first interval of the steady half of a timeline of `intervals`.
fn steady_start(intervals: usize) -> usize {
    intervals / 2
}

/// The seconds the steady rate covers, counted from the start of the
/// sustained run: `(from_s, to_s)` for a timeline of `intervals` intervals of
/// `interval_s` each (the second half: intervals `intervals / 2` to the end).
/// `None` when empty. fio measures the same window with `ramp_time=from_s` and
/// `runtime=to_s - from_s`.
pub fn steady_window_s(intervals: usize, interval_s: f64) -> Option<(f64, f64)> {
    (intervals > 0).then(|| {
        (
            steady_start(intervals) as f64 * interval_s,
            intervals as f64 * interval_s,
        )
    })
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that serves `max_iops` with `floor_us` latency: below saturation
    /// throughput grows with depth (Little's law), past it latency does.
    fn saturating_curve(max_iops: f64, floor_us: f64, depths: &[u32]) -> Vec<CurvePoint> {
        depths
            .iter()
            .map(|&queue_depth| {
                let unsaturated = f64::from(queue_depth) / (floor_us / 1e6);
                let iops = unsaturated.min(max_iops);
                let latency = f64::from(queue_depth) / iops * 1e6;
                CurvePoint {
                    queue_depth,
                    request_bytes: 4096,
                    iops,
                    latency_us_p50: latency,
                    latency_us_p99: latency * 2.0,
                }
            })
            .collect()
    }

    #[test]
    fn steps_that_complete_nothing_do_not_pay_off() {
        let idle = [point(1, 0.0, 0.0), point(2, 0.0, 0.0), point(4, 0.0, 0.0)];
        assert_eq!(knee_or_candidate(&idle), Some(0));
        // From nothing to something does pay off.
        let waking = [point(1, 0.0, 0.0), point(2, 1_000.0, 90.0)];
        assert_eq!(knee_or_candidate(&waking), Some(1));
    }

    /// A point of a 4 KiB curve.
    fn point(queue_depth: u32, iops: f64, latency_us_p50: f64) -> CurvePoint {
        CurvePoint {
            queue_depth,
            request_bytes: 4096,
            iops,
            latency_us_p50,
            latency_us_p99: latency_us_p50 * 2.0,
        }
    }

    /// The curve's knee by depth, for short assertions.
    fn knee_depth(curve: &[CurvePoint]) -> Option<u32> {
        knee_index(curve).map(|index| curve[index].queue_depth)
    }

    #[test]
    fn the_knee_is_the_first_depth_that_reaches_saturation() {
        // 100 µs floor: depth d gives 10k × d IOPS up to 80k, reached at depth 8.
        let depths = [1, 2, 4, 8, 16, 32];
        let curve = saturating_curve(80_000.0, 100.0, &depths);
        assert_eq!(knee_depth(&curve), Some(8));
        // Confirmed by the two flat steps after it: the sweep may stop at 32.
        assert_eq!(knee_index(&curve[..5]), None);
        assert_eq!(knee_or_candidate(&curve[..5]), Some(3));
    }

    #[test]
    fn a_real_plateau_stops_the_curve_after_two_flat_steps() {
        // Depth 4 is the last to pay off; 8 and 16 gain 2-4% at rising latency.
        let curve = [
            point(1, 10_000.0, 100.0),
            point(2, 20_000.0, 100.0),
            point(4, 40_000.0, 100.0),
            point(8, 41_000.0, 195.0),
            point(16, 41_600.0, 385.0),
        ];
        assert_eq!(knee_depth(&curve), Some(4));
        // A plateau with noise: one flat step beats the candidate by 4%, the
        // next falls below the step before it; both are flat against depth 4.
        let noisy = [
            point(1, 10_000.0, 100.0),
            point(2, 20_000.0, 100.0),
            point(4, 40_000.0, 100.0),
            point(8, 41_600.0, 190.0),
            point(16, 40_400.0, 400.0),
        ];
        assert_eq!(knee_depth(&noisy), Some(4));
    }

    #[test]
    fn a_dip_followed_by_growth_does_not_stop_the_curve() {
        // Depth 4 dips (a noisy step, slower), then depth 8 and 16 grow again:
        // a rule that judged one pair of steps would stop at depth 2.
        let mut curve = vec![
            point(1, 10_000.0, 100.0),
            point(2, 20_000.0, 100.0),
            point(4, 15_000.0, 260.0),
            point(8, 80_000.0, 100.0),
        ];
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_candidate(&curve), Some(3));
        curve.push(point(16, 150_000.0, 105.0));
        assert_eq!(knee_index(&curve), None);
        // Then a real plateau: the knee is depth 16, not the dip's neighbour.
        curve.push(point(32, 151_000.0, 210.0));
        curve.push(point(64, 152_000.0, 420.0));
        assert_eq!(knee_depth(&curve), Some(16));
    }

    #[test]
    fn the_first_pair_of_steps_never_stops_the_sweep() {
        // Depth 2 measured slower and no faster than depth 1 (the disk was busy
        // for a moment); depth 4 shows the curve was far from flat.
        let curve = [
            point(1, 10_000.0, 100.0),
            point(2, 9_000.0, 220.0),
            point(4, 38_000.0, 105.0),
        ];
        assert_eq!(knee_index(&curve[..2]), None);
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_candidate(&curve), Some(2));
    }

    #[test]
    fn a_flat_step_between_growing_ones_resets_the_count() {
        // Flat at 8, growth at 16, flat at 32: never two flat steps in a row
        // against one candidate.
        let curve = [
            point(1, 10_000.0, 100.0),
            point(2, 20_000.0, 100.0),
            point(4, 40_000.0, 100.0),
            point(8, 40_500.0, 200.0),
            point(16, 60_000.0, 260.0),
            point(32, 61_000.0, 520.0),
        ];
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_candidate(&curve), Some(4));
    }

    #[test]
    fn small_gains_with_rising_latency_stop_the_curve() {
        let mut curve = saturating_curve(1e9, 100.0, &[1, 2, 4]);
        // Depths 8 and 16 gain 4% over depth 4 and latency grows: depth 4 is
        // the knee.
        let last = curve[2];
        for (queue_depth, latency) in [(8, 1.9), (16, 3.8)] {
            curve.push(CurvePoint {
                queue_depth,
                iops: last.iops * 1.04,
                latency_us_p50: last.latency_us_p50 * latency,
                ..last
            });
        }
        assert_eq!(knee_index(&curve), Some(2));
    }

    #[test]
    fn a_curve_still_growing_has_no_knee_and_falls_back_to_its_last_point() {
        let curve = saturating_curve(1e9, 100.0, &[1, 2, 4, 8]);
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_candidate(&curve), Some(3));
        assert_eq!(knee_or_candidate(&[]), None);
        assert_eq!(knee_index(&curve[..1]), None);
        assert_eq!(knee_or_candidate(&curve[..1]), Some(0));
    }

    #[test]
    fn a_sweep_that_ends_after_one_flat_step_takes_the_point_before_it() {
        // The last step gained 1% at twice the latency: not worth its depth.
        let curve = [
            point(1, 10_000.0, 100.0),
            point(2, 20_000.0, 100.0),
            point(4, 20_200.0, 200.0),
        ];
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_candidate(&curve), Some(1));
    }

    #[test]
    fn flat_throughput_without_rising_latency_is_not_a_knee() {
        // Noise: steps that did not gain but got no slower either.
        let curve = [
            point(1, 1000.0, 100.0),
            point(2, 1000.0, 99.0),
            point(4, 1000.0, 100.0),
        ];
        assert_eq!(knee_index(&curve), None);
    }

    #[test]
    fn a_throughput_drop_counts_as_flat() {
        let mut curve = saturating_curve(50_000.0, 100.0, &[1, 2, 4]);
        let last = curve[2];
        for (queue_depth, factor) in [(8, 0.8), (16, 0.7)] {
            curve.push(CurvePoint {
                queue_depth,
                iops: last.iops * factor,
                latency_us_p50: last.latency_us_p50 * 2.5,
                ..last
            });
        }
        assert_eq!(knee_index(&curve), Some(2));
    }

    #[test]
    fn bandwidth_curves_compare_bytes_not_requests() {
        // Larger requests at lower IOPS but more bytes: still growing.
        let small = CurvePoint {
            queue_depth: 1,
            request_bytes: 128 * 1024,
            iops: 1000.0,
            latency_us_p50: 1000.0,
            latency_us_p99: 1500.0,
        };
        let large = CurvePoint {
            queue_depth: 1,
            request_bytes: 1024 * 1024,
            iops: 300.0,
            latency_us_p50: 3300.0,
            latency_us_p99: 4000.0,
        };
        // Compared by requests, the large point would be flat and slower.
        assert_eq!(knee_or_candidate(&[small, large]), Some(1));
        assert_eq!(large.in_flight_bytes(), 1 << 20);
    }

    #[test]
    fn a_burst_then_a_fall_is_first_high_steady_low() {
        // 2 s at 3000, then 8 s at 1000 (100 ms intervals).
        let timeline: Vec<f64> = (0..100)
            .map(|i| if i < 20 { 3000.0 } else { 1000.0 })
            .collect();
        let rates = first_and_steady(&timeline).unwrap();
        assert_eq!(rates.first, 3000.0);
        assert_eq!(rates.steady, 1000.0);
        assert!(rates.throttled());
    }

    #[test]
    fn a_flat_timeline_is_not_throttled() {
        let timeline = [1000.0, 1010.0, 990.0, 1000.0];
        let rates = first_and_steady(&timeline).unwrap();
        assert!(!rates.throttled());
        assert_eq!(rates.steady, 995.0);
        // Noise of 15% is not throttling.
        let noisy = [1150.0, 1000.0, 1000.0, 1000.0, 1000.0];
        assert!(!first_and_steady(&noisy).unwrap().throttled());
        assert_eq!(first_and_steady(&[]), None);
    }

    #[test]
    fn the_steady_window_is_the_second_half_of_the_intervals() {
        // 20 intervals of 0.4 s: an 8 s run, steady from 4 s to 8 s.
        assert_eq!(steady_window_s(20, 0.4), Some((4.0, 8.0)));
        // An odd count: the steady half holds the middle interval.
        assert_eq!(steady_window_s(5, 1.0), Some((2.0, 5.0)));
        let timeline = [1.0, 1.0, 3.0, 3.0, 3.0];
        assert_eq!(first_and_steady(&timeline).unwrap().steady, 3.0);
        assert_eq!(steady_window_s(1, 1.0), Some((0.0, 1.0)));
        assert_eq!(steady_window_s(0, 1.0), None);
    }
}
