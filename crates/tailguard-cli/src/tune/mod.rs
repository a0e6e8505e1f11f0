//! `tailguard tune PATH`: measure a device and write its profile.
//!
//! Four curves, each a sweep at rising concurrency then a sustained run at its
//! knee (reads first, so they see the laid-out data before writes churn it):
//!
//! - 4 KiB random reads and 4 KiB random writes at queue depth 1, 2, 4, ... 256;
//! - sequential reads and writes at 128 KiB, 256 KiB, 512 KiB and 1 MiB at depth
//!   1, then 1 MiB at depth 2, 4, ... 32 (bytes in flight double each step).
//!
//! A sweep stops two steps past its knee ([`knee::knee_index`]: the two steps
//! after it both gain less than 5% throughput over it while latency rises; one
//! noisy step never stops it), or at its last step. The rest of the curve's
//! time is a sustained run at the knee, whose rate timeline (20 intervals)
//! gives the *first* rate (the first fifth) and the *steady* rate (the second
//! half); the profile uses the steady one, since cloud disks burst, then fall
//! to their provisioned rate. Token-bucket throttles of a few seconds show;
//! burst credits that last minutes need a longer `--duration`.
//!
//! Which window each number covers, for comparing with another tool: a knee's
//! `iops` and `bandwidth` (and its latencies) are the whole of its sweep step;
//! the steady rate is the mean over the second half of the sustained run
//! (seconds `sustain_s / 2` to `sustain_s` of it, where `sustain_s` is what was
//! left of the curve's time after its sweep); the first rate is its first
//! fifth. The profile's notes give each curve's exact numbers and the fio
//! options that measure the same window ([`Curve::window_note`]).
//!
//! Time: `--duration` (default 60 s) is the whole run, layout included. The
//! layout of a directory's test file takes at most a fifth of it; the rest is
//! split evenly between the curves, and within a curve 60% goes to the sweep
//! steps (at most nine) and the rest to the sustained run.
//!
//! The I/O goes through a raw backend ([`measure`]): io_uring with O_DIRECT,
//! no scheduler. What tune may write is decided in [`target`]. The profile is a
//! [`tailguard::profile_file::ProfileFile`] (TOML, or Seastar's YAML with
//! `--format seastar`); the curves are printed as a terminal chart and, with
//! `--report`, an HTML page ([`report`]).

use crate::bench::target::{interrupted, watch_interrupts};
use crate::error::CliError;
use crate::output::is_stdout;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tailguard::profile_file::{DeviceEntry, Knee, Metadata, ProfileFile, ProfileFormat, Rates};

pub mod knee;
pub mod measure;
pub mod report;
pub mod target;

use knee::{CurvePoint, FirstAndSteady};
use measure::{Pattern, Prober};
use target::{TargetKind, TargetOptions, TestFile};

/// Share of a curve's time that goes to the sweep.
const SWEEP_SHARE: f64 = 0.6;
/// Share of the whole budget the layout may take.
const LAYOUT_SHARE: f64 = 0.2;
/// Intervals of the sustained run's timeline.
const TIMELINE_INTERVALS: u32 = 20;

/// Arguments of `tailguard tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArguments {
    /// A directory (tune lays out its own file and removes it), a regular file
    /// (read tests only unless --allow-write), or a block device (with
    /// --allow-device; refused while mounted).
    pub path: PathBuf,
    /// The whole run, layout included: `60s`, `5s`, `2m`, `500ms`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Where the profile goes (`-`: standard output, and the charts and
    /// summary go to standard error).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// `toml` (tailguard's profile file) or `seastar` (io_properties.yaml).
    #[arg(long, default_value = "toml", value_parser = crate::flags::PROFILE_FORMAT)]
    pub format: ProfileFormat,
    /// Also write an HTML page with the curves as SVG (`-`: standard output).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Size of the file laid out in a directory (`1g`, `256m`); default 1 GiB
    /// or a quarter of the free space.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Allow a block device as PATH (reads only unless --allow-write).
    #[arg(long)]
    pub allow_device: bool,
    /// Run write tests on an existing file or device: overwrites its contents.
    #[arg(long)]
    pub allow_write: bool,
    /// Replace an existing --output or --report file.
    #[arg(long)]
    pub allow_overwrite: bool,
    /// Measure only these curves (comma-separated): random_read, random_write,
    /// sequential_read, sequential_write. The others get tailguard's default.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub curves: Vec<CurveKind>,
}

/// The curves tune measures (`--curves`), in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum CurveKind {
    /// Sequential reads: the read bandwidth.
    SequentialRead,
    /// Random 4 KiB reads: the read IOPS and the latency target.
    RandomRead,
    /// Sequential writes: the write bandwidth.
    SequentialWrite,
    /// Random 4 KiB writes: the write IOPS.
    RandomWrite,
}

impl CurveKind {
    /// Whether the curve writes.
    pub fn writes(self) -> bool {
        matches!(self, Self::SequentialWrite | Self::RandomWrite)
    }

    /// The curve's name on the command line and its knee's name in the
    /// profile file.
    pub fn name(self) -> &'static str {
        match self {
            Self::SequentialRead => "sequential_read",
            Self::RandomRead => "random_read",
            Self::SequentialWrite => "sequential_write",
            Self::RandomWrite => "random_write",
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, CliError> {
    let text = text.trim();
    let (number, unit_s) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1e-3)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        CliError::usage(format!(
            "`{text}` is not a duration; write 60s, 5s, 2m or 500ms"
        ))
    })?;
    let seconds = value * unit_s;
    if !(1.0..=86_400.0).contains(&seconds) {
        return Err(CliError::usage(format!(
            "--duration must be between 1 s and 24 h, got {seconds} s"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn parse_size(text: &str) -> Result<u64, CliError> {
    tailguard_sim::scenario::parse_bytes(text).map_err(CliError::usage)
}

/// What one curve is.
#[derive(Clone, Debug)]
pub struct CurveSpec {
    /// Which curve it is.
    pub kind: CurveKind,
    /// For people.
    pub title: String,
    /// Writes instead of reads.
    pub write: bool,
    /// Sequential instead of random.
    pub sequential: bool,
    /// Request size and depth of each sweep step.
    pub steps: Vec<(u64, u32)>,
}

impl CurveSpec {
    fn random(write: bool) -> Self {
        let direction = if write { "write" } else { "read" };
        Self {
            kind: if write {
                CurveKind::RandomWrite
            } else {
                CurveKind::RandomRead
            },
            title: format!("4 KiB random {direction}s"),
            write,
            sequential: false,
            steps: (0..9).map(|power| (4096, 1 << power)).collect(),
        }
    }

    fn sequential(write: bool) -> Self {
        let direction = if write { "write" } else { "read" };
        let mut steps: Vec<(u64, u32)> = [128u64, 256, 512, 1024]
            .iter()
            .map(|kib| (kib * 1024, 1))
            .collect();
        steps.extend((1..=5).map(|power| (1 << 20, 1 << power)));
        Self {
            kind: if write {
                CurveKind::SequentialWrite
            } else {
                CurveKind::SequentialRead
            },
            title: format!("sequential {direction}s, 128 KiB to 1 MiB"),
            write,
            sequential: true,
            steps,
        }
    }
}

/// How far above the device's own read floor the suggested latency target
/// sits: reads may wait for about one more read's worth of queued work.
const LATENCY_TARGET_FLOOR_MULTIPLE: f64 = 2.0;

/// The latency target tune suggests from the random-read curve: twice the p99
/// of a lone read (queue depth 1, the device's floor), but never below the
/// library's default (1 ms). Not the knee's p99: that is the latency of a
/// saturated device, the opposite of a goal. A floor
/// of several milliseconds (a rotating disk) gives a target to match, so the
/// budget still allows the concurrency the disk needs (Seastar issue #584).
///
/// A floor so slow that the target would pass the largest one tailguard takes
/// (60 s, a device that hardly answers) gets that largest one, and a note.
fn latency_target_us(random_read: &Curve, notes: &mut Vec<String>) -> Option<u64> {
    use tailguard_core::profile::LATENCY_TARGET_US_MAX;
    let floor = random_read
        .points
        .iter()
        .find(|point| point.queue_depth == 1)?;
    let suggested = (floor.latency_us_p99 * LATENCY_TARGET_FLOOR_MULTIPLE).ceil() as u64;
    if suggested > LATENCY_TARGET_US_MAX {
        notes.push(format!(
            "random_read: a lone read's p99 is {:.0} µs, so the suggested latency target \
             ({suggested} µs) is above the largest tailguard takes; {LATENCY_TARGET_US_MAX} µs \
             (60 s) is written instead",
            floor.latency_us_p99
        ));
    }
    Some(suggested.clamp(
        tailguard::profile_file::DEFAULT_LATENCY_TARGET_US,
        LATENCY_TARGET_US_MAX,
    ))
}

/// One measured curve.
#[derive(Clone, Debug)]
pub struct Curve {
    /// What was measured.
    pub spec: CurveSpec,
    /// The sweep.
    pub points: Vec<CurvePoint>,
    /// Index of the knee in `points`.
    pub knee: Option<usize>,
    /// Requests per second of each interval of the sustained run.
    pub timeline: Vec<f64>,
    /// Length of the sustained run, seconds.
    pub sustain_s: f64,
    /// Length of each interval of `timeline`, seconds.
    pub interval_s: f64,
    /// Length of each sweep step, seconds.
    pub step_s: f64,
    /// First and steady requests per second of the sustained run.
    pub rates: Option<FirstAndSteady>,
}

impl Curve {
    /// The knee's point.
    pub fn knee_point(&self) -> Option<&CurvePoint> {
        self.knee.map(|index| &self.points[index])
    }

    /// Factor from requests per second to the curve's unit (IOPS, or MB/s).
    pub fn sustain_scale(&self) -> f64 {
        match (self.spec.sequential, self.knee_point()) {
            (true, Some(point)) => point.request_bytes as f64 / 1e6,
            _ => 1.0,
        }
    }

    /// The rate the profile takes from the curve, in its unit (IOPS, or bytes
    /// per second): the sustained run's steady rate, or, where that is not
    /// usable (the steady half completed nothing) or there was no sustained
    /// run, the sweep's knee rate, with a note saying so in the first case.
    /// `None` when neither is usable.
    fn steady_profile_rate(&self, notes: &mut Vec<String>) -> Option<f64> {
        let steady = self.rates.and_then(|rates| self.profile_rate(rates.steady));
        if let Some(rate) = steady.filter(usable_rate) {
            return Some(rate);
        }
        let knee_iops = self.knee_point()?.iops;
        let knee = self.profile_rate(knee_iops).filter(usable_rate)?;
        if let Some(rates) = self.rates {
            notes.push(format!(
                "{}: the second half of the sustained run gave no usable rate ({:.1} \
                 requests/s); the sweep's knee rate ({knee_iops:.0} requests/s) is written instead",
                self.spec.kind.name(),
                rates.steady
            ));
        }
        Some(knee)
    }

    /// The rate of the sustained run's first fifth in the profile's unit (the
    /// knee's without a sustained run); `None` when not usable.
    fn first_profile_rate(&self) -> Option<f64> {
        let iops = self
            .rates
            .map(|rates| rates.first)
            .or(self.knee_point().map(|point| point.iops))?;
        self.profile_rate(iops).filter(usable_rate)
    }

    /// `iops` in the profile's unit: as is, or times the knee's request size
    /// (bytes per second) for a sequential curve.
    fn profile_rate(&self, iops: f64) -> Option<f64> {
        let point = self.knee_point()?;
        Some(if self.spec.sequential {
            iops * point.request_bytes as f64
        } else {
            iops
        })
    }

    /// Seconds of the sustained run the steady rate covers: `(from, to)`.
    pub fn steady_window_s(&self) -> Option<(f64, f64)> {
        knee::steady_window_s(self.timeline.len(), self.interval_s)
    }

    /// Which window each of the curve's numbers covers, with the fio options
    /// that measure the steady one (fio's `ramp_time` is left out of its
    /// report); `None` without a knee or a sustained run.
    pub fn window_note(&self) -> Option<String> {
        let point = self.knee_point()?;
        let (from_s, to_s) = self.steady_window_s()?;
        let first_to_s = (self.timeline.len() / 5).max(1) as f64 * self.interval_s;
        Some(format!(
            "{}: the knee (depth {} × {}) is the whole {:.2} s sweep step; the steady rate is \
             seconds {from_s:.2} to {to_s:.2} of the {:.2} s sustained run at the knee (fio: \
             iodepth={} bs={} ramp_time={from_s:.2}s runtime={:.2}s), the first rate its \
             seconds 0 to {first_to_s:.2}",
            self.spec.kind.name(),
            point.queue_depth,
            report::short_bytes(point.request_bytes),
            self.step_s,
            self.sustain_s,
            point.queue_depth,
            point.request_bytes,
            to_s - from_s,
        ))
    }

    fn knee_record(&self) -> Option<Knee> {
        let point = self.knee_point()?;
        let tenths = |value: f64| (value * 10.0).round() / 10.0;
        let mut knee = Knee::default();
        knee.request_bytes = point.request_bytes;
        knee.queue_depth = point.queue_depth;
        knee.in_flight_bytes = point.in_flight_bytes();
        knee.iops = point.iops.round();
        knee.bandwidth = point.bandwidth().round();
        knee.latency_us_p50 = tenths(point.latency_us_p50);
        knee.latency_us_p99 = tenths(point.latency_us_p99);
        Some(knee)
    }
}

/// The smallest rate a profile takes from a measurement: a lower one rounds to
/// zero requests (or bytes) per second, which the profile refuses.
const SMALLEST_RATE: f64 = 1.0;

fn usable_rate(rate: &f64) -> bool {
    *rate >= SMALLEST_RATE
}

/// Which curves the run may measure (`--allow-write`) and was asked to
/// (`--curves`; empty for all).
#[derive(Clone, Copy, Debug)]
struct Selection<'a> {
    writable: bool,
    only: &'a [CurveKind],
}

impl Selection<'_> {
    fn includes(&self, kind: CurveKind) -> bool {
        (self.writable || !kind.writes()) && (self.only.is_empty() || self.only.contains(&kind))
    }

    /// Why a curve the run did not measure is missing.
    fn why_unmeasured(&self, kind: CurveKind) -> &'static str {
        if !self.only.is_empty() && !self.only.contains(&kind) {
            "not measured (left out by --curves)"
        } else if kind.writes() && !self.writable {
            "not measured (a write curve, and the target is read-only; pass --allow-write to \
             measure it)"
        } else {
            "not measured"
        }
    }
}

/// Runs `tailguard tune`.
pub fn run(arguments: &TuneArguments) -> Result<(), CliError> {
    watch_interrupts();
    let format = arguments.format;
    let output = arguments.output.clone().unwrap_or_else(|| {
        PathBuf::from(match format {
            ProfileFormat::SeastarYaml => "io_properties.yaml",
            _ => "tailguard-profile.toml",
        })
    });
    if is_stdout(&output) && arguments.report.as_deref().is_some_and(is_stdout) {
        return Err(CliError::usage(
            "--output - and --report - both name standard output; give --report a file name",
        ));
    }
    // Both print to standard output for `-` (see `emit`).
    let mut outputs = vec![("--output", output.as_path(), true)];
    outputs.extend(
        arguments
            .report
            .as_deref()
            .map(|path| ("--report", path, true)),
    );
    crate::output::check_outputs(&outputs, arguments.allow_overwrite)?;
    let start = Instant::now();
    let budget = arguments.duration;
    let test = target::prepare(
        &arguments.path,
        &TargetOptions {
            size_bytes: arguments.size,
            allow_device: arguments.allow_device,
            allow_write: arguments.allow_write,
            layout_budget: budget.mul_f64(LAYOUT_SHARE),
        },
    )?;
    let curves = measure_curves(&test, selection(arguments, &test), budget, start)?;
    let elapsed_s = start.elapsed().as_secs_f64();
    for curve in &curves {
        say(arguments, &report::terminal_chart(curve));
    }
    let built = build_profile(arguments, &test, &curves, elapsed_s);
    let summary = match &built {
        Ok(profile) => summary_lines(&test, profile),
        Err(error) => vec![format!("no profile: {error}")],
    };
    for line in &summary {
        say(arguments, line);
    }
    write_outputs(arguments, &output, built, &summary, &curves)
}

/// Writes the profile to `output`, and the report (`--report`) also when the
/// profile could not be built: its curves show what went wrong. The
/// profile's error comes first.
fn write_outputs(
    arguments: &TuneArguments,
    output: &Path,
    built: Result<ProfileFile, CliError>,
    summary: &[String],
    curves: &[Curve],
) -> Result<(), CliError> {
    let written = built.and_then(|profile| write_profile(arguments, output, &profile));
    let reported = match &arguments.report {
        Some(path) => {
            let title = format!("tailguard tune: {}", arguments.path.display());
            let page = report::html_page(&title, summary, curves);
            emit(arguments, "--report", path, page.as_bytes())
        }
        None => Ok(()),
    };
    written.and(reported)
}

fn write_profile(
    arguments: &TuneArguments,
    output: &Path,
    profile: &ProfileFile,
) -> Result<(), CliError> {
    let format = arguments.format;
    let text = profile
        .to_string_in(format)
        .map_err(|error| CliError::usage(format!("cannot write {}: {error}", output.display())))?;
    emit(arguments, "--output", output, text.as_bytes())?;
    if format == ProfileFormat::SeastarYaml {
        for loss in profile.seastar_losses() {
            eprintln!("note: {loss}");
        }
    }
    Ok(())
}

/// Prints a line for people: to standard output, or to standard error when
/// standard output carries the profile or the report (`-`).
fn say(arguments: &TuneArguments, line: &str) {
    let outputs = [arguments.output.as_deref(), arguments.report.as_deref()];
    // Written, not printed: a closed terminal or pipe costs these lines,
    // never the measurement or the profile.
    let _ = if outputs.into_iter().flatten().any(is_stdout) {
        writeln!(std::io::stderr(), "{line}")
    } else {
        writeln!(std::io::stdout(), "{line}")
    };
}

/// Writes `bytes` for `flag` to `path`, or to standard output for `-`.
fn emit(arguments: &TuneArguments, flag: &str, path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    if is_stdout(path) {
        let mut stdout = std::io::stdout().lock();
        return stdout
            .write_all(bytes)
            .and_then(|()| stdout.flush())
            .map_err(|error| {
                CliError::usage(format!(
                    "cannot write {flag} to standard output: {error}; give {flag} a file name"
                ))
            });
    }
    crate::output::write_file(flag, path, bytes, arguments.allow_overwrite)?;
    let what = if flag == "--report" {
        "report"
    } else {
        "profile"
    };
    say(arguments, &format!("{what} written to {}", path.display()));
    Ok(())
}

fn progress_bar(budget: Duration) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:40}] {elapsed}/{msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

fn measure_curves(
    test: &TestFile,
    selection: Selection,
    budget: Duration,
    start: Instant,
) -> Result<Vec<Curve>, CliError> {
    let failed = |error: std::io::Error| {
        CliError::usage(format!("measuring {}: {error}", test.path.display()))
    };
    let file = test.file.try_clone().map_err(failed)?;
    let mut prober = Prober::new(file, test.size_bytes, test.alignment_bytes).map_err(failed)?;
    if prober.backend_kind() != tailguard::BackendKind::IoUring {
        eprintln!(
            "warning: io_uring is unavailable here; measuring through the thread pool instead"
        );
    }
    let specs: Vec<CurveSpec> = [
        CurveSpec::sequential(false),
        CurveSpec::random(false),
        CurveSpec::sequential(true),
        CurveSpec::random(true),
    ]
    .into_iter()
    .filter(|spec| selection.includes(spec.kind))
    .collect();
    if specs.is_empty() {
        return Err(CliError::usage(
            "--curves selects only write curves, and the target is read-only; pass --allow-write",
        ));
    }
    let bar = progress_bar(budget);
    let remaining = budget.saturating_sub(start.elapsed());
    let curve_budget = remaining / specs.len() as u32;
    let mut curves = Vec::new();
    for spec in specs {
        bar.set_message(format!("{} s  {}", budget.as_secs(), spec.title));
        let mut tick = || {
            bar.set_position(start.elapsed().as_millis() as u64);
            !interrupted()
        };
        curves.push(measure_curve(&mut prober, spec, curve_budget, &mut tick).map_err(failed)?);
        if interrupted() {
            bar.finish_and_clear();
            return Err(CliError::interrupted());
        }
    }
    bar.finish_and_clear();
    Ok(curves)
}

/// The sweep, then the sustained run at the knee; a `tick` that stops a step
/// ends the curve there, without the sustained run.
fn measure_curve(
    prober: &mut Prober,
    spec: CurveSpec,
    budget: Duration,
    tick: &mut dyn FnMut() -> bool,
) -> std::io::Result<Curve> {
    let curve_start = Instant::now();
    let step_time = budget.mul_f64(SWEEP_SHARE) / spec.steps.len() as u32;
    let mut points = Vec::new();
    let mut stopped = false;
    for &(request_bytes, queue_depth) in &spec.steps {
        let pattern = Pattern {
            write: spec.write,
            sequential: spec.sequential,
            request_bytes,
            queue_depth,
        };
        let result = prober.run(pattern, step_time, None, tick)?;
        stopped = result.stopped;
        points.push(CurvePoint {
            queue_depth,
            request_bytes,
            iops: result.iops(),
            latency_us_p50: result.latency_us(50.0),
            latency_us_p99: result.latency_us(99.0),
        });
        if knee::knee_index(&points).is_some() || stopped {
            break;
        }
    }
    let knee = knee::knee_or_candidate(&points);
    let mut curve = Curve {
        spec,
        points,
        knee,
        timeline: Vec::new(),
        sustain_s: 0.0,
        interval_s: 0.0,
        step_s: step_time.as_secs_f64(),
        rates: None,
    };
    // Stopped (Ctrl-C): no sustained run; the caller reports the stop.
    let Some(point) = curve.knee_point().copied().filter(|_| !stopped) else {
        return Ok(curve);
    };
    let sustain = budget.saturating_sub(curve_start.elapsed()).max(step_time);
    let interval = (sustain / TIMELINE_INTERVALS).max(Duration::from_millis(10));
    let pattern = Pattern {
        write: curve.spec.write,
        sequential: curve.spec.sequential,
        request_bytes: point.request_bytes,
        queue_depth: point.queue_depth,
    };
    let result = prober.run(pattern, sustain, Some(interval), tick)?;
    curve.sustain_s = result.elapsed_s;
    curve.interval_s = interval.as_secs_f64();
    curve.rates = knee::first_and_steady(&result.timeline_iops);
    curve.timeline = result.timeline_iops;
    Ok(curve)
}

fn find(curves: &[Curve], kind: CurveKind) -> Option<&Curve> {
    curves.iter().find(|curve| curve.spec.kind == kind)
}

fn build_profile(
    arguments: &TuneArguments,
    test: &TestFile,
    curves: &[Curve],
    elapsed_s: f64,
) -> Result<ProfileFile, CliError> {
    let mut notes = Vec::new();
    let uncalibrated = tailguard::scheduler::default_profile(&test.device);
    let mut entry = device_entry(
        &uncalibrated,
        curves,
        selection(arguments, test),
        &mut notes,
    );
    entry.latency_target_us =
        find(curves, CurveKind::RandomRead).and_then(|curve| latency_target_us(curve, &mut notes));
    let knee = |kind: CurveKind| find(curves, kind).and_then(Curve::knee_record);
    entry.knee.random_read = knee(CurveKind::RandomRead);
    entry.knee.random_write = knee(CurveKind::RandomWrite);
    entry.knee.sequential_read = knee(CurveKind::SequentialRead);
    entry.knee.sequential_write = knee(CurveKind::SequentialWrite);
    let mut profile = ProfileFile::new();
    let mut metadata = Metadata::default();
    metadata.tool = "tailguard tune".into();
    metadata.tool_version = env!("CARGO_PKG_VERSION").into();
    metadata.date = rfc3339_utc(SystemTime::now());
    metadata.target = target_description(&arguments.path);
    metadata.duration_s = Some((elapsed_s * 10.0).round() / 10.0);
    metadata.notes = notes;
    profile.metadata = Some(metadata);
    profile.devices.insert(test.device.name.clone(), entry);
    profile.resolve().map_err(|error| {
        CliError::usage(format!(
            "the measured profile is not usable ({error}); the device may have failed requests"
        ))
    })?;
    Ok(profile)
}

fn selection<'a>(arguments: &'a TuneArguments, test: &TestFile) -> Selection<'a> {
    Selection {
        writable: test.writable,
        only: &arguments.curves,
    }
}

/// The device's rates from the curves: the steady ones, and the first ones
/// (before any throttling). A curve without a usable rate gets the device's
/// `uncalibrated` default, and a note says why; a throttled curve gets a note.
fn device_entry(
    uncalibrated: &tailguard::Profile,
    curves: &[Curve],
    selection: Selection,
    notes: &mut Vec<String>,
) -> DeviceEntry {
    let rate = |kind: CurveKind, fallback: f64, notes: &mut Vec<String>| {
        let why = match find(curves, kind) {
            Some(curve) => match curve.steady_profile_rate(notes) {
                Some(rate) => return rate,
                None => "measured, but no request completed (no usable rate)",
            },
            None => selection.why_unmeasured(kind),
        };
        notes.push(format!(
            "{} {why}: tailguard's uncalibrated default is written instead",
            kind.name()
        ));
        fallback
    };
    let first_rate = |kind: CurveKind, fallback: f64| {
        find(curves, kind)
            .and_then(Curve::first_profile_rate)
            .unwrap_or(fallback)
    };
    let rates = Rates {
        read_iops: rate(CurveKind::RandomRead, uncalibrated.read_iops, notes),
        write_iops: rate(CurveKind::RandomWrite, uncalibrated.write_iops, notes),
        read_bandwidth: rate(
            CurveKind::SequentialRead,
            uncalibrated.read_bandwidth,
            notes,
        ),
        write_bandwidth: rate(
            CurveKind::SequentialWrite,
            uncalibrated.write_bandwidth,
            notes,
        ),
    };
    notes.extend(curves.iter().filter_map(Curve::window_note));
    for curve in curves {
        // A steady rate that is not usable is not the one used, and has its
        // own note.
        let steady_used = |rates: &FirstAndSteady| {
            curve
                .profile_rate(rates.steady)
                .is_some_and(|rate| usable_rate(&rate))
        };
        let throttled = curve.rates.filter(FirstAndSteady::throttled);
        if let Some(rates) = throttled.filter(steady_used) {
            notes.push(format!(
                "{} throttled: {:.0} requests/s first, {:.0} steady; the steady rate is used",
                curve.spec.title, rates.first, rates.steady
            ));
        }
    }
    let mut entry = DeviceEntry::from_rates(rounded(rates));
    entry.first = Some(rounded(Rates {
        read_iops: first_rate(CurveKind::RandomRead, rates.read_iops),
        write_iops: first_rate(CurveKind::RandomWrite, rates.write_iops),
        read_bandwidth: first_rate(CurveKind::SequentialRead, rates.read_bandwidth),
        write_bandwidth: first_rate(CurveKind::SequentialWrite, rates.write_bandwidth),
    }));
    entry.max_request_bytes = Some(uncalibrated.max_request_bytes);
    entry
}

/// Whole requests and bytes per second: more digits would be noise.
fn rounded(rates: Rates) -> Rates {
    Rates {
        read_iops: rates.read_iops.round(),
        write_iops: rates.write_iops.round(),
        read_bandwidth: rates.read_bandwidth.round(),
        write_bandwidth: rates.write_bandwidth.round(),
    }
}

/// The measured path, absolute; a directory's own file is not named since it
/// is gone, and Seastar's format uses this as the mountpoint.
fn target_description(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

fn summary_lines(test: &TestFile, profile: &ProfileFile) -> Vec<String> {
    let mut lines = Vec::new();
    let Some((name, entry)) = profile.devices.iter().next() else {
        return lines;
    };
    let what = match test.kind {
        TargetKind::Directory => "test file",
        TargetKind::RegularFile => "of file",
        TargetKind::BlockDevice => "of device",
    };
    lines.push(format!(
        "device {name} ({} MiB {what} {}): steady read {} IOPS, {} MB/s; write {} IOPS, {} MB/s",
        test.size_bytes >> 20,
        test.path.display(),
        report::short_number(entry.read_iops),
        report::short_number(entry.read_bandwidth / 1e6),
        report::short_number(entry.write_iops),
        report::short_number(entry.write_bandwidth / 1e6),
    ));
    if let Some(first) = entry.first {
        lines.push(format!(
            "first seconds: read {} IOPS, {} MB/s; write {} IOPS, {} MB/s",
            report::short_number(first.read_iops),
            report::short_number(first.read_bandwidth / 1e6),
            report::short_number(first.write_iops),
            report::short_number(first.write_bandwidth / 1e6),
        ));
    }
    for (what, knee) in [
        ("random read", entry.knee.random_read),
        ("random write", entry.knee.random_write),
        ("sequential read", entry.knee.sequential_read),
        ("sequential write", entry.knee.sequential_write),
    ] {
        if let Some(knee) = knee {
            lines.push(format!(
                "knee, {what}: depth {} × {} ({} in flight), p50 {:.0} µs, p99 {:.0} µs",
                knee.queue_depth,
                report::short_bytes(knee.request_bytes),
                report::short_bytes(knee.in_flight_bytes),
                knee.latency_us_p50,
                knee.latency_us_p99
            ));
        }
    }
    if let Some(metadata) = &profile.metadata {
        for note in &metadata.notes {
            lines.push(format!("note: {note}"));
        }
    }
    lines
}

/// `2025-01-31T12:00:00Z`.
fn rfc3339_utc(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|duration| duration.as_secs())
        .unwrap_or(0);
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_date(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar, counting in 400-year eras that start on March 1st.
fn civil_date(days_since_epoch: i64) -> (i64, u32, u32) {
    let shifted = days_since_epoch + 719_468; // days from 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_read_curve(floor_p99_us: &[(u32, f64)]) -> Curve {
        Curve {
            spec: CurveSpec::random(false),
            points: floor_p99_us
                .iter()
                .map(|&(queue_depth, latency_us_p99)| knee::CurvePoint {
                    queue_depth,
                    request_bytes: 4096,
                    iops: 1000.0 * f64::from(queue_depth),
                    latency_us_p50: latency_us_p99 / 2.0,
                    latency_us_p99,
                })
                .collect(),
            knee: None,
            timeline: Vec::new(),
            sustain_s: 0.0,
            interval_s: 0.0,
            step_s: 1.0,
            rates: None,
        }
    }

    #[test]
    fn a_curve_is_named_in_the_profile_as_on_the_command_line() {
        use clap::ValueEnum;
        for kind in CurveKind::value_variants() {
            assert_eq!(crate::flags::name_of(kind), kind.name());
        }
    }

    #[test]
    fn the_suggested_target_is_twice_the_lone_read_p99_and_at_least_the_default() {
        // An SSD: 109 µs alone, 5 ms at the knee: the library default, not 5 ms.
        let mut notes = Vec::new();
        let ssd = random_read_curve(&[(1, 109.0), (128, 5038.0)]);
        assert_eq!(latency_target_us(&ssd, &mut notes), Some(1_000));
        // A rotating disk: 20 ms alone: 40 ms, room for the depth it needs.
        let disk = random_read_curve(&[(1, 20_000.0), (4, 45_000.0)]);
        assert_eq!(latency_target_us(&disk, &mut notes), Some(40_000));
        // No lone-read point measured: no suggestion (the default applies).
        let none = random_read_curve(&[(2, 300.0)]);
        assert_eq!(latency_target_us(&none, &mut notes), None);
        assert_eq!(notes, Vec::<String>::new());
    }

    #[test]
    fn the_window_note_gives_the_steady_seconds_and_fio_options_to_match() {
        let mut curve = random_read_curve(&[(1, 100.0), (32, 400.0)]);
        curve.knee = Some(1);
        curve.step_s = 0.25;
        curve.timeline = vec![32_000.0; 20];
        curve.interval_s = 0.4;
        curve.sustain_s = 8.0;
        curve.rates = knee::first_and_steady(&curve.timeline);
        assert_eq!(curve.steady_window_s(), Some((4.0, 8.0)));
        let note = curve.window_note().expect("a knee and a sustained run");
        assert!(
            note.starts_with("random_read: the knee (depth 32 × 4 KiB)"),
            "{note}"
        );
        assert!(note.contains("whole 0.25 s sweep step"), "{note}");
        assert!(
            note.contains("seconds 4.00 to 8.00 of the 8.00 s"),
            "{note}"
        );
        assert!(
            note.contains("iodepth=32 bs=4096 ramp_time=4.00s runtime=4.00s"),
            "{note}"
        );
        assert!(note.contains("seconds 0 to 1.60"), "{note}");
        let chart = report::terminal_chart(&curve);
        assert!(chart.contains("(s 4.0-8.0 of 8.0)"), "{chart}");
        // No sustained run: no window to name.
        curve.timeline.clear();
        assert_eq!(curve.window_note(), None);
    }

    /// A curve of `spec` whose only point, its knee, ran `knee_iops`, and
    /// whose sustained run gave `first` and `steady` requests per second.
    fn measured(spec: CurveSpec, knee_iops: f64, first: f64, steady: f64) -> Curve {
        let (request_bytes, _) = spec.steps[0];
        Curve {
            spec,
            points: vec![knee::CurvePoint {
                queue_depth: 1,
                request_bytes,
                iops: knee_iops,
                latency_us_p50: 100.0,
                latency_us_p99: 200.0,
            }],
            knee: Some(0),
            timeline: vec![steady; 20],
            sustain_s: 8.0,
            interval_s: 0.4,
            step_s: 1.0,
            rates: Some(FirstAndSteady { first, steady }),
        }
    }

    fn note_on(notes: &[String], kind: CurveKind) -> &str {
        notes
            .iter()
            .find(|note| note.starts_with(kind.name()) && note.contains("default"))
            .unwrap_or_else(|| panic!("no note on {}: {notes:?}", kind.name()))
    }

    #[test]
    fn a_curve_not_measured_gets_a_note_with_the_real_reason() {
        let curves = [measured(
            CurveSpec::random(false),
            5_000.0,
            5_000.0,
            5_000.0,
        )];
        let selection = Selection {
            writable: false,
            only: &[CurveKind::RandomRead, CurveKind::RandomWrite],
        };
        let mut notes = Vec::new();
        let entry = device_entry(
            &tailguard::DEFAULT_SSD_PROFILE,
            &curves,
            selection,
            &mut notes,
        );
        assert_eq!(entry.read_iops, 5_000.0);
        let excluded = note_on(&notes, CurveKind::SequentialRead);
        assert!(excluded.contains("--curves"), "{excluded}");
        assert!(!excluded.contains("read-only"), "{excluded}");
        let read_only = note_on(&notes, CurveKind::RandomWrite);
        assert!(read_only.contains("--allow-write"), "{read_only}");
    }

    #[test]
    fn a_measured_curve_never_gets_the_default_silently() {
        let everything = Selection {
            writable: true,
            only: &[],
        };
        let curves = [
            // The steady half completed nothing: the knee's rate, noted.
            measured(CurveSpec::random(false), 5_000.0, 4_000.0, 0.0),
            // Rates that round to zero: unusable, so the default, noted.
            measured(CurveSpec::random(true), 0.2, 0.3, 0.3),
            measured(CurveSpec::sequential(false), 1_000.0, 1_000.0, 1_000.0),
            measured(CurveSpec::sequential(true), 500.0, 500.0, 500.0),
        ];
        let mut notes = Vec::new();
        let default = &tailguard::DEFAULT_SSD_PROFILE;
        let entry = device_entry(default, &curves, everything, &mut notes);
        assert_eq!(entry.read_iops, 5_000.0);
        assert!(
            notes
                .iter()
                .any(|note| note.starts_with("random_read") && note.contains("knee rate")),
            "{notes:?}"
        );
        assert!(
            !notes.iter().any(|note| note.contains("throttled")),
            "{notes:?}"
        );
        assert_eq!(entry.write_iops, default.write_iops);
        let unusable = note_on(&notes, CurveKind::RandomWrite);
        assert!(unusable.contains("no usable rate"), "{unusable}");
        // What the entry holds, the profile takes.
        let mut profile = ProfileFile::new();
        profile.devices.insert("vda".into(), entry);
        profile.resolve().expect("the measured entry resolves");
    }

    #[test]
    fn a_latency_target_past_the_largest_is_capped_with_a_note() {
        let mut notes = Vec::new();
        let hardly_answers = random_read_curve(&[(1, 40_000_000.0)]);
        assert_eq!(
            latency_target_us(&hardly_answers, &mut notes),
            Some(tailguard_core::profile::LATENCY_TARGET_US_MAX)
        );
        assert!(notes.iter().any(|note| note.contains("60 s")), "{notes:?}");
    }

    #[test]
    fn a_stop_during_the_sweep_skips_the_sustained_run() {
        use measure::hanging::{prober, HangingBackend};
        let mut prober = prober(HangingBackend::new(Duration::ZERO));
        let mut tick = || false;
        let curve = measure_curve(
            &mut prober,
            CurveSpec::random(false),
            Duration::from_secs(10),
            &mut tick,
        )
        .unwrap();
        assert_eq!(curve.points.len(), 1, "the sweep went on after the stop");
        assert!(curve.timeline.is_empty() && curve.rates.is_none());
        assert_eq!(curve.sustain_s, 0.0, "a sustained run began after the stop");
    }

    #[test]
    fn the_report_is_written_when_the_profile_is_not() {
        let directory =
            std::env::temp_dir().join(format!("tailguard-tune-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let report = directory.join("report.html");
        let output = directory.join("profile.toml");
        let arguments = TuneArguments {
            path: directory.clone(),
            duration: Duration::from_secs(60),
            output: Some(output.clone()),
            format: ProfileFormat::Toml,
            report: Some(report.clone()),
            size: None,
            allow_device: false,
            allow_write: false,
            allow_overwrite: false,
            curves: Vec::new(),
        };
        let failed = CliError::usage("the measured profile is not usable");
        let curves = [random_read_curve(&[(1, 100.0)])];
        let summary = ["no profile: the measured profile is not usable".to_string()];
        let result = write_outputs(&arguments, &output, Err(failed), &summary, &curves);
        let (report_written, profile_written) = (report.exists(), output.exists());
        std::fs::remove_dir_all(&directory).unwrap();
        assert!(result.unwrap_err().message.contains("not usable"));
        assert!(report_written, "no report");
        assert!(!profile_written);
    }

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(19_723), (2024, 1, 1));
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661);
        assert_eq!(rfc3339_utc(time), "2000-02-29T01:01:01Z");
    }

    #[test]
    fn durations_parse_with_units_and_bounds() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("0.5s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn sweeps_double_the_concurrency_each_step() {
        for spec in [CurveSpec::random(false), CurveSpec::sequential(true)] {
            let in_flight: Vec<u64> = spec
                .steps
                .iter()
                .map(|(bytes, depth)| bytes * u64::from(*depth))
                .collect();
            assert!(
                in_flight.windows(2).all(|pair| pair[1] == 2 * pair[0]),
                "{in_flight:?}"
            );
        }
        assert_eq!(CurveSpec::random(true).steps.last(), Some(&(4096, 256)));
    }
}
