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
//! Dropping the pool raises the shutdown flag and wakes every worker. A worker
//! finishes the op it is running and then exits without taking more; ops still
//! queued are abandoned unexecuted. When no op is running, the pool joins its
//! workers, so none is left once the drop returns. That is the usual case: the
//! engine drains every op before dropping its backend (see the safety contract
//! in [`super`]), so the queue is empty and no worker is running anything.
//!
//! An engine that panicked does not drain, and a worker may then be blocked in
//! a read or sync on a hung device that never returns; joining it would block
//! the thread unwinding from the panic forever. So when ops are still running
//! the pool logs a warning and detaches its workers instead of joining them. A
//! detached worker touches only the state it holds its own [`Arc`] to (the
//! queue and the completion list, freed with the last of them) and its op's
//! buffer and descriptor, which the panicked engine leaks, as it leaks those of
//! every op it had handed over: they stay valid and name the right file. The
//! worker publishes its result to a list nobody reaps, and exits. Whoever else
//! drops a pool with ops running must likewise keep their buffers and
//! descriptors for good, as [`Backend::push`] requires until a completion is
//! reaped.

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

    /// Raises the shutdown flag and wakes every worker; returns how many ops
    /// a worker is running still (see "Drop order" in the module docs).
    fn shut_down(&mut self) -> usize {
        let queued = {
            let mut work = lock(&self.shared.work);
            work.shutdown = true;
            work.queue.len()
        };
        self.shared.work_ready.notify_all();
        // `in_flight` counts the ops staged, queued, running, and finished but
        // not reaped. Once the flag is up no worker takes a queued op, so the
        // ops neither staged, queued nor finished are the ones running (or
        // finished since `finished` was read).
        let finished = lock(&self.shared.done).results.len();
        self.in_flight
            .saturating_sub(self.staged.len() + queued + finished)
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
    /// Stops the workers: each finishes the op it is running, and queued ops
    /// are abandoned. Joins them when no op is running, and detaches them
    /// when one is, since it may never return (see "Drop order" in the module
    /// docs).
    fn drop(&mut self) {
        let running = self.shut_down();
        if running == 0 {
            for worker in self.workers.drain(..) {
                // A worker that panicked has nothing left to clean up.
                let _ = worker.join();
            }
            return;
        }
        tracing::warn!(
            running,
            workers = self.workers.len(),
            "tailguard thread pool dropped with ops still running, as an engine that \
             panicked leaves it (see the error logged before this): its workers are \
             detached to finish them and exit on their own"
        );
        // Dropping a handle detaches its thread.
        self.workers.clear();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// Waits until `done` holds, looking every 10 ms; false if it still does
    /// not after 30 s. A hang detector, not a measure of speed.
    fn eventually(mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    #[test]
    fn drop_joins_the_workers_when_no_op_is_running() {
        let mut pool = ThreadPool::new(2, 4).unwrap();
        let shared = pool.shared.clone();
        let nop = Op {
            user_data: 1,
            fd: -1,
            kind: OpKind::Nop,
            buffer: std::ptr::null_mut(),
            length: 0,
            offset: 0,
        };
        // SAFETY: a nop has no buffer.
        unsafe { pool.push(nop) }.unwrap();
        pool.submit(false).unwrap();
        assert!(eventually(|| !lock(&shared.done).results.is_empty()));
        assert_eq!(pool.in_flight(), 1, "finished, not reaped");
        assert_eq!(pool.shut_down(), 0, "a finished op is not running");
        drop(pool);
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "every worker has exited, dropping its share of the state"
        );
    }

    /// `struct uffdio_api` of `linux/userfaultfd.h`.
    #[repr(C)]
    struct UffdioApi {
        api: u64,
        features: u64,
        ioctls: u64,
    }

    /// `struct uffdio_register` of `linux/userfaultfd.h`.
    #[repr(C)]
    struct UffdioRegister {
        start: u64,
        len: u64,
        mode: u64,
        ioctls: u64,
    }

    /// A page of memory that traps its first access, the kernel's copy in a
    /// `pread` included, until the userfaultfd it is registered with is
    /// closed: nobody serves the fault, so the access waits for it.
    struct TrapPage {
        uffd: OwnedFd,
        page: *mut u8,
        len: usize,
    }

    impl TrapPage {
        /// `Err` names why the kernel refuses (userfaultfd needs root, or
        /// `vm.unprivileged_userfaultfd=1`). rustix's wrappers for
        /// userfaultfd and mmap need its `mm` feature, which this crate does
        /// not enable, so the calls go through libc.
        fn new() -> Result<TrapPage, String> {
            // SAFETY: sysconf reads a constant of the system.
            let len = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            // SAFETY: userfaultfd takes only flags and returns a new descriptor.
            let fd =
                unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
            if fd < 0 {
                return Err(format!("userfaultfd: {}", io::Error::last_os_error()));
            }
            // SAFETY: the descriptor is new and owned by nothing else.
            let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            const API: rustix::ioctl::Opcode =
                rustix::ioctl::opcode::read_write::<UffdioApi>(0xaa, 0x3f);
            let mut api = UffdioApi {
                api: 0xaa,
                features: 0,
                ioctls: 0,
            };
            // SAFETY: UFFDIO_API reads and writes one `uffdio_api`, which
            // `UffdioApi` lays out exactly.
            let updater = unsafe { rustix::ioctl::Updater::<API, UffdioApi>::new(&mut api) };
            // SAFETY: as above: the opcode and the argument's type match.
            unsafe { rustix::ioctl::ioctl(&uffd, updater) }
                .map_err(|error| format!("UFFDIO_API: {error}"))?;
            // SAFETY: a new private anonymous mapping, placed by the kernel
            // where nothing else is mapped.
            let page = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if page == libc::MAP_FAILED {
                return Err(format!("mmap: {}", io::Error::last_os_error()));
            }
            let trap = TrapPage {
                uffd,
                page: page.cast(),
                len,
            };
            const REGISTER: rustix::ioctl::Opcode =
                rustix::ioctl::opcode::read_write::<UffdioRegister>(0xaa, 0x00);
            let mut register = UffdioRegister {
                start: page as u64,
                len: len as u64,
                // UFFDIO_REGISTER_MODE_MISSING: trap pages not yet present.
                mode: 1,
                ioctls: 0,
            };
            // SAFETY: UFFDIO_REGISTER reads and writes one `uffdio_register`,
            // which `UffdioRegister` lays out exactly.
            let updater =
                unsafe { rustix::ioctl::Updater::<REGISTER, UffdioRegister>::new(&mut register) };
            // SAFETY: as above: the opcode and the argument's type match.
            unsafe { rustix::ioctl::ioctl(&trap.uffd, updater) }
                .map_err(|error| format!("UFFDIO_REGISTER: {error}"))?;
            Ok(trap)
        }

        /// Whether an access waits in the trap now (reads the fault's event).
        fn sprung(&self) -> bool {
            let mut message = [0u8; 32];
            // `struct uffd_msg`: the event first, UFFD_EVENT_PAGEFAULT 0x12.
            rustix::io::read(&self.uffd, &mut message).is_ok() && message[0] == 0x12
        }

        /// Closes the userfaultfd, which lets a waiting access go on; returns
        /// the page, to be unmapped with `unmap` once nobody uses it.
        fn release(self) -> (*mut u8, usize) {
            (self.page, self.len)
        }
    }

    /// Unmaps a page [`TrapPage::release`] returned.
    ///
    /// # Safety
    ///
    /// Nobody may use the page any more.
    unsafe fn unmap(page: *mut u8, len: usize) {
        // SAFETY: the page is a mapping of `len` bytes that nobody uses, by
        // the caller's guarantee.
        unsafe { libc::munmap(page.cast(), len) };
    }

    #[test]
    fn drop_detaches_the_workers_when_an_op_is_stuck() {
        let trap = match TrapPage::new() {
            Ok(trap) => trap,
            Err(reason) => {
                eprintln!(
                    "skipped: no userfaultfd to hold a read ({reason}); \
                     run as root or with vm.unprivileged_userfaultfd=1"
                );
                return;
            }
        };
        let path =
            std::env::temp_dir().join(format!("tailguard-threads-stuck-{}", std::process::id()));
        std::fs::write(&path, vec![0x5a; trap.len]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let mut pool = ThreadPool::new(1, 4).unwrap();
        let shared = pool.shared.clone();
        let read = Op {
            user_data: 7,
            fd: file.as_raw_fd(),
            kind: OpKind::Read,
            buffer: trap.page,
            length: trap.len as u32,
            offset: 0,
        };
        // SAFETY: the page stays mapped, and untouched by this thread, until
        // the worker has exited below (or for good, should the test fail).
        unsafe { pool.push(read) }.unwrap();
        pool.submit(false).unwrap();
        assert!(
            eventually(|| trap.sprung()),
            "the worker's read reaches the trapped page"
        );

        // The worker is stuck in its read, as on a hung device.
        assert_eq!(pool.shut_down(), 1, "the read is running");
        let dropper = std::thread::spawn(move || drop(pool));
        let dropped = eventually(|| dropper.is_finished());
        // Free the read either way, so that a failed test ends too.
        let (page, len) = trap.release();
        assert!(
            dropped,
            "dropping the pool waits for a worker stuck in its op"
        );
        dropper.join().unwrap();

        assert!(
            eventually(|| Arc::strong_count(&shared) == 1),
            "the detached worker exits once its read returns"
        );
        let results = std::mem::take(&mut lock(&shared.done).results);
        let expected = OpResult {
            user_data: 7,
            result: len as i32,
        };
        assert_eq!(results, [expected], "the read completes in full");
        // SAFETY: the worker that read into the page has exited.
        let bytes = unsafe { std::slice::from_raw_parts(page, len) };
        assert!(bytes.iter().all(|&byte| byte == 0x5a), "the file's bytes");
        // SAFETY: as above, and `bytes` is not used past this point.
        unsafe { unmap(page, len) };
        drop(file);
    }
}
