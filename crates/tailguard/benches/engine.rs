//! Engine benchmarks (a `harness = false` binary).
//!
//! ```text
//! cargo bench -p tailguard --bench engine -- nop [--secs 1] [--reps 3] [--depth 256]
//! cargo bench -p tailguard --bench engine -- nop-uring [--secs 1] [--depth 256]   # profiling
//! cargo bench -p tailguard --bench engine -- randread --file PATH --depth N [--secs 5] [--driver block-on|engine-thread|dedicated] [--submit each|per-turn]
//! cargo bench -p tailguard --bench engine -- randread-raw --file PATH --depth N [--secs 5] [--ring plain|coop|defer] [--submit each|batch] [--spin-ns 0]
//! ```
//!
//! Both modes drive their requests from one thread, as fio does, with one of two
//! drivers: `block-on` (the default) runs the driver loop inside
//! `Scheduler::block_on`, so the driving thread runs the engine itself whenever
//! it would otherwise wait (the way a blocking caller or `IoFuture::wait` uses
//! the library); `engine-thread` runs the same loop on a minimal executor that
//! parks the thread while pending, so the engine thread does all the engine work
//! and every completion is a cross-thread wake-up (the way a request awaited on
//! another async runtime, such as tokio, is served); `dedicated` is
//! `engine-thread` on a scheduler built with `waiters_run_engine(false)`, whose
//! ring keeps `SINGLE_ISSUER`/`DEFER_TASKRUN` (the previous design).
//!
//! `nop`: in one run, interleaved A B C A B C ..., (a) raw io_uring NOPs with the
//! `io-uring` crate (push 32, `submit_and_wait(32)`, drain), (b) `Scheduler::nop`
//! through the io_uring backend, (c) the same through the thread-pool backend.
//! The scheduler runs use one submitter thread that keeps `--depth` requests
//! outstanding (a sliding window: await the oldest, submit a new one), with the
//! `block-on` driver. Prints requests/s, process CPU seconds per wall second, requests per
//! CPU-second, and min/median/max of each and of the ratio to raw NOPs.
//!
//! `randread`: 4 KiB reads at random 4 KiB-aligned offsets of `--file` (O_DIRECT),
//! one submitter thread keeping `--depth` requests outstanding through one class,
//! for `--secs`. Latency is measured by the driver from just before `read_at` to
//! the moment the driver sees the completion (a waker per slot tells it which
//! requests finished, so out-of-order completions are not delayed behind older
//! ones; it resubmits as soon as any has finished, like fio's default
//! `iodepth_batch_complete_min=1`). Prints one `RESULT` line with IOPS, driver p50/p99 and the engine's own
//! `latency_ns` p50/p99 for the class.
//!
//! `randread-raw`: the same reads with the `io-uring` crate alone, no scheduler:
//! the floor any library on this ring can reach, to tell the engine's own cost
//! from the ring's. One read submitted per system call (as fio does), waiting
//! for one completion when nothing else is to be done (`--submit batch`: the
//! resubmissions of one wake-up go in one system call; `--spin-ns N`: N ns of
//! busy work per completion, standing in for a library's per-request cost, to
//! see how the device answers a slower turnaround). `--ring` picks the setup
//! flags: `plain` (none: the ring tailguard's waiters share), `coop`
//! (`COOP_TASKRUN`), `defer` (`SINGLE_ISSUER | DEFER_TASKRUN | COOP_TASKRUN`, what
//! fio 3.33 asks for, and the ring of the `dedicated` driver).

use hdrhistogram::Histogram;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tailguard::{AlignedBuffer, BackendChoice, IoClass, IoFuture, Profile, Scheduler};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; ignore it.
    let args: Vec<String> = args.into_iter().filter(|a| a != "--bench").collect();
    let mode = args.first().map(String::as_str).unwrap_or("nop");
    let opt = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let num = |name: &str, default: f64| -> f64 {
        opt(name).map_or(default, |v| v.parse().expect("a number"))
    };
    match mode {
        "nop" => nop_mode(
            num("--secs", 1.0),
            num("--reps", 3.0) as usize,
            num("--depth", 256.0) as usize,
        ),
        // Only the io_uring scheduler run, for profiling (`perf record`).
        "nop-uring" => {
            let s = scheduler_nops(
                BackendChoice::IoUring,
                num("--secs", 1.0),
                num("--depth", 256.0) as usize,
            );
            println!(
                "RESULT mode=nop-uring rate={:.0} cpu={:.3}",
                s.rate, s.cpu_per_wall
            );
        }
        "randread" => {
            let file = opt("--file").expect("--file PATH");
            let driver = Driver::parse(opt("--driver").as_deref().unwrap_or("block-on"));
            let eager_submit = match opt("--submit").as_deref().unwrap_or("each") {
                "each" => true,
                "per-turn" => false,
                other => panic!("unknown --submit {other}; use each or per-turn"),
            };
            randread_mode(
                &file,
                num("--depth", 1.0) as usize,
                num("--secs", 5.0),
                driver,
                eager_submit,
            )
            .expect("randread");
        }
        "randread-raw" => raw_randread_mode(
            &opt("--file").expect("--file PATH"),
            num("--depth", 1.0) as usize,
            num("--secs", 5.0),
            &opt("--ring").unwrap_or_else(|| "plain".into()),
            match opt("--submit").as_deref().unwrap_or("each") {
                "each" => false,
                "batch" => true,
                other => panic!("unknown --submit {other}; use each or batch"),
            },
            num("--spin-ns", 0.0) as u64,
        )
        .expect("randread-raw"),
        other => {
            eprintln!("unknown mode {other}; use `nop`, `randread` or `randread-raw`");
            std::process::exit(2);
        }
    }
}

/// Who runs the engine while the driver waits; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Driver {
    BlockOn,
    EngineThread,
    Dedicated,
}

impl Driver {
    fn parse(name: &str) -> Self {
        match name {
            "block-on" => Self::BlockOn,
            "engine-thread" => Self::EngineThread,
            "dedicated" => Self::Dedicated,
            other => panic!("unknown driver {other}; use block-on, engine-thread or dedicated"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::BlockOn => "block-on",
            Self::EngineThread => "engine-thread",
            Self::Dedicated => "dedicated",
        }
    }

    /// Runs `future` to completion on this thread.
    fn run<F: Future>(self, scheduler: &Scheduler, future: F) -> F::Output {
        match self {
            Self::BlockOn => scheduler.block_on(future),
            Self::EngineThread | Self::Dedicated => park_on(future),
        }
    }
}

/// Unparks the driving thread (`Thread::unpark` makes no system call unless
/// the thread is parked).
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor: poll, park the thread while pending.
fn park_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        std::thread::park();
    }
}

/// User + system CPU seconds of the whole process (all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into a zeroed local.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Wall-clock and process CPU time since a timed run started, and how long
/// the run is to last.
struct Clock {
    length: Duration,
    cpu_start: f64,
    start: Instant,
}

impl Clock {
    /// Starts a run of `secs` seconds.
    fn start(secs: f64) -> Self {
        let length = Duration::from_secs_f64(secs);
        let cpu_start = cpu_seconds();
        Self {
            length,
            cpu_start,
            start: Instant::now(),
        }
    }

    /// Whether the run's time is up.
    fn expired(&self) -> bool {
        self.start.elapsed() >= self.length
    }

    /// Wall seconds since the start, and process CPU seconds per wall second.
    fn stop(&self) -> (f64, f64) {
        let wall = self.start.elapsed().as_secs_f64();
        (wall, (cpu_seconds() - self.cpu_start) / wall)
    }
}

struct Sample {
    rate: f64,
    cpu_per_wall: f64,
}

impl Sample {
    /// `done` operations over the run `clock` timed.
    fn of(done: u64, clock: &Clock) -> Self {
        let (wall, cpu_per_wall) = clock.stop();
        Self {
            rate: done as f64 / wall,
            cpu_per_wall,
        }
    }
}

fn measure(secs: f64, mut body: impl FnMut() -> u64) -> Sample {
    let clock = Clock::start(secs);
    let mut done = 0u64;
    while !clock.expired() {
        done += body();
    }
    Sample::of(done, &clock)
}

/// Raw io_uring NOPs: batches of 32, `submit_and_wait(32)`, drain.
fn raw_nops(secs: f64) -> Sample {
    let mut ring = io_uring::IoUring::new(64).expect("io_uring");
    let nop = io_uring::opcode::Nop::new().build().user_data(1);
    measure(secs, || {
        let mut done = 0;
        for _ in 0..64 {
            {
                let mut sq = ring.submission();
                for _ in 0..32 {
                    // SAFETY: a NOP references no memory.
                    unsafe { sq.push(&nop).expect("room for 32") };
                }
            }
            ring.submit_and_wait(32).expect("submit");
            done += ring.completion().count() as u64;
        }
        done
    })
}

/// `Scheduler::nop` with `depth` outstanding from this one thread, submitted
/// once per engine turn (`eager_submit(false)`: the issue's goal is the rate
/// "with batching"; per-request submission costs a system call per NOP).
fn scheduler_nops(choice: BackendChoice, secs: f64, depth: usize) -> Sample {
    let scheduler = Scheduler::builder()
        .backend(choice)
        .ring_depth(256)
        .eager_submit(false)
        .build()
        .expect("scheduler");
    let class = scheduler.add_class("nop", 100).expect("class");
    let sample = scheduler.block_on(async {
        let mut window: VecDeque<IoFuture<io::Result<()>>> = VecDeque::with_capacity(depth);
        for _ in 0..depth {
            window.push_back(scheduler.nop(&class));
        }
        let clock = Clock::start(secs);
        let mut done = 0u64;
        while !clock.expired() {
            for _ in 0..1024 {
                let oldest = window.pop_front().expect("window is full");
                oldest.await.expect("nop");
                window.push_back(scheduler.nop(&class));
            }
            done += 1024;
        }
        let sample = Sample::of(done, &clock);
        for future in window.drain(..) {
            future.await.expect("nop");
        }
        sample
    });
    scheduler.shutdown();
    sample
}

fn stats3(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    (
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    )
}

fn nop_mode(secs: f64, reps: usize, depth: usize) {
    println!(
        "nop: {reps} interleaved repetitions of raw / uring / threads, {secs} s each, \
         scheduler depth {depth}, {} CPUs online",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut raw = Vec::new();
    let mut uring = Vec::new();
    let mut threads = Vec::new();
    // Warm-up (not recorded).
    let _ = raw_nops(0.2);
    let _ = scheduler_nops(BackendChoice::IoUring, 0.2, depth);
    for rep in 0..reps {
        let r = raw_nops(secs);
        let u = scheduler_nops(BackendChoice::IoUring, secs, depth);
        let t = scheduler_nops(BackendChoice::Threads, secs, depth);
        print_nop_rep(rep, &r, &u, &t);
        raw.push(r);
        uring.push(u);
        threads.push(t);
    }
    print_nop_summary(reps, &raw, &uring, &threads);
}

/// One repetition's line and `RESULT` line of `nop`.
fn print_nop_rep(rep: usize, r: &Sample, u: &Sample, t: &Sample) {
    println!(
        "rep {rep}: raw {:>12.0}/s (cpu {:.2})  uring {:>10.0}/s (cpu {:.2}, {:>10.0}/cpu-s, {:.4} of raw)  \
         threads {:>10.0}/s (cpu {:.2}, {:.4} of raw)",
        r.rate,
        r.cpu_per_wall,
        u.rate,
        u.cpu_per_wall,
        u.rate / u.cpu_per_wall,
        u.rate / r.rate,
        t.rate,
        t.cpu_per_wall,
        t.rate / r.rate
    );
    println!(
        "RESULT mode=nop rep={rep} raw={:.0} uring={:.0} threads={:.0} uring_cpu={:.3} threads_cpu={:.3}",
        r.rate, u.rate, t.rate, u.cpu_per_wall, t.cpu_per_wall
    );
}

/// The min/median/max lines of `nop` over its repetitions.
fn print_nop_summary(reps: usize, raw: &[Sample], uring: &[Sample], threads: &[Sample]) {
    let line = |name: &str, mut v: Vec<f64>| {
        let (lo, mid, hi) = stats3(&mut v);
        println!("{name:<34} min {lo:>12.4} median {mid:>12.4} max {hi:>12.4}");
    };
    let of_raw = |samples: &[Sample]| -> Vec<f64> {
        samples
            .iter()
            .zip(raw)
            .map(|(s, r)| s.rate / r.rate)
            .collect()
    };
    println!("summary over {reps} repetitions:");
    line("raw NOPs/s", raw.iter().map(|s| s.rate).collect());
    line(
        "scheduler io_uring nops/s",
        uring.iter().map(|s| s.rate).collect(),
    );
    line(
        "scheduler threads nops/s",
        threads.iter().map(|s| s.rate).collect(),
    );
    line("io_uring / raw (same rep)", of_raw(uring));
    line("threads / raw (same rep)", of_raw(threads));
    line(
        "io_uring CPU s per wall s",
        uring.iter().map(|s| s.cpu_per_wall).collect(),
    );
    line(
        "io_uring nops per CPU-second",
        uring.iter().map(|s| s.rate / s.cpu_per_wall).collect(),
    );
    line(
        "threads CPU s per wall s",
        threads.iter().map(|s| s.cpu_per_wall).collect(),
    );
}

/// Which slots have completed (filled by their wakers), and the driver's waker
/// while it waits for one.
#[derive(Default)]
struct Ready {
    slots: Mutex<(Vec<usize>, Option<Waker>)>,
}

impl Ready {
    /// Resolves with every slot completed so far (at least one).
    fn batch<'a>(&'a self, out: &'a mut Vec<usize>) -> impl Future<Output = ()> + 'a {
        std::future::poll_fn(move |context| {
            let mut slots = self.slots.lock().expect("ready lock");
            if slots.0.is_empty() {
                slots.1 = Some(context.waker().clone());
                return Poll::Pending;
            }
            std::mem::swap(&mut slots.0, out);
            Poll::Ready(())
        })
    }
}

struct SlotWaker {
    slot: usize,
    ready: Arc<Ready>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let waiter = {
            let mut slots = self.ready.slots.lock().expect("ready lock");
            slots.0.push(self.slot);
            slots.1.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The size of every read of `randread` and `randread-raw`.
const BLOCK: u64 = 4096;

/// A latency histogram from 1 ns to 60 s, 3 significant digits.
fn latency_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

/// What one run of reads measured.
struct ReadRun {
    depth: usize,
    histogram: Histogram<u64>,
    completed: u64,
    errors: u64,
    wall_s: f64,
    cpu_per_wall: f64,
}

impl ReadRun {
    /// Prints the run's `RESULT` line: `engine` holds the mode's engine-side
    /// figures and `settings` its settings, each as `key=value` pairs.
    fn print(&self, mode: &str, engine: &str, settings: &str) {
        let us = |ns: u64| ns as f64 / 1000.0;
        println!(
            "RESULT mode={mode} depth={} iops={:.0} p50_us={:.1} p99_us={:.1} {engine} \
             ops={} errors={} wall_s={:.2} cpu={:.3} {settings}",
            self.depth,
            self.completed as f64 / self.wall_s,
            us(self.histogram.value_at_quantile(0.5)),
            us(self.histogram.value_at_quantile(0.99)),
            self.completed,
            self.errors,
            self.wall_s,
            self.cpu_per_wall,
        );
    }
}

/// The scheduler `randread` measures: io_uring, with a profile that cannot
/// throttle the device (1 M read IOPS, 4 GB/s, a 10 ms latency target, 1 MiB
/// pieces).
fn randread_scheduler(driver: Driver, eager_submit: bool) -> io::Result<Scheduler> {
    let profile = Profile {
        read_iops: 1e6,
        write_iops: 1e6,
        read_bandwidth: 4e9,
        write_bandwidth: 4e9,
        max_request_bytes: 1 << 20,
        latency_target_us: 10_000,
    };
    Scheduler::builder()
        .backend(BackendChoice::IoUring)
        .ring_depth(256)
        .default_profile(profile)
        .waiters_run_engine(driver != Driver::Dedicated)
        .eager_submit(eager_submit)
        .build()
}

/// The reads of `randread`, one slot per outstanding request: each slot has its
/// own buffer and waker, which reports the slot to `ready` when it completes.
struct ReadSlots<'a> {
    file: &'a tailguard::File,
    class: &'a IoClass,
    blocks: u64,
    rng: Rng,
    ready: Arc<Ready>,
    wakers: Vec<Waker>,
    in_flight: Vec<Option<(IoFuture<tailguard::BufResult>, Instant)>>,
    spare: Vec<Option<AlignedBuffer>>,
    histogram: Histogram<u64>,
    completed: u64,
    errors: u64,
}

impl<'a> ReadSlots<'a> {
    fn new(file: &'a tailguard::File, class: &'a IoClass, depth: usize, blocks: u64) -> Self {
        let alignment = (file.alignment().memory_bytes as usize).max(4096);
        let ready = Arc::new(Ready::default());
        let wakers = (0..depth)
            .map(|slot| {
                let ready = ready.clone();
                Waker::from(Arc::new(SlotWaker { slot, ready }))
            })
            .collect();
        Self {
            file,
            class,
            blocks,
            rng: Rng(0x9E37_79B9_7F4A_7C15 ^ depth as u64),
            ready,
            wakers,
            in_flight: (0..depth).map(|_| None).collect(),
            spare: (0..depth)
                .map(|_| Some(AlignedBuffer::new(BLOCK as usize, alignment).expect("buffer")))
                .collect(),
            histogram: latency_histogram(),
            completed: 0,
            errors: 0,
        }
    }

    /// Starts a read at a random block in free `slot`; returns whether it is in
    /// flight (false: it was answered at once and the slot is free again).
    fn start(&mut self, slot: usize) -> bool {
        let buffer = self.spare[slot].take().expect("a free slot has its buffer");
        let offset = (self.rng.next() % self.blocks) * BLOCK;
        let submitted = Instant::now();
        let future = self.file.read_at(self.class, buffer, offset);
        self.poll(slot, future, submitted)
    }

    /// Polls `slot`'s read: a finished one is recorded and frees the slot
    /// (false), a pending one stays in flight (true).
    fn poll(
        &mut self,
        slot: usize,
        mut future: IoFuture<tailguard::BufResult>,
        submitted: Instant,
    ) -> bool {
        let mut context = Context::from_waker(&self.wakers[slot]);
        match std::pin::Pin::new(&mut future).poll(&mut context) {
            Poll::Ready((result, buffer)) => {
                let latency_ns = submitted.elapsed().as_nanos() as u64;
                self.histogram.saturating_record(latency_ns);
                self.completed += 1;
                if let Err(error) = &result {
                    if self.errors == 0 {
                        eprintln!("read error: {error}");
                    }
                    self.errors += 1;
                }
                self.spare[slot] = Some(buffer);
                false
            }
            Poll::Pending => {
                self.in_flight[slot] = Some((future, submitted));
                true
            }
        }
    }
}

/// Keeps every slot busy until `clock` expires, then waits for the reads in
/// flight. A slot is refilled as soon as its read completes.
async fn drive_reads(slots: &mut ReadSlots<'_>, clock: &Clock) {
    let depth = slots.wakers.len();
    let mut todo: Vec<usize> = (0..depth).collect();
    let mut batch = Vec::with_capacity(depth);
    let mut stopping = false;
    let mut outstanding = 0usize;
    loop {
        // Submit a new read in each free slot (or, if the future is ready at
        // once, account for it and go round again).
        while let Some(slot) = todo.pop() {
            if stopping {
                continue;
            }
            if slots.start(slot) {
                outstanding += 1;
            } else {
                todo.push(slot);
                // Answered at once (refused): this loop alone turns, so it
                // looks at the clock itself.
                stopping = clock.expired();
            }
        }
        if outstanding == 0 {
            break;
        }
        let ready = slots.ready.clone();
        ready.batch(&mut batch).await;
        for slot in batch.drain(..) {
            let Some((future, submitted)) = slots.in_flight[slot].take() else {
                continue; // a stale wake
            };
            if !slots.poll(slot, future, submitted) {
                outstanding -= 1;
                todo.push(slot);
            }
        }
        if !stopping && clock.expired() {
            stopping = true;
        }
    }
}

fn randread_mode(
    path: &str,
    depth: usize,
    secs: f64,
    driver: Driver,
    eager_submit: bool,
) -> io::Result<()> {
    let scheduler = randread_scheduler(driver, eager_submit)?;
    let class = scheduler.add_class("reads", 100)?;
    let file = tailguard::OpenOptions::new()
        .read(true)
        .open(&scheduler, path)?;
    let blocks = std::fs::metadata(path)?.len() / BLOCK;
    assert!(blocks > 0, "the file is empty");
    let mut slots = ReadSlots::new(&file, &class, depth, blocks);
    let clock = Clock::start(secs);
    driver.run(&scheduler, drive_reads(&mut slots, &clock));
    let (wall_s, cpu_per_wall) = clock.stop();
    let stats = scheduler.stats()?;
    let class_stats = stats
        .classes
        .iter()
        .find(|c| c.name == "reads")
        .expect("the class");
    let us = |ns: u64| ns as f64 / 1000.0;
    let engine = format!(
        "engine_p50_us={:.1} engine_p99_us={:.1} device_p50_us={:.1} queue_wait_p50_us={:.1}",
        us(class_stats.latency_ns.value_at_quantile(0.5)),
        us(class_stats.latency_ns.value_at_quantile(0.99)),
        us(class_stats.device_time_ns.value_at_quantile(0.5)),
        us(class_stats.queue_wait_ns.value_at_quantile(0.5)),
    );
    let settings = format!("backend={:?} driver={}", scheduler.backend(), driver.name());
    let run = ReadRun {
        depth,
        histogram: slots.histogram,
        completed: slots.completed,
        errors: slots.errors,
        wall_s,
        cpu_per_wall,
    };
    run.print("randread", &engine, &settings);
    scheduler.shutdown();
    Ok(())
}

/// A ring with the setup flags `--ring` names; see the module docs.
fn raw_ring(ring_flags: &str) -> io::Result<io_uring::IoUring> {
    let mut builder = io_uring::IoUring::builder();
    match ring_flags {
        "plain" => {}
        "coop" => {
            builder.setup_coop_taskrun();
        }
        "defer" => {
            builder
                .setup_coop_taskrun()
                .setup_single_issuer()
                .setup_defer_taskrun();
        }
        other => panic!("unknown --ring {other}; use plain, coop or defer"),
    }
    builder.build(256)
}

/// Busy work for `ns` nanoseconds (nothing for 0).
fn spin(ns: u64) {
    if ns > 0 {
        let spin_start = Instant::now();
        while (spin_start.elapsed().as_nanos() as u64) < ns {
            std::hint::spin_loop();
        }
    }
}

/// The reads of `randread-raw`: a ring, the O_DIRECT file it reads and one
/// buffer per slot. The ring is dropped first, so no read outlives its buffer.
struct RawReads {
    ring: io_uring::IoUring,
    buffers: Vec<AlignedBuffer>,
    started: Vec<Instant>,
    rng: Rng,
    blocks: u64,
    file: std::fs::File,
}

impl RawReads {
    fn new(path: &str, ring_flags: &str, depth: usize) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let ring = raw_ring(ring_flags)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let blocks = file.metadata()?.len() / BLOCK;
        assert!(blocks > 0, "the file is empty");
        Ok(Self {
            ring,
            buffers: (0..depth)
                .map(|_| AlignedBuffer::new(BLOCK as usize, 4096).expect("buffer"))
                .collect(),
            started: vec![Instant::now(); depth],
            rng: Rng(0x9E37_79B9_7F4A_7C15 ^ depth as u64),
            blocks,
            file,
        })
    }

    /// Queues a read of a random block into `slot`'s buffer; with `submit`,
    /// hands the queue to the kernel, waiting for one completion if `wait`.
    fn push(&mut self, slot: usize, submit: bool, wait: bool) -> io::Result<()> {
        use std::os::unix::io::AsRawFd;
        let fd = io_uring::types::Fd(self.file.as_raw_fd());
        let buffer = self.buffers[slot].as_mut_ptr();
        let read = io_uring::opcode::Read::new(fd, buffer, BLOCK as u32)
            .offset((self.rng.next() % self.blocks) * BLOCK)
            .build()
            .user_data(slot as u64);
        self.started[slot] = Instant::now();
        // SAFETY: the buffer lives in `self.buffers`, which outlives the ring
        // (dropped first); each slot has one read at a time.
        unsafe {
            self.ring
                .submission()
                .push(&read)
                .expect("room: one per slot")
        };
        if submit {
            self.ring.submit_and_wait(usize::from(wait))?;
        }
        Ok(())
    }
}

/// `randread-raw`: see the module docs.
fn raw_randread_mode(
    path: &str,
    depth: usize,
    secs: f64,
    ring_flags: &str,
    batch: bool,
    spin_ns: u64,
) -> io::Result<()> {
    let mut reads = RawReads::new(path, ring_flags, depth)?;
    let mut histogram = latency_histogram();
    let (mut completed, mut errors, mut outstanding) = (0u64, 0u64, 0usize);
    let clock = Clock::start(secs);
    for slot in 0..depth {
        reads.push(slot, true, false)?;
        outstanding += 1;
    }
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(depth);
    while outstanding > 0 {
        if reads.ring.completion().is_empty() {
            reads.ring.submit_and_wait(1)?;
        }
        let completions = reads.ring.completion();
        done.extend(completions.map(|c| (c.user_data() as usize, c.result())));
        let stopping = clock.expired();
        let count = done.len();
        for (index, (slot, result)) in done.drain(..).enumerate() {
            histogram.saturating_record(reads.started[slot].elapsed().as_nanos() as u64);
            spin(spin_ns);
            outstanding -= 1;
            completed += 1;
            errors += u64::from(result != BLOCK as i32);
            if !stopping {
                // The last resubmission waits for the next completion in the
                // same system call, as the engine's turn does.
                let last = index + 1 == count;
                reads.push(slot, last || !batch, last)?;
                outstanding += 1;
            }
        }
    }
    let (wall_s, cpu_per_wall) = clock.stop();
    let run = ReadRun {
        depth,
        histogram,
        completed,
        errors,
        wall_s,
        cpu_per_wall,
    };
    let settings = format!("ring={ring_flags} batch={batch} spin_ns={spin_ns}");
    run.print("randread-raw", "engine_p50_us=0", &settings);
    Ok(())
}
