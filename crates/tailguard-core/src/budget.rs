//! The per-device in-flight budget, and the hook for latency controllers.
//!
//! The budget is the most device time, in cost units (nanoseconds at the profile's
//! capacity), that may be in flight at the device at once. Because cost is device
//! time, the work in flight is the queueing delay a newly dispatched request finds
//! at the device: the budget is the latency target expressed as work.
//!
//! ## Deriving it from the profile
//!
//! ```text
//! budget = max( latency_target, MIN_PIPELINE_REQUESTS × cost(largest 4 KiB request) )
//! ```
//!
//! The first term keeps the device's queue short enough for the target. The second
//! keeps it deep enough for throughput: a device must hold a few commands to overlap
//! one command's processing with another's transfer, and a rotating disk needs the
//! next command queued before the current one ends, or it loses a revolution. A
//! fixed sub-millisecond goal would give a disk about one request in flight; here
//! a disk whose 4 KiB cost is 5 ms gets at least 20 ms.
//!
//! ## The split size follows the budget
//!
//! A device streams only if the next piece is already queued when the current one
//! ends (double buffering): a write waiting for cache space, or a disk seeking,
//! overlaps the transfer of the piece before it. So the budget must hold at least
//! [`PIPELINE_PIECES`] pieces. Rather than deepen the budget for large requests,
//! which would let them push reads' latency past the target, the dispatcher
//! splits large requests into pieces small enough that two fit: per direction,
//! the largest power-of-two multiple of 4 KiB, at most `max_request_bytes`, whose
//! cost is at most `budget / PIPELINE_PIECES` ([`split_bytes`]); of the device's
//! direct-I/O offset alignment instead where that is larger
//! ([`split_bytes_aligned`]), so no piece starts off it. A tight latency
//! target thus means finer interleaving, not lower throughput: a write burst
//! streams at full speed while a read waits behind at most about one piece.
//!
//! Double buffering matters where the device seeks (a disk loses a revolution
//! between two writes otherwise), and on most devices without seeks two
//! half-budget pieces stream more writes for the same reads than one whole
//! one. A device that serves its commands through a file (a loop device)
//! differs: each write in flight delays the reads queued behind it by its
//! command's own trip through the file system below, more than by its bytes,
//! so fewer and larger pieces serve the reads better at the same rate of
//! writes. So the number of pieces the split size lets fit is the
//! dispatcher's to choose (`DispatcherConfig::pipeline_pieces`,
//! [`split_bytes_for`]); the fixed budget takes one piece per budget on a
//! device that serves through a file and does not seek
//! (`ControllerChoice::pipeline_pieces`).
//!
//! ## Admission
//!
//! A piece may be dispatched when `in_flight + cost ≤ limit`, or when its class
//! has nothing in flight at all (the *progress rule*, applied by the dispatcher).
//! The second case lets a piece larger than the whole budget make progress, and
//! it keeps one class's stalled work from blocking every other class: when a
//! device stalls the writes it holds (an SSD collecting garbage, a full write
//! cache), the budget stays full of work that does not move, and without the rule
//! a read would wait in the fair queue for the whole stall although the device
//! could serve it at once. The read still finds at most `limit` of work ahead of
//! it at the device, which is what the budget promises. Each class has at most
//! one piece in flight beyond the limit, so in-flight cost never exceeds
//! `limit + (classes with work in flight) × largest piece cost`.
//!
//! A dispatcher may also spare a *latency class* (less than the budget of
//! its own work queued and in flight) its own work: its piece then needs
//! `others' in_flight + cost ≤ limit` only
//! (`DispatcherConfig::spare_latency_classes`, which the fixed budget
//! takes). The budget bounds the work that other classes put ahead of its
//! reads, which is the promise; counting the class's own reads against it
//! only made its next read wait in the fair queue for a write to finish
//! while its earlier reads were at the device. In-flight cost then stays
//! under two limits plus one largest piece per class in flight.
//!
//! ## Resizing
//!
//! A [`crate::controller::LatencyController`] sees every completion (its
//! device time and queue wait) and may return a new limit;
//! [`crate::controller::FixedBudget`] never does, and
//! [`crate::controller::AdaptiveBudget`] follows the device (see its module).
//! This module knows nothing of controllers: it holds the budget they resize.
//! Shrinking below
//! the current in-flight cost is allowed: dispatch simply pauses until completions
//! bring in-flight cost under the new limit.

use crate::request::Nanos;

/// Requests of the most expensive 4 KiB kind that the budget always admits at
/// once, so the device can pipeline commands (and a disk never idles a revolution
/// between queued sequential writes).
pub const MIN_PIPELINE_REQUESTS: u64 = 4;

/// Pieces of the split size that the budget holds at once, so one is queued at
/// the device while another is served.
pub const PIPELINE_PIECES: u64 = 2;

/// The smallest split size: one 4 KiB page.
pub const SPLIT_BYTES_MIN: u64 = 4096;

/// The split size for one direction: the largest power-of-two multiple of 4 KiB,
/// at most `max_request_bytes` (rounded down to 4 KiB), whose cost fits the
/// budget [`PIPELINE_PIECES`] times. Never below [`SPLIT_BYTES_MIN`].
pub fn split_bytes(limit_ns: Nanos, max_request_bytes: u64, cost_ns: impl Fn(u64) -> Nanos) -> u64 {
    split_bytes_for(limit_ns, PIPELINE_PIECES, max_request_bytes, cost_ns)
}

/// [`split_bytes`] with `pieces` (at least 1) in place of [`PIPELINE_PIECES`].
pub fn split_bytes_for(
    limit_ns: Nanos,
    pieces: u64,
    max_request_bytes: u64,
    cost_ns: impl Fn(u64) -> Nanos,
) -> u64 {
    split_bytes_aligned(
        limit_ns,
        pieces,
        max_request_bytes,
        SPLIT_BYTES_MIN,
        cost_ns,
    )
}

/// [`split_bytes_for`] in multiples of `alignment_bytes` and of no less than
/// [`SPLIT_BYTES_MIN`] (the smallest multiple of the alignment that is at
/// least 4 KiB) in place of 4 KiB: never below it, so that a piece of a
/// request that starts on the alignment starts on it too. Where the
/// alignment exceeds `max_request_bytes`, pieces are of the alignment.
pub fn split_bytes_aligned(
    limit_ns: Nanos,
    pieces: u64,
    max_request_bytes: u64,
    alignment_bytes: u64,
    cost_ns: impl Fn(u64) -> Nanos,
) -> u64 {
    let pieces = pieces.max(1);
    let alignment = alignment_bytes.max(1);
    let unit = alignment.saturating_mul(SPLIT_BYTES_MIN.div_ceil(alignment));
    let mut bytes = (max_request_bytes / unit * unit).max(unit);
    while bytes > unit && pieces.saturating_mul(cost_ns(bytes)) > limit_ns {
        bytes = (bytes / 2 / unit * unit).max(unit);
    }
    bytes
}

/// The in-flight budget of one device; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    limit_ns: Nanos,
    in_flight_ns: Nanos,
}

impl Budget {
    /// A budget of `limit_ns` with nothing in flight. The limit is at least 1.
    pub fn new(limit_ns: Nanos) -> Self {
        Self {
            limit_ns: limit_ns.max(1),
            in_flight_ns: 0,
        }
    }

    /// The limit derived from a latency target and the cost of the most
    /// expensive 4 KiB request; see the module docs.
    pub fn derived_limit_ns(latency_target_ns: Nanos, small_request_cost_ns: Nanos) -> Nanos {
        latency_target_ns.max(MIN_PIPELINE_REQUESTS * small_request_cost_ns)
    }

    /// Whether a piece of `cost_ns` may be dispatched now.
    pub fn admits(&self, cost_ns: Nanos) -> bool {
        self.admits_scaled(cost_ns, 1)
    }

    /// Whether a piece of `cost_ns` may be dispatched now with `limit_factor`
    /// times the limit (the quiet-reads rule, [`crate::quiet_reads`]).
    pub fn admits_scaled(&self, cost_ns: Nanos, limit_factor: u64) -> bool {
        self.in_flight_ns == 0
            || self.in_flight_ns + cost_ns <= self.limit_ns.saturating_mul(limit_factor)
    }

    /// Records a dispatched piece: one [`Budget::admits`], or one that goes
    /// by the progress rule (see the module docs).
    pub fn take(&mut self, cost_ns: Nanos) {
        self.in_flight_ns += cost_ns;
    }

    /// Records a completed piece.
    pub fn release(&mut self, cost_ns: Nanos) {
        assert!(
            cost_ns <= self.in_flight_ns,
            "release of {cost_ns} with {} in flight",
            self.in_flight_ns
        );
        self.in_flight_ns -= cost_ns;
    }

    /// Sets a new limit (at least 1).
    pub fn resize(&mut self, limit_ns: Nanos) {
        self.limit_ns = limit_ns.max(1);
    }

    /// The current limit.
    pub fn limit_ns(&self) -> Nanos {
        self.limit_ns
    }

    /// Cost now in flight.
    pub fn in_flight_ns(&self) -> Nanos {
        self.in_flight_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_under_the_limit_and_a_lone_oversize_piece() {
        let mut budget = Budget::new(100);
        assert!(budget.admits(500), "a lone oversize piece must go");
        budget.take(60);
        assert!(budget.admits(40));
        assert!(!budget.admits(41));
        budget.take(40);
        budget.release(100);
        assert_eq!(budget.in_flight_ns(), 0);
    }

    #[test]
    fn a_scaled_limit_admits_that_many_budgets() {
        let mut budget = Budget::new(100);
        budget.take(100);
        assert!(!budget.admits(1));
        assert!(budget.admits_scaled(300, 4));
        assert!(!budget.admits_scaled(301, 4));
        assert!(!budget.admits_scaled(1, 1));
    }

    #[test]
    fn shrinking_below_in_flight_pauses_dispatch() {
        let mut budget = Budget::new(100);
        budget.take(90);
        budget.resize(50);
        assert!(!budget.admits(1));
        budget.release(90);
        assert!(budget.admits(50));
    }

    #[test]
    fn an_aligned_split_is_a_multiple_of_the_alignment_and_never_below_it() {
        // 1 byte per ns: a 40 µs budget holds two pieces of 20 KB at most.
        let cost = |bytes: u64| bytes;
        assert_eq!(split_bytes_for(40_000, 2, 1 << 20, cost), 16_384);
        assert_eq!(
            split_bytes_aligned(40_000, 2, 1 << 20, 16_384, cost),
            16_384
        );
        assert_eq!(
            split_bytes_aligned(20_000, 2, 1 << 20, 16_384, cost),
            16_384
        );
        assert_eq!(
            split_bytes_aligned(20_000, 2, 1 << 20, 65_536, cost),
            65_536
        );
        assert_eq!(
            split_bytes_aligned(300_000, 2, 96 << 10, 32_768, cost),
            98_304
        );
        assert_eq!(
            split_bytes_aligned(100_000, 2, 96 << 10, 32_768, cost),
            32_768
        );
        assert_eq!(split_bytes_aligned(20_000, 2, 1 << 20, 512, cost), 8_192);
        // Not a power of two: multiples of it, the first at least 4 KiB.
        assert_eq!(split_bytes_aligned(20_000, 2, 1 << 20, 3_072, cost), 6_144);
    }

    #[test]
    fn a_split_for_very_many_pieces_is_the_smallest_not_an_overflow() {
        let bytes = split_bytes_for(1_000_000, u64::MAX, 131_072, |bytes| bytes);
        assert_eq!(bytes, SPLIT_BYTES_MIN);
    }

    #[test]
    fn split_size_lets_two_pieces_fit_the_budget() {
        // 450 MB/s: 64 KiB costs 145.6 µs, 128 KiB 291 µs; a 300 µs budget holds
        // two 64 KiB pieces but not two 128 KiB ones.
        let cost = |bytes: u64| bytes * 1_000_000_000 / 450_000_000;
        assert_eq!(split_bytes(300_000, 131_072, cost), 65_536);
        assert_eq!(
            split_bytes(600_000, 131_072, cost),
            131_072,
            "capped by max_request_bytes"
        );
        assert_eq!(
            split_bytes(1_000, 131_072, cost),
            4096,
            "never below one page"
        );
        assert_eq!(
            split_bytes(10_000_000, 100_000, cost),
            98_304,
            "rounded to pages"
        );
    }

    #[test]
    fn one_piece_per_budget_splits_twice_as_large() {
        let cost = |bytes: u64| bytes * 1_000_000_000 / 450_000_000;
        assert_eq!(split_bytes_for(300_000, 1, 1 << 20, cost), 131_072);
        assert_eq!(split_bytes_for(300_000, 2, 1 << 20, cost), 65_536);
        assert_eq!(
            split_bytes_for(300_000, 0, 1 << 20, cost),
            131_072,
            "at least one"
        );
    }

    #[test]
    fn derived_limit_keeps_a_disk_pipelined() {
        // A disk: 5 ms per 4 KiB request, a 1 ms target: four requests still fit.
        assert_eq!(Budget::derived_limit_ns(1_000_000, 5_000_000), 20_000_000);
        // An SSD: 16.7 µs per request, a 300 µs target: the target rules.
        assert_eq!(Budget::derived_limit_ns(300_000, 16_667), 300_000);
    }
}
