//! How fast a disk works through each class's charged cost: its *pace*.
//!
//! The cost model charges a random 4 KiB read on a disk a seek and a
//! rotational wait as they average over the whole disk at the queue depth
//! of its profile. A class whose reads crowd into one region, queued deep
//! enough for the disk to reorder them, is served two or three times faster
//! than it is charged; a class whose reads seek across the disk from a
//! shallow queue, slower. Charged cost then splits the disk's time between
//! classes of different patterns by the model's error, not by their shares,
//! and a slice (see [`crate::dispatcher`]) lasts that much more or less of
//! the disk's time than it names: a region-bound random reader's turns end
//! early, and each switch between regions costs the disk the ramp down and
//! up of its queue's reordering.
//!
//! A disk serves one command at a time (one head), so while it stays busy
//! the time between two completions is the second one's service time. Per
//! class, [`Pace`] sums the charged cost of its completions and the service
//! time so attributed; their ratio, charged nanoseconds per nanosecond of
//! the disk's time, is the class's pace, and the fair queue charges the
//! class its cost over its pace (see "Paced charges" in
//! [`crate::fair_queue`]). The sums halve once the service time passes a
//! window (the slice), so the pace follows what the class does now. Until a
//! tenth of a window is seen the pace is one: charged cost is taken as
//! device time. It stays within [`PACE_MIN`, `PACE_MAX`], so a few odd
//! completions cannot move a class's charges far. The dispatcher keeps a
//! pace only on a device with slices: where a device serves many commands at
//! once, the time between completions is not one command's service.
//! Completions seen together (an engine reaping several at once) give the
//! first the whole time since the ones before and the rest none; over a
//! window the sums stay right while one class is served at a time, which is
//! what slices do.

use crate::request::Nanos;

/// The smallest pace: a class served more than four times slower than
/// charged is charged four times its cost, no more.
pub const PACE_MIN: f64 = 0.25;

/// The largest pace: a class served more than this many times faster than
/// charged is charged this fraction of its cost, no less. Higher lets a class
/// that a disk reorders well have its full part of the disk's time; lower
/// bounds how much charged cost it may take before the others' turn, and so
/// their wait in the cost model's terms.
pub const PACE_MAX: f64 = 8.0;

/// One class's pace: charged cost and service time of its recent
/// completions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    charged_ns: u64,
    served_ns: u64,
}

impl Pace {
    /// Counts one completion: a piece charged `charged_ns` that took
    /// `served_ns` of the device's time. Both sums halve once the service
    /// time reaches `window_ns`.
    pub fn record(&mut self, charged_ns: Nanos, served_ns: Nanos, window_ns: Nanos) {
        self.charged_ns = self.charged_ns.saturating_add(charged_ns);
        self.served_ns = self.served_ns.saturating_add(served_ns);
        if self.served_ns >= window_ns.max(1) {
            self.charged_ns /= 2;
            self.served_ns /= 2;
        }
    }

    /// Charged nanoseconds per nanosecond of the device's time, within
    /// [`PACE_MIN`, `PACE_MAX`]; one until a tenth of `window_ns` of service
    /// time is counted.
    pub fn ratio(&self, window_ns: Nanos) -> f64 {
        if self.served_ns == 0 || self.served_ns < window_ns / 10 {
            return 1.0;
        }
        (self.charged_ns as f64 / self.served_ns as f64).clamp(PACE_MIN, PACE_MAX)
    }

    /// The pace in thousandths ([`crate::fair_queue::PACE_UNIT`] is one),
    /// as [`crate::fair_queue::FairQueue::set_pace_per_mille`] takes it.
    pub fn per_mille(&self, window_ns: Nanos) -> u64 {
        (self.ratio(window_ns) * crate::fair_queue::PACE_UNIT as f64).round() as u64
    }
}

/// When the device's time for the next completion starts counting: the
/// last completion, or the dispatch that found the device idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceClock {
    since: Nanos,
}

impl ServiceClock {
    /// A piece went to the device at `now`; `idle` says the device held
    /// nothing before it, so its service cannot have started earlier.
    pub fn dispatched(&mut self, now: Nanos, idle: bool) {
        if idle {
            self.since = now;
        }
    }

    /// A piece completed at `now`: returns its service time (the device's
    /// time since the previous completion, or since it last became busy).
    pub fn completed(&mut self, now: Nanos) -> Nanos {
        let served_ns = now.saturating_sub(self.since);
        self.since = now;
        served_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW_NS: Nanos = 1_000_000_000;

    #[test]
    fn the_pace_is_charged_cost_over_service_time() {
        let mut pace = Pace::default();
        for _ in 0..100 {
            pace.record(5_000_000, 2_000_000, WINDOW_NS);
        }
        assert!((pace.ratio(WINDOW_NS) - 2.5).abs() < 1e-9);
        assert_eq!(pace.per_mille(WINDOW_NS), 2_500);
    }

    #[test]
    fn the_pace_is_one_until_a_tenth_of_a_window_is_seen() {
        let mut pace = Pace::default();
        assert_eq!(pace.ratio(WINDOW_NS), 1.0);
        pace.record(50_000_000, 10_000_000, WINDOW_NS);
        assert_eq!(pace.ratio(WINDOW_NS), 1.0);
        pace.record(450_000_000, 90_000_000, WINDOW_NS);
        assert!((pace.ratio(WINDOW_NS) - 5.0).abs() < 1e-9);
    }

    #[test]
    fn the_pace_follows_what_the_class_does_now() {
        let mut pace = Pace::default();
        for _ in 0..1000 {
            pace.record(6_000_000, 2_000_000, WINDOW_NS);
        }
        for _ in 0..3000 {
            pace.record(2_000_000, 2_000_000, WINDOW_NS);
        }
        assert!((pace.ratio(WINDOW_NS) - 1.0).abs() < 0.05, "{pace:?}");
    }

    #[test]
    fn the_pace_stays_within_its_bounds() {
        let mut fast = Pace::default();
        fast.record(WINDOW_NS, 1_000, WINDOW_NS);
        fast.record(WINDOW_NS, WINDOW_NS / 5, WINDOW_NS);
        assert_eq!(fast.ratio(WINDOW_NS), PACE_MAX);
        let mut slow = Pace::default();
        slow.record(1_000, WINDOW_NS / 2, WINDOW_NS);
        assert_eq!(slow.ratio(WINDOW_NS), PACE_MIN);
        assert_eq!(fast.per_mille(WINDOW_NS), 8_000);
    }

    #[test]
    fn service_counts_from_the_last_completion_or_the_idle_dispatch() {
        let mut clock = ServiceClock::default();
        clock.dispatched(100, true);
        clock.dispatched(150, false);
        assert_eq!(clock.completed(400), 300);
        assert_eq!(clock.completed(450), 50);
        clock.dispatched(1_000, true);
        assert_eq!(clock.completed(1_200), 200);
    }
}
