//! Property tests of the quiet-reads rule: the [`Dispatcher`] with
//! [`QuietReads`] on, on a device that serves up to four pieces at once, each
//! taking its cost, driven as an engine drives it (a dispatch after every
//! arrival and every completion).
//!
//! A write class and a read class receive requests of random sizes at random
//! times, with quiet spells (no reads) of random length between bursts of
//! reads. The properties:
//!
//! 1. **Nothing lost**: every request completes exactly once.
//! 2. **Reads find one budget**: while a read piece is queued or in flight, a
//!    write goes only if it leaves at most one budget in flight, or its class
//!    has nothing in flight (the progress rule).
//! 3. **A quiet stays bounded**: in flight never exceeds
//!    [`Dispatcher::in_flight_bound_ns`] for the other class.
//! 4. **Quiet spells are used**: a backlogged writer alone for longer than
//!    the quiet time has more than one budget in flight at some point.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use tailguard_core::{
    ClassId, DeviceProfile, Direction, DispatchedPiece, Dispatcher, DispatcherConfig, IoRequest,
    Nanos, QuietReads, RequestId, NANOS_PER_MILLISECOND,
};

/// Pieces the simulated device serves at once.
const DEVICE_PARALLELISM: usize = 4;

fn profile() -> DeviceProfile {
    DeviceProfile {
        read_iops: 80_000.0,
        write_iops: 60_000.0,
        read_bandwidth: 500e6,
        write_bandwidth: 450e6,
        max_request_bytes: 1 << 20,
        latency_target_us: 1_000,
    }
}

/// One arrival: after `gap_us` of simulated time, a request of `pages` 4 KiB
/// pages, a read or a write.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    gap_us: u64,
    pages: u64,
    read: bool,
}

fn arrivals_strategy() -> impl Strategy<Value = Vec<Arrival>> {
    // Bursts: a run of arrivals close together, then often a long gap (a
    // quiet spell longer than the quiet time, or shorter).
    let arrival =
        (0u64..400, 1u64..=256, prop::bool::weighted(0.4)).prop_map(|(gap_us, pages, read)| {
            Arrival {
                gap_us,
                pages,
                read,
            }
        });
    let burst = (prop::collection::vec(arrival, 1..40), 0u64..250_000).prop_map(
        |(mut arrivals, quiet_us)| {
            arrivals[0].gap_us += quiet_us;
            arrivals
        },
    );
    prop::collection::vec(burst, 1..8).prop_map(|bursts| bursts.concat())
}

struct Run {
    dispatcher: Dispatcher,
    classes: [ClassId; 2],
    rule: QuietReads,
    /// Pieces at the device by completion time (ties by token).
    at_device: BTreeMap<(Nanos, u64), DispatchedPiece>,
    completed: HashSet<RequestId>,
    requests: u64,
    read_pieces_outstanding: u64,
    deepest_ns: Nanos,
}

impl Run {
    fn new() -> Self {
        let rule = QuietReads::default();
        let mut config = DispatcherConfig::new(profile());
        config.quiet_reads = Some(rule);
        let mut dispatcher = Dispatcher::new(config).expect("valid profile");
        let classes = [
            dispatcher.add_class(100).unwrap(),
            dispatcher.add_class(400).unwrap(),
        ];
        Self {
            dispatcher,
            classes,
            rule,
            at_device: BTreeMap::new(),
            completed: HashSet::new(),
            requests: 0,
            read_pieces_outstanding: 0,
            deepest_ns: 0,
        }
    }

    fn arrive(&mut self, now: Nanos, arrival: Arrival) -> Result<(), TestCaseError> {
        let (class, direction) = if arrival.read {
            (self.classes[1], Direction::Read)
        } else {
            (self.classes[0], Direction::Write)
        };
        let request = IoRequest {
            id: RequestId(self.requests),
            class,
            direction,
            offset_bytes: self.requests << 30,
            length_bytes: arrival.pages * 4096,
        };
        self.requests += 1;
        let pieces = self.dispatcher.enqueue(now, request).unwrap();
        if arrival.read {
            self.read_pieces_outstanding += u64::from(pieces);
        }
        self.dispatch(now)
    }

    fn dispatch(&mut self, now: Nanos) -> Result<(), TestCaseError> {
        let limit_ns = self.dispatcher.budget().limit_ns();
        let bound_ns = self.dispatcher.in_flight_bound_ns(1);
        let mut out = Vec::new();
        while self.at_device.len() < DEVICE_PARALLELISM * 8 {
            let mut writes_in_flight = self.writes_in_flight();
            let in_flight_before_ns = self.dispatcher.budget().in_flight_ns();
            if self.dispatcher.dispatch(now, &mut out) == 0 {
                break;
            }
            let mut in_flight_ns = in_flight_before_ns;
            for piece in out.drain(..) {
                in_flight_ns += piece.cost_ns;
                let is_write = piece.class == self.classes[0];
                let by_progress_rule = is_write && writes_in_flight == 0;
                writes_in_flight += usize::from(is_write);
                if is_write && self.read_pieces_outstanding > 0 && !by_progress_rule {
                    prop_assert!(
                        in_flight_ns <= limit_ns,
                        "a write went beside an outstanding read with {in_flight_ns} ns in \
                         flight, budget {limit_ns}"
                    );
                }
                prop_assert!(
                    in_flight_ns <= bound_ns,
                    "{in_flight_ns} > bound {bound_ns}"
                );
                self.deepest_ns = self.deepest_ns.max(in_flight_ns);
                let done_at = self.device_free_at(now) + piece.cost_ns;
                self.at_device.insert((done_at, piece.token), piece);
            }
        }
        Ok(())
    }

    fn writes_in_flight(&self) -> usize {
        self.at_device
            .values()
            .filter(|piece| piece.class == self.classes[0])
            .count()
    }

    /// When the device can start one more piece: `now` while fewer than
    /// [`DEVICE_PARALLELISM`] are at it, else when the oldest of the last
    /// ones ends.
    fn device_free_at(&self, now: Nanos) -> Nanos {
        let ends: Vec<Nanos> = self.at_device.keys().map(|(end, _)| *end).collect();
        if ends.len() < DEVICE_PARALLELISM {
            now
        } else {
            ends[ends.len() - DEVICE_PARALLELISM].max(now)
        }
    }

    /// Completes every piece due by `until`, dispatching after each.
    fn complete_until(&mut self, until: Nanos) -> Result<(), TestCaseError> {
        while let Some((&(done_at, token), &piece)) = self.at_device.iter().next() {
            if done_at > until {
                break;
            }
            self.at_device.remove(&(done_at, token));
            if piece.class == self.classes[1] {
                self.read_pieces_outstanding -= 1;
            }
            if let Some(completion) = self.dispatcher.complete(done_at, piece.token).unwrap() {
                prop_assert!(
                    self.completed.insert(completion.request),
                    "{:?} completed twice",
                    completion.request
                );
            }
            self.dispatch(done_at)?;
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn reads_find_one_budget_and_nothing_is_lost(arrivals in arrivals_strategy()) {
        let mut run = Run::new();
        let mut now = 0;
        for arrival in arrivals {
            now += arrival.gap_us * 1_000;
            run.complete_until(now)?;
            run.arrive(now, arrival)?;
        }
        run.complete_until(Nanos::MAX)?;
        prop_assert!(run.dispatcher.is_idle());
        prop_assert_eq!(run.completed.len() as u64, run.requests);
    }
}

#[test]
fn a_writer_alone_past_the_quiet_time_goes_deeper_than_one_budget() {
    let mut run = Run::new();
    let limit_ns = run.dispatcher.budget().limit_ns();
    let quiet_ns = run.rule.quiet_ns;
    run.arrive(
        0,
        Arrival {
            gap_us: 0,
            pages: 1,
            read: true,
        },
    )
    .unwrap();
    run.complete_until(NANOS_PER_MILLISECOND).unwrap();
    run.deepest_ns = 0;
    let mut now = NANOS_PER_MILLISECOND;
    while now < 2 * quiet_ns {
        run.arrive(
            now,
            Arrival {
                gap_us: 0,
                pages: 256,
                read: false,
            },
        )
        .unwrap();
        now += NANOS_PER_MILLISECOND;
        run.complete_until(now).unwrap();
    }
    assert!(
        run.deepest_ns > 2 * limit_ns,
        "a lone writer kept {} ns in flight at most, budget {limit_ns}",
        run.deepest_ns
    );
}
