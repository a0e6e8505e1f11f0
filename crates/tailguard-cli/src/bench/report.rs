//! Bench's results: the simulator's run report, with its time split named for
//! what bench measures, and the scheduler's own split in `tailguard` mode.
//!
//! Bench fills the simulator's [`RunReport`] (so the HTML page, the histograms
//! and the timeline are shared with `tailguard sim`), but two of its numbers
//! mean something else on a real disk. In the simulator, `queue_wait_us_*` is
//! the time a request spent in the scheduler's queue; bench cannot see that
//! queue from outside, and measures instead how late its own driver handed a
//! request to the mode after the request's intended start. So bench's JSON and
//! table rename them ([`BenchClassJson`]):
//!
//! - `start_lateness_us_max`, `start_lateness_us_mean`: intended start to the
//!   moment the driver handed the request to the mode (the simulator's
//!   `queue_wait_us_max` and `queue_wait_us_mean` in the same run report);
//! - `submit_to_completion_us_mean`: that hand-over to completion, scheduler
//!   queue and device together (the simulator's `device_time_us_mean`);
//! - `scheduler`: in `tailguard` mode, the scheduler's own per-class statistics
//!   ([`SchedulerClassReport`]: its queue wait, device time and latency, each
//!   as mean, p50, p99, p99.9 and max in µs, from the histograms of
//!   [`tailguard::stats::ClassStats`], taken once the run has drained); `null`
//!   in the kernel modes, which have no scheduler. They cover every request
//!   the class sent, those of a `ramp_time` and the syncs included (the
//!   scheduler's histograms cannot be split at the ramp's end), where the
//!   driver's own columns leave the ramp out.
//!
//! Every other field is the simulator's, with its meaning (see
//! [`tailguard_sim::report`]). The table ([`render_table`]) shows the same:
//! `late max` for the driver's lateness, and `wait p99` and `dev p99` from the
//! scheduler's statistics (`-` in the kernel modes).

use crate::bench::limit::JobOverload;
use serde::Serialize;
use std::fmt::Write as _;
use tailguard::stats::{ClassStats, LatencyHistogram};
use tailguard::StatsSnapshot;
use tailguard_sim::report::{
    human_duration, rate_and_latency_cells, render_grouped_table, ClassReport, LatencyUs,
    LazyHistogram, Log2Bucket, PercentilePoint, RunReport, TimelineSecond,
};

/// A summary of one histogram of times, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimeSummaryUs {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl TimeSummaryUs {
    /// Summarises a histogram of nanoseconds (all zero when it is empty).
    pub fn of(histogram: &LatencyHistogram) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        // Microseconds to three decimals (whole nanoseconds).
        let us = |nanoseconds: f64| nanoseconds.round() / 1e3;
        let at = |quantile: f64| us(histogram.value_at_quantile(quantile) as f64);
        Self {
            mean: us(histogram.mean()),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: us(histogram.max() as f64),
        }
    }
}

/// The scheduler's own statistics for one class (`tailguard` mode).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchedulerClassReport {
    /// Requests the scheduler completed for the class.
    pub ops: u64,
    /// Of those, requests that failed.
    pub errors: u64,
    /// Enqueue in the scheduler to the dispatch of the request's last piece.
    pub queue_wait_us: TimeSummaryUs,
    /// That dispatch to completion: the device's part.
    pub device_time_us: TimeSummaryUs,
    /// Submission to the scheduler to completion.
    pub latency_us: TimeSummaryUs,
}

impl SchedulerClassReport {
    /// From the class's statistics in a snapshot.
    pub fn of(stats: &ClassStats) -> Self {
        Self {
            ops: stats.ops,
            errors: stats.errors,
            queue_wait_us: TimeSummaryUs::of(&stats.queue_wait_ns),
            device_time_us: TimeSummaryUs::of(&stats.device_time_ns),
            latency_us: TimeSummaryUs::of(&stats.latency_ns),
        }
    }
}

/// One run of one mode: the report, and per class row the scheduler's
/// statistics (`None` outside `tailguard` mode).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRun {
    /// What the driver measured.
    pub report: RunReport,
    /// Aligned with `report.classes`.
    pub scheduler: Vec<Option<SchedulerClassReport>>,
    /// The group of jobs it ran (fio's `stonewall` groups; 0 when the job
    /// file has one group).
    pub group: usize,
    /// Per class and direction that did I/O, the driver's histograms (for
    /// `--output-format fio-json`); empty when the driver kept none.
    pub directions: Vec<DirectionStats>,
    /// The jobs that met their in-flight limit (open-loop arrivals dropped,
    /// or closed-loop and burst requests held back); see
    /// [`crate::bench::limit`].
    pub overloads: Vec<JobOverload>,
    /// Data buffers the driver allocated over the run (a writer's ring of
    /// `write_buffers` included).
    pub buffers_allocated: u64,
}

/// The driver's own histograms of a direction's times, in nanoseconds (fio's
/// output needs the standard deviation, which the scheduler's histograms do
/// not keep).
pub type DirectionHistogram = LazyHistogram<2>;

/// What one class did in one direction during a run, as fio reports a job's
/// `read` or `write` section.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectionStats {
    /// The class.
    pub class: String,
    /// Writes (else reads).
    pub write: bool,
    /// Requests completed.
    pub ops: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// From the class's start to its last completion in this direction, at
    /// most to its jobs' stop: fio's `runtime`.
    pub active_ns: u64,
    /// Intended start to the hand-over to the mode (fio's `slat_ns`).
    pub slat_ns: DirectionHistogram,
    /// Hand-over to completion (fio's `clat_ns`).
    pub clat_ns: DirectionHistogram,
    /// Intended start to completion (fio's `lat_ns`).
    pub lat_ns: DirectionHistogram,
}

impl DirectionStats {
    /// Empty statistics for a class's direction. The histograms (1 ns to a
    /// day) keep a direction's times exactly while they take less memory
    /// than counting them would, then count them in an HDR histogram that
    /// grows to the largest time recorded (see [`LazyHistogram`]). The
    /// counts keep 2 significant digits (a
    /// percentile within 0.8% of the time it names): finer than fio's own
    /// percentiles (buckets 1/64 of a power of two wide, 1.6%), which is
    /// what their `fio-json` output stands in for, at an eighth of the
    /// memory of 3 digits (the table's percentiles come from the run
    /// report's 3-digit histogram).
    pub fn new(class: &str, write: bool) -> Self {
        let histogram = || DirectionHistogram::new();
        Self {
            class: class.to_string(),
            write,
            ops: 0,
            bytes: 0,
            active_ns: 0,
            slat_ns: histogram(),
            clat_ns: histogram(),
            lat_ns: histogram(),
        }
    }

    /// Records one completed request's times (nanoseconds from the run's
    /// start) and bytes.
    pub fn record(&mut self, intended_ns: u64, submitted_ns: u64, completed_ns: u64, bytes: u64) {
        self.ops += 1;
        self.bytes += bytes;
        self.slat_ns
            .record(submitted_ns.saturating_sub(intended_ns));
        self.clat_ns
            .record(completed_ns.saturating_sub(submitted_ns));
        self.lat_ns.record(completed_ns.saturating_sub(intended_ns));
    }
}

impl BenchRun {
    /// Pairs each class row with its class in `stats` (by name).
    pub fn new(report: RunReport, stats: Option<&StatsSnapshot>) -> Self {
        let scheduler = report
            .classes
            .iter()
            .map(|row| {
                stats
                    .and_then(|stats| stats.class(&row.name))
                    .map(SchedulerClassReport::of)
            })
            .collect();
        Self {
            report,
            scheduler,
            group: 0,
            directions: Vec::new(),
            overloads: Vec::new(),
            buffers_allocated: 0,
        }
    }
}

/// One run in bench's JSON: the run report's fields, classes as
/// [`BenchClassJson`].
#[derive(Serialize)]
pub struct BenchRunJson<'a> {
    /// The mode.
    pub policy: &'a str,
    /// The group of jobs (0 when there is one group).
    pub group: usize,
    /// The seed.
    pub seed: u64,
    /// Seconds of the run.
    pub duration_s: f64,
    /// Per (class, device) pair.
    pub classes: Vec<BenchClassJson<'a>>,
    /// The jobs that met their in-flight limit (left out when none did).
    #[serde(skip_serializing_if = "<[JobOverload]>::is_empty")]
    pub overload: &'a [JobOverload],
}

/// One class in bench's JSON; see the module docs for the renamed fields.
#[derive(Serialize)]
pub struct BenchClassJson<'a> {
    /// The class.
    pub name: &'a str,
    /// The device.
    pub device: &'a str,
    /// Requests completed.
    pub ops: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Requests per second over the active window.
    pub iops: f64,
    /// 10^6 bytes per second over the active window.
    pub mb_per_s: f64,
    /// Latency from the intended start.
    pub latency_us: &'a LatencyUs,
    /// Lowest completions per second over 0.5 s windows.
    pub worst_500ms_iops: Option<f64>,
    /// Longest time from intended start to the hand-over to the mode.
    pub start_lateness_us_max: f64,
    /// Mean of the same.
    pub start_lateness_us_mean: f64,
    /// Mean time from the hand-over to completion.
    pub submit_to_completion_us_mean: f64,
    /// The scheduler's statistics (`tailguard` mode), else `null`.
    pub scheduler: Option<&'a SchedulerClassReport>,
    /// Requests submitted.
    pub submitted: u64,
    /// Requests unfinished at the end.
    pub outstanding: u64,
    /// First submission.
    pub first_submit_s: f64,
    /// Last completion.
    pub last_completion_s: f64,
    /// Per second of the run.
    pub timeline: &'a [TimelineSecond],
    /// Latency histogram in power-of-two microsecond buckets.
    pub latency_log2_us: &'a [Log2Bucket],
    /// Latency at each of the simulator's curve percentiles.
    pub latency_curve_us: &'a [PercentilePoint],
}

impl<'a> BenchClassJson<'a> {
    fn new(row: &'a ClassReport, scheduler: Option<&'a SchedulerClassReport>) -> Self {
        Self {
            name: &row.name,
            device: &row.device,
            ops: row.ops,
            bytes: row.bytes,
            iops: row.iops,
            mb_per_s: row.mb_per_s,
            latency_us: &row.latency_us,
            worst_500ms_iops: row.worst_500ms_iops,
            start_lateness_us_max: row.queue_wait_us_max,
            start_lateness_us_mean: row.queue_wait_us_mean,
            submit_to_completion_us_mean: row.device_time_us_mean,
            scheduler,
            submitted: row.submitted,
            outstanding: row.outstanding,
            first_submit_s: row.first_submit_s,
            last_completion_s: row.last_completion_s,
            timeline: &row.timeline,
            latency_log2_us: &row.latency_log2_us,
            latency_curve_us: &row.latency_curve_us,
        }
    }
}

impl<'a> BenchRunJson<'a> {
    /// The JSON view of a run.
    pub fn new(run: &'a BenchRun) -> Self {
        Self {
            policy: &run.report.policy,
            group: run.group,
            seed: run.report.seed,
            duration_s: run.report.duration_s,
            classes: run
                .report
                .classes
                .iter()
                .zip(&run.scheduler)
                .map(|(row, scheduler)| BenchClassJson::new(row, scheduler.as_ref()))
                .collect(),
            overload: &run.overloads,
        }
    }
}

/// The runs as a pretty-printed JSON array.
pub fn to_json(runs: &[BenchRun]) -> serde_json::Result<String> {
    let views: Vec<BenchRunJson> = runs.iter().map(BenchRunJson::new).collect();
    serde_json::to_string_pretty(&views)
}

/// The percentiles fio reports by default, as its JSON keys them.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// The runs in fio's JSON schema (`--output-format fio-json`): one object
/// with `jobs[]`, one entry per class per run in run order, each with fio's
/// `jobname`, `groupid`, `job_runtime` and `read`/`write`/`trim` sections
/// (`io_bytes`, `io_kbytes`, `bw_bytes`, `bw` in KiB/s, `iops`, `runtime` in
/// ms, `total_ios`, and `slat_ns`/`clat_ns`/`lat_ns` with `min`, `max`,
/// `mean`, `stddev`, `N` and a `percentile` map keyed like fio's
/// `"99.000000"`). `slat_ns` is the driver's lateness, `clat_ns` hand-over to
/// completion, `lat_ns` intended start to completion. Each entry also names
/// its bench mode (`tailguard_mode`), so one mode gives fio's one-run shape.
pub fn to_fio_json(runs: &[BenchRun]) -> serde_json::Result<String> {
    let mut jobs = Vec::new();
    for run in runs {
        let mode = run.report.policy.split(' ').next().unwrap_or_default();
        for row in &run.report.classes {
            let section = |write: bool| {
                run.directions
                    .iter()
                    .find(|stats| stats.class == row.name && stats.write == write)
                    .map_or_else(empty_fio_section, fio_section)
            };
            let runtime_ms = run
                .directions
                .iter()
                .filter(|stats| stats.class == row.name)
                .map(|stats| stats.active_ns / 1_000_000)
                .max()
                .unwrap_or(0);
            jobs.push(serde_json::json!({
                "jobname": row.name,
                "groupid": run.group,
                "error": 0,
                "eta": 0,
                "elapsed": (runtime_ms as f64 / 1e3).ceil() as u64,
                "job options": { "name": row.name },
                "tailguard_mode": mode,
                "tailguard_device": row.device,
                "read": section(false),
                "write": section(true),
                "trim": empty_fio_section(),
                "job_runtime": runtime_ms,
            }));
        }
    }
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    serde_json::to_string_pretty(&serde_json::json!({
        "fio version": concat!("tailguard-bench-", env!("CARGO_PKG_VERSION")),
        "timestamp": timestamp,
        "global options": {},
        "jobs": jobs,
        "disk_util": [],
    }))
}

/// fio's `read`/`write` section for one direction.
fn fio_section(stats: &DirectionStats) -> serde_json::Value {
    let runtime_ms = stats.active_ns / 1_000_000;
    let seconds = stats.active_ns as f64 / 1e9;
    let bw_bytes = (stats.bytes as f64 / seconds) as u64;
    serde_json::json!({
        "io_bytes": stats.bytes,
        "io_kbytes": stats.bytes / 1024,
        "bw_bytes": bw_bytes,
        "bw": bw_bytes / 1024,
        "iops": stats.ops as f64 / seconds,
        "runtime": runtime_ms,
        "total_ios": stats.ops,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": fio_latency(&stats.slat_ns),
        "clat_ns": fio_latency(&stats.clat_ns),
        "lat_ns": fio_latency(&stats.lat_ns),
    })
}

/// A section for a direction without I/O: zeros, as fio writes.
fn empty_fio_section() -> serde_json::Value {
    let empty = DirectionHistogram::default();
    serde_json::json!({
        "io_bytes": 0, "io_kbytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0.0, "runtime": 0,
        "total_ios": 0, "short_ios": 0, "drop_ios": 0,
        "slat_ns": fio_latency(&empty),
        "clat_ns": fio_latency(&empty),
        "lat_ns": fio_latency(&empty),
    })
}

/// fio's latency object: min, max, mean, stddev, N and the percentile map.
fn fio_latency(histogram: &DirectionHistogram) -> serde_json::Value {
    let count = histogram.len();
    let mut value = serde_json::json!({
        "min": if count == 0 { 0 } else { histogram.min() },
        "max": histogram.max(),
        "mean": if count == 0 { 0.0 } else { histogram.mean() },
        "stddev": if count == 0 { 0.0 } else { histogram.stdev() },
        "N": count,
    });
    if count > 0 {
        let percentiles: serde_json::Map<String, serde_json::Value> = FIO_PERCENTILES
            .iter()
            .map(|&percentile| {
                (
                    format!("{percentile:.6}"),
                    histogram.value_at_quantile(percentile / 100.0).into(),
                )
            })
            .collect();
        value["percentile"] = percentiles.into();
    }
    value
}

const GROUP_COLUMNS: [&str; 11] = [
    "IOPS",
    "MB/s",
    "p50",
    "p99",
    "p99.9",
    "p99.99",
    "max",
    "worst0.5s",
    "late max",
    "wait p99",
    "dev p99",
];

fn group_cells(row: Option<(&ClassReport, Option<&SchedulerClassReport>)>) -> Vec<String> {
    let Some((row, scheduler)) = row else {
        return vec!["-".into(); GROUP_COLUMNS.len()];
    };
    let scheduler_cell = |value: fn(&SchedulerClassReport) -> f64| {
        scheduler.map_or_else(|| "-".into(), |report| human_duration(value(report)))
    };
    let mut cells = rate_and_latency_cells(row);
    cells.push(human_duration(row.queue_wait_us_max));
    cells.push(scheduler_cell(|report| report.queue_wait_us.p99));
    cells.push(scheduler_cell(|report| report.device_time_us.p99));
    cells
}

/// The row of a class on a device in one run, with its scheduler statistics.
fn row_of<'a>(
    run: &'a BenchRun,
    class: &str,
    device: &str,
) -> Option<(&'a ClassReport, Option<&'a SchedulerClassReport>)> {
    run.report
        .classes
        .iter()
        .zip(&run.scheduler)
        .find(|(row, _)| row.name == class && row.device == device)
        .map(|(row, scheduler)| (row, scheduler.as_ref()))
}

/// The per-class table, one column group per run (the simulator's table with
/// bench's columns: see the module docs).
pub fn render_table(runs: &[BenchRun]) -> String {
    let mut out = render_grouped_table(runs, &GROUP_COLUMNS, |run, class, device| {
        group_cells(row_of(run, class, device))
    });
    out.push_str(
        "late max: longest time from a request's intended start to its hand-over to the mode \
         (the driver's lateness); wait p99, dev p99: the scheduler's queue wait and device \
         time (tailguard mode only; every request, a ramp's and syncs included)\n",
    );
    for run in runs {
        for overload in &run.overloads {
            let _ = writeln!(out, "{}: {}", run.report.policy, overload.describe());
        }
    }
    out
}

impl AsRef<RunReport> for BenchRun {
    fn as_ref(&self) -> &RunReport {
        &self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_sim::report::ClassAccumulator;

    /// A class row: one request intended at 0, handed over at 30 µs,
    /// completed at 130 µs.
    fn row(name: &str) -> ClassReport {
        let mut accumulator =
            ClassAccumulator::new(name.into(), "vda".into(), 1_000_000).starting_at(0);
        accumulator.on_submit(30_000);
        accumulator.on_complete(130_000, 0, 30_000, 4096);
        accumulator.finish()
    }

    fn histogram(values_ns: &[u64]) -> LatencyHistogram {
        let mut histogram = LatencyHistogram::new();
        for &value in values_ns {
            histogram.record(value);
        }
        histogram
    }

    fn snapshot() -> StatsSnapshot {
        let mut class = ClassStats::new("reads".into(), 100);
        class.ops = 2;
        class.bytes = 8192;
        // Below 2048 ns the histograms are exact.
        class.queue_wait_ns = histogram(&[1_000, 2_000]);
        class.device_time_ns = histogram(&[700, 1_000]);
        class.latency_ns = histogram(&[800, 1_200]);
        let mut snapshot = StatsSnapshot::new(tailguard::BackendKind::IoUring);
        snapshot.classes.push(class);
        snapshot
    }

    fn run(policy: &str, stats: Option<&StatsSnapshot>) -> BenchRun {
        BenchRun::new(
            RunReport {
                policy: policy.into(),
                seed: 1,
                duration_s: 1.0,
                classes: vec![row("reads"), row("writes")],
            },
            stats,
        )
    }

    #[test]
    fn a_direction_holds_its_few_hundred_times_and_fio_json_gives_their_percentiles() {
        let mut state: u64 = 11;
        let mut clat_ns = Vec::new();
        let directions: Vec<DirectionStats> = (0..1000)
            .map(|_| {
                let mut stats = DirectionStats::new("reads", false);
                clat_ns.clear();
                for request in 0..200u64 {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let clat = (50_000 << ((state >> 33) % 10)) + (state >> 40) % 50_000;
                    let intended = request * 5_000_000;
                    stats.record(intended, intended + 2_000, intended + 2_000 + clat, 4096);
                    clat_ns.push(clat);
                }
                stats
            })
            .collect();
        let bytes: usize = directions
            .iter()
            .flat_map(|stats| [&stats.slat_ns, &stats.clat_ns, &stats.lat_ns])
            .map(DirectionHistogram::heap_bytes)
            .sum();
        // Room for 256 times in each of the three histograms: 6 KiB, where
        // 2-digit counts up to 26 ms are 19 KiB each.
        assert!(
            bytes / directions.len() <= 6 << 10,
            "{} bytes",
            bytes / 1000
        );
        clat_ns.sort_unstable();
        let last = &directions[999];
        let json = fio_latency(&last.clat_ns);
        assert_eq!(json["N"], 200);
        assert_eq!(json["min"], clat_ns[0]);
        assert_eq!(json["max"], clat_ns[199]);
        for percentile in FIO_PERCENTILES {
            let rank = (percentile / 100.0 * 200.0).ceil() as usize;
            let key = format!("{percentile:.6}");
            assert_eq!(
                json["percentile"][&key],
                clat_ns[rank.clamp(1, 200) - 1],
                "{key}"
            );
        }
        assert_eq!(fio_latency(&last.slat_ns)["percentile"]["50.000000"], 2_000);
    }

    #[test]
    fn the_json_renames_the_drivers_split_and_adds_the_schedulers() {
        let stats = snapshot();
        let runs = [run("tailguard", Some(&stats)), run("kernel-direct", None)];
        let json: serde_json::Value = serde_json::from_str(&to_json(&runs).unwrap()).unwrap();
        let reads = &json[0]["classes"][0];
        assert_eq!(reads["start_lateness_us_max"], 30.0);
        assert_eq!(reads["start_lateness_us_mean"], 30.0);
        assert_eq!(reads["submit_to_completion_us_mean"], 100.0);
        let scheduler = &reads["scheduler"];
        assert_eq!(scheduler["ops"], 2);
        assert_eq!(scheduler["queue_wait_us"]["mean"], 1.5);
        assert_eq!(scheduler["queue_wait_us"]["max"], 2.0);
        assert_eq!(scheduler["device_time_us"]["p50"], 0.7);
        assert_eq!(scheduler["latency_us"]["p99"], 1.2);
        // A class the scheduler has no statistics for, and a kernel mode.
        assert!(json[0]["classes"][1]["scheduler"].is_null());
        assert!(json[1]["classes"][0]["scheduler"].is_null());
        assert_eq!(json[1]["policy"], "kernel-direct");
    }

    #[test]
    fn the_json_keeps_every_other_field_of_the_simulators() {
        let sim = serde_json::to_value(row("reads")).unwrap();
        let bench = serde_json::to_value(BenchClassJson::new(&row("reads"), None)).unwrap();
        let renamed = [
            "queue_wait_us_max",
            "queue_wait_us_mean",
            "device_time_us_mean",
        ];
        for (key, value) in sim.as_object().unwrap() {
            if renamed.contains(&key.as_str()) {
                assert!(bench.get(key).is_none(), "{key} is still there");
            } else {
                assert_eq!(bench.get(key), Some(value), "{key}");
            }
        }
    }

    #[test]
    fn the_table_names_lateness_and_shows_the_schedulers_times_where_there_are_some() {
        let stats = snapshot();
        let table = render_table(&[run("tailguard", Some(&stats)), run("kernel-direct", None)]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("── tailguard") && lines[0].contains("── kernel-direct"));
        assert_eq!(lines[1].matches("late max").count(), 2, "{table}");
        assert!(!table.contains("wait max"), "{table}");
        let reads: Vec<&str> = lines[2].split('│').collect();
        assert!(reads[0].starts_with("reads@vda"), "{table}");
        let cells =
            |group: &str| -> Vec<String> { group.split_whitespace().map(str::to_string).collect() };
        // tailguard: late max 30 µs, wait p99 2 µs, dev p99 1 µs.
        assert_eq!(cells(reads[1])[8..], ["30µs", "2µs", "1µs"], "{table}");
        // kernel-direct: no scheduler.
        assert_eq!(cells(reads[2])[8..], ["30µs", "-", "-"], "{table}");
        assert!(table.contains("the driver's lateness"), "{table}");
    }
}
