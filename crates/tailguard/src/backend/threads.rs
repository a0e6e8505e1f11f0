//! The thread-pool backend: `pread`/`pwrite`/`fsync`/`fdatasync` on worker threads,
//! for kernels and containers without io_uring.
//!
//! # Batching
//!
//! [`Backend::push`] only stages the op in a `Vec` owned by the engine thread;
//! [`Backend::submit`] moves every staged op into the shared work queue under one
//! lock acquisition and wakes as many workers as it handed ops. Workers take one
//! op at a time, make a single system call for it (retried only on EINTR; a short
//! transfer is reported as such) and append the [`OpResult`] to the shared
//! completion list, which [`Backend::reap`] empties in one lock acquisition.
//! `depth` bounds staged plus submitted-but-not-reaped ops: past it `push` hands
//! the op back.
//!
//! # Growth
//!
//! The pool starts with the threads it was given and adds one whenever
//! `submit` hands over an op that no idle worker can take at once, up to
//! `depth` (the most ops in flight, so never more threads than ops). A worker
//! blocks in its system call for as long as the device takes, so with a fixed
//! number of threads a device that stalls (a failing USB stick) would hold
//! every thread, and the ops of every other device would wait behind it: the
//! pool would be one in-flight limit shared by all devices, the trap of the
//! seed-001 report (docs/problems.md). Growing instead leaves each device's
//! dispatcher budget as the only limit on its requests in flight. Threads,
//! once started, stay until the pool is dropped.
//!
//! # Wake-up
//!
//! `submit(true)` sleeps on the completion condvar until the completion list is
//! not empty or the `woken` flag (set by [`EngineWaker::wake`], under the same
//! mutex) is up, and clears the flag as it returns: a wake that arrives while the
//! engine is busy makes its next wait return at once, so none is lost.
//! `submit_wait_timeout` waits the same way, with a deadline.
//!
//! # Drop order
//!
//! Dropping the pool raises the shutdown flag, wakes every worker and joins them.
//! A worker finishes the op it is running and then exits without taking more;
//! ops still queued are abandoned unexecuted. Buffers stay valid throughout
//! because the engine drains every op before dropping its backend (see the
//! safety contract in [`super`]), so at that point the queue is empty and no
//! worker is running anything. An engine that panicked does not drain: it
//! leaks the buffers and descriptors of the ops it had handed over instead,
//! so the workers that still run them touch only live memory and the right
//! files.

use super::{Backend, BackendKind, EngineWaker, Op, OpKind, OpResult};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The work queue: ops handed over by `submit`, not yet taken by a worker.
struct Work {
    queue: VecDeque<Op>,
    /// Workers waiting for an op (or woken and about to take one).
    idle: usize,
    shutdown: bool,
}

/// The completion side: results not yet reaped, and the wake flag.
struct Done {
    results: Vec<OpResult>,
    woken: bool,
}

/// State shared by the engine, the workers and the waker.
struct Shared {
    work: Mutex<Work>,
    work_ready: Condvar,
    done: Mutex<Done>,
    done_ready: Condvar,
}

/// Locks `mutex`, ignoring poisoning: every critical section here leaves the
/// protected data consistent (pushes and drains of plain values), and a worker
/// never panics while holding a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A pool of threads doing `pread`/`pwrite`/`fsync`; see the module docs.
pub struct ThreadPool {
    shared: Arc<Shared>,
    /// Ops pushed since the last submit.
    staged: Vec<Op>,
    /// Most ops staged or in flight.
    depth: usize,
    /// Ops pushed and not yet reaped (staged ones included).
    in_flight: usize,
    workers: Vec<JoinHandle<()>>,
    waker: Arc<PoolWaker>,
}

impl ThreadPool {
    /// `threads` workers to start with (more are added as ops need them, up
    /// to `depth`; see the module docs); at most `depth` ops in flight. Both
    /// must be at least 1.
    pub fn new(threads: usize, depth: u32) -> io::Result<Self> {
        if threads == 0 || depth == 0 {
            return Err(crate::Error::invalid_config(format!(
                "the thread-pool backend needs at least one thread and a depth of at least 1 \
                 (got {threads} threads, depth {depth})"
            ))
            .into());
        }
        let shared = Arc::new(Shared {
            work: Mutex::new(Work {
                queue: VecDeque::with_capacity(depth as usize),
                idle: 0,
                shutdown: false,
            }),
            work_ready: Condvar::new(),
            done: Mutex::new(Done {
                results: Vec::with_capacity(depth as usize),
                woken: false,
            }),
            done_ready: Condvar::new(),
        });
        let mut pool = Self {
            waker: Arc::new(PoolWaker {
                shared: shared.clone(),
            }),
            shared,
            staged: Vec::with_capacity(depth as usize),
            depth: depth as usize,
            in_flight: 0,
            workers: Vec::with_capacity(threads),
        };
        for _ in 0..threads.min(pool.depth) {
            // On error `pool` is dropped, which stops and joins the workers
            // already started.
            pool.add_worker(false)?;
        }
        Ok(pool)
    }

    /// Starts one more worker; `counted_idle`: the caller counted it in
    /// `Work::idle` already (it comes for an op in the queue).
    fn add_worker(&mut self, counted_idle: bool) -> io::Result<()> {
        let shared = self.shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("tailguard-io-{}", self.workers.len()))
            .spawn(move || worker(&shared, counted_idle))?;
        self.workers.push(worker);
        Ok(())
    }

    /// Workers running now (those started with the pool and those added).
    pub fn threads(&self) -> usize {
        self.workers.len()
    }
}

/// A worker: takes ops one at a time until shutdown. `counted_idle`: it was
/// counted in `Work::idle` when started, and uncounts itself first.
fn worker(shared: &Shared, counted_idle: bool) {
    if counted_idle {
        lock(&shared.work).idle -= 1;
    }
    loop {
        let op = {
            let mut work = lock(&shared.work);
            loop {
                if work.shutdown {
                    return;
                }
                if let Some(op) = work.queue.pop_front() {
                    break op;
                }
                work.idle += 1;
                work = shared
                    .work_ready
                    .wait(work)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                work.idle -= 1;
            }
        };
        // SAFETY: the op was pushed under the `Backend::push` contract: its buffer
        // is alive and untouched by anyone else until its completion is reaped,
        // which cannot happen before the result below is published.
        let result = unsafe { perform(&op) };
        let mut done = lock(&shared.done);
        done.results.push(OpResult {
            user_data: op.user_data,
            result,
        });
        drop(done);
        shared.done_ready.notify_one();
    }
}

/// Runs one op with a single system call (repeated only on EINTR); returns the
/// bytes transferred, 0, or `-errno`.
///
/// # Safety
///
/// For reads and writes, `op.buffer` must point to `op.length` bytes that nobody
/// else reads or writes during the call.
unsafe fn perform(op: &Op) -> i32 {
    let offset = || libc::off_t::try_from(op.offset).ok();
    match op.kind {
        OpKind::Read => match offset() {
            // SAFETY: the caller guarantees `op.length` writable bytes at
            // `op.buffer`; the kernel validates the descriptor.
            Some(offset) => retry_on_eintr(|| unsafe {
                libc::pread(
                    op.fd,
                    op.buffer.cast::<libc::c_void>(),
                    op.length as usize,
                    offset,
                )
            }),
            None => -libc::EINVAL,
        },
        OpKind::Write => match offset() {
            // SAFETY: the caller guarantees `op.length` readable bytes at
            // `op.buffer`; the kernel validates the descriptor.
            Some(offset) => retry_on_eintr(|| unsafe {
                libc::pwrite(
                    op.fd,
                    op.buffer.cast_const().cast::<libc::c_void>(),
                    op.length as usize,
                    offset,
                )
            }),
            None => -libc::EINVAL,
        },
        // SAFETY: fsync takes no pointers; the kernel validates the descriptor.
        OpKind::Fsync => retry_on_eintr(|| unsafe { libc::fsync(op.fd) } as isize),
        // SAFETY: as above.
        OpKind::Fdatasync => retry_on_eintr(|| unsafe { libc::fdatasync(op.fd) } as isize),
        OpKind::Nop => 0,
    }
}

/// Makes `call` (one system call) until it does not fail with EINTR; returns its
/// result (bytes, or 0 for syncs) or `-errno`.
fn retry_on_eintr(mut call: impl FnMut() -> isize) -> i32 {
    loop {
        let returned = call();
        if returned >= 0 {
            // Linux transfers at most 0x7fff_f000 bytes per call, so this fits.
            return i32::try_from(returned).unwrap_or(i32::MAX);
        }
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return -errno;
        }
    }
}

impl ThreadPool {
    /// Sleeps until a completion is listed, the waker is woken, or `deadline`.
    fn wait_for_completion(&self, deadline: Option<Instant>) {
        let mut done = lock(&self.shared.done);
        while done.results.is_empty() && !done.woken {
            done = match deadline {
                None => self
                    .shared
                    .done_ready
                    .wait(done)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    self.shared
                        .done_ready
                        .wait_timeout(done, deadline - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
        done.woken = false;
    }
}

impl Backend for ThreadPool {
    fn kind(&self) -> BackendKind {
        BackendKind::Threads
    }

    unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
        if self.in_flight >= self.depth {
            return Err(op);
        }
        self.staged.push(op);
        self.in_flight += 1;
        Ok(())
    }

    fn submit(&mut self, wait: bool) -> io::Result<()> {
        let handed = self.staged.len();
        if handed > 0 {
            let mut work = lock(&self.shared.work);
            work.queue.extend(self.staged.drain(..));
            // Ops no idle worker will take: each gets a new worker, counted
            // idle from now on so that the next submit does not count it
            // again before it has taken its op.
            let unserved = work.queue.len().saturating_sub(work.idle);
            let added = unserved.min(self.depth.saturating_sub(self.workers.len()));
            work.idle += added;
            drop(work);
            for index in 0..added {
                if let Err(error) = self.add_worker(true) {
                    // The ops wait for a busy worker instead: slower, not lost.
                    lock(&self.shared.work).idle -= added - index;
                    tracing::warn!(%error, "tailguard thread pool: could not add a worker");
                    break;
                }
            }
            if handed >= self.workers.len() {
                self.shared.work_ready.notify_all();
            } else {
                for _ in 0..handed {
                    self.shared.work_ready.notify_one();
                }
            }
        }
        if wait {
            self.wait_for_completion(None);
        }
        Ok(())
    }

    fn submit_wait_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.submit(false)?;
        self.wait_for_completion(Some(Instant::now() + timeout));
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<OpResult>) {
        let mut done = lock(&self.shared.done);
        let reaped = done.results.len();
        out.append(&mut done.results);
        drop(done);
        self.in_flight -= reaped;
    }

    fn waker(&self) -> Arc<dyn EngineWaker> {
        self.waker.clone()
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for ThreadPool {
    /// Stops and joins the workers. Each finishes the op it is running; queued
    /// ops are abandoned. The engine drains before dropping its backend, so no op
    /// is running or queued here and no buffer is touched after this returns.
    fn drop(&mut self) {
        lock(&self.shared.work).shutdown = true;
        self.shared.work_ready.notify_all();
        for worker in self.workers.drain(..) {
            // A worker that panicked has nothing left to clean up.
            let _ = worker.join();
        }
    }
}

/// Sets the `woken` flag and wakes the engine's wait.
struct PoolWaker {
    shared: Arc<Shared>,
}

impl EngineWaker for PoolWaker {
    fn wake(&self) {
        lock(&self.shared.done).woken = true;
        // Only the engine thread waits on this condvar.
        self.shared.done_ready.notify_all();
    }
}
