//! The run loop: the simulator's workload generator, in real time, against one
//! of three ways of doing the I/O.
//!
//! One driver thread owns the [`Workload`] (the same generator `tailguard sim`
//! uses: closed loop, open loop, bursts), a timer heap of instance starts and
//! open-loop arrivals, and an [`Executor`] for the mode:
//!
//! - `tailguard`: a [`Scheduler`] with one class per job class and its shares,
//!   files opened O_DIRECT through it. Each request's [`IoFuture`] has a waker
//!   that queues its token for the driver, so one thread waits on all. Who runs
//!   the scheduler's engine meanwhile is `--driver` ([`DriverChoice`]):
//!   `block-on` (default) waits inside [`Scheduler::block_on`], so the driver
//!   thread itself submits, sleeps in the ring and reaps, with an alarm thread
//!   to end the sleep at the next timer (an open-loop arrival); first polls
//!   happen inside it too, so a request pushed while the engine thread sleeps
//!   costs no wake-up of that thread. `engine-thread` parks the driver and
//!   leaves the engine to the engine thread: a thread hop per completion.
//! - `kernel-direct`: the files opened O_DIRECT and driven through a raw
//!   [`tailguard::backend`] (io_uring, or its thread pool where io_uring is
//!   refused): every request goes to the kernel when it is generated, no queue,
//!   no budget, no classes.
//! - `kernel-buffered`: `pread`/`pwrite` from the backend's thread pool, writes
//!   on a descriptor without O_DIRECT: they land in the page cache and the
//!   kernel's writeback decides when they reach the device. Reads use a second
//!   descriptor with O_DIRECT, as the seed's readers did: buffered reads would
//!   measure the page cache after the first pass over a file, not the disk
//!   beside the writeback. Where the filesystem refuses O_DIRECT (tmpfs), reads
//!   fall back to the buffered descriptor and a note says so.
//!
//! The driver answers the completions a wait returns one at a time, and
//! hands each one's refill (a closed loop's next request) to the mode before
//! it looks at the next, as a task awaiting its own requests sends its next
//! at once: a batch of completions goes back out request by request, not
//! after the whole batch has been looked at.
//!
//! Latency counts from a request's intended start: its arrival for open-loop
//! jobs (so a stall cannot slow the load down and hide itself: no coordinated
//! omission), its instance's start for bursts and first closed-loop requests, and
//! the previous completion for closed-loop refills. The driver's own lateness
//! (from that intended start until it handed the request to the mode) is
//! reported as `start_lateness_us_*`, and the rest (handed over to completion,
//! scheduler queue and device together) as `submit_to_completion_us_mean`; in
//! `tailguard` mode the scheduler's own statistics split the rest into its
//! queue wait and device time ([`BenchRun`]).
//!
//! What a run holds in flight is bounded whatever its jobs ask
//! ([`crate::bench::limit`]): open-loop arrivals past a job's limit are
//! dropped and reported as overload with the rate the device sustained;
//! closed loops and bursts past it wait for a completion.
//!
//! Submission stops at each job's `stop_s`; the run ends when everything
//! submitted has completed (a burst may end after `duration_s`: see
//! `last_completion_s`). Ctrl-C ends it early: in-flight requests are waited
//! for (their buffers belong to the kernel until then), queued ones dropped.

use crate::bench::job::{JobOptions, SyncKind};
use crate::bench::kernel_error::{KernelError, Operation};
use crate::bench::limit::{InFlight, InFlightLimits, JobOverload};
use crate::bench::report::{BenchRun, DirectionStats};
use crate::bench::shape::{check_verified, fill_verified, reshape, ShapeState};
use crate::bench::target::{interrupted, Plan};
use crate::bench::Mode;
use crate::error::CliError;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tailguard::backend::threads::ThreadPool;
use tailguard::backend::{self, Backend, BackendChoice, BackendConfig, Op, OpKind};
use tailguard::{
    AlignedBuffer, BufResult, ControllerChoice, IoClass, IoFuture, OpenOptions, Scheduler,
    SchedulerBuilder, StatsSnapshot,
};
use tailguard_core::Nanos;
use tailguard_sim::report::{ClassAccumulator, ClassReport, RunReport};
use tailguard_sim::scenario::{derive_seed, Arrival, Scenario};
use tailguard_sim::workload::{RequestTemplate, Workload};

/// Submission queue entries for the rings and most ops in flight in the pools.
const RING_DEPTH: u32 = 1024;
/// The longest the driver sleeps without checking for Ctrl-C.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Requests generated or handed over between two checks for Ctrl-C inside
/// one turn of the run loop (a few hundred microseconds of work).
const STOP_POLL_ITEMS: u32 = 256;
/// How often the driver reports its progress.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// The memory alignment of every buffer (enough for any O_DIRECT target).
const BUFFER_ALIGNMENT: usize = 4096;

/// A request handed to an executor.
struct Request {
    token: u64,
    class: usize,
    file: usize,
    kind: RequestKind,
    offset: u64,
    /// The data buffer (reads and writes; `None` for syncs).
    buffer: Option<AlignedBuffer>,
}

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestKind {
    Read,
    Write,
    Sync(SyncKind),
}

/// A finished request.
struct Done {
    token: u64,
    result: io::Result<usize>,
    buffer: Option<AlignedBuffer>,
    at: Instant,
}

/// Performs the I/O for one mode.
trait Executor {
    /// Starts a request.
    fn submit(&mut self, request: Request) -> Result<(), CliError>;
    /// Waits until something completes or `deadline` passes; appends what did.
    fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError>;
    /// Requests started and not yet returned by `wait`.
    fn in_flight(&self) -> usize;
    /// Forgets requests not yet handed to the kernel (on Ctrl-C).
    fn abandon_queued(&mut self) {}
    /// The scheduler's statistics, in `tailguard` mode.
    fn scheduler_stats(&self) -> Option<io::Result<StatsSnapshot>> {
        None
    }
}

/// How many requests the jobs keep in flight, roughly: sizes thread pools.
fn concurrency(scenario: &Scenario) -> usize {
    let total: u64 = scenario
        .jobs
        .iter()
        .map(|job| {
            let per_instance = match job.arrival {
                Arrival::ClosedLoop { queue_depth } => u64::from(queue_depth),
                Arrival::OpenLoop { rate_iops } => (rate_iops / 1000.0).ceil() as u64 + 1,
                Arrival::Burst { .. } => 16,
            };
            per_instance * u64::from(job.numjobs)
        })
        .sum();
    total.clamp(1, 256) as usize
}

/// How `tailguard` mode configures its scheduler (bench's and demo's
/// `--profile` and `--latency-target-us`).
#[derive(Clone, Debug, clap::Args)]
pub struct SchedulerSettings {
    /// A device profile file for `tailguard` mode: what `tailguard tune` wrote
    /// (TOML), or Seastar's io_properties.yaml. Default: the built-in guess for
    /// the device's kind.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// The read latency the scheduler's budget aims at, in microseconds, for
    /// `tailguard` mode. Default: the profile's.
    #[arg(long, value_name = "MICROSECONDS")]
    pub latency_target_us: Option<u64>,
    /// How `tailguard` mode sizes each device's in-flight budget: `fixed` (from
    /// the profile and the latency target) or `adaptive` (resized online from
    /// completion times; see docs/design/controller.md).
    #[arg(long, value_name = "POLICY", default_value = "fixed", value_parser = crate::flags::CONTROLLER)]
    pub controller: ControllerChoice,
    /// Whether `tailguard` mode's fixed budget deepens to four budgets while
    /// no one has read from the device for 100 ms (`on`, the library's
    /// default: a writer alone streams faster, and the first read after a
    /// quiet spell waits behind up to four budgets of writes) or always stays
    /// one budget (`off`).
    #[arg(long, value_name = "ON_OFF", value_enum, default_value_t = QuietReadsChoice::On)]
    pub quiet_reads: QuietReadsChoice,
    /// When `tailguard` mode hands requests to the kernel: `each` as it is
    /// dispatched (the library's default), or `per-turn`, all of an engine
    /// turn's in one system call.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = SubmitChoice::Each)]
    pub submit: SubmitChoice,
    /// Who runs `tailguard` mode's engine while the driver thread waits:
    /// `block-on` (the driver itself, inside `Scheduler::block_on`: no thread
    /// hop per request) or `engine-thread` (the engine thread; the driver is
    /// woken for each completion, as a future awaited on another runtime is).
    #[arg(long, value_name = "WHO", value_enum, default_value_t = DriverChoice::BlockOn)]
    pub driver: DriverChoice,
    /// How long `tailguard` mode's engine thread keeps looking for requests,
    /// spinning, after it answered its last one and before it parks, in
    /// microseconds (0: it parks at once). Default: the library's
    /// (`tailguard::DEFAULT_ENGINE_LINGER`).
    #[arg(long, value_name = "MICROSECONDS")]
    pub engine_linger_us: Option<u64>,
    /// Serve `tailguard` mode's scheduler metrics (OpenMetrics text) over HTTP
    /// at http://ADDRESS/metrics while the command runs; loopback addresses
    /// only (127.0.0.1:9464; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDRESS")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// With --metrics-listen: keep serving the last run's final metrics this
    /// many seconds after the command's output, for a last scrape.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 0,
        requires = "metrics_listen"
    )]
    pub metrics_linger_s: u64,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            profile: None,
            latency_target_us: None,
            controller: ControllerChoice::Fixed,
            quiet_reads: QuietReadsChoice::On,
            submit: SubmitChoice::Each,
            driver: DriverChoice::BlockOn,
            engine_linger_us: None,
            metrics_listen: None,
            metrics_linger_s: 0,
        }
    }
}

/// Whether the fixed budget deepens while no one reads (`--quiet-reads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum QuietReadsChoice {
    /// The library's default rule ([`tailguard::QuietReads::default`]).
    On,
    /// One budget always.
    Off,
}

/// When `tailguard` mode hands requests to the kernel (`--submit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SubmitChoice {
    /// Each request as it is dispatched (the library's default).
    Each,
    /// All of an engine turn's requests in one system call.
    PerTurn,
}

impl SchedulerSettings {
    /// The scheduler builder these settings describe.
    fn builder(&self) -> io::Result<SchedulerBuilder> {
        let mut builder = Scheduler::builder();
        if let Some(path) = &self.profile {
            builder = builder.profile_file(path)?;
        }
        if self.submit == SubmitChoice::PerTurn {
            builder = builder.eager_submit(false);
        }
        builder = builder.controller(self.controller);
        if self.quiet_reads == QuietReadsChoice::Off {
            builder = builder.quiet_reads(None);
        }
        if let Some(target_us) = self.latency_target_us {
            builder = builder.latency_target(Duration::from_micros(target_us));
        }
        if let Some(linger_us) = self.engine_linger_us {
            builder = builder.engine_linger(Duration::from_micros(linger_us));
        }
        Ok(builder)
    }
}

/// Runs one mode: the report, and the scheduler's own statistics in
/// `tailguard` mode. `job_options` are bench's per-job options (aligned with
/// `scenario.jobs`; a shorter slice leaves the rest at their defaults, one
/// buffer per request in flight among them): a job with
/// `io_bytes_per_instance` stops each instance once it has submitted that
/// many bytes, and its class's rates count over the time it actually ran.
pub fn run(
    scenario: &Scenario,
    plan: &Plan,
    mode: Mode,
    settings: &SchedulerSettings,
    seed: u64,
    progress: &mut dyn FnMut(Nanos),
    job_options: &[JobOptions],
) -> Result<BenchRun, CliError> {
    let threads = concurrency(scenario);
    let mut executor: Box<dyn Executor> = match mode {
        Mode::Tailguard => Box::new(SchedulerExecutor::new(scenario, plan, settings, threads)?),
        Mode::KernelDirect => Box::new(BackendExecutor::new(plan, true, threads)?),
        Mode::KernelBuffered => Box::new(BackendExecutor::new(plan, false, threads)?),
    };
    let limits = InFlightLimits::default();
    let result = Driver::new(scenario, plan, mode, seed, job_options, limits)
        .and_then(|driver| driver.drive(executor.as_mut(), progress));
    if result.is_err() {
        executor.abandon_queued();
    }
    // Whatever happened, wait for the kernel to give every buffer back.
    let mut done = Vec::new();
    while executor.in_flight() > 0 {
        done.clear();
        if executor
            .wait(Instant::now() + POLL_INTERVAL, &mut done)
            .is_err()
        {
            break;
        }
    }
    let Outcome {
        report,
        directions,
        written,
        overloads,
        buffers_allocated,
        ..
    } = result?;
    for overload in &overloads {
        eprintln!("tailguard bench: {}: {}", mode.name(), overload.describe());
    }
    let stats = executor
        .scheduler_stats()
        .transpose()
        .map_err(|error| CliError::usage(format!("tailguard: its statistics: {error}")))?;
    drop(executor);
    verify_written(scenario, plan, mode, &written)?;
    let mut run = BenchRun::new(report, stats.as_ref());
    run.directions = directions;
    run.overloads = overloads;
    run.buffers_allocated = buffers_allocated;
    Ok(run)
}

struct Pending {
    template: RequestTemplate,
    class: usize,
    submitted_ns: Nanos,
    /// Where the request went (the template's place, or reshaped).
    offset_bytes: u64,
    length_bytes: u64,
    /// Whether it counts in the report (submitted after its job's ramp).
    measured: bool,
    /// For a verify job's read: the token of the write whose completed
    /// record describes exactly these bytes, with no verify write to them
    /// in flight, when it went out; `None`: the read is not checked.
    verify_expected: Option<u64>,
}

/// What a timer does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    /// The instance starts.
    Start,
    /// An open-loop arrival.
    Arrival,
    /// A closed-loop instance's think time after a completion has passed.
    Think,
}

/// A timer: (when, instance, what).
type Timer = Reverse<(Nanos, usize, TimerKind)>;

/// A block written with a verify pattern: (job, offset, length).
pub type WrittenBlock = (usize, u64, u64);

/// What one drive produced.
struct Outcome {
    report: RunReport,
    directions: Vec<DirectionStats>,
    /// Blocks verify jobs wrote, for the read-back check.
    written: Vec<WrittenBlock>,
    /// The jobs that met their in-flight limit.
    overloads: Vec<JobOverload>,
    /// The most requests the run had in flight at once.
    #[cfg_attr(not(test), allow(dead_code))]
    in_flight_peak: u64,
    /// Data buffers allocated over the run.
    #[cfg_attr(not(test), allow(dead_code))]
    buffers_allocated: u64,
}

/// One run's state: the workload, its timers, the requests in flight, and
/// what the classes measured.
struct Driver<'a> {
    scenario: &'a Scenario,
    plan: &'a Plan,
    mode: Mode,
    seed: u64,
    workload: Workload,
    accumulators: Vec<ClassAccumulator>,
    /// Class index -> accumulator index (classes without jobs have none).
    row_of: Vec<usize>,
    /// Per accumulator row: when its requests begin to count (after ramp).
    measure_from_ns: Vec<Nanos>,
    timers: BinaryHeap<Timer>,
    /// Free buffers by capacity, the least recently used first: a job that
    /// asks for a set of write buffers larger than its depth cycles through
    /// all of them.
    buffers: HashMap<usize, VecDeque<AlignedBuffer>>,
    pending: HashMap<u64, Pending>,
    next_token: u64,
    generated: Vec<RequestTemplate>,
    /// Per instance: bytes submitted so far.
    instance_bytes: Vec<u64>,
    /// Per instance: writes submitted so far (for `sync_every_writes`).
    instance_writes: Vec<u64>,
    /// Syncs in flight: token -> instance.
    pending_syncs: HashMap<u64, usize>,
    /// Per instance of a closed-loop job: syncs that wait for a slot of its
    /// queue depth (the next completion of one of its writes hands its slot
    /// to the sync, as a sync takes one of the job's iodepth slots in fio).
    syncs_owed: Vec<u32>,
    /// Instances whose sync goes to the executor on this turn.
    syncs_due: Vec<usize>,
    /// Per job: its options (bound, ramp, think time, shape, verify).
    job_options: Vec<JobOptions>,
    /// Per instance: its job (instances are numbered job by job).
    instance_job: Vec<usize>,
    /// Per instance of a shaped job: its shaping state.
    shape_states: Vec<Option<ShapeState>>,
    /// Per accumulator row: reads and writes, for fio's JSON (each made at
    /// its first completion: an idle direction holds no histograms).
    directions: Vec<[Option<DirectionStats>; 2]>,
    /// Blocks verify jobs wrote, by (file, offset): (job, length, token of
    /// the write). A later write that overlaps earlier ones replaces them.
    written: BTreeMap<(usize, u64), (usize, u64, u64)>,
    /// The longest block in `written`.
    written_max_bytes: u64,
    /// Verify writes in flight: (file, start, end, token, overlapped). Two
    /// overlapping writes in flight together may land in either order (or
    /// torn, through the page cache), so neither one's pattern is expected
    /// on the device afterwards.
    verify_in_flight: Vec<(usize, u64, u64, u64, bool)>,
    /// What the jobs hold in flight, against their limits.
    in_flight: InFlight,
    /// Per job: its largest request, what the in-flight limits count.
    request_bytes_max: Vec<u64>,
    /// Data buffers allocated over the run.
    buffers_allocated: u64,
    /// Per accumulator row: when the last end fsync of its jobs' files
    /// completed (0: none).
    end_fsync_ns: Vec<Nanos>,
    start: Instant,
}

impl<'a> Driver<'a> {
    fn new(
        scenario: &'a Scenario,
        plan: &'a Plan,
        mode: Mode,
        seed: u64,
        job_options: &[JobOptions],
        limits: InFlightLimits,
    ) -> Result<Self, CliError> {
        let workload = Workload::new(scenario, seed);
        let job_options: Vec<JobOptions> = (0..scenario.jobs.len())
            .map(|job| job_options.get(job).cloned().unwrap_or_default())
            .collect();
        let (accumulators, row_of, measure_from_ns) =
            accumulators(scenario, &plan.device_name, &job_options);
        let end_fsync_ns = vec![0; measure_from_ns.len()];
        let instance_job: Vec<usize> = scenario
            .jobs
            .iter()
            .enumerate()
            .flat_map(|(index, job)| std::iter::repeat_n(index, job.numjobs as usize))
            .collect();
        let request_bytes_max: Vec<u64> = scenario
            .jobs
            .iter()
            .zip(&job_options)
            .map(|(job, options)| options.shape.largest_bytes(job.block_size_bytes))
            .collect();
        let in_flight = InFlight::new(limits, &request_bytes_max, instance_job.len());
        let (buffers, buffers_allocated) = buffers(scenario, &job_options, &in_flight)?;
        Ok(Self {
            buffers,
            buffers_allocated,
            instance_bytes: vec![0; workload.instance_count()],
            instance_writes: vec![0; workload.instance_count()],
            pending_syncs: HashMap::new(),
            syncs_owed: vec![0; workload.instance_count()],
            syncs_due: Vec::new(),
            measure_from_ns,
            shape_states: shape_states(&instance_job, &job_options, seed),
            directions: row_of
                .iter()
                .filter(|&&row| row != usize::MAX)
                .map(|_| [None, None])
                .collect(),
            instance_job,
            scenario,
            plan,
            mode,
            seed,
            timers: start_timers(&workload, scenario.duration_ns),
            workload,
            accumulators,
            row_of,
            pending: HashMap::new(),
            next_token: 0,
            generated: Vec::new(),
            job_options,
            written: BTreeMap::new(),
            written_max_bytes: 0,
            verify_in_flight: Vec::new(),
            in_flight,
            request_bytes_max,
            end_fsync_ns,
            start: Instant::now(),
        })
    }

    fn ns_at(&self, instant: Instant) -> Nanos {
        instant.saturating_duration_since(self.start).as_nanos() as Nanos
    }

    /// Whether the instance has submitted all the bytes its job may.
    fn exhausted(&self, instance: usize) -> bool {
        let limit = self.job_options[self.instance_job[instance]].io_bytes_per_instance;
        limit.is_some_and(|limit| self.instance_bytes[instance] >= limit)
    }

    fn drive(
        mut self,
        executor: &mut dyn Executor,
        progress: &mut dyn FnMut(Nanos),
    ) -> Result<Outcome, CliError> {
        let mut done = Vec::new();
        self.start = Instant::now();
        let mut next_progress = self.start;
        loop {
            if interrupted() {
                return Err(CliError::interrupted());
            }
            let instant = Instant::now();
            if instant >= next_progress {
                progress(self.ns_at(instant));
                next_progress = instant + PROGRESS_INTERVAL;
            }
            self.fire_timers(self.ns_at(instant));
            self.release_owed(self.ns_at(instant));
            self.submit_generated(executor)?;
            self.submit_syncs(executor)?;
            if self.timers.is_empty() && self.pending.is_empty() && self.pending_syncs.is_empty() {
                break;
            }
            let mut deadline = Instant::now() + POLL_INTERVAL;
            if let Some(&Reverse((when, _, _))) = self.timers.peek() {
                deadline = deadline.min(self.start + Duration::from_nanos(when));
            }
            done.clear();
            executor.wait(deadline, &mut done)?;
            for finished in done.drain(..) {
                // The refill goes out before the next completion is looked
                // at (see the module docs).
                if let Some(job) = self.complete(finished)? {
                    self.release_owed_of(job, self.ns_at(Instant::now()));
                    self.submit_generated(executor)?;
                }
            }
        }
        self.end_fsync(executor)?;
        Ok(self.finish())
    }

    /// Fsyncs, through the executor, the file of every job with `end_fsync`
    /// (once per file) when everything else has completed, and notes when
    /// each finished: as in fio, a size-bounded job's time runs until its
    /// end fsync is done.
    fn end_fsync(&mut self, executor: &mut dyn Executor) -> Result<(), CliError> {
        let mut syncs: HashMap<u64, usize> = HashMap::new();
        for job in 0..self.scenario.jobs.len() {
            let file = self.plan.job_file[job];
            if !self.job_options[job].end_fsync || syncs.values().any(|&f| f == file) {
                continue;
            }
            let token = self.submit_sync(executor, job, SyncKind::Fsync)?;
            syncs.insert(token, file);
        }
        let mut done = Vec::new();
        while !syncs.is_empty() {
            if interrupted() {
                return Err(CliError::interrupted());
            }
            done.clear();
            executor.wait(Instant::now() + POLL_INTERVAL, &mut done)?;
            for finished in done.drain(..) {
                if let Some(file) = syncs.remove(&finished.token) {
                    self.end_fsync_done(file, finished)?;
                }
            }
        }
        Ok(())
    }

    /// The end fsync of `file` finished: its error, or its time noted for
    /// the rows of the jobs that asked for it.
    fn end_fsync_done(&mut self, file: usize, finished: Done) -> Result<(), CliError> {
        let at_ns = self.ns_at(finished.at);
        let jobs = (0..self.scenario.jobs.len())
            .filter(|&job| self.job_options[job].end_fsync && self.plan.job_file[job] == file);
        for job in jobs {
            if let Err(error) = &finished.result {
                return Err(CliError::usage(format!(
                    "{}: job `{}`: end_fsync of {}: {error}",
                    self.mode.name(),
                    self.scenario.jobs[job].name,
                    self.plan.files[file].display()
                )));
            }
            let row = self.row_of[self.scenario.jobs[job].class];
            self.end_fsync_ns[row] = self.end_fsync_ns[row].max(at_ns);
        }
        Ok(())
    }

    /// Runs the timers due by `now`: instance starts, open-loop arrivals and
    /// the ends of think times.
    fn fire_timers(&mut self, now: Nanos) {
        let mut fired = 0u32;
        while let Some(&Reverse((when, instance, kind))) = self.timers.peek() {
            if when > now || stop_polled(&mut fired) {
                break;
            }
            self.timers.pop();
            if self.exhausted(instance) {
                continue;
            }
            let next = match kind {
                TimerKind::Start => self.start_instance(when, instance),
                TimerKind::Arrival => self.arrive(when, instance),
                TimerKind::Think => {
                    self.refill(when, instance);
                    None
                }
            };
            if let Some(next) = next {
                self.timers
                    .push(Reverse((next, instance, TimerKind::Arrival)));
            }
        }
    }

    /// An instance starts at `when`: a closed loop owes its queue depth, a
    /// burst its requests; an open loop returns its first arrival.
    fn start_instance(&mut self, when: Nanos, instance: usize) -> Option<Nanos> {
        let job = self.instance_job[instance];
        let spec = &self.scenario.jobs[job];
        let (count, burst) = match spec.arrival {
            Arrival::ClosedLoop { queue_depth } => (u64::from(queue_depth), false),
            Arrival::Burst { burst_bytes } => (burst_bytes.div_ceil(spec.block_size_bytes), true),
            Arrival::OpenLoop { .. } => {
                let next = self.workload.on_start(when, instance, &mut self.generated);
                return self.even_arrival(instance, when, true, next);
            }
        };
        self.in_flight.owe(job, instance, count, when, burst);
        None
    }

    /// An open-loop arrival at `when`: its request goes if its job has room
    /// in flight, else it is dropped (and counted). Returns the next arrival.
    fn arrive(&mut self, when: Nanos, instance: usize) -> Option<Nanos> {
        let before = self.generated.len();
        let next = self.workload.on_timer(when, instance, &mut self.generated);
        if self.generated.len() > before {
            let job = self.instance_job[instance];
            let bytes = self.request_bytes_max[job];
            if self.in_flight.arrive(job, bytes) {
                self.generated.pop();
            } else {
                self.in_flight.start(job, bytes);
            }
        }
        self.even_arrival(instance, when, false, next)
    }

    /// A closed-loop instance's request completed, or the think time after
    /// one passed, at `when`: it owes its next request, before its job's stop.
    fn refill(&mut self, when: Nanos, instance: usize) {
        let job = self.instance_job[instance];
        let spec = &self.scenario.jobs[job];
        if matches!(spec.arrival, Arrival::ClosedLoop { .. }) && when < spec.stop_ns {
            self.in_flight.owe(job, instance, 1, when, false);
        }
    }

    /// Lets out what closed-loop and burst instances owe, while their jobs
    /// have room in flight. A closed loop's held-back requests are forgotten
    /// at its stop (a burst's all go, however long they take).
    fn release_owed(&mut self, now: Nanos) {
        for job in 0..self.scenario.jobs.len() {
            self.release_owed_of(job, now);
        }
    }

    /// [`Driver::release_owed`] for one job.
    fn release_owed_of(&mut self, job: usize, now: Nanos) {
        let bytes = self.request_bytes_max[job];
        let spec = &self.scenario.jobs[job];
        let stopped = matches!(spec.arrival, Arrival::ClosedLoop { .. }) && now >= spec.stop_ns;
        while let Some((instance, intended)) = self.in_flight.take_owed(job, bytes, now) {
            if stopped || self.exhausted(instance) {
                self.in_flight.forgive(job, instance);
                continue;
            }
            self.in_flight.start(job, bytes);
            let template = self.workload.next_request(instance, intended);
            self.generated.push(template);
        }
    }

    /// The next arrival of an open-loop instance: `poisson` (the generator's)
    /// or, for a job with even arrivals, one interval after `when` (the
    /// first arrival at the start itself), while before the job's stop.
    fn even_arrival(
        &self,
        instance: usize,
        when: Nanos,
        first: bool,
        poisson: Option<Nanos>,
    ) -> Option<Nanos> {
        let job = self.instance_job[instance];
        let spec = &self.scenario.jobs[job];
        let Arrival::OpenLoop { rate_iops } = spec.arrival else {
            return poisson;
        };
        if !self.job_options[job].even_arrivals {
            return poisson;
        }
        let interval_ns = (1e9 / rate_iops).round().max(1.0) as Nanos;
        let next = if first { when } else { when + interval_ns };
        (next < spec.stop_ns).then_some(next)
    }

    /// Hands the generated requests to the executor (dropping those of
    /// instances that have moved their bytes).
    fn submit_generated(&mut self, executor: &mut dyn Executor) -> Result<(), CliError> {
        let mut generated = std::mem::take(&mut self.generated);
        let mut handed = 0u32;
        for template in generated.drain(..) {
            if stop_polled(&mut handed) {
                return Err(CliError::interrupted());
            }
            if self.exhausted(template.instance) {
                let job = template.job;
                self.in_flight.finish(job, self.request_bytes_max[job]);
                continue;
            }
            self.submit_one(executor, template)?;
        }
        self.generated = generated;
        Ok(())
    }

    /// Shapes one request, fills its buffer and hands it to the executor.
    fn submit_one(
        &mut self,
        executor: &mut dyn Executor,
        template: RequestTemplate,
    ) -> Result<(), CliError> {
        let job = &self.scenario.jobs[template.job];
        let (offset_bytes, length_bytes) = match &mut self.shape_states[template.instance] {
            Some(state) => {
                let shape = &self.job_options[template.job].shape;
                reshape(shape, state, job, template.offset_bytes)
            }
            None => (template.offset_bytes, template.length_bytes),
        };
        // The last request of a bounded instance moves only what is left
        // (a whole number of the job's blocks, as bounds are).
        let length_bytes = match self.job_options[template.job].io_bytes_per_instance {
            Some(limit) => length_bytes.min(limit - self.instance_bytes[template.instance]),
            None => length_bytes,
        };
        self.instance_bytes[template.instance] += length_bytes;
        let class = job.class;
        let write = job.pattern.direction() == tailguard_core::Direction::Write;
        let token = self.next_token;
        self.next_token += 1;
        let buffer = self.take_buffer(template.job, write, offset_bytes, length_bytes, token)?;
        let file = self.plan.job_file[template.job];
        let verify_expected = (!write && self.job_options[template.job].verify)
            .then(|| self.verified_record(file, offset_bytes, length_bytes))
            .flatten();
        let submitted_ns = self.ns_at(Instant::now());
        let row = self.row_of[class];
        let measured = submitted_ns >= self.measure_from_ns[row];
        if measured {
            self.accumulators[row].on_submit(submitted_ns);
        }
        executor.submit(Request {
            token,
            class,
            file,
            kind: if write {
                RequestKind::Write
            } else {
                RequestKind::Read
            },
            offset: offset_bytes - self.plan.job_base[template.job],
            buffer: Some(buffer),
        })?;
        let pending = Pending {
            template,
            class,
            submitted_ns,
            offset_bytes,
            length_bytes,
            measured,
            verify_expected,
        };
        self.pending.insert(token, pending);
        if write {
            self.sync_after_write(template.instance, template.job);
        }
        Ok(())
    }

    /// A buffer for request `token` of `job` (a free one, else a new one),
    /// filled with the verify pattern for a verify job's write.
    fn take_buffer(
        &mut self,
        job: usize,
        write: bool,
        offset_bytes: u64,
        length_bytes: u64,
        token: u64,
    ) -> Result<AlignedBuffer, CliError> {
        let length = length_bytes as usize;
        // A free buffer of the request's own size, else of the size its
        // shape gives new buffers (a range's largest), never another job's
        // larger one (a writer's ring of buffers stays its own).
        let buffer_bytes = self.job_options[job].shape.new_buffer_bytes(length_bytes) as usize;
        let free = [length, buffer_bytes]
            .into_iter()
            .find_map(|size| self.buffers.get_mut(&size)?.pop_front());
        let mut buffer = match free {
            Some(buffer) => buffer,
            None => {
                self.buffers_allocated += 1;
                new_buffer(buffer_bytes)?
            }
        };
        buffer.truncate(length);
        if write && self.job_options[job].verify {
            let seed = derive_seed(self.seed, offset_bytes, token as usize);
            fill_verified(&mut buffer, offset_bytes, seed);
            let file = self.plan.job_file[job];
            self.note_verify_write(file, offset_bytes, length_bytes, token);
        }
        Ok(buffer)
    }

    /// Counts an instance's write and, every `sync_every_writes`, makes it
    /// owe a sync of its file (not counted in the report). A closed loop's
    /// sync waits for a slot of its queue depth, which the instance's next
    /// write completion hands over; an open loop's or a burst's goes on this
    /// turn. Either way the sync counts under the job's in-flight limits.
    fn sync_after_write(&mut self, instance: usize, job: usize) {
        let every = self.job_options[job].sync_every_writes;
        if every == 0 {
            return;
        }
        self.instance_writes[instance] += 1;
        if self.instance_writes[instance] % u64::from(every) != 0 {
            return;
        }
        if self.closed_loop(job) {
            self.syncs_owed[instance] += 1;
        } else {
            self.in_flight.start(job, self.request_bytes_max[job]);
            self.syncs_due.push(instance);
        }
    }

    /// Whether `job` is a closed loop (a fixed queue depth per instance).
    fn closed_loop(&self, job: usize) -> bool {
        matches!(self.scenario.jobs[job].arrival, Arrival::ClosedLoop { .. })
    }

    /// Hands the syncs due this turn to the executor.
    fn submit_syncs(&mut self, executor: &mut dyn Executor) -> Result<(), CliError> {
        for instance in std::mem::take(&mut self.syncs_due) {
            let job = self.instance_job[instance];
            let kind = self.job_options[job].sync_kind;
            let token = self.submit_sync(executor, job, kind)?;
            self.pending_syncs.insert(token, instance);
        }
        Ok(())
    }

    /// Hands the executor a sync of `kind` of `job`'s file, in its class;
    /// returns the sync's token.
    fn submit_sync(
        &mut self,
        executor: &mut dyn Executor,
        job: usize,
        kind: SyncKind,
    ) -> Result<u64, CliError> {
        let token = self.next_token;
        self.next_token += 1;
        executor.submit(Request {
            token,
            class: self.scenario.jobs[job].class,
            file: self.plan.job_file[job],
            kind: RequestKind::Sync(kind),
            offset: 0,
            buffer: None,
        })?;
        Ok(token)
    }

    /// A sync completed: its slot of the job's in-flight limits is free,
    /// and a closed loop's instance owes its next request. Returns the job.
    fn complete_sync(&mut self, instance: usize, finished: Done) -> Result<usize, CliError> {
        let job = self.instance_job[instance];
        finished.result.map_err(|error| {
            CliError::usage(format!(
                "{}: job `{}`: a sync of {} failed: {error}",
                self.mode.name(),
                self.scenario.jobs[job].name,
                self.plan.files[self.plan.job_file[job]].display()
            ))
        })?;
        self.in_flight.finish(job, self.request_bytes_max[job]);
        if self.closed_loop(job) {
            let completed_ns = self.ns_at(finished.at);
            self.after_completion(job, instance, completed_ns);
        }
        Ok(job)
    }

    /// Records a completion and lets its instance generate the next request
    /// (after its think time, if it has one), or, when the instance owes a
    /// sync, hands the request's slot to that sync. Returns the request's
    /// job (`None` for a token it does not know).
    fn complete(&mut self, finished: Done) -> Result<Option<usize>, CliError> {
        if let Some(instance) = self.pending_syncs.remove(&finished.token) {
            return self.complete_sync(instance, finished).map(Some);
        }
        let Some(request) = self.pending.remove(&finished.token) else {
            return Ok(None);
        };
        let job = request.template.job;
        let instance = request.template.instance;
        let slot_to_sync = self.syncs_owed[instance] > 0;
        if slot_to_sync {
            self.syncs_owed[instance] -= 1;
            self.syncs_due.push(instance);
        } else {
            self.in_flight.finish(job, self.request_bytes_max[job]);
        }
        let Some(mut buffer) = finished.buffer else {
            return Ok(Some(job));
        };
        let write = request.template.direction == tailguard_core::Direction::Write;
        let bytes = finished
            .result
            .map_err(|error| self.failure(&request, &error.to_string()))?;
        if self.job_options[job].verify {
            self.check_block(finished.token, &request, &buffer, write)?;
        }
        let completed_ns = self.ns_at(finished.at).max(request.submitted_ns);
        if request.measured {
            self.measure(&request, completed_ns, bytes as u64);
        }
        buffer.restore_len();
        self.buffers
            .entry(buffer.len())
            .or_default()
            .push_back(buffer);
        if !slot_to_sync {
            self.after_completion(job, instance, completed_ns);
        }
        Ok(Some(job))
    }

    /// A closed-loop instance's slot came free at `completed_ns`: it owes
    /// its next request, after its job's think time if it has one.
    fn after_completion(&mut self, job: usize, instance: usize, completed_ns: Nanos) {
        let think_ns = self.job_options[job].think_ns;
        if think_ns > 0 && self.closed_loop(job) {
            let when = completed_ns + think_ns;
            self.timers
                .push(Reverse((when, instance, TimerKind::Think)));
        } else {
            self.refill(completed_ns, instance);
        }
    }

    /// Counts a measured request that completed at `completed_ns` having
    /// moved `bytes`, in its class's row and direction.
    fn measure(&mut self, request: &Pending, completed_ns: Nanos, bytes: u64) {
        let template = &request.template;
        let write = template.direction == tailguard_core::Direction::Write;
        let row = self.row_of[request.class];
        let intended_ns = template.intended_at.min(request.submitted_ns);
        self.accumulators[row].on_complete(completed_ns, intended_ns, request.submitted_ns, bytes);
        let name = &self.scenario.classes[request.class].name;
        self.directions[row][usize::from(write)]
            .get_or_insert_with(|| DirectionStats::new(name, write))
            .record(intended_ns, request.submitted_ns, completed_ns, bytes);
    }

    /// A verify job's block: a write is remembered for the read-back check;
    /// a read must check out when the block it read is, from its submission
    /// to its completion, exactly one write's (the same record, no write to
    /// those bytes in flight): a read of part of a block, of a block a
    /// later write overlapped, or beside a write to the same bytes may see
    /// any mix of old and new data.
    fn check_block(
        &mut self,
        token: u64,
        request: &Pending,
        buffer: &AlignedBuffer,
        write: bool,
    ) -> Result<(), CliError> {
        if write {
            let alone = self.finish_verify_write(token);
            self.remember_written(token, request, alone);
            return Ok(());
        }
        let Some(expected) = request.verify_expected else {
            return Ok(());
        };
        let file = self.plan.job_file[request.template.job];
        if self.verified_record(file, request.offset_bytes, request.length_bytes) == Some(expected)
        {
            check_verified(buffer, request.offset_bytes)
                .map_err(|problem| self.failure(request, &format!("verify: {problem}")))?;
        }
        Ok(())
    }

    /// The token of the completed verify write whose record covers exactly
    /// `length` bytes at `start` of `file`, if no verify write to any of
    /// them is in flight.
    fn verified_record(&self, file: usize, start: u64, length: u64) -> Option<u64> {
        let &(_, recorded_length, token) = self.written.get(&(file, start))?;
        let end = start + length;
        let raced = self
            .verify_in_flight
            .iter()
            .any(|entry| entry.0 == file && entry.1 < end && start < entry.2);
        (recorded_length == length && !raced).then_some(token)
    }

    /// Records a verify write going out, marking it and every verify write
    /// in flight that it overlaps.
    fn note_verify_write(&mut self, file: usize, start: u64, length: u64, token: u64) {
        let end = start + length;
        let mut overlapped = false;
        for entry in &mut self.verify_in_flight {
            if entry.0 == file && entry.1 < end && start < entry.2 {
                entry.4 = true;
                overlapped = true;
            }
        }
        self.verify_in_flight
            .push((file, start, end, token, overlapped));
    }

    /// Takes a completed verify write off the in-flight list; whether no
    /// overlapping write was in flight beside it.
    fn finish_verify_write(&mut self, token: u64) -> bool {
        let Some(index) = self
            .verify_in_flight
            .iter()
            .position(|entry| entry.3 == token)
        else {
            return true;
        };
        !self.verify_in_flight.swap_remove(index).4
    }

    /// Records a verify job's completed write, dropping the blocks it
    /// overlaps (their data is no longer what they wrote); a write that
    /// raced an overlapping one (`alone` false) is not remembered either.
    fn remember_written(&mut self, token: u64, request: &Pending, alone: bool) {
        let job = request.template.job;
        let file = self.plan.job_file[job];
        let (start, end) = (
            request.offset_bytes,
            request.offset_bytes + request.length_bytes,
        );
        let overlapped: Vec<(usize, u64)> = self
            .written
            .range((file, start.saturating_sub(self.written_max_bytes))..(file, end))
            .filter(|(&(_, offset), &(_, length, _))| offset + length > start)
            .map(|(key, _)| *key)
            .collect();
        for key in overlapped {
            self.written.remove(&key);
        }
        if !alone {
            return;
        }
        self.written
            .insert((file, start), (job, request.length_bytes, token));
        self.written_max_bytes = self.written_max_bytes.max(request.length_bytes);
    }

    /// The error for a request that failed (or read back wrong).
    fn failure(&self, request: &Pending, problem: &str) -> CliError {
        let plan = self.plan;
        let job = request.template.job;
        CliError::usage(format!(
            "{}: job `{}`: a {} of {} bytes at offset {} of {} failed: {problem}",
            self.mode.name(),
            self.scenario.jobs[job].name,
            if request.template.direction == tailguard_core::Direction::Write {
                "write"
            } else {
                "read"
            },
            request.length_bytes,
            request.offset_bytes - plan.job_base[job],
            plan.files[plan.job_file[job]].display()
        ))
    }

    /// The report. A class whose jobs are all size-bounded counts its rates
    /// over the time it ran (its measured start to its last completion, or
    /// to its jobs' end fsync when that came later), and has no worst 0.5 s
    /// rate (its window was not known in advance); a run with such jobs
    /// lasts until its last completion.
    fn finish(mut self) -> Outcome {
        let mut classes: Vec<ClassReport> = self
            .accumulators
            .iter()
            .map(ClassAccumulator::finish)
            .collect();
        let mut last_completion_s = 0.0f64;
        for (class, &row) in self.row_of.iter().enumerate() {
            if row == usize::MAX {
                continue;
            }
            let bounded = (0..self.scenario.jobs.len())
                .filter(|&job| self.scenario.jobs[job].class == class)
                .all(|job| self.job_options[job].io_bytes_per_instance.is_some());
            if bounded {
                let synced_s = self.end_fsync_ns[row] as f64 / 1e9;
                let last = &mut classes[row].last_completion_s;
                *last = last.max(synced_s);
                rate_over_active_time(&mut classes[row], self.measure_from_ns[row]);
            }
            last_completion_s = last_completion_s.max(classes[row].last_completion_s);
        }
        let bounded = self
            .job_options
            .iter()
            .any(|o| o.io_bytes_per_instance.is_some());
        let duration_s = self.scenario.duration_ns as f64 / 1e9;
        let directions = self.direction_stats(&classes);
        let overloads = self.overloads(&classes);
        let report = RunReport {
            policy: self.mode.name().to_string(),
            seed: self.seed,
            duration_s: if bounded {
                duration_s.min(last_completion_s)
            } else {
                duration_s
            },
            classes,
        };
        Outcome {
            report,
            directions,
            written: self
                .written
                .iter()
                .map(|(&(_, offset), &(job, length, _))| (job, offset, length))
                .collect(),
            overloads,
            in_flight_peak: self.in_flight.run_requests_peak(),
            buffers_allocated: self.buffers_allocated,
        }
    }

    /// The jobs that met their in-flight limit, with the rate their class
    /// sustained.
    fn overloads(&self, classes: &[ClassReport]) -> Vec<JobOverload> {
        self.in_flight
            .overloaded()
            .map(|(job, [limit, peak, arrivals, dropped, held_back])| {
                let spec = &self.scenario.jobs[job];
                let row = self.row_of[spec.class];
                JobOverload {
                    job: spec.name.clone(),
                    class: self.scenario.classes[spec.class].name.clone(),
                    asked_iops: match spec.arrival {
                        Arrival::OpenLoop { rate_iops } => {
                            Some(rate_iops * f64::from(spec.numjobs))
                        }
                        _ => None,
                    },
                    sustained_iops: classes.get(row).map_or(0.0, |class| class.iops),
                    in_flight_limit: limit,
                    in_flight_peak: peak,
                    arrivals,
                    dropped,
                    held_back,
                }
            })
            .collect()
    }

    /// The directions that did I/O, with their active time: from the
    /// class's measured start to its last completion, at most to its jobs'
    /// stop.
    fn direction_stats(&mut self, classes: &[ClassReport]) -> Vec<DirectionStats> {
        let mut out = Vec::new();
        let mut rows = std::mem::take(&mut self.directions).into_iter();
        for (class, &row) in self.row_of.iter().enumerate() {
            if row == usize::MAX {
                continue;
            }
            let Some(pair) = rows.next() else {
                break;
            };
            let jobs = self.scenario.jobs.iter().filter(|job| job.class == class);
            let stop_ns = jobs.map(|job| job.stop_ns).max().unwrap_or(0);
            let last_ns = (classes[row].last_completion_s * 1e9) as u64;
            for mut stats in pair.into_iter().flatten() {
                if stats.ops > 0 {
                    stats.active_ns = last_ns
                        .min(stop_ns)
                        .saturating_sub(self.measure_from_ns[row])
                        .max(1);
                    out.push(stats);
                }
            }
        }
        out
    }
}

/// The instances' start timers (those that start within the run).
fn start_timers(workload: &Workload, duration_ns: Nanos) -> BinaryHeap<Timer> {
    workload
        .start_times()
        .into_iter()
        .enumerate()
        .filter(|&(_, start)| start < duration_ns)
        .map(|(instance, start)| Reverse((start, instance, TimerKind::Start)))
        .collect()
}

/// Per instance of a shaped job: its shaping state.
fn shape_states(
    instance_job: &[usize],
    job_options: &[JobOptions],
    seed: u64,
) -> Vec<Option<ShapeState>> {
    instance_job
        .iter()
        .enumerate()
        .map(|(instance, &job)| {
            (!job_options[job].shape.is_plain())
                .then(|| ShapeState::new(derive_seed(seed, 7, instance)))
        })
        .collect()
}

/// Reads back every block verify jobs wrote (O_DIRECT where the file takes
/// it, else through the page cache) and checks it; the error names the
/// first bad block.
fn verify_written(
    scenario: &Scenario,
    plan: &Plan,
    mode: Mode,
    written: &[WrittenBlock],
) -> Result<(), CliError> {
    if written.is_empty() {
        return Ok(());
    }
    let mut files: HashMap<usize, std::fs::File> = HashMap::new();
    let mut buffers: HashMap<usize, AlignedBuffer> = HashMap::new();
    let failed = |job: usize, offset: u64, problem: String| {
        CliError::usage(format!(
            "{}: job `{}`: verify: the block written at offset {offset} of {}: {problem}",
            mode.name(),
            scenario.jobs[job].name,
            plan.files[plan.job_file[job]].display()
        ))
    };
    for &(job, offset, length) in written {
        let index = plan.job_file[job];
        let file = match files.entry(index) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let path = &plan.files[index];
                let opened = open_plain(path, true).or_else(|_| open_plain(path, false));
                entry.insert(opened.map_err(|error| failed(job, offset, error.to_string()))?)
            }
        };
        let buffer = match buffers.entry(length as usize) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(new_buffer(length as usize)?)
            }
        };
        let at = offset - plan.job_base[job];
        std::os::unix::fs::FileExt::read_exact_at(&*file, buffer, at)
            .map_err(|error| failed(job, offset, error.to_string()))?;
        check_verified(buffer, offset).map_err(|problem| failed(job, offset, problem))?;
    }
    eprintln!(
        "tailguard bench: {}: verify: {} written blocks read back and checked",
        mode.name(),
        written.len()
    );
    Ok(())
}

/// Recomputes a size-bounded class's rates over `start_ns` to its last
/// completion.
fn rate_over_active_time(row: &mut ClassReport, start_ns: Nanos) {
    let active_s = (row.last_completion_s - start_ns as f64 / 1e9).max(1e-9);
    let round3 = |value: f64| (value * 1e3).round() / 1e3;
    row.iops = round3(row.ops as f64 / active_s);
    row.mb_per_s = round3(row.bytes as f64 / active_s / 1e6);
    row.worst_500ms_iops = None;
}

/// One accumulator per class that has jobs, measuring from its jobs' first
/// start plus their longest ramp to their last stop, its worst 0.5 s rate
/// counted only while its jobs run where they leave gaps ([`job_spans`]); the
/// class -> accumulator index map; and per accumulator, when it starts
/// measuring.
fn accumulators(
    scenario: &Scenario,
    device_name: &str,
    job_options: &[JobOptions],
) -> (Vec<ClassAccumulator>, Vec<usize>, Vec<Nanos>) {
    let mut accumulators = Vec::new();
    let mut row_of = vec![usize::MAX; scenario.classes.len()];
    let mut measure_from_ns = Vec::new();
    for (class, spec) in scenario.classes.iter().enumerate() {
        let jobs = (0..scenario.jobs.len()).filter(|&job| scenario.jobs[job].class == class);
        let (Some(start), Some(stop), Some(ramp)) = (
            jobs.clone().map(|job| scenario.jobs[job].start_ns).min(),
            jobs.clone().map(|job| scenario.jobs[job].stop_ns).max(),
            jobs.map(|job| job_options[job].ramp_ns).max(),
        ) else {
            continue;
        };
        let from = (start + ramp).min(stop.saturating_sub(1));
        row_of[class] = accumulators.len();
        measure_from_ns.push(from);
        accumulators.push(
            ClassAccumulator::new(spec.name.clone(), device_name.to_string(), stop - from)
                .starting_at(from)
                .active_during(&job_spans(scenario, class, from)),
        );
    }
    (accumulators, row_of, measure_from_ns)
}

/// The spans in which `class`'s jobs run (each job from its start to its
/// stop, none before `from`); `ClassAccumulator::active_during` merges those
/// that overlap or touch, so jobs without gaps count as one active window.
fn job_spans(scenario: &Scenario, class: usize, from: Nanos) -> Vec<(Nanos, Nanos)> {
    scenario
        .jobs
        .iter()
        .filter(|job| job.class == class && job.stop_ns > from)
        .map(|job| (job.start_ns.max(from), job.stop_ns))
        .collect()
}

/// Buffers for what the jobs put in flight at once (at most their in-flight
/// limits), allocated and touched before the clock starts: faulting in a
/// burst's memory mid-run would make the driver late for every other job.
/// Also how many there are.
fn buffers(
    scenario: &Scenario,
    job_options: &[JobOptions],
    in_flight: &InFlight,
) -> Result<(HashMap<usize, VecDeque<AlignedBuffer>>, u64), CliError> {
    let mut buffers: HashMap<usize, VecDeque<AlignedBuffer>> = HashMap::new();
    let mut allocated = 0;
    let mut allocated_bytes = 0;
    let run_bytes_max = in_flight.limits().run_bytes_max;
    for (index, (job, options)) in scenario.jobs.iter().zip(job_options).enumerate() {
        let per_instance = match job.arrival {
            Arrival::ClosedLoop { queue_depth } => u64::from(queue_depth),
            Arrival::Burst { burst_bytes } => burst_bytes.div_ceil(job.block_size_bytes),
            Arrival::OpenLoop { .. } => 4,
        };
        let in_flight_count =
            (per_instance * u64::from(job.numjobs)).min(in_flight.job_limit(index));
        let writes = job.pattern.direction() == tailguard_core::Direction::Write;
        for length in options.shape.buffer_sizes(job.block_size_bytes) {
            let ring_count = if writes {
                options.write_buffer_bytes.div_ceil(length)
            } else {
                0
            };
            let length = length as usize;
            for _ in 0..in_flight_count.max(ring_count) {
                if allocated_bytes + length as u64 > run_bytes_max {
                    break;
                }
                allocated_bytes += length as u64;
                let buffer = new_buffer(length)?;
                buffers.entry(length).or_default().push_back(buffer);
                allocated += 1;
            }
        }
    }
    Ok((buffers, allocated))
}

fn new_buffer(length: usize) -> Result<AlignedBuffer, CliError> {
    let mut buffer = AlignedBuffer::new(length, BUFFER_ALIGNMENT)
        .map_err(|error| CliError::usage(format!("cannot allocate a buffer: {error}")))?;
    // A memset, fast even unoptimized: the driver must not stall here.
    buffer.fill(0x5a);
    Ok(buffer)
}

/// Who runs the scheduler's engine while `tailguard` mode's driver thread
/// waits for completions (`--driver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverChoice {
    /// The driver waits inside [`Scheduler::block_on`], so it runs the engine
    /// itself (submits, sleeps in the ring, reaps) whenever it would wait: no
    /// thread hop per request, as with fio or a blocking caller.
    BlockOn,
    /// The driver parks its thread and the engine thread does the engine work;
    /// every completion is a cross-thread wake-up, as for futures awaited on
    /// another runtime (tokio).
    EngineThread,
}

/// A request's future: a read or write, or a sync.
enum SlotFuture {
    Data(IoFuture<BufResult>),
    Sync(IoFuture<io::Result<()>>),
}

/// A request's future and the waker that reports its token.
type Slot = (SlotFuture, Waker);

/// The `tailguard` mode: requests through a [`Scheduler`].
struct SchedulerExecutor {
    /// With `BlockOn`, the driver thread keeps the engine between its waits
    /// ([`Scheduler::hold_engine`]): a write stream always in flight would
    /// otherwise hand the engine to the engine thread at every return from
    /// `block_on`, and each completion would cost a thread hop.
    _hold: Option<tailguard::EngineHold>,
    // Futures next: they are dropped before the scheduler shuts down.
    futures: HashMap<u64, Slot>,
    /// Tokens submitted and not polled yet: their first poll registers their
    /// waker, inside the wait (so, with `BlockOn`, inside `block_on`).
    fresh: Vec<u64>,
    ready: Arc<ReadyTokens>,
    /// Wakes a `BlockOn` wait at its deadline (the engine's sleep in the ring
    /// ends only for a completion or a wake-up from another thread).
    alarm: Option<Alarm>,
    driver: DriverChoice,
    files: Vec<tailguard::File>,
    classes: Vec<IoClass>,
    scheduler: Scheduler,
}

/// Tokens whose futures woke, and the waker of the wait that wants them.
#[derive(Default)]
struct ReadyTokens {
    state: Mutex<(Vec<u64>, Option<Waker>)>,
}

impl ReadyTokens {
    /// Moves the woken tokens into `out` and registers `waker` for the next
    /// wake-up, in one critical section, so no wake-up falls between them.
    fn take(&self, out: &mut Vec<u64>, waker: &Waker) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        out.append(&mut state.0);
        match &mut state.1 {
            Some(registered) if registered.will_wake(waker) => {}
            registered => *registered = Some(waker.clone()),
        }
    }

    /// Wakes the registered wait, if any (once).
    fn wake_waiter(&self) {
        let waiter = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .take();
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }

    /// Forgets the registered waker (its wait is over).
    fn clear_waiter(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = None;
    }
}

/// Reports one token to the driver's wait.
struct TokenWaker {
    token: u64,
    ready: Arc<ReadyTokens>,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let waiter = {
            let mut state = self.ready.state.lock().unwrap_or_else(|e| e.into_inner());
            state.0.push(self.token);
            state.1.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }
}

/// Unparks the driver thread (no system call unless it is parked).
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor for `EngineThread`: polls `future`, parking the thread
/// while it is pending, at most until `deadline` (after which `future` must be
/// ready when polled).
fn park_on<F: Future>(future: F, deadline: Instant) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Polls `token`'s future; moves its result to `out` when done.
fn poll_token(futures: &mut HashMap<u64, Slot>, token: u64, out: &mut Vec<Done>) {
    let Some((future, waker)) = futures.get_mut(&token) else {
        return; // done already: a late wake-up
    };
    let mut context = Context::from_waker(waker);
    let polled = match future {
        SlotFuture::Data(future) => std::pin::Pin::new(future)
            .poll(&mut context)
            .map(|(result, buffer)| (result, Some(buffer))),
        SlotFuture::Sync(future) => std::pin::Pin::new(future)
            .poll(&mut context)
            .map(|result| (result.map(|()| 0), None)),
    };
    if let Poll::Ready((result, buffer)) = polled {
        futures.remove(&token);
        out.push(Done {
            token,
            result,
            buffer,
            at: Instant::now(),
        });
    }
}

impl SchedulerExecutor {
    fn new(
        scenario: &Scenario,
        plan: &Plan,
        settings: &SchedulerSettings,
        threads: usize,
    ) -> Result<Self, CliError> {
        let failed = |error: io::Error| CliError::usage(format!("tailguard: {error}"));
        let scheduler = settings
            .builder()
            .map_err(failed)?
            .threads(threads)
            .build()
            .map_err(failed)?;
        crate::metrics::publish(
            settings.metrics_listen,
            settings.metrics_linger_s,
            &scheduler,
        )
        .map_err(failed)?;
        let classes = scenario
            .classes
            .iter()
            .map(|class| {
                let mut options = tailguard::ClassOptions::new(class.shares);
                if let Some(limit) = class.rate_limit() {
                    options = options.rate_limit(limit);
                }
                scheduler.add_class_with(&class.name, &options)
            })
            .collect::<io::Result<Vec<_>>>()
            .map_err(failed)?;
        let files = plan
            .files
            .iter()
            .map(|path| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&scheduler, path)
            })
            .collect::<io::Result<Vec<_>>>()
            .map_err(failed)?;
        let ready = Arc::new(ReadyTokens::default());
        let driver = settings.driver;
        let alarm = match driver {
            DriverChoice::BlockOn => {
                let ready = ready.clone();
                Some(Alarm::new(move || ready.wake_waiter()).map_err(failed)?)
            }
            DriverChoice::EngineThread => None,
        };
        let hold = (driver == DriverChoice::BlockOn).then(|| scheduler.hold_engine());
        Ok(Self {
            _hold: hold,
            futures: HashMap::new(),
            fresh: Vec::new(),
            ready,
            alarm,
            driver,
            files,
            classes,
            scheduler,
        })
    }
}

impl Executor for SchedulerExecutor {
    fn submit(&mut self, request: Request) -> Result<(), CliError> {
        let file = &self.files[request.file];
        let class = &self.classes[request.class];
        let future = match (request.kind, request.buffer) {
            (RequestKind::Write, Some(buffer)) => {
                SlotFuture::Data(file.write_at(class, buffer, request.offset))
            }
            (RequestKind::Read, Some(buffer)) => {
                SlotFuture::Data(file.read_at(class, buffer, request.offset))
            }
            (RequestKind::Sync(SyncKind::Fsync), _) => SlotFuture::Sync(file.fsync(class)),
            (RequestKind::Sync(SyncKind::Fdatasync), _) => SlotFuture::Sync(file.fdatasync(class)),
            (_, None) => {
                return Err(CliError::usage("a read or write without a buffer"));
            }
        };
        let waker = Waker::from(Arc::new(TokenWaker {
            token: request.token,
            ready: self.ready.clone(),
        }));
        self.futures.insert(request.token, (future, waker));
        self.fresh.push(request.token);
        Ok(())
    }

    fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
        if let Some(alarm) = &self.alarm {
            alarm.set(deadline);
        }
        let Self {
            futures,
            fresh,
            ready,
            ..
        } = self;
        let mut woken = Vec::new();
        let mut until_done_or_deadline = std::future::poll_fn(|context| {
            for token in fresh.drain(..) {
                poll_token(futures, token, out);
            }
            // Register before the deadline check: the alarm wakes the waker
            // registered here, or, if it fired before, the check sees it.
            ready.take(&mut woken, context.waker());
            for token in woken.drain(..) {
                poll_token(futures, token, out);
            }
            if !out.is_empty() || Instant::now() >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        match self.driver {
            DriverChoice::BlockOn => self.scheduler.block_on(&mut until_done_or_deadline),
            DriverChoice::EngineThread => park_on(&mut until_done_or_deadline, deadline),
        }
        self.ready.clear_waiter();
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.futures.len()
    }

    fn abandon_queued(&mut self) {
        // Dropping a future in flight is safe: the engine keeps its buffer.
        self.futures.clear();
        self.fresh.clear();
        // What the dispatchers hold would otherwise be served before the
        // scheduler shuts down (a queue the size of the in-flight limits:
        // tenths of a second under overload). On a stop signal the run is
        // over: fail it and stop at once; after another error, fail it and
        // keep the scheduler for the statistics.
        if interrupted() {
            self.scheduler.shutdown_now();
        } else if let Err(error) = self.scheduler.cancel_pending() {
            tracing::debug!(%error, "cancelling the scheduler's queue");
        }
    }

    fn scheduler_stats(&self) -> Option<io::Result<StatsSnapshot>> {
        Some(self.scheduler.stats())
    }
}

/// The alarm's deadline and its quit flag, with the condvar its thread waits on.
type AlarmShared = (Mutex<(Option<Instant>, bool)>, Condvar);

/// Calls a wake-up function at a deadline, from its own thread: ends a
/// backend's sleep in the kernel, or a `block_on` wait.
struct Alarm {
    shared: Arc<AlarmShared>,
    thread: Option<JoinHandle<()>>,
}

impl Alarm {
    fn new(wake: impl Fn() + Send + 'static) -> io::Result<Self> {
        let shared: Arc<AlarmShared> = Arc::new((Mutex::new((None, false)), Condvar::new()));
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tailguard-bench-alarm".into())
            .spawn(move || {
                let (state, condvar) = &*theirs;
                let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if guard.1 {
                        return;
                    }
                    match guard.0 {
                        None => guard = condvar.wait(guard).unwrap_or_else(|e| e.into_inner()),
                        Some(deadline) => {
                            let now = Instant::now();
                            if now >= deadline {
                                guard.0 = None;
                                wake();
                            } else {
                                guard = condvar
                                    .wait_timeout(guard, deadline - now)
                                    .unwrap_or_else(|e| e.into_inner())
                                    .0;
                            }
                        }
                    }
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Arms the alarm for `deadline`. The alarm thread is woken only when the
    /// new deadline is earlier than the one it sleeps towards: a later one it
    /// finds by itself when it wakes, so a driver that re-arms before every wait
    /// costs no context switch per request.
    fn set(&self, deadline: Instant) {
        let (state, condvar) = &*self.shared;
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let earlier = guard.0.is_none_or(|pending| deadline < pending);
        guard.0 = Some(deadline);
        drop(guard);
        if earlier {
            condvar.notify_one();
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        let (state, condvar) = &*self.shared;
        state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        condvar.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Counts one more item of a batch and, every [`STOP_POLL_ITEMS`], whether
/// the run was interrupted: a batch an overloaded run generates (every
/// arrival due since the last turn of the loop) would otherwise delay Ctrl-C
/// by as long as it takes.
fn stop_polled(count: &mut u32) -> bool {
    *count += 1;
    *count % STOP_POLL_ITEMS == 0 && interrupted()
}

/// The kernel modes: a raw backend, no scheduler.
struct BackendExecutor {
    backend: Box<dyn Backend>,
    alarm: Alarm,
    /// Ops the backend handed back (queue full), pushed on the next wait.
    backlog: VecDeque<Op>,
    /// Ops pushed or in the backlog, with their buffers (none for syncs):
    /// the kernel's until reaped.
    buffers: HashMap<u64, KernelOp>,
    /// Whether writes (and syncs) go with O_DIRECT: kernel-direct.
    direct: bool,
    /// Per file: the descriptor for writes (O_DIRECT in kernel-direct only).
    files: Vec<std::fs::File>,
    /// Per file: the descriptor for reads (always O_DIRECT where it opens).
    read_files: Vec<std::fs::File>,
    /// Per file: whether its reads go with O_DIRECT.
    read_direct: Vec<bool>,
    results: Vec<backend::OpResult>,
}

/// A kernel-mode op until it is reaped: its buffer (none for syncs), and
/// what the error names if it fails.
struct KernelOp {
    buffer: Option<AlignedBuffer>,
    operation: Operation,
    direct: bool,
}

/// Opens `path` for reading and writing, with O_DIRECT when `direct`.
fn open_plain(path: &std::path::Path, direct: bool) -> io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    options
        .open(path)
        .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))
}

impl BackendExecutor {
    fn new(plan: &Plan, direct: bool, threads: usize) -> Result<Self, CliError> {
        let name = if direct {
            "kernel-direct"
        } else {
            "kernel-buffered"
        };
        let failed = |error: io::Error| CliError::usage(format!("{name}: {error}"));
        let backend: Box<dyn Backend> = if direct {
            backend::open_backend(BackendConfig {
                choice: BackendChoice::Auto,
                ring_depth: RING_DEPTH,
                threads,
                shared_ring: false,
            })
            .map_err(failed)?
        } else {
            Box::new(ThreadPool::new(threads, RING_DEPTH).map_err(failed)?)
        };
        let files = plan
            .files
            .iter()
            .map(|path| open_plain(path, direct))
            .collect::<io::Result<Vec<_>>>()
            .map_err(failed)?;
        let mut read_files = Vec::with_capacity(files.len());
        let mut read_direct = Vec::with_capacity(files.len());
        for (path, file) in plan.files.iter().zip(&files) {
            read_direct.push(true);
            let reader = match open_plain(path, true) {
                Ok(reader) => reader,
                // `open_plain` keeps the kind, not the errno: EINVAL is InvalidInput.
                Err(error) if !direct && error.kind() == io::ErrorKind::InvalidInput => {
                    eprintln!(
                        "note: {name}: {} refuses O_DIRECT; its reads go through the page cache",
                        path.display()
                    );
                    *read_direct.last_mut().expect("pushed above") = false;
                    file.try_clone().map_err(failed)?
                }
                Err(error) => return Err(failed(error)),
            };
            read_files.push(reader);
        }
        let waker = backend.waker();
        let alarm = Alarm::new(move || waker.wake()).map_err(failed)?;
        Ok(Self {
            backend,
            alarm,
            backlog: VecDeque::new(),
            buffers: HashMap::new(),
            direct,
            files,
            read_files,
            read_direct,
            results: Vec::new(),
        })
    }

    /// Pushes the backlog until the backend refuses, handing each op to the
    /// kernel before the next is pushed (one `io_uring_enter` per request, as
    /// fio does by default: on a virtio disk, requests submitted together
    /// complete together, which costs IOPS at deeper queues).
    /// The last op goes with `wait`'s own submit, so queue depth 1 costs one
    /// system call per request. An op not pushed when a submit fails goes
    /// back to the front of the backlog: its buffer stays in `buffers`, so
    /// it must either reach the kernel later or be abandoned with the
    /// backlog, else the run would wait for it forever.
    fn flush(&mut self) -> io::Result<()> {
        let mut first = true;
        let mut pushed = 0u32;
        while let Some(op) = self.backlog.pop_front() {
            if stop_polled(&mut pushed) {
                // Ctrl-C: the rest is abandoned, not handed to the kernel.
                self.backlog.push_front(op);
                break;
            }
            if !first {
                if let Err(error) = self.backend.submit(false) {
                    self.backlog.push_front(op);
                    return Err(error);
                }
            }
            first = false;
            // SAFETY: the op's buffer is in `self.buffers` until its completion
            // is reaped, and nothing touches it meanwhile (see `Drop`).
            if let Err(op) = unsafe { self.backend.push(op) } {
                if let Err(error) = self.backend.submit(false) {
                    self.backlog.push_front(op);
                    return Err(error);
                }
                // SAFETY: as above.
                if let Err(op) = unsafe { self.backend.push(op) } {
                    self.backlog.push_front(op);
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Executor for BackendExecutor {
    fn submit(&mut self, mut request: Request) -> Result<(), CliError> {
        let (pointer, length) = match &mut request.buffer {
            Some(buffer) => (buffer.as_mut_ptr(), buffer.len() as u32),
            None => (std::ptr::null_mut(), 0),
        };
        let op = Op {
            user_data: request.token,
            fd: if request.kind == RequestKind::Read {
                self.read_files[request.file].as_raw_fd()
            } else {
                self.files[request.file].as_raw_fd()
            },
            kind: match request.kind {
                RequestKind::Read => OpKind::Read,
                RequestKind::Write => OpKind::Write,
                RequestKind::Sync(SyncKind::Fsync) => OpKind::Fsync,
                RequestKind::Sync(SyncKind::Fdatasync) => OpKind::Fdatasync,
            },
            buffer: pointer,
            length,
            offset: request.offset,
        };
        let (operation, direct) = match request.kind {
            RequestKind::Read => (Operation::Read, self.read_direct[request.file]),
            RequestKind::Write => (Operation::Write, self.direct),
            RequestKind::Sync(_) => (Operation::Sync, self.direct),
        };
        // Moving the buffer moves its handle, not the memory the op points to.
        self.buffers.insert(
            request.token,
            KernelOp {
                buffer: request.buffer,
                operation,
                direct,
            },
        );
        self.backlog.push_back(op);
        Ok(())
    }

    fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
        let mode = if self.direct {
            Mode::KernelDirect
        } else {
            Mode::KernelBuffered
        };
        let failed = |error: io::Error| {
            CliError::usage(format!(
                "{}: handing requests to the kernel failed: {error}",
                mode.name()
            ))
        };
        self.flush().map_err(failed)?;
        self.results.clear();
        self.backend.reap(&mut self.results);
        // One system call per wait: submit what was pushed, and sleep in the same
        // call when nothing is ready yet (as fio does).
        if self.results.is_empty() && Instant::now() < deadline {
            self.alarm.set(deadline);
            self.backend.submit(true).map_err(failed)?;
            self.backend.reap(&mut self.results);
        } else {
            self.backend.submit(false).map_err(failed)?;
        }
        let at = Instant::now();
        for result in self.results.drain(..) {
            let Some(op) = self.buffers.remove(&result.user_data) else {
                continue; // not ours
            };
            out.push(Done {
                token: result.user_data,
                result: if result.result < 0 {
                    Err(KernelError {
                        errno: -result.result,
                        operation: op.operation,
                        direct: op.direct,
                    }
                    .into_io_error())
                } else {
                    Ok(result.result as usize)
                },
                buffer: op.buffer,
                at,
            });
        }
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.buffers.len()
    }

    fn abandon_queued(&mut self) {
        for op in self.backlog.drain(..) {
            self.buffers.remove(&op.user_data);
        }
    }
}

impl Drop for BackendExecutor {
    fn drop(&mut self) {
        // The kernel may still write into buffers of ops in flight: wait for
        // them before the buffers are freed.
        self.abandon_queued();
        let mut results = Vec::new();
        while self.backend.in_flight() > 0 {
            if self.backend.submit(true).is_err() {
                // Cannot wait: leak the buffers rather than free memory the
                // kernel may still write.
                for (_, op) in self.buffers.drain() {
                    std::mem::forget(op.buffer);
                }
                return;
            }
            self.backend.reap(&mut results);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that serves nothing before `serve_from`, then everything it
    /// holds on each wait; it counts the most requests it held at once.
    struct CountingDevice {
        held: Vec<Request>,
        held_max: usize,
        serve_from: Instant,
        /// The address of each submitted request's buffer, in order.
        buffer_addresses: Vec<usize>,
    }

    impl CountingDevice {
        fn stalled_for(stall: Duration) -> Self {
            Self {
                held: Vec::new(),
                held_max: 0,
                serve_from: Instant::now() + stall,
                buffer_addresses: Vec::new(),
            }
        }
    }

    impl Executor for CountingDevice {
        fn submit(&mut self, request: Request) -> Result<(), CliError> {
            if let Some(buffer) = &request.buffer {
                self.buffer_addresses.push(buffer.as_ptr() as usize);
            }
            self.held.push(request);
            self.held_max = self.held_max.max(self.held.len());
            Ok(())
        }

        fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
            let now = Instant::now();
            if now < self.serve_from || self.held.is_empty() {
                let until = deadline.min(self.serve_from.max(now + Duration::from_micros(50)));
                std::thread::sleep(until.saturating_duration_since(now));
            }
            if Instant::now() >= self.serve_from {
                complete_whole(self.held.drain(..), Instant::now(), out);
            }
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.held.len()
        }
    }

    fn scenario(jobs: &str, duration_s: f64) -> Scenario {
        let text = format!(
            "duration_s = {duration_s}\n[[device]]\nname = \"d\"\nmodel = \"sata-ssd\"\n\
             [[class]]\nname = \"a\"\nshares = 1\n[[class]]\nname = \"b\"\nshares = 1\n{jobs}"
        );
        Scenario::from_toml(&text).unwrap()
    }

    fn plan(jobs: usize) -> Plan {
        Plan {
            files: vec![PathBuf::from("/nonexistent")],
            job_file: vec![0; jobs],
            job_base: vec![0; jobs],
            device_name: "mock".into(),
            alignment: None,
        }
    }

    fn drive(scenario: &Scenario, limits: InFlightLimits, device: &mut CountingDevice) -> Outcome {
        drive_with(scenario, &[], limits, device)
    }

    fn drive_with(
        scenario: &Scenario,
        options: &[JobOptions],
        limits: InFlightLimits,
        device: &mut CountingDevice,
    ) -> Outcome {
        try_drive_with(scenario, options, limits, device).unwrap()
    }

    fn try_drive_with(
        scenario: &Scenario,
        options: &[JobOptions],
        limits: InFlightLimits,
        device: &mut dyn Executor,
    ) -> Result<Outcome, CliError> {
        let plan = plan(scenario.jobs.len());
        Driver::new(scenario, &plan, Mode::KernelDirect, 1, options, limits)
            .and_then(|driver| driver.drive(device, &mut |_| {}))
    }

    #[test]
    fn a_writer_cycles_through_the_write_buffers_it_asks_for() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
             block_size = \"64k\"\nqueue_depth = 1\n",
            0.05,
        );
        let ring = JobOptions {
            write_buffer_bytes: 1 << 20,
            ..JobOptions::default()
        };
        let mut device = CountingDevice::stalled_for(Duration::ZERO);
        let outcome = drive_with(&scenario, &[ring], InFlightLimits::default(), &mut device);
        assert_eq!(outcome.buffers_allocated, 16);
        let addresses = &device.buffer_addresses;
        assert!(addresses.len() > 32, "{} writes", addresses.len());
        let first: std::collections::HashSet<usize> = addresses[..16].iter().copied().collect();
        assert_eq!(first.len(), 16, "the first 16 writes use 16 buffers");
        for (index, address) in addresses.iter().enumerate().skip(16) {
            assert_eq!(
                *address,
                addresses[index - 16],
                "write {index} reuses the oldest"
            );
        }

        let mut device = CountingDevice::stalled_for(Duration::ZERO);
        let outcome = drive(&scenario, InFlightLimits::default(), &mut device);
        assert_eq!(outcome.buffers_allocated, 1);
        assert!(device
            .buffer_addresses
            .windows(2)
            .all(|pair| pair[0] == pair[1]));
    }

    fn small_limits() -> InFlightLimits {
        InFlightLimits {
            job_requests_max: 64,
            ..InFlightLimits::default()
        }
    }

    #[test]
    fn open_loop_arrivals_past_the_limit_are_dropped_and_reported() {
        // Readers asking 100000 IOPS beside a closed-loop writer, on a device
        // that serves nothing until the arrivals are over.
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"randread\"\n\
             block_size = \"4k\"\nrate_iops = 100000.0\n\
             [[job]]\nclass = \"b\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
             block_size = \"128k\"\nqueue_depth = 2\n",
            0.2,
        );
        let mut device = CountingDevice::stalled_for(Duration::from_millis(200));
        let outcome = drive(&scenario, small_limits(), &mut device);
        assert!(device.held_max <= 64 + 2, "held {}", device.held_max);
        assert!(outcome.in_flight_peak <= 64 + 2);
        assert!(outcome.buffers_allocated <= 64 + 2);
        let [overload] = &outcome.overloads[..] else {
            panic!("one job overloaded: {:?}", outcome.overloads);
        };
        assert_eq!(overload.job, "job0");
        assert_eq!(overload.asked_iops, Some(100_000.0));
        let reads = outcome.report.class("a", "mock").unwrap();
        assert!(overload.dropped > 0);
        assert_eq!(overload.arrivals, reads.ops + overload.dropped, "none lost");
        assert_eq!(reads.submitted, reads.ops);
    }

    #[test]
    fn a_closed_loop_deeper_than_the_limit_runs_at_the_limit() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"randread\"\n\
             block_size = \"4k\"\nqueue_depth = 65536\nnumjobs = 16\n",
            0.05,
        );
        let mut device = CountingDevice::stalled_for(Duration::ZERO);
        let outcome = drive(&scenario, InFlightLimits::default(), &mut device);
        let limit = InFlightLimits::default().job_requests_max;
        assert!(device.held_max as u64 <= limit, "held {}", device.held_max);
        assert!(outcome.buffers_allocated <= limit);
        let [overload] = &outcome.overloads[..] else {
            panic!("one job limited: {:?}", outcome.overloads);
        };
        assert_eq!(overload.in_flight_limit, limit);
        assert!(overload.held_back > 0);
        let reads = &outcome.report.classes[0];
        assert!(reads.ops >= limit);
        assert_eq!(reads.ops, reads.submitted);
        assert!(
            reads.submitted < 65536 * 16,
            "held-back requests are not let out after the job's stop"
        );
    }

    /// The bytes a driver holds on the heap for its classes' measurements.
    fn class_heap_bytes(driver: &Driver) -> usize {
        let accumulators: usize = driver
            .accumulators
            .iter()
            .map(ClassAccumulator::heap_bytes)
            .sum();
        let directions: usize = driver
            .directions
            .iter()
            .flatten()
            .flatten()
            .map(|stats| {
                let histograms = [&stats.slat_ns, &stats.clat_ns, &stats.lat_ns];
                histograms
                    .iter()
                    .map(|histogram| histogram.distinct_values() * 8)
                    .sum::<usize>()
            })
            .sum();
        accumulators + directions
    }

    #[test]
    fn an_idle_class_costs_the_driver_a_few_bytes() {
        let classes = 2000;
        let mut text =
            String::from("duration_s = 1\n[[device]]\nname = \"d\"\nmodel = \"sata-ssd\"\n");
        for class in 0..classes {
            text += &format!(
                "[[class]]\nname = \"c{class}\"\nshares = 1\n[[job]]\nclass = \"c{class}\"\n\
                 device = \"d\"\npattern = \"randread\"\nblock_size = \"4k\"\n"
            );
        }
        let scenario = Scenario::from_toml(&text).unwrap();
        let plan = plan(classes);
        let mut driver = Driver::new(
            &scenario,
            &plan,
            Mode::KernelDirect,
            1,
            &[],
            InFlightLimits::default(),
        )
        .unwrap();
        let idle = class_heap_bytes(&driver) / classes;
        assert!(idle < 64, "{idle} bytes per idle class");
        // One completed read of 100 µs: the class's histograms cover that range only.
        let template = driver.workload.next_request(0, 0);
        let request = Pending {
            template,
            class: 0,
            submitted_ns: 1_000,
            offset_bytes: template.offset_bytes,
            length_bytes: 4096,
            measured: true,
            verify_expected: None,
        };
        driver.measure(&request, 100_000, 4096);
        let active = class_heap_bytes(&driver) - idle * classes;
        assert!(active < 300 << 10, "{active} bytes for one active class");
    }

    #[test]
    fn a_burst_larger_than_the_limit_is_fed_through_it_whole() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
             block_size = \"4k\"\nburst_bytes = \"16m\"\n",
            0.05,
        );
        let mut device = CountingDevice::stalled_for(Duration::ZERO);
        let outcome = drive(&scenario, small_limits(), &mut device);
        assert!(device.held_max <= 64, "held {}", device.held_max);
        assert_eq!(
            outcome.report.classes[0].ops, 4096,
            "every request of the burst"
        );
        assert_eq!(outcome.overloads[0].held_back, 4096 - 64);
    }
    /// Completes each of `requests` in full (a buffer's whole length; 0 for a
    /// sync) at `at`.
    fn complete_whole(
        requests: impl IntoIterator<Item = Request>,
        at: Instant,
        out: &mut Vec<Done>,
    ) {
        for request in requests {
            let bytes = request.buffer.as_ref().map_or(0, |buffer| buffer.len());
            out.push(Done {
                token: request.token,
                result: Ok(bytes),
                buffer: request.buffer,
                at,
            });
        }
    }

    /// A device that completes everything it holds in one wait, the last
    /// request of the batch with an error; it counts the submissions.
    struct FailLastDevice {
        held: Vec<Request>,
        submitted: usize,
    }

    impl Executor for FailLastDevice {
        fn submit(&mut self, request: Request) -> Result<(), CliError> {
            self.submitted += 1;
            self.held.push(request);
            Ok(())
        }

        fn wait(&mut self, _deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
            complete_whole(self.held.drain(..), Instant::now(), out);
            if let Some(last) = out.last_mut() {
                last.result = Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.held.len()
        }
    }

    #[test]
    fn a_closed_loop_sends_each_refill_before_it_looks_at_the_next_completion() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"randread\"\n\
             block_size = \"4k\"\nqueue_depth = 2\n",
            1.0,
        );
        let mut device = FailLastDevice {
            held: Vec::new(),
            submitted: 0,
        };
        let error = try_drive_with(&scenario, &[], InFlightLimits::default(), &mut device)
            .err()
            .expect("the error ends the run");
        assert!(error.to_string().contains("Input/output error"), "{error}");
        // Both requests completed in one wait; the first one's refill went
        // out before the second one's error was looked at.
        assert_eq!(device.submitted, 3);
    }

    /// A device that completes reads and writes on the next wait and syncs
    /// one per wait, in order; it counts the most syncs it held at once and
    /// fails once it holds more than `syncs_max` (a backlog without bound).
    struct SlowSyncDevice {
        data: Vec<Request>,
        syncs: VecDeque<Request>,
        syncs_held_max: usize,
        syncs_max: usize,
    }

    impl Executor for SlowSyncDevice {
        fn submit(&mut self, request: Request) -> Result<(), CliError> {
            if matches!(request.kind, RequestKind::Sync(_)) {
                self.syncs.push_back(request);
                self.syncs_held_max = self.syncs_held_max.max(self.syncs.len());
                if self.syncs.len() > self.syncs_max {
                    return Err(CliError::usage(format!("{} syncs held", self.syncs.len())));
                }
            } else {
                self.data.push(request);
            }
            Ok(())
        }

        fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
            let pause = Duration::from_micros(100);
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            let sync = self.syncs.pop_front();
            complete_whole(self.data.drain(..).chain(sync), Instant::now(), out);
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.data.len() + self.syncs.len()
        }
    }

    #[test]
    fn a_sync_takes_a_slot_of_its_jobs_queue_depth() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
             block_size = \"4k\"\nqueue_depth = 16\n",
            0.1,
        );
        let fsync_every_write = JobOptions {
            sync_every_writes: 1,
            ..JobOptions::default()
        };
        let mut device = SlowSyncDevice {
            data: Vec::new(),
            syncs: VecDeque::new(),
            syncs_held_max: 0,
            syncs_max: 64,
        };
        let plan = plan(1);
        let outcome = Driver::new(
            &scenario,
            &plan,
            Mode::KernelBuffered,
            1,
            &[fsync_every_write],
            InFlightLimits::default(),
        )
        .and_then(|driver| driver.drive(&mut device, &mut |_| {}))
        .unwrap();
        assert!(device.syncs_held_max <= 16, "{}", device.syncs_held_max);
        assert!(outcome.in_flight_peak <= 16, "{}", outcome.in_flight_peak);
        assert!(outcome.report.classes[0].ops > 16, "the writer ran");
        assert_eq!(device.in_flight(), 0, "the run drained");
    }

    /// A device that keeps one file in memory and does, on each wait, every
    /// request it holds in the order they came; `flip` flips a bit of every
    /// read's data.
    struct MemoryDevice {
        data: Vec<u8>,
        held: Vec<Request>,
        reads: u64,
        flip: bool,
    }

    impl Executor for MemoryDevice {
        fn submit(&mut self, request: Request) -> Result<(), CliError> {
            self.held.push(request);
            Ok(())
        }

        fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
            let pause = Duration::from_micros(50);
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            for mut request in self.held.drain(..) {
                let mut bytes = 0;
                if let Some(buffer) = &mut request.buffer {
                    let start = request.offset as usize;
                    let place = start..start + buffer.len();
                    match request.kind {
                        RequestKind::Write => self.data[place].copy_from_slice(buffer),
                        RequestKind::Read => {
                            buffer.copy_from_slice(&self.data[place]);
                            buffer[100] ^= u8::from(self.flip);
                            self.reads += 1;
                        }
                        RequestKind::Sync(_) => {}
                    }
                    bytes = buffer.len();
                }
                out.push(Done {
                    token: request.token,
                    result: Ok(bytes),
                    buffer: request.buffer,
                    at: Instant::now(),
                });
            }
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.held.len()
        }
    }

    #[test]
    fn verify_checks_only_reads_of_whole_blocks_no_write_touched_since() {
        // Writes of 4 and 8 KiB overwrite parts of each other's blocks, and
        // reads of both sizes run beside them, on the same 1 MiB region.
        let job = |pattern: &str| {
            format!(
                "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"{pattern}\"\n\
                 block_size = \"4k\"\nqueue_depth = 4\nsize = \"1m\"\n"
            )
        };
        let scenario = scenario(&format!("{}{}", job("randwrite"), job("randread")), 0.2);
        let verify = JobOptions {
            verify: true,
            shape: crate::bench::shape::Shape {
                block_sizes: crate::bench::shape::BlockSizes::Weighted(vec![
                    (4096, 50),
                    (8192, 50),
                ]),
                ..Default::default()
            },
            ..JobOptions::default()
        };
        let plan = plan(2);
        let run = |flip: bool| {
            let mut device = MemoryDevice {
                data: vec![0; 1 << 20],
                held: Vec::new(),
                reads: 0,
                flip,
            };
            let options = [verify.clone(), verify.clone()];
            let limits = InFlightLimits::default();
            let outcome = Driver::new(&scenario, &plan, Mode::KernelDirect, 1, &options, limits)
                .and_then(|driver| driver.drive(&mut device, &mut |_| {}));
            (outcome, device.reads)
        };
        let (outcome, reads) = run(false);
        let outcome = outcome.unwrap_or_else(|error| panic!("{error}"));
        assert!(reads > 1000, "{reads} reads");
        assert!(!outcome.written.is_empty());
        // A read of a block whose data is not what was written fails.
        let Err(error) = run(true).0 else {
            panic!("a corrupt block passed");
        };
        assert!(error.to_string().contains("verify:"), "{error}");
    }

    /// A backend that holds one pushed op at a time, refuses its first
    /// `refusals` submits, and completes what a submit let through.
    struct RefusingBackend {
        pushed: Option<Op>,
        submitted: Vec<u64>,
        refusals: u32,
    }

    struct NoWaker;

    impl tailguard::backend::EngineWaker for NoWaker {
        fn wake(&self) {}
    }

    impl Backend for RefusingBackend {
        fn kind(&self) -> tailguard::backend::BackendKind {
            tailguard::backend::BackendKind::Threads
        }

        unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
            if self.pushed.is_some() {
                return Err(op);
            }
            self.pushed = Some(op);
            Ok(())
        }

        fn submit(&mut self, _wait: bool) -> io::Result<()> {
            if self.refusals > 0 {
                self.refusals -= 1;
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            self.submitted
                .extend(self.pushed.take().map(|op| op.user_data));
            Ok(())
        }

        fn submit_wait_timeout(&mut self, _timeout: Duration) -> io::Result<()> {
            self.submit(true)
        }

        fn reap(&mut self, out: &mut Vec<backend::OpResult>) {
            out.extend(self.submitted.drain(..).map(|user_data| backend::OpResult {
                user_data,
                result: 0,
            }));
        }

        fn waker(&self) -> Arc<dyn tailguard::backend::EngineWaker> {
            Arc::new(NoWaker)
        }

        fn in_flight(&self) -> usize {
            usize::from(self.pushed.is_some()) + self.submitted.len()
        }
    }

    #[test]
    fn an_op_a_failed_submit_left_unpushed_goes_out_later() {
        let null = || std::fs::File::open("/dev/null").unwrap();
        let mut executor = BackendExecutor {
            backend: Box::new(RefusingBackend {
                pushed: None,
                submitted: Vec::new(),
                refusals: 1,
            }),
            alarm: Alarm::new(|| {}).unwrap(),
            backlog: VecDeque::new(),
            buffers: HashMap::new(),
            direct: false,
            files: vec![null()],
            read_files: vec![null()],
            read_direct: vec![false],
            results: Vec::new(),
        };
        for token in 0..2 {
            let sync = Request {
                token,
                class: 0,
                file: 0,
                kind: RequestKind::Sync(SyncKind::Fsync),
                offset: 0,
                buffer: None,
            };
            executor.submit(sync).unwrap();
        }
        let mut done = Vec::new();
        let soon = || Instant::now() + Duration::from_millis(1);
        assert!(
            executor.wait(soon(), &mut done).is_err(),
            "the refused submit"
        );
        for _ in 0..10 {
            if executor.in_flight() == 0 {
                break;
            }
            executor.wait(soon(), &mut done).unwrap();
        }
        let mut tokens: Vec<u64> = done.iter().map(|finished| finished.token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, [0, 1], "both ops completed");
        assert_eq!(executor.in_flight(), 0);
    }

    /// A device that completes reads and writes on the next wait and holds
    /// each sync for `sync_hold`; it notes when the first request came, how
    /// many writes it had done when each sync came, and when the last sync
    /// completed.
    struct HeldSyncDevice {
        data: Vec<Request>,
        syncs: Vec<(Request, Instant)>,
        sync_hold: Duration,
        first_submit: Option<Instant>,
        writes_done: u64,
        writes_before_syncs: Vec<u64>,
        last_sync_done: Option<Instant>,
    }

    impl Executor for HeldSyncDevice {
        fn submit(&mut self, request: Request) -> Result<(), CliError> {
            self.first_submit.get_or_insert_with(Instant::now);
            if matches!(request.kind, RequestKind::Sync(_)) {
                self.writes_before_syncs.push(self.writes_done);
                self.syncs.push((request, Instant::now() + self.sync_hold));
            } else {
                self.data.push(request);
            }
            Ok(())
        }

        fn wait(&mut self, deadline: Instant, out: &mut Vec<Done>) -> Result<(), CliError> {
            let pause = Duration::from_micros(100);
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
            let now = Instant::now();
            let (due, held) = std::mem::take(&mut self.syncs)
                .into_iter()
                .partition(|(_, until)| *until <= now);
            self.syncs = held;
            if !due.is_empty() {
                self.last_sync_done = Some(now);
            }
            self.writes_done += self.data.len() as u64;
            let syncs = due.into_iter().map(|(request, _)| request);
            complete_whole(self.data.drain(..).chain(syncs), now, out);
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.data.len() + self.syncs.len()
        }
    }

    #[test]
    fn a_bounded_jobs_time_runs_until_its_end_fsync_is_done() {
        let scenario = scenario(
            "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
             block_size = \"4k\"\nqueue_depth = 2\n",
            10.0,
        );
        let options = JobOptions {
            io_bytes_per_instance: Some(64 << 10),
            end_fsync: true,
            ..JobOptions::default()
        };
        let mut device = HeldSyncDevice {
            data: Vec::new(),
            syncs: Vec::new(),
            sync_hold: Duration::from_millis(50),
            first_submit: None,
            writes_done: 0,
            writes_before_syncs: Vec::new(),
            last_sync_done: None,
        };
        let plan = plan(1);
        let outcome = Driver::new(
            &scenario,
            &plan,
            Mode::KernelBuffered,
            1,
            &[options],
            InFlightLimits::default(),
        )
        .and_then(|driver| driver.drive(&mut device, &mut |_| {}))
        .unwrap();
        assert_eq!(
            device.writes_before_syncs,
            [16],
            "one sync, after every write"
        );
        let synced = device.last_sync_done.unwrap() - device.first_submit.unwrap();
        let class = &outcome.report.classes[0];
        assert_eq!(class.ops, 16);
        // The driver's clock starts before the first request, so the class's
        // time covers at least the first request to the sync's completion.
        assert!(
            class.last_completion_s >= synced.as_secs_f64() - 1e-6,
            "{} s, the sync done at {} s",
            class.last_completion_s,
            synced.as_secs_f64()
        );
        assert!(outcome.report.duration_s >= class.last_completion_s - 1e-6);
    }

    #[test]
    fn a_class_whose_jobs_pause_counts_its_worst_rate_only_while_they_run() {
        let reader = |start_s: f64, stop_s: f64| {
            format!(
                "[[job]]\nclass = \"a\"\ndevice = \"d\"\npattern = \"randread\"\n\
                 block_size = \"4k\"\nstart_s = {start_s}\nstop_s = {stop_s}\n"
            )
        };
        let writer = "[[job]]\nclass = \"b\"\ndevice = \"d\"\npattern = \"seqwrite\"\n\
                      block_size = \"1m\"\n";
        let pausing = scenario(
            &format!("{}{}{writer}", reader(0.0, 1.0), reader(2.0, 3.0)),
            3.0,
        );
        assert_eq!(
            job_spans(&pausing, 0, 0),
            [(0, 1_000_000_000), (2_000_000_000, 3_000_000_000)]
        );
        assert_eq!(job_spans(&pausing, 1, 0), [(0, 3_000_000_000)]);
        assert_eq!(
            job_spans(&pausing, 0, 200_000_000),
            [(200_000_000, 1_000_000_000), (2_000_000_000, 3_000_000_000)],
            "nothing before the ramp"
        );
        let back_to_back = scenario(&format!("{}{}", reader(0.0, 1.5), reader(1.0, 3.0)), 3.0);
        // Overlapping spans stay as they are here: the accumulator merges
        // them into one active window (tested with `ClassAccumulator`).
        assert_eq!(
            job_spans(&back_to_back, 0, 0),
            [(0, 1_500_000_000), (1_000_000_000, 3_000_000_000)]
        );
        // 1,000 reads per second while the readers run, none in the pause.
        let options = vec![JobOptions::default(); pausing.jobs.len()];
        let (mut rows, row_of, _) = accumulators(&pausing, "d", &options);
        let reads = &mut rows[row_of[0]];
        for millisecond in (0..3_000u64).filter(|ms| !(1_000..2_000).contains(ms)) {
            let at = millisecond * 1_000_000;
            reads.on_submit(at);
            reads.on_complete(at + 100_000, at, at, 4096);
        }
        assert_eq!(reads.finish().worst_500ms_iops, Some(1_000.0));
    }
}
