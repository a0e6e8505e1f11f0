//! Microbenchmark of the dispatcher's per-request path.
//!
//! One iteration is one request's whole life in steady state: the device
//! completes the oldest in-flight piece (completion in dispatch order, the clock
//! advancing by the piece's cost), a new 4 KiB request of the same class is
//! enqueued, and `dispatch` moves whatever the budget now admits. Every class is
//! permanently backlogged: each keeps four requests queued behind its in-flight
//! ones, so the fair queue's heap holds all classes. The profile is the
//! `sata-ssd` one (300 µs budget, 12.5 µs per 4 KiB read: 24 pieces in flight).
//!
//! Run with `cargo bench -p tailguard-core --bench dispatcher`. The goal is at
//! most 300 ns per request at 8 classes, growing no faster than log(classes).

use divan::counter::ItemsCount;
use divan::Bencher;
use std::collections::VecDeque;
use tailguard_core::{
    ClassId, DeviceProfile, Direction, DispatchedPiece, Dispatcher, DispatcherConfig, IoRequest,
    Nanos, RequestId,
};

fn main() {
    divan::main();
}

/// Requests each class keeps queued (not in flight) at all times.
const QUEUED_PER_CLASS: usize = 4;

/// Steps run before measuring, so every slab and queue has reached its size.
const WARM_UP_REQUESTS: usize = 10_000;

fn sata_ssd() -> DeviceProfile {
    DeviceProfile {
        read_iops: 80_000.0,
        write_iops: 60_000.0,
        read_bandwidth: 500e6,
        write_bandwidth: 450e6,
        max_request_bytes: 128 * 1024,
        latency_target_us: 300,
    }
}

/// A dispatcher with every class backlogged and a device completing in order.
struct SteadyState {
    dispatcher: Dispatcher,
    in_flight: VecDeque<DispatchedPiece>,
    out: Vec<DispatchedPiece>,
    now: Nanos,
    next_id: u64,
}

impl SteadyState {
    fn new(classes: usize) -> Self {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(sata_ssd())).unwrap();
        let ids: Vec<ClassId> = (0..classes)
            .map(|index| {
                // Varied shares, so virtual times differ and the heap works.
                let shares = 100 + (index as u32 * 37) % 900;
                dispatcher.add_class(shares).unwrap()
            })
            .collect();
        let mut state = Self {
            dispatcher,
            in_flight: VecDeque::new(),
            out: Vec::new(),
            now: 0,
            next_id: 0,
        };
        for &class in &ids {
            for _ in 0..QUEUED_PER_CLASS {
                state.enqueue(class);
            }
        }
        // Fill the budget, then refill every class to QUEUED_PER_CLASS queued.
        state.dispatch();
        let dispatched: Vec<ClassId> = state.in_flight.iter().map(|piece| piece.class).collect();
        for class in dispatched {
            state.enqueue(class);
        }
        for _ in 0..WARM_UP_REQUESTS {
            state.step();
        }
        state
    }

    fn enqueue(&mut self, class: ClassId) {
        let id = self.next_id;
        self.next_id += 1;
        self.dispatcher
            .enqueue(
                self.now,
                IoRequest {
                    id: RequestId(id),
                    class,
                    direction: Direction::Read,
                    offset_bytes: (id % 1_000_000) * 4096,
                    length_bytes: 4096,
                },
            )
            .unwrap();
    }

    fn dispatch(&mut self) {
        self.out.clear();
        self.dispatcher.dispatch(self.now, &mut self.out);
        self.in_flight.extend(self.out.drain(..));
    }

    /// One request: complete the oldest piece, enqueue a replacement in its
    /// class, dispatch what the budget admits.
    fn step(&mut self) {
        let piece = self
            .in_flight
            .pop_front()
            .expect("the budget is never empty");
        self.now += piece.cost_ns;
        let completion = self.dispatcher.complete(self.now, piece.token).unwrap();
        debug_assert!(completion.is_some(), "4 KiB requests are one piece");
        self.enqueue(piece.class);
        self.dispatch();
    }
}

/// Enqueue + dispatch + complete, per request, with 1, 8 and 64 backlogged
/// classes.
#[divan::bench(args = [1, 8, 64])]
fn enqueue_dispatch_complete(bencher: Bencher, classes: usize) {
    let mut state = SteadyState::new(classes);
    bencher
        .counter(ItemsCount::new(1usize))
        .bench_local(|| state.step());
}
