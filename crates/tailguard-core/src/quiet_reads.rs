//! Writes stream while no one reads: the quiet-reads rule.
//!
//! The budget keeps the work in flight ahead of a read near the latency
//! target, and it costs writes their throughput to do so: a writer alone is
//! held to one budget of work in flight although no read is there to
//! protect. While no read is queued or in flight, and none was for
//! [`QuietReads::quiet_ns`], the dispatcher admits
//! [`QuietReads::limit_factor`] budgets of work instead of one, and writes
//! queued then are split to the size that larger budget derives (fewer,
//! larger pieces, which a device streams at less cost per byte).
//!
//! The first read queued ends the quiet at once: from then on the dispatcher
//! admits one budget again, nothing new goes to the device until the work
//! in flight has drained below it, and the large pieces still queued are cut
//! to the usual split size as they reach the head of the queue. That read itself goes at once by the
//! progress rule (its class has nothing in flight, see [`crate::budget`]), so
//! the first reads after a quiet spell wait behind at most `limit_factor`
//! budgets of writes, and the reads after them find what the budget promises.
//! Reads that come and go thus let a writer stream between them, which no
//! static queue depth can: a fixed depth is the same whether reads come or
//! not, so it must be chosen for when they do.
//!
//! The idea is blk-wbt's, which lets writeback deeper when no read was seen
//! for about a tenth of a second. The quiet must last longer than the gaps
//! between the reads of a latency-sensitive reader, or each of its reads
//! would find the deeper queue: [`QuietReads::default`] waits 100 ms.

use crate::request::{Nanos, NANOS_PER_MILLISECOND};

/// The quiet-reads rule's tunables; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuietReads {
    /// How long no read must have been queued or in flight before
    /// writes may use the larger budget: shorter lets writes stream sooner
    /// after a burst of reads ends, and risks deepening the queue in the
    /// gaps of a slow but steady reader, whose every read would then wait
    /// behind it. Default 100 ms.
    pub quiet_ns: Nanos,
    /// How many budgets of work may be in flight during a quiet: more lets a
    /// lone writer stream closer to the device's full speed, and the first
    /// read after a quiet waits behind up to that many budgets of writes.
    /// Default 4; 1 turns the rule off.
    pub limit_factor: u64,
}

impl Default for QuietReads {
    fn default() -> Self {
        Self {
            quiet_ns: 100 * NANOS_PER_MILLISECOND,
            limit_factor: 4,
        }
    }
}

/// What the dispatcher knows of reads for the rule: the read requests queued
/// or in flight (requests, not pieces: a queued piece may be cut in two when
/// the split size shrinks), and when a read was last queued or served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadWatch {
    rule: Option<QuietReads>,
    read_requests_outstanding: u64,
    /// `None` until the first read: a device starts quiet.
    last_read_ns: Option<Nanos>,
}

impl ReadWatch {
    /// A watch applying `rule` (`None`: never quiet).
    pub(crate) fn new(rule: Option<QuietReads>) -> Self {
        Self {
            rule,
            ..Self::default()
        }
    }

    /// A read request was queued at `now`.
    pub(crate) fn queued(&mut self, now: Nanos) {
        self.read_requests_outstanding += 1;
        self.last_read_ns = Some(now);
    }

    /// A piece of a read request completed at `now`; `last` when it was the
    /// request's last.
    pub(crate) fn served(&mut self, now: Nanos, last: bool) {
        if last {
            self.forget_one();
        }
        self.last_read_ns = Some(now);
    }

    /// A queued read request was dropped without being served (a cancelling
    /// shutdown): it no longer keeps the device from a quiet, and the time of
    /// the last read stays that of the last one seen.
    pub(crate) fn cancelled(&mut self) {
        self.forget_one();
    }

    fn forget_one(&mut self) {
        self.read_requests_outstanding = self
            .read_requests_outstanding
            .checked_sub(1)
            .expect("a read request ended that was never queued");
    }

    /// How many budgets of work the dispatcher admits during a quiet: the
    /// rule's factor, or 1 without the rule.
    pub(crate) fn quiet_limit_factor(&self) -> u64 {
        self.rule.map_or(1, |rule| rule.limit_factor.max(1))
    }

    /// How many budgets of work the dispatcher admits at `now`: the rule's
    /// factor during a quiet, else 1.
    pub(crate) fn limit_factor(&self, now: Nanos) -> u64 {
        let Some(rule) = self.rule else {
            return 1;
        };
        let quiet = self.read_requests_outstanding == 0
            && self
                .last_read_ns
                .is_none_or(|last| now.saturating_sub(last) >= rule.quiet_ns);
        if quiet {
            self.quiet_limit_factor()
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET_NS: Nanos = 100 * NANOS_PER_MILLISECOND;

    #[test]
    fn quiet_until_a_read_then_again_after_the_quiet_time() {
        let mut watch = ReadWatch::new(Some(QuietReads::default()));
        assert_eq!(watch.limit_factor(0), 4, "a device starts quiet");
        watch.queued(10);
        watch.queued(10);
        assert_eq!(watch.limit_factor(10), 1);
        watch.served(20, false);
        watch.served(20, true);
        assert_eq!(
            watch.limit_factor(20 + 10 * QUIET_NS),
            1,
            "a read request is still outstanding"
        );
        watch.served(30, true);
        assert_eq!(watch.limit_factor(30 + QUIET_NS - 1), 1, "not quiet yet");
        assert_eq!(watch.limit_factor(30 + QUIET_NS), 4);
        watch.queued(40);
        watch.cancelled();
        assert_eq!(watch.limit_factor(40 + QUIET_NS), 4);
    }

    #[test]
    fn no_rule_or_a_factor_of_one_is_never_quiet() {
        let never = ReadWatch::new(None);
        assert_eq!(never.limit_factor(u64::MAX), 1);
        let off = ReadWatch::new(Some(QuietReads {
            quiet_ns: 0,
            limit_factor: 1,
        }));
        assert_eq!(off.limit_factor(u64::MAX), 1);
    }

    #[test]
    #[should_panic(expected = "never queued")]
    fn finishing_more_reads_than_were_queued_is_a_bug() {
        let mut watch = ReadWatch::new(Some(QuietReads::default()));
        watch.served(0, true);
    }
}
