//! The public API: a [`Scheduler`], its I/O classes, and files opened through it.
//!
//! A `Scheduler` is a cheap handle (`Clone`, `Send`, `Sync`) to one engine thread.
//! Every file opened through it is mapped to its device; files on one device share
//! that device's dispatcher and budget, files on different devices never do. Each
//! request names an [`IoClass`]; classes have shares (1..=10000) that can change
//! at run time, and hold across every thread that submits, because there is one
//! dispatcher per device, not one per thread. A class may also have a
//! [`RateLimit`] ([`ClassOptions::rate_limit`], [`IoClass::set_rate_limit`]):
//! a ceiling in bytes/s and/or requests/s, enforced on each device the class
//! uses, that holds it down even when the device is idle, while shares split
//! whatever the caps leave free.
//!
//! Requests take their buffer by value and give it back with the result
//! ([`BufResult`]), because the kernel writes into it while the request is in
//! flight: the engine owns it until then, even if the future is dropped. Results
//! are [`IoFuture`]s: `.await` them from any runtime, or call
//! [`IoFuture::wait`] from a plain thread.
//!
//! Bad input fails at once with an error that says what to fix: a misaligned
//! buffer, length or offset names the alignment the device needs; a filesystem that
//! refuses O_DIRECT says so and how to open the file instead.

use crate::backend::{self, BackendChoice, BackendConfig, BackendKind, BackendOptions};
use crate::buffer::{check_alignment, AlignedBuffer};
use crate::completion::{holds_open, Driver, EngineHold, IoFuture, Responder};
use crate::device::{self, DeviceId, DeviceInfo, DirectIoAlignment};
use crate::engine::{
    self, BufResult, ClassNumber, ControllerChoice, DeviceKind, Engine, EngineTuning, IoKind,
    IoMessage, Message, Reply, Shared,
};
use crate::handoff::{Closed, Handoff, Pushed};
use crate::stats::StatsSnapshot;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tailguard_core::fair_queue::{SHARES_MAX, SHARES_MIN};
use tailguard_core::{DeviceProfile, QuietReads, RateLimit};

/// The device that [`Scheduler::nop`] requests go to: it does nothing.
const NULL_DEVICE: DeviceId = DeviceId(u64::MAX);

/// How long the engine thread spins for work before it sleeps, by default
/// ([`SchedulerBuilder::engine_linger`]): longer than a waiting thread takes
/// to wake and hand over its next request on a virtual machine (tens of
/// microseconds), so a closed loop's next request finds the engine awake;
/// short enough that an engine falling idle between sparse requests spends
/// little CPU on it.
pub const DEFAULT_ENGINE_LINGER: Duration = Duration::from_micros(50);

/// How to build a [`Scheduler`].
#[derive(Clone, Debug)]
pub struct SchedulerBuilder {
    latency_target: Option<Duration>,
    ring_depth: u32,
    backend: BackendChoice,
    threads: usize,
    profiles: HashMap<String, DeviceProfile>,
    default_profile: Option<DeviceProfile>,
    controller: ControllerChoice,
    quiet_reads: Option<QuietReads>,
    waiters_run_engine: bool,
    eager_submit: bool,
    engine_linger: Duration,
    registered_files: u32,
    #[cfg(feature = "fault-injection")]
    faults: Option<backend::fault::FaultInjector>,
}

impl Default for SchedulerBuilder {
    fn default() -> Self {
        Self {
            latency_target: None,
            ring_depth: 256,
            backend: BackendChoice::Auto,
            threads: 4,
            profiles: HashMap::new(),
            default_profile: None,
            controller: ControllerChoice::Fixed,
            quiet_reads: Some(QuietReads::default()),
            waiters_run_engine: true,
            eager_submit: true,
            engine_linger: DEFAULT_ENGINE_LINGER,
            registered_files: backend::DEFAULT_FILE_SLOTS,
            #[cfg(feature = "fault-injection")]
            faults: None,
        }
    }
}

impl SchedulerBuilder {
    /// The latency target for every device (overrides the profiles' own),
    /// held to 10 µs … 60 s
    /// ([`tailguard_core::profile::LATENCY_TARGET_US_MAX`]).
    pub fn latency_target(mut self, target: Duration) -> Self {
        self.latency_target = Some(target);
        self
    }

    /// Submission queue entries of the io_uring ring (or ops in flight for the
    /// thread pool). Default 256.
    pub fn ring_depth(mut self, depth: u32) -> Self {
        self.ring_depth = depth.max(2);
        self
    }

    /// Which backend: `Auto` (default) tries io_uring and falls back to threads.
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// Worker threads the thread-pool backend starts with. Default 4. The
    /// pool adds a thread whenever an op would otherwise wait for a busy one
    /// (up to [`SchedulerBuilder::ring_depth`]), so that a device that stalls
    /// holds only its own requests' threads, never another device's.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The profile of the device named `device` (`vda`, `nvme0n1`, ...), as
    /// measured by calibration.
    pub fn profile(mut self, device: &str, profile: DeviceProfile) -> Self {
        self.profiles.insert(device.to_string(), profile);
        self
    }

    /// The profile of every device without its own.
    pub fn default_profile(mut self, profile: DeviceProfile) -> Self {
        self.default_profile = Some(profile);
        self
    }

    /// How each device's in-flight budget is sized: `Fixed` (default) keeps the
    /// budget the profile derives; `Adaptive` lets the core's latency controller
    /// resize it online, logging every change at target
    /// [`crate::CONTROLLER_TARGET`].
    pub fn controller(mut self, choice: ControllerChoice) -> Self {
        self.controller = choice;
        self
    }

    /// Whether, and how far, each device's fixed budget deepens while no one
    /// reads from it (default [`QuietReads::default`]: four budgets after
    /// 100 ms without a read); `None` keeps one budget always. A writer alone
    /// then streams faster, and the first read after a quiet spell waits
    /// behind up to that many budgets of writes (see the core's
    /// `quiet_reads` module). The adaptive controller grows its budget
    /// itself while no one reads and ignores this.
    pub fn quiet_reads(mut self, rule: Option<QuietReads>) -> Self {
        self.quiet_reads = rule;
        self
    }

    /// Whether a thread blocked on a result ([`IoFuture::wait`],
    /// [`Scheduler::block_on`]) runs the engine itself while nobody else does
    /// (default true): a request waited on at low depth then costs no thread
    /// hop. The io_uring ring is then set up without `SINGLE_ISSUER` and
    /// `DEFER_TASKRUN`, which bind it to one thread. With false, only the engine
    /// thread runs the engine, on a ring with those features where the kernel
    /// has them.
    pub fn waiters_run_engine(mut self, enabled: bool) -> Self {
        self.waiters_run_engine = enabled;
        self
    }

    /// Whether the engine hands each request to the kernel as soon as it is
    /// dispatched, one `io_uring_enter` per request (default true, as fio does),
    /// or once per engine turn for everything dispatched in it (false: fewer
    /// system calls per request, for CPU-bound rates of millions of requests a
    /// second). Either way submitters hand requests over in batches (one lock
    /// per batch, see `crate::handoff`). Per-request submission gives small
    /// random reads more IOPS on disks that complete requests submitted
    /// together (virtio disks do): a batch reaches the device at
    /// once, and is only as fast as its slowest member.
    pub fn eager_submit(mut self, enabled: bool) -> Self {
        self.eager_submit = enabled;
        self
    }

    /// How long the engine thread keeps looking for work after it last found
    /// some, spinning, before it sleeps (default
    /// [`DEFAULT_ENGINE_LINGER`]; zero: it sleeps at once). A request
    /// submitted or completed within that time is seen without a wake-up of
    /// the engine thread, which on a fast device or a virtual machine costs
    /// more than the request; the price is up to that much CPU time each
    /// time the engine falls idle. It spins before parking with nothing in
    /// flight, and where it waits in the ring (the default shared ring),
    /// also before that wait. See "Lingering" in the engine's design.
    pub fn engine_linger(mut self, linger: Duration) -> Self {
        self.engine_linger = linger;
        self
    }

    /// How many files the engine registers with the io_uring ring (default
    /// [`crate::DEFAULT_REGISTERED_FILES`]; 0 turns registered files off, as does
    /// `TAILGUARD_REGISTERED_FILES=off`). Ops on a registered file skip the
    /// kernel's descriptor lookup; files beyond the table, and every file where
    /// the kernel refuses the table (older than 5.19), use plain descriptors.
    /// A registered file that its owner closes stays open in the kernel until
    /// the engine's next activity (see "Registered files" in
    /// [`crate::engine`]). The thread pool ignores it.
    pub fn registered_files(mut self, slots: u32) -> Self {
        self.registered_files = slots;
        self
    }

    /// Wraps the backend in a fault injector that follows `injector` (see
    /// [`backend::fault`]): for tests of what the engine does when the device
    /// fails, stalls or vanishes. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn fault_injection(mut self, injector: backend::fault::FaultInjector) -> Self {
        self.faults = Some(injector);
        self
    }

    /// Starts the engine thread.
    pub fn build(self) -> io::Result<Scheduler> {
        self.validate_profiles()?;
        let (thread, shared) = self.start_engine()?;
        let backend_kind = shared.backend_kind();
        let inner = Arc::new(Inner {
            driver: shared.clone(),
            shared,
            thread: Mutex::new(Some(thread)),
            backend: backend_kind,
            registry: Mutex::new(Registry::default()),
            builder: self,
            cancels: AtomicU64::new(0),
        });
        let scheduler = Scheduler { inner };
        scheduler.announce_device(
            NULL_DEVICE,
            "null".to_string(),
            DeviceKind::PLAIN,
            DeviceProfile {
                read_iops: 1e9,
                write_iops: 1e9,
                read_bandwidth: 1e15,
                write_bandwidth: 1e15,
                max_request_bytes: 1 << 20,
                latency_target_us: 1_000,
            },
        )?;
        Ok(scheduler)
    }

    /// Checks every device's profile and the default one, naming the one at
    /// fault.
    fn validate_profiles(&self) -> io::Result<()> {
        for (device, profile) in &self.profiles {
            profile
                .validate()
                .map_err(|error| invalid_input(format!("profile of device {device}: {error}")))?;
        }
        if let Some(profile) = &self.default_profile {
            profile
                .validate()
                .map_err(|error| invalid_input(format!("the default profile: {error}")))?;
        }
        Ok(())
    }

    /// Spawns the engine thread, which opens the backend, and waits until the
    /// engine runs: its thread and the engine, or the error that stopped it.
    fn start_engine(&self) -> io::Result<(JoinHandle<()>, Arc<Shared>)> {
        let handoff = Arc::new(Handoff::new());
        let (sender, receiver) = std::sync::mpsc::channel();
        let helpers = self.waiters_run_engine;
        let config = BackendConfig {
            choice: self.backend,
            ring_depth: self.ring_depth,
            threads: self.threads,
            shared_ring: helpers,
        };
        let options = BackendOptions {
            file_slots: self.registered_files,
        };
        let controller = self.controller;
        let quiet_reads = self.quiet_reads;
        let tuning = EngineTuning {
            eager_submit: self.eager_submit,
            linger: self.engine_linger,
        };
        #[cfg(feature = "fault-injection")]
        let faults = self.faults.clone();
        let open = move || {
            let backend = backend::open_backend_with(config, options)?;
            #[cfg(feature = "fault-injection")]
            let backend = match &faults {
                Some(injector) => injector.wrap(backend)?,
                None => backend,
            };
            Ok::<_, io::Error>(backend)
        };
        let thread = std::thread::Builder::new()
            .name("tailguard-engine".into())
            .spawn(move || {
                // The backend is created on the engine thread: an io_uring ring
                // set up with SINGLE_ISSUER must be used by the thread that made it.
                match open() {
                    Ok(backend) => {
                        let shared = Shared::new(
                            Engine::new(backend, handoff, controller, quiet_reads, tuning),
                            helpers,
                        );
                        let _ = sender.send(Ok(shared.clone()));
                        shared.run_engine_thread();
                    }
                    Err(error) => {
                        let _ = sender.send(Err(error));
                    }
                }
            })?;
        match receiver.recv() {
            Ok(Ok(started)) => Ok((thread, started)),
            Ok(Err(error)) => {
                let _ = thread.join();
                Err(error)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other(
                    "the tailguard engine thread died while starting",
                ))
            }
        }
    }
}

#[derive(Default)]
struct Registry {
    classes: Vec<(String, bool)>,
    /// Each device the engine was told of, with the piece alignment it was
    /// told last.
    devices: HashMap<DeviceId, u64>,
}

struct Inner {
    shared: Arc<Shared>,
    /// The same engine, as futures see it.
    driver: Arc<dyn Driver>,
    thread: Mutex<Option<JoinHandle<()>>>,
    backend: BackendKind,
    registry: Mutex<Registry>,
    builder: SchedulerBuilder,
    /// Cancels asked for so far (`cancel_pending`, `shutdown_now`): a
    /// request that comes back short while this moved may have been cut by
    /// one, not by the device (see [`Scheduler::cancels`]).
    cancels: AtomicU64,
}

impl Inner {
    fn handoff(&self) -> &Handoff<Message> {
        &self.shared.handoff
    }

    /// Sends a control message; the engine looks at once.
    fn send(&self, message: Message) -> io::Result<()> {
        match self.handoff().push(message, &self.shared.waker) {
            Ok(Pushed::Seen) => Ok(()),
            Ok(Pushed::Deferred) => {
                self.handoff().kick();
                Ok(())
            }
            Err(_) => Err(shut_down(self.handoff())),
        }
    }

    /// Asks the engine a question (`message` wraps the responder its answer
    /// goes to) and waits for the answer, helping the engine meanwhile as
    /// any waiter does.
    fn ask<T>(&self, message: fn(Responder<io::Result<T>>) -> Message) -> io::Result<T> {
        let (responder, mut future) = Responder::new(engine::stopped);
        match self.handoff().push(message(responder), &self.shared.waker) {
            Ok(pushed) => future.attach(self.driver.clone(), pushed == Pushed::Deferred),
            Err(_) => return Err(shut_down(self.handoff())),
        }
        future.wait()
    }

    /// Sends a request whose result `future` will carry; a deferred push
    /// becomes the future's kick to pay (see `crate::completion`). When the
    /// engine is shut down, hands the request back so its buffer returns to
    /// the caller.
    fn send_io<T>(&self, message: IoMessage, future: &mut IoFuture<T>) -> Result<(), IoMessage> {
        // This thread is running: it calls the wakers the engine's runner has
        // yet to call (see "Batched wakes" in `crate::completion`).
        self.shared.pending_wakes.wake_pending();
        let message = match self
            .shared
            .try_submit_beside_ring_wait(Message::Io(message))
        {
            Ok(()) => {
                future.attach(self.driver.clone(), false);
                return Ok(());
            }
            Err(Message::Io(message)) => message,
            Err(_) => unreachable!("the engine returns the message it did not take"),
        };
        match self
            .handoff()
            .push(Message::Io(message), &self.shared.waker)
        {
            Ok(pushed) => {
                future.attach(self.driver.clone(), pushed == Pushed::Deferred);
                // A thread holding the engine hands its request to the
                // kernel now instead of at its next wait.
                if holds_open(&self.driver) {
                    self.driver.submit_held();
                }
                Ok(())
            }
            Err(Closed(Message::Io(message))) => Err(message),
            Err(_) => unreachable!("the handoff returns the message it refused"),
        }
    }

    /// Shuts the engine down and joins its thread; with `cancel_pending`,
    /// the engine fails what it has not handed to the backend instead of
    /// serving it.
    fn shutdown(&self, cancel_pending: bool) {
        if cancel_pending {
            self.cancels.fetch_add(1, Ordering::Relaxed);
        }
        let thread = self.thread.lock().expect("lock poisoned").take();
        if let Some(thread) = thread {
            // Not `send`: with a thread holding the engine the push would
            // be left for that thread's next wait, which may never come.
            let _ = self
                .handoff()
                .push_to_engine_thread(Message::Shutdown { cancel_pending }, &self.shared.waker);
            // The last handle dropped by a waker that the engine's runner
            // calls: the engine thread cannot wait for itself, nor for a
            // helper that holds the engine meanwhile. It drains and exits
            // after the turn; its handle is let go.
            if self.shared.runs_here() || thread.thread().id() == std::thread::current().id() {
                return;
            }
            if thread.join().is_err() {
                tracing::error!("the tailguard engine thread had panicked");
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown(false);
    }
}

/// A userspace I/O scheduler; see the module docs.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Scheduler")
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A builder with the defaults: auto backend, ring depth 256, profiles from
    /// the device's kind until calibrated.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder::default()
    }

    /// The backend in use.
    pub fn backend(&self) -> BackendKind {
        self.inner.backend
    }

    /// Creates an I/O class with `shares` (1..=10000).
    pub fn add_class(&self, name: &str, shares: u32) -> io::Result<IoClass> {
        self.add_class_with(name, &ClassOptions::new(shares))
    }

    /// Creates an I/O class with `options`: its shares and, optionally, a
    /// rate limit.
    ///
    /// ```no_run
    /// use tailguard::{ClassOptions, RateLimit, Scheduler};
    /// # fn main() -> std::io::Result<()> {
    /// let scheduler = Scheduler::builder().build()?;
    /// // Compaction: a tenth of the reads' shares, and never above 50 MB/s.
    /// let compaction = scheduler.add_class_with(
    ///     "compaction",
    ///     &ClassOptions::new(100).rate_limit(RateLimit::bytes_per_s(50_000_000)),
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_class_with(&self, name: &str, options: &ClassOptions) -> io::Result<IoClass> {
        let shares = options.shares;
        check_shares(shares)?;
        check_rate_limit(options.rate_limit.as_ref())?;
        check_class_name(name)?;
        let number = {
            let mut registry = self.inner.registry.lock().expect("lock poisoned");
            if registry
                .classes
                .iter()
                .any(|(existing, live)| *live && existing == name)
            {
                return Err(invalid_input(format!(
                    "a class named `{name}` exists already; class names must be unique"
                )));
            }
            registry.classes.push((name.to_string(), true));
            let number = (registry.classes.len() - 1) as ClassNumber;
            // Sent under the registry's lock, so that the engine learns of
            // classes in the order of their numbers, whatever threads add them.
            self.inner.send(Message::AddClass {
                class: number,
                name: name.to_string(),
                shares,
                rate_limit: options.rate_limit,
            })?;
            number
        };
        Ok(IoClass {
            scheduler: self.clone(),
            number,
            name: name.to_string(),
            live: Arc::new(AtomicBool::new(true)),
        })
    }

    /// Opens a file for reading and writing with O_DIRECT (see [`OpenOptions`]
    /// for other modes).
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(self, path)
    }

    /// A request that does nothing, through a dispatcher like any other: for
    /// measuring the engine's own overhead.
    pub fn nop(&self, class: &IoClass) -> IoFuture<io::Result<()>> {
        self.request_without_data(class, NULL_DEVICE, None, IoKind::Nop)
    }

    /// A request that moves no data (a nop, a sync) of `class` on `device`.
    fn request_without_data(
        &self,
        class: &IoClass,
        device: DeviceId,
        file: Option<Arc<std::fs::File>>,
        kind: IoKind,
    ) -> IoFuture<io::Result<()>> {
        if let Err(error) = class.check_usable_on(self) {
            return IoFuture::ready(Err(error));
        }
        let (responder, mut future) = Responder::new(engine::stopped);
        let message = IoMessage {
            class: class.number,
            device,
            file,
            kind,
            buffer: None,
            offset: 0,
            submitted_at_ns: engine::monotonic_ns(),
            reply: Reply::Unit(responder),
        };
        match self.inner.send_io(message, &mut future) {
            Ok(()) => future,
            Err(_) => IoFuture::ready(Err(shut_down(self.inner.handoff()))),
        }
    }

    /// Polls `future` to completion on this thread. While it is pending and
    /// nobody else runs the engine, this thread runs the engine's loop itself
    /// (submits, sleeps in the backend until a completion, reaps) instead of
    /// sleeping while another thread does: a program that drives many requests
    /// from one thread (keep N reads in flight, `.await` whichever is next)
    /// gets them without a thread hop per request, as with its own ring.
    /// [`IoFuture::wait`] is `block_on` of one request.
    ///
    /// The future may await anything (another scheduler's requests, timers,
    /// channels): a wake-up from another thread interrupts the engine's sleep.
    /// It may also call another scheduler's `block_on`: while the thread
    /// waits in there, this engine's thread serves this scheduler.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        crate::completion::block_on(&self.inner.driver, future)
    }

    /// Keeps the engine with this thread between its waits, until the guard
    /// is dropped: for a thread that drives this scheduler's requests in a
    /// loop (submit some, [`Scheduler::block_on`] until one is done, look at
    /// it, submit more), as an event loop or a benchmark does.
    ///
    /// Without it, each `block_on` that returns with requests still in
    /// flight hands the engine to the engine thread, and the thread's next
    /// wait finds the engine busy: it then blocks while the engine thread
    /// reaps its completions and wakes it, a thread hop per completion.
    /// With it, the engine thread stays parked and the holding thread runs
    /// the engine in each of its waits, and each request it submits goes to
    /// the kernel at once, on this thread, where the engine is free and
    /// submits eagerly ([`SchedulerBuilder::eager_submit`]), instead of at
    /// its next wait: a closed loop's next request does not wait for the
    /// loop to finish looking at the other results.
    ///
    /// The price: while the guard lives, requests whose futures are awaited
    /// elsewhere without a `block_on` (another runtime) are served only when
    /// some thread waits in this scheduler's `block_on` or [`IoFuture::wait`];
    /// so hold the engine only on a thread that waits on it continually.
    /// A `block_on` of another scheduler, or a hold of another engine, on
    /// the holding thread lets go of this engine until the thread's next
    /// wait here (its engine thread serves it meanwhile, so a future waiting
    /// there for this scheduler's requests is served).
    /// Dropping the guard hands whatever is left to the engine thread;
    /// guards of different schedulers may be dropped in any order. With
    /// [`SchedulerBuilder::waiters_run_engine`] off the guard does nothing.
    #[must_use = "the engine stays with this thread only while the guard lives"]
    pub fn hold_engine(&self) -> EngineHold {
        if self.inner.shared.helpers_allowed() {
            EngineHold::new(self.inner.driver.clone())
        } else {
            EngineHold::inert()
        }
    }

    /// A consistent snapshot of every counter and histogram.
    pub fn stats(&self) -> io::Result<StatsSnapshot> {
        self.inner.ask(Message::Stats)
    }

    /// Stops accepting requests, completes every one already accepted, and
    /// joins the engine thread. Other handles get errors afterwards. Dropping
    /// the last handle does the same. From a waker that the engine calls
    /// (on its own thread, or on a thread running it in a wait) it returns
    /// without waiting: the engine finishes after its turn.
    pub fn shutdown(&self) {
        self.inner.shutdown(false);
    }

    /// Stops at once: stops accepting requests, fails every accepted request
    /// not yet handed to the kernel with an [`io::ErrorKind::Interrupted`]
    /// error (its message names the request and says nothing of it was
    /// transferred), waits for the pieces the kernel holds, and joins the
    /// engine thread. Each request still completes exactly once: one split
    /// into pieces, some of them in flight, completes with its last piece,
    /// with the count of contiguous bytes transferred from its start (short),
    /// the cancellation error if none were, or the first error its pieces
    /// met. For a stop signal: the time to stop is that of the requests
    /// already at the device, not of the queue behind them. After a plain
    /// [`Scheduler::shutdown`] (or a second call) it does nothing.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// let scheduler = tailguard::Scheduler::builder().build()?;
    /// // ... on Ctrl-C:
    /// scheduler.shutdown_now();
    /// # Ok(())
    /// # }
    /// ```
    pub fn shutdown_now(&self) {
        self.inner.shutdown(true);
    }

    /// Fails every request accepted so far and not yet handed to the kernel,
    /// as [`Scheduler::shutdown_now`] does, and keeps running: requests
    /// submitted afterwards are served as usual. Returns how many requests it
    /// cancelled, whole or in part (a partly cancelled one completes when its
    /// pieces in flight do, with a short count).
    pub fn cancel_pending(&self) -> io::Result<usize> {
        self.inner.cancels.fetch_add(1, Ordering::Relaxed);
        self.inner.ask(Message::CancelPending)
    }

    /// How many cancels ([`Scheduler::cancel_pending`],
    /// [`Scheduler::shutdown_now`]) were asked for so far. A request that
    /// comes back short though the count has not moved since it was made
    /// was cut by the device (the end of the file, a full disk), not by a
    /// cancel; a stream writer names its error by it.
    pub(crate) fn cancels(&self) -> u64 {
        self.inner.cancels.load(Ordering::Relaxed)
    }

    fn announce_device(
        &self,
        device: DeviceId,
        name: String,
        kind: DeviceKind,
        profile: DeviceProfile,
    ) -> io::Result<()> {
        let mut registry = self.inner.registry.lock().expect("lock poisoned");
        let announced = registry.devices.get(&device).copied();
        if announced.is_some_and(|alignment| alignment >= kind.piece_alignment_bytes) {
            return Ok(());
        }
        registry.devices.insert(device, kind.piece_alignment_bytes);
        // Sent under the registry's lock: another thread opening a file on
        // the same device waits for the lock, so its first request reaches
        // the engine after the device does. For a device the engine knows,
        // the message raises its piece alignment (this file needs more).
        self.inner.send(Message::AddDevice {
            device,
            name,
            kind,
            profile,
        })?;
        Ok(())
    }

    fn profile_for(&self, info: &DeviceInfo) -> DeviceProfile {
        let builder = &self.inner.builder;
        // A stacked device without a profile of its own uses the profile of
        // the disk it forwards to (a loop device over a file on a tuned disk).
        let mut stack = Some(info);
        let own_or_backing = std::iter::from_fn(|| {
            let device = stack?;
            stack = device.backing.as_deref();
            Some(device)
        })
        .find_map(|device| builder.profiles.get(&device.name));
        let mut profile = own_or_backing
            .or(builder.default_profile.as_ref())
            .cloned()
            .unwrap_or_else(|| default_profile(info));
        if let Some(target) = builder.latency_target {
            use tailguard_core::profile::{LATENCY_TARGET_US_MAX, LATENCY_TARGET_US_MIN};
            profile.latency_target_us = u64::try_from(target.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(LATENCY_TARGET_US_MIN, LATENCY_TARGET_US_MAX);
        }
        profile
    }
}

/// Whether the hardware under `info` seeks: a rotational disk. Virtual disks
/// (`vd*`, `xvd*`) often claim to be rotational and are not taken at their
/// word. A stacked device (loop, dm, md) is judged by the disk at the bottom
/// of its stack ([`DeviceInfo::innermost`]): a loop device over a file on an
/// SSD reports itself rotational.
pub fn seeks(info: &DeviceInfo) -> bool {
    let hardware = info.innermost();
    let virtual_disk = hardware.name.starts_with("vd") || hardware.name.starts_with("xvd");
    hardware.block_device && hardware.rotational && !virtual_disk
}

/// Whether `info` serves its commands through a file: a loop device, whose
/// every command makes a trip through the file system below it.
pub fn serves_through_a_file(info: &DeviceInfo) -> bool {
    info.block_device && info.name.starts_with("loop")
}

/// The profile used before calibration: a conservative SSD, or a disk for a
/// device that [`seeks`].
pub fn default_profile(info: &DeviceInfo) -> DeviceProfile {
    let mut profile = if seeks(info) {
        crate::DEFAULT_DISK_PROFILE.clone()
    } else {
        crate::DEFAULT_SSD_PROFILE.clone()
    };
    profile.max_request_bytes = info
        .max_request_bytes
        .clamp(tailguard_core::profile::MAX_REQUEST_BYTES_MIN, 1 << 20);
    profile
}

fn check_shares(shares: u32) -> io::Result<()> {
    if (SHARES_MIN..=SHARES_MAX).contains(&shares) {
        Ok(())
    } else {
        Err(invalid_input(format!(
            "shares must be between {SHARES_MIN} and {SHARES_MAX}, got {shares}"
        )))
    }
}

fn check_rate_limit(limit: Option<&RateLimit>) -> io::Result<()> {
    match limit.map(RateLimit::validate) {
        Some(Err(error)) => Err(invalid_input(format!("invalid rate limit: {error}"))),
        _ => Ok(()),
    }
}

/// How to create an I/O class ([`Scheduler::add_class_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassOptions {
    shares: u32,
    rate_limit: Option<RateLimit>,
}

impl ClassOptions {
    /// A class with `shares` (1..=10000) and no rate limit.
    pub fn new(shares: u32) -> Self {
        Self {
            shares,
            rate_limit: None,
        }
    }

    /// Caps the class at `limit` (see [`IoClass::set_rate_limit`]).
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }
}

/// Refuses a class name that is empty or holds control characters (NUL,
/// newline, escape): names go into tables, logs and metric labels, where such
/// bytes break rows or forge them.
fn check_class_name(name: &str) -> io::Result<()> {
    if name.is_empty() {
        return Err(invalid_input(
            "a class name is empty; give it a name".into(),
        ));
    }
    match name.chars().find(|character| character.is_control()) {
        Some(bad) => Err(invalid_input(format!(
            "class name {name:?} holds the control character {bad:?}; use printable characters \
             only"
        ))),
        None => Ok(()),
    }
}

/// Why the engine refused a request: a shutdown, or its crash.
fn shut_down(handoff: &Handoff<Message>) -> io::Error {
    if handoff.crashed() {
        engine::engine_stopped()
    } else {
        io::Error::other("the tailguard scheduler is shut down; build a new one")
    }
}

fn invalid_input(message: String) -> io::Error {
    crate::Error::invalid_config(message).into()
}

/// An I/O class: a name and shares. Requests name their class.
#[derive(Clone)]
pub struct IoClass {
    scheduler: Scheduler,
    number: ClassNumber,
    name: String,
    /// Shared by every clone; false once the class is removed.
    live: Arc<AtomicBool>,
}

impl std::fmt::Debug for IoClass {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("IoClass")
            .field("name", &self.name)
            .finish()
    }
}

impl IoClass {
    /// Fails unless the class is live and `scheduler` made it: requests name
    /// a class of the scheduler that opened their file.
    fn check_usable_on(&self, scheduler: &Scheduler) -> io::Result<()> {
        if !Arc::ptr_eq(&self.scheduler.inner, &scheduler.inner) {
            return Err(invalid_input(format!(
                "class `{}` belongs to another Scheduler; name a class made by the \
                 add_class of the scheduler this file was opened with",
                self.name.escape_debug()
            )));
        }
        self.check_live()
    }

    fn check_live(&self) -> io::Result<()> {
        if self.live.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(self.removed_error())
        }
    }

    fn removed_error(&self) -> io::Error {
        invalid_input(format!(
            "class `{}` was removed; its clones can make no more requests (add_class \
             makes a new class)",
            self.name.escape_debug()
        ))
    }

    /// The class's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Changes the shares; requests dispatched from now on use them.
    pub fn set_shares(&self, shares: u32) -> io::Result<()> {
        self.check_live()?;
        check_shares(shares)?;
        self.scheduler.inner.send(Message::SetShares {
            class: self.number,
            shares,
        })
    }

    /// Sets (`Some`) or lifts (`None`) the class's rate limit: a ceiling in
    /// bytes per second and/or requests per second, enforced on each device
    /// the class uses (a cap of 50 MB/s is 50 MB/s per device). A capped
    /// class is held down even when the device is idle; the shares of the
    /// other classes split whatever it leaves. It applies to requests
    /// dispatched from now on, queued ones included; a class already in debt
    /// under its old cap pays it at the new one.
    ///
    /// A request counts as one operation however the scheduler splits it;
    /// bytes are counted as pieces go to the device, so a large request is
    /// spread over time at the cap. [`RateLimit::burst_ns`] says how much of
    /// the rate an idle class may spend at once.
    ///
    /// ```no_run
    /// use tailguard::{RateLimit, Scheduler};
    /// # fn main() -> std::io::Result<()> {
    /// let scheduler = Scheduler::builder().build()?;
    /// let backup = scheduler.add_class("backup", 100)?;
    /// // Night: 200 MB/s. Day: 20 MB/s and 500 requests/s.
    /// backup.set_rate_limit(Some(RateLimit::bytes_per_s(200_000_000)))?;
    /// backup.set_rate_limit(Some(RateLimit::bytes_per_s(20_000_000).with_iops(500)))?;
    /// // Lift the cap: shares alone decide again.
    /// backup.set_rate_limit(None)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] for a limit that caps
    /// nothing or has a zero rate (use `None` for no limit), or if the class
    /// was removed.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) -> io::Result<()> {
        self.check_live()?;
        check_rate_limit(limit.as_ref())?;
        self.scheduler.inner.send(Message::SetRateLimit {
            class: self.number,
            rate_limit: limit,
        })
    }

    /// Removes the class. Requests already submitted complete; requests,
    /// share changes and removal through its clones fail from now on.
    pub fn remove(self) -> io::Result<()> {
        if !self.live.swap(false, Ordering::AcqRel) {
            return Err(self.removed_error());
        }
        self.scheduler
            .inner
            .registry
            .lock()
            .expect("lock poisoned")
            .classes[self.number as usize]
            .1 = false;
        self.scheduler
            .inner
            .send(Message::RemoveClass { class: self.number })
    }
}

/// How to open a file through the scheduler.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    options: std::fs::OpenOptions,
    direct: bool,
    write: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Read-only, O_DIRECT, nothing created.
    pub fn new() -> Self {
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        Self {
            options,
            direct: true,
            write: false,
        }
    }

    /// Open for reading.
    pub fn read(mut self, read: bool) -> Self {
        self.options.read(read);
        self
    }

    /// Open for writing.
    pub fn write(mut self, write: bool) -> Self {
        self.options.write(write);
        self.write = write;
        self
    }

    /// Create the file if missing.
    pub fn create(mut self, create: bool) -> Self {
        self.options.create(create);
        self
    }

    /// Truncate the file to zero length.
    pub fn truncate(mut self, truncate: bool) -> Self {
        self.options.truncate(truncate);
        self
    }

    /// O_DIRECT (default true). Without it, I/O goes through the page cache
    /// and the kernel's writeback decides when writes reach the device, which
    /// defeats the scheduler for writes (seed 000): use it only where the
    /// filesystem refuses O_DIRECT.
    pub fn direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Opens `path` through `scheduler`.
    pub fn open(&self, scheduler: &Scheduler, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let mut options = self.options.clone();
        if self.direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let file = options
            .open(path)
            .map_err(|error| open_error(path, self.direct, error))?;
        let info = device::device_of(&file)?;
        let alignment = if self.direct {
            device::direct_io_alignment(&file, &info)
        } else {
            DirectIoAlignment {
                memory_bytes: 1,
                offset_bytes: 1,
            }
        };
        let profile = scheduler.profile_for(&info);
        let kind = DeviceKind::of(&info, alignment.offset_bytes);
        scheduler.announce_device(info.id, info.name.clone(), kind, profile)?;
        Ok(File {
            scheduler: scheduler.clone(),
            file: Some(Arc::new(file)),
            path: path.to_path_buf(),
            device: info,
            alignment,
        })
    }
}

fn open_error(path: &Path, direct: bool, error: io::Error) -> io::Error {
    if let Some(kind) = unschedulable_kind(path) {
        return io::Error::from(crate::Error::invalid_config(format!(
            "{}: {error}: it is {kind}, not a file on a disk; tailguard schedules I/O to \
                 regular files and block devices: open one of those",
            path.display()
        )));
    }
    if direct && error.raw_os_error() == Some(libc::EINVAL) {
        return io::Error::from(crate::Error::invalid_config(format!(
            "{}: the filesystem refuses O_DIRECT (tmpfs and overlayfs do); put the file \
                 on a filesystem that supports it, or open it with OpenOptions::direct(false) \
                 for buffered I/O",
            path.display()
        )));
    }
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

/// What `path` is when it is neither a regular file nor a block device (a
/// character device such as `/dev/null`, a FIFO, a socket, a directory): the
/// real reason an open of it fails, whatever errno the kernel chose.
fn unschedulable_kind(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let file_type = std::fs::metadata(path).ok()?.file_type();
    Some(if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        return None;
    })
}

/// A file opened through a [`Scheduler`].
///
/// Dropping it closes the file once no request on it is left; the engine is
/// told at once, so a registered descriptor (see
/// [`SchedulerBuilder::registered_files`]) is given up right away and the
/// file's space and locks are released as with any close.
pub struct File {
    scheduler: Scheduler,
    /// `None` only inside `drop`, which gives up this reference before it
    /// tells the engine.
    file: Option<Arc<std::fs::File>>,
    path: PathBuf,
    device: DeviceInfo,
    alignment: DirectIoAlignment,
}

impl std::fmt::Debug for File {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("File")
            .field("path", &self.path)
            .field("device", &self.device.name)
            .finish()
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        let fd = file.as_raw_fd();
        // Our reference goes first: if no request holds the file, it is closed
        // in this process now, and the engine, told next, sees it closed and
        // gives up its registration (a request still holding the file releases
        // it when it finishes). A scheduler already shut down has no engine
        // and no registrations left.
        drop(file);
        let _ = self.scheduler.inner.send(Message::FileClosed { fd });
    }
}

impl File {
    /// The open file; present until `drop`.
    fn handle(&self) -> &Arc<std::fs::File> {
        self.file
            .as_ref()
            .expect("a File holds its file until dropped")
    }

    /// The device this file lives on.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// The alignment O_DIRECT needs for buffers, offsets and lengths.
    pub fn alignment(&self) -> DirectIoAlignment {
        self.alignment
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The scheduler the file was opened through (for
    /// [`Scheduler::block_on`] of this file's requests).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The open file itself, for metadata calls that do not go through the
    /// scheduler (`metadata`, `set_len`).
    pub fn std_file(&self) -> &std::fs::File {
        self.handle()
    }

    /// The file's length in bytes now, and whether it is a block device
    /// node, whose length is the device's size (its `st_size` is 0) and which
    /// cannot be truncated.
    pub(crate) fn length_now(&self) -> io::Result<(u64, bool)> {
        use std::io::Seek;
        use std::os::unix::fs::FileTypeExt;
        let metadata = self.std_file().metadata()?;
        if metadata.file_type().is_block_device() {
            // Every request names its offset: the file position is unused.
            let mut handle = self.std_file();
            return Ok((handle.seek(io::SeekFrom::End(0))?, true));
        }
        Ok((metadata.len(), false))
    }

    /// Reads `buffer.len()` bytes at `offset` into `buffer`. The result is the
    /// byte count (short at the end of the file) or the error, with the buffer.
    pub fn read_at(
        &self,
        class: &IoClass,
        buffer: AlignedBuffer,
        offset: u64,
    ) -> IoFuture<BufResult> {
        self.data_request(IoKind::Read, class, buffer, offset)
    }

    /// Writes `buffer` at `offset`.
    pub fn write_at(
        &self,
        class: &IoClass,
        buffer: AlignedBuffer,
        offset: u64,
    ) -> IoFuture<BufResult> {
        self.data_request(IoKind::Write, class, buffer, offset)
    }

    /// `fdatasync`: makes written data durable.
    pub fn fdatasync(&self, class: &IoClass) -> IoFuture<io::Result<()>> {
        self.sync_request(IoKind::Fdatasync, class)
    }

    /// `fsync`: makes written data and metadata durable.
    pub fn fsync(&self, class: &IoClass) -> IoFuture<io::Result<()>> {
        self.sync_request(IoKind::Fsync, class)
    }

    fn data_request(
        &self,
        kind: IoKind,
        class: &IoClass,
        buffer: AlignedBuffer,
        offset: u64,
    ) -> IoFuture<BufResult> {
        if let Err(error) = class.check_usable_on(&self.scheduler) {
            return IoFuture::ready((Err(error), buffer));
        }
        let length = buffer.len() as u64;
        let checked = crate::buffer::check_range(offset, length).and_then(|()| {
            check_alignment(buffer.as_ptr() as usize, length, offset, self.alignment)
        });
        if let Err(error) = checked {
            let error = io::Error::from(error.with_path(self.path.clone()));
            return IoFuture::ready((Err(error), buffer));
        }
        let (responder, mut future) = Responder::new(engine::stopped_data);
        let message = IoMessage {
            class: class.number,
            device: self.device.id,
            file: Some(self.handle().clone()),
            kind,
            buffer: Some(buffer),
            offset,
            submitted_at_ns: engine::monotonic_ns(),
            reply: Reply::Data(responder),
        };
        match self.scheduler.inner.send_io(message, &mut future) {
            Ok(()) => future,
            Err(mut message) => IoFuture::ready((
                Err(shut_down(self.scheduler.inner.handoff())),
                message.buffer.take().expect("data requests carry a buffer"),
            )),
        }
    }

    fn sync_request(&self, kind: IoKind, class: &IoClass) -> IoFuture<io::Result<()>> {
        self.scheduler.request_without_data(
            class,
            self.device.id,
            Some(self.handle().clone()),
            kind,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::REQUESTED_PANIC;

    #[test]
    fn a_character_device_or_fifo_is_named_as_such_not_as_refusing_o_direct() {
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .build()
            .unwrap();
        let fifo = std::env::temp_dir().join(format!("tailguard-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `name` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (Path::new("/dev/null"), "character device"),
            (fifo.as_path(), "FIFO"),
        ] {
            let error = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&scheduler, path)
                .unwrap_err();
            let text = error.to_string();
            assert!(text.contains(kind), "{text}");
            assert!(!text.contains("tmpfs"), "{text}");
            assert!(text.contains("regular files and block devices"), "{text}");
        }
        std::fs::remove_file(&fifo).unwrap();
    }

    #[test]
    fn class_names_with_control_characters_are_refused() {
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .build()
            .unwrap();
        for name in ["re\nads", "re\0ads", "\u{1b}[31mred", ""] {
            let error = scheduler.add_class(name, 100).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
        scheduler.add_class("reads (p99 < 1 ms)", 100).unwrap();
    }

    #[test]
    fn refused_o_direct_names_the_fix() {
        let error = open_error(
            Path::new("/mnt/x"),
            true,
            io::Error::from_raw_os_error(libc::EINVAL),
        );
        let text = error.to_string();
        assert!(
            text.contains("/mnt/x") && text.contains("O_DIRECT"),
            "{text}"
        );
        assert!(text.contains("direct(false)"), "{text}");
        let other = open_error(
            Path::new("/mnt/y"),
            true,
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert_eq!(other.kind(), io::ErrorKind::NotFound);
        assert!(other.to_string().contains("/mnt/y"));
    }

    #[test]
    fn an_engine_panic_fails_pending_requests_instead_of_hanging() {
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .build()
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        scheduler.inner.send(Message::Panic).unwrap();
        // Queued behind the panic: failed by the unwinding engine, or refused.
        let pending = scheduler.nop(&class);
        let error = pending.wait().unwrap_err();
        assert!(
            error.to_string().contains("stopped unexpectedly")
                || error.to_string().contains("shut down"),
            "{error}"
        );
        // Later requests are refused, naming the crash rather than a
        // shutdown nobody asked for.
        for error in [
            scheduler.nop(&class).wait().unwrap_err(),
            scheduler.stats().unwrap_err(),
        ] {
            assert!(
                error.to_string().contains("stopped unexpectedly"),
                "{error}"
            );
        }
    }

    /// Drops what it holds when woken, and says on which thread: an
    /// executor whose task owned the scheduler's last handle.
    struct DropOnWake {
        scheduler: std::sync::Mutex<Option<Scheduler>>,
        dropped_on: std::sync::mpsc::Sender<Option<String>>,
    }

    impl std::task::Wake for DropOnWake {
        fn wake(self: Arc<Self>) {
            let scheduler = self.scheduler.lock().unwrap().take();
            if scheduler.is_some() {
                drop(scheduler);
                let name = std::thread::current().name().map(str::to_string);
                let _ = self.dropped_on.send(name);
            }
        }
    }

    #[test]
    fn the_last_handle_dropped_by_a_waker_on_the_engine_thread_shuts_down() {
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .waiters_run_engine(false)
            .build()
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        let engine_panics = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = engine_panics.clone();
        let previous = std::panic::take_hook();
        // Other tests' engines panic on purpose (`Message::Panic`), on
        // threads of the same name, in this process: those are not counted.
        std::panic::set_hook(Box::new(move |info| {
            let requested = info.payload().downcast_ref::<&str>() == Some(&REQUESTED_PANIC);
            if std::thread::current().name() == Some("tailguard-engine") && !requested {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
        let mut nop = scheduler.nop(&class);
        drop(class);
        let (sender, dropped_on) = std::sync::mpsc::channel();
        let waker = std::task::Waker::from(Arc::new(DropOnWake {
            scheduler: std::sync::Mutex::new(Some(scheduler)),
            dropped_on: sender,
        }));
        let mut context = std::task::Context::from_waker(&waker);
        // The push to the parked engine thread is paid when the future is
        // first found pending; from then on only the engine thread can
        // call the waker (this thread polls again only after it did).
        let first = std::pin::Pin::new(&mut nop).poll(&mut context);
        assert!(first.is_pending(), "the engine had not seen the nop yet");
        let thread = dropped_on
            .recv_timeout(Duration::from_secs(60))
            .expect("the waker was called");
        assert_eq!(thread.as_deref(), Some("tailguard-engine"));
        // The shutdown began on the engine thread must not make it join
        // itself (a panic there crashes the engine).
        std::thread::sleep(Duration::from_millis(200));
        let _ = std::panic::take_hook();
        assert_eq!(engine_panics.load(Ordering::SeqCst), 0);
        let done = std::pin::Pin::new(&mut nop).poll(&mut context);
        assert!(matches!(done, std::task::Poll::Ready(Ok(()))), "{done:?}");
    }

    /// Polls `future` from this thread, as another runtime would, until it
    /// is ready (a hang detector fails the test after a minute).
    fn await_elsewhere<T>(mut future: IoFuture<T>) -> T {
        let (sender, woken) = std::sync::mpsc::channel();
        let waker = std::task::Waker::from(Arc::new(SendOnWake(Mutex::new(sender))));
        let mut context = std::task::Context::from_waker(&waker);
        loop {
            if let std::task::Poll::Ready(value) =
                std::pin::Pin::new(&mut future).poll(&mut context)
            {
                return value;
            }
            woken
                .recv_timeout(Duration::from_secs(60))
                .expect("the request was answered");
        }
    }

    struct SendOnWake(Mutex<std::sync::mpsc::Sender<()>>);

    impl std::task::Wake for SendOnWake {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().unwrap().send(());
        }
    }

    /// Waits until the engine thread parks (a hang detector fails the test
    /// after a minute).
    fn wait_until_parked(scheduler: &Scheduler) {
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while !scheduler.inner.shared.handoff.is_parked() {
            assert!(
                std::time::Instant::now() < give_up,
                "the engine thread never parks"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_engine_thread_lingers_after_its_last_answer_so_the_next_request_needs_no_kick() {
        // A linger far longer than the test: the thread is still looking
        // when the second request arrives, however slow the host running it.
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .engine_linger(Duration::from_secs(600))
            .build()
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        await_elsewhere(scheduler.nop(&class)).unwrap();
        // Time enough for a thread that does not linger to park (the other
        // test waits for that), none for this one to stop lingering.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!scheduler.inner.shared.handoff.is_parked());
        let second = scheduler.nop(&class);
        assert!(
            !second.owes_kick(),
            "the push found the engine thread parked"
        );
        // Answered without a kick: the lingering thread took it.
        await_elsewhere(second).unwrap();
        // The shutdown's message ends the spin too: dropping the last
        // handle joins the engine thread.
        drop(class);
        let dropped = std::thread::spawn(move || drop(scheduler));
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while !dropped.is_finished() {
            assert!(
                std::time::Instant::now() < give_up,
                "the shutdown waits out the linger"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        dropped.join().unwrap();
    }

    #[test]
    fn the_engine_thread_parks_once_its_linger_ends_and_the_next_push_owes_a_kick() {
        for linger in [Duration::ZERO, Duration::from_millis(1)] {
            let scheduler = Scheduler::builder()
                .backend(BackendChoice::Threads)
                .engine_linger(linger)
                .build()
                .unwrap();
            let class = scheduler.add_class("c", 1).unwrap();
            await_elsewhere(scheduler.nop(&class)).unwrap();
            wait_until_parked(&scheduler);
            let second = scheduler.nop(&class);
            assert!(
                second.owes_kick(),
                "linger {linger:?}: the push found the engine running"
            );
            await_elsewhere(second).unwrap();
        }
    }

    #[test]
    fn a_thread_holding_the_engine_submits_at_once_unless_submission_is_batched() {
        for eager in [true, false] {
            let scheduler = Scheduler::builder()
                .backend(BackendChoice::Threads)
                .eager_submit(eager)
                .engine_linger(Duration::ZERO)
                .build()
                .unwrap();
            let class = scheduler.add_class("c", 1).unwrap();
            // The engine is free once its thread has parked.
            wait_until_parked(&scheduler);
            let hold = scheduler.hold_engine();
            let nop = scheduler.nop(&class);
            // Taken from the queue by a turn on this thread, before any wait.
            let queued = scheduler.inner.shared.handoff.maybe_queued();
            assert_eq!(queued, !eager, "eager submission {eager}");
            nop.wait().unwrap();
            drop(hold);
        }
    }

    /// Rounds of `drop_the_last_handle_in_a_waker_while_holding` a test
    /// runs: the waker must run on the holding thread in at least one, and
    /// in a round the thread pool answers before the waker is registered,
    /// or the engine thread serves, it does not (more often on a busy host).
    const HANDLE_DROP_ROUNDS: usize = 100;

    /// On a thread named `name`: holds a new scheduler's engine, hands its
    /// last handle to the waker of a pending nop, and waits for a second nop
    /// (running the engine, which answers both and calls that waker, under
    /// the engine's lock, on this thread, unless the engine thread had the
    /// engine at that moment). Returns the thread the waker ran on.
    ///
    /// With `crash`, the engine panics in that run: its crash answers both
    /// nops (failed) and calls the waker under the engine's lock.
    fn drop_the_last_handle_in_a_waker_while_holding(name: &str, crash: bool) -> Option<String> {
        let (sender, dropped_on) = std::sync::mpsc::channel();
        let helping = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let scheduler = Scheduler::builder()
                    .backend(BackendChoice::Threads)
                    .build()
                    .unwrap();
                let class = scheduler.add_class("c", 1).unwrap();
                // A lingering engine thread would serve the nops itself.
                wait_until_parked(&scheduler);
                let hold = scheduler.hold_engine();
                let mut first = scheduler.nop(&class);
                let second = scheduler.nop(&class);
                drop(class);
                if crash {
                    scheduler.inner.send(Message::Panic).unwrap();
                }
                let waker = std::task::Waker::from(Arc::new(DropOnWake {
                    scheduler: std::sync::Mutex::new(Some(scheduler)),
                    dropped_on: sender,
                }));
                let mut context = std::task::Context::from_waker(&waker);
                if std::pin::Pin::new(&mut first).poll(&mut context).is_ready() {
                    return;
                }
                let second_failed = second.wait().is_err();
                if crash && !second_failed {
                    // The engine thread, lingering when the nops arrived,
                    // served them before the panic was sent: this round
                    // shows nothing (counted as the waker not running here).
                    return;
                }
                assert_eq!(second_failed, crash);
                drop(hold);
                let done = std::pin::Pin::new(&mut first).poll(&mut context);
                match done {
                    std::task::Poll::Ready(result) => assert_eq!(result.is_err(), crash),
                    std::task::Poll::Pending => panic!("the first nop was not answered"),
                }
            })
            .unwrap();
        // A hang detector: a shutdown must not wait for the engine thread
        // while this thread holds the engine.
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while !helping.is_finished() {
            assert!(std::time::Instant::now() < give_up, "the shutdown hangs");
            std::thread::sleep(Duration::from_millis(1));
        }
        helping.join().unwrap();
        dropped_on.try_recv().ok().flatten()
    }

    #[test]
    fn the_last_handle_dropped_by_a_waker_on_a_helping_thread_shuts_down() {
        let name = "a helper of the engine";
        let on_the_helper = (0..HANDLE_DROP_ROUNDS)
            .filter(|_| {
                drop_the_last_handle_in_a_waker_while_holding(name, false).as_deref() == Some(name)
            })
            .count();
        assert!(
            on_the_helper > 0,
            "the waker never ran on the helping thread"
        );
    }

    /// As above, with the waker called by the crash of an engine that
    /// panicked on the helping thread: the shutdown the last handle starts
    /// there must not join the engine thread, which waits for the engine's
    /// lock that this thread still holds.
    #[test]
    fn the_last_handle_dropped_by_a_waker_in_a_crash_on_a_helping_thread_shuts_down() {
        let name = "a crashing helper of the engine";
        let on_the_helper = (0..HANDLE_DROP_ROUNDS)
            .filter(|_| {
                drop_the_last_handle_in_a_waker_while_holding(name, true).as_deref() == Some(name)
            })
            .count();
        assert!(
            on_the_helper > 0,
            "the waker never ran on the helping thread"
        );
    }

    /// A waker that panics.
    struct PanickingWaker;

    impl std::task::Wake for PanickingWaker {
        fn wake(self: Arc<Self>) {
            panic!("a waker panics, as a dropped executor's may");
        }
    }

    /// A future's waker that panics when the engine calls it must not crash
    /// the engine: the next request of the same scheduler is served. On each
    /// backend, with the waker called by the engine thread and by a waiter
    /// running the engine.
    #[test]
    fn a_panicking_waker_does_not_crash_the_engine() {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let Ok(scheduler) = Scheduler::builder().backend(choice).build() else {
                println!("skipping {choice:?}: refused here");
                continue;
            };
            let class = scheduler.add_class("c", 1).unwrap();
            for _ in 0..20 {
                let mut nop = scheduler.nop(&class);
                let waker = std::task::Waker::from(Arc::new(PanickingWaker));
                let mut context = std::task::Context::from_waker(&waker);
                if std::pin::Pin::new(&mut nop).poll(&mut context).is_ready() {
                    continue;
                }
                // Answered by the engine thread (which calls the waker), or
                // by this wait running the engine, which answers both.
                scheduler.nop(&class).wait().unwrap();
                let done = scheduler.block_on(nop);
                assert!(done.is_ok(), "{done:?}");
            }
            scheduler.nop(&class).wait().unwrap();
        }
    }

    #[test]
    fn an_engine_panic_leaves_open_the_files_of_requests_it_held() {
        use crate::backend::fault::{FaultInjector, FaultPlan};
        let injector = FaultInjector::new(FaultPlan::default());
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .fault_injection(injector.clone())
            .build()
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        let path = std::env::temp_dir().join(format!("tailguard-crash-{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .direct(false)
            .open(&scheduler, &path)
            .unwrap();
        let fd = file.handle().as_raw_fd();
        injector.stall_for(Duration::from_secs(3_600));
        let write = file.write_at(&class, AlignedBuffer::new(4096, 4096).unwrap(), 0);
        // A push may leave the engine thread's wake-up to the future's first
        // wait; a stats call, answered after the write was taken, makes sure
        // the engine has it.
        scheduler.stats().unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while injector.counts().ops_stalled == 0 {
            assert!(
                std::time::Instant::now() < give_up,
                "the write never reached the device"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The write's record holds the last reference to the file.
        drop(file);
        scheduler.inner.send(Message::Panic).unwrap();
        assert!(write.wait().0.is_err(), "failed by the crash");
        // A backend worker may still run the write: its descriptor stays
        // open, so no later open can take its number.
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
        let _ = std::fs::remove_file(&path);
        assert_eq!(link.ok(), Some(path), "descriptor {fd}");
    }

    #[test]
    fn the_engine_refuses_a_class_it_does_not_have_and_lives_on() {
        let scheduler = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .build()
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        // Past the API's checks (as a class removed by another thread after
        // they passed would be): the engine answers instead of panicking.
        let (responder, mut future) = Responder::new(engine::stopped);
        let message = IoMessage {
            class: 99,
            device: NULL_DEVICE,
            file: None,
            kind: IoKind::Nop,
            buffer: None,
            offset: 0,
            submitted_at_ns: engine::monotonic_ns(),
            reply: Reply::Unit(responder),
        };
        assert!(scheduler.inner.send_io(message, &mut future).is_ok());
        let error = future.wait().unwrap_err();
        assert!(error.to_string().contains("removed"), "{error}");
        scheduler.nop(&class).wait().unwrap();
        assert_eq!(scheduler.stats().unwrap().class("c").unwrap().ops, 1);
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Scheduler>();
        send_sync::<IoClass>();
        send_sync::<File>();
        send_sync::<AlignedBuffer>();
        fn send<T: Send>() {}
        send::<IoFuture<BufResult>>();
    }

    #[test]
    fn virtual_disks_that_claim_rotation_get_the_ssd_profile() {
        let mut info = DeviceInfo {
            id: DeviceId(1),
            name: "vda".into(),
            block_device: true,
            rotational: true,
            logical_block_size: 512,
            max_request_bytes: 4 << 20,
            nr_requests: 256,
            write_cache: Some(true),
            backing: None,
        };
        assert_eq!(
            default_profile(&info).read_iops,
            crate::DEFAULT_SSD_PROFILE.read_iops
        );
        assert_eq!(default_profile(&info).max_request_bytes, 1 << 20, "clamped");
        assert!(!seeks(&info));
        info.name = "sda".into();
        assert_eq!(
            default_profile(&info).read_iops,
            crate::DEFAULT_DISK_PROFILE.read_iops
        );
        assert!(seeks(&info));
    }

    #[test]
    fn a_stacked_device_seeks_as_the_disk_at_the_bottom_does() {
        let disk = |name: &str, rotational: bool| DeviceInfo {
            id: DeviceId(1),
            name: name.into(),
            block_device: true,
            rotational,
            logical_block_size: 512,
            max_request_bytes: 1 << 20,
            nr_requests: 256,
            write_cache: Some(true),
            backing: None,
        };
        let on = |lower: DeviceInfo| DeviceInfo {
            id: DeviceId(7),
            backing: Some(Box::new(lower)),
            ..disk("loop0", true)
        };
        assert!(seeks(&on(disk("sda", true))));
        assert!(!seeks(&on(disk("nvme0n1", false))));
        assert!(!seeks(&on(disk("vda", true))), "a virtual disk");
        assert!(serves_through_a_file(&on(disk("vda", true))));
        assert!(!serves_through_a_file(&disk("sda", true)));
        assert!(!seeks(&DeviceInfo {
            block_device: false,
            ..disk("tmpfs", true)
        }));
    }
}
