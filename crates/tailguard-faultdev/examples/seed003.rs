//! Seed 003 on the real kernel path: the `hdd` model's synchronous sequential
//! 4 KiB writes at queue depth 1, against the same writes queued through
//! tailguard.
//!
//! A fault device (a loop device over this crate's FUSE file) is timed by the
//! simulator's `hdd` model in real time, write cache off. Three writers take
//! turns, each for `--seconds`, repeated `--rounds` times (A B C A B C ...):
//!
//! - `sync-qd1`: `pwrite` with O_DIRECT on `/dev/loopN`, one at a time, no
//!   tailguard (the seed's program);
//! - `tailguard-qd1`: the same writes through tailguard, one at a time;
//! - `tailguard-qd32`: the same writes through tailguard with 32 in flight,
//!   tailguard given the model's own profile (as `tailguard tune` would
//!   measure it).
//!
//! Each writer continues the sequential stream where the last one stopped
//! (wrapping at the device's end), so none starts on a sector that just went
//! by. Prints writes per second per run, min/median/max per writer, and the
//! ratio of medians. Needs root.
//!
//! ```sh
//! sudo cargo run --release -p tailguard-faultdev --example seed003 -- --seconds 3 --rounds 3
//! ```

mod common;

use common::{number, open_direct_write, summary};
use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tailguard::{AlignedBuffer, BackendChoice, Scheduler};
use tailguard_faultdev::{DeviceConfig, FaultDevice, Model};

const BLOCK: u64 = 4096;
const DEVICE_BYTES: u64 = 64 << 20;
const QUEUED: usize = 32;

struct Stream {
    next_offset: u64,
}

impl Stream {
    fn next(&mut self) -> u64 {
        let offset = self.next_offset;
        self.next_offset = (offset + BLOCK) % DEVICE_BYTES;
        offset
    }
}

fn sync_qd1(path: &Path, stream: &mut Stream, duration: Duration) -> u64 {
    let file = open_direct_write(path);
    let buffer = AlignedBuffer::new(BLOCK as usize, BLOCK as usize).unwrap();
    let start = Instant::now();
    let mut writes = 0;
    while start.elapsed() < duration {
        file.write_all_at(&buffer, stream.next()).expect("write");
        writes += 1;
    }
    writes
}

/// `QUEUED` threads doing O_DIRECT `pwrite`s of one sequential stream (the
/// kernel's own queueing, no tailguard): what the device path itself allows.
fn kernel_qd32(path: &Path, stream: &mut Stream, duration: Duration) -> u64 {
    let next = std::sync::Mutex::new(std::mem::replace(stream, Stream { next_offset: 0 }));
    let writes = std::sync::atomic::AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..QUEUED {
            scope.spawn(|| {
                let file = open_direct_write(path);
                let buffer = AlignedBuffer::new(BLOCK as usize, BLOCK as usize).unwrap();
                while start.elapsed() < duration {
                    let offset = next.lock().unwrap().next();
                    file.write_all_at(&buffer, offset).expect("write");
                    if start.elapsed() < duration {
                        writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    *stream = next.into_inner().unwrap();
    writes.into_inner()
}

fn through_tailguard(
    scheduler: &Scheduler,
    path: &Path,
    stream: &mut Stream,
    duration: Duration,
    depth: usize,
) -> u64 {
    let file = scheduler.open(path).expect("open through tailguard");
    let class = scheduler
        .add_class(&format!("w{}", stream.next_offset), 100)
        .unwrap();
    let mut in_flight = VecDeque::new();
    let start = Instant::now();
    let mut writes = 0;
    loop {
        let running = start.elapsed() < duration;
        while running && in_flight.len() < depth {
            let buffer = AlignedBuffer::new(BLOCK as usize, BLOCK as usize).unwrap();
            in_flight.push_back(file.write_at(&class, buffer, stream.next()));
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        let (result, _) = oldest.wait();
        result.expect("write");
        // Writes finished after the window are not counted.
        writes += u64::from(running);
    }
    class.remove().unwrap();
    writes
}

const NAMES: [&str; 5] = [
    "sync-qd1",
    "tailguard-qd1",
    "tailguard-qd32",
    "kernel-qd32",
    "tailguard-qd32-4x-target",
];

fn main() {
    let seconds: u64 = number("--seconds", 3);
    let rounds: usize = number("--rounds", 3);
    if let Some(reason) = FaultDevice::unavailable() {
        eprintln!("seed003: {reason}");
        std::process::exit(2);
    }
    let config = DeviceConfig {
        model: Model::Hdd,
        size_bytes: DEVICE_BYTES,
        volatile_cache: false,
        seed: 5,
        fuse_threads: QUEUED,
        sector_bytes: 4096,
    };
    let device = FaultDevice::start(config, &std::env::temp_dir()).expect("start the device");
    let model = tailguard_sim::device::build(
        tailguard_sim::device::ModelName::Hdd,
        &toml::Table::new(),
        5,
    )
    .unwrap();
    let profile = model.profile();
    let media_writes_per_s = profile.write_bandwidth / BLOCK as f64;
    println!(
        "device {} (direct I/O {}), hdd model: media rate {:.0} 4 KiB writes/s, one revolution {:.2} ms",
        device.path().display(),
        device.direct_io(),
        media_writes_per_s,
        60_000.0 / 7200.0
    );
    let schedulers = Schedulers::new(&profile);
    let duration = Duration::from_secs(seconds);
    let rates = run_rounds(&device, &schedulers, duration, rounds);
    print_summary(&rates, media_writes_per_s);
    println!("backend: {}", schedulers.model.backend());
}

/// The schedulers the tailguard writers use.
struct Schedulers {
    /// Given the model's own profile.
    model: Scheduler,
    /// The same with a 4x latency target: a 4x larger in-flight budget.
    deep: Scheduler,
}

impl Schedulers {
    fn new(profile: &tailguard::Profile) -> Self {
        let model = Scheduler::builder()
            .backend(BackendChoice::Auto)
            .default_profile(profile.clone())
            .build()
            .expect("scheduler");
        let deep = Scheduler::builder()
            .backend(BackendChoice::Auto)
            .default_profile(profile.clone())
            .latency_target(Duration::from_millis(4 * profile.latency_target_us / 1000))
            .build()
            .expect("scheduler");
        Self { model, deep }
    }
}

/// Runs every writer of [`NAMES`] in turn, `rounds` times, printing each run;
/// returns the writes per second by writer, then round.
fn run_rounds(
    device: &FaultDevice,
    schedulers: &Schedulers,
    duration: Duration,
    rounds: usize,
) -> Vec<Vec<f64>> {
    let path = device.path();
    let mut stream = Stream { next_offset: 0 };
    let mut rates = vec![Vec::new(); NAMES.len()];
    for round in 0..rounds {
        for (index, name) in NAMES.iter().enumerate() {
            let writes = match index {
                0 => sync_qd1(path, &mut stream, duration),
                1 => through_tailguard(&schedulers.model, path, &mut stream, duration, 1),
                2 => through_tailguard(&schedulers.model, path, &mut stream, duration, QUEUED),
                3 => kernel_qd32(path, &mut stream, duration),
                _ => through_tailguard(&schedulers.deep, path, &mut stream, duration, QUEUED),
            };
            let rate = writes as f64 / duration.as_secs_f64();
            println!(
                "round {round} {name:>15}: {rate:8.1} writes/s (model depth peak so far {})",
                device.control().model_depth_max()
            );
            rates[index].push(rate);
        }
    }
    rates
}

/// The min/median/max table per writer, then the ratios of medians.
fn print_summary(rates: &[Vec<f64>], media_writes_per_s: f64) {
    println!("\n| writer | writes/s min | median | max | median / media rate |");
    println!("|---|---|---|---|---|");
    let medians: Vec<f64> = rates
        .iter()
        .zip(NAMES)
        .map(|(rates, name)| {
            let (min, median, max) = summary(rates);
            println!(
                "| {name} | {min:.1} | {median:.1} | {max:.1} | {:.3} |",
                median / media_writes_per_s
            );
            median
        })
        .collect();
    println!(
        "\ntailguard-qd32 / sync-qd1 (medians): {:.1}x; tailguard-qd1 / sync-qd1: {:.2}",
        medians[2] / medians[0],
        medians[1] / medians[0]
    );
}
