//! Results of a run: one documented struct, rendered as a table or as JSON.
//!
//! A run produces a [`RunReport`] per policy with one [`ClassReport`] per
//! (class, device) pair that has jobs. The JSON form is the struct itself
//! (`serde_json`), so the table and the JSON can never disagree. Field meanings:
//!
//! - `ops`, `bytes`: requests and bytes completed within the run.
//! - `iops`, `mb_per_s`: the requests and bytes completed inside the pair's
//!   active window (from the earliest start of its jobs to their latest
//!   stop), divided by its length; MB is 10^6 bytes. A completion after the
//!   window (a closed-loop request still in flight at the jobs' stop) counts
//!   in `ops` and `bytes` but not in the rates, so a rate never counts work
//!   from outside the time it is divided by.
//! - `latency_us`: completion minus intended submission (p50, p99, p99.9,
//!   p99.99, max).
//! - `worst_500ms_iops`: the lowest completion rate over the consecutive 0.5 s
//!   windows of the pair's active window, counted from its start (a trailing
//!   partial window is left out); `null` when the active window is shorter than
//!   0.5 s. A stall that the percentiles hide (a closed-loop reader stuck behind
//!   writes records one slow request, not thousands) shows here as a collapse.
//!   Where the caller gives the separate spans in which the pair's jobs run
//!   ([`ClassAccumulator::active_during`]; `tailguard bench` and `tailguard
//!   sim` do for a pair whose jobs leave gaps, readers that pause), the
//!   windows are counted from
//!   the start of each span instead and none reaches into a gap, so a pause is
//!   not a collapse while a dip inside a span still is.
//! - `queue_wait_us_max`: the longest time a request spent in the scheduler's
//!   queue before its last piece was dispatched, counting requests unfinished
//!   at the end: one still in the device counts its wait until its last piece
//!   was dispatched, one with a piece still queued (a starved request waited
//!   too) its wait until the end; `queue_wait_us_mean` and
//!   `device_time_us_mean` split the mean latency into scheduler and device time.
//! - `timeline`: one point per second of the run (from time 0, not from the
//!   pair's start, so pairs line up), by completion time: `iops` (requests
//!   completed in that second), `mb_per_s`, and `latency_us_max` (the slowest of
//!   them; 0 when none completed). It covers the whole run, quiet seconds
//!   after the pair's last completion included; the last second may be
//!   partial, and holds the completions at the run's very end too (an
//!   N-second run has N points).
//! - `latency_log2_us`: the latency histogram in power-of-two microsecond
//!   buckets (`from_us`..=`to_us`: 0..=1, 2..=3, 4..=7, ...), as bcc's
//!   `xfsdist` prints it, from the lowest non-empty bucket to the highest.
//! - `latency_curve_us`: latency at the percentiles of [`CURVE_PERCENTILES`]
//!   (50 up to 99.999, then 100 for the max), for percentile plots.
//! - `submitted`, `outstanding`: requests submitted, and still unfinished at the
//!   end (submitted = ops + outstanding, always).
//! - `first_submit_s`, `last_completion_s`: when the pair's first request was
//!   submitted and its last one completed (how long a burst took).

use serde::Serialize;
use std::fmt::Write as _;
pub use tailguard_core::histogram::{hdr_counts_len, record_exact, LazyHistogram};
use tailguard_core::{Nanos, NANOS_PER_SECOND_F64};

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencyUs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest.
    pub max: f64,
}

/// One second of a pair's timeline; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimelineSecond {
    /// Seconds since the run started (the start of this one-second bin).
    pub second: u64,
    /// Requests completed in this second.
    pub iops: f64,
    /// 10^6 bytes completed in this second.
    pub mb_per_s: f64,
    /// The largest latency of the requests completed in this second.
    pub latency_us_max: f64,
}

/// One power-of-two bucket of a latency histogram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Log2Bucket {
    /// Smallest latency in the bucket, in whole microseconds.
    pub from_us: u64,
    /// Largest latency in the bucket, in whole microseconds.
    pub to_us: u64,
    /// Requests with a latency in the bucket.
    pub count: u64,
}

/// The percentiles `latency_curve_us` gives, in percent.
pub const CURVE_PERCENTILES: [f64; 13] = [
    50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 99.9999, 100.0,
];

/// Latency at one percentile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PercentilePoint {
    /// The percentile, in percent (100 is the max).
    pub percentile: f64,
    /// Latency at it, in microseconds.
    pub latency_us: f64,
}

/// One (class, device) pair's results; see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassReport {
    /// The class.
    pub name: String,
    /// The device.
    pub device: String,
    /// Requests completed.
    pub ops: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Requests completed inside the active window, per second of it.
    pub iops: f64,
    /// 10^6 bytes completed inside the active window, per second of it.
    pub mb_per_s: f64,
    /// Latency percentiles.
    pub latency_us: LatencyUs,
    /// Lowest completions per second over the 0.5 s windows of the active
    /// window; `None` when that is shorter than 0.5 s.
    pub worst_500ms_iops: Option<f64>,
    /// Longest queue wait.
    pub queue_wait_us_max: f64,
    /// Mean queue wait.
    pub queue_wait_us_mean: f64,
    /// Mean device time (latency minus queue wait).
    pub device_time_us_mean: f64,
    /// Requests submitted.
    pub submitted: u64,
    /// Requests unfinished at the end.
    pub outstanding: u64,
    /// First submission.
    pub first_submit_s: f64,
    /// Last completion.
    pub last_completion_s: f64,
    /// Per second of the run: completions, bytes and the slowest latency.
    pub timeline: Vec<TimelineSecond>,
    /// Latency histogram in power-of-two microsecond buckets.
    pub latency_log2_us: Vec<Log2Bucket>,
    /// Latency at each of [`CURVE_PERCENTILES`] (empty when nothing completed).
    pub latency_curve_us: Vec<PercentilePoint>,
}

/// One policy's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// The policy.
    pub policy: String,
    /// The seed.
    pub seed: u64,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Per (class, device) pair.
    pub classes: Vec<ClassReport>,
}

impl RunReport {
    /// The row of a class on a device.
    pub fn class(&self, name: &str, device: &str) -> Option<&ClassReport> {
        self.classes
            .iter()
            .find(|row| row.name == name && row.device == device)
    }
}

/// Collects one pair's numbers during a run.
#[derive(Debug)]
pub struct ClassAccumulator {
    name: String,
    device: String,
    window_ns: Nanos,
    active_start_ns: Option<Nanos>,
    latency_ns: LazyHistogram,
    /// Completions per [`RATE_WINDOW_NS`] window from the active start, or,
    /// with `spans`, per full window of each span in turn.
    window_completions: Vec<u64>,
    /// The separate spans the pair's jobs run in, sorted and disjoint; empty:
    /// one span, the active window.
    spans: Vec<RateSpan>,
    /// Per second of the run: requests, bytes and the largest latency.
    seconds: Vec<SecondBin>,
    ops: u64,
    bytes: u64,
    /// Requests and bytes completed inside the active window: what the
    /// rates count.
    window_ops: u64,
    window_bytes: u64,
    submitted: u64,
    queue_wait_max_ns: Nanos,
    queue_wait_sum_ns: u128,
    device_time_sum_ns: u128,
    first_submit_ns: Option<Nanos>,
    last_completion_ns: Nanos,
    /// The run's length: the timeline covers it (0: up to the last completion).
    run_ns: Nanos,
}

/// What completed in one second.
#[derive(Clone, Copy, Debug, Default)]
struct SecondBin {
    ops: u64,
    bytes: u64,
    latency_max_ns: Nanos,
}

/// `spans_ns` (start, stop) sorted, without empty ones, and merged where
/// they overlap or touch: one span for jobs that run back to back, several
/// where they leave gaps (see [`ClassAccumulator::active_during`]).
fn merge_spans(spans_ns: &[(Nanos, Nanos)]) -> Vec<(Nanos, Nanos)> {
    let mut sorted: Vec<(Nanos, Nanos)> = spans_ns
        .iter()
        .copied()
        .filter(|&(start, stop)| start < stop)
        .collect();
    sorted.sort_unstable();
    let mut merged: Vec<(Nanos, Nanos)> = Vec::with_capacity(sorted.len());
    for (start, stop) in sorted {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(stop),
            _ => merged.push((start, stop)),
        }
    }
    merged
}

/// The windows `worst_500ms_iops` is measured over: 0.5 s.
pub const RATE_WINDOW_NS: Nanos = 500_000_000;

/// One span in which a pair's jobs run, and where its full 0.5 s windows
/// start in the accumulator's window counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RateSpan {
    start_ns: Nanos,
    stop_ns: Nanos,
    first_window: usize,
}

impl RateSpan {
    /// The full 0.5 s windows that fit in the span.
    fn full_windows(&self) -> usize {
        ((self.stop_ns - self.start_ns) / RATE_WINDOW_NS) as usize
    }
}

impl ClassAccumulator {
    /// A pair that is active for `window_ns`, from its first submission unless
    /// [`ClassAccumulator::starting_at`] says otherwise.
    pub fn new(name: String, device: String, window_ns: Nanos) -> Self {
        Self {
            name,
            device,
            window_ns: window_ns.max(1),
            active_start_ns: None,
            window_completions: Vec::new(),
            spans: Vec::new(),
            seconds: Vec::new(),
            latency_ns: LazyHistogram::default(),
            ops: 0,
            bytes: 0,
            window_ops: 0,
            window_bytes: 0,
            submitted: 0,
            queue_wait_max_ns: 0,
            queue_wait_sum_ns: 0,
            device_time_sum_ns: 0,
            first_submit_ns: None,
            last_completion_ns: 0,
            run_ns: 0,
        }
    }

    /// Sets the run's length, so the timeline has a point for every second
    /// of it (`ceil(run_ns / 1 s)`), quiet seconds after the pair's last
    /// completion included.
    pub fn covering_run(mut self, run_ns: Nanos) -> Self {
        self.run_ns = run_ns;
        self
    }

    /// Sets when the active window starts (its jobs' earliest start): the
    /// 0.5 s windows of `worst_500ms_iops` count from there.
    pub fn starting_at(mut self, start_ns: Nanos) -> Self {
        self.active_start_ns = Some(start_ns);
        self
    }

    /// Sets the spans (start, stop) in which the pair's jobs run, when they
    /// run with gaps between them (readers that pause): `worst_500ms_iops` then
    /// counts its 0.5 s windows from the start of each span and leaves out the
    /// gaps and each span's trailing partial window. Overlapping or touching
    /// spans merge, so jobs that run back to back make one span, and one span
    /// counts exactly as the active window does without this. The rates
    /// (`iops`, `mb_per_s`) stay over the whole active window, counting the
    /// completions inside it.
    pub fn active_during(mut self, spans_ns: &[(Nanos, Nanos)]) -> Self {
        let mut first_window = 0;
        self.spans = merge_spans(spans_ns)
            .into_iter()
            .map(|(start_ns, stop_ns)| {
                let span = RateSpan {
                    start_ns,
                    stop_ns,
                    first_window,
                };
                first_window += span.full_windows();
                span
            })
            .collect();
        self
    }

    /// A request was submitted at `now`.
    pub fn on_submit(&mut self, now: Nanos) {
        self.submitted += 1;
        self.first_submit_ns.get_or_insert(now);
    }

    /// A request completed.
    pub fn on_complete(
        &mut self,
        completed_at: Nanos,
        intended_at: Nanos,
        dispatched_at: Nanos,
        bytes: u64,
    ) {
        let latency_ns = completed_at - intended_at;
        let queue_wait_ns = dispatched_at - intended_at;
        self.latency_ns.record(latency_ns);
        self.ops += 1;
        self.bytes += bytes;
        self.queue_wait_max_ns = self.queue_wait_max_ns.max(queue_wait_ns);
        self.queue_wait_sum_ns += u128::from(queue_wait_ns);
        self.device_time_sum_ns += u128::from(completed_at - dispatched_at);
        self.last_completion_ns = self.last_completion_ns.max(completed_at);
        if self.in_active_window(completed_at) {
            self.window_ops += 1;
            self.window_bytes += bytes;
        }
        self.count_in_window(completed_at);
        self.count_in_second(completed_at, latency_ns, bytes);
    }

    /// The bytes it holds on the heap: its names, its histogram and its
    /// per-second and per-window counts (what a pair costs beyond its
    /// struct).
    pub fn heap_bytes(&self) -> usize {
        self.name.capacity()
            + self.device.capacity()
            + self.latency_ns.heap_bytes()
            + self.window_completions.capacity() * std::mem::size_of::<u64>()
            + self.spans.capacity() * std::mem::size_of::<RateSpan>()
            + self.seconds.capacity() * std::mem::size_of::<SecondBin>()
    }

    /// Bins a completion by the second it falls in. A completion at the
    /// run's very end (the engine handles events at `run_ns` itself) counts
    /// in the run's last second, so an N-second run has N points.
    fn count_in_second(&mut self, completed_at: Nanos, latency_ns: Nanos, bytes: u64) {
        let mut second = (completed_at / tailguard_core::NANOS_PER_SECOND) as usize;
        if self.run_ns > 0 {
            second = second.min(self.run_seconds() - 1);
        }
        if self.seconds.len() <= second {
            self.seconds.resize(second + 1, SecondBin::default());
        }
        let bin = &mut self.seconds[second];
        bin.ops += 1;
        bin.bytes += bytes;
        bin.latency_max_ns = bin.latency_max_ns.max(latency_ns);
    }

    fn log2_histogram(&self) -> Vec<Log2Bucket> {
        let mut counts: Vec<u64> = Vec::new();
        if self.latency_ns.is_empty() {
            return Vec::new();
        }
        for (value, count) in self.latency_ns.iter_recorded() {
            let bucket = log2_bucket(value / 1_000);
            if counts.len() <= bucket {
                counts.resize(bucket + 1, 0);
            }
            counts[bucket] += count;
        }
        let first = counts.iter().position(|&count| count > 0).unwrap_or(0);
        counts
            .iter()
            .enumerate()
            .skip(first)
            .map(|(bucket, &count)| Log2Bucket {
                from_us: if bucket == 0 { 0 } else { 1 << bucket },
                to_us: (2u64 << bucket) - 1,
                count,
            })
            .collect()
    }

    /// The seconds the run's timeline covers (the last may be partial).
    fn run_seconds(&self) -> usize {
        self.run_ns.div_ceil(tailguard_core::NANOS_PER_SECOND) as usize
    }

    fn timeline(&self) -> Vec<TimelineSecond> {
        let run_seconds = self.run_seconds();
        let quiet = SecondBin::default();
        self.seconds
            .iter()
            .chain(std::iter::repeat_n(
                &quiet,
                run_seconds.saturating_sub(self.seconds.len()),
            ))
            .enumerate()
            .map(|(second, bin)| TimelineSecond {
                second: second as u64,
                iops: bin.ops as f64,
                mb_per_s: round3(bin.bytes as f64 / 1e6),
                latency_us_max: round3(bin.latency_max_ns as f64 / 1e3),
            })
            .collect()
    }

    fn active_start_ns(&self) -> Nanos {
        self.active_start_ns
            .or(self.first_submit_ns)
            .unwrap_or_default()
    }

    /// Whether `at` falls inside the active window (half-open, as the 0.5 s
    /// windows are).
    fn in_active_window(&self, at: Nanos) -> bool {
        let start = self.active_start_ns();
        (start..start.saturating_add(self.window_ns)).contains(&at)
    }

    fn count_in_window(&mut self, completed_at: Nanos) {
        let Some(window) = self.window_of(completed_at) else {
            return;
        };
        if self.window_completions.len() <= window {
            self.window_completions.resize(window + 1, 0);
        }
        self.window_completions[window] += 1;
    }

    /// The index in `window_completions` of the window a completion at `at`
    /// counts in; `None` outside the active window (or, with spans, outside
    /// every span's full windows).
    fn window_of(&self, at: Nanos) -> Option<usize> {
        if self.spans.is_empty() {
            return self
                .in_active_window(at)
                .then(|| ((at - self.active_start_ns()) / RATE_WINDOW_NS) as usize);
        }
        let index = self
            .spans
            .partition_point(|span| span.start_ns <= at)
            .checked_sub(1)?;
        let span = &self.spans[index];
        let window = ((at - span.start_ns) / RATE_WINDOW_NS) as usize;
        (window < span.full_windows()).then_some(span.first_window + window)
    }

    /// The lowest rate over the full 0.5 s windows of the active window (or
    /// of every span).
    fn worst_window_iops(&self) -> Option<f64> {
        let full_windows = if self.spans.is_empty() {
            (self.window_ns / RATE_WINDOW_NS) as usize
        } else {
            self.spans.iter().map(RateSpan::full_windows).sum()
        };
        let per_second = NANOS_PER_SECOND_F64 / RATE_WINDOW_NS as f64;
        (0..full_windows)
            .map(|window| self.window_completions.get(window).copied().unwrap_or(0))
            .min()
            .map(|completions| round3(completions as f64 * per_second))
    }

    /// A request was still in the queue at the end, after waiting `waited_ns`.
    pub fn on_still_queued(&mut self, waited_ns: Nanos) {
        self.queue_wait_max_ns = self.queue_wait_max_ns.max(waited_ns);
    }

    /// The final numbers.
    pub fn finish(&self) -> ClassReport {
        let window_s = self.window_ns as f64 / NANOS_PER_SECOND_F64;
        let mean_us = |sum: u128| {
            if self.ops == 0 {
                0.0
            } else {
                sum as f64 / self.ops as f64 / 1e3
            }
        };
        let quantile_us = |quantile: f64| self.latency_ns.value_at_quantile(quantile) as f64 / 1e3;
        ClassReport {
            name: self.name.clone(),
            device: self.device.clone(),
            ops: self.ops,
            bytes: self.bytes,
            iops: round3(self.window_ops as f64 / window_s),
            mb_per_s: round3(self.window_bytes as f64 / window_s / 1e6),
            latency_us: LatencyUs {
                p50: round3(quantile_us(0.5)),
                p99: round3(quantile_us(0.99)),
                p999: round3(quantile_us(0.999)),
                p9999: round3(quantile_us(0.9999)),
                max: round3(self.latency_ns.max() as f64 / 1e3),
            },
            worst_500ms_iops: self.worst_window_iops(),
            queue_wait_us_max: round3(self.queue_wait_max_ns as f64 / 1e3),
            queue_wait_us_mean: round3(mean_us(self.queue_wait_sum_ns)),
            device_time_us_mean: round3(mean_us(self.device_time_sum_ns)),
            submitted: self.submitted,
            outstanding: self.submitted - self.ops,
            first_submit_s: round3(self.first_submit_ns.unwrap_or(0) as f64 / NANOS_PER_SECOND_F64),
            last_completion_s: round6(self.last_completion_ns as f64 / NANOS_PER_SECOND_F64),
            timeline: self.timeline(),
            latency_log2_us: self.log2_histogram(),
            latency_curve_us: if self.ops == 0 {
                Vec::new()
            } else {
                CURVE_PERCENTILES
                    .iter()
                    .map(|&percentile| PercentilePoint {
                        percentile,
                        latency_us: round3(quantile_us(percentile / 100.0)),
                    })
                    .collect()
            },
        }
    }
}

/// The power-of-two bucket of a latency in whole microseconds: 0 for 0..=1,
/// `k` for 2^k..2^(k+1).
fn log2_bucket(microseconds: u64) -> usize {
    if microseconds < 2 {
        0
    } else {
        microseconds.ilog2() as usize
    }
}

/// Rounds to three decimals so JSON stays short and stable.
fn round3(value: f64) -> f64 {
    (value * 1e3).round() / 1e3
}

fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

/// A duration in microseconds, written with a unit that keeps it short.
pub fn human_duration(microseconds: f64) -> String {
    if microseconds < 1_000.0 {
        format!("{microseconds:.0}µs")
    } else if microseconds < 1_000_000.0 {
        format!("{:.1}ms", microseconds / 1e3)
    } else {
        format!("{:.2}s", microseconds / 1e6)
    }
}

const GROUP_COLUMNS: [&str; 10] = [
    "IOPS",
    "MB/s",
    "p50",
    "p99",
    "p99.9",
    "p99.99",
    "max",
    "worst0.5s",
    "wait max",
    "wait:dev",
];
const COLUMN_WIDTH: usize = 9;

fn group_cells(row: Option<&ClassReport>) -> Vec<String> {
    let Some(row) = row else {
        return vec!["-".into(); GROUP_COLUMNS.len()];
    };
    let ratio = if row.device_time_us_mean > 0.0 {
        format!("{:.2}", row.queue_wait_us_mean / row.device_time_us_mean)
    } else {
        "-".into()
    };
    let mut cells = rate_and_latency_cells(row);
    cells.push(human_duration(row.queue_wait_us_max));
    cells.push(ratio);
    cells
}

/// The cells every per-class table starts with, under `IOPS`, `MB/s`, `p50`,
/// `p99`, `p99.9`, `p99.99`, `max` and `worst0.5s`.
pub fn rate_and_latency_cells(row: &ClassReport) -> Vec<String> {
    vec![
        format!("{:.0}", row.iops),
        format!("{:.1}", row.mb_per_s),
        human_duration(row.latency_us.p50),
        human_duration(row.latency_us.p99),
        human_duration(row.latency_us.p999),
        human_duration(row.latency_us.p9999),
        human_duration(row.latency_us.max),
        row.worst_500ms_iops
            .map_or_else(|| "-".into(), |iops| format!("{iops:.0}")),
    ]
}

/// Renders the per-class table, one column group per policy.
pub fn render_table(reports: &[RunReport]) -> String {
    render_grouped_table(reports, &GROUP_COLUMNS, |report, class, device| {
        group_cells(report.class(class, device))
    })
}

/// A per-class table with one column group per run: one row per (class,
/// device) in the order the runs first name them, each group titled by its
/// run's policy, with `columns` as headers and `cells(run, class, device)` as
/// a row's cells in that group (as many as `columns`). The simulator's table
/// and `tailguard bench`'s share this layout with their own columns.
pub fn render_grouped_table<'a, R: AsRef<RunReport>>(
    runs: &'a [R],
    columns: &[&str],
    cells: impl Fn(&'a R, &str, &str) -> Vec<String>,
) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    for run in runs {
        for row in &run.as_ref().classes {
            let key = (row.name.clone(), row.device.clone());
            if !rows.contains(&key) {
                rows.push(key);
            }
        }
    }
    let labels: Vec<String> = rows
        .iter()
        .map(|(class, device)| format!("{class}@{device}"))
        .collect();
    let label_width = labels
        .iter()
        .map(|label| label.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let group_width = columns.len() * (COLUMN_WIDTH + 1);
    let mut out = String::new();
    let _ = write!(out, "{:label_width$} ", "");
    for run in runs {
        let title = format!("── {} ", run.as_ref().policy);
        let _ = write!(out, "│{title:─<group_width$}");
    }
    out.push('\n');
    let _ = write!(out, "{:label_width$} ", "class");
    for _ in runs {
        out.push('│');
        for column in columns {
            let _ = write!(out, "{column:>COLUMN_WIDTH$} ");
        }
    }
    out.push('\n');
    for ((class, device), label) in rows.iter().zip(&labels) {
        let _ = write!(out, "{label:label_width$} ");
        for run in runs {
            out.push('│');
            for cell in cells(run, class, device) {
                let _ = write!(out, "{cell:>COLUMN_WIDTH$} ");
            }
        }
        out.push('\n');
    }
    out
}

impl AsRef<RunReport> for RunReport {
    fn as_ref(&self) -> &RunReport {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_pair_holds_a_few_bytes_and_an_active_one_only_its_range() {
        let idle: Vec<ClassAccumulator> = (0..1000)
            .map(|index| {
                ClassAccumulator::new(format!("class{index}"), "vda".into(), 1_000_000_000)
            })
            .collect();
        let bytes: usize = idle.iter().map(ClassAccumulator::heap_bytes).sum();
        assert!(
            bytes / idle.len() < 64,
            "{} bytes per idle pair",
            bytes / idle.len()
        );
        let mut active = ClassAccumulator::new("a".into(), "vda".into(), 1_000_000_000);
        for latency_us in 1..=900 {
            active.on_submit(0);
            active.on_complete(latency_us * 1_000, 0, 0, 4096);
        }
        let bytes = active.heap_bytes();
        assert!((8 << 10..=96 << 10).contains(&bytes), "{bytes} bytes");
        // 3 significant digits, as before: p50 of 1..=900 µs is 450 µs.
        let p50 = active.finish().latency_us.p50;
        assert!((p50 - 450.0).abs() <= 0.5, "{p50}");
    }

    #[test]
    fn accumulator_splits_latency_into_wait_and_device_time() {
        let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000);
        accumulator.on_submit(0);
        accumulator.on_submit(0);
        accumulator.on_complete(300_000, 0, 100_000, 4096);
        accumulator.on_complete(500_000, 0, 100_000, 4096);
        let report = accumulator.finish();
        assert_eq!(report.ops, 2);
        assert_eq!(report.outstanding, 0);
        assert_eq!(report.iops, 2.0);
        assert_eq!(report.queue_wait_us_max, 100.0);
        assert_eq!(report.device_time_us_mean, 300.0);
        assert!((report.latency_us.max - 500.0).abs() < 1.0);
    }

    #[test]
    fn rates_count_only_the_completions_inside_the_active_window() {
        // Active from 1 s for 1 s: two completions inside it, one before its
        // stop at 2 s and one after it (a request in flight at the stop).
        let mut accumulator =
            ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000).starting_at(1_000_000_000);
        for completed_at in [1_500_000_000, 1_999_999_999, 2_000_000_000, 2_700_000_000] {
            accumulator.on_submit(1_000_000_000);
            accumulator.on_complete(completed_at, 1_000_000_000, 1_000_000_000, 1_000_000);
        }
        let report = accumulator.finish();
        assert_eq!((report.ops, report.bytes), (4, 4_000_000));
        assert_eq!(report.iops, 2.0);
        assert_eq!(report.mb_per_s, 2.0);
    }

    #[test]
    fn the_worst_half_second_is_the_emptiest_full_window() {
        // Active from 1 s for 2.2 s: four full windows, the partial fifth ignored.
        let mut accumulator =
            ClassAccumulator::new("c".into(), "d".into(), 2_200_000_000).starting_at(1_000_000_000);
        let per_window = [10u64, 4, 7, 9, 0];
        for (window, &count) in per_window.iter().enumerate() {
            for index in 0..count {
                let at = 1_000_000_000 + window as u64 * RATE_WINDOW_NS + index * 1_000;
                accumulator.on_submit(at);
                accumulator.on_complete(at + 500, at, at, 4096);
            }
        }
        // A completion after the active window does not count.
        accumulator.on_submit(3_200_000_000);
        accumulator.on_complete(3_300_000_000, 3_200_000_000, 3_200_000_000, 4096);
        let report = accumulator.finish();
        assert_eq!(report.worst_500ms_iops, Some(8.0));

        let short = ClassAccumulator::new("c".into(), "d".into(), 300_000_000).finish();
        assert_eq!(short.worst_500ms_iops, None);

        // A window with nothing completed is a rate of zero.
        let mut idle = ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000).starting_at(0);
        idle.on_submit(0);
        idle.on_complete(100, 0, 0, 4096);
        assert_eq!(idle.finish().worst_500ms_iops, Some(0.0));
    }

    /// An accumulator active over `window_ns` from 0 with `per_millisecond`
    /// completions in every millisecond for which `running(ms)` holds.
    fn steady_completions(
        window_ns: Nanos,
        per_millisecond: u64,
        running: impl Fn(u64) -> bool,
        spans_ns: &[(Nanos, Nanos)],
    ) -> ClassAccumulator {
        let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), window_ns)
            .starting_at(0)
            .active_during(spans_ns);
        for millisecond in (0..window_ns / 1_000_000).filter(|&ms| running(ms)) {
            for index in 0..per_millisecond {
                let at = millisecond * 1_000_000 + index * 1_000;
                accumulator.on_submit(at);
                accumulator.on_complete(at + 500, at, at, 4096);
            }
        }
        accumulator
    }

    #[test]
    fn windows_inside_running_spans_leave_the_pauses_out() {
        // Readers run 0.7 s then pause 0.5 s, three times, at 10 per ms
        // (10,000/s) while they run.
        let period_ns = 1_200_000_000;
        let running = |ms: u64| ms % 1_200 < 700;
        let spans: Vec<(Nanos, Nanos)> = (0..3)
            .map(|period| (period * period_ns, period * period_ns + 700_000_000))
            .collect();
        let window_ns = 3 * period_ns;
        let whole = steady_completions(window_ns, 10, running, &[]).finish();
        assert!(
            whole.worst_500ms_iops.unwrap() < 5_000.0,
            "{:?}",
            whole.worst_500ms_iops
        );
        let restricted = steady_completions(window_ns, 10, running, &spans).finish();
        assert_eq!(restricted.worst_500ms_iops, Some(10_000.0));
        // The rates stay over the whole active window.
        assert_eq!(restricted.iops, whole.iops);

        // A dip inside the second span (2 per ms over 0.5 s) is still found.
        let dipped = |ms: u64| running(ms) && !(1_200..1_700).contains(&ms);
        let mut with_dip = steady_completions(window_ns, 10, dipped, &spans);
        for millisecond in 1_200..1_700u64 {
            for index in 0..2 {
                let at = millisecond * 1_000_000 + index * 1_000;
                with_dip.on_submit(at);
                with_dip.on_complete(at + 500, at, at, 4096);
            }
        }
        assert_eq!(with_dip.finish().worst_500ms_iops, Some(2_000.0));

        // Spans shorter than a window have none: no rate at all.
        let short = steady_completions(window_ns, 10, running, &[(0, 400_000_000)]).finish();
        assert_eq!(short.worst_500ms_iops, None);
    }

    #[test]
    fn one_span_or_touching_spans_count_as_the_active_window() {
        // Rates that fall window by window, with a trailing partial window.
        let window_ns = 2_300_000_000;
        let fill = |spans: &[(Nanos, Nanos)]| {
            let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), window_ns)
                .starting_at(0)
                .active_during(spans);
            for millisecond in 0..2_300u64 {
                for index in 0..(20 - millisecond / 150) {
                    let at = millisecond * 1_000_000 + index * 1_000;
                    accumulator.on_submit(at);
                    accumulator.on_complete(at + 500, at, at, 4096);
                }
            }
            accumulator.finish()
        };
        let plain = fill(&[]);
        assert_eq!(
            plain.worst_500ms_iops,
            fill(&[(0, window_ns)]).worst_500ms_iops
        );
        let touching = [(0, 1_000_000_000), (1_000_000_000, window_ns)];
        assert_eq!(plain.worst_500ms_iops, fill(&touching).worst_500ms_iops);
        // Touching between window edges: apart, the second span's windows
        // would start at 1.2 s and reach the slower 2.2 s.
        let touching_inside = [(0, 1_200_000_000), (1_200_000_000, window_ns)];
        assert_eq!(
            plain.worst_500ms_iops,
            fill(&touching_inside).worst_500ms_iops
        );
        let overlapping = [(1_000_000_000, window_ns), (0, 1_500_000_000)];
        assert_eq!(plain.worst_500ms_iops, fill(&overlapping).worst_500ms_iops);
        // A gap in the slowest stretch leaves it out: the worst rate rises.
        let gapped = [(0, 1_000_000_000), (1_100_000_000, 1_600_000_000)];
        let higher = fill(&gapped).worst_500ms_iops.unwrap();
        assert!(
            higher > plain.worst_500ms_iops.unwrap(),
            "{higher} vs {:?}",
            plain.worst_500ms_iops
        );
    }

    #[test]
    fn the_timeline_bins_completions_by_second_from_time_zero() {
        let mut accumulator =
            ClassAccumulator::new("c".into(), "d".into(), 3_000_000_000).starting_at(500_000_000);
        // (completed at, latency) in ns; second 1 has none.
        let completions = [
            (600_000_000u64, 100_000u64),
            (900_000_000, 300_000),
            (2_100_000_000, 2_000_000),
        ];
        for (completed_at, latency) in completions {
            accumulator.on_submit(completed_at - latency);
            accumulator.on_complete(
                completed_at,
                completed_at - latency,
                completed_at - latency,
                1_000_000,
            );
        }
        let timeline = accumulator.finish().timeline;
        let seconds: Vec<u64> = timeline.iter().map(|point| point.second).collect();
        assert_eq!(seconds, [0, 1, 2]);
        let iops: Vec<f64> = timeline.iter().map(|point| point.iops).collect();
        assert_eq!(iops, [2.0, 0.0, 1.0]);
        assert_eq!(timeline[0].mb_per_s, 2.0);
        assert_eq!(timeline[0].latency_us_max, 300.0);
        assert_eq!(timeline[1].latency_us_max, 0.0);
        assert_eq!(timeline[2].latency_us_max, 2_000.0);
    }

    #[test]
    fn a_completion_at_the_end_of_the_run_counts_in_its_last_second() {
        let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000)
            .starting_at(0)
            .covering_run(1_000_000_000);
        accumulator.on_submit(0);
        accumulator.on_complete(1_000_000_000, 0, 0, 4096);
        let timeline = accumulator.finish().timeline;
        assert_eq!(timeline.len(), 1, "{timeline:?}");
        assert_eq!(timeline[0].iops, 1.0);
    }

    #[test]
    fn the_timeline_covers_every_second_of_the_run() {
        let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000)
            .covering_run(4_200_000_000);
        accumulator.on_submit(1_000);
        accumulator.on_complete(1_500_000_000, 1_000, 1_000, 4096);
        let timeline = accumulator.finish().timeline;
        let seconds: Vec<u64> = timeline.iter().map(|point| point.second).collect();
        assert_eq!(seconds, [0, 1, 2, 3, 4]);
        let iops: Vec<f64> = timeline.iter().map(|point| point.iops).collect();
        assert_eq!(iops, [0.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn the_log2_histogram_counts_powers_of_two_of_microseconds() {
        let mut accumulator = ClassAccumulator::new("c".into(), "d".into(), 1_000_000_000);
        // 5 µs, 6 µs, 7.9 µs in 4..=7; none in 8..=15; 20 µs in 16..=31.
        for latency_ns in [5_000u64, 6_000, 7_900, 20_000] {
            accumulator.on_submit(0);
            accumulator.on_complete(latency_ns, 0, 0, 4096);
        }
        let report = accumulator.finish();
        let curve = &report.latency_curve_us;
        assert_eq!(curve.len(), CURVE_PERCENTILES.len());
        assert!((curve[0].latency_us - 6.0).abs() < 0.1, "{curve:?}");
        assert!(
            (curve.last().unwrap().latency_us - 20.0).abs() < 0.1,
            "{curve:?}"
        );
        assert!(curve
            .windows(2)
            .all(|pair| pair[0].latency_us <= pair[1].latency_us));
        let buckets = report.latency_log2_us;
        let shape: Vec<(u64, u64, u64)> = buckets
            .iter()
            .map(|bucket| (bucket.from_us, bucket.to_us, bucket.count))
            .collect();
        assert_eq!(shape, [(4, 7, 3), (8, 15, 0), (16, 31, 1)]);
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(1023), 9);
        assert_eq!(log2_bucket(1024), 10);
    }

    #[test]
    fn durations_pick_a_short_unit() {
        assert_eq!(human_duration(250.0), "250µs");
        assert_eq!(human_duration(2_500.0), "2.5ms");
        assert_eq!(human_duration(12_500_000.0), "12.50s");
    }
}
