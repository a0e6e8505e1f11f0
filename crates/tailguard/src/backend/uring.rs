//! The io_uring backend: one ring, owned by the engine thread.
//!
//! # Ring setup
//!
//! [`Uring::new`] asks for `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
//! IORING_SETUP_COOP_TASKRUN` (the cheapest completion path for a ring with one
//! submitting thread) and, when the kernel answers EINVAL (too old for one of them),
//! retries with fewer: single issuer + cooperative task run, then cooperative task
//! run alone, then none. Which features were dropped is logged once per process.
//! Any other setup error (ENOSYS, EPERM, ENOMEM) is returned as is, raw errno
//! intact, so that [`super::auto`] can name the reason and fall back.
//!
//! [`Uring::new_shared`] sets none of them, for a ring that waiters running the
//! engine drive in turn (see [`crate::engine`]): `SINGLE_ISSUER` would refuse
//! their `io_uring_enter` (EEXIST); `DEFER_TASKRUN` (which needs it) posts
//! completions only when the submitting task enters again; and
//! `COOP_TASKRUN` leaves the completion work of a request queued on the task that
//! submitted it, without interrupting it, so a helper that submitted other
//! threads' requests and then went to sleep elsewhere would hold their
//! completions back from whoever waits in the ring. Without them the kernel
//! interrupts the submitting task to post a completion, which costs little
//! where, as at low queue depth, the submitter is the waiter.
//!
//! With `SINGLE_ISSUER` the kernel binds the ring to the thread that created it:
//! `io_uring_enter` from any other thread fails with EEXIST. The engine creates its
//! backend on its own thread and never lets it leave, so this holds; [`Uring`] is
//! `Send` only so that it fits `Box<dyn Backend>`, and must be created and used
//! on one thread.
//!
//! # Batching
//!
//! [`Backend::push`] only writes a submission queue entry; [`Backend::submit`]
//! hands all of them to the kernel in one `io_uring_enter`, which with `wait` also
//! sleeps until at least one completion is posted. [`Backend::reap`] copies every
//! posted completion out of the completion queue in one pass. With
//! `DEFER_TASKRUN` the kernel posts completions only inside `io_uring_enter`, so
//! every enter here carries `GETEVENTS` and `reap` returns what the last `submit`
//! posted: the engine's loop (push, submit, reap) is what makes progress.
//!
//! `depth` bounds the ops pushed between two submits (the submission queue), not
//! the ops in flight: the engine's budgets bound those. Completions beyond the
//! completion queue's size (twice the depth) are kept by the kernel
//! (`IORING_FEAT_NODROP`) and posted as room frees up; an older kernel that
//! answers EBUSY instead gets its completion queue emptied into a side list
//! (returned by the next `reap`) before `submit` retries.
//!
//! # Wake-up
//!
//! The backend owns an `eventfd` and keeps one 8-byte read of it in flight in the
//! ring, tagged with the reserved user data [`WAKE_USER_DATA`] and reading into a
//! boxed buffer whose address never changes. [`EngineWaker::wake`] writes 1 to the
//! eventfd, which completes that read, which ends the engine's
//! `io_uring_enter` wait. [`Backend::reap`] swallows the read's completion (the
//! engine never sees it) and the next [`Backend::submit`] re-arms it; a wake that
//! lands while the read is not armed stays in the eventfd's counter and completes
//! the re-armed read at once, so no wake is lost. One submission queue slot is kept
//! free for the re-arm whenever the read is not armed.
//!
//! The eventfd is opened *without* `EFD_NONBLOCK`: older kernels (5.x, where
//! `io_prep_rw` marks every `O_NONBLOCK` file "no async punt") answer an io_uring
//! read of an empty `O_NONBLOCK` eventfd with `-EAGAIN` instead of waiting, which
//! would turn the wake read into a busy loop; newer ones poll either way. A blocking
//! eventfd is waited on by poll (or an io-wq worker) inside the kernel; the
//! waker's `write` of 1 could only block if the counter reached `u64::MAX - 1`,
//! which 2^64 wakes without a single read would take.
//!
//! # Drop order
//!
//! Dropping the ring (closing its file descriptor) makes the kernel cancel what it
//! can and wait for the rest, so a user op still in flight would complete into its
//! buffer during teardown: the engine drains every op before dropping the backend
//! (see the safety contract in [`super`]). The wake read is always in flight, so
//! its buffer and the eventfd are declared after the ring in [`Uring`] and are
//! therefore dropped after it.

use super::{Backend, BackendKind, EngineWaker, Op, OpKind, OpResult};
use io_uring::{opcode, types, EnterFlags, IoUring};
use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The user data of the backend's own eventfd read. Engine ops must not use it.
pub const WAKE_USER_DATA: u64 = u64::MAX;

/// A ring any thread may enter (waiters that run the engine): none of the
/// features that bind the ring or its completions to one task.
const SHARED_SETUP: [Features; 1] = [Features {
    single_issuer: false,
    defer_taskrun: false,
    coop_taskrun: false,
}];

/// The optional setup flags, most wanted first; each step drops one more feature.
const SETUP_ATTEMPTS: [Features; 4] = [
    Features {
        single_issuer: true,
        defer_taskrun: true,
        coop_taskrun: true,
    },
    Features {
        single_issuer: true,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    Features {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: true,
    },
    Features {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: false,
    },
];

/// Set once the dropped ring features have been logged.
static FEATURES_LOGGED: AtomicBool = AtomicBool::new(false);

/// Optional ring setup features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `IORING_SETUP_SINGLE_ISSUER` (Linux 6.0).
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (Linux 6.1; needs single issuer).
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN` (Linux 5.19).
    pub coop_taskrun: bool,
}

impl Features {
    fn dropped_from_best(self) -> Vec<&'static str> {
        let mut dropped = Vec::new();
        if !self.single_issuer {
            dropped.push("single_issuer");
        }
        if !self.defer_taskrun {
            dropped.push("defer_taskrun");
        }
        if !self.coop_taskrun {
            dropped.push("coop_taskrun");
        }
        dropped
    }
}

/// One io_uring ring owned by the engine thread; see the module docs.
///
/// Must be created and used on one thread (the ring may be set up with
/// `SINGLE_ISSUER`).
pub struct Uring {
    // Field order is drop order: the ring goes first, so that the kernel is done
    // with the wake read before its buffer and its eventfd are released.
    /// The ring.
    ring: IoUring,
    /// Where the wake read writes the eventfd's counter. Boxed: its address must
    /// not move while the read is in flight, which is always.
    wake_buffer: Box<UnsafeCell<u64>>,
    /// Owns the eventfd; shared with submitters.
    waker: Arc<EventFdWaker>,
    /// Whether the wake read is in the ring (queued or in flight).
    wake_armed: bool,
    /// The features the kernel accepted.
    features: Features,
    /// User ops pushed and not yet returned by `reap`.
    in_flight: usize,
    /// Completions taken out of the ring by `submit` (to relieve a full completion
    /// queue) and not yet returned by `reap`.
    pending: Vec<OpResult>,
}

impl Uring {
    /// A ring of `depth` submission entries (rounded up to a power of two by the
    /// kernel). Up to that many ops can be pushed between two submits, one fewer
    /// right after the wake read's completion has been reaped (its re-arm takes a
    /// slot until the next submit).
    ///
    /// Errors from the ring's setup keep their raw errno (ENOSYS, EPERM, ENOMEM…).
    pub fn new(depth: u32) -> io::Result<Self> {
        Self::with_attempts(depth, &SETUP_ATTEMPTS)
    }

    /// A ring that any thread may drive, one at a time (the caller serialises
    /// access): set up without `SINGLE_ISSUER`, `DEFER_TASKRUN` and
    /// `COOP_TASKRUN` (see the module docs).
    pub fn new_shared(depth: u32) -> io::Result<Self> {
        Self::with_attempts(depth, &SHARED_SETUP)
    }

    fn with_attempts(depth: u32, attempts: &[Features]) -> io::Result<Self> {
        let (ring, features) = build_ring(depth, attempts)?;
        let waker = Arc::new(EventFdWaker::new()?);
        let mut uring = Self {
            ring,
            wake_buffer: Box::new(UnsafeCell::new(0)),
            waker,
            wake_armed: false,
            features,
            in_flight: 0,
            pending: Vec::new(),
        };
        // Hand the wake read to the kernel now, so that the whole submission queue
        // is free for the engine's first batch.
        uring.submit(false)?;
        Ok(uring)
    }

    /// The optional features the kernel accepted for this ring.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Queues the wake read if it is not in the ring and there is room; returns
    /// whether it is armed afterwards.
    fn arm_wake(&mut self) -> bool {
        if self.wake_armed {
            return true;
        }
        let entry = opcode::Read::new(
            types::Fd(self.waker.fd.as_raw_fd()),
            self.wake_buffer.get().cast::<u8>(),
            8,
        )
        .build()
        .user_data(WAKE_USER_DATA);
        let mut sq = self.ring.submission();
        // SAFETY: the buffer is 8 bytes, heap-allocated, and lives in a field
        // dropped after the ring, so it outlives the read; nothing else reads or
        // writes it. The eventfd also outlives the ring (field order).
        if unsafe { sq.push(&entry) }.is_ok() {
            self.wake_armed = true;
        }
        self.wake_armed
    }

    /// Moves every posted completion to `out`, swallowing the wake read's.
    fn drain_completions(&mut self, out: &mut Vec<OpResult>) -> usize {
        let mut drained = 0;
        for cqe in self.ring.completion() {
            if cqe.user_data() == WAKE_USER_DATA {
                // The eventfd counter now reads 0 again (or the read failed; either
                // way it is re-armed by the next submit).
                if cqe.result() < 0 {
                    tracing::debug!(
                        result = cqe.result(),
                        "tailguard io_uring: the wake read failed; re-arming it"
                    );
                }
                self.wake_armed = false;
            } else {
                out.push(OpResult {
                    user_data: cqe.user_data(),
                    result: cqe.result(),
                });
                drained += 1;
            }
        }
        drained
    }

    /// One `io_uring_enter`: submits what is queued, and waits for `want`
    /// completions.
    fn enter(&mut self, want: u32) -> io::Result<usize> {
        let to_submit = {
            let mut sq = self.ring.submission();
            sq.sync();
            sq.len() as u32
        };
        // With DEFER_TASKRUN, finished ops are only posted to the completion queue
        // by an enter carrying GETEVENTS, so every enter carries it then.
        let flags = if want > 0 || self.features.defer_taskrun {
            EnterFlags::GETEVENTS.bits()
        } else {
            0
        };
        // SAFETY: plain io_uring_enter on our own ring; no argument struct is
        // passed. The entries it submits were checked when they were pushed.
        unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(to_submit, want, flags, None)
        }
    }
}

/// Builds the ring with the best features the kernel accepts.
fn build_ring(depth: u32, attempts: &[Features]) -> io::Result<(IoUring, Features)> {
    let mut last_error = None;
    for &features in attempts {
        let mut builder = IoUring::builder();
        if features.single_issuer {
            builder.setup_single_issuer();
        }
        if features.defer_taskrun {
            builder.setup_defer_taskrun();
        }
        if features.coop_taskrun {
            builder.setup_coop_taskrun();
        }
        match builder.build(depth) {
            Ok(ring) => {
                let dropped = features.dropped_from_best();
                let wanted_all = attempts[0] == SETUP_ATTEMPTS[0];
                if wanted_all && !FEATURES_LOGGED.swap(true, Ordering::Relaxed) {
                    if dropped.is_empty() {
                        tracing::debug!(
                            "tailguard io_uring: single_issuer, defer_taskrun and coop_taskrun accepted"
                        );
                    } else {
                        tracing::info!(
                            dropped = ?dropped,
                            "tailguard io_uring: the kernel refused some ring features; running without {}",
                            dropped.join(", ")
                        );
                    }
                }
                return Ok((ring, features));
            }
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => last_error = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
}

impl Backend for Uring {
    fn kind(&self) -> BackendKind {
        BackendKind::IoUring
    }

    /// # Panics
    ///
    /// If `op.user_data` is [`WAKE_USER_DATA`], which the backend reserves.
    unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
        assert_ne!(
            op.user_data, WAKE_USER_DATA,
            "user data u64::MAX is reserved by the io_uring backend"
        );
        let fd = types::Fd(op.fd);
        let entry = match op.kind {
            OpKind::Read => opcode::Read::new(fd, op.buffer, op.length)
                .offset(op.offset)
                .build(),
            OpKind::Write => opcode::Write::new(fd, op.buffer.cast_const(), op.length)
                .offset(op.offset)
                .build(),
            OpKind::Fsync => opcode::Fsync::new(fd).build(),
            OpKind::Fdatasync => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            OpKind::Nop => opcode::Nop::new().build(),
        }
        .user_data(op.user_data);
        // Keep a slot for re-arming the wake read.
        let reserved = usize::from(!self.wake_armed);
        let mut sq = self.ring.submission();
        if sq.len() + reserved >= sq.capacity() {
            return Err(op);
        }
        // SAFETY: the caller guarantees the buffer outlives the op's completion
        // (trait contract); there is room, checked above.
        match unsafe { sq.push(&entry) } {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err(_) => Err(op),
        }
    }

    fn submit(&mut self, wait: bool) -> io::Result<()> {
        loop {
            let armed = self.arm_wake();
            // Wait only when nothing is ready yet; an already posted completion
            // (or one parked in `pending`) satisfies the wait.
            let want = u32::from(
                wait && armed && self.pending.is_empty() && self.ring.completion().is_empty(),
            );
            match self.enter(want) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                    // The completion queue is full (or the kernel is short of
                    // requests): make room by reaping, then try again.
                    let mut parked = std::mem::take(&mut self.pending);
                    let drained = self.drain_completions(&mut parked);
                    self.pending = parked;
                    if drained == 0 && self.ring.submission().is_empty() {
                        return Err(error);
                    }
                    if drained == 0 {
                        // Nothing to reap yet: wait for one completion without
                        // submitting, then reap it.
                        // SAFETY: as in `enter`, with nothing submitted.
                        match unsafe {
                            self.ring.submitter().enter::<libc::sigset_t>(
                                0,
                                1,
                                EnterFlags::GETEVENTS.bits(),
                                None,
                            )
                        } {
                            Ok(_) => {}
                            Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    continue;
                }
                Err(error) => return Err(error),
            }
            // Everything submitted, the wake read included, and (with `wait`) one
            // completion posted: done. Otherwise a partial submit (or a full queue
            // that kept the wake read out) needs another round.
            if armed && self.ring.submission().is_empty() {
                return Ok(());
            }
        }
    }

    fn reap(&mut self, out: &mut Vec<OpResult>) {
        let parked = self.pending.len();
        out.append(&mut self.pending);
        let drained = self.drain_completions(out);
        self.in_flight -= parked + drained;
    }

    fn waker(&self) -> Arc<dyn EngineWaker> {
        self.waker.clone()
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for Uring {
    /// The engine drains every op it pushed before dropping its backend, so only
    /// the wake read can still be in flight here. Dropping the ring (the first
    /// field) closes it, and the kernel cancels the read during teardown; only
    /// then are the read's buffer and the eventfd (later fields) released.
    fn drop(&mut self) {
        if self.in_flight > 0 {
            tracing::warn!(
                in_flight = self.in_flight,
                "tailguard io_uring: dropped with ops in flight; the kernel finishes them during teardown"
            );
        }
    }
}

/// Wakes the engine by writing to the eventfd the ring is reading.
struct EventFdWaker {
    fd: OwnedFd,
}

impl EventFdWaker {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; the result is checked below.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly opened descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self { fd })
    }
}

impl EngineWaker for EventFdWaker {
    fn wake(&self) {
        let one: u64 = 1;
        loop {
            // SAFETY: writes 8 bytes from a live local to our own eventfd.
            let written = unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    std::ptr::from_ref(&one).cast::<libc::c_void>(),
                    8,
                )
            };
            if written >= 0 {
                return;
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINTR) {
                // Cannot happen with a valid eventfd and a count of 1; a wake that
                // is lost here would only delay the engine until its next
                // completion.
                tracing::warn!(%error, "tailguard io_uring: waking the engine failed");
                return;
            }
        }
    }
}
