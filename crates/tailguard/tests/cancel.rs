//! Stopping fast: `Scheduler::shutdown_now` and `Scheduler::cancel_pending`
//! on both backends, with requests queued in the dispatcher behind pieces a
//! stalled device holds (the fault-injecting backend,
//! `tailguard::backend::fault`, without privileges).
//!
//! The invariants checked: every request completes exactly once; what was
//! queued fails with `ErrorKind::Interrupted` and never reaches the device
//! (its blocks keep their old content); a request split into pieces of which
//! some were in flight completes with the contiguous bytes they transferred,
//! and those bytes are on the device; the cancellation is answered while the
//! device still stalls (the stall ends only after the test saw the answers,
//! so a cancel that waited for the device would hang, and the watchdog
//! fails it); a scheduler whose queue was cancelled goes on serving; and a
//! stream read or an exact read cut short by a cancel is not taken for the
//! end of the file.

mod common;
use common::{pattern, BlockFile, BLOCK};
use std::io;
use std::time::Duration;
use tailguard::backend::fault::{FaultInjector, FaultPlan};
use tailguard::{
    AlignedBuffer, BackendChoice, BufResult, ControllerChoice, IoFuture, Profile, ReaderOptions,
    Scheduler, StreamReader, StreamWriter, WriterOptions,
};

/// Blocks in each test file.
const BLOCKS: u64 = 64;
/// Blocks of the large write, split into one piece per block.
const WRITE_BLOCKS: u64 = 16;
/// Reads queued behind the large write.
const READS: u64 = 24;
/// The most time one case may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(60);
/// Far longer than any case: the test ends the stall itself.
const STALL: Duration = Duration::from_secs(3_600);

const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Threads];

/// A scheduler whose budget admits a few 4 KiB pieces (a profile of 100
/// IOPS, pieces of at most one block, a fixed budget that stays one budget
/// while no one reads), so that work queues in the dispatcher behind them;
/// `None` (reason printed) where io_uring is refused.
fn scheduler(choice: BackendChoice, injector: &FaultInjector) -> Option<Scheduler> {
    let profile = Profile {
        read_iops: 100.0,
        write_iops: 100.0,
        read_bandwidth: 1e9,
        write_bandwidth: 1e9,
        max_request_bytes: BLOCK as u64,
        latency_target_us: 10,
    };
    let builder = Scheduler::builder()
        .threads(2)
        .controller(ControllerChoice::Fixed)
        .quiet_reads(None)
        .default_profile(profile)
        .fault_injection(injector.clone());
    common::build_on(choice, builder)
}

/// An injector without faults (a test stalls it), a scheduler on `choice`
/// through it, and a fresh test file named by `name` and the backend;
/// `None` (reason printed) where io_uring is refused.
fn setup(choice: BackendChoice, name: &str) -> Option<(FaultInjector, Scheduler, BlockFile)> {
    let injector = FaultInjector::new(FaultPlan::default());
    let scheduler = scheduler(choice, &injector)?;
    let file = BlockFile::create("cancel-tests", &format!("{name}-{choice:?}"), BLOCKS);
    Some((injector, scheduler, file))
}

/// What a case left to check: the large write, the reads and the sync
/// queued behind it, and how many of the write's pieces the device held.
struct Stalled {
    write: IoFuture<BufResult>,
    reads: Vec<IoFuture<BufResult>>,
    sync: Option<IoFuture<io::Result<()>>>,
    pieces_held: u64,
}

/// Stalls the device, writes [`WRITE_BLOCKS`] blocks of generation 1 from
/// block 0 in one request, waits until the device holds its first pieces,
/// then queues [`READS`] reads and an fdatasync behind it in the same class.
fn stall_and_queue(scheduler: &Scheduler, injector: &FaultInjector, file: &BlockFile) -> Stalled {
    let handle = scheduler.open(&file.path).unwrap();
    let class = scheduler.add_class("c", 100).unwrap();
    injector.stall_for(STALL);
    let length = WRITE_BLOCKS as usize * BLOCK;
    let mut data = AlignedBuffer::new(length, BLOCK).unwrap();
    for block in 0..WRITE_BLOCKS as usize {
        data[block * BLOCK..(block + 1) * BLOCK].copy_from_slice(&pattern(block as u64, 1));
    }
    let write = handle.write_at(&class, data, 0);
    // A request's push may leave the engine's wake-up to its future's first
    // wait; a stats call (answered after the write was taken) makes sure the
    // engine took it.
    scheduler.stats().unwrap();
    while injector.counts().ops_stalled == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let reads = (0..READS)
        .map(|index| {
            let block = WRITE_BLOCKS + index;
            let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
            handle.read_at(&class, buffer, block * BLOCK as u64)
        })
        .collect();
    let sync = handle.fdatasync(&class);
    Stalled {
        write,
        reads,
        sync: Some(sync),
        pieces_held: 0,
    }
}

fn assert_cancelled(error: &io::Error, what: &str) {
    assert_eq!(error.kind(), io::ErrorKind::Interrupted, "{what}: {error}");
    assert!(
        error
            .to_string()
            .contains("cancelled before it reached the device"),
        "{what}: the message says what happened: {error}"
    );
}

/// Waits for the queued reads and the sync, which must come back cancelled
/// while the device still stalls; returns how many reads there were.
fn expect_queue_cancelled(stalled: &mut Stalled, choice: BackendChoice) -> usize {
    let reads = std::mem::take(&mut stalled.reads);
    let count = reads.len();
    for (index, read) in reads.into_iter().enumerate() {
        let (result, buffer) = read.wait();
        assert_eq!(buffer.len(), BLOCK, "the buffer comes back");
        assert_cancelled(&result.unwrap_err(), &format!("{choice:?}: read {index}"));
    }
    let sync = stalled.sync.take().expect("one sync per case");
    assert_cancelled(&sync.wait().unwrap_err(), &format!("{choice:?}: sync"));
    count
}

/// Checks the large write's outcome against the device: the pieces the
/// device held were written, the cancelled ones never reached it.
fn expect_short_write(stalled: Stalled, file: &BlockFile, choice: BackendChoice) {
    let (result, _) = stalled.write.wait();
    let written = result.unwrap_or_else(|error| panic!("{choice:?}: write: {error}"));
    let pieces = stalled.pieces_held;
    assert!(
        (1..WRITE_BLOCKS).contains(&pieces),
        "{choice:?}: the budget let part of the write go: {pieces} pieces"
    );
    assert_eq!(
        written,
        pieces as usize * BLOCK,
        "{choice:?}: a short count of the pieces the device held"
    );
    for block in 0..BLOCKS {
        let generation = u64::from(block < pieces);
        assert_eq!(
            file.block(block),
            pattern(block, generation).to_vec(),
            "{choice:?}: block {block} is of generation {generation}"
        );
    }
}

#[test]
fn shutdown_now_fails_the_queue_at_once_and_finishes_what_the_device_holds() {
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            let Some((injector, scheduler, file)) = setup(choice, "shutdown-now") else {
                return;
            };
            let mut stalled = stall_and_queue(&scheduler, &injector, &file);
            let stopper = {
                let scheduler = scheduler.clone();
                std::thread::spawn(move || scheduler.shutdown_now())
            };
            // Answered while the device stalls: the stall ends only after.
            expect_queue_cancelled(&mut stalled, choice);
            let counts = injector.counts();
            assert!(
                counts.ops_held_now >= 1,
                "{choice:?}: still stalled: {counts:?}"
            );
            stalled.pieces_held = counts.ops_stalled;
            injector.heal();
            stopper.join().unwrap();
            let counts = injector.counts();
            assert_eq!(
                counts.ops_held_now, 0,
                "{choice:?}: shutdown drained the stall"
            );
            assert_eq!(counts.ops_pushed, counts.ops_completed, "{choice:?}");
            assert_eq!(
                counts.ops_pushed, stalled.pieces_held,
                "{choice:?}: nothing cancelled reached the backend"
            );
            expect_short_write(stalled, &file, choice);
            // Stopped: new requests are refused, and a second stop is a no-op.
            assert!(scheduler.add_class("late", 1).is_err());
            scheduler.shutdown_now();
        });
    }
}

#[test]
fn cancel_pending_fails_the_queue_and_the_scheduler_goes_on() {
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            let Some((injector, scheduler, file)) = setup(choice, "cancel-pending") else {
                return;
            };
            let mut stalled = stall_and_queue(&scheduler, &injector, &file);
            let cancelled = scheduler.cancel_pending().unwrap();
            let reads = expect_queue_cancelled(&mut stalled, choice);
            assert_eq!(
                cancelled,
                reads + 2,
                "{choice:?}: the reads, the sync and the write, counted once each"
            );
            stalled.pieces_held = injector.counts().ops_stalled;
            injector.heal();
            expect_short_write(stalled, &file, choice);
            // The scheduler serves new work after the cancel.
            let handle = scheduler.open(&file.path).unwrap();
            let class = scheduler.add_class("after", 100).unwrap();
            let block = BLOCKS - 1;
            let (result, buffer) = handle
                .read_at(
                    &class,
                    AlignedBuffer::new(BLOCK, BLOCK).unwrap(),
                    block * BLOCK as u64,
                )
                .wait();
            assert_eq!(result.unwrap(), BLOCK);
            assert_eq!(buffer.to_vec(), pattern(block, 0).to_vec());
            assert_eq!(scheduler.cancel_pending().unwrap(), 0, "nothing queued");
            let stats = scheduler.stats().unwrap();
            let class_stats = stats.class("c").unwrap();
            assert_eq!(
                class_stats.ops,
                reads as u64 + 2,
                "each request counted once"
            );
            assert_eq!(class_stats.errors, reads as u64 + 1);
            assert_eq!(
                class_stats.device_time_ns.len(),
                1,
                "{choice:?}: only the write reached the device"
            );
            assert_eq!(class_stats.queue_wait_ns.len(), reads as u64 + 2);
            let device_ops: u64 = stats.devices.iter().map(|device| device.ops).sum();
            assert_eq!(
                device_ops, 2,
                "{choice:?}: the devices served the write and the read after the cancel"
            );
            scheduler.shutdown();
            let counts = injector.counts();
            assert_eq!(counts.ops_pushed, counts.ops_completed, "{choice:?}");
        });
    }
}

/// Reads the whole file through a [`StreamReader`] whose first read (of
/// [`WRITE_BLOCKS`] blocks, split into one piece per block) the stalled
/// device holds part of; `stop` cancels the rest meanwhile. Returns what
/// `read_to_end` gave: the bytes, or its error.
fn stream_read_cut_short(
    choice: BackendChoice,
    name: &str,
    stop: fn(&Scheduler),
) -> Option<(io::Result<Vec<u8>>, BlockFile)> {
    let (injector, scheduler, file) = setup(choice, name)?;
    let handle = scheduler.open(&file.path).unwrap();
    let class = scheduler.add_class("scan", 100).unwrap();
    injector.stall_for(STALL);
    let options = ReaderOptions {
        buffer_bytes: WRITE_BLOCKS as usize * BLOCK,
        read_ahead_buffers: 1,
    };
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut content = Vec::new();
        StreamReader::new(handle, &class, options)
            .read_to_end(&mut content)
            .map(|_| content)
    });
    while injector.counts().ops_stalled == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop(&scheduler);
    let held = injector.counts().ops_stalled;
    assert!(
        (1..WRITE_BLOCKS).contains(&held),
        "{choice:?}: the device holds part of the first read: {held} pieces"
    );
    injector.heal();
    let result = reader.join().unwrap();
    scheduler.shutdown();
    Some((result, file))
}

#[test]
fn a_stream_read_cut_short_by_a_cancel_reads_on() {
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            let cancel = |scheduler: &Scheduler| {
                let cancelled = scheduler.cancel_pending().unwrap();
                assert_eq!(cancelled, 1, "the first read, split, was cut");
            };
            let Some((result, file)) = stream_read_cut_short(choice, "stream-cancel", cancel)
            else {
                return;
            };
            let content = result.unwrap_or_else(|error| panic!("{choice:?}: {error}"));
            let expected = std::fs::read(&file.path).unwrap();
            assert_eq!(
                content.len(),
                expected.len(),
                "{choice:?}: the whole file, not the cut read's bytes"
            );
            assert!(content == expected, "{choice:?}: the file's bytes");
        });
    }
}

#[test]
fn a_stream_read_cut_short_by_shutdown_now_fails() {
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            let stop = |scheduler: &Scheduler| {
                let scheduler = scheduler.clone();
                // Returns once the device is done: run beside the test.
                std::thread::spawn(move || scheduler.shutdown_now());
            };
            let Some((result, _file)) = stream_read_cut_short(choice, "stream-stop", stop) else {
                return;
            };
            let error = result.expect_err("the stream does not end at the cut");
            assert!(
                error.to_string().contains("shut down"),
                "{choice:?}: the error says why: {error}"
            );
        });
    }
}

/// What [`cut_by_a_cancel`] expects: the requests its cancel fails, and the
/// error the request comes back with (its kind, and words its message has).
struct Expected<'a> {
    /// How many requests the cancel may cut: a stream's next request may
    /// or may not have reached the engine when the cancel comes (if not,
    /// it is served; the cut one still fails the stream).
    cancelled: std::ops::RangeInclusive<usize>,
    kind: io::ErrorKind,
    cause: &'a str,
}

/// Runs `request` (one request of [`WRITE_BLOCKS`] blocks or more, split
/// into one piece per block, or a stream's requests) on its own thread while
/// the device stalls, cancels what the device does not hold yet, and checks
/// the request's error against `expected`.
fn cut_by_a_cancel(
    choice: BackendChoice,
    name: &str,
    expected: Expected<'_>,
    request: impl FnOnce(tailguard::File, tailguard::IoClass) -> io::Result<()> + Send + 'static,
) {
    let Some((injector, scheduler, file)) = setup(choice, name) else {
        return;
    };
    let handle = scheduler.open(&file.path).unwrap();
    let class = scheduler.add_class("c", 100).unwrap();
    injector.stall_for(STALL);
    let requester = std::thread::spawn(move || request(handle, class));
    while injector.counts().ops_stalled == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let cancelled = scheduler.cancel_pending().unwrap();
    assert!(
        expected.cancelled.contains(&cancelled),
        "{name}: the cancel cut {cancelled} requests, not {:?}",
        expected.cancelled
    );
    injector.heal();
    let error = requester
        .join()
        .unwrap()
        .map(|()| panic!("{choice:?} {name}: a cut request is no whole one"))
        .unwrap_err();
    assert_eq!(error.kind(), expected.kind, "{choice:?} {name}: {error}");
    assert!(
        error.to_string().contains(expected.cause),
        "{choice:?} {name}: the message says why ({}): {error}",
        expected.cause
    );
    scheduler.shutdown();
}

#[test]
fn requests_cut_short_by_a_cancel_are_not_taken_for_the_end_or_a_full_disk() {
    let length = WRITE_BLOCKS as usize * BLOCK;
    let cut = |cause| Expected {
        cancelled: 1..=1,
        kind: io::ErrorKind::Interrupted,
        cause,
    };
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            // Off alignment: one bounce read of WRITE_BLOCKS + 1 blocks.
            cut_by_a_cancel(
                choice,
                "exact-read",
                cut("cancelled"),
                move |file, class| {
                    let mut out = vec![0u8; length];
                    let read = file.read_exact_at_unaligned(&class, &mut out, 100);
                    file.scheduler().block_on(read)
                },
            );
            // Whole blocks from 0: no block to read first, one bounce write.
            let cause = "cut short by a cancel";
            cut_by_a_cancel(choice, "unaligned-write", cut(cause), move |file, class| {
                let data = vec![7u8; length];
                let write = file.write_at_unaligned(&class, &data, 0);
                file.scheduler().block_on(write)
            });
        });
    }
}

/// A stream's error comes back from every later call, and std's
/// `write_all` and `read_to_end` retry `Interrupted`: a stream whose request
/// a cancel cut or failed reports another kind, so they end with the error
/// instead of retrying it forever (the watchdog fails a spin).
#[test]
fn a_stream_write_cut_by_a_cancel_ends_with_an_error_not_a_spin() {
    let length = WRITE_BLOCKS as usize * BLOCK;
    let failed = |cancelled, cause| Expected {
        cancelled,
        kind: io::ErrorKind::Other,
        cause,
    };
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            // Three buffers' writes: the first is cut, the next never went.
            let cause = "cut short by a cancel";
            cut_by_a_cancel(
                choice,
                "stream-write",
                failed(1..=2, cause),
                move |file, class| {
                    use std::io::Write;
                    let options = WriterOptions {
                        buffer_bytes: length,
                        buffers_in_flight: 1,
                    };
                    let mut stream = StreamWriter::new(file, &class, options);
                    stream.write_all(&vec![7u8; 3 * length])?;
                    stream.flush()
                },
            );
        });
    }
}

/// Pieces queued in the fair queues of every device now.
fn queued_pieces(scheduler: &Scheduler) -> usize {
    let stats = scheduler.stats().unwrap();
    stats
        .devices
        .iter()
        .map(|device| device.queued_pieces)
        .sum()
}

/// A stream's read that a cancel failed whole (queued behind a stalled
/// write) ends `read_to_end` with the error, not a retry of it forever.
#[test]
fn a_stream_read_a_cancel_failed_ends_with_an_error_not_a_spin() {
    for choice in BACKENDS {
        common::watched(WATCHDOG, move || {
            let Some((injector, scheduler, file)) = setup(choice, "read-failed") else {
                return;
            };
            let handle = scheduler.open(&file.path).unwrap();
            let class = scheduler.add_class("c", 100).unwrap();
            injector.stall_for(STALL);
            let data = AlignedBuffer::new(WRITE_BLOCKS as usize * BLOCK, BLOCK).unwrap();
            let write = handle.write_at(&class, data, 0);
            scheduler.stats().unwrap();
            while injector.counts().ops_stalled == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = queued_pieces(&scheduler);
            let reader = std::thread::spawn(move || {
                use std::io::Read;
                let options = ReaderOptions {
                    buffer_bytes: 4 * BLOCK,
                    read_ahead_buffers: 1,
                };
                let mut content = Vec::new();
                StreamReader::new(handle, &class, options).read_to_end(&mut content)
            });
            while queued_pieces(&scheduler) == before {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(
                scheduler.cancel_pending().unwrap(),
                2,
                "the write and the read"
            );
            injector.heal();
            let error = reader.join().unwrap().expect_err("the read was cancelled");
            assert_eq!(error.kind(), io::ErrorKind::Other, "{choice:?}: {error}");
            assert!(
                error.to_string().contains("cancelled"),
                "{choice:?}: {error}"
            );
            let _ = write.wait();
            scheduler.shutdown();
        });
    }
}
