//! Property tests of per-class rate limits: the [`Dispatcher`] on a serial
//! server (one piece at a time, each taking its cost), driven the way an engine
//! drives it: it calls `dispatch` at every completion and, when nothing is in
//! flight, sleeps until [`Dispatcher::next_eligible_at`].
//!
//! A capped class and (optionally) an uncapped one are kept backlogged with
//! requests of random sizes for two simulated seconds, under a random cap in
//! bytes/s, in operations/s or both, and a random burst. The properties:
//!
//! 1. **No stall, no busy loop**: whenever work is queued and nothing is in
//!    flight, `next_eligible_at` names a time in the future, and a dispatch
//!    then moves at least one piece.
//! 2. **Conformance**: at every dispatch the capped class's bytes (operations)
//!    so far are at most `rate × t + burst + one piece` (one operation).
//! 3. **The cap is reached**: over the run, the capped class moves at least
//!    95% of `rate × duration` (the caps stay well below the device's speed).
//! 4. **The others take the rest**: with an uncapped class beside it, the
//!    server is busy at least 95% of the time.
//!
//! A fixed case checks that a capped class's queue does not read as a
//! binding budget to the adaptive controller.

use proptest::prelude::*;
use std::collections::VecDeque;
use tailguard_core::{
    AdaptiveBudget, ClassId, DeviceProfile, Direction, DispatchedPiece, Dispatcher,
    DispatcherConfig, FixedBudget, IoRequest, LatencyController, Nanos, RateLimit, RequestId,
    NANOS_PER_SECOND,
};

const DURATION_NS: Nanos = 2 * NANOS_PER_SECOND;

fn profile() -> DeviceProfile {
    DeviceProfile {
        read_iops: 80_000.0,
        write_iops: 60_000.0,
        read_bandwidth: 500e6,
        write_bandwidth: 450e6,
        max_request_bytes: 128 * 1024,
        latency_target_us: 300,
    }
}

#[derive(Clone, Debug)]
struct Case {
    limit: RateLimit,
    /// Request sizes of the capped class, cycled.
    sizes: Vec<u64>,
    direction: Direction,
    with_other: bool,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let bytes = prop::option::of(1_000_000u64..40_000_000);
    let iops = prop::option::of(50u64..2_000);
    (
        bytes,
        iops,
        1_000_000u64..50_000_000,
        prop::collection::vec((1u64..=64).prop_map(|k| k * 4096), 1..6),
        prop::bool::ANY,
        prop::bool::ANY,
    )
        .prop_filter(
            "something capped, well below the device's speed",
            |(bytes, iops, _, sizes, ..)| {
                let mean_size = sizes.iter().sum::<u64>() / sizes.len() as u64;
                (bytes.is_some() || iops.is_some())
                    && iops.is_none_or(|iops| iops * mean_size <= 100_000_000)
            },
        )
        .prop_map(|(bytes, iops, burst_ns, sizes, write, with_other)| Case {
            limit: RateLimit {
                bytes_per_s: bytes,
                iops,
                burst_ns,
            },
            sizes,
            direction: if write {
                Direction::Write
            } else {
                Direction::Read
            },
            with_other,
        })
}

/// What the run saw.
struct Outcome {
    capped_bytes: u64,
    capped_requests: u64,
    busy_ns: Nanos,
}

struct Server<C: LatencyController = FixedBudget> {
    dispatcher: Dispatcher<C>,
    capped: ClassId,
    other: Option<ClassId>,
    case: Case,
    next_id: u64,
    size_index: usize,
    /// Pieces at the server with their completion times, in order.
    in_flight: VecDeque<(Nanos, DispatchedPiece)>,
    free_at: Nanos,
    busy_ns: Nanos,
    capped_bytes: u64,
    capped_requests: u64,
    largest_piece: u64,
    /// A light reader: its class, the time between its 4 KiB reads, and
    /// when the next one arrives.
    reader: Option<(ClassId, Nanos, Nanos)>,
}

impl Server {
    fn new(case: Case) -> Self {
        Server::with_dispatcher(
            case,
            Dispatcher::new(DispatcherConfig::new(profile())).unwrap(),
        )
    }
}

impl<C: LatencyController> Server<C> {
    fn with_dispatcher(case: Case, mut dispatcher: Dispatcher<C>) -> Self {
        let capped = dispatcher.add_class(100).unwrap();
        dispatcher
            .set_rate_limit(0, capped, Some(case.limit))
            .unwrap();
        let other = case.with_other.then(|| dispatcher.add_class(100).unwrap());
        let mut server = Self {
            dispatcher,
            capped,
            other,
            case,
            next_id: 0,
            size_index: 0,
            in_flight: VecDeque::new(),
            free_at: 0,
            busy_ns: 0,
            capped_bytes: 0,
            capped_requests: 0,
            largest_piece: 0,
            reader: None,
        };
        for _ in 0..8 {
            server.enqueue_capped(0);
            server.enqueue_other(0);
        }
        server
    }

    fn enqueue_capped(&mut self, now: Nanos) {
        let length_bytes = self.case.sizes[self.size_index % self.case.sizes.len()];
        self.size_index += 1;
        self.enqueue(now, self.capped, self.case.direction, length_bytes);
    }

    /// Adds a class that reads 4 KiB every `period_ns`, from time 0.
    fn with_reader(mut self, period_ns: Nanos) -> Self {
        let class = self.dispatcher.add_class(100).unwrap();
        self.reader = Some((class, period_ns, 0));
        self
    }

    /// Enqueues the light reader's reads due by `now`; returns when the
    /// next one is due.
    fn arrive_reads(&mut self, now: Nanos) -> Option<Nanos> {
        let (class, period_ns, mut next_at) = self.reader?;
        while next_at <= now {
            self.enqueue(now, class, Direction::Read, 4096);
            next_at += period_ns;
        }
        self.reader = Some((class, period_ns, next_at));
        Some(next_at)
    }

    fn enqueue_other(&mut self, now: Nanos) {
        if let Some(other) = self.other {
            self.enqueue(now, other, Direction::Write, 65_536);
        }
    }

    fn enqueue(&mut self, now: Nanos, class: ClassId, direction: Direction, length_bytes: u64) {
        self.next_id += 1;
        self.dispatcher
            .enqueue(
                now,
                IoRequest {
                    id: RequestId(self.next_id),
                    class,
                    direction,
                    offset_bytes: self.next_id << 24,
                    length_bytes,
                },
            )
            .unwrap();
    }

    fn dispatch(&mut self, now: Nanos) -> usize {
        let mut out = Vec::new();
        let moved = self.dispatcher.dispatch(now, &mut out);
        for piece in out {
            if piece.class == self.capped {
                self.capped_bytes += piece.length_bytes;
                self.largest_piece = self.largest_piece.max(piece.length_bytes);
                if piece.offset_bytes == piece.request.0 << 24 {
                    self.capped_requests += 1;
                }
            }
            let start = self.free_at.max(now);
            self.free_at = start + piece.cost_ns;
            self.busy_ns += piece.cost_ns;
            self.in_flight.push_back((self.free_at, piece));
        }
        self.check_conformance(now);
        moved
    }

    fn check_conformance(&self, now: Nanos) {
        let limit = self.case.limit;
        if let Some(rate) = limit.bytes_per_s {
            let allowed = u128::from(rate) * u128::from(now + limit.burst_ns)
                / u128::from(NANOS_PER_SECOND)
                + 1
                + u128::from(self.largest_piece);
            assert!(
                u128::from(self.capped_bytes) <= allowed,
                "{} bytes by {now} ns, allowed {allowed}",
                self.capped_bytes
            );
        }
        if let Some(rate) = limit.iops {
            let allowed = u128::from(rate) * u128::from(now + limit.burst_ns)
                / u128::from(NANOS_PER_SECOND)
                + 2;
            assert!(
                u128::from(self.capped_requests) <= allowed,
                "{} requests by {now} ns, allowed {allowed}",
                self.capped_requests
            );
        }
    }

    fn run(self) -> Outcome {
        self.run_to_end().0
    }

    /// Runs [`DURATION_NS`]; returns the outcome and the dispatcher.
    fn run_to_end(mut self) -> (Outcome, Dispatcher<C>) {
        let mut now = 0;
        let mut next_read = self.arrive_reads(now);
        self.dispatch(now);
        while now < DURATION_NS {
            let next_completion = self.in_flight.front().map(|(at, _)| *at);
            let next_eligible = [self.dispatcher.next_eligible_at(), next_read]
                .into_iter()
                .flatten()
                .min();
            let next = match (next_completion, next_eligible) {
                (Some(completion), Some(eligible)) => completion.min(eligible),
                (Some(completion), None) => completion,
                (None, Some(eligible)) => {
                    assert!(
                        eligible > now,
                        "eligible at {eligible}, now {now}: a busy loop"
                    );
                    eligible
                }
                (None, None) => panic!("work queued, nothing in flight, no wake-up: a stall"),
            };
            now = next.max(now);
            next_read = self.arrive_reads(now);
            let mut completed = false;
            while self.in_flight.front().is_some_and(|(at, _)| *at <= now) {
                let (_, piece) = self.in_flight.pop_front().unwrap();
                let done = self.dispatcher.complete(now, piece.token).unwrap();
                if let Some(completion) = done {
                    if completion.class == self.capped {
                        self.enqueue_capped(now);
                    } else if Some(completion.class) == self.other {
                        self.enqueue_other(now);
                    }
                }
                completed = true;
            }
            let moved = self.dispatch(now);
            if !completed && self.in_flight.is_empty() {
                assert!(moved > 0, "woken at {now} for a class that could not go");
            }
        }
        let outcome = Outcome {
            capped_bytes: self.capped_bytes,
            capped_requests: self.capped_requests,
            busy_ns: self.busy_ns.min(DURATION_NS),
        };
        (outcome, self.dispatcher)
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_capped_class_moves_at_its_cap_and_the_others_take_the_rest(case in case_strategy()) {
        let limit = case.limit;
        let sizes = case.sizes.clone();
        let with_other = case.with_other;
        let outcome = Server::new(case).run();
        let seconds = DURATION_NS as f64 / NANOS_PER_SECOND as f64;
        // The binding cap: whichever of bytes and operations allows less.
        let mean_size = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        let by_bytes = limit.bytes_per_s.map(|rate| rate as f64);
        let by_iops = limit.iops.map(|iops| iops as f64 * mean_size);
        let expected_bytes = [by_bytes, by_iops]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min)
            * seconds;
        let moved = outcome.capped_bytes as f64;
        // At most the cap plus a burst and a piece (checked at every step);
        // at least 95% of it, less one request of slack for cycling sizes.
        prop_assert!(
            moved >= 0.95 * expected_bytes - 131_072.0 * 2.0,
            "moved {moved} bytes, cap {expected_bytes} over the run ({} requests)",
            outcome.capped_requests
        );
        if with_other {
            prop_assert!(
                outcome.busy_ns as f64 >= 0.95 * DURATION_NS as f64,
                "server busy {} ns of {DURATION_NS}",
                outcome.busy_ns
            );
        }
    }
}

/// A class held back by its rate limit waits for its tokens, not for the
/// budget: the adaptive controller does not read its queue as a budget that
/// binds, so a capped writer (1 MB/s of 128 KiB writes, a deep queue)
/// beside a light reader (4 KiB a millisecond) does not walk the budget up
/// to its ceiling, probe after probe.
#[test]
fn a_capped_class_queue_does_not_grow_the_adaptive_budget() {
    let case = Case {
        limit: RateLimit::bytes_per_s(1_000_000),
        sizes: vec![128 * 1024],
        direction: Direction::Write,
        with_other: false,
    };
    let controller = AdaptiveBudget::for_profile(&profile());
    let config = DispatcherConfig::new(profile());
    let dispatcher = Dispatcher::with_controller(config, controller).unwrap();
    let start_ns = dispatcher.stats().budget_ns;
    let (outcome, dispatcher) = Server::with_dispatcher(case, dispatcher)
        .with_reader(1_000_000)
        .run_to_end();
    let stats = dispatcher.stats();
    eprintln!(
        "DEBUG {:?} start {start_ns} bytes {}",
        stats, outcome.capped_bytes
    );
    assert!(outcome.capped_bytes > 0, "the capped class moved");
    assert!(
        stats.budget_ns <= 2 * start_ns,
        "budget {} ns from {start_ns} ns after {} grows",
        stats.budget_ns,
        stats.controller.grows
    );
}

#[test]
fn lifting_the_limit_releases_a_held_class_at_once() {
    let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
    let class = dispatcher.add_class(100).unwrap();
    dispatcher
        .set_rate_limit(0, class, Some(RateLimit::iops(10).with_burst_ns(1)))
        .unwrap();
    for id in 0..4 {
        dispatcher
            .enqueue(
                0,
                IoRequest {
                    id: RequestId(id),
                    class,
                    direction: Direction::Read,
                    offset_bytes: id * 4096,
                    length_bytes: 4096,
                },
            )
            .unwrap();
    }
    let mut out = Vec::new();
    // A burst of one operation, and one more into debt.
    assert_eq!(dispatcher.dispatch(0, &mut out), 2);
    assert!(dispatcher.class_stats(class).unwrap().rate_limited);
    assert_eq!(dispatcher.next_eligible_at(), Some(NANOS_PER_SECOND / 10));
    assert_eq!(dispatcher.dispatch(1, &mut out), 0, "still in debt");
    dispatcher.set_rate_limit(1, class, None).unwrap();
    assert_eq!(dispatcher.next_eligible_at(), None);
    assert_eq!(dispatcher.dispatch(1, &mut out), 2, "free again");
}
