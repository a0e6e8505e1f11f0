//! `tailguard frontier [DIR]`: the read/write trade-off curve of static
//! settings and of tailguard, measured side by side on one disk.
//!
//! A latency class (by default the demo's 16 readers of 4 KiB at queue depth
//! 1; `--readers`, `--read-size`, `--read-depth` change it) runs
//! beside a bulk class (one sequential writer) in many ways: every static
//! setting of a grid (kernel O_DIRECT, no scheduler, the writer at a fixed
//! queue depth and request size), tailguard with the command line's scheduler
//! settings, with the adaptive controller, and at each of a sweep of read
//! latency targets, and the readers alone as the reference. The readers run
//! throughout by default; with `--readers-run` and `--readers-pause` they run
//! and pause in turn (the writer throughout, the solo point's readers the
//! same), which is where a scheduler that lets writes stream while nobody
//! reads can beat a static writer that must pick one depth for when readers
//! run. Each point reports
//! the disk's write rate (its own counters) against the readers' worst 0.5 s
//! rate and mean rate over solo, p99.99 and max. The static points' Pareto
//! frontier is marked, and each tailguard point is set against the best
//! static setting writing at its rate (±10%), unless a static setting
//! dominates it beyond the noise, which it then loses to
//! ([`analysis::compare`]): that is what tailguard buys, or costs, on this
//! disk. Over several rounds it is also set against each
//! round's own static points, which cancels a drift of the disk that moves a
//! whole round.
//!
//! - [`grid`]: the points and the flags that pick them;
//! - [`measure`]: the workload and the interleaved rounds of bench runs;
//! - [`analysis`]: medians, the Pareto frontier, matching and ties;
//! - [`result`]: the per-point summaries, the round-by-round comparisons
//!   (also the `--json` output) and the terminal table; the chart is
//!   [`crate::html::frontier`].
//!
//! `tailguard demo` runs a small frontier with the same engine ([`trace`]) for
//! its verdict.

pub mod analysis;
pub mod grid;
pub mod measure;
pub mod result;

use crate::bench::driver::{self, SchedulerSettings};
use crate::bench::target::{self, Plan};
use crate::error::CliError;
use crate::progress::Progress;
use grid::{Grid, Setting};
use measure::{ReaderPattern, Workload};
use result::FrontierResult;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Seconds per point by default.
pub const DURATION_S_DEFAULT: f64 = 5.0;
/// Seconds per point with `--quick`.
pub const DURATION_S_QUICK: f64 = 3.0;
/// MiB of each file (the readers' and the writer's) by default.
pub const FILE_MIB_DEFAULT: u64 = 1024;
/// MiB of each file with `--quick`.
pub const FILE_MIB_QUICK: u64 = 512;
/// The largest `--size-mib` (here and in `tailguard demo`): 16 TiB a file,
/// beyond any disk the runs are meant for and far from overflowing a byte
/// count.
pub const SIZE_MIB_MAX: u64 = 1 << 24;
/// Seconds a run costs beyond its duration (settling the files, opening the
/// scheduler), for the time estimate.
const RUN_OVERHEAD_S: f64 = 0.5;
const MIB: u64 = 1 << 20;

/// The bytes of a file of `mib` MiB (`--size-mib`); an error naming the
/// limit above [`SIZE_MIB_MAX`].
pub fn file_bytes(mib: u64) -> Result<u64, CliError> {
    mib.checked_mul(MIB)
        .filter(|_| mib <= SIZE_MIB_MAX)
        .ok_or_else(|| {
            CliError::usage(format!(
                "--size-mib {mib}: give at most {SIZE_MIB_MAX} (16 TiB a file)"
            ))
        })
}

/// `tailguard frontier` arguments.
#[derive(Debug, clap::Args)]
pub struct FrontierArguments {
    /// Where to lay out the read file and the write file (removed at the end);
    /// default: the current directory. Put it on the disk to measure.
    pub dir: Option<PathBuf>,
    /// A small grid with short runs: static queue depths 1,2 x sizes
    /// 128k,256k,1m; latency targets 500us,2ms; 3 s per point; 512 MiB files.
    #[arg(long)]
    pub quick: bool,
    /// Static writer queue depths, comma-separated (default 1,2,4,8).
    #[arg(long, value_delimiter = ',', value_parser = grid::parse_depth, value_name = "QD,...")]
    pub depths: Vec<u32>,
    /// Static writer request sizes, comma-separated (default
    /// 64k,128k,256k,512k,1m).
    #[arg(long, value_delimiter = ',', value_parser = grid::parse_size, value_name = "SIZE,...")]
    pub sizes: Vec<u64>,
    /// Tailguard read latency targets to sweep, comma-separated (default
    /// 250us,500us,1ms,2ms,4ms), or `none`.
    #[arg(long, value_delimiter = ',', value_parser = parse_target_or_none, value_name = "LATENCY,...")]
    pub latency_targets: Vec<u64>,
    /// Leave out the point of tailguard with the adaptive controller.
    #[arg(long)]
    pub no_adaptive: bool,
    /// Rounds: every point runs once per round, in an order that changes the
    /// first point and each point's predecessor from round to round;
    /// the table shows medians with min-max.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Length of each point's run: `5s`, `1500ms` or seconds (1 s to 10 min;
    /// default 5 s, --quick 3 s).
    #[arg(long, value_parser = parse_duration_s, value_name = "DURATION")]
    pub duration: Option<f64>,
    /// Closed-loop random readers of the latency class (default 16, the
    /// demo's).
    #[arg(long, default_value_t = measure::READERS, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub readers: u32,
    /// Each read's size (default 4k).
    #[arg(long, value_parser = grid::parse_size, value_name = "SIZE", default_value = "4k")]
    pub read_size: u64,
    /// Reads each reader keeps in flight (default 1).
    #[arg(long, default_value_t = measure::READ_QUEUE_DEPTH, value_parser = grid::parse_depth)]
    pub read_depth: u32,
    /// Readers that pause: they run this long (`1s`, `500ms`; at least
    /// 0.5 s, one rate window), then pause for --readers-pause, in turn across
    /// each point's run, the writer throughout (default: the readers never
    /// pause). The worst 0.5 s rate then counts only windows inside running
    /// spans and the mean rate is over the time they run.
    #[arg(long, requires = "readers_pause", value_parser = parse_readers_run_s, value_name = "DURATION")]
    pub readers_run: Option<f64>,
    /// How long readers that pause stay paused each time (`1s`, `200ms`; at
    /// least 0.1 s); goes with --readers-run.
    #[arg(long, requires = "readers_run", value_parser = parse_readers_pause_s, value_name = "DURATION")]
    pub readers_pause: Option<f64>,
    /// Size of the read file and of the write file, MiB (default 1024,
    /// --quick 512; at most 16777216, 16 TiB).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=SIZE_MIB_MAX))]
    pub size_mib: Option<u64>,
    /// Also write the result as JSON to FILE (`-`: standard output, instead of
    /// the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write an HTML page with the trade-off chart to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Replace an existing --json or --report file (checked before the run).
    #[arg(long)]
    pub allow_overwrite: bool,
    /// How the tailguard points configure their scheduler (the adaptive and
    /// latency-target points change one setting of these).
    #[command(flatten)]
    pub scheduler: driver::SchedulerSettings,
}

/// A `--latency-targets` value, `none` as 0 (dropped later).
fn parse_target_or_none(text: &str) -> Result<u64, CliError> {
    if text.trim().eq_ignore_ascii_case("none") {
        Ok(0)
    } else {
        grid::parse_latency_target(text)
    }
}

/// A `--duration` value in seconds.
pub fn parse_duration_s(text: &str) -> Result<f64, CliError> {
    let seconds = parse_seconds(text)?;
    if !(1.0..=600.0).contains(&seconds) {
        return Err(CliError::usage(format!(
            "--duration {text} is out of range; give 1s to 600s per point"
        )));
    }
    Ok(seconds)
}

/// A `--readers-run` value in seconds: at least one 0.5 s rate window.
fn parse_readers_run_s(text: &str) -> Result<f64, CliError> {
    let seconds = parse_seconds(text)?;
    if !(0.5..=600.0).contains(&seconds) {
        return Err(CliError::usage(format!(
            "--readers-run {text} is out of range; give 500ms to 600s (a running span must \
             hold a whole 0.5 s rate window)"
        )));
    }
    Ok(seconds)
}

/// A `--readers-pause` value in seconds.
fn parse_readers_pause_s(text: &str) -> Result<f64, CliError> {
    let seconds = parse_seconds(text)?;
    if !(0.1..=600.0).contains(&seconds) {
        return Err(CliError::usage(format!(
            "--readers-pause {text} is out of range; give 100ms to 600s"
        )));
    }
    Ok(seconds)
}

/// A duration flag's value in seconds: `5s`, `1500ms` or plain seconds.
fn parse_seconds(text: &str) -> Result<f64, CliError> {
    let trimmed = text.trim();
    let (number, scale) = if let Some(number) = trimmed.strip_suffix("ms") {
        (number, 1e-3)
    } else if let Some(number) = trimmed.strip_suffix('s') {
        (number, 1.0)
    } else {
        (trimmed, 1.0)
    };
    let seconds = number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|seconds| seconds.is_finite())
        .ok_or_else(|| {
            CliError::usage(format!(
                "`{text}` is not a duration; write e.g. 5s or 1500ms"
            ))
        })?
        * scale;
    Ok(seconds)
}

impl FrontierArguments {
    /// The grid the flags pick.
    pub fn grid(&self) -> Grid {
        let mut grid = Grid::standard(self.quick);
        if !self.depths.is_empty() {
            grid.depths = self.depths.clone();
        }
        if !self.sizes.is_empty() {
            grid.sizes_bytes = self.sizes.clone();
        }
        if !self.latency_targets.is_empty() {
            grid.latency_targets_us = self
                .latency_targets
                .iter()
                .copied()
                .filter(|&target| target > 0)
                .collect();
        }
        grid.adaptive = !self.no_adaptive;
        grid
    }

    /// The workload the flags pick; an error naming the fix when the readers
    /// would never pause within a run.
    pub fn workload(&self) -> Result<Workload, CliError> {
        let mib = self.size_mib.unwrap_or(if self.quick {
            FILE_MIB_QUICK
        } else {
            FILE_MIB_DEFAULT
        });
        let file_bytes = file_bytes(mib)?;
        let duration_s = self.duration.unwrap_or(if self.quick {
            DURATION_S_QUICK
        } else {
            DURATION_S_DEFAULT
        });
        Ok(Workload {
            readers: self.readers,
            read_request_bytes: self.read_size,
            read_queue_depth: self.read_depth,
            read_bytes: file_bytes,
            write_bytes: file_bytes,
            duration_s,
            reader_pattern: self.reader_pattern(duration_s)?,
        })
    }

    /// The readers' pattern: periodic with `--readers-run` and
    /// `--readers-pause` (clap requires both or neither), else continuous.
    fn reader_pattern(&self, duration_s: f64) -> Result<ReaderPattern, CliError> {
        let (Some(run_s), Some(pause_s)) = (self.readers_run, self.readers_pause) else {
            return Ok(ReaderPattern::Continuous);
        };
        if run_s >= duration_s {
            return Err(CliError::usage(format!(
                "--readers-run {run_s}s is not shorter than --duration {duration_s}s, so the \
                 readers would never pause; give a shorter --readers-run or a longer --duration"
            )));
        }
        Ok(ReaderPattern::Periodic { run_s, pause_s })
    }

    /// The command that reproduces the run, with the grid spelled out.
    fn command_line(&self, grid: &Grid, workload: &Workload) -> String {
        let mut command = String::from("tailguard frontier");
        if let Some(dir) = &self.dir {
            let _ = write!(command, " {}", crate::render::shell_quote_path(dir));
        }
        let join = |values: Vec<String>| {
            if values.is_empty() {
                "none".to_string()
            } else {
                values.join(",")
            }
        };
        let _ = write!(
            command,
            " --depths {} --sizes {} --latency-targets {}{} --rounds {} --duration {}s \
             --size-mib {}",
            join(grid.depths.iter().map(u32::to_string).collect()),
            join(
                grid.sizes_bytes
                    .iter()
                    .map(|&b| grid::size_label(b))
                    .collect()
            ),
            join(
                grid.latency_targets_us
                    .iter()
                    .map(|&t| grid::target_label(t))
                    .collect()
            ),
            if grid.adaptive { "" } else { " --no-adaptive" },
            self.rounds,
            workload.duration_s,
            workload.read_bytes / MIB
        );
        if (self.readers, self.read_size, self.read_depth)
            != (
                measure::READERS,
                measure::READ_REQUEST_BYTES,
                measure::READ_QUEUE_DEPTH,
            )
        {
            let _ = write!(
                command,
                " --readers {} --read-size {} --read-depth {}",
                self.readers,
                grid::size_label(self.read_size),
                self.read_depth
            );
        }
        command.push_str(&workload.reader_pattern.flags());
        command.push_str(&scheduler_flags(&self.scheduler));
        command
    }
}

/// The flags that reproduce `settings`: those that differ from the defaults.
fn scheduler_flags(settings: &SchedulerSettings) -> String {
    let defaults = SchedulerSettings::default();
    let mut flags = String::new();
    if let Some(profile) = &settings.profile {
        let _ = write!(
            flags,
            " --profile {}",
            crate::render::shell_quote_path(profile)
        );
    }
    if let Some(target_us) = settings.latency_target_us {
        let _ = write!(flags, " --latency-target-us {target_us}");
    }
    if settings.controller != defaults.controller {
        let _ = write!(flags, " --controller {}", settings.controller.name());
    }
    if settings.quiet_reads != defaults.quiet_reads {
        let _ = write!(
            flags,
            " --quiet-reads {}",
            crate::flags::name_of(&settings.quiet_reads)
        );
    }
    if settings.submit != defaults.submit {
        let _ = write!(
            flags,
            " --submit {}",
            crate::flags::name_of(&settings.submit)
        );
    }
    if settings.driver != defaults.driver {
        let _ = write!(
            flags,
            " --driver {}",
            crate::flags::name_of(&settings.driver)
        );
    }
    flags
}

/// Measures `settings` (which must include [`Setting::Solo`]) on `plan` over
/// `rounds` interleaved rounds and summarises them.
pub fn trace(
    settings: &[Setting],
    workload: &Workload,
    plan: &Plan,
    base: &SchedulerSettings,
    rounds: u32,
    progress: &Progress,
    command: String,
) -> Result<FrontierResult, CliError> {
    let samples = measure::measure(settings, workload, plan, base, rounds, progress)?;
    FrontierResult::build(
        command,
        plan.device_name.clone(),
        *workload,
        settings,
        &samples,
    )
}

/// Runs `tailguard frontier`.
pub fn run(arguments: &FrontierArguments) -> Result<(), CliError> {
    target::watch_interrupts();
    let base = arguments.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    if !base.is_dir() {
        return Err(CliError::usage(format!(
            "{} is not a directory; give an existing directory on the disk to measure \
             (tailguard frontier DIR), or none for the current one",
            base.display()
        )));
    }
    // `--json -` prints the JSON; `--report` always writes a file.
    let outputs: Vec<(&str, &Path, bool)> = [
        ("--json", &arguments.json, true),
        ("--report", &arguments.report, false),
    ]
    .into_iter()
    .filter_map(|(flag, path, takes_stdout)| Some((flag, path.as_deref()?, takes_stdout)))
    .collect();
    crate::output::check_outputs(&outputs, arguments.allow_overwrite)?;
    let grid = arguments.grid();
    let settings = grid.points();
    let workload = arguments.workload()?;
    let command = arguments.command_line(&grid, &workload);
    let runs = settings.len() * arguments.rounds as usize;
    crate::output::note(&format!(
        "tailguard frontier: {} points ({} static, {} tailguard, solo) x {} round(s) of {} s: \
         about {:.0} s, after laying out two {} MiB files in {}",
        settings.len(),
        settings.iter().filter(|point| point.is_static()).count(),
        settings.iter().filter(|point| point.is_tailguard()).count(),
        arguments.rounds,
        workload.duration_s,
        runs as f64 * (workload.duration_s + RUN_OVERHEAD_S),
        workload.read_bytes / MIB,
        base.display()
    ));
    let mut layout = target::Layout::default();
    let mut job = workload.job(&Setting::Tailguard(grid::Variant::Default))?;
    let plan = target::prepare(&mut job, &base, false, true, &mut layout)?;
    let progress = Progress::new("tailguard frontier");
    let result = trace(
        &settings,
        &workload,
        &plan,
        &arguments.scheduler,
        arguments.rounds,
        &progress,
        command,
    )?;
    drop(layout);
    write_outputs(arguments, &result, &base, &mut std::io::stdout().lock())
}

/// The JSON file and the page, then the table (or `--json -`'s JSON) on
/// `stdout`: files first, so a closed standard output (`| head`) costs
/// neither; every output is attempted, and every failure reported.
fn write_outputs(
    arguments: &FrontierArguments,
    result: &FrontierResult,
    base: &Path,
    stdout: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    let json_to_stdout = arguments
        .json
        .as_deref()
        .is_some_and(crate::output::is_stdout);
    let json = match &arguments.json {
        Some(_) => serde_json::to_string_pretty(result).map_err(|error| {
            CliError::usage(format!("cannot write the result as JSON: {error}"))
        })?,
        None => String::new(),
    };
    let written = |flag: &str, path: &Path, text: &str| {
        crate::output::write_file(flag, path, text.as_bytes(), arguments.allow_overwrite)
            .map(|()| crate::output::note(&format!("tailguard frontier: wrote {}", path.display())))
    };
    let json_file = match &arguments.json {
        Some(path) if !json_to_stdout => written("--json", path, &(json.clone() + "\n")),
        _ => Ok(()),
    };
    let report = match &arguments.report {
        Some(path) => written("--report", path, &report_page(result)),
        None => Ok(()),
    };
    let printed = if json_to_stdout {
        crate::output::print_to(stdout, &json)
    } else {
        crate::output::print_to(
            stdout,
            &format!(
                "tailguard frontier on {} (device {}): {}, {} s per point (reproduce: {})",
                base.display(),
                result.device,
                result.workload.describe(),
                result.workload.duration_s,
                result.command
            ),
        )
        .and_then(|()| crate::output::print_to(stdout, &result::render_table(result)))
    };
    crate::output::all([json_file, report, printed])
}

/// The `--report` page: the chart, with the command and the setup.
fn report_page(result: &FrontierResult) -> String {
    let notes = [
        format!("Command: {}", result.command),
        format!(
            "Device {}: {}; {} s per point, {} round(s), \
             points interleaved. Static points: readers and writer kernel O_DIRECT, the writer \
             at the point's queue depth and request size. Tailguard points: both through the \
             scheduler, the writer keeping {} requests of 1 MiB queued.",
            result.device,
            result.workload.describe(),
            result.workload.duration_s,
            result.rounds,
            measure::TAILGUARD_WRITE_QUEUE_DEPTH
        ),
    ];
    crate::html::frontier::page("tailguard frontier", &notes, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        arguments: FrontierArguments,
    }

    fn parse(flags: &[&str]) -> Result<FrontierArguments, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("frontier").chain(flags.iter().copied()))
            .map(|wrapper| wrapper.arguments)
    }

    /// A standard output whose reader is gone.
    struct ClosedPipe;

    impl std::io::Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_standard_output_costs_no_file_and_every_failure_is_reported() {
        let directory =
            std::env::temp_dir().join(format!("tailguard-frontier-closed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let json = directory.join("f.json");
        let report = directory.join("r.html");
        let result = result::frontier_of(&[
            (Setting::Solo, &[(1.0, 1000.0, 950.0)]),
            (result::direct(1, 128), &[(450.0, 950.0, 900.0)]),
        ]);
        let (json_text, report_text) = (json.to_str().unwrap(), report.to_str().unwrap());
        let arguments = parse(&["--json", json_text, "--report", report_text]).unwrap();
        let error = write_outputs(&arguments, &result, &directory, &mut ClosedPipe).unwrap_err();
        assert_eq!(error.status, crate::output::STDOUT_CLOSED_STATUS, "{error}");
        assert!(json.is_file() && report.is_file(), "both files are written");

        // The files exist now: both fail, and so does the table; all three
        // are reported.
        let error = write_outputs(&arguments, &result, &directory, &mut ClosedPipe).unwrap_err();
        assert_eq!(error.status, 2, "{error}");
        let lines: Vec<&str> = error.message.lines().collect();
        assert_eq!(lines.len(), 3, "{error}");
        assert!(
            lines[0].contains("--json") && lines[1].contains("--report"),
            "{error}"
        );

        let to_stdout = parse(&["--json", "-"]).unwrap();
        let error = write_outputs(&to_stdout, &result, &directory, &mut ClosedPipe).unwrap_err();
        assert_eq!(error.status, crate::output::STDOUT_CLOSED_STATUS, "{error}");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn grid_flags_pick_a_subset() {
        let arguments = parse(&[
            "/tmp",
            "--depths",
            "1,2",
            "--sizes",
            "128k,1m",
            "--latency-targets",
            "250us,2ms",
            "--rounds",
            "3",
            "--duration",
            "1500ms",
        ])
        .unwrap();
        let grid = arguments.grid();
        assert_eq!(grid.depths, [1, 2]);
        assert_eq!(grid.sizes_bytes, [128 << 10, 1 << 20]);
        assert_eq!(grid.latency_targets_us, [250, 2_000]);
        assert!(grid.adaptive);
        assert_eq!(arguments.workload().unwrap().duration_s, 1.5);
        assert_eq!(arguments.rounds, 3);
        // 1 solo + 4 static + default + adaptive + 2 targets.
        assert_eq!(grid.points().len(), 9);
        let workload = arguments.workload().unwrap();
        assert_eq!(workload.readers, measure::READERS);
        assert_eq!(workload.read_request_bytes, 4096);
        assert_eq!(workload.reader_pattern, ReaderPattern::Continuous);
        let other = parse(&["--readers", "4", "--read-size", "16k", "--read-depth", "8"]).unwrap();
        let workload = other.workload().unwrap();
        assert_eq!(
            (
                workload.readers,
                workload.read_request_bytes,
                workload.read_queue_depth
            ),
            (4, 16 << 10, 8)
        );
        let job = workload.job(&Setting::Solo).unwrap().scenario;
        assert_eq!(job.jobs[0].numjobs, 4);
        assert_eq!(job.jobs[0].block_size_bytes, 16 << 10);
        assert!(other
            .command_line(&other.grid(), &workload)
            .contains("--readers 4 --read-size 16k --read-depth 8"));
        let command = arguments.command_line(&grid, &arguments.workload().unwrap());
        assert!(
            command.contains("--depths 1,2 --sizes 128k,1m --latency-targets 250us,2ms"),
            "{command}"
        );
    }

    #[test]
    fn a_huge_size_is_refused_naming_the_limit() {
        let error = parse(&["--size-mib", "18446744073709551615"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--size-mib"), "{error}");
        assert!(error.contains(&SIZE_MIB_MAX.to_string()), "{error}");
        let largest = parse(&["--size-mib", &SIZE_MIB_MAX.to_string()]).unwrap();
        assert_eq!(largest.workload().unwrap().read_bytes, 1 << 44);
        let error = file_bytes(u64::MAX / 2).unwrap_err().to_string();
        assert!(error.contains(&SIZE_MIB_MAX.to_string()), "{error}");
        assert_eq!(file_bytes(3).unwrap(), 3 * MIB);
    }

    #[test]
    fn quick_and_defaults_and_none() {
        let quick = parse(&["--quick"]).unwrap();
        assert_eq!(quick.grid(), Grid::standard(true));
        assert_eq!(quick.workload().unwrap().duration_s, DURATION_S_QUICK);
        assert_eq!(quick.workload().unwrap().read_bytes, FILE_MIB_QUICK * MIB);
        let full = parse(&[]).unwrap();
        assert_eq!(full.grid(), Grid::standard(false));
        let bare = parse(&["--latency-targets", "none", "--no-adaptive"]).unwrap();
        let points = bare.grid().points();
        assert_eq!(
            points.iter().filter(|point| point.is_tailguard()).count(),
            1
        );
    }

    #[test]
    fn bad_grid_flags_are_refused_with_the_fix() {
        for flags in [
            &["--depths", "0"][..],
            &["--sizes", "6k"],
            &["--latency-targets", "soon"],
            &["--duration", "0.2s"],
            &["--rounds", "0"],
            &["--size-mib", "17592186044416"],
            &["--readers-run", "0.2s", "--readers-pause", "1s"],
            &["--readers-pause", "50ms", "--readers-run", "1s"],
            &["--readers-run", "soon", "--readers-pause", "1s"],
        ] {
            let error = parse(flags).unwrap_err().to_string();
            assert!(error.contains(flags[0]), "{flags:?}: {error}");
        }
    }

    #[test]
    fn readers_that_pause_need_both_flags_and_a_pause_within_the_run() {
        for flags in [&["--readers-run", "1s"][..], &["--readers-pause", "1s"]] {
            let error = parse(flags).unwrap_err().to_string();
            let other = if flags[0] == "--readers-run" {
                "--readers-pause"
            } else {
                "--readers-run"
            };
            assert!(error.contains(other), "{flags:?}: {error}");
        }
        let arguments = parse(&[
            "--duration",
            "4s",
            "--readers-run",
            "500ms",
            "--readers-pause",
            "1.5",
        ])
        .unwrap();
        let workload = arguments.workload().unwrap();
        assert_eq!(
            workload.reader_pattern,
            ReaderPattern::Periodic {
                run_s: 0.5,
                pause_s: 1.5
            }
        );
        let command = arguments.command_line(&arguments.grid(), &workload);
        assert!(
            command.contains("--readers-run 0.5s --readers-pause 1.5s"),
            "{command}"
        );
        // The reproduce line parses back to the same workload.
        let words: Vec<&str> = command.split_whitespace().skip(2).collect();
        assert_eq!(parse(&words).unwrap().workload().unwrap(), workload);
        // And names the scheduler flags that differ from the defaults.
        let without_quiet_reads = parse(&[
            "--readers-run",
            "1s",
            "--readers-pause",
            "1s",
            "--quiet-reads",
            "off",
        ])
        .unwrap();
        let command = without_quiet_reads.command_line(
            &without_quiet_reads.grid(),
            &without_quiet_reads.workload().unwrap(),
        );
        assert!(
            command.ends_with("--readers-run 1s --readers-pause 1s --quiet-reads off"),
            "{command}"
        );
        let never_pausing = parse(&[
            "--duration",
            "2s",
            "--readers-run",
            "2s",
            "--readers-pause",
            "1s",
        ])
        .unwrap();
        let error = never_pausing.workload().unwrap_err().to_string();
        assert!(error.contains("--readers-run"), "{error}");
    }
}
