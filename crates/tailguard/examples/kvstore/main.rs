//! kvstore: a small log-structured key-value store written on tailguard's
//! streams, with a load generator, to show the API serving a real engine and
//! to measure its point reads beside its own log writes and compaction.
//!
//! ```text
//! cargo run --release -p tailguard --example kvstore -- --mode compare
//! ```
//!
//! `--mode tailguard` and `--mode std` run the store once on each kind of
//! I/O (see `store`); `--mode compare` runs them in turns (tailguard, std,
//! tailguard, std, ...), each in a fresh directory with a fresh preload, and
//! prints each run and then, per mode, the minimum, median and maximum of
//! every figure and the ratio of the medians.
//!
//! In tailguard mode compaction runs in a class with a cap
//! (`--compaction-mib-per-s`, default 32; 0 lifts it) beside its shares: the
//! shares keep it behind reads and log writes when they are busy, the cap
//! keeps it at a background pace when they are not. The std modes cannot cap
//! it, so they compact as fast as the disk allows.

mod load;
mod store;

use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
use load::{LoadConfig, LoadReport};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use store::{Io, Store, StoreConfig};
use tailguard::{BackendChoice, ClassOptions, ControllerChoice, RateLimit, Scheduler};

/// Which I/O the store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// tailguard streams and unaligned reads, O_DIRECT, three classes.
    Tailguard,
    /// std::fs buffered I/O (BufWriter, BufReader, pread).
    Std,
    /// std::fs buffered writes, point reads with O_DIRECT pread (a data set
    /// larger than the page cache).
    StdDirectReads,
    /// All three, in turns.
    Compare,
}

/// The modes `compare` runs, in this order.
const COMPARED: [Mode; 3] = [Mode::Tailguard, Mode::Std, Mode::StdDirectReads];

/// tailguard's backend.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Backend {
    Auto,
    IoUring,
    Threads,
}

/// tailguard's in-flight budget policy.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Controller {
    Fixed,
    Adaptive,
}

#[derive(Parser, Debug)]
#[command(about = "A log-structured key-value store on tailguard, with a load generator")]
struct Arguments {
    #[arg(long, value_enum, default_value = "compare")]
    mode: Mode,
    /// Seconds each run measures (after its preload).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Runs of each mode in `compare` (at least 1).
    #[arg(long, default_value_t = 3, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rounds: usize,
    /// Keys in the store (each written once before the run; at least 1).
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1000)]
    value_bytes: usize,
    /// Reader threads.
    #[arg(long, default_value_t = 4)]
    readers: usize,
    /// The writer's pace in MiB/s (0: as fast as it goes).
    #[arg(long, default_value_t = 0)]
    write_mib_per_s: u64,
    /// Shares of the point-read class (tailguard mode).
    #[arg(long, default_value_t = 1000)]
    read_shares: u32,
    /// Shares of the log writer's class (tailguard mode).
    #[arg(long, default_value_t = 100)]
    log_shares: u32,
    /// Shares of compaction's class (tailguard mode).
    #[arg(long, default_value_t = 10)]
    compaction_shares: u32,
    /// Compaction's cap in MiB/s (tailguard mode; 0: no cap). Shares only
    /// split what is busy: on an idle device compaction would take it all,
    /// and then stand in the way of the next burst of reads. The cap holds
    /// it to a background pace whatever else runs.
    #[arg(long, default_value_t = 32)]
    compaction_mib_per_s: u64,
    /// tailguard's backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// tailguard's in-flight budget policy.
    #[arg(long, value_enum, default_value = "fixed")]
    controller: Controller,
    /// tailguard's latency target in microseconds (default: the profile's).
    #[arg(long)]
    latency_target_us: Option<u64>,
    /// Register files with the io_uring ring. Off by default: a log store
    /// closes and deletes segment files all the time, and when the engine
    /// drops the last reference to a deleted registered file, the
    /// filesystem frees its blocks on the engine's thread while every
    /// request waits (figures in BENCHMARKS.md).
    #[arg(long)]
    registered_files: bool,
    /// A device profile from `tailguard tune` (default: the built-in guess).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// The directory under which each run makes (and removes) its own.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

fn main() -> io::Result<()> {
    let arguments = Arguments::parse();
    let modes: Vec<Mode> = match arguments.mode {
        Mode::Compare => COMPARED
            .into_iter()
            .cycle()
            .take(COMPARED.len() * arguments.rounds)
            .collect(),
        mode => vec![mode],
    };
    let mut results = Vec::new();
    for (run, mode) in modes.into_iter().enumerate() {
        let report = run_once(&arguments, mode, run)?;
        println!("{}", describe(mode, &report));
        results.push((mode, report));
    }
    if arguments.mode == Mode::Compare {
        summarize(&results);
    }
    Ok(())
}

/// Removes a run's directory when dropped, on every way out of the run (an
/// error, a panic); after [`Store::destroy`] there is nothing left to remove.
struct RemoveDirOnDrop(PathBuf);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0) {
            if error.kind() != io::ErrorKind::NotFound {
                eprintln!("kvstore: could not remove {}: {error}", self.0.display());
            }
        }
    }
}

/// One preload and measured run of `mode` in a fresh directory, removed
/// however the run ends.
fn run_once(arguments: &Arguments, mode: Mode, run: usize) -> io::Result<LoadReport> {
    let dir = arguments
        .dir
        .join(format!("kvstore-{}-{run}", std::process::id()));
    // Declared before the store, so dropped after it: its files are closed.
    let _remove_dir = RemoveDirOnDrop(dir.clone());
    let config = StoreConfig {
        dir,
        segment_bytes: 32 << 20,
        flush_bytes: 256 << 10,
        sync_bytes: 4 << 20,
        compaction_inputs: 4,
    };
    let store = Store::create(io_for(arguments, mode)?, config)?;
    let load = LoadConfig {
        duration: Duration::from_secs(arguments.seconds),
        readers: arguments.readers,
        keys: arguments.keys,
        value_bytes: arguments.value_bytes,
        write_bytes_per_s: arguments.write_mib_per_s << 20,
    };
    let started = Instant::now();
    load::preload(&store, &load)?;
    eprintln!(
        "{mode:?}: preloaded {} keys in {:.1} s; measuring for {} s",
        load.keys,
        started.elapsed().as_secs_f64(),
        arguments.seconds
    );
    let report = load::run(&store, &load)?;
    store.destroy()?;
    Ok(report)
}

fn io_for(arguments: &Arguments, mode: Mode) -> io::Result<Io> {
    match mode {
        Mode::Std => return Ok(Io::Std),
        Mode::StdDirectReads => return Ok(Io::StdDirectReads),
        Mode::Tailguard | Mode::Compare => {}
    }
    let backend = match arguments.backend {
        Backend::Auto => BackendChoice::Auto,
        Backend::IoUring => BackendChoice::IoUring,
        Backend::Threads => BackendChoice::Threads,
    };
    let registered_files = if arguments.registered_files {
        tailguard::backend::DEFAULT_FILE_SLOTS
    } else {
        0
    };
    let mut builder = Scheduler::builder()
        .backend(backend)
        .registered_files(registered_files)
        .controller(match arguments.controller {
            Controller::Fixed => ControllerChoice::Fixed,
            Controller::Adaptive => ControllerChoice::Adaptive,
        });
    if let Some(path) = &arguments.profile {
        builder = builder.profile_file(path)?;
    }
    if let Some(target) = arguments.latency_target_us {
        builder = builder.latency_target(Duration::from_micros(target));
    }
    let scheduler = builder.build()?;
    Ok(Io::Tailguard {
        reads: scheduler.add_class("reads", arguments.read_shares)?,
        log: scheduler.add_class("log", arguments.log_shares)?,
        compaction: scheduler.add_class_with("compaction", &compaction_options(arguments))?,
        scheduler,
    })
}

/// Compaction's class: its shares and, unless `--compaction-mib-per-s 0`, its cap.
fn compaction_options(arguments: &Arguments) -> ClassOptions {
    let options = ClassOptions::new(arguments.compaction_shares);
    match arguments.compaction_mib_per_s {
        0 => options,
        mib_per_s => options.rate_limit(RateLimit::bytes_per_s(mib_per_s << 20)),
    }
}

fn describe(mode: Mode, report: &LoadReport) -> String {
    format!(
        "{:<16} reads {:>8}  p50 {:>8.1} us  p99 {:>8.1} us  p99.9 {:>8.1} us  max {:>9.1} us  \
         writes {:>6.1} MiB/s  compactions {:>2} ({:.1} MiB/s)",
        name(mode),
        report.reads,
        report.read_p50_us,
        report.read_p99_us,
        report.read_p999_us,
        report.read_max_us,
        report.write_mib_per_s,
        report.compactions,
        report.compaction_mib_per_s,
    )
}

/// A figure of a report.
type Figure = fn(&LoadReport) -> f64;

/// Per figure: min / median / max of each mode, and each mode's median over
/// tailguard's.
fn summarize(results: &[(Mode, LoadReport)]) {
    let figures: [(&str, Figure); 7] = [
        ("reads/s", |report| report.reads_per_s),
        ("read p50 us", |report| report.read_p50_us),
        ("read p99 us", |report| report.read_p99_us),
        ("read p99.9 us", |report| report.read_p999_us),
        ("read max us", |report| report.read_max_us),
        ("write MiB/s", |report| report.write_mib_per_s),
        ("compaction MiB/s", |report| report.compaction_mib_per_s),
    ];
    print!("\n{:<17}", "min/median/max");
    for mode in COMPARED {
        print!(" {:>30}", name(mode));
    }
    println!("  (median / tailguard's)");
    for (figure_name, figure) in figures {
        let spreads: Vec<_> = COMPARED
            .iter()
            .map(|mode| spread(results, *mode, figure))
            .collect();
        print!("{figure_name:<17}");
        for (min, median, max) in &spreads {
            print!(" {:>30}", format!("{min:.1} / {median:.1} / {max:.1}"));
        }
        let ratios: Vec<_> = spreads[1..]
            .iter()
            .map(|(_, median, _)| format!("{:.2}", median / spreads[0].1))
            .collect();
        println!("  ({})", ratios.join(", "));
    }
}

/// Min, median and max of `figure` over the runs of `mode`.
fn spread(results: &[(Mode, LoadReport)], mode: Mode, figure: Figure) -> (f64, f64, f64) {
    let mut values: Vec<f64> = results
        .iter()
        .filter(|(run_mode, _)| *run_mode == mode)
        .map(|(_, report)| figure(report))
        .collect();
    values.sort_by(f64::total_cmp);
    (
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    )
}

fn name(mode: Mode) -> String {
    mode.to_possible_value()
        .expect("no mode is skipped")
        .get_name()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_keys_and_zero_rounds_are_usage_errors() {
        for flags in [["--keys", "0"], ["--rounds", "0"]] {
            let error =
                Arguments::try_parse_from(["kvstore", flags[0], flags[1]]).expect_err("refused");
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{flags:?}"
            );
        }
        assert!(Arguments::try_parse_from(["kvstore", "--keys", "1", "--rounds", "1"]).is_ok());
    }
}
