//! Measuring the points: one bench run per point per round, interleaved.
//!
//! The workload is by default the demo's: [`READERS`] closed-loop 4 KiB random
//! readers at queue depth 1 on the read file, in a latency class (their count,
//! request size and depth are [`Workload`] fields), and (except in the solo
//! point) one sequential writer on the write file, in a background class, both
//! from the start of the run. The readers run throughout, or, with a
//! [`ReaderPattern::Periodic`] pattern, in turns of running and pausing from
//! the start (one bench job per running span, all on the read file), the
//! writer throughout; the solo point's readers run and pause the same way, so
//! ratios compare like with like. Their worst 0.5 s rate then counts only
//! windows inside a running span (the bench report leaves the pauses out) and
//! their mean rate is over the time they run. A static point runs everything
//! kernel O_DIRECT (bench's `kernel-direct` mode) with the writer at the
//! point's depth and size; a tailguard point runs everything through the
//! scheduler with the writer at [`TAILGUARD_WRITE_QUEUE_DEPTH`] requests of
//! [`TAILGUARD_WRITE_BYTES`], so the scheduler, not the writer, decides how
//! much of it is in flight. Every writer cycles through [`WRITE_BUFFER_BYTES`]
//! of buffers, whatever its depth. Each run is [`driver::run`] on the caller's
//! [`Plan`] (the read file first, the write file second), after
//! [`target::settle`], exactly as `tailguard bench` runs one mode.
//!
//! The disk's write rate comes from the device's own counters
//! (`/sys/block/DEVICE/stat`, sectors written, read at the run's start and
//! end from its progress calls: [`DiskWriteWindow`]), so it counts what
//! reached the disk whoever sent it, over the run's own seconds and not the
//! setup or drain around them (which differ between tailguard's points and
//! the static ones); where the target has no such counters (tmpfs) the
//! writer's own rate stands in.
//!
//! Every round runs every point once, in the order of one row of a Williams
//! design ([`round_order`]): round `r` starts at point `r * points / rounds`
//! (points rounded up to even) and zigzags through the list from there, so no
//! point always runs first or last, and a point's predecessor changes from
//! round to round, so neither the device's drift nor what the previous run
//! left behind (dirty pages, a busy write cache) always lands on the same
//! point.

use crate::bench::driver::{self, SchedulerSettings};
use crate::bench::job::BenchJob;
use crate::bench::report::BenchRun;
use crate::bench::target::{self, Plan};
use crate::bench::Mode;
use crate::error::CliError;
use crate::frontier::grid::{Setting, Variant};
use crate::progress::Progress;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Instant;
use tailguard::ControllerChoice;
use tailguard_core::{Direction, Nanos};
use tailguard_sim::report::ClassReport;
use tailguard_sim::scenario::Scenario;

/// The demo's readers: closed-loop instances.
pub const READERS: u32 = 16;
/// The demo's readers' request size.
pub const READ_REQUEST_BYTES: u64 = 4096;
/// The demo's readers' queue depth, each.
pub const READ_QUEUE_DEPTH: u32 = 1;
/// The read class's name.
pub const READ_CLASS: &str = "reads";
/// The write class's name.
pub const WRITE_CLASS: &str = "writes";
/// The read class's shares in tailguard points: the latency class.
pub const READ_SHARES: u32 = 400;
/// The write class's shares in tailguard points: the background class.
pub const WRITE_SHARES: u32 = 100;
/// Writes the writer keeps queued in tailguard points: more than any budget
/// fixed from a built-in profile lets through at targets up to 4 ms, so the
/// scheduler, not the writer, sets the write depth.
pub const TAILGUARD_WRITE_QUEUE_DEPTH: u32 = 4;
/// The bytes of buffers every point's writer cycles through (bench's
/// `write_buffers`): what the default grid's deepest static writer holds in
/// flight (8 × 1 MiB). A streaming writer sends fresh memory with each
/// write; a shallow one rewriting one buffer would send memory still in the
/// caches of whatever copies it, which the deep writers, tailguard's among
/// them, do not get: the points would differ in their buffers, not in their
/// scheduling.
pub const WRITE_BUFFER_BYTES: u64 = 8 << 20;
/// The writer's request size in tailguard points (the scheduler splits it into
/// pieces as its budget says).
pub const TAILGUARD_WRITE_BYTES: u64 = 1 << 20;

/// When the readers run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "readers", rename_all = "lowercase")]
pub enum ReaderPattern {
    /// Throughout the run: they never pause.
    Continuous,
    /// `run_s` seconds running, then `pause_s` seconds paused, in turn from
    /// the start of the run (the last span cut at its end).
    Periodic {
        /// Seconds of each running span.
        run_s: f64,
        /// Seconds of each pause.
        pause_s: f64,
    },
}

/// Running spans shorter than this (a tail cut by the end of the run) are
/// left out.
const SPAN_S_MIN: f64 = 1e-3;

impl ReaderPattern {
    /// The spans (start, stop) in seconds in which the readers run during a
    /// run of `duration_s`.
    pub fn spans_s(&self, duration_s: f64) -> Vec<(f64, f64)> {
        match *self {
            Self::Continuous => vec![(0.0, duration_s)],
            Self::Periodic { run_s, pause_s } => (0..)
                .map(|period| f64::from(period) * (run_s + pause_s))
                .take_while(|&start_s| start_s + SPAN_S_MIN < duration_s)
                .map(|start_s| (start_s, (start_s + run_s).min(duration_s)))
                .collect(),
        }
    }

    /// Seconds the readers run during a run of `duration_s`.
    pub fn running_s(&self, duration_s: f64) -> f64 {
        self.spans_s(duration_s)
            .iter()
            .map(|(start_s, stop_s)| stop_s - start_s)
            .sum()
    }

    /// The flags that pick it (empty for the default).
    pub fn flags(&self) -> String {
        match self {
            Self::Continuous => String::new(),
            Self::Periodic { run_s, pause_s } => {
                format!(" --readers-run {run_s}s --readers-pause {pause_s}s")
            }
        }
    }

    /// The pattern in words: `readers that never pause`, `readers running
    /// 0.5 s then pausing 1 s in turn`.
    pub fn describe(&self) -> String {
        match self {
            Self::Continuous => "readers that never pause".into(),
            Self::Periodic { run_s, pause_s } => {
                format!("readers running {run_s} s then pausing {pause_s} s in turn")
            }
        }
    }
}

/// What every point runs: the readers, file sizes and the length of a run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Workload {
    /// Closed-loop random readers (each a job instance).
    pub readers: u32,
    /// Each read's size, in bytes.
    pub read_request_bytes: u64,
    /// Reads each reader keeps in flight.
    pub read_queue_depth: u32,
    /// The readers' file, in bytes.
    pub read_bytes: u64,
    /// The writer's file, in bytes (it wraps around at the end).
    pub write_bytes: u64,
    /// Seconds of each run.
    pub duration_s: f64,
    /// When the readers run (the writer runs throughout).
    pub reader_pattern: ReaderPattern,
}

impl Workload {
    /// The demo's readers on files of these sizes, runs of `duration_s`.
    pub fn with_demo_readers(read_bytes: u64, write_bytes: u64, duration_s: f64) -> Self {
        Self {
            readers: READERS,
            read_request_bytes: READ_REQUEST_BYTES,
            read_queue_depth: READ_QUEUE_DEPTH,
            read_bytes,
            write_bytes,
            duration_s,
            reader_pattern: ReaderPattern::Continuous,
        }
    }

    /// The workload in words: `16 closed-loop random readers of 4k at queue
    /// depth 1 on a 512 MiB file beside a sequential writer on a 512 MiB file`,
    /// and, where they pause, when they run.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{} closed-loop random readers of {} at queue depth {} on a {} MiB file beside a \
             sequential writer on a {} MiB file",
            self.readers,
            crate::frontier::grid::size_label(self.read_request_bytes),
            self.read_queue_depth,
            self.read_bytes >> 20,
            self.write_bytes >> 20
        );
        if let ReaderPattern::Periodic { run_s, pause_s } = self.reader_pattern {
            let _ = write!(
                text,
                ", the readers running {run_s} s then pausing {pause_s} s in turn (the writer \
                 throughout)"
            );
        }
        text
    }

    /// The readers' mean rate while they run, from a run's report: over the
    /// seconds they run when they pause, else the report's own rate (over the
    /// whole run).
    pub fn read_iops_while_running(&self, reads: &ClassReport) -> f64 {
        match self.reader_pattern {
            ReaderPattern::Continuous => reads.iops,
            ReaderPattern::Periodic { .. } => {
                let running_s = self.reader_pattern.running_s(self.duration_s);
                if running_s > 0.0 {
                    reads.ops as f64 / running_s
                } else {
                    0.0
                }
            }
        }
    }

    /// The bench job of `setting`: the readers (one job, or one per running
    /// span, all on the read file), and the writer unless solo.
    pub fn job(&self, setting: &Setting) -> Result<BenchJob, CliError> {
        let mut text = format!(
            "duration_s = {}\nseed = 1\n\
             [[class]]\nname = \"{READ_CLASS}\"\nshares = {READ_SHARES}\n",
            self.duration_s,
        );
        let spans = match self.reader_pattern {
            ReaderPattern::Continuous => Vec::new(),
            pattern => pattern.spans_s(self.duration_s),
        };
        let reader_jobs = spans.len().max(1);
        for index in 0..reader_jobs {
            let (name, times) = match spans.get(index) {
                None => ("readers".to_string(), String::new()),
                Some((start_s, stop_s)) => (
                    format!("readers{index}"),
                    format!("start_s = {start_s}\nstop_s = {stop_s}\n"),
                ),
            };
            let _ = write!(
                text,
                "[[job]]\nname = \"{name}\"\nclass = \"{READ_CLASS}\"\npattern = \"randread\"\n\
                 block_size = {}\nqueue_depth = {}\nnumjobs = {}\nsize = {}\n{times}",
                self.read_request_bytes, self.read_queue_depth, self.readers, self.read_bytes
            );
        }
        let writer = match *setting {
            Setting::Solo => None,
            Setting::Static {
                queue_depth,
                request_bytes,
            } => Some((queue_depth, request_bytes)),
            Setting::Tailguard(_) => Some((TAILGUARD_WRITE_QUEUE_DEPTH, TAILGUARD_WRITE_BYTES)),
        };
        if let Some((queue_depth, request_bytes)) = writer {
            let _ = write!(
                text,
                "[[class]]\nname = \"{WRITE_CLASS}\"\nshares = {WRITE_SHARES}\n\
                 [[job]]\nname = \"writer\"\nclass = \"{WRITE_CLASS}\"\npattern = \"seqwrite\"\n\
                 block_size = {request_bytes}\nqueue_depth = {queue_depth}\nsize = {}\n\
                 write_buffers = {WRITE_BUFFER_BYTES}\n",
                self.write_bytes
            );
        }
        let mut job = BenchJob::from_toml(&text)
            .map_err(|error| CliError::usage(format!("the frontier's job: {error}")))?;
        // Every reader job reads the one read file; the writer has the other.
        job.job_region = (0..job.scenario.jobs.len())
            .map(|index| usize::from(index >= reader_jobs))
            .collect();
        Ok(job)
    }
}

/// The bench mode a point runs in.
pub fn mode(setting: &Setting) -> Mode {
    match setting {
        Setting::Solo | Setting::Static { .. } => Mode::KernelDirect,
        Setting::Tailguard(_) => Mode::Tailguard,
    }
}

/// The scheduler settings of a tailguard point: `base` with the variant's
/// change.
pub fn scheduler_settings(base: &SchedulerSettings, setting: &Setting) -> SchedulerSettings {
    let mut settings = base.clone();
    match setting {
        Setting::Tailguard(Variant::Adaptive) => settings.controller = ControllerChoice::Adaptive,
        Setting::Tailguard(Variant::LatencyTarget { target_us }) => {
            settings.latency_target_us = Some(*target_us);
        }
        _ => {}
    }
    settings
}

/// A sample for tests: a round with the given disk write rate and mean and
/// worst read rates, and fixed tail latencies.
#[cfg(test)]
pub fn sample(round: u32, write: f64, iops: f64, worst: f64) -> Sample {
    Sample {
        round,
        order: 0,
        disk_write_mb_per_s: Some(write),
        writer_mb_per_s: write,
        read_iops: iops,
        read_worst_500ms_iops: Some(worst),
        read_p9999_us: 4_000.0,
        read_max_us: 9_000.0,
        buffers_allocated: 0,
    }
}

/// One run's raw measures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// The round (from 0).
    pub round: u32,
    /// Its place in the round's order (from 0).
    pub order: usize,
    /// Bytes the disk wrote per second during the run, 10^6/s (`None`: the
    /// target has no device counters).
    pub disk_write_mb_per_s: Option<f64>,
    /// The writer's own completed bytes per second, 10^6/s (0 when solo).
    pub writer_mb_per_s: f64,
    /// The readers' mean completions per second while they run.
    pub read_iops: f64,
    /// The readers' lowest completions per second over 0.5 s windows (inside
    /// their running spans).
    pub read_worst_500ms_iops: Option<f64>,
    /// The readers' p99.99 latency, µs.
    pub read_p9999_us: f64,
    /// The readers' max latency, µs.
    pub read_max_us: f64,
    /// Data buffers the run allocated: one per reader, and the writer's ring
    /// of 8 MiB, the same for every point.
    pub buffers_allocated: u64,
}

impl Sample {
    /// The measures of a run of `workload`; `None` when it has no
    /// reads.
    pub fn of(
        run: &BenchRun,
        workload: &Workload,
        round: u32,
        order: usize,
        disk_write_mb_per_s: Option<f64>,
    ) -> Option<Self> {
        let class = |name: &str| -> Option<&ClassReport> {
            run.report.classes.iter().find(|row| row.name == name)
        };
        let reads = class(READ_CLASS)?;
        Some(Self {
            round,
            order,
            disk_write_mb_per_s,
            writer_mb_per_s: class(WRITE_CLASS).map_or(0.0, |row| row.mb_per_s),
            read_iops: workload.read_iops_while_running(reads),
            read_worst_500ms_iops: reads.worst_500ms_iops,
            read_p9999_us: reads.latency_us.p9999,
            read_max_us: reads.latency_us.max,
            buffers_allocated: run.buffers_allocated,
        })
    }
}

/// The order of round `round` of `rounds` over `count` points: a row of a
/// Williams design over `slots`, `count` rounded up to even.
///
/// The row is the zigzag `0, 1, slots - 1, 2, slots - 2, ...` shifted by
/// `round * slots / rounds` (mod `slots`), with the extra slot of an odd
/// `count` left out. The zigzag's steps between neighbours are all different
/// (mod `slots`), so a point's predecessor differs in every round whose shift
/// differs, where a plain rotation would keep every neighbour; the shift also
/// moves which point runs first.
pub fn round_order(count: usize, round: u32, rounds: u32) -> Vec<usize> {
    let slots = count + count % 2;
    let shift = (round as usize * slots)
        .checked_div(rounds.max(1) as usize)
        .unwrap_or(0);
    (0..slots)
        .map(|position| {
            let step = if position % 2 == 1 {
                position.div_ceil(2)
            } else {
                (slots - position / 2) % slots
            };
            (step + shift) % slots
        })
        .filter(|&index| index < count)
        .collect()
}

/// Runs every point `rounds` times, interleaved, on `plan`; per point, its
/// samples in round order.
pub fn measure(
    settings: &[Setting],
    workload: &Workload,
    plan: &Plan,
    base: &SchedulerSettings,
    rounds: u32,
    progress: &Progress,
) -> Result<Vec<Vec<Sample>>, CliError> {
    let jobs = settings
        .iter()
        .map(|setting| workload.job(setting))
        .collect::<Result<Vec<_>, _>>()?;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); settings.len()];
    let total = settings.len() * rounds as usize;
    let mut started = 0;
    for round in 0..rounds {
        for (order, index) in round_order(settings.len(), round, rounds)
            .into_iter()
            .enumerate()
        {
            started += 1;
            let setting = &settings[index];
            let scenario = &jobs[index].scenario;
            target::settle(plan)?;
            let bar = progress.start_run(
                &format!(
                    "run {started}/{total} (round {}): {}",
                    round + 1,
                    setting.name()
                ),
                scenario.duration_ns,
            );
            let mut window = DiskWriteWindow::for_scenario(scenario);
            let device = plan.device_name.as_str();
            let run = driver::run(
                scenario,
                plan,
                mode(setting),
                &scheduler_settings(base, setting),
                scenario.seed,
                &mut |elapsed| {
                    bar.tick(elapsed);
                    window.observe(elapsed, Instant::now(), || disk_sectors_written(device));
                },
                // The writer's ring of buffers, the same for every point.
                &jobs[index].job_options,
            )?;
            let disk = window.rate(disk_sectors_written(device), Instant::now());
            drop(bar);
            let sample = Sample::of(&run, workload, round, order, disk).ok_or_else(|| {
                CliError::usage(format!("{}: the run completed no reads", setting.name()))
            })?;
            samples[index].push(sample);
        }
    }
    Ok(samples)
}

/// The disk's write rate over the span in which a run's writes are active:
/// from the start of its earliest writing job (the run's start when it has
/// none) to the run's end, the span over which the writer's own rate counts,
/// so the two rates compare like with like. The counters are read from the
/// run's progress calls, so the setup before the run (a scheduler built, files
/// opened) and the drain and checks after it are left out; where no progress
/// call comes after the end, the reading after the run closes it.
pub struct DiskWriteWindow {
    /// Run time at which the window opens.
    opens_ns: Nanos,
    /// Run time at which it closes: the scenario's end.
    closes_ns: Nanos,
    /// The sector counter when the window opened, and when that was.
    opened: Option<(Option<u64>, Instant)>,
    /// The same when it closed.
    closed: Option<(Option<u64>, Instant)>,
}

impl DiskWriteWindow {
    /// The window of `scenario`'s writes.
    pub fn for_scenario(scenario: &Scenario) -> Self {
        let opens_ns = scenario
            .jobs
            .iter()
            .filter(|job| job.pattern.direction() == Direction::Write)
            .map(|job| job.start_ns)
            .min()
            .unwrap_or(0);
        Self {
            opens_ns,
            closes_ns: scenario.duration_ns,
            opened: None,
            closed: None,
        }
    }

    /// At `elapsed_ns` into the run (at `now`): reads the sector counter with
    /// `read_sectors` when the window opens, and again when it closes (once
    /// each, at most one read per call).
    pub fn observe(
        &mut self,
        elapsed_ns: Nanos,
        now: Instant,
        read_sectors: impl FnOnce() -> Option<u64>,
    ) {
        if self.opened.is_none() {
            if elapsed_ns >= self.opens_ns {
                self.opened = Some((read_sectors(), now));
            }
        } else if self.closed.is_none() && elapsed_ns >= self.closes_ns {
            self.closed = Some((read_sectors(), now));
        }
    }

    /// MB/s written over the window: to its closing reading, or to `now`
    /// with the counter at `sectors_now` where none came; `None` when the
    /// window never opened or the kernel does not tell.
    pub fn rate(&self, sectors_now: Option<u64>, now: Instant) -> Option<f64> {
        let (sectors_before, opened_at) = self.opened?;
        let (sectors_after, closed_at) = self.closed.unwrap_or((sectors_now, now));
        disk_write_rate(
            sectors_before,
            sectors_after,
            closed_at.saturating_duration_since(opened_at).as_secs_f64(),
        )
    }
}

/// Sectors (512 bytes) written to the whole disk `device` since boot, from
/// `/sys/block/DEVICE/stat`; `None` for pseudo-devices (tmpfs) and the like.
pub fn disk_sectors_written(device: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/sys/block/{device}/stat")).ok()?;
    text.split_whitespace().nth(6)?.parse().ok()
}

/// MB (10^6 bytes) per second written between two counter readings.
pub fn disk_write_rate(before: Option<u64>, after: Option<u64>, elapsed_s: f64) -> Option<f64> {
    match (before, after) {
        (Some(before), Some(after)) if elapsed_s > 0.0 => {
            Some(after.saturating_sub(before) as f64 * 512.0 / 1e6 / elapsed_s)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontier::grid::Variant;

    #[test]
    fn the_disk_window_closes_at_the_run_end_when_a_progress_call_comes_after_it() {
        let scenario = Scenario::from_toml(
            "duration_s = 3\n[[device]]\nname = \"d\"\nmodel = \"sata-ssd\"\n\
             [[class]]\nname = \"w\"\nshares = 100\n[[job]]\nclass = \"w\"\ndevice = \"d\"\n\
             pattern = \"seqwrite\"\nblock_size = \"128k\"\n",
        )
        .unwrap();
        let start = Instant::now();
        let at = |millis: u64| start + std::time::Duration::from_millis(millis);
        let mut window = DiskWriteWindow::for_scenario(&scenario);
        window.observe(0, at(0), || Some(0));
        window.observe(1_000_000_000, at(1_000), || panic!("read between the ends"));
        // 300 MB over the run's 3 s; the drain after it adds 100 MB and 2 s.
        window.observe(3_000_000_000, at(3_000), || Some(300_000_000 / 512));
        window.observe(3_100_000_000, at(3_100), || panic!("read after closing"));
        let rate = window.rate(Some(400_000_000 / 512), at(5_000)).unwrap();
        assert!((rate - 100.0).abs() < 0.01, "{rate} MB/s over the run");
        // No progress call after the end: the reading after the run closes it.
        let mut open = DiskWriteWindow::for_scenario(&scenario);
        open.observe(0, at(0), || Some(0));
        let rate = open.rate(Some(400_000_000 / 512), at(4_000)).unwrap();
        assert!((rate - 100.0).abs() < 0.01, "{rate} MB/s");
    }
    use std::collections::BTreeSet;

    #[test]
    fn rounds_move_the_first_point_and_run_every_point_once() {
        assert_eq!(round_order(4, 0, 2), [0, 1, 3, 2]);
        assert_eq!(round_order(4, 1, 2), [2, 3, 1, 0]);
        assert_eq!(round_order(3, 0, 1), [0, 1, 2]);
        assert_eq!(round_order(1, 0, 3), [0]);
        assert!(round_order(0, 0, 3).is_empty());
        let firsts: Vec<usize> = (0..3).map(|round| round_order(6, round, 3)[0]).collect();
        assert_eq!(firsts, [0, 2, 4]);
        for count in 0..12 {
            for rounds in 1..8 {
                for round in 0..rounds {
                    let mut order = round_order(count, round, rounds);
                    order.sort_unstable();
                    let all: Vec<usize> = (0..count).collect();
                    assert_eq!(order, all, "every point once per round");
                }
            }
        }
    }

    /// The distinct points that ran right before each point over `rounds`.
    fn predecessors(count: usize, rounds: u32) -> Vec<BTreeSet<usize>> {
        let mut before = vec![BTreeSet::new(); count];
        for round in 0..rounds {
            let order = round_order(count, round, rounds);
            for pair in order.windows(2) {
                before[pair[1]].insert(pair[0]);
            }
        }
        before
    }

    #[test]
    fn rounds_change_which_point_runs_before_which() {
        // Three points over three rounds cannot all have two predecessors
        // (some point runs first in one round and has one neighbour in the
        // other two); every larger case can.
        for count in 3..40 {
            for rounds in 3..10 {
                if (count, rounds) == (3, 3) {
                    continue;
                }
                for (point, before) in predecessors(count, rounds).iter().enumerate() {
                    assert!(
                        before.len() > 1,
                        "{count} points, {rounds} rounds: point {point} always follows {before:?}"
                    );
                }
            }
        }
        // The frontier's usual shape: solo, then the static grid, then
        // tailguard; the solo point, every ratio's denominator, moves around.
        assert_eq!(predecessors(12, 3)[0].len(), 2);
    }

    #[test]
    fn each_setting_gets_its_writer_and_mode() {
        let workload = Workload::with_demo_readers(8 << 20, 16 << 20, 2.0);
        let solo = workload.job(&Setting::Solo).unwrap().scenario;
        assert_eq!(solo.jobs.len(), 1);
        assert_eq!(solo.jobs[0].numjobs, READERS);
        let fixed = Setting::Static {
            queue_depth: 2,
            request_bytes: 256 << 10,
        };
        let scenario = workload.job(&fixed).unwrap().scenario;
        assert_eq!(scenario.jobs.len(), 2);
        assert_eq!(scenario.jobs[1].block_size_bytes, 256 << 10);
        assert_eq!(scenario.jobs[1].region_bytes, 16 << 20);
        assert_eq!(mode(&fixed), Mode::KernelDirect);
        let buffers = |setting: &Setting| {
            let job = workload.job(setting).unwrap();
            job.options_of(1).write_buffer_bytes
        };
        assert_eq!(buffers(&fixed), WRITE_BUFFER_BYTES);
        let guarded = Setting::Tailguard(Variant::LatencyTarget { target_us: 500 });
        let scenario = workload.job(&guarded).unwrap().scenario;
        assert_eq!(scenario.jobs[1].block_size_bytes, TAILGUARD_WRITE_BYTES);
        assert_eq!(buffers(&guarded), WRITE_BUFFER_BYTES);
        assert_eq!(mode(&guarded), Mode::Tailguard);
        let base = SchedulerSettings::default();
        assert_eq!(
            scheduler_settings(&base, &guarded).latency_target_us,
            Some(500)
        );
        let adaptive = scheduler_settings(&base, &Setting::Tailguard(Variant::Adaptive));
        assert_eq!(adaptive.controller, ControllerChoice::Adaptive);
    }

    #[test]
    fn readers_that_pause_run_one_job_per_span_on_the_read_file() {
        let mut workload = Workload::with_demo_readers(8 << 20, 16 << 20, 3.5);
        let continuous = workload.job(&Setting::Solo).unwrap();
        assert_eq!(continuous.scenario.jobs.len(), 1);
        assert_eq!(continuous.job_region, [0]);
        assert!(workload.describe().ends_with("on a 16 MiB file"));
        workload.reader_pattern = ReaderPattern::Periodic {
            run_s: 1.0,
            pause_s: 0.5,
        };
        let pattern = workload.reader_pattern;
        assert_eq!(pattern.spans_s(3.5), [(0.0, 1.0), (1.5, 2.5), (3.0, 3.5)]);
        assert_eq!(pattern.running_s(3.5), 2.5);
        assert_eq!(ReaderPattern::Continuous.running_s(3.5), 3.5);
        let fixed = Setting::Static {
            queue_depth: 1,
            request_bytes: 128 << 10,
        };
        let job = workload.job(&fixed).unwrap();
        let spans_ns: Vec<(u64, u64)> = job
            .scenario
            .jobs
            .iter()
            .map(|spec| (spec.start_ns, spec.stop_ns))
            .collect();
        assert_eq!(
            spans_ns,
            [
                (0, 1_000_000_000),
                (1_500_000_000, 2_500_000_000),
                (3_000_000_000, 3_500_000_000),
                (0, 3_500_000_000),
            ],
            "three reader spans, the writer throughout"
        );
        assert_eq!(job.job_region, [0, 0, 0, 1], "two files, as without pauses");
        assert!(job.scenario.jobs[..3]
            .iter()
            .all(|spec| spec.numjobs == READERS && spec.region_bytes == 8 << 20));
        let solo = workload.job(&Setting::Solo).unwrap();
        assert_eq!(solo.job_region, [0, 0, 0]);
        assert!(workload
            .describe()
            .contains("running 1 s then pausing 0.5 s"));
        // The mean rate is over the 2.5 s the readers run, not the 3.5 s run.
        let mut reads = tailguard_sim::report::ClassAccumulator::new(
            "reads".into(),
            "vda".into(),
            3_500_000_000,
        )
        .finish();
        reads.ops = 5_000;
        reads.iops = 5_000.0 / 3.5;
        assert_eq!(workload.read_iops_while_running(&reads), 2_000.0);
        workload.reader_pattern = ReaderPattern::Continuous;
        assert_eq!(workload.read_iops_while_running(&reads), reads.iops);
    }

    #[test]
    fn the_disk_rate_needs_both_readings() {
        assert_eq!(disk_write_rate(Some(0), Some(2_000_000), 2.0), Some(512.0));
        assert_eq!(disk_write_rate(None, Some(5), 1.0), None);
        assert_eq!(disk_write_rate(Some(5), Some(9), 0.0), None);
    }
}
