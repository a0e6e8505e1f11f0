//! The engine thread: one loop that owns the backend and every device's dispatcher.
//!
//! Each iteration:
//!
//! 1. **take** every message submitters queued since the last iteration, in one
//!    swap of the [`Handoff`] (seed 003: drain the queue in a batch, never
//!    contend on it per request), and enqueue each request in its device's
//!    [`Dispatcher`];
//! 2. **dispatch**: every dispatcher hands out what its budget admits, and each
//!    piece becomes one backend op pointing into the request's buffer;
//! 3. **submit**: with eager submission (the default) each op was handed to
//!    the kernel just before the next one was pushed, and this call submits the
//!    last; with `eager_submit(false)`, all of the turn's ops go in this one
//!    call. When there is nothing else to do, the same call sleeps until a
//!    completion or a submitter's wake-up, and, while a class held by its
//!    rate limit has queued work, at the latest until the first such class
//!    may go again ([`Dispatcher::next_eligible_at`]). (Eager because on some
//!    disks, virtio ones among them, requests submitted together complete
//!    together: see `SchedulerBuilder::eager_submit`.) A submit call the
//!    backend refuses outright (a broken ring; the transient EINTR, EAGAIN
//!    and EBUSY never get here) leaves the ops pushed for the next turn's
//!    try, after a pause that doubles with each refusal in a row up to
//!    [`SUBMIT_RETRY_PAUSE_MAX`], logged at each power of two of the count
//!    (whichever thread runs the engine pauses, holding it: a helping waiter
//!    as well as the engine thread, since the engine cannot progress anyway):
//!    a ring that stays broken costs a few wake-ups a second, not a CPU
//!    and a log line per turn, and its requests wait instead of failing
//!    (the kernel may still read ops left in its queue, so their buffers
//!    cannot be handed back).
//! 4. **reap** every available completion in a batch, complete the pieces in the
//!    dispatchers, and deliver each finished request to its waiter, calling
//!    the wakers once the batch is answered (on the engine thread, the
//!    first at once: "Batched wakes" and "The first wake goes at once" in
//!    `crate::completion`).
//!
//! The engine owns each request's buffer and file handle from submission until
//! its last piece completes, so a waiter that gives up (a dropped future) cannot
//! free memory the kernel is still writing into, nor close the descriptor under
//! it. Every request completes exactly once: with its byte count, a short count
//! (the contiguous bytes transferred from its start), or the first error its
//! pieces met.
//!
//! # Who runs the loop
//!
//! The engine sits behind a mutex in `Shared`, and one thread at a time runs
//! the loop above: the dedicated engine thread, or a *helping* waiter
//! (`completion` module, [`crate::IoFuture::wait`]): a thread about to block on a result that finds the
//! engine free runs the loop itself until its result is in, so a request
//! waited on at low depth is submitted, waited for and completed by the thread
//! that asked for it, with no wake-up of another thread on its path. The engine
//! thread sleeps in the backend while operations are in flight and it runs the
//! loop; when everything is done it *parks* outside the engine, and is unparked
//! by a kick (a deferred push), by a helper leaving work behind, or by close.
//! The rules for who wakes whom live in [`crate::handoff`]; the engine thread
//! alone finishes a shutdown and drops the engine.
//!
//! The engine thread waits for completions *beside* the engine where the
//! backend allows it ([`crate::backend::CompletionWait`]): its turns never
//! sleep, and when one finds nothing to do with operations in flight, it
//! leaves the engine and waits in the ring. A thread that submits meanwhile
//! (a future polled on another runtime, whose results the engine thread
//! delivers) finds the engine free and runs it itself: it submits its request
//! and reaps what completed, without waking the engine thread; the engine
//! thread wakes at the next completion and takes the engine again (the rules:
//! "Waiting in the ring" in [`crate::handoff`]). Without such a backend (the
//! thread pool, a single-issuer ring) the engine thread sleeps in the backend
//! holding the engine, woken by submitters.
//!
//! # Lingering
//!
//! With nothing left in flight, the engine thread does not park at once: it
//! keeps looking at the handoff for up to the linger
//! (`SchedulerBuilder::engine_linger`) after its last turn that made
//! progress, a few spin-loop hints between looks, each look a lock attempt
//! ([`Handoff::maybe_queued`]) and, where messages may be queued, a turn. A
//! closed loop awaited on another runtime (a request's completion wakes
//! its task, which submits the next) usually hands over its next requests
//! within that time, so the engine thread takes them without having parked
//! and without the wake-up a parked thread needs, and each push finds it
//! running and owes no kick. On a virtual machine a wake-up of a thread on
//! an idle CPU costs tens of microseconds, as much as a fast device takes
//! to answer. While it lingers the engine thread is running by the rules of
//! [`crate::handoff`]: a submitter's push is seen, and a waiter that wants
//! the engine finds it busy and is served by this thread, as it would be by
//! any running engine thread. The spin ends at the first message, at the
//! end of the linger, and never starts with operations in flight (the
//! thread then waits in the ring, where a completion wakes it). A spell
//! whose next message came later than the linger halves the next spell,
//! down to an eighth of the linger, and a gap shorter than the linger
//! restores it (`Linger`): requests sparser than the linger cost little
//! spinning each.
//!
//! Helping needs a backend any thread may drive: an io_uring ring set up without
//! `SINGLE_ISSUER`/`DEFER_TASKRUN` (see [`crate::backend::uring`]). With
//! helpers off (`SchedulerBuilder::waiters_run_engine(false)`), the engine
//! thread alone runs the loop and the ring keeps those features.
//!
//! # Registered files
//!
//! Where the backend has a registered-file table
//! ([`Backend::registers_files`]: io_uring, unless turned off with
//! `SchedulerBuilder::registered_files(0)` or refused by the kernel), the
//! engine registers each file the first time a request on it arrives, and its
//! ops then name the file's slot instead of its descriptor. Files are told
//! apart by their `Arc` (a weak handle keeps the allocation, and so the
//! identity, from being reused), not by descriptor number, which the process
//! reuses once a file is closed. The registration holds a kernel reference to
//! the file, so the engine gives it up ([`Backend::unregister_file`]) as soon
//! as it sees the file closed, which by construction is never while it holds a
//! request on it (each request holds the file's `Arc`):
//!
//! - when it finishes a request that held the file's last reference;
//! - when a request arrives on a new file under a descriptor number that a
//!   closed registered file had (before any op on it is pushed);
//! - in a sweep over its registered files, at most once per
//!   [`FILE_SWEEP_INTERVAL_NS`] while requests arrive, and before the engine
//!   thread parks.
//!
//! - when a `File` is dropped: it sends `Message::FileClosed` after giving
//!   up its own reference, so a file closed while the engine is idle does not
//!   stay open in the kernel (its flock held, its blocks allocated if deleted).
//!
//! The sweep is the backstop: it needs no message, so no path that closes a
//! file can leave its registration behind for longer than one interval of an
//! active engine.
//!
//! Shutdown closes the handoff, then keeps looping until every dispatcher is idle
//! and the backend has nothing in flight: everything accepted is completed,
//! nothing is dropped, and the thread exits only when the kernel is done.
//!
//! # Cancelling
//!
//! A shutdown that must be quick (`Scheduler::shutdown_now`, a Ctrl-C) need
//! not serve what waits in the dispatchers: cancelling drops every queued
//! piece ([`Dispatcher::cancel_queued`]) and answers at once each request
//! left with nothing in flight, with an [`io::ErrorKind::Interrupted`] error
//! that names the request. Pieces already handed to the backend are the
//! kernel's (their buffers with them) and complete as usual; a request split
//! into pieces of which some were in flight completes once, with the last of
//! them: with the contiguous bytes transferred from its start, the
//! cancellation error if there are none, or the first error its pieces met.
//! A cancelling shutdown answers every request that arrives after it the same
//! way. `Scheduler::cancel_pending` cancels without shutting down.
//!
//! Should the engine ever panic (a bug, on whichever thread runs it), nobody waits
//! forever: while unwinding, the runner takes the engine out of `Shared` (the
//! engine thread then exits), closes the handoff and fails every request it holds or that is still queued,
//! and it *leaks* the buffers and file descriptors of requests it had
//! accepted, since the kernel or a backend worker may still use them.

use crate::backend::{Backend, BackendKind, Op, OpKind, OpResult, MAX_REGISTERED_FD};
use crate::backend::{CompletionWait, EngineWaker};
use crate::buffer::AlignedBuffer;
use crate::completion::{drive_until_notified_helping, Driver, Parker};
use crate::completion::{PendingWakes, Responder};
use crate::device::DeviceId;
use crate::handoff::Handoff;
use crate::handoff::Wake;
use crate::stats::{self, ClassStats, DeviceStats, StatsSnapshot};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};
use tailguard_core::{
    CancelledPiece, ClassId, DeviceProfile, Direction, DispatchedPiece, Dispatcher,
    DispatcherConfig, IoRequest, LatencyController, Nanos, QuietReads, RateLimit, RequestId,
};

/// The `tracing` target of budget changes ([`ControllerChoice::Adaptive`]).
pub const CONTROLLER_TARGET: &str = "tailguard::controller";

/// How often, at most, the engine looks for registered files whose owners
/// closed them (see "Registered files" in the module docs): 1 ms bounds how
/// long a busy engine keeps a closed file open in the kernel, at a cost of one
/// atomic load per registered file per sweep.
pub const FILE_SWEEP_INTERVAL_NS: Nanos = 1_000_000;

/// The most turns a submitter runs the engine beside the engine thread's
/// ring wait before it hands the rest back: enough to submit its request
/// and reap what completed meanwhile, few enough that a submit call returns
/// promptly under any load (the engine thread, woken, serves the rest).
const BESIDE_RING_WAIT_TURNS_MAX: u32 = 4;

/// The longest the engine thread waits in the ring at once: a backstop for
/// a wake that could not be re-armed (its eventfd read refused by a full
/// submission queue), which no push could then deliver; long enough that
/// the wake-ups it costs a device with requests in flight (ten a second)
/// are nothing, short enough that such a stranded message waits no longer.
const RING_WAIT_MAX: Duration = Duration::from_millis(100);

/// Spin-loop hints between two looks of a lingering engine thread (see
/// "Lingering"): a look costs a lock attempt and a load of the completion
/// queue, the pause keeps those off the submitters' cache lines most of
/// the time, and a few hints (well under a microsecond) add nothing
/// measurable to how soon the engine sees a request.
const LINGER_PAUSES_PER_LOOK: u32 = 8;

/// The engine thread's spin before it parks: with nothing in flight, it
/// keeps looking for messages after its last turn that made progress, for
/// the whole linger where the last idle spell ended within it (its next
/// message came that soon), and for half as long as the last spell could
/// otherwise, down to a [`LINGER_PROBE_DIVISOR`]th of it (see "Lingering").
struct Linger {
    /// The longest spell: how long a spell whose successor is likely to
    /// end soon may last; zero: the thread parks at once.
    most: Duration,
    /// How long the current spell may last.
    limit: Duration,
    /// When the current idle spell began (`None`: the last turn made
    /// progress).
    idle_since: Option<Instant>,
}

impl Linger {
    fn new(most: Duration) -> Self {
        Self {
            most,
            limit: most,
            idle_since: None,
        }
    }

    /// A turn made progress: an idle spell, if one ran, is over.
    fn progressed(&mut self) {
        if self.idle_since.is_some() {
            self.progressed_at(Instant::now());
        }
    }

    /// [`Linger::progressed`] at `now`: the next spell may last the whole
    /// linger if this one ended within it, half as long as this one could
    /// (a probe's length at least) otherwise.
    fn progressed_at(&mut self, now: Instant) {
        let Some(since) = self.idle_since.take() else {
            return;
        };
        self.limit = if now.saturating_duration_since(since) < self.most {
            self.most
        } else {
            (self.limit / 2).max(self.most / LINGER_PROBE_DIVISOR)
        };
    }

    /// Whether the thread should look again instead of parking.
    fn goes_on(&mut self) -> bool {
        !self.most.is_zero() && self.goes_on_at(Instant::now())
    }

    /// Whether the idle spell is shorter than its limit at `now`: starts
    /// the spell if none runs.
    fn goes_on_at(&mut self, now: Instant) -> bool {
        let since = *self.idle_since.get_or_insert(now);
        now.saturating_duration_since(since) < self.limit
    }
}

/// The least part of the linger an idle spell lasts, after gaps that
/// outlasted it (each halves the next spell): requests whose gaps exceed the
/// linger cost an eighth of it in spinning per gap instead of all of it,
/// one late answer in a closed loop costs its next spell only half, and the
/// whole linger comes back with the first gap shorter than it (measured from
/// the spell's start to the next progress, whether the thread parked
/// meanwhile or not).
const LINGER_PROBE_DIVISOR: u32 = 8;

/// The pause after the first refused submit call; each refusal in a row
/// doubles it: short enough that a passing refusal (ENOMEM) costs nothing
/// noticeable, and the doubling reaches the cap within a few tries.
const SUBMIT_RETRY_PAUSE_FIRST: Duration = Duration::from_millis(1);

/// The longest pause between tries of a refused submit: what a request may
/// wait beyond the refusals themselves, and what completions of ops already
/// in the kernel may wait to be reaped, in exchange for ten wake-ups a second.
pub const SUBMIT_RETRY_PAUSE_MAX: Duration = Duration::from_millis(100);

/// Which policy sizes each device's in-flight budget: the core's one list.
/// [`ControllerChoice::Adaptive`] logs every change at target
/// [`CONTROLLER_TARGET`].
pub use tailguard_core::ControllerChoice;

/// A device's dispatcher, with the budget policy chosen at run time.
type DeviceDispatcher = Dispatcher<Box<dyn LatencyController>>;

/// What a data request returns: the result and the buffer, whatever happened.
pub type BufResult = (io::Result<usize>, AlignedBuffer);

/// Global class number, dense from zero.
pub(crate) type ClassNumber = u32;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoKind {
    Read,
    Write,
    Fsync,
    Fdatasync,
    Nop,
}

/// Where a finished request's result goes. Dropped unanswered, it answers with
/// [`engine_stopped`].
pub(crate) enum Reply {
    Data(Responder<BufResult>),
    Unit(Responder<io::Result<()>>),
}

/// The answer of a data request the engine could not finish.
pub(crate) fn stopped_data() -> BufResult {
    (
        Err(engine_stopped()),
        AlignedBuffer::new(0, 1).expect("an empty buffer allocates nothing"),
    )
}

/// The answer of any other request the engine could not finish.
pub(crate) fn stopped<T>() -> io::Result<T> {
    Err(engine_stopped())
}

/// A request on its way to the engine.
pub(crate) struct IoMessage {
    pub(crate) class: ClassNumber,
    pub(crate) device: DeviceId,
    /// Keeps the descriptor open until the last piece completes (`None`: nop).
    pub(crate) file: Option<Arc<File>>,
    pub(crate) kind: IoKind,
    pub(crate) buffer: Option<AlignedBuffer>,
    pub(crate) offset: u64,
    /// When the request was made, in [`monotonic_ns`] (a raw clock reading,
    /// not an `Instant`: the engine then turns it into its own time with one
    /// subtraction).
    pub(crate) submitted_at_ns: Nanos,
    pub(crate) reply: Reply,
}

/// What a device is, as far as its dispatcher's shape goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceKind {
    /// A rotational disk ([`crate::scheduler::seeks`]): served in slices.
    pub(crate) seeks: bool,
    /// A loop device ([`crate::scheduler::serves_through_a_file`]).
    pub(crate) through_a_file: bool,
    /// What its pieces' sizes are multiples of
    /// (`DispatcherConfig::piece_alignment_bytes`): its logical block size,
    /// or the direct-I/O offset alignment of a file opened on it, whichever
    /// is larger (a later file that needs more raises it).
    pub(crate) piece_alignment_bytes: u64,
}

impl DeviceKind {
    /// A device that neither seeks nor serves through a file: the shape
    /// every device takes unless what the kernel says of it differs.
    pub(crate) const PLAIN: Self = Self {
        seeks: false,
        through_a_file: false,
        piece_alignment_bytes: tailguard_core::budget::SPLIT_BYTES_MIN,
    };

    /// What the kernel says of the device behind `info`, announced by a file
    /// whose direct-I/O offsets align to `offset_alignment_bytes`.
    pub(crate) fn of(info: &crate::device::DeviceInfo, offset_alignment_bytes: u32) -> Self {
        let alignment = info.logical_block_size.max(offset_alignment_bytes);
        Self {
            seeks: crate::scheduler::seeks(info),
            through_a_file: crate::scheduler::serves_through_a_file(info),
            piece_alignment_bytes: u64::from(alignment)
                .max(tailguard_core::budget::SPLIT_BYTES_MIN),
        }
    }
}

/// Everything submitters send the engine.
pub(crate) enum Message {
    /// Unboxed: a box would cost an allocation and a free per request.
    Io(IoMessage),
    AddDevice {
        device: DeviceId,
        name: String,
        /// What the device is, for the dispatcher's shape.
        kind: DeviceKind,
        profile: DeviceProfile,
    },
    AddClass {
        class: ClassNumber,
        name: String,
        shares: u32,
        rate_limit: Option<RateLimit>,
    },
    SetRateLimit {
        class: ClassNumber,
        rate_limit: Option<RateLimit>,
    },
    SetShares {
        class: ClassNumber,
        shares: u32,
    },
    RemoveClass {
        class: ClassNumber,
    },
    Stats(Responder<io::Result<StatsSnapshot>>),
    /// Fails every request not yet handed to the backend (see "Cancelling"
    /// in the module docs) and answers how many it failed.
    CancelPending(Responder<io::Result<usize>>),
    /// A `File` was dropped: give up the registration of descriptor `fd` if
    /// that file is now closed (see "Registered files" in the module docs).
    FileClosed {
        fd: RawFd,
    },
    /// Stops taking requests and exits once everything accepted is done;
    /// with `cancel_pending`, fails what is not yet handed to the backend
    /// instead of serving it.
    Shutdown {
        cancel_pending: bool,
    },
    /// Makes the engine panic: tests of the crash path only.
    #[cfg(test)]
    Panic,
}

struct DeviceState {
    name: String,
    dispatcher: DeviceDispatcher,
    /// The budget last seen, to log each change once.
    budget_ns: Nanos,
    /// The controller's window count last seen, to log each decision once.
    windows_seen: u64,
    /// This device's class for each global class number (dense), once used.
    classes: Vec<Option<ClassId>>,
    ops: u64,
    bytes: u64,
}

struct RequestRecord {
    message: IoMessage,
    length: u64,
    submitted_ns: Nanos,
    transferred: u64,
    error: Option<i32>,
    short_end: Option<u64>,
    /// Whether pieces of it were cancelled (`short_end` is then at most the
    /// first cancelled piece's offset).
    cancelled: bool,
}

struct PieceRecord {
    device: usize,
    token: u64,
    request: usize,
    offset: u64,
    length: u64,
}

/// A vector of reusable slots.
struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, value: T) -> usize {
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some(value);
                index
            }
            None => {
                self.slots.push(Some(value));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, index: usize) -> T {
        let value = self.slots[index].take().expect("slab slot is empty");
        self.free.push(index);
        value
    }

    fn get_mut(&mut self, index: usize) -> &mut T {
        self.slots[index].as_mut().expect("slab slot is empty")
    }

    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// A file the engine has seen, under its descriptor number.
struct TrackedFile {
    /// The file's identity; dead once its owner and every request let go.
    file: Weak<File>,
    /// Whether the backend registered it (false: full table, or refused).
    registered: bool,
}

/// The files the engine has seen, by descriptor number; see "Registered
/// files" in the module docs.
#[derive(Default)]
struct FileRegistry {
    /// Indexed by descriptor number (small dense integers; none from
    /// [`MAX_REGISTERED_FD`] up, which are not tracked).
    by_fd: Vec<Option<TrackedFile>>,
    /// The descriptor numbers with an entry, for sweeps.
    tracked: Vec<RawFd>,
    /// When the last sweep ran.
    last_sweep_ns: Nanos,
}

impl FileRegistry {
    fn entry(&mut self, fd: RawFd) -> &mut Option<TrackedFile> {
        let index = usize::try_from(fd).expect("an open file has a descriptor");
        if self.by_fd.len() <= index {
            self.by_fd.resize_with(index + 1, || None);
        }
        &mut self.by_fd[index]
    }

    /// Whether `fd`'s entry is `file`.
    fn is_current(&self, fd: RawFd, file: &Arc<File>) -> bool {
        usize::try_from(fd)
            .ok()
            .and_then(|index| self.by_fd.get(index))
            .and_then(Option::as_ref)
            .is_some_and(|tracked| std::ptr::eq(tracked.file.as_ptr(), Arc::as_ptr(file)))
    }

    /// Takes `fd`'s entry out if its file is closed (leaving `tracked` to the
    /// caller); returns whether it was registered.
    fn take_if_closed(&mut self, fd: RawFd) -> Option<bool> {
        let entry = self.by_fd.get_mut(usize::try_from(fd).ok()?)?;
        if entry.as_ref()?.file.strong_count() > 0 {
            return None;
        }
        entry.take().map(|tracked| tracked.registered)
    }
}

/// How the engine hands ops to the kernel and how long its thread spins
/// (the [`crate::SchedulerBuilder`] settings of the same names).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineTuning {
    /// Submit each op as it is pushed instead of once per turn.
    pub(crate) eager_submit: bool,
    /// How long the engine thread spins before it parks.
    pub(crate) linger: Duration,
}

/// The engine's state; runs on its own thread.
pub(crate) struct Engine {
    /// Submit each op as it is pushed instead of once per turn.
    eager_submit: bool,
    /// The engine thread's spin before it sleeps (see "Lingering").
    linger: Linger,
    /// Whether an op was pushed since the last submit.
    unsubmitted: bool,
    /// Submit calls refused in a row (see "submit" in the module docs).
    submit_refusals: u32,
    backend: Box<dyn Backend>,
    backend_kind: BackendKind,
    controller: ControllerChoice,
    /// The quiet-reads rule for each device's dispatcher (fixed budget only).
    quiet_reads: Option<QuietReads>,
    handoff: Arc<Handoff<Message>>,
    /// The engine's time zero, in [`monotonic_ns`].
    epoch_ns: Nanos,
    devices: Vec<DeviceState>,
    /// Device ids in `devices` order: a process has few devices, so a scan of
    /// this short vector beats hashing on every request.
    device_ids: Vec<DeviceId>,
    classes: Vec<ClassStats>,
    /// Whether each class number may take requests (false once removed).
    live_classes: Vec<bool>,
    /// Each class number's rate limit, applied on every device it uses.
    rate_limits: Vec<Option<RateLimit>>,
    requests: Slab<RequestRecord>,
    pieces: Slab<PieceRecord>,
    shutting_down: bool,
    /// A shutdown that cancels: requests arriving from now on fail at once.
    cancelling: bool,
    inbox: Vec<Message>,
    cancelled: Vec<CancelledPiece>,
    dispatched: Vec<DispatchedPiece>,
    ops: Vec<Op>,
    completions: Vec<OpResult>,
    /// The wakers of the requests answered since the last
    /// [`Engine::wake_answered`] (see "Batched wakes" in [`crate::completion`]).
    wakes: Vec<Waker>,
    /// Where they go to be called, by this runner or any other thread.
    pending_wakes: Arc<PendingWakes>,
    /// Whether the thread running the engine awaits none of the results it
    /// answers (the engine thread does not): a reap then calls its first
    /// waker as soon as that request is answered (see "The first wake goes
    /// at once" in [`crate::completion`]).
    first_wake_at_once: bool,
    /// `None` where the backend registers no files.
    files: Option<FileRegistry>,
}

impl Engine {
    pub(crate) fn new(
        backend: Box<dyn Backend>,
        handoff: Arc<Handoff<Message>>,
        controller: ControllerChoice,
        quiet_reads: Option<QuietReads>,
        tuning: EngineTuning,
    ) -> Self {
        Self {
            eager_submit: tuning.eager_submit,
            linger: Linger::new(tuning.linger),
            unsubmitted: false,
            submit_refusals: 0,
            backend_kind: backend.kind(),
            controller,
            quiet_reads: controller.quiet_reads(quiet_reads),
            handoff,
            epoch_ns: monotonic_ns(),
            devices: Vec::new(),
            device_ids: Vec::new(),
            classes: Vec::new(),
            live_classes: Vec::new(),
            rate_limits: Vec::new(),
            requests: Slab::new(),
            pieces: Slab::new(),
            shutting_down: false,
            cancelling: false,
            inbox: Vec::new(),
            cancelled: Vec::new(),
            dispatched: Vec::new(),
            ops: Vec::new(),
            completions: Vec::new(),
            wakes: Vec::new(),
            pending_wakes: Arc::default(),
            first_wake_at_once: false,
            files: backend.registers_files().then(FileRegistry::default),
            backend,
        }
    }

    fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.epoch_ns)
    }

    /// The engine time of `at_ns`, a [`monotonic_ns`] reading.
    fn nanos_at(&self, at_ns: Nanos) -> Nanos {
        at_ns.saturating_sub(self.epoch_ns)
    }

    /// One loop iteration: take the queue, dispatch, submit (sleeping in the
    /// backend when operations are in flight, nothing is queued and `done` is
    /// still false), reap.
    fn turn(&mut self, done: &dyn Fn() -> bool) {
        let taken_at = self.take_messages();
        self.dispatch_all(taken_at);
        // Announce the sleep before the last look at `done`: a wake from another
        // thread either is seen by that look or finds the flag and interrupts
        // the sleep (see `crate::handoff`).
        let announced = !self.drained() && self.handoff.prepare_to_sleep();
        let sleep = announced && !done();
        // Work held by a rate limit needs a wake-up when it may go, whether
        // or not anything else is in flight.
        let submitted = match self.rate_limit_wait().filter(|_| sleep) {
            Some(timeout) => self.backend.submit_wait_timeout(timeout),
            None => self.backend.submit(sleep),
        };
        // Retried by the next submit: a ring wait is refused meanwhile.
        self.unsubmitted = self.submit_refused(submitted);
        if announced {
            self.handoff.awake();
        }
        let _ = self.reap();
    }

    /// A turn that never sleeps: take the queue, dispatch, submit what was
    /// pushed, reap. Returns whether it made progress (took messages or
    /// reaped completions, after which another turn may dispatch more).
    fn turn_awake(&mut self) -> bool {
        let taken_at = self.take_messages();
        self.dispatch_all(taken_at);
        if std::mem::take(&mut self.unsubmitted) {
            let submitted = self.backend.submit(false);
            // Retried by the next submit: a ring wait is refused meanwhile.
            self.unsubmitted = self.submit_refused(submitted);
        }
        let reaped = self.reap();
        taken_at.is_some() || reaped
    }

    /// One look of the engine thread while it lingers (see "Lingering"):
    /// a turn if messages may be queued, else nothing but a pause of the
    /// spin. Returns whether it made progress.
    fn linger_turn(&mut self) -> bool {
        for _ in 0..LINGER_PAUSES_PER_LOOK {
            std::hint::spin_loop();
        }
        self.handoff.maybe_queued() && self.turn_awake()
    }

    /// Whether a submit call was refused outright. The ops it held have not
    /// reached the kernel: they stay queued in the backend (io_uring's
    /// submission queue) and the next submit retries them, and their
    /// requests stay tracked and complete through `reap`. A refusal is
    /// logged at each power of two of the refusals in a row, and pauses the
    /// runner before the next try (see "submit" in the module docs).
    fn submit_refused(&mut self, submitted: std::io::Result<()>) -> bool {
        let Err(error) = submitted else {
            self.submit_refusals = 0;
            return false;
        };
        self.submit_refusals = self.submit_refusals.saturating_add(1);
        let refusals = self.submit_refusals;
        if refusals.is_power_of_two() {
            tracing::error!(
                %error,
                refusals,
                in_flight = self.backend.in_flight(),
                "tailguard engine: submit refused; retrying after a pause"
            );
        }
        std::thread::sleep(submit_retry_pause(refusals));
        true
    }

    /// Before the engine thread leaves the engine to wait in the ring beside
    /// other runners (see "Waiting in the ring" in [`crate::handoff`]):
    /// re-arms the backend's wake and announces the wait.
    fn prepare_ring_wait(&mut self) -> RingWait {
        if self.unsubmitted || self.backend.rearm_wake().is_err() {
            return RingWait::Unavailable;
        }
        if !self.handoff.prepare_ring_wait() {
            return RingWait::MessagesQueued;
        }
        let timeout = self
            .rate_limit_wait()
            .map_or(RING_WAIT_MAX, |wait| wait.min(RING_WAIT_MAX));
        RingWait::Go(timeout)
    }

    /// Runs the engine for a thread other than the engine thread, which waits
    /// in the ring: turns until one makes no progress, at most
    /// [`BESIDE_RING_WAIT_TURNS_MAX`], then re-arms the backend's wake
    /// ([`Engine::ready_to_leave`]). Returns whether the engine thread must
    /// look: also when the last turn still made progress, since more work
    /// is then waiting and it is the engine thread's to serve, not this
    /// submitter's (perhaps an async runtime's worker, inside a submit call).
    fn run_beside_ring_wait(&mut self) -> bool {
        let mut progress = true;
        for _ in 0..BESIDE_RING_WAIT_TURNS_MAX {
            progress = self.turn_awake();
            if !progress {
                break;
            }
        }
        self.ready_to_leave() || progress
    }

    /// Re-arms the backend's wake before a thread other than the engine
    /// thread releases the engine. Returns whether the engine thread must
    /// look (work held by a rate limit, or pushes left unsubmitted: its wait
    /// may be too long now).
    fn ready_to_leave(&mut self) -> bool {
        let rearmed = self.backend.rearm_wake().is_ok();
        !rearmed || self.unsubmitted || self.rate_limit_wait().is_some()
    }

    /// Whether shutdown has drained everything: the engine may be dropped.
    fn finished(&self) -> bool {
        self.shutting_down && self.drained()
    }

    fn drained(&self) -> bool {
        self.requests.len() == 0 && self.backend.in_flight() == 0
    }

    /// Takes and handles every queued message; returns when it took them
    /// (`None`: there were none, and the clock was not read).
    fn take_messages(&mut self) -> Option<Nanos> {
        let mut inbox = std::mem::take(&mut self.inbox);
        self.handoff.take_all(&mut inbox);
        if inbox.is_empty() {
            self.inbox = inbox;
            return None;
        }
        // One clock read per batch: the batch was taken at one instant.
        let now = self.now();
        if let Some(files) = &self.files {
            if now.saturating_sub(files.last_sweep_ns) >= FILE_SWEEP_INTERVAL_NS {
                self.sweep_closed_files(now);
            }
        }
        for message in inbox.drain(..) {
            self.handle(now, message);
        }
        self.inbox = inbox;
        Some(now)
    }

    fn handle(&mut self, now: Nanos, message: Message) {
        match message {
            Message::Io(io) => self.enqueue(now, io),
            Message::AddDevice {
                device,
                name,
                kind,
                profile,
            } => self.add_device(device, name, kind, profile),
            Message::AddClass {
                class,
                name,
                shares,
                rate_limit,
            } => {
                debug_assert_eq!(class as usize, self.classes.len());
                self.classes.push(ClassStats::new(name, shares));
                self.live_classes.push(true);
                self.rate_limits.push(None);
                self.set_rate_limit(now, class, rate_limit);
            }
            Message::SetRateLimit { class, rate_limit } => {
                self.set_rate_limit(now, class, rate_limit);
            }
            Message::SetShares { class, shares } => self.set_shares(class, shares),
            Message::FileClosed { fd } => self.release_if_closed(fd),
            Message::RemoveClass { class } => {
                if let Some(live) = self.live_classes.get_mut(class as usize) {
                    *live = false;
                }
                for device in &mut self.devices {
                    if let Some(id) = device
                        .classes
                        .get_mut(class as usize)
                        .and_then(Option::take)
                    {
                        let _ = device.dispatcher.remove_class(id);
                    }
                }
            }
            Message::Stats(responder) => {
                responder.send(Ok(self.snapshot()));
            }
            #[cfg(test)]
            Message::Panic => std::panic::panic_any(REQUESTED_PANIC),
            Message::CancelPending(responder) => {
                let count = self.cancel_queued(now);
                responder.send(Ok(count));
            }
            Message::Shutdown { cancel_pending } => {
                self.handoff.close();
                self.shutting_down = true;
                // Messages pushed after this batch was taken and before the
                // close were accepted: they are served (or cancelled) like
                // the rest, and the closed handoff takes no more.
                let mut late = Vec::new();
                self.handoff.take_all(&mut late);
                for message in late {
                    self.handle(now, message);
                }
                if cancel_pending {
                    self.cancelling = true;
                    self.cancel_queued(now);
                }
            }
        }
    }

    /// A dispatcher for a new device: one that seeks serves classes with a
    /// backlog in slices of [`DispatcherConfig::default_slice_ns`], as the
    /// simulator's disks are, and one that serves through a file without
    /// seeking takes the pieces [`ControllerChoice::pipeline_pieces`] says.
    fn add_device(
        &mut self,
        device: DeviceId,
        name: String,
        kind: DeviceKind,
        profile: DeviceProfile,
    ) {
        let DeviceKind {
            seeks,
            through_a_file,
            piece_alignment_bytes,
        } = kind;
        if let Some(index) = self.device_ids.iter().position(|known| *known == device) {
            // A later file on the device that needs a larger alignment.
            let dispatcher = &mut self.devices[index].dispatcher;
            dispatcher.raise_piece_alignment(piece_alignment_bytes);
            return;
        }
        let build = |profile: &DeviceProfile| {
            Dispatcher::with_controller(
                DispatcherConfig {
                    quiet_reads: self.quiet_reads,
                    slice_ns: seeks.then(|| DispatcherConfig::default_slice_ns(profile)),
                    pipeline_pieces: self.controller.pipeline_pieces(seeks, through_a_file),
                    spare_latency_classes: self.controller.spares_latency_classes(),
                    piece_alignment_bytes,
                    seeks,
                    ..DispatcherConfig::new(profile.clone())
                },
                self.controller.build(profile),
            )
        };
        let dispatcher = match build(&profile) {
            Ok(dispatcher) => dispatcher,
            Err(error) => {
                tracing::error!(%error, device = %name, "invalid profile; using defaults");
                build(&crate::DEFAULT_SSD_PROFILE).expect("the default profile is valid")
            }
        };
        let budget_ns = dispatcher.budget().limit_ns();
        tracing::info!(
            device = %name,
            budget_ns,
            seeks,
            through_a_file,
            controller = ?self.controller,
            ?profile,
            "tailguard: new device dispatcher"
        );
        self.device_ids.push(device);
        self.devices.push(DeviceState {
            name,
            dispatcher,
            budget_ns,
            windows_seen: 0,
            classes: Vec::new(),
            ops: 0,
            bytes: 0,
        });
    }

    fn set_shares(&mut self, class: ClassNumber, shares: u32) {
        if let Some(stats) = self.classes.get_mut(class as usize) {
            stats.shares = shares;
        }
        for device in &mut self.devices {
            if let Some(Some(id)) = device.classes.get(class as usize) {
                let _ = device.dispatcher.set_shares(*id, shares);
            }
        }
    }

    fn set_rate_limit(&mut self, now: Nanos, class: ClassNumber, limit: Option<RateLimit>) {
        let Some(slot) = self.rate_limits.get_mut(class as usize) else {
            return;
        };
        *slot = limit;
        let stats = &mut self.classes[class as usize];
        stats.rate_limit_bytes_per_s = limit.and_then(|limit| limit.bytes_per_s);
        stats.rate_limit_iops = limit.and_then(|limit| limit.iops);
        for device in &mut self.devices {
            if let Some(Some(id)) = device.classes.get(class as usize) {
                // The API validated the limit; a removed class is ignored.
                let _ = device.dispatcher.set_rate_limit(now, *id, limit);
            }
        }
    }

    /// How long the engine may sleep before a class held by its rate limit
    /// may go again (`None`: no queued work waits on a limit).
    fn rate_limit_wait(&self) -> Option<Duration> {
        let at = self
            .devices
            .iter()
            .filter_map(|device| device.dispatcher.next_eligible_at())
            .min()?;
        Some(Duration::from_nanos(at.saturating_sub(self.now())))
    }

    /// Takes a request into its device's dispatcher, or answers it at once
    /// when its class is gone or a cancelling shutdown is under way.
    fn enqueue(&mut self, now: Nanos, message: IoMessage) {
        // The API refuses such requests before they are sent; a class
        // removed by another thread meanwhile still must not reach (and
        // re-create itself in) a dispatcher.
        if !self
            .live_classes
            .get(message.class as usize)
            .copied()
            .unwrap_or(false)
        {
            refuse(message);
            return;
        }
        if self.cancelling {
            let error = cancelled_error(&message, buffer_len(&message));
            answer(message, error);
            return;
        }
        if let Some(file) = &message.file {
            self.track_file(file);
        }
        let device_slot = self
            .device_ids
            .iter()
            .position(|id| *id == message.device)
            .expect("a device is announced before its first request");
        let class = self.class_on_device(now, device_slot, message.class);
        let (direction, length) = match message.kind {
            IoKind::Read => (Direction::Read, buffer_len(&message)),
            IoKind::Write => (Direction::Write, buffer_len(&message)),
            IoKind::Fsync | IoKind::Fdatasync => (Direction::Write, 0),
            IoKind::Nop => (Direction::Read, 0),
        };
        let offset = message.offset;
        let submitted_ns = self.nanos_at(message.submitted_at_ns);
        let request = self.requests.insert(RequestRecord {
            message,
            length,
            submitted_ns,
            transferred: 0,
            error: None,
            short_end: None,
            cancelled: false,
        });
        self.devices[device_slot]
            .dispatcher
            .enqueue(
                now,
                IoRequest {
                    id: RequestId(request as u64),
                    class,
                    direction,
                    offset_bytes: offset,
                    length_bytes: length,
                },
            )
            .expect("the class is live on this device, and the API checked the range");
    }

    /// The dispatcher class of global class `number` on the device in
    /// `device_slot`, created (with the class's shares and rate limit) the
    /// first time the class uses that device.
    fn class_on_device(&mut self, now: Nanos, device_slot: usize, number: ClassNumber) -> ClassId {
        let shares = self.classes[number as usize].shares;
        let rate_limit = self.rate_limits[number as usize];
        let device = &mut self.devices[device_slot];
        let number = number as usize;
        if device.classes.len() <= number {
            device.classes.resize(number + 1, None);
        }
        if let Some(class) = device.classes[number] {
            return class;
        }
        let class = device
            .dispatcher
            .add_class(shares)
            .expect("shares were validated by the API");
        device
            .dispatcher
            .set_rate_limit(now, class, rate_limit)
            .expect("the rate limit was validated by the API");
        device.classes[number] = Some(class);
        class
    }

    /// Fails every request not yet handed to the backend: drops every queued
    /// piece from every dispatcher, finishes at once each request left with
    /// nothing in flight, and leaves the others to their pieces in flight,
    /// which finish them with the contiguous bytes done (see "Cancelling" in
    /// the module docs). Returns how many requests it cancelled, whole or
    /// in part.
    fn cancel_queued(&mut self, now: Nanos) -> usize {
        let mut cancelled = std::mem::take(&mut self.cancelled);
        let mut requests = 0;
        for device_slot in 0..self.devices.len() {
            if !self.devices[device_slot].dispatcher.has_queued() {
                continue;
            }
            self.devices[device_slot]
                .dispatcher
                .cancel_queued(&mut cancelled);
            for piece in cancelled.drain(..) {
                let request = piece.request.0 as usize;
                let record = self.requests.get_mut(request);
                requests += usize::from(!record.cancelled);
                record.cancelled = true;
                let end = piece.offset_bytes;
                record.short_end = Some(record.short_end.map_or(end, |short| short.min(end)));
                if let Some(finished) = piece.finished {
                    self.finish_request(now, device_slot, request, finished);
                }
            }
        }
        self.cancelled = cancelled;
        self.wake_answered();
        if requests > 0 {
            tracing::debug!(requests, "tailguard engine: cancelled the queued requests");
        }
        requests
    }

    fn dispatch_all(&mut self, taken_at: Option<Nanos>) {
        // A turn that took no message, with nothing waiting for budget, has
        // nothing to dispatch: no clock read then. A turn that took messages
        // dispatches at the instant it took them (its clock read, microseconds
        // old at most), so a request admitted at once shows no queue wait.
        if !self
            .devices
            .iter()
            .any(|device| device.dispatcher.has_queued())
        {
            return;
        }
        let now = taken_at.unwrap_or_else(|| self.now());
        // Drain swapped-out vectors and swap them back, so each turn reuses
        // their allocations (as `reap` does).
        let mut dispatched = std::mem::take(&mut self.dispatched);
        let mut ops = std::mem::take(&mut self.ops);
        for device_slot in 0..self.devices.len() {
            if !self.devices[device_slot].dispatcher.has_queued() {
                continue;
            }
            self.devices[device_slot]
                .dispatcher
                .dispatch(now, &mut dispatched);
            for piece in dispatched.drain(..) {
                ops.push(self.op_for(device_slot, &piece));
            }
        }
        for op in ops.drain(..) {
            self.push(op);
        }
        self.dispatched = dispatched;
        self.ops = ops;
    }

    fn op_for(&mut self, device: usize, piece: &DispatchedPiece) -> Op {
        let request = piece.request.0 as usize;
        let record = self.requests.get_mut(request);
        let kind = match record.message.kind {
            IoKind::Read => OpKind::Read,
            IoKind::Write => OpKind::Write,
            IoKind::Fsync => OpKind::Fsync,
            IoKind::Fdatasync => OpKind::Fdatasync,
            IoKind::Nop => OpKind::Nop,
        };
        let within = (piece.offset_bytes - record.message.offset) as usize;
        let buffer = match record.message.buffer.as_mut() {
            // SAFETY: the piece lies inside the request, and the request's length
            // is the buffer's length, so `within` is in bounds.
            Some(buffer) if piece.length_bytes > 0 => unsafe { buffer.as_mut_ptr().add(within) },
            _ => std::ptr::null_mut(),
        };
        let fd = record
            .message
            .file
            .as_ref()
            .map_or(-1, |file| file.as_raw_fd());
        let user_data = self.pieces.insert(PieceRecord {
            device,
            token: piece.token,
            request,
            offset: piece.offset_bytes,
            length: piece.length_bytes,
        }) as u64;
        Op {
            user_data,
            fd,
            kind,
            buffer,
            length: u32::try_from(piece.length_bytes)
                .expect("pieces are at most max_request_bytes"),
            offset: piece.offset_bytes,
        }
    }

    /// Pushes one op, making room when the backend is full: first by submitting
    /// what is queued (enough for io_uring, whose limit is the submission queue),
    /// then, if still full, by waiting for a completion (the thread pool's limit
    /// is ops in flight).
    fn push(&mut self, mut op: Op) {
        // Eager submission hands the previous op to the kernel before pushing
        // this one, so the turn's last op goes with the turn's own submit: a
        // lone request (queue depth 1) costs one system call, not two.
        if self.eager_submit && self.unsubmitted {
            self.submit_now();
        }
        let mut wait = false;
        loop {
            // SAFETY: the op's buffer is the request's AlignedBuffer, which the
            // request record owns until this op's completion is reaped and its
            // request finished; nothing else touches it meanwhile.
            match unsafe { self.backend.push(op) } {
                Ok(()) => {
                    self.unsubmitted = true;
                    return;
                }
                Err(returned) => {
                    op = returned;
                    let waiting = wait && self.backend.in_flight() > 0;
                    if let Err(error) = self.backend.submit(waiting) {
                        tracing::error!(%error, "tailguard engine: submit failed while full");
                    }
                    let _ = self.reap();
                    wait = true;
                }
            }
        }
    }

    /// Hands what is pushed to the kernel without waiting (eager submission).
    /// A failure is left for the turn's own submit, which logs it and leaves
    /// the ops pushed, to be submitted again on the next turn (the backends
    /// absorb the transient errors, EINTR, EAGAIN and EBUSY, themselves).
    fn submit_now(&mut self) {
        self.unsubmitted = false;
        if let Err(error) = self.backend.submit(false) {
            tracing::debug!(%error, "tailguard engine: eager submit failed; retried at the turn's end");
        }
    }

    /// Reaps every available completion; returns whether there were any.
    fn reap(&mut self) -> bool {
        self.backend.reap(&mut self.completions);
        if self.completions.is_empty() {
            return false;
        }
        let now = self.now();
        // Drain a swapped-out vector and swap it back, so reaping reuses one
        // allocation instead of growing a fresh vector on every wake-up.
        let mut completions = std::mem::take(&mut self.completions);
        let mut first_wake_at_once = self.first_wake_at_once && completions.len() > 1;
        for completion in completions.drain(..) {
            self.complete_piece(now, completion);
            if first_wake_at_once && !self.wakes.is_empty() {
                first_wake_at_once = false;
                self.wake_answered();
            }
        }
        self.completions = completions;
        self.wake_answered();
        self.log_controller_decisions();
        true
    }

    /// Calls the wakers of the requests answered since the last call, once
    /// all of them are answered, through [`PendingWakes`] so that a woken
    /// thread may call the rest itself (see "Batched wakes" in
    /// [`crate::completion`]).
    fn wake_answered(&mut self) {
        self.pending_wakes.publish(&mut self.wakes);
        self.pending_wakes.wake_pending();
    }

    /// Traces the controllers: one event per device whose budget changed since the
    /// last look (never for `Fixed`, whose budget does not move), and, at debug
    /// level, one per decision (a held budget included; when several windows
    /// ended since the last look, the last one's).
    fn log_controller_decisions(&mut self) {
        let each_decision = tracing::enabled!(target: CONTROLLER_TARGET, tracing::Level::DEBUG);
        for device in &mut self.devices {
            let budget_ns = device.dispatcher.budget().limit_ns();
            if budget_ns == device.budget_ns && !each_decision {
                continue;
            }
            let stats = device.dispatcher.stats();
            let controller = stats.controller;
            let decision = controller.last_decision;
            if let Some(decision) = decision.filter(|_| controller.windows != device.windows_seen) {
                device.windows_seen = controller.windows;
                tracing::debug!(
                    target: CONTROLLER_TARGET,
                    device = %device.name,
                    windows = controller.windows,
                    situation = decision.situation.name(),
                    budget_before_ns = decision.budget_before_ns,
                    budget_after_ns = decision.budget_after_ns,
                    rate_milli = decision.rate_milli,
                    delay_ns = decision.delay_ns,
                    reads = decision.reads,
                    late_reads = decision.late_reads,
                    over_target_reads = decision.over_target_reads,
                    "tailguard: window judged"
                );
            }
            if budget_ns == device.budget_ns {
                continue;
            }
            tracing::info!(
                target: CONTROLLER_TARGET,
                device = %device.name,
                old_budget_ns = device.budget_ns,
                new_budget_ns = budget_ns,
                budget_changes = stats.budget_changes,
                windows = controller.windows,
                grows = controller.grows,
                shrinks = controller.shrinks,
                holds = controller.holds,
                congested = controller.congested,
                situation = ?controller.last,
                rate_milli = controller.rate_milli,
                delay_ns = decision.map(|d| d.delay_ns),
                reads = decision.map(|d| d.reads),
                late_reads = decision.map(|d| d.late_reads),
                over_target_reads = decision.map(|d| d.over_target_reads),
                "tailguard: device budget changed"
            );
            device.budget_ns = budget_ns;
        }
    }

    fn complete_piece(&mut self, now: Nanos, completion: OpResult) {
        let piece = self.pieces.remove(completion.user_data as usize);
        let record = self.requests.get_mut(piece.request);
        if completion.result < 0 {
            record.error.get_or_insert(-completion.result);
        } else {
            let done = completion.result as u64;
            record.transferred += done;
            if done < piece.length {
                let end = piece.offset + done;
                record.short_end = Some(record.short_end.map_or(end, |short| short.min(end)));
            }
        }
        let finished = self.devices[piece.device]
            .dispatcher
            .complete(now, piece.token)
            .expect("each piece completes once");
        if let Some(finished) = finished {
            self.finish_request(now, piece.device, piece.request, finished);
        }
    }

    fn finish_request(
        &mut self,
        now: Nanos,
        device: usize,
        request: usize,
        finished: tailguard_core::Completion,
    ) {
        let record = self.requests.remove(request);
        let message = record.message;
        let result: io::Result<u64> = match (record.error, record.short_end) {
            (Some(errno), _) => Err(crate::request_error::of_message(
                errno,
                &message,
                record.length,
            )),
            (None, Some(end)) if record.cancelled && end == message.offset => {
                Err(cancelled_error(&message, record.length))
            }
            (None, Some(end)) => Ok(end - message.offset),
            (None, None) => Ok(record.length),
        };
        // A request cancelled whole never reached the device: it counts for
        // its class, with its time in the queue as its wait, and not for the
        // device or the device time.
        let left_queue_at = if finished.dispatched {
            let device_state = &mut self.devices[device];
            device_state.ops += 1;
            device_state.bytes += record.transferred;
            finished.last_dispatched_at
        } else {
            now
        };
        let class = &mut self.classes[message.class as usize];
        class.ops += 1;
        class.bytes += record.transferred;
        class.errors += u64::from(result.is_err());
        stats::record(
            &mut class.queue_wait_ns,
            left_queue_at.saturating_sub(finished.enqueued_at),
        );
        if finished.dispatched {
            stats::record(&mut class.device_time_ns, now.saturating_sub(left_queue_at));
        }
        stats::record(
            &mut class.latency_ns,
            now.saturating_sub(record.submitted_ns),
        );
        let mut message = message;
        let file = message.file.take();
        match message.reply {
            Reply::Data(responder) => {
                let buffer = message.buffer.take().expect("data requests carry a buffer");
                responder.send_batched(
                    (result.map(|bytes| bytes as usize), buffer),
                    &mut self.wakes,
                );
            }
            Reply::Unit(responder) => {
                responder.send_batched(result.map(|_| ()), &mut self.wakes);
            }
        }
        if let Some(file) = file {
            let fd = file.as_raw_fd();
            drop(file);
            self.release_if_closed(fd);
        }
    }

    /// Registers `file` with the backend the first time a request on it
    /// arrives; see "Registered files" in the module docs.
    fn track_file(&mut self, file: &Arc<File>) {
        let Some(files) = &mut self.files else {
            return;
        };
        let fd = file.as_raw_fd();
        if fd >= MAX_REGISTERED_FD || files.is_current(fd, file) {
            return;
        }
        // Another file had this descriptor number: it is closed (an open
        // file's number is not reused), so give up its registration before
        // an op on the new one can be pushed under the same number.
        match files.entry(fd).take() {
            Some(stale) => {
                debug_assert_eq!(stale.file.strong_count(), 0, "descriptor {fd} reused");
                if stale.registered {
                    self.backend.unregister_file(fd);
                }
            }
            None => files.tracked.push(fd),
        }
        let registered = self.backend.register_file(fd);
        *files.entry(fd) = Some(TrackedFile {
            file: Arc::downgrade(file),
            registered,
        });
    }

    /// Gives up `fd`'s registration if its file is closed.
    fn release_if_closed(&mut self, fd: RawFd) {
        let Some(files) = &mut self.files else {
            return;
        };
        let Some(registered) = files.take_if_closed(fd) else {
            return;
        };
        files.tracked.retain(|&other| other != fd);
        if registered {
            self.backend.unregister_file(fd);
        }
    }

    /// Gives up the registration of every file closed since the last sweep.
    fn sweep_closed_files(&mut self, now: Nanos) {
        let Some(files) = &mut self.files else {
            return;
        };
        files.last_sweep_ns = now;
        let mut index = 0;
        while index < files.tracked.len() {
            let fd = files.tracked[index];
            match files.take_if_closed(fd) {
                None => index += 1,
                Some(registered) => {
                    files.tracked.swap_remove(index);
                    if registered {
                        self.backend.unregister_file(fd);
                    }
                }
            }
        }
    }

    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            backend: self.backend_kind,
            devices: self
                .devices
                .iter()
                .map(|device| {
                    let counters = device.dispatcher.stats();
                    DeviceStats {
                        name: device.name.clone(),
                        ops: device.ops,
                        bytes: device.bytes,
                        in_flight_pieces: counters.in_flight_pieces,
                        in_flight_ns: counters.in_flight_ns,
                        budget_ns: counters.budget_ns,
                        slice_ns: device.dispatcher.slice_ns(),
                        queued_pieces: counters.queued_pieces,
                        budget_changes: counters.budget_changes,
                        controller: counters.controller.into(),
                        profile: device.dispatcher.profile().clone(),
                    }
                })
                .collect(),
            classes: stats::merged_by_name(&self.classes),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.crash();
        }
    }
}

impl Engine {
    /// After a panic in the engine's code: fails every request it holds or that
    /// is still queued, and closes the handoff.
    fn crash(&mut self) {
        tracing::error!("the tailguard engine panicked; failing every pending request");
        // Queued messages are dropped unanswered: their responders answer with
        // an error (their buffers never reached the kernel, so they are freed).
        self.handoff.close_after_crash();
        let mut queued = Vec::new();
        self.handoff.take_all(&mut queued);
        drop(queued);
        for mut record in self.requests.slots.iter_mut().filter_map(Option::take) {
            // The kernel may still be transferring into this buffer, and a
            // thread-pool worker may yet run a queued op on this descriptor
            // (it takes ops until the pool is dropped, after this): leak
            // both. A descriptor closed here could be reused by the next
            // open, and the op would then reach another file.
            std::mem::forget(record.message.buffer.take());
            std::mem::forget(record.message.file.take());
        }
        // Requests answered before the panic: their futures must still wake.
        self.wake_answered();
        // A thread that ran the engine beside the ring wait may have reaped
        // the engine thread's wake read: re-arm it, so that the wake-up that
        // thread sends on leaving reaches the engine thread (best effort: the
        // backend may be what failed).
        let _ = self.backend.rearm_wake();
    }
}

/// The backend's waker, as the handoff's.
pub(crate) struct BackendWaker(pub(crate) Arc<dyn EngineWaker>);

impl Wake for BackendWaker {
    fn wake(&self) {
        self.0.wake();
    }
}

/// The engine, shared by the engine thread and helping waiters; see the module
/// docs.
pub(crate) struct Shared {
    pub(crate) handoff: Arc<Handoff<Message>>,
    pub(crate) waker: BackendWaker,
    /// `None` once the engine thread finished a shutdown, or after a crash.
    engine: Mutex<Option<Engine>>,
    /// Whether waiters may run the engine (false: the backend is bound to the
    /// engine thread).
    helpers_allowed: bool,
    backend: BackendKind,
    /// Whether the engine thread waits in the ring without the engine (see
    /// "Waiting in the ring" in [`crate::handoff`]).
    waits_in_ring: bool,
    /// The engine thread's handle for that wait, until it takes it.
    ring_wait: Mutex<Option<Arc<dyn CompletionWait>>>,
    /// The engine's wakers not called yet (see "Batched wakes" in
    /// [`crate::completion`]).
    pub(crate) pending_wakes: Arc<PendingWakes>,
}

/// Why the engine thread leaves the engine.
enum Leave {
    /// Shutdown drained everything: drop the engine and exit.
    Exit,
    /// Nothing to do, or a helper runs the engine: park.
    Park,
    /// Operations in flight: wait in the ring, at most this long.
    RingWait(Duration),
}

/// What [`Engine::prepare_ring_wait`] found.
enum RingWait {
    /// Wait, at most this long.
    Go(Duration),
    /// Messages arrived: turn again.
    MessagesQueued,
    /// Pushes left unsubmitted, or the wake cannot be re-armed: sleep in the
    /// backend with the engine instead.
    Unavailable,
}

/// Drops the engine if the thread running it panics, so that its `Drop` fails
/// every pending request (see the module docs), and unparks the engine thread
/// (by closing the handoff) so that it sees the engine gone and exits.
struct CrashGuard<'a, 'b> {
    engine: &'a mut MutexGuard<'b, Option<Engine>>,
    handoff: &'a Handoff<Message>,
}

impl Drop for CrashGuard<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            drop(self.engine.take());
            self.handoff.close_after_crash();
        }
    }
}

thread_local! {
    /// The engine this thread runs now (its `Shared`'s address; 0: none).
    static RUNNING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as running an engine until dropped: a shutdown started
/// from inside the engine's turn (a waker dropping the scheduler's last
/// handle) must not wait for the engine thread, which would wait for this
/// thread to let go of the engine.
struct RunningMark(usize);

impl RunningMark {
    fn new(shared: &Shared) -> Self {
        Self(RUNNING.replace(std::ptr::from_ref(shared) as usize))
    }
}

impl Drop for RunningMark {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

impl Shared {
    pub(crate) fn new(engine: Engine, helpers_allowed: bool) -> Arc<Self> {
        let ring_wait = helpers_allowed
            .then(|| engine.backend.completion_wait())
            .flatten();
        Arc::new(Self {
            waits_in_ring: ring_wait.is_some(),
            ring_wait: Mutex::new(ring_wait),
            handoff: engine.handoff.clone(),
            pending_wakes: engine.pending_wakes.clone(),
            waker: BackendWaker(engine.backend.waker()),
            backend: engine.backend_kind,
            engine: Mutex::new(Some(engine)),
            helpers_allowed,
        })
    }

    pub(crate) fn backend_kind(&self) -> BackendKind {
        self.backend
    }

    /// Whether this thread runs this engine now (the engine thread, or a
    /// waiter or submitter helping it).
    pub(crate) fn runs_here(&self) -> bool {
        RUNNING.get() == std::ptr::from_ref(self) as usize
    }

    /// Whether waiters may run the engine (see [`crate::Scheduler::hold_engine`]).
    pub(crate) fn helpers_allowed(&self) -> bool {
        self.helpers_allowed
    }

    fn lock_engine(&self) -> MutexGuard<'_, Option<Engine>> {
        // A poisoned lock means the engine crashed; the crash guard left `None`.
        self.engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The engine thread's body: run the loop while there is work, wait in
    /// the ring (or sleep in the backend) while operations are in flight,
    /// park when there is nothing to do, exit when shutdown has drained
    /// everything (or after a crash).
    pub(crate) fn run_engine_thread(&self) {
        let ring_wait = self
            .ring_wait
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        loop {
            let mut guard = self.lock_engine();
            let crash = CrashGuard {
                engine: &mut guard,
                handoff: &self.handoff,
            };
            let Some(engine) = crash.engine.as_mut() else {
                return;
            };
            let running = RunningMark::new(self);
            let leave = self.run_until_leaving(engine, ring_wait.is_some());
            drop(running);
            if let Leave::Exit = leave {
                // Everything is drained: dropping the engine closes the backend.
                drop(crash.engine.take());
                tracing::debug!("tailguard engine: drained, exiting");
                return;
            }
            drop(crash);
            drop(guard);
            match (leave, &ring_wait) {
                (Leave::RingWait(timeout), Some(ring_wait)) => {
                    ring_wait.wait(Some(timeout));
                    self.handoff.end_ring_wait();
                }
                _ => self.handoff.wait_unparked(),
            }
        }
    }

    /// Runs the loop on the engine thread until it leaves the engine. With
    /// `waits_in_ring`, turns never sleep: with operations in flight and a
    /// turn that found nothing to do, the thread leaves to wait in the ring,
    /// so that a submitter may run the engine meanwhile.
    fn run_until_leaving(&self, engine: &mut Engine, waits_in_ring: bool) -> Leave {
        engine.first_wake_at_once = true;
        let leave = self.turn_until_leaving(engine, waits_in_ring);
        engine.first_wake_at_once = false;
        leave
    }

    /// [`Shared::run_until_leaving`]'s loop.
    fn turn_until_leaving(&self, engine: &mut Engine, waits_in_ring: bool) -> Leave {
        let mut lingering = false;
        loop {
            let progress = if lingering {
                engine.linger_turn()
            } else if waits_in_ring {
                engine.turn_awake()
            } else {
                engine.turn(&|| false);
                true
            };
            lingering = false;
            if progress {
                engine.linger.progressed();
            }
            if engine.finished() {
                return Leave::Exit;
            }
            if engine.drained() {
                // Parked, the engine would not see files closed meanwhile
                // until its next request: release those closed already.
                engine.sweep_closed_files(engine.now());
                lingering = engine.linger.goes_on();
                if !lingering && self.handoff.try_park() {
                    return Leave::Park;
                }
            } else if self.handoff.try_yield_to_helpers() {
                // A helper will run the engine in its next wait: each
                // completion then reaches its waiter with no thread hop.
                return Leave::Park;
            } else if !progress {
                match engine.prepare_ring_wait() {
                    RingWait::Go(timeout) => return Leave::RingWait(timeout),
                    RingWait::MessagesQueued => {}
                    RingWait::Unavailable => engine.turn(&|| false),
                }
            }
        }
    }

    /// Submits `message` on this thread while the engine thread waits in the
    /// ring and the engine is free: takes the engine, pushes without a wake,
    /// and runs the engine until it has nothing to do (see "Waiting in the
    /// ring" in [`crate::handoff`]), so the engine thread is not woken to
    /// submit it. Hands the message back where that does not apply.
    pub(crate) fn try_submit_beside_ring_wait(&self, message: Message) -> Result<(), Message> {
        if !self.waits_in_ring {
            return Err(message);
        }
        let Ok(mut guard) = self.engine.try_lock() else {
            return Err(message);
        };
        let Some(engine) = guard.as_mut() else {
            return Err(message);
        };
        self.handoff.try_push_beside_ring_wait(message)?;
        // A panic in the engine's code crashes the engine, as in `help`.
        let running = RunningMark::new(self);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.run_beside_ring_wait()
        }));
        let must_look = outcome.unwrap_or_else(|_| {
            if let Some(mut engine) = guard.take() {
                engine.crash();
            }
            true
        });
        drop(guard);
        // After the crash's wakers and the lock (see `help`).
        drop(running);
        self.handoff
            .leave_engine_beside_ring_wait(must_look, &self.waker);
        Ok(())
    }

    /// Runs the loop on this waiting thread until `parker` is notified or there
    /// is nothing left to do here; returns false if the engine was not free.
    /// Opens a helping session the first time (see [`crate::handoff`]).
    fn help(&self, parker: &Parker, session: &mut bool) -> bool {
        let mut guard = match self.engine.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => return false,
            Err(TryLockError::Poisoned(_)) => return true,
        };
        let Some(engine) = guard.as_mut() else {
            return true;
        };
        if !std::mem::replace(session, true) {
            self.handoff.begin_helping();
        }
        parker.set_running_engine(true);
        let running = RunningMark::new(self);
        let done = || parker.is_notified();
        // A panic in the engine's code (a bug) must not unwind into the caller's
        // thread with the engine half-updated: it crashes the engine, which
        // fails every pending request, and the waiter gets its answer.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            loop {
                engine.turn(&done);
                if done() || engine.drained() {
                    break;
                }
            }
            !engine.drained() || engine.shutting_down
        }));
        parker.set_running_engine(false);
        self.leave_after_run(guard, running, outcome);
        true
    }

    /// Leaves the engine after a run on a thread other than the engine
    /// thread (a helper's, or a turn under a hold): `outcome` says whether
    /// the run left work, or is the panic of the engine's code, which
    /// crashes the engine (every pending request fails).
    fn leave_after_run(
        &self,
        mut guard: MutexGuard<'_, Option<Engine>>,
        running: RunningMark,
        outcome: std::thread::Result<bool>,
    ) {
        let must_look = match outcome {
            Ok(work_left) => {
                self.handoff.leave_engine(work_left);
                self.waits_in_ring && guard.as_mut().is_some_and(Engine::ready_to_leave)
            }
            Err(_) => {
                if let Some(mut engine) = guard.take() {
                    engine.crash();
                }
                self.handoff.leave_engine(false);
                true
            }
        };
        drop(guard);
        // Only now: a waker that `crash` calls may drop the last handle, and
        // the shutdown must see that this thread runs the engine (it holds
        // the lock the engine thread waits for) instead of joining it.
        drop(running);
        if self.waits_in_ring {
            // The engine thread may wait in the ring meanwhile.
            self.handoff
                .leave_engine_beside_ring_wait(must_look, &self.waker);
        }
    }
}

impl Driver for Shared {
    fn drive_until_notified(&self, parker: &Parker, session: &mut bool) {
        drive_until_notified_helping(&self.handoff, parker, session, |parker, session| {
            self.helpers_allowed && self.help(parker, session)
        });
    }

    fn end_session(&self) {
        self.handoff.end_helping();
    }

    fn begin_session(&self) {
        self.handoff.begin_helping();
    }

    fn kick(&self) {
        self.handoff.kick();
    }

    fn interrupt(&self) {
        self.handoff.interrupt(&self.waker);
    }

    fn wake_pending(&self) {
        self.pending_wakes.wake_pending();
    }

    fn submit_held(&self) {
        let Ok(mut guard) = self.engine.try_lock() else {
            return;
        };
        let Some(engine) = guard.as_mut().filter(|engine| engine.eager_submit) else {
            return;
        };
        let running = RunningMark::new(self);
        // A panic in the engine's code crashes the engine, as in `help`.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.turn_awake();
            !engine.drained() || engine.shutting_down
        }));
        self.leave_after_run(guard, running, outcome);
    }
}

/// Nanoseconds on the monotonic clock (`CLOCK_MONOTONIC`, the clock behind
/// `std::time::Instant` on Linux), as one integer: reading it costs the vDSO
/// call alone, where `Instant::elapsed().as_nanos()` adds a checked
/// `timespec` subtraction and 128-bit arithmetic, three times per request.
/// rustix calls the vDSO's `clock_gettime` directly (no libc wrapper between).
pub(crate) fn monotonic_ns() -> Nanos {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // A monotonic reading is non-negative (time since boot).
    (now.tv_sec as Nanos) * 1_000_000_000 + now.tv_nsec as Nanos
}

/// The pause before the next try after `refusals` refused submit calls in
/// a row (from 1): [`SUBMIT_RETRY_PAUSE_FIRST`] doubled per refusal, at most
/// [`SUBMIT_RETRY_PAUSE_MAX`].
fn submit_retry_pause(refusals: u32) -> Duration {
    let doublings = refusals.saturating_sub(1).min(16);
    (SUBMIT_RETRY_PAUSE_FIRST * (1 << doublings)).min(SUBMIT_RETRY_PAUSE_MAX)
}

/// Answers a request naming a class this engine does not have (removed)
/// without running it.
fn refuse(message: IoMessage) {
    answer(
        message,
        crate::Error::invalid_config("the request's class was removed; add_class makes a new one")
            .into(),
    );
}

/// Answers a request that never reached a dispatcher with `error`, giving a
/// data request its buffer back.
fn answer(mut message: IoMessage, error: io::Error) {
    match message.reply {
        Reply::Data(responder) => {
            let buffer = message.buffer.take().expect("data requests carry a buffer");
            responder.send((Err(error), buffer));
        }
        Reply::Unit(responder) => {
            responder.send(Err(error));
        }
    }
}

/// The error of a request cancelled before any of its bytes were
/// transferred: [`io::ErrorKind::Interrupted`], naming the request and the
/// call that cancelled it.
fn cancelled_error(message: &IoMessage, length_bytes: u64) -> io::Error {
    let operation = match message.kind {
        IoKind::Read => "read",
        IoKind::Write => "write",
        IoKind::Fsync => "fsync",
        IoKind::Fdatasync => "fdatasync",
        IoKind::Nop => "nop",
    };
    io::Error::new(
        io::ErrorKind::Interrupted,
        format!(
            "{operation} of {length_bytes} bytes at offset {} cancelled before it reached the \
             device (Scheduler::shutdown_now or cancel_pending); nothing of it was transferred: \
             submit it again if it still matters",
            message.offset
        ),
    )
}

/// What the engine panics with when a test asks it to (`Message::Panic`).
#[cfg(test)]
pub(crate) const REQUESTED_PANIC: &str = "engine panic requested by a test";

pub(crate) fn engine_stopped() -> io::Error {
    io::Error::other("the tailguard engine stopped unexpectedly (a bug; see the log)")
}

fn buffer_len(message: &IoMessage) -> u64 {
    message
        .buffer
        .as_ref()
        .map_or(0, |buffer| buffer.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::threads::ThreadPool;
    use crate::completion::IoFuture;
    use std::future::Future;

    fn engine() -> Engine {
        let backend = ThreadPool::new(1, 8).expect("a thread pool");
        Engine::new(
            Box::new(backend),
            Arc::new(Handoff::new()),
            ControllerChoice::Fixed,
            None,
            EngineTuning {
                eager_submit: true,
                linger: Duration::ZERO,
            },
        )
    }

    /// A NOP of class 0 on device 1, answered through `responder`.
    fn nop_on_device_1(responder: Responder<io::Result<()>>) -> Message {
        Message::Io(IoMessage {
            class: 0,
            device: DeviceId(1),
            file: None,
            kind: IoKind::Nop,
            buffer: None,
            offset: 0,
            submitted_at_ns: 0,
            reply: Reply::Unit(responder),
        })
    }

    #[test]
    fn a_linger_runs_from_the_first_idle_look_and_halves_after_each_long_gap() {
        let micros = Duration::from_micros;
        let mut linger = Linger::new(micros(80));
        let start = Instant::now();
        assert!(linger.goes_on_at(start));
        assert!(linger.goes_on_at(start + micros(79)));
        assert!(!linger.goes_on_at(start + micros(80)));
        assert!(
            !linger.goes_on_at(start + micros(90)),
            "an ended spell stays ended"
        );
        // The next message came 200 µs after the spell began: the next
        // spell lasts half as long, and so on down to an eighth.
        let mut spell = start;
        for limit in [40, 20, 10, 10] {
            linger.progressed_at(spell + micros(200));
            spell += micros(300);
            assert!(linger.goes_on_at(spell));
            assert!(linger.goes_on_at(spell + micros(limit - 1)), "{limit}");
            assert!(!linger.goes_on_at(spell + micros(limit)), "{limit}");
        }
        // Parked after the probe, the thread got a message 50 µs after the
        // spell began: within the linger, so the whole of it comes back.
        let second = spell;
        linger.progressed_at(second + micros(50));
        let third = second + micros(100);
        assert!(linger.goes_on_at(third));
        assert!(linger.goes_on_at(third + micros(79)));
        assert!(!linger.goes_on_at(third + micros(80)));
        // A long gap again, then progress with no spell running, which
        // changes nothing: the next spell lasts half the linger.
        linger.progressed_at(third + micros(500));
        linger.progressed_at(third + micros(600));
        let fourth = third + micros(1000);
        assert!(linger.goes_on_at(fourth));
        assert!(linger.goes_on_at(fourth + micros(39)));
        assert!(!linger.goes_on_at(fourth + micros(40)));
        assert!(
            !Linger::new(Duration::ZERO).goes_on(),
            "no linger: park at once"
        );
    }

    #[test]
    fn refused_submits_pause_longer_each_time_up_to_the_cap() {
        let pauses: Vec<Duration> = [1, 2, 3, 7, 8, 100, u32::MAX]
            .into_iter()
            .map(submit_retry_pause)
            .collect();
        let millis = |ms| Duration::from_millis(ms);
        assert_eq!(
            pauses,
            [
                millis(1),
                millis(2),
                millis(4),
                millis(64),
                millis(100),
                millis(100),
                millis(100)
            ]
        );
    }

    struct NoWake;

    impl crate::handoff::Wake for NoWake {
        fn wake(&self) {}
    }

    #[test]
    fn a_request_accepted_while_the_shutdown_is_handled_is_still_served() {
        // A submitter's push can land after the engine took the batch that
        // holds `Shutdown` and before the handoff closes: it was accepted.
        let mut engine = engine();
        let profile = crate::DEFAULT_SSD_PROFILE.clone();
        engine.add_device(DeviceId(1), "null".into(), DeviceKind::PLAIN, profile);
        engine.handle(
            0,
            Message::AddClass {
                class: 0,
                name: "c".into(),
                shares: 100,
                rate_limit: None,
            },
        );
        let (responder, future) = Responder::new(stopped);
        let pushed = engine.handoff.push(nop_on_device_1(responder), &NoWake);
        assert!(pushed.is_ok());
        engine.handle(
            1,
            Message::Shutdown {
                cancel_pending: false,
            },
        );
        for _ in 0..1_000 {
            if engine.finished() {
                break;
            }
            engine.turn(&|| false);
        }
        assert!(engine.finished());
        // Dropping the engine drops whatever its handoff still holds, which
        // would answer the request with the engine's "stopped" error.
        drop(engine);
        future.wait().expect("served, not dropped");
    }

    /// The futures of a reap's requests and, per waker call, how many of
    /// them were answered when it came (see `RecordingWaker`).
    #[derive(Default)]
    struct WakeLog {
        futures: Mutex<Vec<Option<IoFuture<io::Result<()>>>>>,
        answered_at_each_wake: Mutex<Vec<usize>>,
    }

    /// A waker that polls every future of the log still pending (with a
    /// waker that records nothing) and logs how many are answered.
    struct RecordingWaker(Arc<WakeLog>);

    impl std::task::Wake for RecordingWaker {
        fn wake(self: Arc<Self>) {
            let mut futures = self.0.futures.lock().unwrap();
            let mut context = std::task::Context::from_waker(Waker::noop());
            for slot in futures.iter_mut() {
                let ready = slot
                    .as_mut()
                    .is_some_and(|future| std::pin::Pin::new(future).poll(&mut context).is_ready());
                if ready {
                    *slot = None;
                }
            }
            let answered = futures.iter().filter(|slot| slot.is_none()).count();
            self.0.answered_at_each_wake.lock().unwrap().push(answered);
        }
    }

    /// Runs `count` NOPs through `engine` so that one reap answers all of
    /// them, and returns how many were answered at each waker call.
    fn answered_at_each_wake(mut engine: Engine, count: usize) -> Vec<usize> {
        let profile = crate::DEFAULT_SSD_PROFILE.clone();
        engine.add_device(DeviceId(1), "null".into(), DeviceKind::PLAIN, profile);
        let class = Message::AddClass {
            class: 0,
            name: "c".into(),
            shares: 100,
            rate_limit: None,
        };
        engine.handle(0, class);
        let log = Arc::new(WakeLog::default());
        let waker = Waker::from(Arc::new(RecordingWaker(log.clone())));
        for _ in 0..count {
            let (responder, mut future) = Responder::new(stopped);
            let mut context = std::task::Context::from_waker(&waker);
            assert!(std::pin::Pin::new(&mut future)
                .poll(&mut context)
                .is_pending());
            log.futures.lock().unwrap().push(Some(future));
            let message = nop_on_device_1(responder);
            assert!(engine.handoff.push(message, &NoWake).is_ok());
        }
        let taken_at = engine.take_messages();
        engine.dispatch_all(taken_at);
        engine
            .backend
            .submit(false)
            .expect("the thread pool takes NOPs");
        while engine.completions.len() < count {
            engine.backend.submit(true).expect("waits for a completion");
            engine.backend.reap(&mut engine.completions);
        }
        assert!(engine.reap());
        let mut context = std::task::Context::from_waker(Waker::noop());
        for future in log.futures.lock().unwrap().iter_mut().flatten() {
            let answer = std::pin::Pin::new(future).poll(&mut context);
            assert!(answer.is_ready(), "every request is answered by the reap");
        }
        let answered = log.answered_at_each_wake.lock().unwrap().clone();
        answered
    }

    #[test]
    fn the_engine_thread_calls_a_reaps_first_waker_before_it_answers_the_rest() {
        let mut engine = engine();
        engine.first_wake_at_once = true;
        let answered = answered_at_each_wake(engine, 4);
        assert_eq!(answered.first(), Some(&1), "{answered:?}");
        // The first wake's poll registered a silent waker on the others.
        assert_eq!(answered.len(), 1, "{answered:?}");
    }

    #[test]
    fn a_helper_calls_a_reaps_wakers_once_all_of_it_is_answered() {
        let answered = answered_at_each_wake(engine(), 4);
        assert_eq!(answered, vec![4, 4, 4, 4]);
    }

    #[test]
    fn pieces_align_to_the_larger_of_the_block_and_the_files_alignment() {
        let info = crate::device::DeviceInfo {
            id: DeviceId(7),
            name: "big".into(),
            block_device: true,
            rotational: false,
            logical_block_size: 16_384,
            max_request_bytes: 1 << 20,
            nr_requests: 64,
            write_cache: None,
            backing: None,
        };
        assert_eq!(DeviceKind::of(&info, 512).piece_alignment_bytes, 16_384);
        assert_eq!(DeviceKind::of(&info, 65_536).piece_alignment_bytes, 65_536);
        let small_blocks = crate::device::DeviceInfo {
            logical_block_size: 512,
            ..info
        };
        assert_eq!(
            DeviceKind::of(&small_blocks, 512).piece_alignment_bytes,
            4_096
        );
    }

    #[test]
    fn a_later_file_that_needs_a_larger_alignment_raises_the_devices() {
        let mut engine = engine();
        let profile = crate::DEFAULT_SSD_PROFILE.clone();
        let aligned = |piece_alignment_bytes| DeviceKind {
            piece_alignment_bytes,
            ..DeviceKind::PLAIN
        };
        let split = |engine: &Engine| engine.devices[0].dispatcher.split_bytes(Direction::Write);
        engine.add_device(DeviceId(5), "d".into(), aligned(4_096), profile.clone());
        let before = split(&engine);
        let larger = 3 * 65_536;
        assert_ne!(
            before % larger,
            0,
            "a split of {before} is not already aligned"
        );
        engine.add_device(DeviceId(5), "d".into(), aligned(larger), profile);
        let after = split(&engine);
        assert_eq!(after % larger, 0, "{after}");
        assert_eq!(engine.devices.len(), 1, "one device, not two");
    }

    #[test]
    fn a_device_that_seeks_is_served_in_slices_and_streams_and_others_are_not() {
        let mut engine = engine();
        let profile = crate::DEFAULT_DISK_PROFILE.clone();
        let kind = |seeks| DeviceKind {
            seeks,
            ..DeviceKind::PLAIN
        };
        engine.add_device(DeviceId(1), "sda".into(), kind(true), profile.clone());
        engine.add_device(DeviceId(2), "nvme0n1".into(), kind(false), profile.clone());
        let devices = engine.snapshot().devices;
        assert_eq!(
            devices[0].slice_ns,
            Some(DispatcherConfig::default_slice_ns(&profile))
        );
        assert!(devices[0].slice_ns.unwrap() > 0);
        assert_eq!(devices[1].slice_ns, None);
        let seeks: Vec<bool> = engine
            .devices
            .iter()
            .map(|device| device.dispatcher.seeks())
            .collect();
        assert_eq!(
            seeks,
            [true, false],
            "streams are charged their transfer on the disk only"
        );
    }
}
