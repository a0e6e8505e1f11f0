//! No lost wake-up between submitters, the engine and waiters, end to end.
//!
//! Several threads submit batches of requests (reads of a real file, whose
//! device time lets the engine sleep in the backend, and NOPs) and wait for
//! them in three ways at once: on a minimal executor that parks the thread
//! (futures awaited on another runtime: a push to a parked engine thread is
//! paid by the first poll's kick, and the engine wakes the executor once per
//! reap, after the whole reap is delivered), in `Scheduler::block_on` (the
//! waiter runs the engine itself), and by dropping some futures unpolled (the
//! drop pays the kick). A lost wake-up leaves a
//! thread parked for good; the main thread notices that no thread has
//! finished long after they all should have, and fails instead of hanging.
//! Every request must complete exactly once with its result.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tailguard::{
    AlignedBuffer, BackendChoice, BufResult, IoClass, IoFuture, Scheduler, SchedulerBuilder,
};

const BLOCK: usize = 4096;
const BLOCKS: u64 = 64;
const THREADS: usize = 4;
const ROUNDS: usize = 150;
/// How long the main thread waits for the next worker to finish before it
/// calls the run hung: far beyond what the work takes, so only a thread parked
/// for good (a lost wake-up) reaches it.
const HANG_AFTER: Duration = Duration::from_secs(120);

/// Unparks the thread that waits (no system call unless it is parked).
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A read or a NOP in flight.
enum Request {
    Read(IoFuture<BufResult>),
    Nop(IoFuture<std::io::Result<()>>),
}

impl Request {
    /// Polls; `Ready(true)` for a success.
    fn poll(&mut self, context: &mut Context<'_>) -> Poll<bool> {
        match self {
            Self::Read(future) => Pin::new(future)
                .poll(context)
                .map(|(result, _buffer)| result.is_ok_and(|bytes| bytes == BLOCK)),
            Self::Nop(future) => Pin::new(future).poll(context).map(|result| result.is_ok()),
        }
    }
}

/// Polls every request until all are ready, parking between polls, as an
/// executor that is not the scheduler's does; returns how many succeeded.
fn park_on_all(requests: Vec<Request>) -> usize {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut pending: Vec<_> = requests.into_iter().map(Some).collect();
    let mut succeeded = 0;
    loop {
        for slot in &mut pending {
            if let Some(request) = slot {
                if let Poll::Ready(success) = request.poll(&mut context) {
                    succeeded += usize::from(success);
                    *slot = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            return succeeded;
        }
        std::thread::park();
    }
}

/// A batch of `size` requests: reads of block `first..` of `file` on even
/// indexes, NOPs on odd ones.
fn batch(
    scheduler: &Scheduler,
    file: &tailguard::File,
    class: &IoClass,
    first: u64,
    size: usize,
) -> Vec<Request> {
    (0..size as u64)
        .map(|index| {
            if index % 2 == 1 {
                return Request::Nop(scheduler.nop(class));
            }
            let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
            let offset = ((first + index) % BLOCKS) * BLOCK as u64;
            Request::Read(file.read_at(class, buffer, offset))
        })
        .collect()
}

fn scratch_file() -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wakeup-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("data-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; BLOCK * BLOCKS as usize]).unwrap();
    path
}

fn run(choice: BackendChoice, builder: SchedulerBuilder, path: &std::path::Path) {
    let scheduler = match builder.backend(choice).build() {
        Ok(scheduler) => scheduler,
        Err(error) if choice == BackendChoice::IoUring => {
            println!("skipping io_uring: {error}");
            return;
        }
        Err(error) => panic!("{choice:?}: {error}"),
    };
    let file = Arc::new(scheduler.open(path).unwrap());
    let class = scheduler.add_class("reads", 100).unwrap();
    let completed = Arc::new(AtomicUsize::new(0));
    let expected = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel();
    for thread in 0..THREADS {
        let (scheduler, file, class) = (scheduler.clone(), file.clone(), class.clone());
        let (completed, expected, done) = (completed.clone(), expected.clone(), done.clone());
        std::thread::spawn(move || {
            for round in 0..ROUNDS {
                let size = 1 + (round + thread) % 6;
                let first = (round * THREADS + thread) as u64;
                let futures = batch(&scheduler, &file, &class, first, size);
                match (thread + round) % 5 {
                    // Another runtime: the futures' polls pay the kicks.
                    0..=2 => {
                        expected.fetch_add(size, Ordering::SeqCst);
                        let succeeded = park_on_all(futures);
                        completed.fetch_add(succeeded, Ordering::SeqCst);
                    }
                    // The waiter runs the engine.
                    3 => {
                        expected.fetch_add(size, Ordering::SeqCst);
                        for mut request in futures {
                            let success = scheduler
                                .block_on(std::future::poll_fn(|context| request.poll(context)));
                            completed.fetch_add(usize::from(success), Ordering::SeqCst);
                        }
                    }
                    // Dropped unpolled: the drops pay the kicks; the engine
                    // still completes them (checked by the shutdown below).
                    _ => drop(futures),
                }
            }
            done.send(thread).unwrap();
        });
    }
    drop(done);
    for _ in 0..THREADS {
        if finished.recv_timeout(HANG_AFTER).is_err() {
            panic!(
                "{choice:?}: a waiter never woke ({} of {} requests completed): a lost wake-up",
                completed.load(Ordering::SeqCst),
                expected.load(Ordering::SeqCst)
            );
        }
    }
    assert_eq!(
        completed.load(Ordering::SeqCst),
        expected.load(Ordering::SeqCst),
        "{choice:?}: every awaited request completes once, successfully"
    );
    let stats = scheduler.stats().unwrap();
    scheduler.shutdown();
    let reads = stats
        .classes
        .iter()
        .find(|stats| stats.name == "reads")
        .unwrap();
    assert_eq!(reads.errors, 0, "{choice:?}: no request failed");
    assert!(
        reads.ops >= expected.load(Ordering::SeqCst) as u64,
        "{choice:?}: the engine counted {} requests, fewer than were awaited",
        reads.ops
    );
}

#[test]
fn batches_awaited_on_another_executor_in_block_on_or_dropped_all_complete() {
    let path = scratch_file();
    run(BackendChoice::IoUring, Scheduler::builder(), &path);
    run(
        BackendChoice::IoUring,
        Scheduler::builder().waiters_run_engine(false),
        &path,
    );
    run(BackendChoice::Threads, Scheduler::builder(), &path);
    let _ = std::fs::remove_file(&path);
}
