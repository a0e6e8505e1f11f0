//! The budget policy is selectable: `Fixed` never resizes, `Adaptive` runs the
//! core's latency controller on real completions, and every budget change it makes
//! is logged at target `tailguard::controller` (info level), every decision at
//! debug level.
//!
//! A test binary of its own: it installs a process-wide `tracing` subscriber
//! (the engine thread logs, so a thread-local one would miss its events).

mod common;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tailguard::engine::{ControllerChoice, CONTROLLER_TARGET};
use tailguard::{AlignedBuffer, OpenOptions, Scheduler};

const BLOCK: usize = 4096;
const BLOCKS: u64 = 256;

/// Counts events at the controller's target, budget changes (info) and
/// decisions (debug) apart; ignores everything else.
struct CountControllerEvents {
    changes: Arc<AtomicU64>,
    decisions: Arc<AtomicU64>,
}

impl tracing::Subscriber for CountControllerEvents {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == CONTROLLER_TARGET
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let metadata = event.metadata();
        if metadata.target() != CONTROLLER_TARGET {
            return;
        }
        let counter = match *metadata.level() {
            tracing::Level::INFO => &self.changes,
            tracing::Level::DEBUG => &self.decisions,
            level => panic!("controller event at {level}: {event:?}"),
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Writes a numbered pattern, then reads it back in batches of 32 until the
/// device's controller has judged at least `windows` windows (or a generous
/// cap of batches, so a stalled controller fails instead of hanging), checking
/// every block. Returns the device's stats.
fn run(
    choice: ControllerChoice,
    name: &str,
    windows: u64,
) -> io::Result<tailguard::stats::DeviceStats> {
    // A profile far slower than any disk (2000 IOPS, 2 ms target): its budget
    // admits a handful of reads, so batches of 32 queue behind it, and the real
    // device completes faster than predicted: the adaptive controller has
    // something to act on.
    let profile = tailguard::Profile {
        read_iops: 2_000.0,
        write_iops: 2_000.0,
        read_bandwidth: 1e9,
        write_bandwidth: 1e9,
        max_request_bytes: 1 << 20,
        latency_target_us: 2_000,
    };
    let scheduler = Scheduler::builder()
        .controller(choice)
        .default_profile(profile)
        .build()?;
    let class = scheduler.add_class("c", 100)?;
    let path = common::scratch("engine-tests", name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&scheduler, &path)?;
    let alignment = (file.alignment().memory_bytes as usize).max(BLOCK);
    for block in 0..BLOCKS {
        let mut buffer = AlignedBuffer::new(BLOCK, alignment).unwrap();
        buffer.fill(block as u8);
        let (result, _) = file.write_at(&class, buffer, block * BLOCK as u64).wait();
        assert_eq!(result?, BLOCK);
    }
    let device = file.device().name.clone();
    let mut stats = None;
    for round in 0..20_000u64 {
        let reads: Vec<_> = (0..32u64)
            .map(|i| {
                let block = (round * 32 + i) % BLOCKS;
                let buffer = AlignedBuffer::new(BLOCK, alignment).unwrap();
                (block, file.read_at(&class, buffer, block * BLOCK as u64))
            })
            .collect();
        for (block, read) in reads {
            let (result, buffer) = read.wait();
            assert_eq!(result?, BLOCK);
            assert!(
                buffer.iter().all(|&byte| byte == block as u8),
                "block {block}"
            );
        }
        let device_stats = scheduler.stats()?.device(&device).cloned().unwrap();
        let done = device_stats.controller.windows >= windows;
        stats = Some(device_stats);
        if done {
            break;
        }
    }
    scheduler.shutdown();
    let _ = std::fs::remove_file(&path);
    Ok(stats.unwrap())
}

#[test]
fn fixed_never_resizes_and_adaptive_runs_its_controller_and_logs_each_change() {
    let changes = Arc::new(AtomicU64::new(0));
    let decisions = Arc::new(AtomicU64::new(0));
    tracing::subscriber::set_global_default(CountControllerEvents {
        changes: changes.clone(),
        decisions: decisions.clone(),
    })
    .unwrap();

    let fixed = run(ControllerChoice::Fixed, "fixed", 0).unwrap();
    assert_eq!(fixed.budget_changes, 0);
    assert_eq!(
        fixed.controller,
        Default::default(),
        "Fixed decides nothing"
    );
    assert_eq!(changes.load(Ordering::SeqCst), 0, "no change, no event");
    assert_eq!(decisions.load(Ordering::SeqCst), 0, "no decision, no event");

    let adaptive = run(ControllerChoice::Adaptive, "adaptive", 3).unwrap();
    println!(
        "adaptive: {:?}, {} budget changes",
        adaptive.controller, adaptive.budget_changes
    );
    assert!(
        adaptive.controller.windows >= 3,
        "the adaptive controller judged no windows: {:?}",
        adaptive.controller
    );
    assert!(
        adaptive.budget_changes <= adaptive.controller.windows,
        "at most one change per window: {adaptive:?}"
    );
    assert_eq!(
        changes.load(Ordering::SeqCst),
        adaptive.budget_changes,
        "one event per budget change"
    );
    // One per look at the controller that found a new decision: several
    // windows may end between two looks, so at most one per window.
    let decisions = decisions.load(Ordering::SeqCst);
    assert!(
        (1..=adaptive.controller.windows).contains(&decisions),
        "{decisions} decision events for {} windows",
        adaptive.controller.windows
    );
}
