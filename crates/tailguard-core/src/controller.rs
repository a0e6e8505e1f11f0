//! The adaptive latency controller: the smallest budget that sustains throughput.
//!
//! [`AdaptiveBudget`] resizes a device's in-flight budget from completions alone.
//! It cuts time into *windows* (at least [`WINDOW_MIN_NS`] and
//! [`WINDOW_COMPLETIONS`] completions, at most [`WINDOW_MAX_NS`]), and at the end
//! of each it measures two things: the **rate** at which the device completes
//! cost (cost-ns per ns: 1.0 when the profile is exact and the device busy), and
//! the **queueing delay** the budget causes, by Little's law: mean in-flight
//! cost ÷ rate. One function, [`AdaptiveBudget::classify`], names the situation;
//! one match acts on it:
//!
//! - **congested**: the delay exceeds the goal (2/3 of the latency target, since a
//!   read also waits about one piece for room in the budget), or more than 1% of
//!   reads took longer than the goal at the device with enough work dispatched
//!   ahead of them to explain it. The budget shrinks at once to `goal × rate`
//!   (the deepest queue that drains within the goal), by at most 4× per window.
//! - **underused**: the budget held work back (pieces were queued) and there is
//!   room under the goal: probe upwards by [`GROW_STEP`] (doubling while growth
//!   keeps paying, like TCP's slow start, so a bad starting point costs a few
//!   windows, not seconds).
//! - **probe verdicts**: a growth is kept only if the next window's rate rose by
//!   at least [`GROWTH_PAYS`] (5%), otherwise it is undone; a shrink probe is kept
//!   only if the rate stayed within [`SHRINK_KEEPS`] of the rate before it. So the
//!   budget settles at the *knee* of throughput against depth, from either side.
//! - **settled**: after a wasted growth, the next probe goes down, looking for
//!   a smaller budget with the same throughput; probes are [`HOLD_WINDOWS`] apart.
//! - **idle** or **fine**: hold.
//!
//! ## What inspired it, and how it differs
//!
//! blk-wbt and kyber watch read latency in ~100 ms windows and scale the queue
//! depth down when a percentile exceeds the target, up when it is met. Both only
//! know latency, so they cannot tell a deep queue that buys throughput (a disk's
//! elevator, an SSD's parallel units) from one that only adds delay; Seastar's
//! fixed sub-millisecond goal starves disks for the same reason. Here the budget
//! is device time, so Little's law turns the measured rate into a predicted delay
//! for any budget, and the knee test grows the queue only while it pays in
//! throughput. Two further differences:
//!
//! - **No profile needed.** Rates are measured in the profile's cost units, so a
//!   wrong profile only scales them: a device three times slower than believed
//!   shows a rate of 0.33 and gets a budget three times smaller in cost, the
//!   same in real time. A profile only makes the first window closer.
//! - **Floors are not congestion.** A read late with little work ahead of it (a
//!   GC stall, a USB write stall, a long seek) is the device's floor: shrinking
//!   would cost throughput and not help, so it does not count.
//!
//! Every decision is counted in [`ControllerStats`] (grows, shrinks, holds, the
//! last [`Situation`]), which the dispatcher reports in its stats.

use crate::budget::{Budget, CompletionSample, LatencyController};
use crate::profile::{CostModel, DeviceProfile};
use crate::request::{Direction, Nanos, NANOS_PER_MILLISECOND};

/// Shortest window: 10 ms, long enough to average over many completions of a
/// fast device, short enough to react to a slowdown in well under a second.
pub const WINDOW_MIN_NS: Nanos = 10 * NANOS_PER_MILLISECOND;
/// Longest window: 200 ms, so a slow device (a disk doing 1 MiB pieces, a USB
/// stick) is still judged five times a second.
pub const WINDOW_MAX_NS: Nanos = 200 * NANOS_PER_MILLISECOND;
/// Completions a window waits for (within the bounds above): 64 keeps the rate's
/// counting error near 1.5%, well under the 5% knee test.
pub const WINDOW_COMPLETIONS: u64 = 64;
/// A growth probe is kept only if the rate rose by at least 5%: below that the
/// extra depth buys delay, not throughput (the knee).
pub const GROWTH_PAYS: f64 = 1.05;
/// A shrink probe is kept only if the rate stayed at 98% or more of the rate
/// before it. Stricter than [`GROWTH_PAYS`] so alternating probes cannot walk the
/// budget down a throughput slope a little at a time.
pub const SHRINK_KEEPS: f64 = 0.98;
/// First step of a growth probe: 25%, enough to see a 5% gain below the knee.
pub const GROW_STEP: f64 = 1.25;
/// Step once growth paid twice in a row: double (slow start), so a budget 100×
/// too small recovers in about seven probes.
pub const GROW_STEP_FAST: f64 = 2.0;
/// A shrink probe takes 20% off (the inverse of [`GROW_STEP`]).
pub const SHRINK_STEP: f64 = 0.8;
/// A congested window cuts the budget to at least a quarter, so a device slowed
/// to 30% is matched in one window.
pub const CONGESTION_CUT_MAX: f64 = 0.25;
/// A congested window cuts at least 10%, even if the estimate says less.
pub const CONGESTION_CUT_MIN: f64 = 0.9;
/// Windows held between probes once the knee is found: probing costs a little
/// throughput or latency each time, so it is done at most every fifth window.
pub const HOLD_WINDOWS: u32 = 4;
/// The goal for queueing delay, as a fraction of the latency target: a read waits
/// for the work ahead of it (≤ goal) and for about one piece to make room
/// (≤ goal / 2), so 2/3 keeps the sum within the target.
pub const GOAL_FRACTION: f64 = 2.0 / 3.0;
/// More than 1 in 100 late reads is congestion (the target is a p99).
pub const LATE_READS_PER_HUNDRED: u64 = 1;
/// The largest budget, in latency targets: a device far faster than its profile
/// says shows a rate well above 1, and the budget follows, up to this.
pub const LIMIT_MAX_TARGETS: u64 = 64;

/// What the classifier says about the window that just ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Situation {
    /// Too little happened, or the workload did not fill the budget: nothing to learn.
    Idle,
    /// Delay (Little's law) or late reads above the goal: shrink to what drains in time.
    Congested,
    /// A growth probe raised the rate by at least [`GROWTH_PAYS`]: keep it, grow again.
    GrowthPaid,
    /// A growth probe did not pay: undo it.
    GrowthWasted,
    /// A shrink probe kept the rate: keep it, shrink again.
    ShrinkFree,
    /// A shrink probe cost throughput: undo it.
    ShrinkCostly,
    /// The budget held work back and the goal leaves room: probe upwards.
    Underused,
    /// At the knee (or at the goal): probe downwards for a smaller budget.
    Settled,
    /// Between probes: hold.
    Fine,
}

/// Counters of a controller's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControllerStats {
    /// Windows judged.
    pub windows: u64,
    /// Times the budget grew (probes up, and undone shrink probes).
    pub grows: u64,
    /// Times the budget shrank (congestion, probes down, undone growth).
    pub shrinks: u64,
    /// Windows that left the budget as it was.
    pub holds: u64,
    /// Congested windows (a subset of the shrinks).
    pub congested: u64,
    /// The last window's classification.
    pub last: Option<Situation>,
    /// The last window's rate, in thousandths of cost-ns per ns (1000: the device
    /// completes exactly what its profile predicts).
    pub rate_milli: u64,
}

/// How an [`AdaptiveBudget`] is bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The latency target (what the profile asks for).
    pub latency_target_ns: Nanos,
    /// The smallest budget: four of the most expensive 4 KiB requests, so the
    /// device always pipelines (see [`crate::budget`]).
    pub min_limit_ns: Nanos,
    /// The largest budget: [`LIMIT_MAX_TARGETS`] latency targets.
    pub max_limit_ns: Nanos,
}

impl AdaptiveConfig {
    /// Bounds for a profile.
    pub fn for_profile(profile: &DeviceProfile) -> Self {
        let min_limit_ns =
            Budget::derived_limit_ns(0, CostModel::new(profile).small_request_cost_ns());
        let target = profile.latency_target_ns();
        Self {
            latency_target_ns: target,
            min_limit_ns,
            max_limit_ns: (LIMIT_MAX_TARGETS * target).max(min_limit_ns),
        }
    }

    /// The goal for queueing delay; see [`GOAL_FRACTION`].
    pub fn goal_ns(&self) -> f64 {
        self.latency_target_ns as f64 * GOAL_FRACTION
    }
}

/// What one window measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowSummary {
    /// Completions in the window.
    pub completions: u64,
    /// Cost completed per nanosecond.
    pub rate: f64,
    /// Little's law: mean in-flight cost ÷ rate, in ns.
    pub delay_ns: f64,
    /// Whether pieces waited in the fair queue at most completions.
    pub binding: bool,
    /// Reads completed.
    pub reads: u64,
    /// Reads late because of the work ahead of them.
    pub late_reads: u64,
    /// The longest read device time, in ns.
    pub worst_read_ns: Nanos,
}

#[derive(Clone, Debug, Default)]
struct Window {
    start_ns: Nanos,
    completions: u64,
    cost_ns: u128,
    in_flight_sum_ns: u128,
    backlogged: u64,
    reads: u64,
    /// (device time, work ahead) of reads over the goal; judged at the window's end,
    /// when the rate is known.
    late_candidates: Vec<(Nanos, Nanos)>,
    worst_read_ns: Nanos,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Probe {
    None,
    Up { from_ns: Nanos, baseline: f64 },
    Down { from_ns: Nanos, baseline: f64 },
}

/// The adaptive controller; see the module docs.
#[derive(Clone, Debug)]
pub struct AdaptiveBudget {
    config: AdaptiveConfig,
    window: Window,
    started: bool,
    probe: Probe,
    paid_streak: u32,
    probe_down_next: bool,
    holds_left: u32,
    last: WindowSummary,
    stats: ControllerStats,
}

impl AdaptiveBudget {
    /// A controller with these bounds.
    pub fn new(config: AdaptiveConfig) -> Self {
        Self {
            config,
            window: Window::default(),
            started: false,
            probe: Probe::None,
            paid_streak: 0,
            probe_down_next: false,
            holds_left: 0,
            last: WindowSummary::default(),
            stats: ControllerStats::default(),
        }
    }

    /// A controller for a profile ([`AdaptiveConfig::for_profile`]).
    pub fn for_profile(profile: &DeviceProfile) -> Self {
        Self::new(AdaptiveConfig::for_profile(profile))
    }

    /// Its bounds.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// The last window's summary.
    pub fn last_window(&self) -> &WindowSummary {
        &self.last
    }

    fn window_done(&self, now: Nanos) -> bool {
        let elapsed = now.saturating_sub(self.window.start_ns);
        (elapsed >= WINDOW_MIN_NS && self.window.completions >= WINDOW_COMPLETIONS)
            || elapsed >= WINDOW_MAX_NS
    }

    fn summarize(&self, now: Nanos) -> WindowSummary {
        let window = &self.window;
        let elapsed = now.saturating_sub(window.start_ns).max(1) as f64;
        let rate = window.cost_ns as f64 / elapsed;
        let mean_in_flight = window.in_flight_sum_ns as f64 / window.completions.max(1) as f64;
        let delay_ns = if rate > 0.0 {
            mean_in_flight / rate
        } else {
            f64::INFINITY
        };
        let goal = self.config.goal_ns();
        // Late because of queueing: the work ahead, at the measured rate, accounts
        // for at least half the goal. Otherwise it is the device's floor.
        let late_reads = window
            .late_candidates
            .iter()
            .filter(|(_, ahead_ns)| rate > 0.0 && *ahead_ns as f64 / rate >= goal / 2.0)
            .count() as u64;
        WindowSummary {
            completions: window.completions,
            rate,
            delay_ns,
            binding: window.backlogged * 2 >= window.completions && window.completions > 0,
            reads: window.reads,
            late_reads,
            worst_read_ns: window.worst_read_ns,
        }
    }

    /// Names the situation after a window; pure in the window and the probe state.
    pub fn classify(&self, window: &WindowSummary, limit_ns: Nanos) -> Situation {
        if window.completions == 0 || window.rate <= 0.0 {
            return Situation::Idle;
        }
        let goal = self.config.goal_ns();
        let late = window.late_reads > 0
            && window.late_reads * 100 > window.reads * LATE_READS_PER_HUNDRED;
        if window.binding && (window.delay_ns > goal || late) {
            return Situation::Congested;
        }
        match self.probe {
            Probe::Up { baseline, .. } => {
                return if window.binding && window.rate >= baseline * GROWTH_PAYS {
                    Situation::GrowthPaid
                } else {
                    Situation::GrowthWasted
                };
            }
            Probe::Down { baseline, .. } => {
                return if window.rate >= baseline * SHRINK_KEEPS {
                    Situation::ShrinkFree
                } else {
                    Situation::ShrinkCostly
                };
            }
            Probe::None => {}
        }
        if !window.binding {
            return Situation::Idle;
        }
        if self.holds_left > 0 {
            return Situation::Fine;
        }
        let room = (limit_ns as f64 * GROW_STEP) / window.rate <= goal;
        if room && !self.probe_down_next && limit_ns < self.config.max_limit_ns {
            Situation::Underused
        } else if limit_ns > self.config.min_limit_ns {
            Situation::Settled
        } else {
            Situation::Fine
        }
    }

    fn clamp(&self, limit_ns: f64) -> Nanos {
        (limit_ns.round() as Nanos).clamp(self.config.min_limit_ns, self.config.max_limit_ns)
    }

    /// The largest budget whose queue drains within the goal at `rate`.
    fn ceiling_ns(&self, rate: f64) -> f64 {
        self.config.goal_ns() * rate
    }

    /// Acts on a situation: the new limit, or `None` to hold.
    fn act(
        &mut self,
        situation: Situation,
        window: &WindowSummary,
        limit_ns: Nanos,
    ) -> Option<Nanos> {
        let limit = limit_ns as f64;
        let new = match situation {
            Situation::Idle | Situation::Fine => {
                self.holds_left = self.holds_left.saturating_sub(1);
                None
            }
            Situation::Congested => {
                let mut cut = self.ceiling_ns(window.rate) / limit;
                if window.late_reads > 0 && window.worst_read_ns > 0 {
                    cut = cut.min(self.config.goal_ns() / window.worst_read_ns as f64);
                }
                let cut = cut.clamp(CONGESTION_CUT_MAX, CONGESTION_CUT_MIN);
                self.probe = Probe::None;
                self.paid_streak = 0;
                self.probe_down_next = false;
                self.holds_left = 1;
                Some(self.clamp(limit * cut))
            }
            Situation::GrowthPaid | Situation::Underused => {
                if situation == Situation::GrowthPaid {
                    self.paid_streak += 1;
                }
                let step = if self.paid_streak >= 2 {
                    GROW_STEP_FAST
                } else {
                    GROW_STEP
                };
                let grown = (limit * step).min(self.ceiling_ns(window.rate));
                let grown = self.clamp(grown);
                if grown > limit_ns {
                    self.probe = Probe::Up {
                        from_ns: limit_ns,
                        baseline: window.rate,
                    };
                    Some(grown)
                } else {
                    self.probe = Probe::None;
                    self.holds_left = HOLD_WINDOWS;
                    None
                }
            }
            Situation::GrowthWasted => {
                let Probe::Up { from_ns, .. } = self.probe else {
                    unreachable!("classified from a growth probe")
                };
                self.probe = Probe::None;
                self.paid_streak = 0;
                self.probe_down_next = true;
                self.holds_left = HOLD_WINDOWS;
                Some(from_ns)
            }
            Situation::Settled => {
                self.probe = Probe::Down {
                    from_ns: limit_ns,
                    baseline: window.rate,
                };
                Some(self.clamp(limit * SHRINK_STEP))
            }
            Situation::ShrinkFree => {
                let Probe::Down { baseline, .. } = self.probe else {
                    unreachable!("classified from a shrink probe")
                };
                let shrunk = self.clamp(limit * SHRINK_STEP);
                if shrunk < limit_ns {
                    // The baseline stays the rate before the first shrink: no drift.
                    self.probe = Probe::Down {
                        from_ns: limit_ns,
                        baseline,
                    };
                    Some(shrunk)
                } else {
                    self.probe = Probe::None;
                    self.probe_down_next = false;
                    self.holds_left = HOLD_WINDOWS;
                    None
                }
            }
            Situation::ShrinkCostly => {
                let Probe::Down { from_ns, .. } = self.probe else {
                    unreachable!("classified from a shrink probe")
                };
                self.probe = Probe::None;
                self.probe_down_next = false;
                self.holds_left = HOLD_WINDOWS;
                Some(from_ns)
            }
        };
        let new = new.filter(|&new| new != limit_ns);
        match new {
            Some(new) if new > limit_ns => self.stats.grows += 1,
            Some(_) => self.stats.shrinks += 1,
            None => self.stats.holds += 1,
        }
        if situation == Situation::Congested {
            self.stats.congested += 1;
        }
        new
    }
}

impl LatencyController for AdaptiveBudget {
    fn on_completion(&mut self, sample: &CompletionSample, limit_ns: Nanos) -> Option<Nanos> {
        if !self.started {
            self.started = true;
            self.window.start_ns = sample.now.saturating_sub(sample.device_time_ns);
        }
        let window = &mut self.window;
        window.completions += 1;
        window.cost_ns += u128::from(sample.cost_ns);
        window.in_flight_sum_ns += u128::from(sample.in_flight_ns);
        if sample.queued_pieces > 0 {
            window.backlogged += 1;
        }
        if sample.direction == Direction::Read {
            window.reads += 1;
            window.worst_read_ns = window.worst_read_ns.max(sample.device_time_ns);
            if sample.device_time_ns as f64 > self.config.goal_ns() {
                window
                    .late_candidates
                    .push((sample.device_time_ns, sample.ahead_ns));
            }
        }
        if !self.window_done(sample.now) {
            return None;
        }
        let summary = self.summarize(sample.now);
        let situation = self.classify(&summary, limit_ns);
        let new = self.act(situation, &summary, limit_ns);
        self.stats.windows += 1;
        self.stats.last = Some(situation);
        self.stats.rate_milli = (summary.rate * 1000.0).round() as u64;
        self.last = summary;
        let mut late_candidates = std::mem::take(&mut self.window.late_candidates);
        late_candidates.clear();
        self.window = Window {
            start_ns: sample.now,
            late_candidates,
            ..Window::default()
        };
        new
    }

    fn stats(&self) -> ControllerStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> AdaptiveBudget {
        AdaptiveBudget::new(AdaptiveConfig {
            latency_target_ns: 300_000,
            min_limit_ns: 10_000,
            max_limit_ns: 10_000_000,
        })
    }

    fn window(rate: f64, mean_in_flight: f64, binding: bool) -> WindowSummary {
        WindowSummary {
            completions: 100,
            rate,
            delay_ns: mean_in_flight / rate,
            binding,
            ..WindowSummary::default()
        }
    }

    #[test]
    fn classifies_delay_over_the_goal_as_congested_and_cuts_to_what_drains() {
        let mut c = controller();
        // Goal 200 µs; 400 µs in flight at rate 1.0 is 400 µs of delay.
        let w = window(1.0, 400_000.0, true);
        assert_eq!(c.classify(&w, 400_000), Situation::Congested);
        assert_eq!(c.act(Situation::Congested, &w, 400_000), Some(200_000));
        // A device slowed to 30%: cut at most 4× in one window.
        let w = window(0.05, 400_000.0, true);
        assert_eq!(c.act(Situation::Congested, &w, 400_000), Some(100_000));
        assert_eq!(c.stats().congested, 2);
    }

    #[test]
    fn late_reads_with_work_ahead_are_congestion_but_floors_are_not() {
        let c = controller();
        let mut w = window(1.0, 100_000.0, true);
        w.reads = 10;
        w.late_reads = 1;
        assert_eq!(c.classify(&w, 100_000), Situation::Congested);
        w.late_reads = 0; // late, but nothing ahead: the device's floor
        assert_ne!(c.classify(&w, 100_000), Situation::Congested);
    }

    #[test]
    fn growth_is_kept_only_when_it_pays_five_percent() {
        let mut c = controller();
        let w = window(1.0, 50_000.0, true);
        assert_eq!(c.classify(&w, 50_000), Situation::Underused);
        let grown = c.act(Situation::Underused, &w, 50_000).unwrap();
        assert_eq!(grown, 62_500);
        assert_eq!(
            c.classify(&window(1.04, 60_000.0, true), grown),
            Situation::GrowthWasted
        );
        assert_eq!(
            c.classify(&window(1.06, 60_000.0, true), grown),
            Situation::GrowthPaid
        );
        let w = window(1.04, 60_000.0, true);
        assert_eq!(c.act(Situation::GrowthWasted, &w, grown), Some(50_000));
        // Then it holds, and the next probe goes down.
        for _ in 0..HOLD_WINDOWS {
            assert_eq!(c.classify(&w, 50_000), Situation::Fine);
            assert_eq!(c.act(Situation::Fine, &w, 50_000), None);
        }
        assert_eq!(c.classify(&w, 50_000), Situation::Settled);
        let stats = c.stats();
        assert_eq!(
            (stats.grows, stats.shrinks, stats.holds),
            (1, 1, HOLD_WINDOWS as u64)
        );
    }

    #[test]
    fn an_unfilled_budget_is_idle() {
        let c = controller();
        assert_eq!(
            c.classify(&window(0.5, 10_000.0, false), 50_000),
            Situation::Idle
        );
    }

    #[test]
    fn drives_a_budget_up_to_the_knee_through_the_trait() {
        // A device whose rate grows with in-flight cost up to 100 µs, then is flat.
        let mut c = controller();
        let mut limit: Nanos = 20_000;
        let mut now: Nanos = 0;
        for _ in 0..200_000 {
            let rate = (limit.min(100_000) as f64) / 100_000.0;
            let cost: Nanos = 1_000;
            now += (cost as f64 / rate) as Nanos;
            let sample = CompletionSample {
                now,
                direction: Direction::Write,
                cost_ns: cost,
                device_time_ns: 1_000,
                queue_wait_ns: 0,
                in_flight_ns: limit,
                ahead_ns: limit,
                queued_pieces: 5,
            };
            if let Some(new) = c.on_completion(&sample, limit) {
                limit = new;
            }
        }
        assert!((80_000..=200_000).contains(&limit), "settled at {limit}");
        assert!(c.stats().grows > 0 && c.stats().windows > 10);
    }
}
