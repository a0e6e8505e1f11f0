//! Seed 001 on the real kernel path, measured: the fast disk's write rate
//! alone and beside a slow stick, through tailguard and through one shared
//! in-flight cap, on both backends.
//!
//! The fast disk is a preallocated file on this machine's disk (under
//! `--dir`, default the temporary directory), written with O_DIRECT; the
//! stick is a fault device timed by the simulator's `usb-flash` model (about
//! 2 MB/s, with stalls of hundreds of milliseconds). The fast writer keeps
//! 16 writes of 128 KiB outstanding; beside it, the stick's writer keeps 16
//! outstanding (2 MiB), starting a moment earlier. Four runs per backend
//! (io_uring, then threads), each `--seconds` long, repeated `--rounds`
//! times, solo and beside alternating:
//!
//! - `tailguard-solo` / `tailguard-beside`: one tailguard `Scheduler` with
//!   that backend for both writers; the stick's profile is the model's own
//!   (as `tailguard tune` would measure it), the disk's the default guess;
//! - `cap-solo` / `cap-beside`: one backend (one ring, or one pool of 16
//!   threads) for both devices under one cap of 16 writes in flight (2 MiB),
//!   admitted in arrival order: the seed's shared cap (FreeBSD's
//!   `vfs.hirunningspace`) in userspace. Alone, the cap is above the fast
//!   writer's depth: it is the kernel's own direct path.
//!
//! Prints the fast disk's MB/s per run, then min/median/max per run kind and
//! each backend's ratio of medians, beside / solo. Needs root.
//!
//! `--hold-stick SECONDS` only starts the stick, prints its path, and removes
//! it after that long: a slow device for `tailguard bench` job files with a
//! job on it (`benchmarks/seed001-two-targets.toml`). Let it end by itself:
//! killing it while requests are in flight can leave them waiting on its own
//! FUSE server (see the crate docs).
//!
//! ```sh
//! sudo cargo run --release -p tailguard-faultdev --example seed001 -- --seconds 2 --rounds 3
//! ```

mod common;
#[path = "../tests/seed001_parts/mod.rs"]
mod seed001_parts;

use common::{argument, number, summary};
use seed001_parts::{
    device_name, stick_profile, tailguard_writer, FastFile, SharedCap, Window, WriterCounts,
    WRITE_BYTES,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tailguard::backend::{open_backend, BackendConfig};
use tailguard::{BackendChoice, Scheduler};
use tailguard_faultdev::{DeviceConfig, FaultDevice, Model};

const FAST_DEPTH: usize = 16;
const STICK_DEPTH: usize = 16;
const CAP: usize = 16;
const FAST_BYTES: u64 = 256 << 20;
const STICK_BYTES: u64 = 32 << 20;
/// How long the stick's writer runs before the fast writer's window opens.
const LEAD: Duration = Duration::from_millis(300);

/// What one run measured.
struct Measured {
    fast: WriterCounts,
    stick: Option<WriterCounts>,
}

fn window(seconds: f64, lead: Duration) -> Window {
    let start = Instant::now() + lead;
    Window {
        start,
        end: start + Duration::from_secs_f64(seconds),
    }
}

fn through_tailguard(
    choice: BackendChoice,
    stick: Option<&Path>,
    fast: &Path,
    seconds: f64,
) -> Measured {
    let mut builder = Scheduler::builder().backend(choice);
    if let Some(stick) = stick {
        builder = builder.profile(&device_name(stick), stick_profile());
    }
    let scheduler = builder.build().expect("a scheduler");
    let stop = AtomicBool::new(false);
    let window = window(
        seconds,
        if stick.is_some() {
            LEAD
        } else {
            Duration::ZERO
        },
    );
    std::thread::scope(|scope| {
        let stick_writer = stick.map(|stick| {
            let scheduler = &scheduler;
            let stop = &stop;
            scope.spawn(move || {
                tailguard_writer(scheduler, stick, STICK_BYTES, STICK_DEPTH, window, stop)
            })
        });
        if stick.is_some() {
            std::thread::sleep(LEAD);
        }
        let fast = tailguard_writer(&scheduler, fast, FAST_BYTES, FAST_DEPTH, window, &stop);
        Measured {
            fast,
            stick: stick_writer.map(|writer| writer.join().expect("the stick's writer")),
        }
    })
}

fn through_shared_cap(
    choice: BackendChoice,
    stick: Option<&Path>,
    fast: &Path,
    seconds: f64,
) -> Measured {
    let backend = open_backend(BackendConfig {
        choice,
        ring_depth: 256,
        threads: CAP,
        shared_ring: false,
    })
    .expect("a backend");
    let mut cap = SharedCap::new(backend, CAP);
    let stick_writer = stick.map(|stick| cap.add_writer(stick, STICK_BYTES, STICK_DEPTH));
    if stick_writer.is_some() {
        // The stick's writer alone first, as in the tailguard runs.
        let lead_end = Instant::now() + LEAD;
        while Instant::now() < lead_end {
            cap.issue();
            cap.complete(None);
        }
    }
    let window = window(seconds, Duration::ZERO);
    let fast_writer = cap.add_writer(fast, FAST_BYTES, FAST_DEPTH);
    cap.run(&window);
    Measured {
        fast: cap.counts(fast_writer),
        stick: stick_writer.map(|writer| cap.counts(writer)),
    }
}

fn megabytes_per_s(writes: u64, seconds: f64) -> f64 {
    writes as f64 * WRITE_BYTES as f64 / seconds / 1e6
}

const KINDS: [&str; 4] = [
    "tailguard-solo",
    "tailguard-beside",
    "cap-solo",
    "cap-beside",
];

const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Threads];

/// The fast disk's MB/s, by backend, then run kind (as in [`KINDS`]), then
/// round.
type Rates = Vec<Vec<Vec<f64>>>;

fn main() {
    let seconds: f64 = number("--seconds", 2.0);
    let rounds: usize = number("--rounds", 3);
    let dir = argument("--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    if let Some(reason) = FaultDevice::unavailable() {
        eprintln!("seed001: {reason}");
        std::process::exit(2);
    }
    let config = DeviceConfig {
        model: Model::UsbFlash,
        size_bytes: STICK_BYTES,
        volatile_cache: false,
        seed: 7,
        fuse_threads: 16,
        sector_bytes: 4096,
    };
    let device = FaultDevice::start(config, &std::env::temp_dir()).expect("start the stick");
    let hold_s: u64 = number("--hold-stick", 0);
    if hold_s > 0 {
        // The stick alone, for `tailguard bench` jobs that target it
        // (benchmarks/seed001-two-targets.toml); removed when the time is up.
        println!(
            "stick {} (usb-flash model), held for {hold_s} s",
            device.path().display()
        );
        std::thread::sleep(Duration::from_secs(hold_s));
        return;
    }
    let fast = FastFile::create(&dir, FAST_BYTES).expect("create the fast file");
    println!(
        "stick {} (usb-flash model, direct I/O {}), fast disk: {}",
        device.path().display(),
        device.direct_io(),
        fast.path().display()
    );
    let rates = measure_rounds(device.path(), fast.path(), seconds, rounds);
    print_summary(&rates);
}

/// Runs every kind on every backend, `rounds` times, printing each run.
fn measure_rounds(stick_path: &Path, fast: &Path, seconds: f64, rounds: usize) -> Rates {
    let mut rates = vec![vec![Vec::new(); KINDS.len()]; BACKENDS.len()];
    for round in 0..rounds {
        for (backend_index, &choice) in BACKENDS.iter().enumerate() {
            for (kind_index, kind) in KINDS.iter().enumerate() {
                let stick = kind.ends_with("beside").then_some(stick_path);
                let measured = if kind.starts_with("tailguard") {
                    through_tailguard(choice, stick, fast, seconds)
                } else {
                    through_shared_cap(choice, stick, fast, seconds)
                };
                let rate = megabytes_per_s(measured.fast.in_window, seconds);
                let stick_rate = measured
                    .stick
                    .map(|stick| {
                        format!(
                            ", stick {:.2} MB/s",
                            megabytes_per_s(stick.in_window, seconds)
                        )
                    })
                    .unwrap_or_default();
                println!(
                    "round {round} {choice:?} {kind:>16}: fast disk {rate:7.1} MB/s{stick_rate}"
                );
                rates[backend_index][kind_index].push(rate);
            }
        }
    }
    rates
}

/// The min/median/max table, then each backend's ratios of medians.
fn print_summary(rates: &Rates) {
    println!("\n| backend | run | fast disk MB/s min | median | max |");
    println!("|---|---|---|---|---|");
    for (backend_index, choice) in BACKENDS.iter().enumerate() {
        for (kind_index, kind) in KINDS.iter().enumerate() {
            let (min, median, max) = summary(&rates[backend_index][kind_index]);
            println!("| {choice:?} | {kind} | {min:.1} | {median:.1} | {max:.1} |");
        }
    }
    println!();
    for (backend_index, choice) in BACKENDS.iter().enumerate() {
        let median = |kind: usize| summary(&rates[backend_index][kind]).1;
        println!(
            "{choice:?}: beside / solo (medians): tailguard {:.3}, shared cap {:.3}",
            median(1) / median(0),
            median(3) / median(2)
        );
    }
}
