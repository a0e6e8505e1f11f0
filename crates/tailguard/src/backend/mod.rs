//! Backends: what actually performs the I/O the dispatchers let go.
//!
//! The engine owns exactly one backend, driven by one thread at a time (the
//! engine thread, or a waiter running the engine; see [`crate::engine`]), and
//! talks to it through [`Backend`]: it [`push`](Backend::push)es the operations of one loop iteration,
//! makes one [`submit`](Backend::submit) call (which also sleeps when there is
//! nothing to do), and [`reap`](Backend::reap)s every completion available, in
//! batches. Submitters never touch the backend outside the engine; they wake
//! whoever sleeps in it through its [`EngineWaker`].
//!
//! - [`uring`]: io_uring, the default. One ring, owned by the engine thread.
//! - [`threads`]: a pool of threads doing `pread`/`pwrite`/`fsync`, for kernels or
//!   containers without io_uring (ENOSYS, EPERM from seccomp or
//!   `kernel.io_uring_disabled`, ENOMEM from RLIMIT_MEMLOCK).
//! - `fault` (with the `fault-injection` feature): wraps either of them and
//!   injects errors, short transfers, stalls and disappearance, for tests.
//!
//! [`open_backend`] picks one: `auto` tries io_uring and falls back to threads,
//! logging the reason once; the choice can be forced by configuration or by the
//! `TAILGUARD_BACKEND` environment variable (`io_uring` or `threads`).
//! [`open_backend_with`] also sets up the ring's registered-file table, which
//! `TAILGUARD_REGISTERED_FILES=off` turns off ([`Backend::register_file`]
//! then always declines and ops use plain descriptors).
//!
//! Safety contract: an [`Op`] carries a raw buffer pointer. Whoever pushes it
//! guarantees the buffer stays allocated, and is neither read nor written by
//! anyone else, until the op's completion has been reaped. The engine keeps the
//! request's buffer for exactly that long, even when the future that asked for
//! the I/O was dropped.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod threads;
pub mod uring;

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `pread` into the buffer.
    Read,
    /// `pwrite` from the buffer.
    Write,
    /// `fsync`: data and metadata.
    Fsync,
    /// `fdatasync`: data and what is needed to read it back.
    Fdatasync,
    /// Does nothing; completes with 0. For measuring the engine itself.
    Nop,
}

/// One operation for a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// Returned unchanged in the completion.
    pub user_data: u64,
    /// The file descriptor (ignored by `Nop`).
    pub fd: RawFd,
    /// What to do.
    pub kind: OpKind,
    /// Start of the buffer (reads and writes only; null otherwise).
    pub buffer: *mut u8,
    /// Bytes to transfer (reads and writes only).
    pub length: u32,
    /// File offset in bytes.
    pub offset: u64,
}

// SAFETY: an Op is plain data; the pointer is only dereferenced by the kernel or
// by a backend worker while the engine guarantees (see the module docs) that the
// buffer is alive and not touched by anyone else.
unsafe impl Send for Op {}

/// A finished operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpResult {
    /// The op's `user_data`.
    pub user_data: u64,
    /// Bytes transferred (0 for syncs and nops), or `-errno`.
    pub result: i32,
}

/// Wakes the engine from [`Backend::submit`] with `wait = true`.
pub trait EngineWaker: Send + Sync {
    /// Makes the engine's current or next wait return promptly.
    fn wake(&self);
}

/// Waits for a backend's next completion without borrowing the backend, so
/// that other threads may drive it meanwhile ([`Backend::completion_wait`]).
pub trait CompletionWait: Send + Sync {
    /// Blocks until a completion is available (one already posted ends the
    /// wait at once, whoever reaps it afterwards), the backend's
    /// [`EngineWaker`] is woken, or `timeout` has passed. May return early.
    fn wait(&self, timeout: Option<Duration>);
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendChoice {
    /// io_uring if it works here, else threads (logged once, with the reason).
    Auto,
    /// io_uring or an error.
    IoUring,
    /// The thread pool.
    Threads,
}

/// The backend in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// io_uring.
    IoUring,
    /// The thread pool.
    Threads,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::IoUring => "io_uring",
            Self::Threads => "threads",
        })
    }
}

/// A backend; see the module docs.
pub trait Backend: Send {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Queues an op for the next [`Backend::submit`]. Returns it back when the
    /// submission queue is full (submit, then push again).
    ///
    /// # Safety
    ///
    /// For reads and writes, `op.buffer` must point to `op.length` bytes that stay
    /// allocated and untouched by anyone else until this op's completion has been
    /// returned by [`Backend::reap`].
    unsafe fn push(&mut self, op: Op) -> Result<(), Op>;

    /// Submits everything pushed in one call. With `wait`, then blocks until at
    /// least one completion is available or the waker is woken.
    fn submit(&mut self, wait: bool) -> io::Result<()>;

    /// Like `submit(true)`, but the wait also ends once `timeout` has passed:
    /// the engine wakes then for work held by a rate limit. A timeout is not
    /// an error.
    fn submit_wait_timeout(&mut self, timeout: Duration) -> io::Result<()>;

    /// Whether [`Backend::submit_wait_timeout`] sees a completion as soon as
    /// `submit(true)` would; false where the timed wait polls instead
    /// (io_uring without `IORING_FEAT_EXT_ARG`, before Linux 5.11), so a
    /// caller timing latencies waits untimed there.
    fn timed_wait_is_precise(&self) -> bool {
        true
    }

    /// Appends every available completion to `out`.
    fn reap(&mut self, out: &mut Vec<OpResult>);

    /// The waker submitters use while the engine sleeps in `submit`.
    fn waker(&self) -> Arc<dyn EngineWaker>;

    /// Ops pushed and not yet reaped.
    fn in_flight(&self) -> usize;

    /// A handle that waits for completions while other threads push, submit
    /// and reap ([`CompletionWait`]), where this backend has one (io_uring on
    /// a ring any thread may enter, with timed waits). `None` (the default):
    /// only [`Backend::submit`] waits.
    fn completion_wait(&self) -> Option<Arc<dyn CompletionWait>> {
        None
    }

    /// Makes sure a wake through [`Backend::waker`] ends a
    /// [`CompletionWait::wait`] begun after this call (io_uring: re-arms the
    /// wake read if a reap took its completion). The default does nothing.
    fn rearm_wake(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Whether [`Backend::register_file`] can succeed at all here (false for
    /// the thread pool, and for a ring without a registered-file table), so
    /// that callers need not track their files otherwise.
    fn registers_files(&self) -> bool {
        false
    }

    /// Registers `fd` so that later ops on it are cheaper (io_uring: a slot of
    /// the ring's registered-file table). Returns whether it is registered;
    /// false (no table, a full one, a descriptor from [`MAX_REGISTERED_FD`]
    /// up, or a refusal, logged once by the backend) leaves ops on `fd` on the
    /// plain descriptor, which always works. The default registers nothing.
    ///
    /// Between this call and [`Backend::unregister_file`], `fd` must stay open
    /// on the same file: ops that name `fd` go to the registered file, whatever
    /// `fd` refers to by then (a misdirected op, not memory unsafety).
    fn register_file(&mut self, fd: RawFd) -> bool {
        let _ = fd;
        false
    }

    /// Forgets `fd`'s registration, if any, before `fd` is closed. Ops pushed
    /// afterwards use the plain descriptor; ops already pushed complete on the
    /// registered file, whose last reference the backend gives up only when
    /// they no longer need it. The default does nothing.
    fn unregister_file(&mut self, fd: RawFd) {
        let _ = fd;
    }
}

/// Slots of the registered-file table the engine asks for by default
/// (`SchedulerBuilder::registered_files`): as many files as the common
/// `RLIMIT_NOFILE` soft limit lets a process open; a process with more open
/// files than slots sends the rest through plain descriptors.
pub const DEFAULT_FILE_SLOTS: u32 = 1024;

/// Descriptors from this number up are never registered (their ops use the
/// plain descriptor): the backend and the engine index their bookkeeping by
/// descriptor number, and this bounds it (a few hundred KiB at most) for a
/// process whose files sit above many sockets.
pub const MAX_REGISTERED_FD: RawFd = 1 << 16;

/// What [`open_backend_with`] sets up beyond [`BackendConfig`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// Slots of the io_uring ring's registered-file table (0: none; see
    /// [`uring`], "Registered files"). The thread pool ignores it.
    pub file_slots: u32,
}

/// How to build a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendConfig {
    /// Which backend.
    pub choice: BackendChoice,
    /// Submission queue entries (io_uring) or most ops in flight (threads).
    pub ring_depth: u32,
    /// Worker threads of the thread-pool backend.
    pub threads: usize,
    /// Whether threads other than the creator may drive the backend (waiters
    /// that run the engine): the io_uring ring is then set up without
    /// `SINGLE_ISSUER`/`DEFER_TASKRUN` (see [`uring`]).
    pub shared_ring: bool,
}

/// Builds the backend `config` asks for; see the module docs for `auto`.
/// `TAILGUARD_BACKEND` (`io_uring`, `threads` or `auto`) overrides the choice.
/// The io_uring ring has no registered-file table (see [`open_backend_with`]).
pub fn open_backend(config: BackendConfig) -> io::Result<Box<dyn Backend>> {
    open_backend_with(config, BackendOptions::default())
}

/// [`open_backend`] with `options`. `TAILGUARD_REGISTERED_FILES=off` turns the
/// registered-file table off whatever `options` say (`auto`, or unset: as
/// they say).
pub fn open_backend_with(
    config: BackendConfig,
    options: BackendOptions,
) -> io::Result<Box<dyn Backend>> {
    let file_slots = match std::env::var("TAILGUARD_REGISTERED_FILES").ok().as_deref() {
        Some("off") => 0,
        Some("auto") | None => options.file_slots,
        Some(other) => {
            return Err(crate::Error::invalid_config(format!(
                "TAILGUARD_REGISTERED_FILES={other} is not a setting; use off or auto"
            ))
            .into())
        }
    };
    let uring_options = uring::UringOptions {
        shared: config.shared_ring,
        file_slots,
        refuse_file_table: None,
    };
    let open_uring = move |depth| uring::Uring::with_options(depth, uring_options);
    let choice = match std::env::var("TAILGUARD_BACKEND").ok().as_deref() {
        Some("io_uring") => BackendChoice::IoUring,
        Some("threads") => BackendChoice::Threads,
        Some("auto") | None => config.choice,
        Some(other) => {
            return Err(crate::Error::invalid_config(format!(
                "TAILGUARD_BACKEND={other} is not a backend; use io_uring, threads or auto"
            ))
            .into())
        }
    };
    match choice {
        BackendChoice::Threads => Ok(Box::new(threads::ThreadPool::new(
            config.threads,
            config.ring_depth,
        )?)),
        BackendChoice::IoUring => Ok(Box::new(open_uring(config.ring_depth)?)),
        BackendChoice::Auto => auto(config, open_uring),
    }
}

/// Tries io_uring through `open_uring`, falls back to threads when it is refused,
/// and logs the choice once with the reason. Generic over the opener so tests can
/// simulate a refusal (EPERM) without a seccomp filter.
pub fn auto<U: Backend + 'static>(
    config: BackendConfig,
    open_uring: impl FnOnce(u32) -> io::Result<U>,
) -> io::Result<Box<dyn Backend>> {
    match open_uring(config.ring_depth) {
        Ok(ring) => {
            tracing::info!(backend = "io_uring", "tailguard backend: io_uring");
            Ok(Box::new(ring))
        }
        Err(error) => {
            let reason = refusal_reason(&error);
            tracing::warn!(
                backend = "threads",
                %error,
                reason,
                "io_uring is unavailable ({reason}: {error}); tailguard falls back to its thread pool"
            );
            Ok(Box::new(threads::ThreadPool::new(
                config.threads,
                config.ring_depth,
            )?))
        }
    }
}

/// Why io_uring was refused, in words that name the fix.
pub fn refusal_reason(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring (older than 5.1)",
        Some(libc::EPERM) => {
            "io_uring is forbidden here (a seccomp profile such as Docker's default, \
             or kernel.io_uring_disabled)"
        }
        Some(libc::ENOMEM) => "RLIMIT_MEMLOCK is too low for the ring; raise it with ulimit -l",
        Some(libc::EINVAL) => "the kernel rejected the ring's parameters",
        Some(libc::EOPNOTSUPP) => {
            "the kernel's io_uring lacks plain reads and writes or keeps no \
             completion it cannot post at once (older than 5.6)"
        }
        _ => "io_uring setup failed",
    }
}
