//! Seed 001 on the real kernel path, as structure rather than speed: a fast
//! disk (a file on this machine's disk) beside a slow stick (a fault device
//! timed by the `usb-flash` model) that stalls while its writes fill their
//! budget.
//!
//! - Through tailguard, on both backends, the fast disk's writes all
//!   complete while the stick's dispatcher holds a full budget of stalled
//!   writes and more queued behind it, and not one stick write has
//!   completed: the fast device never waits on the stick's requests.
//! - Through one pool of threads shared by both devices (the size of
//!   tailguard's default pool), the stalled stick's writes take every
//!   thread and not one fast write completes until the stall ends: the
//!   seed's shared cap. A fixed-size pool inside tailguard would fail the
//!   first case the same way (its backend therefore adds threads instead).
//!
//! The assertions are counts, taken while the stick is stalled (a stall
//! holds its requests indefinitely, so no timing decides them). Needs root;
//! without it each test prints why and passes without running. The device
//! and the fast file are owned by the test thread and the I/O runs on
//! another under a watchdog: a hang heals the stick, and the loop device is
//! detached and FUSE unmounted on every path, a panic's included.

mod common;
mod seed001_parts;

use seed001_parts::{device_name, open_direct, stick_profile, write_buffer, FastFile, WRITE_BYTES};
use std::future::Future;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tailguard::{BackendChoice, Scheduler};
use tailguard_faultdev::{DeviceConfig, FaultControl, Model};

const WATCHDOG: Duration = Duration::from_secs(60);
const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Threads];
/// Writes queued to the stick: several times what its budget admits.
const STICK_WRITES: u64 = 32;
/// Writes to the fast disk while the stick is stalled.
const FAST_WRITES: u64 = 64;
/// The fast writer's queue depth.
const FAST_DEPTH: usize = 8;
const STICK_BYTES: u64 = 8 << 20;
const FAST_BYTES: u64 = 8 << 20;
/// Long enough to outlast every case; the case heals the stick itself.
const STALL: Duration = Duration::from_secs(120);

/// The paths a case works on.
struct Rig {
    stick: PathBuf,
    fast: PathBuf,
}

/// Starts the stick and the fast file and runs `case` on them on another
/// thread, bounded by [`WATCHDOG`]; skips (printing why) where the device
/// cannot run.
fn with_rig(name: &str, case: impl FnOnce(Rig, FaultControl) + Send + 'static) {
    let config = DeviceConfig {
        model: Model::UsbFlash,
        size_bytes: STICK_BYTES,
        fuse_threads: 16,
        ..DeviceConfig::default()
    };
    let Some(device) = common::start_device(name, config) else {
        return;
    };
    let fast =
        FastFile::create(&common::test_directory(), FAST_BYTES).expect("create the fast file");
    println!(
        "{name}: stick {} (direct I/O: {}), fast file {}",
        device.path().display(),
        device.direct_io(),
        fast.path().display()
    );
    let rig = Rig {
        stick: device.path().to_path_buf(),
        fast: fast.path().to_path_buf(),
    };
    let control = device.control().clone();
    let watched = common::Watched::spawn(move || case(rig, control));
    let outcome = watched.wait(WATCHDOG);
    println!("{name}: stick counts {:?}", device.control().counts());
    // Whatever the case waits on finishes once the stall is gone.
    device.control().heal();
    if outcome.is_none() {
        // Give the case's I/O a moment to finish before the device goes.
        let _ = watched.wait(Duration::from_secs(10));
    }
    drop(device);
    drop(fast);
    common::finish(name, outcome, WATCHDOG);
}

/// Waits until the stall has held requests beyond the `before` it had
/// counted already (the count runs across cases) and no new one arrived for
/// a while: whatever was sent to the stick is then stuck in it.
fn wait_until_stalled(control: &FaultControl, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = control.counts().stalled;
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = control.counts().stalled;
        if now != last {
            last = now;
            quiet_since = Instant::now();
        } else if now > before && quiet_since.elapsed() >= Duration::from_millis(200) {
            return;
        }
    }
    panic!("the stalled stick never held a request ({last} held, {before} before)");
}

#[test]
fn the_fast_disk_completes_every_write_while_the_stalled_sticks_budget_is_full() {
    with_rig("seed001-tailguard", |rig, control| {
        let stick_name = device_name(&rig.stick);
        for choice in BACKENDS {
            let scheduler = match Scheduler::builder()
                .backend(choice)
                .profile(&stick_name, stick_profile())
                .build()
            {
                Ok(scheduler) => scheduler,
                Err(error) if choice == BackendChoice::IoUring => {
                    println!("skipping io_uring: {error}");
                    continue;
                }
                Err(error) => panic!("{choice:?}: {error}"),
            };
            let class = scheduler.add_class("copy", 100).unwrap();
            let stick = scheduler.open(&rig.stick).unwrap();
            let fast = scheduler.open(&rig.fast).unwrap();
            let stalled_before = control.counts().stalled;
            control.stall_for(STALL);
            let stick_writes = stalled_writes(&stick, &class, &control, stalled_before);
            let fast_completed = write_fast(&fast, &class, choice);
            let stats = scheduler.stats().unwrap();
            let stick_stats = stats.device(&stick_name).expect("the stick's dispatcher");
            println!(
                "{choice:?}: fast writes completed {fast_completed}; stick: {} completed, {} in \
                 flight, {} queued, budget {} ms",
                stick_stats.ops,
                stick_stats.in_flight_pieces,
                stick_stats.queued_pieces,
                stick_stats.budget_ns / 1_000_000
            );
            assert_eq!(fast_completed, FAST_WRITES, "{choice:?}");
            assert_eq!(
                stick_stats.ops, 0,
                "{choice:?}: the stick was stalled throughout"
            );
            assert!(
                stick_stats.in_flight_pieces > 0 && stick_stats.queued_pieces > 0,
                "{choice:?}: the stick's budget was full, with writes queued behind it"
            );
            assert!(
                control.counts().stalled > stalled_before,
                "{choice:?}: the stall held the stick's writes"
            );

            control.heal();
            for write in stick_writes {
                assert_eq!(bytes(write), WRITE_BYTES, "{choice:?}: stick write");
            }
            let stats = scheduler.stats().unwrap();
            assert_eq!(stats.device(&stick_name).unwrap().ops, STICK_WRITES);
            assert_eq!(stats.class("copy").unwrap().ops, STICK_WRITES + FAST_WRITES);
        }
    });
}

/// Sends [`STICK_WRITES`] writes to the stalled stick, makes sure the engine
/// has each, and waits until the stall holds them.
fn stalled_writes(
    stick: &tailguard::File,
    class: &tailguard::IoClass,
    control: &FaultControl,
    stalled_before: u64,
) -> Vec<tailguard::IoFuture<tailguard::BufResult>> {
    let mut writes: Vec<_> = (0..STICK_WRITES)
        .map(|index| stick.write_at(class, write_buffer(), index * WRITE_BYTES as u64))
        .collect();
    // A future is lazy: polled once, each request is surely in the engine's
    // hands (a push that found the engine thread parked wakes it only when
    // its future is first polled or waited on).
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    for write in &mut writes {
        assert!(std::pin::Pin::new(write).poll(&mut context).is_pending());
    }
    wait_until_stalled(control, stalled_before);
    writes
}

/// Writes [`FAST_WRITES`] to the fast disk, [`FAST_DEPTH`] at a time, each
/// asserted whole; returns how many completed.
fn write_fast(fast: &tailguard::File, class: &tailguard::IoClass, choice: BackendChoice) -> u64 {
    let mut writes: std::collections::VecDeque<tailguard::IoFuture<tailguard::BufResult>> =
        std::collections::VecDeque::new();
    let mut completed = 0;
    for index in 0..FAST_WRITES {
        if writes.len() == FAST_DEPTH {
            let (result, _) = writes.pop_front().unwrap().wait();
            assert_eq!(result.unwrap(), WRITE_BYTES, "{choice:?}");
            completed += 1;
        }
        let offset = index * WRITE_BYTES as u64 % FAST_BYTES;
        writes.push_back(fast.write_at(class, write_buffer(), offset));
    }
    for write in writes {
        assert_eq!(bytes(write), WRITE_BYTES, "{choice:?}");
        completed += 1;
    }
    completed
}

/// Waits for a data request; the bytes it moved (an error fails the test).
fn bytes(write: tailguard::IoFuture<tailguard::BufResult>) -> usize {
    write.wait().0.expect("a write")
}

#[test]
fn one_pool_of_threads_for_both_devices_lets_the_stalled_stick_hold_the_fast_disk() {
    with_rig("seed001-shared-pool", |rig, control| {
        // Tailguard's default pool size.
        let mut pool = FixedPool::new(4);
        let stick = open_direct(&rig.stick).unwrap();
        let fast = open_direct(&rig.fast).unwrap();
        let stalled_before = control.counts().stalled;
        control.stall_for(STALL);
        for index in 0..STICK_WRITES {
            pool.write(&stick, index * WRITE_BYTES as u64);
        }
        wait_until_stalled(&control, stalled_before);
        for index in 0..FAST_DEPTH as u64 {
            pool.write(&fast, index * WRITE_BYTES as u64);
        }
        // The fast writes stay unserved however long this looks: every
        // thread is inside a stalled stick write.
        std::thread::sleep(Duration::from_millis(500));
        let done_while_stalled = pool.completed();
        println!(
            "shared pool of {}: {} writes completed while the stick stalled, {} stick \
             requests held",
            pool.threads(),
            done_while_stalled.len(),
            control.counts().stalled
        );
        assert!(
            done_while_stalled.is_empty(),
            "nothing completes while the stick holds every thread: {done_while_stalled:?}"
        );
        control.heal();
        let done = pool.finish();
        let total = STICK_WRITES as usize + FAST_DEPTH;
        assert_eq!(done.len(), total, "each write once");
        assert!(
            done.iter().all(|result| *result == Some(WRITE_BYTES)),
            "every write completes once the stall ends: {done:?}"
        );
    });
}

/// One pool of threads doing O_DIRECT `pwrite`s for every device, first come
/// first served: the shared in-flight resource of the seed, built here for
/// the comparison (tailguard's own pool adds threads instead).
struct FixedPool {
    jobs: Option<mpsc::Sender<(std::fs::File, u64)>>,
    results: mpsc::Receiver<Option<usize>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    submitted: usize,
}

impl FixedPool {
    fn new(threads: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<(std::fs::File, u64)>();
        let queue = std::sync::Arc::new(std::sync::Mutex::new(queue));
        let (report, results) = mpsc::channel();
        let workers = (0..threads)
            .map(|_| {
                let queue = queue.clone();
                let report = report.clone();
                std::thread::spawn(move || loop {
                    let job = queue.lock().unwrap().recv();
                    let Ok((file, offset)) = job else {
                        return;
                    };
                    let buffer = write_buffer();
                    let written = std::os::unix::fs::FileExt::write_at(&file, &buffer, offset);
                    let _ = report.send(written.ok());
                })
            })
            .collect();
        Self {
            jobs: Some(jobs),
            results,
            workers,
            submitted: 0,
        }
    }

    fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Queues one write of [`WRITE_BYTES`] at `offset`.
    fn write(&mut self, file: &std::fs::File, offset: u64) {
        let file = file.try_clone().unwrap();
        self.jobs.as_ref().unwrap().send((file, offset)).unwrap();
        self.submitted += 1;
    }

    /// The results in so far (bytes written, `None` for an error).
    fn completed(&self) -> Vec<Option<usize>> {
        self.results.try_iter().collect()
    }

    /// Waits for every write queued; their results.
    fn finish(mut self) -> Vec<Option<usize>> {
        let results: Vec<_> = self.results.iter().take(self.submitted).collect();
        self.jobs = None;
        for worker in self.workers.drain(..) {
            worker.join().unwrap();
        }
        results
    }
}
