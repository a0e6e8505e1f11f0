//! `tailguard demo [DIR]`: seed 000 on this machine's disk, three ways, in one
//! command.
//!
//! The demo is three `tailguard bench` runs of an embedded job, on files it lays
//! out in a fresh directory (`DIR/tailguard-demo-PID`, `DIR` defaulting to the
//! current directory) and removes at the end, on errors and on Ctrl-C:
//!
//! 1. **alone**: 16 closed-loop 4 KiB random readers (queue depth 1 each, the
//!    seed's fio job) on a read file, O_DIRECT, no scheduler (`kernel-direct`):
//!    what the disk gives readers with nothing else going on;
//! 2. **kernel writeback**: the same readers beside a sequential 1 MiB writer
//!    (queue depth [`WRITE_QUEUE_DEPTH`]) writing through the page cache (`kernel-buffered`), so the
//!    kernel's flusher decides when and how much to send to the disk;
//! 3. **tailguard**: the same readers and writer through a `Scheduler`, the
//!    readers in a class of 400 shares, the writer in a background class of 100.
//!
//! Between the tailguard run and the writeback run, the demo traces a small
//! trade-off frontier with [`crate::frontier`]'s engine: the readers alone, the
//! same readers beside a writer at kernel O_DIRECT with a few static queue
//! depths and request sizes (no scheduler at all), and beside the writer
//! through tailguard, in shorter runs with the writer going from the start and
//! a write file of its own. Its second verdict line says whether tailguard
//! beats, ties or loses to the best static setting at the same disk write
//! rate, which is the alternative a storage engineer would try first, or
//! loses to a static setting that writes faster with the readers at least
//! as high ([`crate::frontier::analysis::compare`]).
//!
//! The writer starts a sixth of the way into each run, so the timeline shows the
//! readers before and after. For writeback to overlap the readers, the written
//! volume must exceed the kernel's dirty background threshold
//! (`vm.dirty_background_bytes`, else `vm.dirty_background_ratio` percent of
//! available memory) several times over: the write file is
//! [`THRESHOLD_MULTIPLE`] times the threshold, reserved with `fallocate`,
//! and capped at half the free space of `DIR` that the read file leaves (with a
//! note saying what that costs). It is then written once before the runs:
//! an O_DIRECT write into a reserved extent that was never written costs the
//! filesystem an extent conversion and journal work that a write over
//! written blocks does not, and the first run to write the file (tailguard's)
//! would pay it alone, its writer slower and its readers lower for the
//! seconds of its first pass. The runs go alone, tailguard, kernel writeback, so the dirty pages
//! of the last run are dropped with its file instead of being flushed first.
//!
//! The result prints side by side (read p99, p99.9, p99.99, max, worst 0.5 s
//! read rate, write MB/s as the writer saw it and as the disk's counters tell,
//! both over the span the writer runs), then the frontier's table, with a
//! verdict against writeback and one against the static settings, and the
//! whole report (bench's HTML page, [`crate::html`], with the frontier's
//! trade-off chart) goes to `tailguard-demo.html`. The default takes about three minutes, `--quick`
//! about one; `--duration-s` and `--size-mib` shrink it further for tests and
//! small disks.

use crate::bench::target::{self, Plan};
use crate::bench::{driver, job::BenchJob, job::JobOptions, Mode};
use crate::error::CliError;
use crate::frontier::analysis::Standing;
use crate::frontier::grid::{Grid, Setting};
use crate::frontier::measure::{self, Workload};
use crate::frontier::result::{FrontierResult, PointResult};
use crate::progress::Progress;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tailguard_sim::report::{human_duration, ClassReport, RunReport};
use tailguard_sim::scenario::Scenario;

/// How many times the dirty background threshold the writer's file holds.
pub const THRESHOLD_MULTIPLE: u64 = 3;
/// The demo's read class and write class names.
const READS: &str = "reads";
const WRITES: &str = "writes";
/// The classes' shares: the readers are the latency class, the writer the
/// background one. Shares decide only while both classes have requests
/// queued; 16 closed-loop readers seldom do, so on an uncalibrated device the
/// split is mostly set by how many writes the device budget keeps in flight.
const READ_SHARES: u32 = 400;
/// 1 MiB writes the writer keeps in flight, as the frontier's tailguard
/// writer: enough that it always has writes queued in tailguard (so the
/// budget, not its own depth, limits it); kernel writeback sends far more
/// at once whatever the depth.
const WRITE_QUEUE_DEPTH: u32 = crate::frontier::measure::TAILGUARD_WRITE_QUEUE_DEPTH;
const WRITE_SHARES: u32 = 100;
/// Smallest write file worth running: below this the demo refuses.
const WRITE_BYTES_MIN: u64 = 64 << 20;
const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

/// `tailguard demo` arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArguments {
    /// Where to lay out the demo's files (in a new subdirectory, removed at the
    /// end); default: the current directory. Put it on the disk to try.
    pub dir: Option<PathBuf>,
    /// About 1 minute instead of about 3 (shorter runs, a smaller read file,
    /// fewer static settings).
    #[arg(long)]
    pub quick: bool,
    /// Where to write the HTML report. Default: `tailguard-demo.html` in the
    /// current directory, or `tailguard-demo-N.html` with the first free N
    /// when that exists (a default name never replaces a file).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Replace an existing --report file (checked before the run).
    #[arg(long)]
    pub allow_overwrite: bool,
    /// Seconds of each run with writes (the solo run takes half); overrides the
    /// default (40) and --quick (12). For tests and impatient people.
    #[arg(long, value_name = "SECONDS")]
    pub duration_s: Option<f64>,
    /// Size both the read file and the write file at this many MiB instead of
    /// from memory and the dirty threshold. For tests and small disks: writes
    /// below the dirty background threshold will not show writeback. At most
    /// 16777216 (16 TiB).
    #[arg(long, value_name = "MIB")]
    pub size_mib: Option<u64>,
    /// How the tailguard run configures its scheduler.
    #[command(flatten)]
    pub scheduler: driver::SchedulerSettings,
}

/// The demo's sizes and durations.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sizing {
    read_bytes: u64,
    write_bytes: u64,
    /// Seconds of each run with writes.
    duration_s: f64,
    /// The dirty background threshold it was sized from, if known.
    threshold_bytes: Option<u64>,
}

/// Runs `tailguard demo`.
pub fn run(arguments: &DemoArguments) -> Result<(), CliError> {
    target::watch_interrupts();
    let (base, report_path) = checked_paths(arguments)?;
    let sizing = size_demo(arguments, &base)?;
    let directory = DemoDirectory::create(&base)?;
    describe_sizing(
        &sizing,
        &base,
        frontier_points(frontier_quick(arguments)).len(),
    );
    let mut layout = target::Layout::default();
    let setup = Setup::lay_out(&sizing, &directory.path, &mut layout)?;
    let measured = measure(arguments, &sizing, &directory.path, &setup, &mut layout)?;
    drop(layout);
    drop(directory);
    present(
        arguments,
        &report_path,
        &base,
        &sizing,
        &setup.read_plan.device_name,
        &measured,
    )
}

/// The directory the demo lays its files out in and the report's path, both
/// checked before anything is written.
fn checked_paths(arguments: &DemoArguments) -> Result<(PathBuf, PathBuf), CliError> {
    let base = arguments.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    if !base.is_dir() {
        return Err(CliError::usage(format!(
            "{} is not a directory; give an existing directory on the disk to try \
             (tailguard demo DIR), or none for the current one",
            base.display()
        )));
    }
    let report_path = match &arguments.report {
        Some(path) => path.clone(),
        None => default_report_path(Path::new(".")),
    };
    crate::output::check_output("--report", &report_path, arguments.allow_overwrite)?;
    Ok((base, report_path))
}

/// The three runs and the frontier, in an order that keeps writeback's dirty
/// pages out of the others: alone, tailguard, the frontier, then writeback.
fn measure(
    arguments: &DemoArguments,
    sizing: &Sizing,
    directory: &Path,
    setup: &Setup,
    layout: &mut target::Layout,
) -> Result<Measured, CliError> {
    let progress = Progress::new("tailguard demo");
    let run = |number: usize, name: &str, job: (&Scenario, &[JobOptions]), plan: &Plan, mode| {
        run_one(arguments, &progress, number, name, job, plan, mode)
    };
    let mixed = (&setup.mixed.scenario, setup.mixed.job_options.as_slice());
    let alone = run(
        1,
        "alone",
        (&setup.solo, &[]),
        &setup.read_plan,
        Mode::KernelDirect,
    )?;
    let tailguard = run(2, "tailguard", mixed, &setup.mixed_plan, Mode::Tailguard)?;
    let frontier = static_frontier(
        arguments,
        sizing,
        directory,
        &setup.read_plan,
        layout,
        &progress,
    )?;
    let writeback = run(
        3,
        "kernel writeback",
        mixed,
        &setup.mixed_plan,
        Mode::KernelBuffered,
    )?;
    // Shown in the order of the story: alone, the problem, the fix.
    let (reports, disk_writes) = [alone, writeback, tailguard].into_iter().unzip();
    Ok(Measured {
        reports,
        disk_writes,
        frontier,
    })
}

/// The demo's two workloads and where they run: the readers alone on the
/// read file, and the readers beside the writer (read file and write file).
struct Setup {
    solo: Scenario,
    read_plan: Plan,
    /// The readers beside the writer, with the writer's ring of buffers.
    mixed: BenchJob,
    mixed_plan: Plan,
}

impl Setup {
    /// Builds the workloads and lays out their files in `directory`.
    fn lay_out(
        sizing: &Sizing,
        directory: &Path,
        layout: &mut target::Layout,
    ) -> Result<Self, CliError> {
        let mut solo_job = demo_job(sizing, (sizing.duration_s / 2.0).max(0.5), false)?;
        let mixed = demo_job(sizing, sizing.duration_s, true)?;
        eprintln!(
            "tailguard demo: laying out a {:.0} MiB read file in {}",
            sizing.read_bytes as f64 / MIB as f64,
            directory.display()
        );
        let read_plan = target::prepare(&mut solo_job, directory, false, true, layout)?;
        let write_path = directory.join("writes.data");
        eprintln!(
            "tailguard demo: writing a {:.1} GiB write file once, so that no run pays for its \
             first writes",
            sizing.write_bytes as f64 / GIB
        );
        lay_out_write_file(&write_path, sizing.write_bytes)?;
        let mixed_plan = Plan {
            files: vec![read_plan.files[0].clone(), write_path],
            job_file: vec![0, 1],
            job_base: vec![0, 0],
            device_name: read_plan.device_name.clone(),
            alignment: read_plan.alignment,
        };
        Ok(Self {
            solo: solo_job.scenario,
            read_plan,
            mixed,
            mixed_plan,
        })
    }
}

/// Runs run `number` of 3, `name`, from a settled target: its report (named
/// `name`) and the disk's write rate meanwhile (MB/s, where the kernel tells).
fn run_one(
    arguments: &DemoArguments,
    progress: &Progress,
    number: usize,
    name: &str,
    (scenario, job_options): (&Scenario, &[JobOptions]),
    plan: &Plan,
    mode: Mode,
) -> Result<(RunReport, Option<f64>), CliError> {
    target::settle(plan)?;
    let label = if name == mode.name() {
        format!("run {number}/3: {name}")
    } else {
        format!("run {number}/3: {name} ({})", mode.name())
    };
    let bar = progress.start_run(&label, scenario.duration_ns);
    let device = plan.device_name.as_str();
    let mut disk_writes = measure::DiskWriteWindow::for_scenario(scenario);
    let mut report = driver::run(
        scenario,
        plan,
        mode,
        &arguments.scheduler,
        scenario.seed,
        &mut |elapsed| {
            bar.tick(elapsed);
            disk_writes.observe(elapsed, Instant::now(), || {
                measure::disk_sectors_written(device)
            });
        },
        job_options,
    )?
    .report;
    let disk_write = disk_writes.rate(measure::disk_sectors_written(device), Instant::now());
    drop(bar);
    report.policy = name.to_string();
    Ok((report, disk_write))
}

/// What the demo measured: the three runs (alone, kernel writeback,
/// tailguard), the disk's write rate in each, and the small frontier.
struct Measured {
    reports: Vec<RunReport>,
    disk_writes: Vec<Option<f64>>,
    frontier: FrontierResult,
}

/// Prints the tables and verdicts and writes the HTML report.
fn present(
    arguments: &DemoArguments,
    report_path: &Path,
    base: &Path,
    sizing: &Sizing,
    device: &str,
    measured: &Measured,
) -> Result<(), CliError> {
    let Measured {
        reports,
        disk_writes,
        frontier,
    } = measured;
    let duration_s = sizing.duration_s;
    let table = render_comparison(reports, disk_writes);
    let verdict = verdict(reports, disk_writes);
    let static_verdict = static_verdict(frontier);
    let notes = report_notes(
        arguments,
        base,
        sizing,
        device,
        measured,
        [&verdict, &static_verdict],
    );
    let page = crate::html::render_with_sections(
        "tailguard demo",
        &notes,
        &[crate::html::frontier::section(frontier)],
        reports,
    );
    // Another demo started in the same directory may have taken the
    // default name meanwhile: the next free one is this run's.
    let report_path = match &arguments.report {
        None if report_path.exists() => default_report_path(Path::new(".")),
        _ => report_path.to_path_buf(),
    };
    // The report first: a closed standard output ends the printing below,
    // and must not cost the run's page.
    crate::html::write_text(&report_path, &page, arguments.allow_overwrite)?;
    let header = format!(
        "tailguard demo on {} (device {}): 16 readers of 4 KiB at queue depth 1 on a {:.0} MiB \
         file; a 1 MiB sequential writer at queue depth {WRITE_QUEUE_DEPTH} on a {:.1} GiB file from \
         {:.1} s",
        base.display(),
        device,
        sizing.read_bytes as f64 / MIB as f64,
        sizing.write_bytes as f64 / GIB,
        writes_start_s(duration_s)
    );
    let statics = format!(
        "against static settings (kernel O_DIRECT, the writer at a fixed queue depth and request \
         size; readers and writer from the start, {} s per point, one round):",
        frontier.workload.duration_s
    );
    crate::output::print(&format!(
        "{header}\n{table}\n{}\n{statics}\n{}\nverdict: {verdict}\n\
         verdict against static settings: {static_verdict}\nreport: {}",
        crate::render::render_timeline(reports),
        crate::frontier::result::render_table(frontier),
        report_path.display()
    ))
}

/// The HTML report's notes: the command, the setup, the disk's write rates
/// and both verdicts.
fn report_notes(
    arguments: &DemoArguments,
    base: &Path,
    sizing: &Sizing,
    device: &str,
    measured: &Measured,
    [verdict, static_verdict]: [&str; 2],
) -> [String; 5] {
    let duration_s = sizing.duration_s;
    let (reports, disk_writes) = (&measured.reports, &measured.disk_writes);
    [
        format!("Command: {}", command_line(arguments)),
        format!(
            "Target {} (device {}). Readers: 16 closed-loop 4 KiB random readers, queue depth 1, \
             on a {:.0} MiB file, O_DIRECT. Writer: 1 MiB sequential writes, queue depth {WRITE_QUEUE_DEPTH}, on a \
             {:.1} GiB file, from {:.1} s; through the page cache (kernel writeback) or through \
             tailguard in a background class (shares: reads {READ_SHARES}, writes {WRITE_SHARES}).",
            base.display(),
            device,
            sizing.read_bytes as f64 / MIB as f64,
            sizing.write_bytes as f64 / GIB,
            writes_start_s(duration_s)
        ),
        format!(
            "Bytes written to the disk per second during each run (/sys/block/{}/stat; buffered \
             writes count once the kernel's writeback sends them): {}.",
            device,
            reports
                .iter()
                .zip(disk_writes)
                .map(|(report, rate)| match rate {
                    Some(rate) => format!("{} {rate:.0} MB/s", report.policy),
                    None => format!("{} unknown", report.policy),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!("Verdict: {verdict}"),
        format!("Verdict against static settings: {static_verdict}"),
    ]
}

/// The static queue depths of the demo's frontier.
const FRONTIER_DEPTHS: [u32; 2] = [1, 2];
/// The static request sizes of the demo's frontier.
const FRONTIER_SIZES: [u64; 3] = [128 << 10, 256 << 10, 1 << 20];
/// `--quick`'s (and a shortened demo's) static request sizes.
const FRONTIER_SIZES_QUICK: [u64; 2] = [128 << 10, 1 << 20];
/// The longest frontier point, in seconds: the frontier runs several of them,
/// so each is shorter than the demo's main runs.
const FRONTIER_POINT_S_MAX: f64 = 8.0;

/// The points of the demo's frontier: solo, a few static settings, and
/// tailguard as the demo configures it.
/// `tailguard-demo.html` in `dir`, or `tailguard-demo-N.html` with the first
/// free N from 2: a default name never replaces a file.
fn default_report_path(dir: &Path) -> PathBuf {
    let first = dir.join("tailguard-demo.html");
    if !first.exists() {
        return first;
    }
    (2u32..)
        .map(|number| dir.join(format!("tailguard-demo-{number}.html")))
        .find(|path| !path.exists())
        .expect("a free name below 2^32")
}

fn frontier_points(quick: bool) -> Vec<Setting> {
    Grid {
        depths: FRONTIER_DEPTHS.to_vec(),
        sizes_bytes: if quick {
            FRONTIER_SIZES_QUICK.to_vec()
        } else {
            FRONTIER_SIZES.to_vec()
        },
        latency_targets_us: Vec::new(),
        adaptive: false,
    }
    .points()
}

/// Whether the demo's frontier tries `--quick`'s fewer static settings: with
/// `--quick`, with `--size-mib`, and with runs of under 20 s by
/// `--duration-s` (half the default's, above `--quick`'s).
fn frontier_quick(arguments: &DemoArguments) -> bool {
    arguments.quick
        || arguments.size_mib.is_some()
        || arguments.duration_s.is_some_and(|seconds| seconds < 20.0)
}

/// Seconds of each frontier point in a demo whose runs with writes last
/// `duration_s`.
fn frontier_point_s(duration_s: f64) -> f64 {
    (duration_s / 4.0).clamp(1.0, FRONTIER_POINT_S_MAX)
}

/// Runs the demo's small frontier ([`crate::frontier`]) on the read file and
/// a write file of its own (laid out and filled in `directory/frontier`, so
/// every point overwrites written blocks).
fn static_frontier(
    arguments: &DemoArguments,
    sizing: &Sizing,
    directory: &Path,
    read_plan: &Plan,
    layout: &mut target::Layout,
    progress: &Progress,
) -> Result<FrontierResult, CliError> {
    let workload = Workload::with_demo_readers(
        sizing.read_bytes,
        sizing.read_bytes,
        frontier_point_s(sizing.duration_s),
    );
    let writer_directory = directory.join("frontier");
    std::fs::create_dir(&writer_directory).map_err(|error| {
        CliError::usage(format!(
            "cannot create {}: {error}",
            writer_directory.display()
        ))
    })?;
    let mut writer_job = BenchJob::from_toml(&format!(
        "duration_s = 1\n[[class]]\nname = \"{WRITES}\"\nshares = {WRITE_SHARES}\n\
         [[job]]\nname = \"writer\"\nclass = \"{WRITES}\"\npattern = \"seqwrite\"\n\
         block_size = \"1m\"\nsize = {}\n",
        workload.write_bytes
    ))
    .map_err(|error| CliError::usage(format!("the demo's frontier writer: {error}")))?;
    let writer_plan = target::prepare(&mut writer_job, &writer_directory, false, true, layout)?;
    let plan = Plan {
        files: vec![read_plan.files[0].clone(), writer_plan.files[0].clone()],
        job_file: vec![0, 1],
        job_base: vec![0, 0],
        device_name: read_plan.device_name.clone(),
        alignment: read_plan.alignment,
    };
    let points = frontier_points(frontier_quick(arguments));
    crate::frontier::trace(
        &points,
        &workload,
        &plan,
        &arguments.scheduler,
        1,
        progress,
        format!("{} (its frontier)", command_line(arguments)),
    )
}

/// How tailguard's point of the demo's frontier stands against the static
/// settings: beats, ties or loses to the best one at its write rate, with the
/// numbers.
pub fn static_verdict(frontier: &FrontierResult) -> String {
    let Some(point) = frontier.tailguards().next() else {
        return "incomplete: the frontier has no tailguard point".into();
    };
    let Some(versus) = &point.versus_static else {
        return "incomplete: tailguard's point was not compared".into();
    };
    let ours = |point: &PointResult| {
        format!(
            "{:.2} of solo at {:.0} MB/s",
            point.worst_500ms_over_solo.median, point.write_mb_per_s.median
        )
    };
    let theirs = format!(
        "{} ({:.2} of solo at {:.0} MB/s)",
        versus.static_point.as_deref().unwrap_or("?"),
        versus.static_worst_500ms_over_solo.unwrap_or(f64::NAN),
        versus.static_write_mb_per_s.unwrap_or(f64::NAN),
    );
    let difference = versus.worst_500ms_difference.unwrap_or(f64::NAN);
    let line = match (versus.standing, versus.same_rate) {
        (Standing::Beats, _) => format!(
            "tailguard beats the best static setting at its write rate: readers' worst 0.5 s \
             rate {} against {theirs}, {difference:+.2}",
            ours(point)
        ),
        (Standing::Ties, _) => format!(
            "tailguard ties with the best static setting at its write rate: readers' worst \
             0.5 s rate {} against {theirs}, {difference:+.2}",
            ours(point)
        ),
        (Standing::Loses, true) => format!(
            "tailguard loses to the best static setting at its write rate: readers' worst \
             0.5 s rate {} against {theirs}, {difference:+.2}",
            ours(point)
        ),
        (Standing::Loses, false) => format!(
            "tailguard loses: {theirs} writes faster and keeps the readers at least as high \
             as tailguard ({})",
            ours(point)
        ),
        (Standing::Unmatched, _) => match versus.frontier_worst_500ms_at_rate {
            Some(line) => format!(
                "no static setting tried writes within ±10% of tailguard ({}); the line \
                 joining the static settings around it is at {line:.2} there, {:+.2}; \
                 `tailguard frontier` tries more settings",
                ours(point),
                point.worst_500ms_over_solo.median - line
            ),
            None => format!(
                "no static setting tried writes within ±10% of tailguard ({}), and none writes \
                 faster with the readers as high; `tailguard frontier` tries more settings",
                ours(point)
            ),
        },
    };
    format!(
        "{line} (differences within {:.2} count as ties; one round of {} s points, so \
         noisy: `tailguard frontier --rounds 3` measures the whole curve)",
        frontier.tie_tolerance, frontier.workload.duration_s
    )
}

/// The command that reproduces this run.
fn command_line(arguments: &DemoArguments) -> String {
    let mut command = String::from("tailguard demo");
    if let Some(dir) = &arguments.dir {
        let _ = write!(command, " {}", crate::render::shell_quote_path(dir));
    }
    if arguments.quick {
        command.push_str(" --quick");
    }
    if let Some(seconds) = arguments.duration_s {
        let _ = write!(command, " --duration-s {seconds}");
    }
    if let Some(mib) = arguments.size_mib {
        let _ = write!(command, " --size-mib {mib}");
    }
    command
}

/// The demo's own directory, removed with everything in it when dropped.
struct DemoDirectory {
    path: PathBuf,
    /// The directory, open: its `flock` marks it as this run's
    /// ([`crate::lifecycle`]) until the directory is removed.
    _held: std::fs::File,
}

impl DemoDirectory {
    /// Removes what killed demos left in `base`, then creates and holds this
    /// run's directory.
    fn create(base: &Path) -> Result<Self, CliError> {
        crate::lifecycle::note_leftovers(base);
        let path = base.join(format!("tailguard-demo-{}", std::process::id()));
        let failed = |error: std::io::Error| {
            CliError::usage(format!(
                "cannot create {}: {error}; give a writable directory (tailguard demo DIR)",
                path.display()
            ))
        };
        std::fs::create_dir(&path).map_err(failed)?;
        let held = std::fs::File::open(&path).and_then(|directory| {
            crate::lifecycle::hold(&directory)?;
            Ok(directory)
        });
        match held {
            Ok(held) => Ok(Self { path, _held: held }),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&path);
                Err(failed(error))
            }
        }
    }
}

impl Drop for DemoDirectory {
    fn drop(&mut self) {
        // After a stop signal, large files go in the background.
        crate::lifecycle::remove_paths(std::slice::from_ref(&self.path));
    }
}

/// When the writer starts in a run of `duration_s`.
fn writes_start_s(duration_s: f64) -> f64 {
    (duration_s / 6.0 * 10.0).round() / 10.0
}

/// The kernel's dirty background threshold: `dirty_background_bytes` when set,
/// else `dirty_background_ratio` percent of `available_bytes`.
pub fn dirty_background_threshold(
    background_bytes: u64,
    background_ratio: u64,
    available_bytes: u64,
) -> u64 {
    if background_bytes > 0 {
        background_bytes
    } else {
        available_bytes / 100 * background_ratio
    }
}

fn read_proc_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// MemAvailable from /proc/meminfo, in bytes.
fn available_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text
        .lines()
        .find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes an unprivileged writer can still use on the filesystem of `path`.
fn free_bytes(path: &Path) -> Result<u64, CliError> {
    use std::os::unix::ffi::OsStrExt as _;
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(CliError::usage(format!(
            "{}: a path with a NUL byte",
            path.display()
        )));
    }
    let stats = rustix::fs::statvfs(path).map_err(|error| {
        CliError::usage(format!(
            "cannot read the free space of {}: {}",
            path.display(),
            std::io::Error::from(error)
        ))
    })?;
    Ok(stats.f_bavail * stats.f_frsize)
}

/// Sizes the write file from the dirty threshold and the free space, and the
/// runs from the flags.
fn size_demo(arguments: &DemoArguments, base: &Path) -> Result<Sizing, CliError> {
    let duration_s = demo_duration_s(arguments)?;
    if let Some(mib) = arguments.size_mib {
        if mib == 0 {
            return Err(CliError::usage("--size-mib 0: give 1 or more"));
        }
        let file_bytes = crate::frontier::file_bytes(mib)?;
        return Ok(Sizing {
            read_bytes: file_bytes,
            write_bytes: file_bytes,
            duration_s,
            threshold_bytes: None,
        });
    }
    let read_bytes = if arguments.quick {
        512 * MIB
    } else {
        1024 * MIB
    };
    let threshold = dirty_threshold_bytes()?;
    let wanted = (THRESHOLD_MULTIPLE * threshold).div_ceil(MIB) * MIB;
    let free = free_bytes(base)?;
    let room = free.saturating_sub(read_bytes) / 2 / MIB * MIB;
    if room < WRITE_BYTES_MIN {
        return Err(CliError::usage(format!(
            "{} has {:.1} GiB free; the demo needs a {:.1} GiB read file plus room to write \
             (it uses at most half the free space); free some space or give a DIR on another \
             filesystem",
            base.display(),
            free as f64 / GIB,
            read_bytes as f64 / GIB
        )));
    }
    let write_bytes = wanted.min(room);
    if write_bytes < wanted {
        warn_of_smaller_writes(base, free, write_bytes, wanted, threshold);
    }
    Ok(Sizing {
        read_bytes,
        write_bytes,
        duration_s,
        threshold_bytes: Some(threshold),
    })
}

/// Seconds of each run with writes: `--duration-s`, else by `--quick`.
fn demo_duration_s(arguments: &DemoArguments) -> Result<f64, CliError> {
    match arguments.duration_s {
        Some(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 3_600.0 => Ok(seconds),
        Some(seconds) => Err(CliError::usage(format!(
            "--duration-s {seconds}: give seconds in (0, 3600]"
        ))),
        None if arguments.quick => Ok(12.0),
        None => Ok(40.0),
    }
}

/// The kernel's dirty background threshold, from /proc.
fn dirty_threshold_bytes() -> Result<u64, CliError> {
    match (
        read_proc_number("/proc/sys/vm/dirty_background_bytes"),
        read_proc_number("/proc/sys/vm/dirty_background_ratio"),
        available_memory_bytes(),
    ) {
        (Some(bytes), Some(ratio), Some(available)) => {
            Ok(dirty_background_threshold(bytes, ratio, available))
        }
        _ => Err(CliError::usage(
            "cannot read vm.dirty_background_bytes/ratio or MemAvailable from /proc, which \
             size the writes; pass --size-mib N to size them yourself",
        )),
    }
}

/// Says that the filesystem's free space cuts the write file below what
/// shows writeback best, and what that costs.
fn warn_of_smaller_writes(base: &Path, free: u64, write_bytes: u64, wanted: u64, threshold: u64) {
    eprintln!(
        "note: {} has {:.1} GiB free; writing {:.1} GiB instead of {:.1} GiB ({}x the dirty \
             background threshold of {:.1} GiB), so writeback may overlap the readers for less \
             time{}; free some space or give a DIR on a bigger filesystem",
        base.display(),
        free as f64 / GIB,
        write_bytes as f64 / GIB,
        wanted as f64 / GIB,
        THRESHOLD_MULTIPLE,
        threshold as f64 / GIB,
        if write_bytes <= threshold {
            " (or not at all: the file fits under the threshold)"
        } else {
            ""
        }
    );
}

fn describe_sizing(sizing: &Sizing, base: &Path, frontier_runs: usize) {
    let point_s = frontier_point_s(sizing.duration_s);
    let frontier = format!("then {frontier_runs} runs of {point_s:.0} s against static settings");
    match sizing.threshold_bytes {
        Some(threshold) => eprintln!(
            "tailguard demo: dirty background threshold {:.1} GiB; write file {:.1} GiB in {}; \
             runs of {:.0} s alone, {:.0} s with writes, {frontier} (about {:.0} s in all)",
            threshold as f64 / GIB,
            sizing.write_bytes as f64 / GIB,
            base.display(),
            (sizing.duration_s / 2.0).max(0.5),
            sizing.duration_s,
            sizing.duration_s * 2.5 + 5.0 + frontier_runs as f64 * (point_s + 0.5)
        ),
        None => eprintln!(
            "tailguard demo: files of {} MiB (--size-mib); runs of {} s, {frontier}",
            sizing.read_bytes / MIB,
            sizing.duration_s
        ),
    }
}

/// The embedded job: readers, and with `writes` the writer.
fn demo_job(sizing: &Sizing, duration_s: f64, writes: bool) -> Result<BenchJob, CliError> {
    let mut text = format!(
        "duration_s = {duration_s}\nseed = 1\n\
         [[class]]\nname = \"{READS}\"\nshares = {READ_SHARES}\n\
         [[job]]\nname = \"readers\"\nclass = \"{READS}\"\npattern = \"randread\"\n\
         block_size = \"4k\"\nqueue_depth = 1\nnumjobs = 16\nsize = {}\n",
        sizing.read_bytes
    );
    if writes {
        let _ = write!(
            text,
            "[[class]]\nname = \"{WRITES}\"\nshares = {WRITE_SHARES}\n\
             [[job]]\nname = \"writer\"\nclass = \"{WRITES}\"\npattern = \"seqwrite\"\n\
             block_size = \"1m\"\nqueue_depth = {WRITE_QUEUE_DEPTH}\nstart_s = {}\nsize = {}\n\
             write_buffers = {}\n",
            writes_start_s(duration_s),
            sizing.write_bytes,
            crate::frontier::measure::WRITE_BUFFER_BYTES
        );
    }
    BenchJob::from_toml(&text)
        .map_err(|error| CliError::usage(format!("the demo's embedded job: {error}")))
}

/// Creates `path` with `bytes` reserved, then written with data and made
/// durable (see the module docs), and drops its pages from the cache.
fn lay_out_write_file(path: &Path, bytes: u64) -> Result<(), CliError> {
    let file = preallocate(path, bytes)?;
    target::fill(&file, 0, bytes, path)?;
    crate::lifecycle::sync_data_interruptibly(&file, path)?;
    // Advice only: a failure leaves the pages cached, which settling drops.
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    Ok(())
}

/// Creates `path` with `bytes` reserved (unwritten extents) and returns it
/// open for writing.
fn preallocate(path: &Path, bytes: u64) -> Result<std::fs::File, CliError> {
    let failed = |error: std::io::Error| {
        CliError::usage(format!(
            "cannot reserve {:.1} GiB for {}: {error}; free some space, give a DIR on another \
             filesystem, or pass --size-mib N",
            bytes as f64 / GIB,
            path.display()
        ))
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(failed)?;
    match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, bytes) {
        Ok(()) => {}
        // Filesystems without fallocate: the writing fills a sparse file.
        Err(rustix::io::Errno::OPNOTSUPP) => file.set_len(bytes).map_err(failed)?,
        Err(error) => return Err(failed(error.into())),
    }
    Ok(file)
}

/// A read latency of a run, or `-` when it has no reads.
fn read_latency(report: &RunReport, value: fn(&ClassReport) -> f64) -> String {
    row(report, READS).map_or_else(|| "-".to_string(), |row| human_duration(value(row)))
}

fn row<'a>(report: &'a RunReport, class: &str) -> Option<&'a ClassReport> {
    report.classes.iter().find(|row| row.name == class)
}

/// The three runs side by side: read latency and rates, write rates (as the
/// writer saw them, and as the disk did: `disk_writes`, MB/s per run).
pub fn render_comparison(reports: &[RunReport], disk_writes: &[Option<f64>]) -> String {
    type Cell = fn(&RunReport) -> String;
    let lines: [(&str, Cell); 7] = [
        ("read p99", |report| {
            read_latency(report, |row| row.latency_us.p99)
        }),
        ("read p99.9", |report| {
            read_latency(report, |row| row.latency_us.p999)
        }),
        ("read p99.99", |report| {
            read_latency(report, |row| row.latency_us.p9999)
        }),
        ("read max", |report| {
            read_latency(report, |row| row.latency_us.max)
        }),
        ("read IOPS (mean)", |report| {
            row(report, READS).map_or_else(|| "-".into(), |row| format!("{:.0}", row.iops))
        }),
        ("read worst 0.5 s", |report| {
            row(report, READS)
                .and_then(|row| row.worst_500ms_iops)
                .map_or_else(|| "-".into(), |iops| format!("{iops:.0}/s"))
        }),
        ("write MB/s (app)", |report| {
            row(report, WRITES).map_or_else(|| "-".into(), |row| format!("{:.0}", row.mb_per_s))
        }),
    ];
    let width = reports
        .iter()
        .map(|report| report.policy.chars().count())
        .max()
        .unwrap_or(0)
        .max(10)
        + 2;
    let mut out = String::new();
    let _ = write!(out, "{:18}", "");
    for report in reports {
        let _ = write!(out, "{:>width$}", report.policy);
    }
    out.push('\n');
    for (label, cell) in lines {
        let _ = write!(out, "{label:18}");
        for report in reports {
            let _ = write!(out, "{:>width$}", cell(report));
        }
        out.push('\n');
    }
    let _ = write!(out, "{:18}", "disk writes MB/s");
    for index in 0..reports.len() {
        let cell = disk_writes
            .get(index)
            .copied()
            .flatten()
            .map_or_else(|| "-".into(), |rate| format!("{rate:.0}"));
        let _ = write!(out, "{cell:>width$}");
    }
    out.push('\n');
    out
}

/// The percentage `part` is of `whole` (0 when `whole` is not positive).
fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// A percentage with one decimal below 10 (so 0.3% does not read as 0%).
fn short_percent(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// The verdict's opening, from the readers' worst 0.5 s rates beside
/// writeback and through tailguard and tailguard's writes, all as
/// percentages (of solo, of writeback's writes). Readers kept at half their
/// solo rate or more count as kept going; tailguard reading 5 points or more
/// under writeback counts as worse, and writing less than half of
/// writeback's as a cost worth naming, since either alone can make a
/// scheduler look good.
fn outcome(kernel_share: f64, guarded_share: f64, write_share: f64) -> &'static str {
    let writes_short = write_share < 50.0;
    if kernel_share >= 50.0 && guarded_share + 5.0 <= kernel_share {
        "kernel writeback did not stall the readers on this disk this time (a fast disk, or a \
         large dirty threshold), and tailguard left them less than writeback did"
    } else if kernel_share >= 50.0 {
        "kernel writeback did not stall the readers on this disk this time (a fast disk, or a \
         large dirty threshold)"
    } else if guarded_share >= 50.0 && writes_short {
        "tailguard kept the readers going where kernel writeback stalled them, but wrote less \
         than half as much"
    } else if guarded_share >= 50.0 {
        "tailguard kept the readers going where kernel writeback stalled them"
    } else if guarded_share >= 2.0 * kernel_share {
        "tailguard eased the stall kernel writeback caused, but the readers still fell below \
         half their solo rate"
    } else {
        "tailguard did not spare the readers here"
    }
}

/// One line: how far the readers fell beside each kind of writes, and what the
/// writes got. `reports` are alone, kernel writeback, tailguard; the writes are
/// compared by what reached the disk (`disk_writes`) when known, since buffered
/// writes that only reached the page cache are not written yet.
pub fn verdict(reports: &[RunReport], disk_writes: &[Option<f64>]) -> String {
    let [alone, writeback, tailguard] = reports else {
        return "incomplete: the demo needs its three runs".into();
    };
    let (Some(solo), Some(kernel), Some(guarded)) = (
        row(alone, READS),
        row(writeback, READS),
        row(tailguard, READS),
    ) else {
        return "incomplete: a run has no reads".into();
    };
    let solo_iops = solo.iops;
    let worst = |row: &ClassReport| row.worst_500ms_iops.unwrap_or(row.iops);
    let kernel_share = percent(worst(kernel), solo_iops);
    let guarded_share = percent(worst(guarded), solo_iops);
    let app_rate = |report: &RunReport| row(report, WRITES).map_or(0.0, |row| row.mb_per_s);
    let (write_share, measured) = match (disk_writes.get(1), disk_writes.get(2)) {
        (Some(Some(kernel_disk)), Some(Some(guarded_disk))) => {
            (percent(*guarded_disk, *kernel_disk), "reaching the disk")
        }
        _ => (
            percent(app_rate(tailguard), app_rate(writeback)),
            "as the writer saw it",
        ),
    };
    let outcome = outcome(kernel_share, guarded_share, write_share);
    format!(
        "{outcome}: worst 0.5 s read rate {}% of solo beside kernel writeback (max {}), \
         {}% through tailguard (max {}); tailguard's write rate {measured} {}% of \
         writeback's",
        short_percent(kernel_share),
        human_duration(kernel.latency_us.max),
        short_percent(guarded_share),
        human_duration(guarded.latency_us.max),
        short_percent(write_share)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_core::Nanos;
    use tailguard_sim::report::ClassAccumulator;

    #[test]
    fn a_default_report_name_never_replaces_a_file() {
        let dir = std::env::temp_dir().join(format!("tg-demo-name-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(default_report_path(&dir), dir.join("tailguard-demo.html"));
        std::fs::write(dir.join("tailguard-demo.html"), "first").unwrap();
        assert_eq!(default_report_path(&dir), dir.join("tailguard-demo-2.html"));
        std::fs::write(dir.join("tailguard-demo-2.html"), "second").unwrap();
        assert_eq!(default_report_path(&dir), dir.join("tailguard-demo-3.html"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The write file holds data before the first run: every MiB of it
    /// reads back as written bytes, not as the zeros of a reserved extent
    /// no run has written yet.
    #[test]
    fn the_write_file_is_written_before_the_runs() {
        let dir = std::env::temp_dir().join(format!("tg-demo-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("writes.data");
        let bytes = 3 << 20;
        lay_out_write_file(&path, bytes).unwrap();
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len() as u64, bytes);
        for (index, mib) in data.chunks(1 << 20).enumerate() {
            assert!(
                mib.iter().any(|&byte| byte != 0),
                "MiB {index} is unwritten"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A run with `reads_per_window` completions per 0.5 s window over two
    /// seconds, and `write_mb` MB of writes.
    fn run(policy: &str, reads_per_window: [u64; 4], write_mb: u64) -> RunReport {
        let mut reads =
            ClassAccumulator::new(READS.into(), "vda".into(), 2_000_000_000).starting_at(0);
        for (window, count) in reads_per_window.into_iter().enumerate() {
            for index in 0..count {
                let at: Nanos = window as u64 * 500_000_000 + index * 10_000;
                reads.on_submit(at);
                reads.on_complete(at + 200_000, at, at, 4096);
            }
        }
        let mut classes = vec![reads.finish()];
        if write_mb > 0 {
            let mut writes =
                ClassAccumulator::new(WRITES.into(), "vda".into(), 2_000_000_000).starting_at(0);
            for index in 0..write_mb {
                writes.on_submit(index * 1_000_000);
                let at = index * 1_000_000;
                writes.on_complete(at + 500_000, at, at, 1_000_000);
            }
            classes.push(writes.finish());
        }
        RunReport {
            policy: policy.into(),
            seed: 1,
            duration_s: 2.0,
            classes,
        }
    }

    #[test]
    fn the_threshold_is_bytes_when_set_else_a_ratio_of_memory() {
        assert_eq!(
            dirty_background_threshold(0, 10, 20 << 30),
            (20u64 << 30) / 100 * 10
        );
        assert_eq!(
            dirty_background_threshold(256 << 20, 10, 20 << 30),
            256 << 20
        );
    }

    #[test]
    fn the_verdict_compares_worst_rates_with_the_solo_rate() {
        let reports = [
            run("alone", [100, 100, 100, 100], 0),
            run("kernel writeback", [100, 1, 100, 100], 400),
            run("tailguard", [100, 80, 90, 100], 300),
        ];
        let line = verdict(&reports, &[None, None, None]);
        // Solo: 400 reads over 2 s = 200/s. Writeback's worst window: 2/s = 1%;
        // tailguard's: 160/s = 80%. Writes 300 vs 400 MB over 2 s: 75%.
        assert!(
            line.starts_with("tailguard kept the readers going"),
            "{line}"
        );
        assert!(line.contains("rate 1.0% of solo"), "{line}");
        assert!(line.contains("80% through tailguard"), "{line}");
        assert!(
            line.contains("as the writer saw it 75% of writeback's"),
            "{line}"
        );
        let line = verdict(&reports, &[Some(1.0), Some(400.0), Some(100.0)]);
        assert!(
            line.contains("reaching the disk 25% of writeback's"),
            "{line}"
        );
    }

    #[test]
    fn the_verdict_names_a_tailguard_worse_than_writeback_and_writes_cut_short() {
        assert!(outcome(90.0, 5.0, 100.0).ends_with("tailguard left them less than writeback did"));
        assert!(!outcome(90.0, 88.0, 100.0).contains("left them less"));
        assert!(outcome(1.0, 80.0, 0.0).ends_with("but wrote less than half as much"));
        assert_eq!(
            outcome(1.0, 80.0, 75.0),
            "tailguard kept the readers going where kernel writeback stalled them"
        );
    }

    #[test]
    fn the_verdict_says_when_tailguard_only_eased_the_stall() {
        let reports = [
            run("alone", [100, 100, 100, 100], 0),
            run("kernel writeback", [100, 2, 100, 100], 400),
            run("tailguard", [100, 30, 90, 100], 300),
        ];
        let line = verdict(&reports, &[]);
        assert!(line.starts_with("tailguard eased the stall"), "{line}");
        assert!(line.contains("30% through tailguard"), "{line}");
    }

    #[test]
    fn the_comparison_has_a_column_per_run_and_a_row_per_measure() {
        let reports = [
            run("alone", [100, 100, 100, 100], 0),
            run("kernel writeback", [100, 1, 100, 100], 400),
        ];
        let text = render_comparison(&reports, &[Some(0.5), Some(123.4)]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("alone") && lines[0].ends_with("kernel writeback"));
        let worst = lines
            .iter()
            .find(|line| line.starts_with("read worst 0.5 s"))
            .unwrap();
        assert!(worst.contains("200/s") && worst.ends_with("2/s"), "{text}");
        let writes = lines
            .iter()
            .find(|line| line.starts_with("write MB/s"))
            .unwrap();
        assert!(writes.contains(" - ") || writes.contains("-  "), "{text}");
        assert!(writes.ends_with("200"), "{text}");
    }

    /// A frontier of solo, three static settings and tailguard at
    /// (`write`, `worst` reads per second of a solo 1000).
    fn frontier(tailguard_write: f64, tailguard_worst: f64) -> FrontierResult {
        let sample = |write: f64, worst: f64| measure::Sample {
            round: 0,
            order: 0,
            disk_write_mb_per_s: Some(write),
            writer_mb_per_s: write,
            read_iops: worst.max(1.0),
            read_worst_500ms_iops: Some(worst),
            read_p9999_us: 5_000.0,
            read_max_us: 9_000.0,
            buffers_allocated: 0,
        };
        let points = frontier_points(true);
        let samples: Vec<Vec<measure::Sample>> = points
            .iter()
            .map(|point| match point {
                Setting::Solo => vec![sample(1.0, 1000.0)],
                Setting::Static {
                    queue_depth: 1,
                    request_bytes,
                } if *request_bytes == 128 << 10 => vec![sample(450.0, 900.0)],
                Setting::Static { queue_depth: 1, .. } => vec![sample(1800.0, 550.0)],
                Setting::Static { request_bytes, .. } if *request_bytes == 128 << 10 => {
                    vec![sample(800.0, 700.0)]
                }
                Setting::Static { .. } => vec![sample(3000.0, 100.0)],
                Setting::Tailguard(_) => vec![sample(tailguard_write, tailguard_worst)],
            })
            .collect();
        let workload = Workload::with_demo_readers(MIB, MIB, 3.0);
        FrontierResult::build("demo".into(), "vda".into(), workload, &points, &samples).unwrap()
    }

    #[test]
    fn the_demo_frontier_is_small_and_has_one_tailguard_point() {
        let quick = frontier_points(true);
        assert_eq!(quick.iter().filter(|point| point.is_static()).count(), 4);
        assert_eq!(quick.iter().filter(|point| point.is_tailguard()).count(), 1);
        assert_eq!(quick[0], Setting::Solo);
        assert_eq!(frontier_points(false).len(), 8);
        assert_eq!(frontier_point_s(12.0), 3.0);
        assert_eq!(frontier_point_s(40.0), FRONTIER_POINT_S_MAX);
        assert_eq!(frontier_point_s(1.2), 1.0);
    }

    #[test]
    fn the_static_verdict_names_the_static_point_and_the_difference() {
        // Beside 800 MB/s at 0.70: tailguard at 820 MB/s and 0.85 beats it.
        let line = static_verdict(&frontier(820.0, 850.0));
        assert!(line.starts_with("tailguard beats"), "{line}");
        assert!(line.contains("0.85 of solo at 820 MB/s"), "{line}");
        assert!(
            line.contains("direct QD2 128k (0.70 of solo at 800 MB/s), +0.15"),
            "{line}"
        );
        let line = static_verdict(&frontier(820.0, 720.0));
        assert!(line.starts_with("tailguard ties"), "{line}");
        let line = static_verdict(&frontier(820.0, 450.0));
        assert!(line.starts_with("tailguard loses to the best"), "{line}");
        assert!(line.contains("-0.25"), "{line}");
        // 1200 MB/s at 0.5: nothing within 10%, 1800/0.55 does better on both.
        let line = static_verdict(&frontier(1200.0, 500.0));
        assert!(line.starts_with("tailguard loses: direct QD1 1m"), "{line}");
        // 1000 MB/s at 0.70: above the line from 800/0.70 to 1800/0.55 (0.67).
        let line = static_verdict(&frontier(1000.0, 700.0));
        assert!(line.starts_with("no static setting tried"), "{line}");
        assert!(line.contains("at 0.67 there, +0.03"), "{line}");
    }

    #[test]
    fn a_huge_size_is_refused_naming_the_limit() {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            arguments: DemoArguments,
        }
        let sizing = |mib: &str| {
            let wrapper =
                <Wrapper as clap::Parser>::try_parse_from(["demo", "--size-mib", mib]).unwrap();
            size_demo(&wrapper.arguments, Path::new("/nonexistent"))
        };
        let error = sizing("18446744073709551615").unwrap_err().to_string();
        assert!(error.contains("--size-mib"), "{error}");
        assert!(
            error.contains(&crate::frontier::SIZE_MIB_MAX.to_string()),
            "{error}"
        );
        // 1 PiB does not overflow a byte count but is above the limit.
        assert!(sizing("1073741824").is_err());
        assert_eq!(sizing("8").unwrap().write_bytes, 8 * MIB);
    }

    #[test]
    fn the_embedded_job_parses_with_and_without_writes() {
        let sizing = Sizing {
            read_bytes: 8 * MIB,
            write_bytes: 16 * MIB,
            duration_s: 6.0,
            threshold_bytes: None,
        };
        let solo = demo_job(&sizing, 3.0, false).unwrap().scenario;
        assert_eq!(solo.jobs.len(), 1);
        let job = demo_job(&sizing, 6.0, true).unwrap();
        let mixed = &job.scenario;
        assert_eq!(mixed.jobs.len(), 2);
        assert_eq!(mixed.jobs[1].region_bytes, 16 * MIB);
        assert_eq!(mixed.jobs[1].start_ns, 1_000_000_000);
        // The writer is the frontier's tailguard writer, its ring of buffers
        // included, so the verdict against the static points compares
        // scheduling, not buffers.
        assert_eq!(
            job.options_of(1).write_buffer_bytes,
            measure::WRITE_BUFFER_BYTES
        );
        assert!(matches!(
            mixed.jobs[1].arrival,
            tailguard_sim::scenario::Arrival::ClosedLoop {
                queue_depth: measure::TAILGUARD_WRITE_QUEUE_DEPTH
            }
        ));
    }

    #[test]
    fn the_disk_write_rate_counts_from_the_writer_start() {
        let sizing = Sizing {
            read_bytes: 8 * MIB,
            write_bytes: 16 * MIB,
            duration_s: 6.0,
            threshold_bytes: None,
        };
        let mixed = demo_job(&sizing, 6.0, true).unwrap().scenario;
        let mut window = measure::DiskWriteWindow::for_scenario(&mixed);
        let run_start = Instant::now();
        let at = |seconds: u64| run_start + std::time::Duration::from_secs(seconds);
        // Before the writer starts (1 s into 6 s) the counter is not read.
        window.observe(0, at(0), || panic!("read before the writer started"));
        window.observe(999_999_999, at(0), || {
            panic!("read before the writer started")
        });
        assert_eq!(window.rate(Some(1), at(6)), None, "no window yet");
        window.observe(1_000_000_000, at(1), || Some(1_000));
        window.observe(2_000_000_000, at(2), || panic!("read twice"));
        // 5 s of writing at 100 MB/s: 500 MB in 512-byte sectors.
        let sectors = 500_000_000 / 512;
        let rate = window.rate(Some(1_000 + sectors), at(6)).unwrap();
        assert!(
            (rate - 100.0).abs() < 0.01,
            "{rate} MB/s over the writer's 5 s"
        );
        // Without writers the window is the whole run.
        let solo = demo_job(&sizing, 3.0, false).unwrap().scenario;
        let mut whole = measure::DiskWriteWindow::for_scenario(&solo);
        whole.observe(0, at(0), || Some(0));
        assert_eq!(whole.rate(Some(0), at(3)), Some(0.0));
    }
}
