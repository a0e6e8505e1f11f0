//! What the device does wrong, and the handle tests steer it with.
//!
//! Every request the FUSE daemon serves passes [`FaultState::admit`] twice:
//! before the device model times it (a vanished device answers at once; a
//! stalled one holds the request, re-checking every few milliseconds so that
//! `heal` or `disappear` ends the wait) and after (error ranges and rates fail
//! it once the device has spent its time on it; a slow-down window stretches
//! its service time).

use std::ops::Range;
use std::time::{Duration, Instant};

/// Which requests a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ops {
    /// Reads, writes and flushes.
    Any,
    /// Reads only.
    Reads,
    /// Writes only.
    Writes,
    /// Flushes (`fsync` from the loop device) only.
    Flushes,
}

/// A request as the faults see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Read,
    Write,
    Flush,
}

impl Ops {
    fn matches(self, kind: RequestKind) -> bool {
        match self {
            Self::Any => true,
            Self::Reads => kind == RequestKind::Read,
            Self::Writes => kind == RequestKind::Write,
            Self::Flushes => kind == RequestKind::Flush,
        }
    }
}

/// Counters of what the device served and injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    /// Read requests served (failed ones included).
    pub reads: u64,
    /// Write requests served (failed ones included).
    pub writes: u64,
    /// Flushes served.
    pub flushes: u64,
    /// Requests failed by an error range or rate.
    pub errors_injected: u64,
    /// Requests failed because the device was gone.
    pub failed_gone: u64,
    /// Requests held by a stall.
    pub stalled: u64,
    /// Requests stretched by a slow-down window (only those the timing
    /// model gave some service time: without one, nothing is stretched).
    pub slowed: u64,
    /// Power cuts.
    pub power_cuts: u64,
    /// Unflushed 512-byte sectors thrown away by power cuts.
    pub sectors_lost: u64,
}

struct ErrorRange {
    offsets: Range<u64>,
    ops: Ops,
    errno: i32,
}

pub(crate) struct FaultState {
    ranges: Vec<ErrorRange>,
    rate: Option<(u32, Ops, i32)>,
    random: u64,
    stall_until: Option<Instant>,
    slow: Option<(f64, Instant)>,
    gone: Option<i32>,
    pub(crate) counts: DeviceCounts,
}

/// What to do with a request before it reaches the model.
pub(crate) enum Admission {
    Serve,
    Fail(i32),
    /// Stalled: wait a little and ask again.
    Wait(Duration),
}

/// How long a stalled request sleeps between looks at the state.
const STALL_POLL: Duration = Duration::from_millis(5);

/// The furthest a fault window reaches: a longer one ends here instead.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The instant `duration` from now, or [`FAR_FUTURE`] from now where
/// `duration` is longer or the sum does not fit an `Instant`.
pub(crate) fn far_after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration.min(FAR_FUTURE))
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

impl FaultState {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            ranges: Vec::new(),
            rate: None,
            random: seed ^ 0x9e37_79b9_7f4a_7c15,
            stall_until: None,
            slow: None,
            gone: None,
            counts: DeviceCounts::default(),
        }
    }

    pub(crate) fn add_range(&mut self, offsets: Range<u64>, ops: Ops, errno: i32) {
        self.ranges.push(ErrorRange {
            offsets,
            ops,
            errno,
        });
    }

    pub(crate) fn set_rate(&mut self, per_million: u32, ops: Ops, errno: i32) {
        self.rate = Some((per_million, ops, errno));
    }

    pub(crate) fn stall_until(&mut self, until: Instant) {
        self.stall_until = Some(self.stall_until.map_or(until, |current| current.max(until)));
    }

    /// Requests take `1 / factor` times as long until `until`; `factor` is
    /// clamped into [0.001, 1], and a NaN factor is no slow-down.
    pub(crate) fn slow_down(&mut self, factor: f64, until: Instant) {
        let factor = if factor.is_nan() {
            1.0
        } else {
            factor.clamp(1e-3, 1.0)
        };
        self.slow = Some((factor, until));
    }

    pub(crate) fn disappear(&mut self, errno: i32) {
        self.gone = Some(errno);
    }

    pub(crate) fn heal(&mut self) {
        self.ranges.clear();
        self.rate = None;
        self.stall_until = None;
        self.slow = None;
        self.gone = None;
    }

    /// Before the model: gone, stalled, or go. `first` counts the request.
    pub(crate) fn admit(&mut self, kind: RequestKind, first: bool) -> Admission {
        if first {
            match kind {
                RequestKind::Read => self.counts.reads += 1,
                RequestKind::Write => self.counts.writes += 1,
                RequestKind::Flush => self.counts.flushes += 1,
            }
        }
        if let Some(errno) = self.gone {
            self.counts.failed_gone += 1;
            return Admission::Fail(errno);
        }
        match self.stall_until {
            Some(until) if Instant::now() < until => {
                if first {
                    self.counts.stalled += 1;
                }
                Admission::Wait(STALL_POLL.min(until - Instant::now()))
            }
            _ => Admission::Serve,
        }
    }

    /// After the model took `served`: how much longer a slow-down holds it.
    pub(crate) fn stretch(&mut self, served: Duration) -> Duration {
        match self.slow {
            Some((factor, until)) if Instant::now() < until => {
                let extra =
                    Duration::try_from_secs_f64(served.as_secs_f64() * (1.0 / factor - 1.0))
                        .unwrap_or(Duration::ZERO);
                // A request the model served in no time (no timing model)
                // is not slowed by any factor.
                self.counts.slowed += u64::from(!extra.is_zero());
                extra
            }
            _ => Duration::ZERO,
        }
    }

    /// After the model: the errno an error range or rate gives the request.
    pub(crate) fn error_for(&mut self, kind: RequestKind, offsets: Range<u64>) -> Option<i32> {
        if let Some(errno) = self.gone {
            self.counts.failed_gone += 1;
            return Some(errno);
        }
        let touches = |range: &Range<u64>| {
            if offsets.is_empty() {
                range.contains(&0)
            } else {
                offsets.start < range.end && range.start < offsets.end
            }
        };
        let ranged = self
            .ranges
            .iter()
            .find(|rule| rule.ops.matches(kind) && touches(&rule.offsets))
            .map(|rule| rule.errno);
        let rated = match self.rate {
            Some((per_million, ops, errno)) if ops.matches(kind) => {
                (self.draw_per_million() < per_million).then_some(errno)
            }
            _ => None,
        };
        let errno = ranged.or(rated);
        self.counts.errors_injected += u64::from(errno.is_some());
        errno
    }

    fn draw_per_million(&mut self) -> u32 {
        self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.random;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((mixed ^ (mixed >> 31)) % 1_000_000) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_slow_down_factor_stretches_nothing_and_does_not_panic() {
        let mut faults = FaultState::new(1);
        faults.slow_down(f64::NAN, Instant::now() + Duration::from_secs(60));
        assert_eq!(faults.stretch(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(faults.counts.slowed, 0);
    }

    #[test]
    fn an_endless_stall_holds_requests_without_overflowing() {
        let mut faults = FaultState::new(1);
        faults.stall_until(far_after(Duration::MAX));
        assert!(matches!(
            faults.admit(RequestKind::Read, true),
            Admission::Wait(_)
        ));
        assert_eq!(faults.counts.stalled, 1);
    }
}
