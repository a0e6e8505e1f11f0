//! The pure part of tune: where a curve's knee is, and first versus steady rates.
//!
//! A curve is a list of [`CurvePoint`]s measured at rising concurrency (queue
//! depth, or bytes in flight). Its *knee* is the last point worth its
//! concurrency: the point past which throughput grows by less than
//! [`KNEE_GROWTH`] (5%) while latency keeps rising. [`knee_index`] finds it from
//! the points alone, so the sweep can stop one step past it and tests can feed
//! it synthetic curves. A curve that never flattens has no knee yet
//! ([`knee_index`] returns `None`); the sweep then takes its last point.
//!
//! Latency "rising" compares medians: a p99 is too noisy at the short steps of
//! a sweep. A drop in throughput counts as growth below 5%.
//!
//! [`first_and_steady`] splits a rate timeline (one value per interval of a
//! sustained run) into the rate of the first seconds and the steady-state rate
//! of the second half: cloud disks burst, then fall to their provisioned rate,
//! and a profile must use the rate that lasts.

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

/// The index of the knee: the first point `i` such that point `i + 1` has less
/// than 5% more throughput (bytes per second) while its median latency is higher.
/// `None` while the curve still pays off (or has fewer than two points).
pub fn knee_index(points: &[CurvePoint]) -> Option<usize> {
    points.windows(2).position(|pair| {
        let (before, after) = (&pair[0], &pair[1]);
        let flat = after.bandwidth() < before.bandwidth() * (1.0 + KNEE_GROWTH);
        let slower = after.latency_us_p50 > before.latency_us_p50;
        flat && slower
    })
}

/// The knee, or the last point when the curve never flattened.
pub fn knee_or_last(points: &[CurvePoint]) -> Option<usize> {
    knee_index(points).or_else(|| points.len().checked_sub(1))
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
    let steady_start = timeline.len() / 2;
    Some(FirstAndSteady {
        first: mean(&timeline[..first_count]),
        steady: mean(&timeline[steady_start..]),
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
    fn the_knee_is_the_first_depth_that_reaches_saturation() {
        // 100 µs floor: depth d gives 10k × d IOPS up to 80k, reached at depth 8.
        let depths = [1, 2, 4, 8, 16, 32];
        let curve = saturating_curve(80_000.0, 100.0, &depths);
        let knee = knee_index(&curve).expect("the curve flattens");
        assert_eq!(curve[knee].queue_depth, 8);
    }

    #[test]
    fn small_gains_with_rising_latency_stop_the_curve() {
        let mut curve = saturating_curve(1e9, 100.0, &[1, 2, 4]);
        // Depth 8 gains 4% and latency grows: depth 4 is the knee.
        let last = curve[2];
        curve.push(CurvePoint {
            queue_depth: 8,
            iops: last.iops * 1.04,
            latency_us_p50: last.latency_us_p50 * 1.9,
            ..last
        });
        assert_eq!(knee_index(&curve), Some(2));
    }

    #[test]
    fn a_curve_still_growing_has_no_knee_and_falls_back_to_its_last_point() {
        let curve = saturating_curve(1e9, 100.0, &[1, 2, 4, 8]);
        assert_eq!(knee_index(&curve), None);
        assert_eq!(knee_or_last(&curve), Some(3));
        assert_eq!(knee_or_last(&[]), None);
        assert_eq!(knee_index(&curve[..1]), None);
    }

    #[test]
    fn flat_throughput_without_rising_latency_is_not_a_knee() {
        // Noise: a step that did not gain but got no slower either.
        let point = CurvePoint {
            queue_depth: 1,
            request_bytes: 4096,
            iops: 1000.0,
            latency_us_p50: 100.0,
            latency_us_p99: 200.0,
        };
        let curve = [
            point,
            CurvePoint {
                queue_depth: 2,
                latency_us_p50: 99.0,
                ..point
            },
        ];
        assert_eq!(knee_index(&curve), None);
    }

    #[test]
    fn a_throughput_drop_counts_as_flat() {
        let mut curve = saturating_curve(50_000.0, 100.0, &[1, 2, 4]);
        let last = curve[2];
        curve.push(CurvePoint {
            queue_depth: 8,
            iops: last.iops * 0.8,
            latency_us_p50: last.latency_us_p50 * 2.5,
            ..last
        });
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
        assert_eq!(knee_index(&[small, large]), None);
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
}
