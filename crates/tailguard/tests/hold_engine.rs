//! `Scheduler::hold_engine`: a thread that drives its requests in a loop
//! keeps the engine between its waits, so its completions reach it on its own
//! thread (no hop through the engine thread) while a write stream is always in
//! flight, and every request still completes exactly once with its result.

mod common;
use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;
use std::time::Duration;
use tailguard::{AlignedBuffer, BackendChoice, IoFuture, Scheduler};

const FILE_BYTES: u64 = 8 << 20;
const WRITE_BYTES: usize = 256 << 10;
const WRITES_IN_FLIGHT: usize = 8;
const READS: u64 = 300;
/// The most a test may take before it counts as hung (a lost wake-up).
const WATCHDOG: Duration = Duration::from_secs(120);

/// Which threads delivered the completions' wake-ups.
#[derive(Default)]
struct WakeCounts {
    on_holder: AtomicU64,
    elsewhere: AtomicU64,
}

/// Forwards a wake to the waker of the poll that made it, counting where it
/// came from.
struct CountingWaker {
    inner: Waker,
    holder: ThreadId,
    counts: Arc<WakeCounts>,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let counter = if std::thread::current().id() == self.holder {
            &self.counts.on_holder
        } else {
            &self.counts.elsewhere
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.inner.wake_by_ref();
    }
}

/// A future whose wakes are counted by the thread they come from.
struct Counted<F> {
    future: F,
    holder: ThreadId,
    counts: Arc<WakeCounts>,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::new(CountingWaker {
            inner: context.waker().clone(),
            holder: self.holder,
            counts: self.counts.clone(),
        }));
        Pin::new(&mut self.future).poll(&mut Context::from_waker(&waker))
    }
}

/// Polls `future` once with a waker that does nothing: `Some` when it is done.
fn poll_once<T>(future: &mut IoFuture<T>) -> Option<T> {
    let waker = Waker::noop();
    match Pin::new(future).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// A scheduler on `choice` (`None`, reason printed, where io_uring is
/// refused) with a fresh scratch file `name` open on it.
fn scheduler_and_file(
    choice: BackendChoice,
    name: &str,
) -> Option<(Scheduler, tailguard::File, PathBuf)> {
    let scheduler = common::build_on(choice, Scheduler::builder())?;
    let path = common::scratch("hold-engine-tests", name);
    let file = common::open_read_write(&scheduler, &path);
    Some((scheduler, file, path))
}

/// Runs `case` under the watchdog on each backend with two schedulers: the
/// first with a fresh scratch file `name` open on it, and a second one.
fn with_two_schedulers(name: &'static str, case: fn(&Scheduler, &tailguard::File, &Scheduler)) {
    common::watched(WATCHDOG, move || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let Some((first, file, path)) =
                scheduler_and_file(choice, &format!("{name}-{choice:?}"))
            else {
                continue;
            };
            let Some(second) = common::build_on(choice, Scheduler::builder()) else {
                continue;
            };
            case(&first, &file, &second);
            drop(file);
            drop(first);
            drop(second);
            let _ = std::fs::remove_file(path);
        }
    });
}

/// Reads waited on one at a time beside a stream of writes kept in flight,
/// with the engine held by this thread. Returns the wake counts of the reads.
fn reads_beside_a_write_stream(choice: BackendChoice) -> Option<WakeCounts> {
    let (scheduler, file, path) = scheduler_and_file(choice, &format!("{choice:?}"))?;
    // Written, not sparse: a read of a hole may complete inside the submit
    // call (no device I/O), answered before its first poll, and then no
    // wake-up shows who delivered it.
    std::fs::write(&path, vec![0x5a_u8; FILE_BYTES as usize]).unwrap();
    let reads = scheduler.add_class("reads", 400).unwrap();
    let writes = scheduler.add_class("writes", 100).unwrap();
    let counts = Arc::new(WakeCounts::default());
    let holder = std::thread::current().id();
    let hold = scheduler.hold_engine();
    let mut in_flight = VecDeque::new();
    let (mut submitted, mut written) = (0_u64, 0_u64);
    for read in 0..READS {
        while in_flight.len() < WRITES_IN_FLIGHT {
            let buffer = AlignedBuffer::new(WRITE_BYTES, 4096).unwrap();
            let offset = submitted * WRITE_BYTES as u64 % FILE_BYTES;
            in_flight.push_back(file.write_at(&writes, buffer, offset));
            submitted += 1;
        }
        let buffer = AlignedBuffer::new(4096, 4096).unwrap();
        let offset = read * 7 * 4096 % FILE_BYTES;
        let future = Counted {
            future: file.read_at(&reads, buffer, offset),
            holder,
            counts: counts.clone(),
        };
        let (result, _buffer) = scheduler.block_on(future);
        assert_eq!(result.unwrap(), 4096, "read {read}");
        in_flight.retain_mut(|write| match poll_once(write) {
            Some((result, _buffer)) => {
                assert_eq!(result.unwrap(), WRITE_BYTES);
                written += 1;
                false
            }
            None => true,
        });
    }
    drop(hold);
    for write in in_flight.drain(..) {
        assert_eq!(write.wait().0.unwrap(), WRITE_BYTES);
        written += 1;
    }
    assert_eq!(written, submitted, "every write completes once");
    scheduler.shutdown();
    std::fs::remove_file(&path).unwrap();
    Arc::into_inner(counts)
}

#[test]
fn a_held_engine_delivers_completions_on_the_holding_thread() {
    common::watched(WATCHDOG, || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            if let Some(counts) = reads_beside_a_write_stream(choice) {
                let on_holder = counts.on_holder.load(Ordering::Relaxed);
                let elsewhere = counts.elsewhere.load(Ordering::Relaxed);
                println!("{choice:?}: read wakes on the holder {on_holder}, elsewhere {elsewhere}");
                // The first waits may find the engine thread running (it
                // starts with the scheduler); it yields after its turn.
                assert!(
                    on_holder >= 9 * (on_holder + elsewhere) / 10 && on_holder > 0,
                    "{choice:?}: {elsewhere} of {} wakes came from another thread",
                    on_holder + elsewhere
                );
            }
        }
    });
}

/// A thread holding the engine shuts the scheduler down with writes queued
/// and in flight: the engine thread must finish the shutdown although the
/// holder will not wait again, and every write completes once.
fn shutdown_while_held(choice: BackendChoice, now: bool) -> Option<()> {
    let (scheduler, file, path) =
        scheduler_and_file(choice, &format!("shutdown-{choice:?}-{now}"))?;
    let writes = scheduler.add_class("writes", 100).unwrap();
    let hold = scheduler.hold_engine();
    let futures: Vec<_> = (0..32_u64)
        .map(|index| {
            let buffer = AlignedBuffer::new(WRITE_BYTES, 4096).unwrap();
            file.write_at(&writes, buffer, index * WRITE_BYTES as u64)
        })
        .collect();
    // Some may be in flight: poll one to completion through the hold.
    let mut futures = futures.into_iter();
    let (first, _) = scheduler.block_on(futures.next().unwrap());
    assert_eq!(first.unwrap(), WRITE_BYTES);
    if now {
        scheduler.shutdown_now();
    } else {
        scheduler.shutdown();
    }
    for (index, write) in futures.enumerate() {
        match write.wait().0 {
            // A cancelling shutdown answers a write split into pieces, some
            // in flight and the rest cancelled, with the bytes its pieces in
            // flight wrote from its start.
            Ok(bytes) if now => assert!(
                bytes > 0 && bytes <= WRITE_BYTES,
                "write {index}: {bytes} bytes in a cancelling shutdown"
            ),
            Ok(bytes) => assert_eq!(bytes, WRITE_BYTES, "write {index}"),
            Err(error) => assert!(now, "write {index} failed in a draining shutdown: {error}"),
        }
    }
    drop(hold);
    drop(file);
    std::fs::remove_file(&path).unwrap();
    Some(())
}

#[test]
fn a_thread_holding_the_engine_can_shut_it_down() {
    common::watched(WATCHDOG, || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            for now in [false, true] {
                shutdown_while_held(choice, now);
            }
        }
    });
}

/// A future that is pending at its first poll and woken from another thread
/// right after it, so the `block_on` polling it blocks once (which ends the
/// thread's helping session) before it completes.
struct PendingOnce {
    polled: Option<std::sync::mpsc::Sender<Waker>>,
}

impl Future for PendingOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        match self.polled.take() {
            Some(sender) => {
                sender.send(context.waker().clone()).unwrap();
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

/// A hold moved into the future `block_on` polls and dropped there, after a
/// wait that blocked: the session it kept is closed once, not twice, and the
/// scheduler goes on serving this thread and others.
#[test]
fn a_hold_dropped_inside_block_on_closes_its_session_once() {
    common::watched(WATCHDOG, || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let name = format!("dropped-inside-{choice:?}");
            let Some((scheduler, file, path)) = scheduler_and_file(choice, &name) else {
                continue;
            };
            let class = scheduler.add_class("reads", 100).unwrap();
            let read = |offset: u64| {
                let buffer = AlignedBuffer::new(4096, 4096).unwrap();
                file.read_at(&class, buffer, offset)
            };
            for round in 0..3 {
                let hold = scheduler.hold_engine();
                let (sender, receiver) = std::sync::mpsc::channel::<Waker>();
                let waking = std::thread::spawn(move || receiver.recv().unwrap().wake());
                scheduler.block_on(async move {
                    PendingOnce {
                        polled: Some(sender),
                    }
                    .await;
                    drop(hold);
                    read(4096 * round).await.0.unwrap();
                });
                waking.join().unwrap();
                // Served from another thread, the engine thread's way.
                std::thread::scope(|scope| {
                    scope.spawn(|| read(0).wait().0.unwrap());
                });
            }
            drop(file);
            drop(scheduler);
            let _ = std::fs::remove_file(path);
        }
    });
}

/// A thread holding one scheduler's engine that waits in another
/// scheduler's `block_on` for a request of the first: the held engine must
/// still serve it (the holding thread is not in the first engine's wait).
#[test]
fn a_held_engine_serves_a_request_awaited_in_another_schedulers_block_on() {
    with_two_schedulers("held-other", |held, file, other| {
        let class = held.add_class("reads", 100).unwrap();
        let read = |round: u64| {
            let buffer = AlignedBuffer::new(4096, 4096).unwrap();
            file.read_at(&class, buffer, 4096 * (round % 4))
        };
        let hold = held.hold_engine();
        for round in 0..20u64 {
            other.block_on(read(round)).0.unwrap();
            // The hold goes on serving its own waits in between.
            read(round).wait().0.unwrap();
        }
        // Holding the other engine as well: waits there, for the first.
        let other_hold = other.hold_engine();
        for round in 0..20u64 {
            other.block_on(read(round)).0.unwrap();
        }
        drop(other_hold);
        read(0).wait().0.unwrap();
        drop(hold);
    });
}

/// Unparks the thread that polls.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread without running any engine: only the
/// engine thread (or another helper) can complete it, as under an executor
/// that knows nothing of tailguard.
fn park_on<F: Future + Unpin>(mut future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    loop {
        if let Poll::Ready(value) = Pin::new(&mut future).poll(&mut Context::from_waker(&waker)) {
            return value;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Two engines held on one thread, the holds dropped in the order they
/// were made: each engine then serves requests awaited elsewhere (a hold's
/// session counted twice, or never ended, leaves its engine thread waiting
/// for a helper that is gone).
#[test]
fn holds_of_two_engines_dropped_in_either_order_end_their_sessions_once() {
    with_two_schedulers("order", |first, file, second| {
        let first_class = first.add_class("reads", 100).unwrap();
        let second_class = second.add_class("nops", 100).unwrap();
        for oldest_first in [true, false] {
            let first_hold = first.hold_engine();
            let second_hold = second.hold_engine();
            if oldest_first {
                drop(first_hold);
                drop(second_hold);
            } else {
                drop(second_hold);
                drop(first_hold);
            }
            for round in 0..10u64 {
                let buffer = AlignedBuffer::new(4096, 4096).unwrap();
                park_on(file.read_at(&first_class, buffer, 4096 * (round % 4)))
                    .0
                    .unwrap();
                park_on(second.nop(&second_class)).unwrap();
            }
        }
    });
}

/// A `block_on` of one engine whose future, having helped that engine,
/// waits in another engine's `block_on` for the first one's request, or
/// holds the other engine and waits for its request: neither engine may be
/// left waiting for this thread.
#[test]
fn a_block_on_nested_in_another_engines_leaves_neither_engine_without_a_runner() {
    with_two_schedulers("nest", |outer, file, inner| {
        let outer_class = outer.add_class("reads", 100).unwrap();
        let inner_class = inner.add_class("nops", 100).unwrap();
        let read = |round: u64| {
            let buffer = AlignedBuffer::new(4096, 4096).unwrap();
            file.read_at(&outer_class, buffer, 4096 * (round % 4))
        };
        for round in 0..10u64 {
            outer.block_on(async {
                read(round).await.0.unwrap();
                inner.block_on(read(round + 1)).0.unwrap();
                let _hold = inner.hold_engine();
                inner.nop(&inner_class).await.unwrap();
            });
        }
    });
}
