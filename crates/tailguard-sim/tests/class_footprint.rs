//! What a (class, device) pair costs, counted by the allocator: the bytes
//! allocated on this thread while 1,000 idle accumulators are created, and
//! the bytes active ones hold (allocated and not freed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tailguard_sim::report::ClassAccumulator;

/// The system allocator, counting the bytes each thread allocates.
struct Counting;

thread_local! {
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
    static FREED_BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counting touches only a const-initialized thread-local (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.with(|bytes| bytes.set(bytes.get() + layout.size()));
        // SAFETY: the caller's contract for `alloc` holds.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.with(|bytes| bytes.set(bytes.get() + layout.size()));
        // SAFETY: the caller's contract for `alloc_zeroed` holds.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        FREED_BYTES.with(|bytes| bytes.set(bytes.get() + layout.size()));
        // SAFETY: the caller's contract for `dealloc` holds.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn an_idle_class_allocates_a_few_bytes() {
    let names: Vec<String> = (0..1000).map(|index| format!("class{index}")).collect();
    let before = ALLOCATED_BYTES.with(Cell::get);
    let accumulators: Vec<ClassAccumulator> = names
        .iter()
        .map(|name| ClassAccumulator::new(name.clone(), "vda".into(), 1_000_000_000))
        .collect();
    let per_class = (ALLOCATED_BYTES.with(Cell::get) - before) / accumulators.len();
    assert!(per_class < 1024, "{per_class} bytes per idle class");
}

/// Bytes allocated and not freed on this thread.
fn live_bytes() -> usize {
    ALLOCATED_BYTES.with(Cell::get) - FREED_BYTES.with(Cell::get)
}

#[test]
fn an_active_class_holds_the_counts_its_range_needs_and_no_more() {
    let before = live_bytes();
    let mut accumulator = ClassAccumulator::new("a".into(), "vda".into(), 1_000_000_000);
    // Latencies from 1 µs doubling up to 400 ms, a thousand of each: more
    // than their counts would take as latencies, so they are counted, and
    // the histogram resizes at each doubling.
    let mut latency_ns = 1_000;
    while latency_ns <= 400_000_000 {
        for _ in 0..1000 {
            accumulator.on_submit(0);
            accumulator.on_complete(latency_ns, 0, 0, 4096);
        }
        latency_ns *= 2;
    }
    let held = live_bytes() - before;
    // 3 significant digits up to 2^29 ns: 20 buckets of 1,024 counts of 8
    // bytes, 160 KiB; a few hundred bytes more for the names and timeline.
    assert!(
        held <= (160 << 10) + 1024,
        "{held} bytes for one active class"
    );
    drop(accumulator);
}

#[test]
fn a_thousand_classes_of_a_few_hundred_requests_hold_a_few_kilobytes_each() {
    let before = live_bytes();
    let mut state: u64 = 7;
    let accumulators: Vec<ClassAccumulator> = (0..1000)
        .map(|index| {
            let mut accumulator =
                ClassAccumulator::new(format!("class{index}"), "vda".into(), 1_000_000_000);
            // 200 requests over one second, with latencies from 50 µs to
            // about 26 ms (what 1,000 jobs sharing one disk see).
            for request in 0..200u64 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let latency_ns = (50_000 << ((state >> 33) % 10)) + (state >> 40) % 50_000;
                let intended_ns = request * 5_000_000;
                accumulator.on_submit(intended_ns);
                accumulator.on_complete(intended_ns + latency_ns, intended_ns, intended_ns, 4096);
            }
            accumulator
        })
        .collect();
    let per_class = (live_bytes() - before) / accumulators.len();
    // The 200 latencies themselves (room for 256, 2 KiB), the names and the
    // per-second and per-window counts; counts for 26 ms at 3 significant
    // digits would be 128 KiB.
    assert!(per_class <= 3 << 10, "{per_class} bytes per active class");
    drop(accumulators);
}
