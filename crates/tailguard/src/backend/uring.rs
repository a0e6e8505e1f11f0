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
//! [`Uring::new_shared`] asks for `COOP_TASKRUN` alone (none where the kernel
//! refuses it), for a ring that waiters running the engine drive in turn (see
//! [`crate::engine`]): `SINGLE_ISSUER` would refuse their `io_uring_enter`
//! (EEXIST), and `DEFER_TASKRUN` (which needs it) posts completions only when
//! the submitting task enters again.
//!
//! A completion's last step (posting it) runs on the task that submitted the
//! request. Without `COOP_TASKRUN` the kernel interrupts that task for it, an
//! inter-processor interrupt whenever the task is running: one per completion,
//! which on a device faster than the software path (and on a virtual machine,
//! where each interrupt is a trip through the hypervisor) costs more than the
//! rest of the request. With it, the kernel wakes the submitter if it sleeps
//! interruptibly (in a futex, in this ring, in `poll`), exactly as without it,
//! and otherwise lets the posting wait for the submitter's next entry into the
//! kernel: its next system call, or at the latest the next interrupt on its CPU,
//! the scheduler's tick (1-4 ms) included. A task in an uninterruptible sleep
//! runs it when it wakes, with or without the flag. So the price of the flag is
//! bounded: a helper that submitted other threads' requests and went on
//! computing without a system call delays their completions by at most a tick;
//! a helper that waits (on its next request, or anywhere else) delays nothing.
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
//! # Waiting beside the driver
//!
//! On a shared ring, [`Backend::completion_wait`] gives a handle that waits for
//! the next completion through a duplicate of the ring's descriptor, touching
//! neither queue (it submits nothing and reaps nothing): the kernel's wait ends
//! when a completion is posted after it began, or at once if one is already
//! there. So one thread (the engine thread) can wait there while another
//! pushes, submits and reaps; whoever reaps a completion handles it, and the
//! waiter only learns that it should look. A wake through [`EngineWaker`] ends
//! such a wait as it ends `submit`'s, provided the wake read is armed:
//! [`Backend::rearm_wake`] re-arms it after a reap took its completion. The
//! handle keeps the wake read's buffer and the eventfd alive for as long as its
//! descriptor keeps the ring alive. With `COOP_TASKRUN`, the waiter sees an op's
//! completion once the thread that submitted it has posted it (see "Ring
//! setup"): at once if that thread sleeps, at its next entry into the kernel if
//! it runs. The wake read is such an op too, posted by the thread that armed it.
//!
//! # Timed waits
//!
//! [`Backend::submit_wait_timeout`] passes the timeout to the same
//! `io_uring_enter` (`IORING_ENTER_EXT_ARG`, Linux 5.11); the kernel ends the
//! wait with `ETIME`, which is not an error here. A kernel without it gets a
//! plain submit and a sleep of at most [`TIMED_WAIT_POLL`]: a wake-up from a
//! submitter is then late by that much at most, only while work waits on a
//! rate limit.
//!
//! # Registered files
//!
//! [`Uring::with_options`] with `file_slots > 0` registers a sparse table of
//! that many files with the ring at setup (`IORING_REGISTER_FILES2` with
//! `IORING_RSRC_REGISTER_SPARSE`, Linux 5.19). [`Backend::register_file`]
//! installs a descriptor in a free slot (`IORING_REGISTER_FILES_UPDATE`), and
//! every later op on that descriptor names the slot (`IOSQE_FIXED_FILE`), which
//! spares the kernel a descriptor-table lookup and a reference count per op. The
//! slots are handed out by [`FileSlots`], which also maps descriptors to slots
//! for [`Backend::push`].
//!
//! Everything about it is optional: a kernel that refuses the table (EINVAL
//! before 5.19, EMFILE when the table exceeds `RLIMIT_NOFILE`, ENOMEM) leaves
//! the ring without one, logged once per process; a full table or a descriptor
//! the kernel will not install (EBADF, ENOMEM) leaves that file on its plain
//! descriptor; any other refusal of an install (EINVAL, ENXIO...) turns the
//! feature off for the ring. Each of these is logged once per ring with its
//! reason. Ops on a descriptor without a slot use the descriptor, which always
//! works, so a refusal costs speed, never correctness.
//!
//! [`Backend::unregister_file`] unmaps the descriptor at once and clears its slot
//! (an update to -1) as soon as no unsubmitted entry can name it: at once when
//! the submission queue is empty, else right after the next submit hands the
//! queue to the kernel. Ops on that file still in flight are unaffected: the
//! kernel binds a request to its fixed file when it issues the request, inside
//! the `io_uring_enter` that submits it (we never set `IOSQE_ASYNC`, links or
//! drain, which defer the binding), and takes its own reference to the slot's
//! file for the request (`io_file_get_fixed` takes a reference on the slot's
//! resource node, put when the request completes; before Linux 6.13, a
//! reference on the table's current resource node, whose removed files are put
//! only once every request holding it has completed). Clearing or reusing the
//! slot therefore only affects ops submitted afterwards. The engine clears a
//! file's slot only once it holds no request on that file anyway (see
//! [`crate::engine`]).
//!
//! # Drop order
//!
//! [`Uring`]'s `Drop` unregisters the registered files first, because the
//! kernel releases what a closed ring holds in a work item after `close`
//! returns, and a file must be closed when its owner is done with the ring.
//! Dropping the ring (closing its file descriptor) makes the kernel cancel what it
//! can and wait for the rest, so a user op still in flight would complete into its
//! buffer during teardown: the engine drains every op before dropping the backend
//! (see the safety contract in [`super`]). The wake read is always in flight, so
//! its buffer and the eventfd are declared after the ring in [`Uring`] and are
//! therefore dropped after it.

use super::{
    Backend, BackendKind, CompletionWait, EngineWaker, Op, OpKind, OpResult, MAX_REGISTERED_FD,
};
use io_uring::{opcode, types, EnterFlags, IoUring};
use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The user data of the backend's own eventfd read. Engine ops must not use it.
pub const WAKE_USER_DATA: u64 = u64::MAX;

/// The longest sleep of a timed wait on a kernel without `IORING_ENTER_EXT_ARG`
/// (see "Timed waits"): shorter wakes submitters sooner, longer spends fewer
/// wake-ups while work waits on a rate limit.
pub const TIMED_WAIT_POLL: Duration = Duration::from_millis(1);

/// A ring any thread may enter (waiters that run the engine): none of the
/// features that bind the ring or its completions to one task; cooperative task
/// run where the kernel has it (see "Ring setup").
const SHARED_SETUP: [Features; 2] = [
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

/// Set once a refused registered-file table has been logged.
static FILE_TABLE_LOGGED: AtomicBool = AtomicBool::new(false);

/// How to set up a [`Uring`].
#[derive(Clone, Copy, Debug, Default)]
pub struct UringOptions {
    /// A ring that any thread may drive, one at a time ([`Uring::new_shared`]);
    /// false: the best features the kernel has ([`Uring::new`]).
    pub shared: bool,
    /// Slots of the registered-file table (0: no table); see "Registered files"
    /// in the module docs.
    pub file_slots: u32,
    /// Test hook: called before each registration call with what it would ask;
    /// `Some(errno)` makes that call fail with `errno` instead of reaching the
    /// kernel, to exercise the fallbacks (as [`super::auto`] takes an opener
    /// that can refuse io_uring).
    pub refuse_file_table: Option<fn(FileTableCall) -> Option<i32>>,
}

/// A registration call on the ring's file table (for
/// [`UringOptions::refuse_file_table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileTableCall {
    /// Register a sparse table of `slots` files.
    Create {
        /// Table size.
        slots: u32,
    },
    /// Install `fd` in `slot`.
    Install {
        /// The slot.
        slot: u32,
        /// The descriptor.
        fd: RawFd,
    },
    /// Clear `slot` (an update to -1).
    Remove {
        /// The slot.
        slot: u32,
    },
}

/// Marks a descriptor without a slot in [`FileSlots`].
const NO_SLOT: u32 = u32::MAX;

/// The slots of a registered-file table, and which descriptor holds which.
/// Pure bookkeeping: the kernel calls are [`Uring`]'s.
///
/// A slot goes free -> mapped ([`FileSlots::claim`]) -> unmapped
/// ([`FileSlots::unmap`]: its descriptor no longer resolves to it, but the
/// kernel's table may still hold the file) -> free ([`FileSlots::free`], once
/// the kernel's slot is cleared).
#[derive(Debug)]
pub struct FileSlots {
    /// The slot of each descriptor, indexed by descriptor ([`NO_SLOT`]: none).
    /// Descriptors are small dense integers (and [`Uring`] registers none from
    /// [`MAX_REGISTERED_FD`] up), so this stays short, and a lookup on every op
    /// is one bounds check and one load.
    by_fd: Vec<u32>,
    /// Freed slots, reused first.
    free: Vec<u32>,
    /// Slots below this have been handed out at least once.
    next_unused: u32,
    /// Table size.
    capacity: u32,
}

impl FileSlots {
    /// A table of `capacity` free slots.
    pub fn new(capacity: u32) -> Self {
        Self {
            by_fd: Vec::new(),
            free: Vec::new(),
            next_unused: 0,
            capacity,
        }
    }

    /// The slot `fd` is mapped to.
    pub fn slot_of(&self, fd: RawFd) -> Option<u32> {
        let index = usize::try_from(fd).ok()?;
        self.by_fd
            .get(index)
            .copied()
            .filter(|&slot| slot != NO_SLOT)
    }

    /// Maps `fd` (not mapped yet, and not negative) to a free slot and returns
    /// it; `None` when every slot is taken.
    ///
    /// # Panics
    ///
    /// If `fd` is negative or already mapped: the caller's bookkeeping is wrong.
    pub fn claim(&mut self, fd: RawFd) -> Option<u32> {
        let index = usize::try_from(fd).expect("a registered descriptor is not negative");
        assert!(
            self.slot_of(fd).is_none(),
            "descriptor {fd} already has a slot"
        );
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.next_unused < self.capacity => {
                self.next_unused += 1;
                self.next_unused - 1
            }
            None => return None,
        };
        if self.by_fd.len() <= index {
            self.by_fd.resize(index + 1, NO_SLOT);
        }
        self.by_fd[index] = slot;
        Some(slot)
    }

    /// Unmaps `fd` and returns the slot it had, which stays taken until
    /// [`FileSlots::free`].
    pub fn unmap(&mut self, fd: RawFd) -> Option<u32> {
        let slot = self.slot_of(fd)?;
        self.by_fd[fd as usize] = NO_SLOT;
        Some(slot)
    }

    /// Makes an unmapped `slot` available again.
    pub fn free(&mut self, slot: u32) {
        debug_assert!(slot < self.next_unused && !self.free.contains(&slot));
        debug_assert!(!self.by_fd.contains(&slot), "slot {slot} is still mapped");
        self.free.push(slot);
    }

    /// Slots mapped or not yet freed.
    pub fn taken(&self) -> u32 {
        self.next_unused - self.free.len() as u32
    }

    /// Table size.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// The ring's registered-file table, as far as this backend uses it.
struct FileTable {
    /// Whether the ring has a table and the feature is still on.
    enabled: bool,
    slots: FileSlots,
    /// Slots unmapped while entries were queued and not yet submitted: cleared
    /// by the next submit that empties the queue.
    retiring: Vec<u32>,
    refuse: Option<fn(FileTableCall) -> Option<i32>>,
    full_logged: bool,
    file_refusal_logged: bool,
}

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
    // Field order is drop order: the ring goes first. The kernel cancels the
    // wake read after `close` returns, so `drop` leaves an armed read's
    // buffer alive, and submitters' wakers keep the eventfd open.
    /// The ring.
    ring: IoUring,
    /// Where the wake read writes the eventfd's counter. Boxed: its address must
    /// not move while the read is in flight, which is always.
    wake_buffer: Arc<WakeBuffer>,
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
    /// The registered-file table (disabled when there is none).
    files: FileTable,
}

impl Uring {
    /// A ring of `depth` submission entries (rounded up to a power of two by the
    /// kernel). Up to that many ops can be pushed between two submits, one fewer
    /// right after the wake read's completion has been reaped (its re-arm takes a
    /// slot until the next submit).
    ///
    /// Errors from the ring's setup keep their raw errno (ENOSYS, EPERM, ENOMEM…).
    pub fn new(depth: u32) -> io::Result<Self> {
        Self::with_options(depth, UringOptions::default())
    }

    /// A ring that any thread may drive, one at a time (the caller serialises
    /// access): set up without `SINGLE_ISSUER` and `DEFER_TASKRUN`, with
    /// `COOP_TASKRUN` where the kernel has it (see the module docs).
    pub fn new_shared(depth: u32) -> io::Result<Self> {
        Self::with_options(
            depth,
            UringOptions {
                shared: true,
                ..UringOptions::default()
            },
        )
    }

    /// A ring as [`Uring::new`] or [`Uring::new_shared`] make it
    /// (`options.shared`), with a registered-file table of `options.file_slots`
    /// where the kernel accepts one (see "Registered files" in the module docs:
    /// a refused table is logged, never an error).
    pub fn with_options(depth: u32, options: UringOptions) -> io::Result<Self> {
        let attempts: &[Features] = if options.shared {
            &SHARED_SETUP
        } else {
            &SETUP_ATTEMPTS
        };
        let (ring, features) = build_ring(depth, attempts)?;
        check_ops(&ring)?;
        let waker = Arc::new(EventFdWaker::new()?);
        let mut uring = Self {
            ring,
            wake_buffer: Arc::new(WakeBuffer(UnsafeCell::new(0))),
            waker,
            wake_armed: false,
            features,
            in_flight: 0,
            pending: Vec::new(),
            files: FileTable {
                enabled: false,
                slots: FileSlots::new(options.file_slots),
                retiring: Vec::new(),
                refuse: options.refuse_file_table,
                full_logged: false,
                file_refusal_logged: false,
            },
        };
        if options.file_slots > 0 {
            uring.create_file_table(options.file_slots);
        }
        // Hand the wake read to the kernel now, so that the whole submission queue
        // is free for the engine's first batch.
        uring.submit(false)?;
        Ok(uring)
    }

    /// The optional features the kernel accepted for this ring.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Slots of the ring's registered-file table, 0 when it has none (not asked
    /// for, refused by the kernel, or given up after a refused install).
    pub fn file_slots(&self) -> u32 {
        if self.files.enabled {
            self.files.slots.capacity()
        } else {
            0
        }
    }

    /// Makes one registration call, unless the test hook refuses it.
    fn file_table_call(&self, call: FileTableCall) -> io::Result<()> {
        if let Some(errno) = self.files.refuse.and_then(|refuse| refuse(call)) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let submitter = self.ring.submitter();
        match call {
            FileTableCall::Create { slots } => submitter.register_files_sparse(slots),
            FileTableCall::Install { slot, fd } => submitter
                .register_files_update(slot, &[fd])
                .and_then(|updated| {
                    if updated == 1 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(libc::EINVAL))
                    }
                }),
            FileTableCall::Remove { slot } => {
                submitter.register_files_update(slot, &[-1]).map(drop)
            }
        }
    }

    /// Registers a sparse table of `slots` files, or logs (once per process)
    /// why the kernel would not.
    fn create_file_table(&mut self, slots: u32) {
        match self.file_table_call(FileTableCall::Create { slots }) {
            Ok(()) => self.files.enabled = true,
            Err(error) => {
                if !FILE_TABLE_LOGGED.swap(true, Ordering::Relaxed) {
                    let reason = file_table_refusal_reason(&error);
                    tracing::info!(
                        %error,
                        reason,
                        "tailguard io_uring: no registered-file table ({reason}: {error}); ops use plain descriptors"
                    );
                }
            }
        }
    }

    /// Installs `fd` in a free slot; see [`Backend::register_file`].
    fn install_file(&mut self, fd: RawFd) -> bool {
        let Some(slot) = self.files.slots.claim(fd) else {
            if !std::mem::replace(&mut self.files.full_logged, true) {
                tracing::info!(
                    slots = self.files.slots.capacity(),
                    "tailguard io_uring: the registered-file table is full; further files use plain descriptors"
                );
            }
            return false;
        };
        let Err(error) = self.file_table_call(FileTableCall::Install { slot, fd }) else {
            return true;
        };
        self.files.slots.unmap(fd);
        self.files.slots.free(slot);
        if matches!(error.raw_os_error(), Some(libc::EBADF | libc::ENOMEM)) {
            if !std::mem::replace(&mut self.files.file_refusal_logged, true) {
                tracing::info!(
                    fd,
                    %error,
                    "tailguard io_uring: the kernel would not register a file ({error}); it uses its plain descriptor"
                );
            }
        } else {
            self.files.enabled = false;
            tracing::info!(
                %error,
                "tailguard io_uring: registering a file failed ({error}); registered files are off for this ring"
            );
        }
        false
    }

    /// Clears `slot` in the kernel's table and frees it. On failure the slot
    /// stays taken (the kernel may still hold its file; installing another
    /// file there would replace it, but one more failure is not worth that).
    fn remove_slot(&mut self, slot: u32) {
        match self.file_table_call(FileTableCall::Remove { slot }) {
            Ok(()) => self.files.slots.free(slot),
            Err(error) => tracing::warn!(
                slot,
                %error,
                "tailguard io_uring: clearing a registered-file slot failed; the slot stays taken"
            ),
        }
    }

    /// Clears the slots unregistered while entries were queued, now that the
    /// queue has been handed to the kernel.
    fn retire_slots(&mut self) {
        while let Some(slot) = self.files.retiring.pop() {
            self.remove_slot(slot);
        }
    }

    /// Queues the wake read if it is not in the ring and there is room; returns
    /// whether it is armed afterwards.
    fn arm_wake(&mut self) -> bool {
        if self.wake_armed {
            return true;
        }
        let entry = opcode::Read::new(
            types::Fd(self.waker.fd.as_raw_fd()),
            self.wake_buffer.0.get().cast::<u8>(),
            8,
        )
        .build()
        .user_data(WAKE_USER_DATA);
        let mut sq = self.ring.submission();
        // SAFETY: the buffer is 8 bytes, heap-allocated, and outlives the read:
        // `drop` leaks it while the read is armed. Nothing else reads or writes
        // it. The kernel's read holds its own reference to the eventfd's file.
        if unsafe { sq.push(&entry) }.is_ok() {
            self.wake_armed = true;
        }
        self.wake_armed
    }

    /// Moves every posted completion to `pending`, for the next `reap`;
    /// returns how many.
    fn park_completions(&mut self) -> usize {
        let mut parked = std::mem::take(&mut self.pending);
        let drained = self.drain_completions(&mut parked);
        self.pending = parked;
        drained
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

    /// [`Backend::submit`], with an optional timeout on the wait (see
    /// "Timed waits" in the module docs).
    fn submit_until(&mut self, wait: bool, timeout: Option<Duration>) -> io::Result<()> {
        loop {
            let armed = self.arm_wake();
            // Wait only when nothing is ready yet; an already posted completion
            // (or one parked in `pending`) satisfies the wait.
            let want = u32::from(
                wait && armed && self.pending.is_empty() && self.ring.completion().is_empty(),
            );
            match self.enter(want, timeout) {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => continue,
                Err(error) if matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                    // The completion queue is full (or the kernel is short of
                    // requests): make room by reaping, then try again.
                    let drained = self.park_completions();
                    if drained == 0
                        && (self.ring.submission().is_empty() || !self.kernel_holds_an_op())
                    {
                        // Nothing left to submit, or nothing that could
                        // complete to make room (a wait would never end):
                        // the engine retries on its next turn.
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
                // No queued entry can name a retiring slot any more.
                self.retire_slots();
                return Ok(());
            }
        }
    }

    /// Whether an op (the wake read included) is in the kernel: pushed,
    /// neither still queued nor completed. Only then can a wait for a
    /// completion end.
    fn kernel_holds_an_op(&mut self) -> bool {
        let in_ring = self.in_flight - self.pending.len() + usize::from(self.wake_armed);
        in_ring > self.ring.submission().len()
    }

    /// One `io_uring_enter`: submits what is queued, and waits for `want`
    /// completions, for at most `timeout` when given (`IORING_ENTER_EXT_ARG`,
    /// which the caller checked the kernel has; the kernel's `ETIME` is
    /// returned as no completion).
    fn enter(&mut self, want: u32, timeout: Option<Duration>) -> io::Result<usize> {
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
        if let Some(timeout) = timeout.filter(|_| want > 0) {
            let timespec = types::Timespec::from(timeout);
            let arguments = types::SubmitArgs::new().timespec(&timespec);
            // SAFETY: io_uring_enter on our own ring with EXT_ARG, whose
            // argument is the `io_uring_getevents_arg` that `SubmitArgs` wraps,
            // alive for the call. The entries were checked when pushed.
            let entered = unsafe {
                self.ring.submitter().enter(
                    to_submit,
                    want,
                    flags | EnterFlags::EXT_ARG.bits(),
                    Some(&arguments),
                )
            };
            return match entered {
                Err(error) if error.raw_os_error() == Some(libc::ETIME) => Ok(0),
                other => other,
            };
        }
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

/// The opcodes the backend submits.
const OPCODES_USED: [(u8, &str); 4] = [
    (opcode::Read::CODE, "read"),
    (opcode::Write::CODE, "write"),
    (opcode::Fsync::CODE, "fsync"),
    (opcode::Nop::CODE, "nop"),
];

/// Refuses a ring the backend cannot use: a kernel whose io_uring predates
/// the plain read and write ops, or that drops completions when the
/// completion queue is full (both arrived in 5.5 and 5.6; a 5.4 kernel
/// builds a ring whose every read fails). The error is `EOPNOTSUPP`, which
/// [`super::refusal_reason`] names, so `auto` falls back to threads.
fn check_ops(ring: &IoUring) -> io::Result<()> {
    let mut probe = io_uring::Probe::new();
    let probed = ring.submitter().register_probe(&mut probe).is_ok();
    let missing = missing_ops(ring.params().is_feature_nodrop(), |code| {
        probed && probe.is_supported(code)
    });
    if missing.is_empty() {
        return Ok(());
    }
    tracing::debug!(
        ?missing,
        "tailguard io_uring: the kernel's io_uring lacks what the backend needs"
    );
    Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
}

/// What the backend needs that a kernel lacks: the opcodes `supported`
/// refuses, and `nodrop` when the kernel may drop completions.
fn missing_ops(nodrop: bool, supported: impl Fn(u8) -> bool) -> Vec<&'static str> {
    let mut missing: Vec<&'static str> = OPCODES_USED
        .iter()
        .filter(|(code, _)| !supported(*code))
        .map(|(_, name)| *name)
        .collect();
    if !nodrop {
        missing.push("nodrop");
    }
    missing
}

/// The submission entry for `op` on `target` (a plain descriptor or a slot of
/// the registered-file table), without its user data. A macro
/// because the opcode builders take either through a sealed trait.
macro_rules! entry_on {
    ($op:expr, $target:expr) => {
        match $op.kind {
            OpKind::Read => opcode::Read::new($target, $op.buffer, $op.length)
                .offset($op.offset)
                .build(),
            OpKind::Write => opcode::Write::new($target, $op.buffer.cast_const(), $op.length)
                .offset($op.offset)
                .build(),
            OpKind::Fsync => opcode::Fsync::new($target).build(),
            OpKind::Fdatasync => opcode::Fsync::new($target)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            OpKind::Nop => opcode::Nop::new().build(),
        }
    };
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
        let entry = match self.files.slots.slot_of(op.fd) {
            Some(slot) => entry_on!(op, types::Fixed(slot)),
            None => entry_on!(op, types::Fd(op.fd)),
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
        self.submit_until(wait, None)
    }

    fn timed_wait_is_precise(&self) -> bool {
        self.ring.params().is_feature_ext_arg()
    }

    fn submit_wait_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        if self.ring.params().is_feature_ext_arg() {
            return self.submit_until(true, Some(timeout));
        }
        self.submit_until(false, None)?;
        if self.pending.is_empty() && self.ring.completion().is_empty() {
            std::thread::sleep(timeout.min(TIMED_WAIT_POLL));
        }
        Ok(())
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

    /// On a shared ring with timed waits (`IORING_FEAT_EXT_ARG`): see "Waiting
    /// beside the driver" in the module docs.
    fn completion_wait(&self) -> Option<Arc<dyn CompletionWait>> {
        let features = self.features;
        if features.single_issuer || features.defer_taskrun {
            return None;
        }
        if !self.ring.params().is_feature_ext_arg() {
            return None;
        }
        // SAFETY: duplicates our own open ring descriptor; the result is checked.
        let raw = unsafe { libc::fcntl(self.ring.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if raw < 0 {
            tracing::debug!(
                error = %io::Error::last_os_error(),
                "tailguard io_uring: no descriptor for waiting beside the driver"
            );
            return None;
        }
        Some(Arc::new(RingWait {
            // SAFETY: `raw` is a fresh duplicate nobody else owns.
            ring: unsafe { OwnedFd::from_raw_fd(raw) },
            _wake_buffer: self.wake_buffer.clone(),
            _waker: self.waker.clone(),
        }))
    }

    fn rearm_wake(&mut self) -> io::Result<()> {
        if self.wake_armed {
            return Ok(());
        }
        self.submit_until(false, None)
    }

    fn registers_files(&self) -> bool {
        self.files.enabled
    }

    /// Installs `fd` in a free slot of the ring's table; see "Registered
    /// files" in the module docs for when it declines.
    fn register_file(&mut self, fd: RawFd) -> bool {
        if !self.files.enabled || !(0..MAX_REGISTERED_FD).contains(&fd) {
            return false;
        }
        self.files.slots.slot_of(fd).is_some() || self.install_file(fd)
    }

    /// Unmaps `fd` now and clears its slot once no queued entry names it; ops
    /// already submitted keep the file (module docs, "Registered files").
    fn unregister_file(&mut self, fd: RawFd) {
        let Some(slot) = self.files.slots.unmap(fd) else {
            return;
        };
        if self.ring.submission().is_empty() {
            self.remove_slot(slot);
        } else {
            self.files.retiring.push(slot);
        }
    }
}

/// How many times [`Uring::retire_wake_read`] looks for the wake read's
/// completion, a millisecond apart after the first look.
const WAKE_RETIRE_LOOKS: u32 = 1_000;

impl Uring {
    /// Completes the wake read before the ring closes: submits it if it is
    /// still queued, writes the eventfd and reaps until its completion
    /// comes. Returns whether no wake read is left in the kernel. A ring
    /// dropped on a thread that may not enter it (a `SINGLE_ISSUER` ring
    /// elsewhere) fails here.
    fn retire_wake_read(&mut self) -> bool {
        if !self.wake_armed {
            return true;
        }
        if self.submit_until(false, None).is_err() {
            return false;
        }
        self.waker.wake();
        for look in 0..WAKE_RETIRE_LOOKS {
            if look > 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // SAFETY: as in `enter`, with nothing submitted: it only runs
            // the ring's pending task work, which posts completions.
            let entered = unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    0,
                    0,
                    EnterFlags::GETEVENTS.bits(),
                    None,
                )
            };
            if matches!(&entered, Err(error) if error.raw_os_error() != Some(libc::EINTR)) {
                return false;
            }
            self.park_completions();
            if !self.wake_armed {
                return true;
            }
        }
        false
    }
}

/// Why the kernel refused a registered-file table, in words that name the cause.
pub fn file_table_refusal_reason(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EINVAL) => "the kernel has no sparse file tables (older than 5.19)",
        Some(libc::EMFILE) => "the table is larger than RLIMIT_NOFILE",
        Some(libc::ENOMEM) => "the kernel is short of memory for the table",
        _ => "registering the table failed",
    }
}

impl Drop for Uring {
    /// The engine drains every op it pushed before dropping its backend, so only
    /// the wake read can still be in flight here. Dropping the ring (the first
    /// field) closes it; the kernel cancels the read in its teardown work,
    /// after `close` returns, so an armed read's buffer is never freed.
    fn drop(&mut self) {
        if self.in_flight > 0 {
            tracing::warn!(
                in_flight = self.in_flight,
                "tailguard io_uring: dropped with ops in flight; the kernel finishes them during teardown"
            );
        }
        // The kernel tears a closed ring down in a work item, after `close`
        // returns: give up the registered files now, so that they are closed
        // when the ring's owner is done with it (a filesystem can be unmounted,
        // a deleted file's blocks are freed).
        if self.files.slots.taken() > 0 {
            if let Err(error) = self.ring.submitter().unregister_files() {
                tracing::debug!(%error, "tailguard io_uring: unregistering the files failed");
            }
        }
        // The armed wake read would be cancelled in that work item too,
        // later: a submitter's wake meanwhile (the eventfd lives on in its
        // waker) would complete the read into its freed buffer. So the read
        // is completed here first; where that fails, its 8 bytes are kept
        // alive for good.
        if !self.retire_wake_read() {
            tracing::debug!(
                "tailguard io_uring: the wake read outlives the ring; its buffer is kept"
            );
            std::mem::forget(Arc::clone(&self.wake_buffer));
        }
    }
}

/// The 8 bytes the wake read writes the eventfd's counter into. Shared with
/// [`RingWait`], whose duplicate of the ring's descriptor can keep the ring,
/// and so the read in flight, alive after the [`Uring`] is dropped.
struct WakeBuffer(UnsafeCell<u64>);

// SAFETY: only the kernel writes the buffer (the wake read); no thread reads
// or writes it, so sharing the handle between threads shares no data.
unsafe impl Sync for WakeBuffer {}
// SAFETY: as above; the buffer is plain memory with no thread affinity.
unsafe impl Send for WakeBuffer {}

/// Waits on the ring through its own descriptor (see "Waiting beside the
/// driver" in the module docs). Field order is drop order: the descriptor
/// goes first, as the ring does in [`Uring`].
struct RingWait {
    ring: OwnedFd,
    _wake_buffer: Arc<WakeBuffer>,
    _waker: Arc<EventFdWaker>,
}

/// `struct io_uring_getevents_arg` of `<linux/io_uring.h>`.
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_size: u32,
    min_wait_usec: u32,
    timespec: u64,
}

/// `struct __kernel_timespec`.
#[repr(C)]
struct KernelTimespec {
    seconds: i64,
    nanoseconds: i64,
}

impl CompletionWait for RingWait {
    fn wait(&self, timeout: Option<Duration>) {
        let timespec = timeout.map(|timeout| KernelTimespec {
            seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            nanoseconds: i64::from(timeout.subsec_nanos()),
        });
        let argument = GeteventsArg {
            sigmask: 0,
            sigmask_size: 0,
            min_wait_usec: 0,
            timespec: timespec
                .as_ref()
                .map_or(0, |timespec| std::ptr::from_ref(timespec) as u64),
        };
        let flags = EnterFlags::GETEVENTS.bits() | EnterFlags::EXT_ARG.bits();
        // SAFETY: io_uring_enter on a descriptor of our ring, submitting
        // nothing (the submission queue stays the driver's), waiting for one
        // completion; EXT_ARG's argument and its timespec are locals alive for
        // the call, and the size passed is the argument's.
        let entered = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.ring.as_raw_fd(),
                0_u32,
                1_u32,
                flags,
                std::ptr::from_ref(&argument),
                std::mem::size_of::<GeteventsArg>(),
            )
        };
        if entered < 0 {
            let error = io::Error::last_os_error();
            // ETIME: the timeout passed; EINTR: a signal. Either way the
            // caller looks again; anything else is logged, and the caller's
            // next look finds what there is.
            if !matches!(error.raw_os_error(), Some(libc::ETIME | libc::EINTR)) {
                tracing::debug!(%error, "tailguard io_uring: waiting beside the driver failed");
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wake_read_completes_before_the_ring_closes() {
        for shared in [false, true] {
            let options = UringOptions {
                shared,
                ..UringOptions::default()
            };
            let mut ring = match Uring::with_options(8, options) {
                Ok(ring) => ring,
                Err(error) => {
                    println!("skipping io_uring: {error}");
                    return;
                }
            };
            assert!(ring.wake_armed, "the wake read is armed from the start");
            assert!(ring.retire_wake_read(), "shared: {shared}");
            assert!(!ring.wake_armed);
            // Nothing left for the drop to keep alive.
            assert_eq!(Arc::strong_count(&ring.wake_buffer), 1);
        }
    }

    #[test]
    fn a_kernel_without_plain_reads_writes_or_nodrop_is_refused() {
        assert!(missing_ops(true, |_| true).is_empty());
        // A 5.4 kernel: no probe (every op reads as missing), no NODROP.
        assert_eq!(
            missing_ops(false, |_| false),
            ["read", "write", "fsync", "nop", "nodrop"]
        );
        let no_write = missing_ops(true, |code| code != opcode::Write::CODE);
        assert_eq!(no_write, ["write"]);
        assert_eq!(missing_ops(false, |_| true), ["nodrop"]);
        let reason = super::super::refusal_reason(&io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(reason.contains("older than 5.6"), "{reason}");
    }

    #[test]
    fn file_slots_hand_out_each_slot_once_and_reuse_freed_ones() {
        let mut slots = FileSlots::new(3);
        assert_eq!(slots.slot_of(5), None);
        assert_eq!(slots.slot_of(-1), None, "a negative descriptor has no slot");
        let claimed = [5, 9, 0].map(|fd| slots.claim(fd).expect("room"));
        let mut sorted = claimed.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2], "every slot once, none out of range");
        assert_eq!(slots.slot_of(9), Some(claimed[1]));
        assert_eq!(slots.claim(7), None, "full");
        assert_eq!(slots.taken(), 3);

        // Unmapped but not freed: the descriptor no longer resolves, and the
        // slot is not handed out again (the kernel may still hold its file).
        assert_eq!(slots.unmap(9), Some(claimed[1]));
        assert_eq!(slots.slot_of(9), None);
        assert_eq!(slots.unmap(9), None, "unmapping twice is a no-op");
        assert_eq!(slots.claim(7), None, "the unmapped slot is not free yet");

        slots.free(claimed[1]);
        assert_eq!(slots.taken(), 2);
        assert_eq!(slots.claim(7), Some(claimed[1]), "the freed slot is reused");
        assert_eq!(slots.slot_of(7), Some(claimed[1]));
        assert_eq!(slots.slot_of(5), Some(claimed[0]), "others unchanged");
        assert_eq!(slots.slot_of(1000), None, "beyond the map");
    }

    #[test]
    fn an_empty_table_has_no_slot_to_give() {
        let mut slots = FileSlots::new(0);
        assert_eq!(slots.claim(3), None);
        assert_eq!(slots.slot_of(3), None);
        assert_eq!(slots.taken(), 0);
    }

    #[test]
    #[should_panic(expected = "already has a slot")]
    fn claiming_a_mapped_descriptor_is_a_bug() {
        let mut slots = FileSlots::new(4);
        slots.claim(3);
        slots.claim(3);
    }
}
