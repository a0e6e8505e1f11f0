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

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tailguard::{AlignedBuffer, BackendChoice, IoFuture, Profile, Scheduler};

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

struct Sample {
    rate: f64,
    cpu_per_wall: f64,
}

fn measure(secs: f64, mut body: impl FnMut() -> u64) -> Sample {
    let deadline = Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let mut done = 0u64;
    while start.elapsed() < deadline {
        done += body();
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    Sample {
        rate: done as f64 / wall,
        cpu_per_wall: cpu / wall,
    }
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
        let deadline = Duration::from_secs_f64(secs);
        let cpu0 = cpu_seconds();
        let start = Instant::now();
        let mut done = 0u64;
        while start.elapsed() < deadline {
            for _ in 0..1024 {
                let oldest = window.pop_front().expect("window is full");
                oldest.await.expect("nop");
                window.push_back(scheduler.nop(&class));
            }
            done += 1024;
        }
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        for future in window.drain(..) {
            future.await.expect("nop");
        }
        Sample {
            rate: done as f64 / wall,
            cpu_per_wall: cpu / wall,
        }
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
        raw.push(r);
        uring.push(u);
        threads.push(t);
    }
    let line = |name: &str, mut v: Vec<f64>| {
        let (lo, mid, hi) = stats3(&mut v);
        println!("{name:<34} min {lo:>12.4} median {mid:>12.4} max {hi:>12.4}");
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
    line(
        "io_uring / raw (same rep)",
        uring
            .iter()
            .zip(&raw)
            .map(|(u, r)| u.rate / r.rate)
            .collect(),
    );
    line(
        "threads / raw (same rep)",
        threads
            .iter()
            .zip(&raw)
            .map(|(t, r)| t.rate / r.rate)
            .collect(),
    );
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

fn randread_mode(
    path: &str,
    depth: usize,
    secs: f64,
    driver: Driver,
    eager_submit: bool,
) -> io::Result<()> {
    const BLOCK: u64 = 4096;
    // A profile that cannot throttle this device: 1 M read IOPS, 4 GB/s, a 10 ms
    // latency target, 1 MiB pieces.
    let profile = Profile {
        read_iops: 1e6,
        write_iops: 1e6,
        read_bandwidth: 4e9,
        write_bandwidth: 4e9,
        max_request_bytes: 1 << 20,
        latency_target_us: 10_000,
    };
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::IoUring)
        .ring_depth(256)
        .default_profile(profile)
        .waiters_run_engine(driver != Driver::Dedicated)
        .eager_submit(eager_submit)
        .build()?;
    let class = scheduler.add_class("reads", 100)?;
    let file = tailguard::OpenOptions::new()
        .read(true)
        .open(&scheduler, path)?;
    let blocks = std::fs::metadata(path)?.len() / BLOCK;
    assert!(blocks > 0, "the file is empty");
    let alignment = (file.alignment().memory_bytes as usize).max(4096);
    let ready = Arc::new(Ready::default());
    let wakers: Vec<Waker> = (0..depth)
        .map(|slot| {
            Waker::from(Arc::new(SlotWaker {
                slot,
                ready: ready.clone(),
            }))
        })
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ depth as u64);
    let mut histogram =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    let mut inflight: Vec<Option<(IoFuture<tailguard::BufResult>, Instant)>> =
        (0..depth).map(|_| None).collect();
    let mut spare: Vec<Option<AlignedBuffer>> = (0..depth)
        .map(|_| Some(AlignedBuffer::new(BLOCK as usize, alignment).expect("buffer")))
        .collect();
    let mut completed = 0u64;
    let mut errors = 0u64;
    let deadline = Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    driver.run(&scheduler, async {
        let mut todo: Vec<usize> = (0..depth).collect();
        let mut batch = Vec::with_capacity(depth);
        let mut stopping = false;
        let mut outstanding = 0usize;
        loop {
            // Submit a new read in each free slot (or, if the future is ready
            // at once, account for it and go round again).
            while let Some(slot) = todo.pop() {
                if stopping {
                    continue;
                }
                let buffer = spare[slot].take().expect("a free slot has its buffer");
                let offset = (rng.next() % blocks) * BLOCK;
                let submitted = Instant::now();
                let mut future = file.read_at(&class, buffer, offset);
                let mut context = Context::from_waker(&wakers[slot]);
                match std::pin::Pin::new(&mut future).poll(&mut context) {
                    Poll::Ready((result, buffer)) => {
                        histogram.saturating_record(submitted.elapsed().as_nanos() as u64);
                        completed += 1;
                        errors += u64::from(result.is_err());
                        spare[slot] = Some(buffer);
                        todo.push(slot);
                        // Answered at once (refused): this loop alone turns, so
                        // it looks at the clock itself.
                        stopping = start.elapsed() >= deadline;
                    }
                    Poll::Pending => {
                        inflight[slot] = Some((future, submitted));
                        outstanding += 1;
                    }
                }
            }
            if outstanding == 0 {
                break;
            }
            ready.batch(&mut batch).await;
            for slot in batch.drain(..) {
                let Some((mut future, submitted)) = inflight[slot].take() else {
                    continue; // a stale wake
                };
                let mut context = Context::from_waker(&wakers[slot]);
                match std::pin::Pin::new(&mut future).poll(&mut context) {
                    Poll::Ready((result, buffer)) => {
                        histogram.saturating_record(submitted.elapsed().as_nanos() as u64);
                        outstanding -= 1;
                        completed += 1;
                        if let Err(error) = &result {
                            if errors == 0 {
                                eprintln!("read error: {error}");
                            }
                            errors += 1;
                        }
                        spare[slot] = Some(buffer);
                        todo.push(slot);
                    }
                    Poll::Pending => inflight[slot] = Some((future, submitted)),
                }
            }
            if !stopping && start.elapsed() >= deadline {
                stopping = true;
            }
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu = (cpu_seconds() - cpu0) / wall;
    let stats = scheduler.stats()?;
    let class_stats = stats
        .classes
        .iter()
        .find(|c| c.name == "reads")
        .expect("the class");
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "RESULT mode=randread depth={depth} iops={:.0} p50_us={:.1} p99_us={:.1} engine_p50_us={:.1} \
         engine_p99_us={:.1} device_p50_us={:.1} queue_wait_p50_us={:.1} ops={completed} errors={errors} \
         wall_s={wall:.2} cpu={cpu:.3} backend={:?} driver={}",
        completed as f64 / wall,
        us(histogram.value_at_quantile(0.5)),
        us(histogram.value_at_quantile(0.99)),
        us(class_stats.latency_ns.value_at_quantile(0.5)),
        us(class_stats.latency_ns.value_at_quantile(0.99)),
        us(class_stats.device_time_ns.value_at_quantile(0.5)),
        us(class_stats.queue_wait_ns.value_at_quantile(0.5)),
        scheduler.backend(),
        driver.name(),
    );
    scheduler.shutdown();
    Ok(())
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
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    const BLOCK: u64 = 4096;
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
    let mut ring = builder.build(256)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let fd = io_uring::types::Fd(file.as_raw_fd());
    let blocks = file.metadata()?.len() / BLOCK;
    assert!(blocks > 0, "the file is empty");
    let mut buffers: Vec<AlignedBuffer> = (0..depth)
        .map(|_| AlignedBuffer::new(BLOCK as usize, 4096).expect("buffer"))
        .collect();
    let mut started: Vec<Instant> = vec![Instant::now(); depth];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ depth as u64);
    let mut histogram =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    let (mut completed, mut errors, mut outstanding) = (0u64, 0u64, 0usize);
    let deadline = Duration::from_secs_f64(secs);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let mut submit_read = |ring: &mut io_uring::IoUring,
                           started: &mut [Instant],
                           slot: usize,
                           submit: bool,
                           wait: bool|
     -> io::Result<()> {
        let read = io_uring::opcode::Read::new(fd, buffers[slot].as_mut_ptr(), BLOCK as u32)
            .offset((rng.next() % blocks) * BLOCK)
            .build()
            .user_data(slot as u64);
        started[slot] = Instant::now();
        // SAFETY: the buffer lives in `buffers` until the end of this function,
        // which reaps every read before returning; each slot has one read at a time.
        unsafe { ring.submission().push(&read).expect("room: one per slot") };
        if submit {
            ring.submit_and_wait(usize::from(wait))?;
        }
        Ok(())
    };
    for slot in 0..depth {
        submit_read(&mut ring, &mut started, slot, true, false)?;
        outstanding += 1;
    }
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(depth);
    while outstanding > 0 {
        if ring.completion().is_empty() {
            ring.submit_and_wait(1)?;
        }
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        let stopping = start.elapsed() >= deadline;
        let count = done.len();
        for (index, (slot, result)) in done.drain(..).enumerate() {
            histogram.saturating_record(started[slot].elapsed().as_nanos() as u64);
            if spin_ns > 0 {
                let spin_start = Instant::now();
                while (spin_start.elapsed().as_nanos() as u64) < spin_ns {
                    std::hint::spin_loop();
                }
            }
            outstanding -= 1;
            completed += 1;
            errors += u64::from(result != BLOCK as i32);
            if !stopping {
                // The last resubmission waits for the next completion in the
                // same system call, as the engine's turn does.
                let last = index + 1 == count;
                submit_read(&mut ring, &mut started, slot, last || !batch, last)?;
                outstanding += 1;
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = (cpu_seconds() - cpu0) / wall;
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "RESULT mode=randread-raw depth={depth} iops={:.0} p50_us={:.1} p99_us={:.1} \
         engine_p50_us=0 ops={completed} errors={errors} wall_s={wall:.2} cpu={cpu:.3} ring={ring_flags} \
         batch={batch} spin_ns={spin_ns}",
        completed as f64 / wall,
        us(histogram.value_at_quantile(0.5)),
        us(histogram.value_at_quantile(0.99)),
    );
    Ok(())
}
