//! The real engine, on both backends, over a real block device that fails on
//! purpose (a loop device over this crate's FUSE file): error ranges, stalls,
//! a vanishing device, shutdown during a stall, and durability across a
//! simulated power cut.
//!
//! Needs root; without it every test prints why and passes without running.
//! Each test owns its device on the test thread and runs the I/O on another
//! under a watchdog: a hang heals the device (stalled requests finish), and
//! the device is detached and unmounted on every path, the watchdog's
//! included.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;
use tailguard::{AlignedBuffer, BackendChoice, Scheduler};
use tailguard_faultdev::{DeviceConfig, FaultControl, FaultDevice, Model, Ops};

const BLOCK: usize = 4096;
const WATCHDOG: Duration = Duration::from_secs(60);
const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Threads];

/// Starts a device with `config` and runs `case` on it on another thread,
/// bounded by [`WATCHDOG`]; skips (printing why) where the device cannot run.
fn with_device(
    name: &str,
    config: DeviceConfig,
    case: impl FnOnce(PathBuf, FaultControl) + Send + 'static,
) {
    let Some(device) = common::start_device(name, config) else {
        return;
    };
    println!(
        "{name}: {} (direct I/O: {})",
        device.path().display(),
        device.direct_io()
    );
    let (path, control) = (device.path().to_path_buf(), device.control().clone());
    let outcome = common::Watched::spawn(move || case(path, control)).wait(WATCHDOG);
    println!("{name}: device counts {:?}", device.control().counts());
    if outcome.is_none() {
        // Whatever the case waits on finishes once the faults are gone.
        device.control().heal();
    }
    drop(device);
    common::finish(name, outcome, WATCHDOG);
}

fn scheduler(choice: BackendChoice) -> Option<Scheduler> {
    match Scheduler::builder().backend(choice).build() {
        Ok(scheduler) => Some(scheduler),
        Err(error) if choice == BackendChoice::IoUring => {
            println!("skipping io_uring: {error}");
            None
        }
        Err(error) => panic!("{choice:?}: {error}"),
    }
}

fn pattern(index: u64, salt: u64) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    for (word, chunk) in buffer.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(index * 1_000_003 + salt * 7919 + word as u64).to_le_bytes());
    }
    buffer
}

fn offset(block: u64) -> u64 {
    block * BLOCK as u64
}

/// Writes `blocks` with `salt` at once; returns each write's result.
fn write_blocks(
    file: &tailguard::File,
    class: &tailguard::IoClass,
    blocks: impl Iterator<Item = u64>,
    salt: u64,
) -> Vec<std::io::Result<usize>> {
    let pending: Vec<_> = blocks
        .map(|block| file.write_at(class, pattern(block, salt), offset(block)))
        .collect();
    pending.into_iter().map(|future| future.wait().0).collect()
}

/// Reads `block`: its result and data.
fn read_block(
    file: &tailguard::File,
    class: &tailguard::IoClass,
    block: u64,
) -> (std::io::Result<usize>, AlignedBuffer) {
    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    file.read_at(class, buffer, offset(block)).wait()
}

/// Runs `body` once on each backend this machine offers, with a scheduler,
/// the device at `path` opened on it, a class named `c`, and the round's
/// number (from 0), which tests use to salt what they write.
fn on_each_backend(
    path: &Path,
    mut body: impl FnMut(u64, BackendChoice, &Scheduler, &tailguard::File, &tailguard::IoClass),
) {
    for (round, choice) in BACKENDS.into_iter().enumerate() {
        let Some(scheduler) = scheduler(choice) else {
            continue;
        };
        let file = scheduler.open(path).unwrap();
        let class = scheduler.add_class("c", 100).unwrap();
        body(round as u64, choice, &scheduler, &file, &class);
    }
}

/// Asserts that `blocks` read back whole and as written with `salt`.
fn assert_blocks_read_back(
    file: &tailguard::File,
    class: &tailguard::IoClass,
    blocks: std::ops::Range<u64>,
    salt: u64,
    choice: BackendChoice,
) {
    for block in blocks {
        let (result, data) = read_block(file, class, block);
        assert_eq!(result.unwrap(), BLOCK, "{choice:?}: block {block}");
        assert_eq!(
            &data[..],
            &pattern(block, salt)[..],
            "{choice:?}: block {block}"
        );
    }
}

#[test]
fn error_ranges_fail_exactly_the_requests_that_touch_them() {
    with_device("error-ranges", DeviceConfig::default(), |path, control| {
        on_each_backend(&path, |round, choice, scheduler, file, class| {
            let salt = round + 1;
            for result in write_blocks(file, class, 0..16, salt) {
                assert_eq!(result.unwrap(), BLOCK, "{choice:?}");
            }
            file.fdatasync(class).wait().unwrap();
            control.error_range(offset(8)..offset(10), Ops::Reads, libc::EIO);
            let reads: Vec<_> = (0..16)
                .map(|block| read_block(file, class, block))
                .collect();
            for (block, (result, data)) in reads.into_iter().enumerate() {
                let block = block as u64;
                if (8..10).contains(&block) {
                    assert_eq!(
                        tailguard::os_error_code(&result.unwrap_err()),
                        Some(libc::EIO),
                        "{choice:?}: block {block}"
                    );
                } else {
                    assert_eq!(result.unwrap(), BLOCK, "{choice:?}: block {block}");
                    assert_eq!(
                        &data[..],
                        &pattern(block, salt)[..],
                        "{choice:?}: block {block}"
                    );
                }
            }
            control.heal();
            let stats = scheduler.stats().unwrap();
            assert_eq!(
                stats.class("c").unwrap().ops,
                16 + 1 + 16,
                "each request once"
            );
            assert_eq!(stats.class("c").unwrap().errors, 2);
        });
        assert!(control.counts().errors_injected >= 2);
    });
}

#[test]
fn a_vanishing_device_fails_every_request_and_the_scheduler_lives_on() {
    with_device("vanish", DeviceConfig::default(), |path, control| {
        on_each_backend(&path, |_, choice, scheduler, file, class| {
            assert!(write_blocks(file, class, 0..4, 1).iter().all(|r| r.is_ok()));
            control.disappear(libc::ENODEV);
            let writes = write_blocks(file, class, 4..12, 1);
            assert!(
                writes.iter().all(|result| result.is_err()),
                "{choice:?}: {writes:?}"
            );
            assert!(read_block(file, class, 0).0.is_err());
            assert!(file.fdatasync(class).wait().is_err());
            control.heal();
            let (result, data) = read_block(file, class, 1);
            assert_eq!(result.unwrap(), BLOCK, "{choice:?}: back after heal");
            assert_eq!(&data[..], &pattern(1, 1)[..]);
            let stats = scheduler.stats().unwrap();
            assert_eq!(stats.class("c").unwrap().ops, 4 + 8 + 1 + 1 + 1);
        });
        assert!(control.counts().failed_gone >= 8);
    });
}

#[test]
fn shutdown_during_a_stall_completes_every_stalled_request() {
    let config = DeviceConfig {
        model: Model::SataSsd,
        ..DeviceConfig::default()
    };
    with_device("stall", config, |path, control| {
        for (round, choice) in BACKENDS.into_iter().enumerate() {
            let Some(scheduler) = scheduler(choice) else {
                continue;
            };
            let file = scheduler.open(&path).unwrap();
            let class = scheduler.add_class("c", 100).unwrap();
            let salt = 10 + round as u64;
            let stalled_before = control.counts().stalled;
            control.stall_for(Duration::from_millis(400));
            let writes: Vec<_> = (0..8u64)
                .map(|block| file.write_at(&class, pattern(block, salt), offset(block)))
                .collect();
            let sync = file.fdatasync(&class);
            let stopper = {
                let scheduler = scheduler.clone();
                std::thread::spawn(move || scheduler.shutdown())
            };
            stopper.join().unwrap();
            for write in writes {
                assert_eq!(write.wait().0.unwrap(), BLOCK, "{choice:?}");
            }
            sync.wait().unwrap();
            assert!(
                control.counts().stalled > stalled_before,
                "{choice:?}: the stall held requests"
            );
            drop(file);
            let reader = self::scheduler(choice).unwrap();
            let file = reader.open(&path).unwrap();
            let class = reader.add_class("r", 1).unwrap();
            assert_blocks_read_back(&file, &class, 0..8, salt, choice);
        }
    });
}

#[test]
fn a_slow_down_window_stretches_requests_and_loses_none() {
    let config = DeviceConfig {
        model: Model::UsbFlash,
        ..DeviceConfig::default()
    };
    with_device("slow-down", config, |path, control| {
        on_each_backend(&path, |round, choice, _, file, class| {
            let salt = 20 + round;
            let slowed_before = control.counts().slowed;
            control.slow_down_for(0.25, Duration::from_secs(30));
            for result in write_blocks(file, class, 0..8, salt) {
                assert_eq!(result.unwrap(), BLOCK, "{choice:?}");
            }
            file.fdatasync(class).wait().unwrap();
            control.heal();
            assert!(control.counts().slowed > slowed_before, "{choice:?}");
            assert_blocks_read_back(file, class, 0..8, salt, choice);
        });
    });
}

/// A small deterministic generator for the power-cut rounds.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Random rounds of writes, some followed by `fdatasync`, then a power cut:
/// returns (blocks acknowledged by an fdatasync, blocks written after the
/// last one, blocks of the latter lost).
fn power_cut_round(
    path: &Path,
    control: &FaultControl,
    choice: BackendChoice,
    seed: u64,
) -> Option<(usize, usize, usize)> {
    let scheduler = scheduler(choice)?;
    let file = scheduler.open(path).unwrap();
    let class = scheduler.add_class("c", 100).unwrap();
    let blocks = 256u64;
    // Generation 0 everywhere, durable.
    for result in write_blocks(&file, &class, 0..blocks, 0) {
        assert_eq!(result.unwrap(), BLOCK);
    }
    file.fdatasync(&class).wait().unwrap();
    let mut random = seed.max(1);
    let mut durable = vec![0u64; blocks as usize];
    let mut latest = vec![0u64; blocks as usize];
    for generation in 1..=12u64 {
        let count = 1 + next(&mut random) % 24;
        let chosen: Vec<u64> = (0..count).map(|_| next(&mut random) % blocks).collect();
        let mut unique = chosen.clone();
        unique.sort_unstable();
        unique.dedup();
        for (block, result) in unique.iter().zip(write_blocks(
            &file,
            &class,
            unique.iter().copied(),
            generation,
        )) {
            assert_eq!(result.unwrap(), BLOCK);
            latest[*block as usize] = generation;
        }
        if next(&mut random) % 2 == 0 {
            file.fdatasync(&class).wait().unwrap();
            durable.clone_from(&latest);
        }
    }
    // A last round that no fdatasync acknowledges: at risk by design.
    let tail: Vec<u64> = (0..16).map(|index| (index * 13 + seed) % blocks).collect();
    for (block, result) in tail
        .iter()
        .zip(write_blocks(&file, &class, tail.iter().copied(), 99))
    {
        assert_eq!(result.unwrap(), BLOCK);
        latest[*block as usize] = 99;
    }
    control.power_cut();
    let mut unflushed = 0;
    let mut lost = 0;
    for block in 0..blocks {
        let (result, data) = read_block(&file, &class, block);
        assert_eq!(result.unwrap(), BLOCK);
        let (kept, newest) = (durable[block as usize], latest[block as usize]);
        if kept == newest {
            assert_eq!(
                &data[..],
                &pattern(block, kept)[..],
                "{choice:?} seed {seed}: block {block} was acknowledged by fdatasync at generation {kept}"
            );
        } else {
            unflushed += 1;
            // Unflushed: the acknowledged generation or a later one, never garbage.
            let survived =
                (kept..=newest).any(|generation| data[..] == pattern(block, generation)[..]);
            assert!(
                survived,
                "{choice:?} seed {seed}: block {block} holds neither generation {kept} nor later"
            );
            lost += usize::from(data[..] != pattern(block, newest)[..]);
        }
    }
    let acknowledged = (0..blocks as usize)
        .filter(|&b| durable[b] == latest[b])
        .count();
    Some((acknowledged, unflushed, lost))
}

#[test]
fn after_a_power_cut_every_block_acknowledged_by_fdatasync_reads_back() {
    let config = DeviceConfig {
        volatile_cache: true,
        ..DeviceConfig::default()
    };
    with_device("power-cut", config, |path, control| {
        for choice in BACKENDS {
            for seed in [1u64, 2, 3] {
                let Some((acknowledged, unflushed, lost)) =
                    power_cut_round(&path, &control, choice, seed)
                else {
                    continue;
                };
                println!(
                    "power cut, {choice:?}, seed {seed}: {acknowledged} blocks acknowledged by fdatasync read back intact; \
                     {lost} of {unflushed} unflushed blocks lost"
                );
            }
        }
        let counts = control.counts();
        assert!(counts.power_cuts >= 3, "{counts:?}");
        assert!(
            counts.flushes >= 3,
            "fdatasync reached the device as flushes: {counts:?}"
        );
    });
}

#[test]
fn a_panicking_test_leaves_no_loop_device_and_no_mount() {
    if let Some(reason) = FaultDevice::unavailable() {
        println!("skipping: {reason}");
        return;
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let record = seen.clone();
    let outcome = std::panic::catch_unwind(move || {
        with_device("panic", DeviceConfig::default(), move |path, control| {
            control.stall_for(Duration::from_secs(30));
            let name = path.file_name().unwrap().to_owned();
            let backing = Path::new("/sys/block")
                .join(&name)
                .join("loop/backing_file");
            let file = std::fs::read_to_string(backing).unwrap().trim().to_string();
            *record.lock().unwrap() = Some((name, PathBuf::from(file)));
            panic!("a failing test, with the device stalled");
        });
    });
    assert!(outcome.is_err(), "the case's panic reaches the test");
    let (name, file) = seen.lock().unwrap().clone().expect("the case ran");
    let backing = Path::new("/sys/block")
        .join(&name)
        .join("loop/backing_file");
    let now = std::fs::read_to_string(&backing).unwrap_or_default();
    assert_ne!(
        Path::new(now.trim()),
        file,
        "{name:?} is still attached to this test's file"
    );
    let mount_dir = file.parent().unwrap().to_string_lossy().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&mount_dir), "{mount_dir} is still mounted");
    assert!(!Path::new(&mount_dir).exists(), "{mount_dir} is removed");
}

/// One step of a random fault schedule on the real device.
#[derive(Clone, Debug)]
enum Step {
    /// Writes a new version of `count` blocks from `first` on (wrapping).
    Writes { first: u64, count: u64 },
    /// `fdatasync`.
    Sync,
    /// Requests of `ops` touching these blocks fail with EIO.
    Range { first: u64, count: u64, ops: Ops },
    /// A fraction of requests fail with EIO.
    Rate { per_million: u32 },
    /// The device stops answering for a while.
    Stall { ms: u64 },
    /// The device vanishes.
    Vanish,
    /// Every fault ends.
    Heal,
}

const SCHEDULE_BLOCKS: u64 = 64;

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..SCHEDULE_BLOCKS, 1..16u64).prop_map(|(first, count)| Step::Writes { first, count }),
        2 => Just(Step::Sync),
        1 => (0..SCHEDULE_BLOCKS, 1..8u64, prop_oneof![Just(Ops::Writes), Just(Ops::Flushes), Just(Ops::Any)])
            .prop_map(|(first, count, ops)| Step::Range { first, count, ops }),
        1 => (1..300_000u32).prop_map(|per_million| Step::Rate { per_million }),
        1 => (1..40u64).prop_map(|ms| Step::Stall { ms }),
        1 => Just(Step::Vanish),
        1 => Just(Step::Heal),
    ]
}

/// Runs `schedule` on the device, then a power cut; checks that every
/// request completed once, that nothing failed while no fault was set, and
/// that every block reads back as the version its last successful
/// `fdatasync` acknowledged or a later successful write. Returns (blocks
/// checked against an acknowledged version, unflushed blocks, of which lost).
fn run_schedule(
    path: &Path,
    control: &FaultControl,
    choice: BackendChoice,
    schedule: &[Step],
) -> Option<(usize, usize, usize)> {
    let scheduler = scheduler(choice)?;
    let file = scheduler.open(path).unwrap();
    let class = scheduler.add_class("c", 100).unwrap();
    control.heal();
    let generation0: Vec<_> = write_blocks(&file, &class, 0..SCHEDULE_BLOCKS, 0);
    assert!(generation0.iter().all(|result| result.is_ok()));
    file.fdatasync(&class).wait().unwrap();
    let mut run = ScheduleRun {
        file: &file,
        class: &class,
        choice,
        latest: vec![0u64; SCHEDULE_BLOCKS as usize],
        written: vec![vec![0]; SCHEDULE_BLOCKS as usize],
        durable: vec![0u64; SCHEDULE_BLOCKS as usize],
        requests: SCHEDULE_BLOCKS + 1,
        faulty: false,
    };
    for (index, step) in schedule.iter().enumerate() {
        let generation = index as u64 + 1;
        match *step {
            Step::Writes { first, count } => run.writes(first, count, generation),
            Step::Sync => run.sync(),
            ref fault => run.set_fault(control, fault),
        }
    }
    control.heal();
    control.power_cut();
    let checked = run.check_blocks();
    let requests = run.requests + SCHEDULE_BLOCKS;
    let stats = scheduler.stats().unwrap();
    assert_eq!(
        stats.class("c").unwrap().ops,
        requests,
        "{choice:?}: each request completed once"
    );
    Some(checked)
}

/// One [`run_schedule`]: the file and class it writes through, each block's
/// versions, the requests sent, and whether a fault is set.
struct ScheduleRun<'a> {
    file: &'a tailguard::File,
    class: &'a tailguard::IoClass,
    choice: BackendChoice,
    /// Each block's latest version written successfully.
    latest: Vec<u64>,
    /// Each block's versions written successfully, in order.
    written: Vec<Vec<u64>>,
    /// Each block's version at the last successful `fdatasync`.
    durable: Vec<u64>,
    requests: u64,
    faulty: bool,
}

impl ScheduleRun<'_> {
    /// Writes `count` blocks from `first` (wrapping) with `generation`; a write
    /// may fail only while a fault is set.
    fn writes(&mut self, first: u64, count: u64, generation: u64) {
        let mut unique: Vec<u64> = (first..first + count)
            .map(|b| b % SCHEDULE_BLOCKS)
            .collect();
        unique.sort_unstable();
        unique.dedup();
        let results = write_blocks(self.file, self.class, unique.iter().copied(), generation);
        self.requests += unique.len() as u64;
        for (block, result) in unique.iter().zip(results) {
            match result {
                Ok(bytes) => {
                    assert_eq!(bytes, BLOCK);
                    self.latest[*block as usize] = generation;
                    self.written[*block as usize].push(generation);
                }
                Err(error) => assert!(
                    self.faulty,
                    "{:?}: write failed with no fault set: {error}",
                    self.choice
                ),
            }
        }
    }

    /// `fdatasync`: on success the latest versions are durable; it may fail
    /// only while a fault is set.
    fn sync(&mut self) {
        self.requests += 1;
        match self.file.fdatasync(self.class).wait() {
            Ok(()) => self.durable.clone_from(&self.latest),
            Err(error) => assert!(
                self.faulty,
                "{:?}: fdatasync failed with no fault set: {error}",
                self.choice
            ),
        }
    }

    /// Sets (or, for `Heal`, clears) the fault `step` names on the device.
    fn set_fault(&mut self, control: &FaultControl, step: &Step) {
        match *step {
            Step::Range { first, count, ops } => {
                control.error_range(offset(first)..offset(first + count), ops, libc::EIO);
                self.faulty = true;
            }
            Step::Rate { per_million } => {
                control.error_rate(per_million, Ops::Any, libc::EIO);
                self.faulty = true;
            }
            Step::Stall { ms } => control.stall_for(Duration::from_millis(ms)),
            Step::Vanish => {
                control.disappear(libc::ENODEV);
                self.faulty = true;
            }
            Step::Heal => {
                control.heal();
                self.faulty = false;
            }
            Step::Writes { .. } | Step::Sync => unreachable!("not a fault: {step:?}"),
        }
    }

    /// Reads every block back after the power cut and checks it holds its
    /// acknowledged version or a later write; returns (blocks whose latest
    /// version was acknowledged, unflushed blocks, of which lost).
    fn check_blocks(&self) -> (usize, usize, usize) {
        let (mut acknowledged, mut unflushed, mut lost) = (0, 0, 0);
        for block in 0..SCHEDULE_BLOCKS {
            let (result, data) = read_block(self.file, self.class, block);
            assert_eq!(result.unwrap(), BLOCK);
            let (kept, newest) = (self.durable[block as usize], self.latest[block as usize]);
            let holds = |generation: u64| data[..] == pattern(block, generation)[..];
            let mut later = self.written[block as usize]
                .iter()
                .copied()
                .filter(|&g| g >= kept);
            assert!(
                later.any(holds),
                "{:?}: block {block} holds neither its acknowledged version {kept} nor a later write",
                self.choice
            );
            if kept == newest {
                acknowledged += 1;
            } else {
                unflushed += 1;
                lost += usize::from(!holds(newest));
            }
        }
        (acknowledged, unflushed, lost)
    }
}

#[test]
fn random_fault_schedules_keep_every_request_and_every_acknowledged_block() {
    with_device(
        "schedules",
        DeviceConfig {
            volatile_cache: true,
            ..DeviceConfig::default()
        },
        |path, control| {
            use proptest::test_runner::{Config, RngSeed, TestRunner};
            let config = Config {
                cases: 32,
                failure_persistence: None,
                max_shrink_iters: 16,
                rng_seed: RngSeed::Fixed(15),
                ..Config::default()
            };
            let totals = std::sync::Mutex::new((0usize, 0usize, 0usize, 0usize));
            let mut runner = TestRunner::new(config);
            let strategy = proptest::collection::vec(step(), 1..16);
            runner
                .run(&strategy, |schedule| {
                    for choice in BACKENDS {
                        if let Some((acknowledged, unflushed, lost)) =
                            run_schedule(&path, &control, choice, &schedule)
                        {
                            let mut totals = totals.lock().unwrap();
                            totals.0 += 1;
                            totals.1 += acknowledged;
                            totals.2 += unflushed;
                            totals.3 += lost;
                        }
                    }
                    Ok(())
                })
                .unwrap();
            let (cases, acknowledged, unflushed, lost) = *totals.lock().unwrap();
            println!(
                "schedules: {cases} runs; {acknowledged} blocks acknowledged by fdatasync read back intact; \
                 {lost} of {unflushed} unflushed blocks lost at the power cuts"
            );
        },
    );
}
