//! `tailguard bench`: the job file's workload on a real target, compared across
//! modes (through tailguard, and plain kernel I/O direct or buffered).
//!
//! - [`job`]: the job file (a sim scenario with a `target` instead of devices).
//! - [`fio`]: `--fio FILE`, fio job files mapped onto the same job (groups,
//!   size-bounded jobs, several files and targets).
//! - [`target`]: checking the target, laying out and removing data files, Ctrl-C.
//! - [`driver`]: the real-time run loop and the three modes.
//! - [`shape`]: request sizes and offsets beyond a job's pattern (fio's
//!   `bssplit`, `percentage_random`, ...) and the checksummed blocks of
//!   `verify`.
//! - [`report`]: bench's JSON and table, with the driver's lateness named as
//!   such and the scheduler's own queue wait and device time.
//!
//! Runs are interleaved (A B A B with `--repeat 2`) so a drift of the device (its
//! write cache filling, thermal throttling) does not land on one mode only. Each
//! run (one mode's pass over every job group) starts from a settled target:
//! the data files are synced and dropped from the page cache first. The
//! `stonewall` groups within a run follow each other without settling, as
//! fio's do, so a kernel-buffered group may leave dirty pages to the next.

use crate::error::CliError;
use crate::progress::Progress;
use std::path::PathBuf;
use tailguard_sim::report::RunReport;

pub mod driver;
pub mod fio;
#[cfg(test)]
mod fuzz_tests;
pub mod job;
pub mod kernel_error;
pub mod limit;
pub mod report;
pub mod shape;
pub mod target;

/// The ways of doing the I/O that bench compares (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Through the scheduler, O_DIRECT, one class per job class.
    Tailguard,
    /// O_DIRECT straight to the kernel (io_uring), no scheduler.
    KernelDirect,
    /// `pread`/`pwrite` from threads: writes through the page cache (flushed by
    /// kernel writeback), reads O_DIRECT where the target takes it.
    KernelBuffered,
}

impl Mode {
    /// Every mode, in the default order.
    pub const ALL: [Mode; 3] = [Mode::Tailguard, Mode::KernelDirect, Mode::KernelBuffered];

    /// The mode's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tailguard => "tailguard",
            Self::KernelDirect => "kernel-direct",
            Self::KernelBuffered => "kernel-buffered",
        }
    }

    /// Whether it writes with O_DIRECT (and so needs a target that takes it).
    pub fn direct(self) -> bool {
        !matches!(self, Self::KernelBuffered)
    }
}

/// What `tailguard bench` prints (`--output-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// The table, histograms and timeline.
    #[default]
    Table,
    /// Bench's JSON (as `--json`).
    Json,
    /// fio's JSON schema ([`report::to_fio_json`]).
    FioJson,
}

/// `tailguard bench` arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("workload").required(true).args(["jobs", "fio"])))]
pub struct BenchArguments {
    /// The job file (TOML, like a sim scenario with `target = "PATH"` instead of
    /// devices; see docs/reference/bench-jobs.md). Or give --fio.
    pub jobs: Option<PathBuf>,
    /// Import the workload from a fio job file instead (every option mapped,
    /// emulated, ignored with a note or refused with why: see
    /// docs/reference/fio-import.md).
    #[arg(long, value_name = "FILE")]
    pub fio: Option<PathBuf>,
    /// The directory (data files are laid out in it and removed at the end),
    /// existing regular file, or block device (with --allow-device) to run on;
    /// overrides the job file's `target` (or the fio file's filename/directory).
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Modes to compare, comma-separated: tailguard, kernel-direct,
    /// kernel-buffered. Default: all three.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mode: Vec<Mode>,
    /// Runs per mode, interleaved (A B A B).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Print JSON instead of a table: an array with one run object per mode per
    /// repetition, in run order, with the mode in "policy" (the fields: see
    /// docs/reference/cli.md). The same as --output-format json.
    #[arg(long)]
    pub json: bool,
    /// What to print: `table` (the default), `json` (as --json), or
    /// `fio-json` (fio's JSON schema, so scripts built around fio's output
    /// read bench's runs; one --mode gives fio's one-run shape).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "table")]
    pub output_format: OutputFormat,
    /// Allow a block device as the target. Bench writes to it: the data on the
    /// device is destroyed. Refused while it is mounted or otherwise in use.
    #[arg(long)]
    pub allow_device: bool,
    /// Also write a self-contained HTML page (inline SVG charts: latency
    /// percentiles per mode, IOPS and max latency per second) to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Replace an existing --report file (checked before the run).
    #[arg(long)]
    pub allow_overwrite: bool,
    /// How `tailguard` mode configures its scheduler.
    #[command(flatten)]
    pub scheduler: driver::SchedulerSettings,
}

/// Runs `tailguard bench`.
pub fn run(arguments: &BenchArguments) -> Result<(), CliError> {
    target::watch_interrupts();
    let modes = selected_modes(arguments);
    let format = checked_format(arguments)?;
    let (mut job, source, source_argument) = load_job(arguments)?;
    let default_target = default_target(arguments, &mut job, &source)?;
    let target_shown = shown_targets(&job, default_target.as_deref());
    let mut layout = target::Layout::default();
    let plan = target::prepare_jobs(
        &mut job,
        default_target.as_deref(),
        arguments.allow_device,
        modes.iter().any(|mode| mode.direct()),
        &mut layout,
    )?;
    let runs = run_modes(&job, &plan, &modes, arguments, format)?;
    drop(layout);
    let command = reproduce_command(arguments, &source_argument, &modes);
    let header = format!(
        "{} — target {} (device {}), {}, seed {} (reproduce: {command})",
        source.display(),
        target_shown,
        plan.device_name,
        describe_duration(&job),
        job.scenario.seed,
    );
    write_results(arguments, format, &source, &header, &command, &runs)
}

/// The output format the flags ask for, after the checks that need no job:
/// a repeat count of at least 1, one format, a writable report path.
fn checked_format(arguments: &BenchArguments) -> Result<OutputFormat, CliError> {
    if arguments.repeat == 0 {
        return Err(CliError::usage("--repeat 0 runs nothing; give 1 or more"));
    }
    let format = match (arguments.json, arguments.output_format) {
        (true, OutputFormat::FioJson) => {
            return Err(CliError::usage(
                "--json and --output-format fio-json ask for two formats; give one",
            ))
        }
        (true, _) => OutputFormat::Json,
        (false, format) => format,
    };
    if let Some(path) = &arguments.report {
        crate::output::check_output("--report", path, arguments.allow_overwrite)?;
    }
    Ok(format)
}

/// The target of the jobs that name none: `--target` (which then overrides
/// every job's own, not only the file's) or the file's. An error naming the
/// fix when some job is left without one.
fn default_target(
    arguments: &BenchArguments,
    job: &mut job::BenchJob,
    source: &std::path::Path,
) -> Result<Option<PathBuf>, CliError> {
    if arguments.target.is_some() {
        for options in &mut job.job_options {
            options.target = None;
        }
    }
    let default_target = arguments.target.clone().or(job.target.clone());
    let untargeted =
        (0..job.scenario.jobs.len()).any(|index| job.options_of(index).target.is_none());
    if default_target.is_none() && untargeted {
        return Err(CliError::usage(format!(
            "{}: no target; {} or pass --target PATH (a directory, an existing regular file, or \
             a block device with --allow-device)",
            source.display(),
            if arguments.fio.is_some() {
                "add filename=PATH or directory=PATH to the fio file"
            } else {
                "add target = \"PATH\" to the job file"
            }
        )));
    }
    Ok(default_target)
}

/// The `tailguard bench` command line that reproduces this run.
fn reproduce_command(arguments: &BenchArguments, source_argument: &str, modes: &[Mode]) -> String {
    let mode_names: Vec<&str> = modes.iter().map(|mode| mode.name()).collect();
    format!(
        "tailguard bench {} {}--mode {} --repeat {}",
        source_argument,
        arguments
            .target
            .as_ref()
            .map_or_else(String::new, |path| format!(
                "--target {} ",
                crate::render::shell_quote_path(path)
            )),
        mode_names.join(","),
        arguments.repeat
    )
}

/// The modes `--mode` names (all three by default).
fn selected_modes(arguments: &BenchArguments) -> Vec<Mode> {
    if arguments.mode.is_empty() {
        Mode::ALL.to_vec()
    } else {
        arguments.mode.clone()
    }
}

/// The targets the jobs run on, for the report's header.
fn shown_targets(job: &job::BenchJob, default_target: Option<&std::path::Path>) -> String {
    let mut shown: Vec<String> = Vec::new();
    for index in 0..job.scenario.jobs.len() {
        let path = job.options_of(index).target;
        let path = path.as_deref().or(default_target);
        if let Some(path) = path.map(|path| path.display().to_string()) {
            if !shown.contains(&path) {
                shown.push(path);
            }
        }
    }
    shown.join(", ")
}

/// How long a run lasts: a time, or "until N bytes" for size-bounded jobs.
fn describe_duration(job: &job::BenchJob) -> String {
    let seconds = job.scenario.duration_ns as f64 / 1e9;
    let groups = job.groups().len();
    let bounded = job
        .job_options
        .iter()
        .any(|o| o.io_bytes_per_instance.is_some());
    let mut text = if bounded {
        format!("size-bounded jobs (at most {seconds} s)")
    } else {
        format!("{seconds} s per run")
    };
    if groups > 1 {
        text.push_str(&format!(", {groups} groups run one after another"));
    }
    text
}

/// Every run: per repetition, per mode (interleaved), each group in order.
fn run_modes(
    job: &job::BenchJob,
    plan: &target::Plan,
    modes: &[Mode],
    arguments: &BenchArguments,
    format: OutputFormat,
) -> Result<Vec<report::BenchRun>, CliError> {
    let groups = job.groups();
    let mut runs: Vec<report::BenchRun> = Vec::new();
    let run_count = arguments.repeat as usize * modes.len() * groups.len();
    let progress = Progress::new("tailguard bench");
    for repetition in 0..arguments.repeat {
        for &mode in modes {
            target::settle(plan)?;
            for (group, jobs) in groups.iter().enumerate() {
                let scenario = job.group_scenario(jobs);
                let group_plan = plan.of_jobs(jobs);
                let options: Vec<job::JobOptions> =
                    jobs.iter().map(|&index| job.options_of(index)).collect();
                let mut label = format!("run {}/{run_count}: {}", runs.len() + 1, mode.name());
                if groups.len() > 1 {
                    label.push_str(&format!(" group {group}"));
                }
                let bar = progress.start_run(&label, scenario.duration_ns);
                let mut run = driver::run(
                    &scenario,
                    &group_plan,
                    mode,
                    &arguments.scheduler,
                    scenario.seed,
                    &mut |elapsed_ns| bar.tick(elapsed_ns),
                    &options,
                )?;
                drop(bar);
                run.group = group;
                if format == OutputFormat::Table && (arguments.repeat > 1 || groups.len() > 1) {
                    run.report.policy =
                        run_label(mode, repetition, arguments.repeat, group, groups.len());
                }
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// A run's name in the table: the mode, its repetition, its group.
fn run_label(mode: Mode, repetition: u32, repeat: u32, group: usize, groups: usize) -> String {
    let mut label = mode.name().to_string();
    if repeat > 1 {
        label.push_str(&format!(" #{}", repetition + 1));
    }
    if groups > 1 {
        label.push_str(&format!(" g{group}"));
    }
    label
}

/// Prints the runs (table or JSON) and writes the HTML report.
fn write_results(
    arguments: &BenchArguments,
    format: OutputFormat,
    source: &std::path::Path,
    header: &str,
    command: &str,
    runs: &[report::BenchRun],
) -> Result<(), CliError> {
    let reports: Vec<RunReport> = runs.iter().map(|run| run.report.clone()).collect();
    if let Some(path) = &arguments.report {
        let notes = [
            format!("Command: {command}"),
            format!("{header}; modes interleaved in run order."),
        ];
        let title = format!("tailguard bench: {}", source.display());
        crate::html::write(path, &title, &notes, &reports, arguments.allow_overwrite)?;
        eprintln!("tailguard bench: wrote {}", path.display());
    }
    let text = match format {
        OutputFormat::Table => None,
        OutputFormat::Json => Some(report::to_json(runs)),
        OutputFormat::FioJson => Some(report::to_fio_json(runs)),
    };
    if let Some(text) = text {
        let text = text.map_err(|error| CliError::usage(error.to_string()))?;
        crate::output::print(&text)?;
        return Ok(());
    }
    // One text, printed at once: a closed standard output stops it with
    // its own status instead of a panic part-way.
    let mut out = format!("{header}\n");
    let groups = runs.iter().map(|run| run.group).max().unwrap_or(0) + 1;
    for group in 0..groups {
        let of_group: Vec<report::BenchRun> = runs
            .iter()
            .filter(|run| run.group == group)
            .cloned()
            .collect();
        if groups > 1 {
            out.push_str(&format!("group {group}:\n"));
        }
        out.push_str(&format!("{}\n", report::render_table(&of_group)));
    }
    out.push_str(&format!("{}\n", crate::render::render_histograms(&reports)));
    out.push_str(&crate::render::render_timeline(&reports));
    crate::output::print(&out)
}

/// Reads the workload from the job file or, with `--fio`, imports it from a fio
/// job file (printing the import's notes); returns it with its path and how to
/// name it on a command line.
fn load_job(arguments: &BenchArguments) -> Result<(job::BenchJob, PathBuf, String), CliError> {
    let failed = |error: tailguard_sim::ConfigError| CliError::usage(error.to_string());
    match (&arguments.fio, &arguments.jobs) {
        (Some(path), _) => {
            let imported = fio::FioImport::from_file(path).map_err(failed)?;
            for note in &imported.notes {
                eprintln!("tailguard bench: {}: {note}", path.display());
            }
            Ok((
                imported.job,
                path.clone(),
                format!("--fio {}", crate::render::shell_quote_path(path)),
            ))
        }
        (None, Some(path)) => {
            let job = job::BenchJob::from_file(path).map_err(failed)?;
            Ok((job, path.clone(), crate::render::shell_quote_path(path)))
        }
        (None, None) => Err(CliError::usage(
            "give a job file (tailguard bench JOBS.toml) or a fio job file (--fio FILE)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn a_mode_is_named_in_reports_as_on_the_command_line() {
        for mode in Mode::ALL {
            assert_eq!(crate::flags::name_of(&mode), mode.name());
        }
    }
}
