//! A measured frontier: every point's medians over rounds, the static Pareto
//! frontier, each tailguard point against the best static setting, and the
//! terminal table.
//!
//! Ratios are taken per round against that round's solo run (the readers
//! alone), then summarised, so a drift of the device between rounds moves
//! numerator and denominator together. A run too short for a 0.5 s window
//! counts its mean rate as its worst. With readers that pause, both read
//! rates are while they run: the worst over windows inside their running
//! spans, the mean over the seconds they run. The write rate is the disk's own (from
//! its counters) when every run has it, else the writer's for every point, and
//! [`FrontierResult::write_rate_source`] says which. The same structure is
//! `--json`'s output.
//!
//! Medians taken point by point do not cancel a drift of the disk within a
//! run that moves every point of a round together, so each tailguard point is
//! also compared round by round ([`RoundByRound`]): against the static
//! frontier that round's own static points draw, and against that round's
//! best static point at its write rate.

use crate::error::CliError;
use crate::frontier::analysis::{self, Comparison, Position, Standing, Summary};
use crate::frontier::grid::{Setting, Variant};
use crate::frontier::measure::{ReaderPattern, Sample, Workload};
use serde::Serialize;
use std::fmt::Write as _;
use tailguard_sim::report::human_duration;

/// The whole result.
#[derive(Clone, Debug, Serialize)]
pub struct FrontierResult {
    /// The command that reproduces it.
    pub command: String,
    /// Kernel name of the target's device.
    pub device: String,
    /// Rounds run (every point once per round).
    pub rounds: u32,
    /// The readers, file sizes and run length.
    pub workload: Workload,
    /// Where the write rates come from.
    pub write_rate_source: WriteRateSource,
    /// The same-rate window, a fraction of the tailguard point's write rate.
    pub match_tolerance: f64,
    /// Worst-rate differences (over solo) below this are ties.
    pub tie_tolerance: f64,
    /// Every point, in grid order.
    pub points: Vec<PointResult>,
}

/// Where a frontier's write rates come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteRateSource {
    /// The device's own counters (`/sys/block/DEVICE/stat`).
    Disk,
    /// The writer's completed bytes (the target has no device counters).
    Writer,
}

/// One point's summary.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// What the point runs.
    #[serde(skip)]
    pub setting: Setting,
    /// Its name (`direct QD1 128k`, `tailguard 500us`).
    pub name: String,
    /// `solo`, `static` or `tailguard`.
    pub kind: &'static str,
    /// The static writer's queue depth.
    pub queue_depth: Option<u32>,
    /// The static writer's request size.
    pub request_bytes: Option<u64>,
    /// A tailguard variant's latency target, µs.
    pub latency_target_us: Option<u64>,
    /// Whether a tailguard point runs the adaptive controller by itself
    /// (beyond what the command line's settings say).
    pub adaptive: bool,
    /// Write rate, 10^6 bytes/s.
    pub write_mb_per_s: Summary,
    /// The readers' worst 0.5 s rate over their solo rate.
    pub worst_500ms_over_solo: Summary,
    /// The readers' mean rate over their solo rate.
    pub mean_over_solo: Summary,
    /// The readers' p99.99 latency, µs.
    pub read_p9999_us: Summary,
    /// The readers' max latency, µs.
    pub read_max_us: Summary,
    /// Static points: whether on the Pareto frontier of the static points.
    pub on_static_frontier: bool,
    /// Tailguard points: against the best static setting.
    pub versus_static: Option<VersusStatic>,
    /// The raw measures of each round.
    pub samples: Vec<Sample>,
}

/// A tailguard point against the static settings.
#[derive(Clone, Debug, Serialize)]
pub struct VersusStatic {
    /// beats, ties, loses or unmatched.
    pub standing: Standing,
    /// The static point compared with.
    pub static_point: Option<String>,
    /// Its median write rate.
    pub static_write_mb_per_s: Option<f64>,
    /// Its median worst 0.5 s rate over solo.
    pub static_worst_500ms_over_solo: Option<f64>,
    /// Tailguard's median worst ratio minus the static point's.
    pub worst_500ms_difference: Option<f64>,
    /// Whether the static point writes within the tolerance (else it
    /// dominates from a higher write rate).
    pub same_rate: bool,
    /// The static frontier's line at tailguard's write rate (interpolated
    /// between its points, from the readers alone with no writer; `None`
    /// beyond the fastest).
    pub frontier_worst_500ms_at_rate: Option<f64>,
    /// The same comparisons within each round (`None` with one round).
    pub by_round: Option<RoundByRound>,
}

/// A tailguard point against each round's own static points: per round, its
/// readers' worst 0.5 s rate over solo minus the static one, summarised over
/// the rounds that have something to compare with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RoundByRound {
    /// Against the line of the round's static frontier (from the round's
    /// readers alone) at the round's own write rate (`None`: the line never
    /// reached it).
    pub against_line: Option<Summary>,
    /// Rounds in which the line reached tailguard's write rate.
    pub line_rounds: u32,
    /// Of those, the rounds in which tailguard was at or above the line.
    pub line_rounds_at_or_above: u32,
    /// Against the round's best static point within the same-rate window
    /// (`None`: no round had one).
    pub against_same_rate: Option<Summary>,
    /// Rounds with a static point within the same-rate window.
    pub same_rate_rounds: u32,
    /// Of those, the rounds in which tailguard was at or above it.
    pub same_rate_rounds_at_or_above: u32,
}

impl RoundByRound {
    /// Compares `tailguard`'s rounds with the same rounds of `statics`.
    fn of(
        tailguard: &PointResult,
        statics: &[&PointResult],
        solo: &[Sample],
        from_disk: bool,
    ) -> Self {
        let mut against_line = Vec::new();
        let mut against_same_rate = Vec::new();
        for sample in &tailguard.samples {
            let Some(ours) = position_in_round(sample, solo, from_disk) else {
                continue;
            };
            let theirs: Vec<Position> = statics
                .iter()
                .filter_map(|point| point.samples.iter().find(|s| s.round == sample.round))
                .filter_map(|their| position_in_round(their, solo, from_disk))
                .collect();
            // The round's line starts at its readers alone, as the medians'
            // does (`PointResult::on_static_line`).
            let mut line_points = theirs.clone();
            line_points.extend(
                solo.iter()
                    .find(|reference| reference.round == sample.round)
                    .and_then(|reference| position_in_round(reference, solo, from_disk)),
            );
            if let Some(line) = analysis::frontier_at(ours.write_mb_per_s, &line_points) {
                against_line.push(ours.worst_ratio - line);
            }
            if let Some(index) = analysis::best_match(ours.write_mb_per_s, &theirs) {
                against_same_rate.push(ours.worst_ratio - theirs[index].worst_ratio);
            }
        }
        let at_or_above = |differences: &[f64]| differences.iter().filter(|d| **d >= 0.0).count();
        Self {
            against_line: Summary::of(&against_line),
            line_rounds: against_line.len() as u32,
            line_rounds_at_or_above: at_or_above(&against_line) as u32,
            against_same_rate: Summary::of(&against_same_rate),
            same_rate_rounds: against_same_rate.len() as u32,
            same_rate_rounds_at_or_above: at_or_above(&against_same_rate) as u32,
        }
    }
}

/// Where one round's `sample` sits on the trade-off plane, its reads over
/// the same round's solo run (`None` without one).
fn position_in_round(sample: &Sample, solo: &[Sample], from_disk: bool) -> Option<Position> {
    let solo_iops = solo
        .iter()
        .find(|reference| reference.round == sample.round)?
        .read_iops;
    if solo_iops <= 0.0 {
        return None;
    }
    Some(Position {
        write_mb_per_s: write_rate(sample, from_disk),
        worst_ratio: sample.read_worst_500ms_iops.unwrap_or(sample.read_iops) / solo_iops,
    })
}

/// A run's write rate: the disk's own when `from_disk`, else the writer's.
fn write_rate(sample: &Sample, from_disk: bool) -> f64 {
    if from_disk {
        sample.disk_write_mb_per_s.unwrap_or(f64::NAN)
    } else {
        sample.writer_mb_per_s
    }
}

impl FrontierResult {
    /// Builds the result from each point's samples (per point, one per round,
    /// in round order). `settings` must hold [`Setting::Solo`].
    pub fn build(
        command: String,
        device: String,
        workload: Workload,
        settings: &[Setting],
        samples: &[Vec<Sample>],
    ) -> Result<Self, CliError> {
        let solo_index = settings
            .iter()
            .position(|setting| *setting == Setting::Solo)
            .ok_or_else(|| CliError::usage("the frontier needs the solo point"))?;
        let solo = &samples[solo_index];
        let from_disk = samples
            .iter()
            .flatten()
            .all(|sample| sample.disk_write_mb_per_s.is_some());
        let mut points = Vec::with_capacity(settings.len());
        for (setting, runs) in settings.iter().zip(samples) {
            points.push(summarise(setting, runs, solo, from_disk)?);
        }
        mark_frontier_and_compare(&mut points, solo, from_disk);
        Ok(Self {
            command,
            device,
            rounds: solo.len() as u32,
            workload,
            write_rate_source: if from_disk {
                WriteRateSource::Disk
            } else {
                WriteRateSource::Writer
            },
            match_tolerance: analysis::MATCH_TOLERANCE,
            tie_tolerance: analysis::TIE_TOLERANCE,
            points,
        })
    }

    /// The tailguard points.
    pub fn tailguards(&self) -> impl Iterator<Item = &PointResult> {
        self.points
            .iter()
            .filter(|point| point.setting.is_tailguard())
    }
}

impl PointResult {
    /// Where its medians sit on the trade-off plane.
    pub fn position(&self) -> Position {
        Position {
            write_mb_per_s: self.write_mb_per_s.median,
            worst_ratio: self.worst_500ms_over_solo.median,
        }
    }

    /// Whether the static line joins it: the readers alone (no writer at
    /// all is a static setting too, and a writer that pauses between bursts
    /// of another lands on the line between them), or a static point on the
    /// frontier.
    pub fn on_static_line(&self) -> bool {
        self.setting == Setting::Solo || self.on_static_frontier
    }
}

fn summarise(
    setting: &Setting,
    runs: &[Sample],
    solo: &[Sample],
    from_disk: bool,
) -> Result<PointResult, CliError> {
    let name = setting.name();
    let solo_iops = |sample: &Sample| {
        solo.iter()
            .find(|reference| reference.round == sample.round)
            .map_or(f64::NAN, |reference| reference.read_iops)
    };
    let ratio = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { f64::NAN };
    let summary = |value: &dyn Fn(&Sample) -> f64| {
        Summary::of(&runs.iter().map(value).collect::<Vec<_>>())
            .ok_or_else(|| CliError::usage(format!("{name}: no measure in any round")))
    };
    let (queue_depth, request_bytes) = match *setting {
        Setting::Static {
            queue_depth,
            request_bytes,
        } => (Some(queue_depth), Some(request_bytes)),
        _ => (None, None),
    };
    Ok(PointResult {
        setting: *setting,
        kind: setting.kind(),
        queue_depth,
        request_bytes,
        latency_target_us: match setting {
            Setting::Tailguard(Variant::LatencyTarget { target_us }) => Some(*target_us),
            _ => None,
        },
        adaptive: *setting == Setting::Tailguard(Variant::Adaptive),
        write_mb_per_s: summary(&|sample| write_rate(sample, from_disk))?,
        worst_500ms_over_solo: summary(&|sample| {
            position_in_round(sample, solo, from_disk).map_or(f64::NAN, |at| at.worst_ratio)
        })?,
        mean_over_solo: summary(&|sample| ratio(sample.read_iops, solo_iops(sample)))?,
        read_p9999_us: summary(&|sample| sample.read_p9999_us)?,
        read_max_us: summary(&|sample| sample.read_max_us)?,
        on_static_frontier: false,
        versus_static: None,
        samples: runs.to_vec(),
        name,
    })
}

fn mark_frontier_and_compare(points: &mut [PointResult], solo: &[Sample], from_disk: bool) {
    let static_indices: Vec<usize> = (0..points.len())
        .filter(|&index| points[index].setting.is_static())
        .collect();
    let positions: Vec<Position> = static_indices
        .iter()
        .map(|&index| points[index].position())
        .collect();
    for (&index, on) in static_indices.iter().zip(analysis::pareto(&positions)) {
        points[index].on_static_frontier = on;
    }
    let line_positions: Vec<Position> = points
        .iter()
        .filter(|point| point.on_static_line())
        .map(PointResult::position)
        .collect();
    for index in 0..points.len() {
        if !points[index].setting.is_tailguard() {
            continue;
        }
        let position = points[index].position();
        let comparison: Comparison = analysis::compare(position, &positions);
        let against = comparison.against.map(|at| &points[static_indices[at]]);
        let statics: Vec<&PointResult> = static_indices.iter().map(|&at| &points[at]).collect();
        let by_round =
            (solo.len() > 1).then(|| RoundByRound::of(&points[index], &statics, solo, from_disk));
        points[index].versus_static = Some(VersusStatic {
            standing: comparison.standing,
            static_point: against.map(|point| point.name.clone()),
            static_write_mb_per_s: against.map(|point| point.write_mb_per_s.median),
            static_worst_500ms_over_solo: against.map(|point| point.worst_500ms_over_solo.median),
            worst_500ms_difference: comparison.worst_ratio_difference,
            same_rate: comparison.same_rate,
            frontier_worst_500ms_at_rate: analysis::frontier_at(
                position.write_mb_per_s,
                &line_positions,
            ),
            by_round,
        });
    }
}

/// A summary as `median` or, over several rounds, `median [min-max]`.
fn cell(summary: &Summary, rounds: u32, format: impl Fn(f64) -> String) -> String {
    if rounds > 1 {
        format!(
            "{} [{}-{}]",
            format(summary.median),
            format(summary.min),
            format(summary.max)
        )
    } else {
        format(summary.median)
    }
}

/// How a tailguard point stands, for the table: `loses to direct QD1 128k
/// (0.92): -0.35`.
pub fn describe_versus(versus: &VersusStatic) -> String {
    let verb = match versus.standing {
        Standing::Beats => "beats",
        Standing::Ties => "ties",
        Standing::Loses => "loses to",
        Standing::Unmatched => {
            return match versus.frontier_worst_500ms_at_rate {
                Some(line) => format!(
                    "no static setting within ±10%; the static frontier's line there: {line:.2}"
                ),
                None => "no static setting within ±10%, and none both faster and better for \
                         the readers"
                    .into(),
            }
        }
    };
    let verdict = format!(
        "{verb} {} ({:.2} at {:.0} MB/s{}): {:+.2}",
        versus.static_point.as_deref().unwrap_or("?"),
        versus.static_worst_500ms_over_solo.unwrap_or(f64::NAN),
        versus.static_write_mb_per_s.unwrap_or(f64::NAN),
        if versus.same_rate {
            ""
        } else {
            ", writing more"
        },
        versus.worst_500ms_difference.unwrap_or(f64::NAN)
    );
    // A point a few percent off its match in write rate can still sit well
    // under the line the static frontier draws at its own rate: say so.
    match (
        versus.frontier_worst_500ms_at_rate,
        versus.worst_500ms_difference,
    ) {
        (Some(line), Some(difference)) => {
            let own = versus.static_worst_500ms_over_solo.unwrap_or(f64::NAN) + difference;
            format!(
                "{verdict}; the static line there: {line:.2} ({:+.2})",
                own - line
            )
        }
        _ => verdict,
    }
}

/// A tailguard point's round-by-round comparisons in one line:
/// `against the line -0.03 [-0.08 -0.02], at or above in 0 of 5 rounds;
/// against the best static point within ±10% +0.01 [-0.02 +0.04], 2 of 3`.
pub fn describe_by_round(by_round: &RoundByRound) -> String {
    let part = |summary: Option<Summary>, rounds: u32, at_or_above: u32, last: &str| match summary {
        Some(summary) => format!(
            "{:+.3} [{:+.3} {:+.3}], at or above in {at_or_above} of {rounds}{last}",
            summary.median, summary.min, summary.max
        ),
        None => "(no round to compare)".into(),
    };
    format!(
        "against the line {}; against the best static point within ±10% {}",
        part(
            by_round.against_line,
            by_round.line_rounds,
            by_round.line_rounds_at_or_above,
            " rounds"
        ),
        part(
            by_round.against_same_rate,
            by_round.same_rate_rounds,
            by_round.same_rate_rounds_at_or_above,
            ""
        )
    )
}

/// The lines under the table that compare each tailguard point round by
/// round (empty with one round).
fn by_round_lines(result: &FrontierResult) -> String {
    let mut out = String::new();
    for point in result.tailguards() {
        if let Some(by_round) = point.versus_static.as_ref().and_then(|v| v.by_round) {
            let _ = writeln!(out, "  {}: {}", point.name, describe_by_round(&by_round));
        }
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "round by round (each round against its own static points; differences in worst \
         0.5 s/solo, median [min max]):\n{out}"
    )
}

/// The terminal table, sorted by write rate; `*` marks the static frontier.
pub fn render_table(result: &FrontierResult) -> String {
    let rounds = result.rounds;
    let mut order: Vec<&PointResult> = result.points.iter().collect();
    order.sort_by(|a, b| a.write_mb_per_s.median.total_cmp(&b.write_mb_per_s.median));
    let header = [
        "point",
        "write MB/s",
        "worst 0.5s/solo",
        "mean/solo",
        "read p99.99",
        "read max",
        "",
        "tailguard vs static: the best at its write rate (±10%), or one dominating",
    ];
    let rows: Vec<[String; 8]> = order
        .iter()
        .map(|point| {
            [
                point.name.clone(),
                cell(&point.write_mb_per_s, rounds, |value| format!("{value:.0}")),
                cell(&point.worst_500ms_over_solo, rounds, |value| {
                    format!("{value:.2}")
                }),
                cell(&point.mean_over_solo, rounds, |value| format!("{value:.2}")),
                cell(&point.read_p9999_us, rounds, human_duration),
                cell(&point.read_max_us, rounds, human_duration),
                if point.on_static_frontier { "*" } else { "" }.into(),
                point
                    .versus_static
                    .as_ref()
                    .map(describe_versus)
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let mut widths = header.map(|title| title.chars().count());
    for row in &rows {
        for (width, text) in widths.iter_mut().zip(row) {
            *width = (*width).max(text.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (index, (text, width)) in cells.iter().zip(&widths).enumerate() {
            let padding = width.saturating_sub(text.chars().count());
            if index == 0 || index == cells.len() - 1 {
                let _ = write!(out, "{text}{}  ", " ".repeat(padding));
            } else {
                let _ = write!(out, "{}{text}  ", " ".repeat(padding));
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&mut out, &header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    out.push_str(&by_round_lines(result));
    out.push_str(&footnote(result));
    out
}

/// What the table's columns and marks mean.
fn footnote(result: &FrontierResult) -> String {
    format!(
        "{}; write MB/s: {}; worst 0.5 s and mean read rates over the same round's solo run; \
         * = on the static Pareto frontier; {}\n",
        match result.workload.reader_pattern {
            ReaderPattern::Continuous => "readers that never pause".to_string(),
            pattern @ ReaderPattern::Periodic { .. } => format!(
                "{} (the writer throughout): read rates while they run (0.5 s windows inside \
                 running spans)",
                pattern.describe()
            ),
        },
        if result.write_rate_source == WriteRateSource::Disk {
            format!("what device {} wrote (its own counters)", result.device)
        } else {
            "the writer's own rate (the target has no device counters)".into()
        },
        if result.rounds > 1 {
            format!("medians [min-max] of {} interleaved rounds", result.rounds)
        } else {
            "one round, so no spread is shown".into()
        }
    )
}

/// One round of a point for tests: disk write MB/s, mean reads/s, worst
/// 0.5 s reads/s.
#[cfg(test)]
pub(crate) type TestRound = (f64, f64, f64);

/// A frontier for tests over the demo's workload: each point's rounds, in
/// round order.
#[cfg(test)]
pub(crate) fn frontier_of(points: &[(Setting, &[TestRound])]) -> FrontierResult {
    let settings: Vec<Setting> = points.iter().map(|(setting, _)| *setting).collect();
    let samples: Vec<Vec<Sample>> = points
        .iter()
        .map(|(_, rounds)| {
            (0u32..)
                .zip(rounds.iter())
                .map(|(round, &(write, iops, worst))| {
                    crate::frontier::measure::sample(round, write, iops, worst)
                })
                .collect()
        })
        .collect();
    let workload = crate::frontier::measure::Workload::with_demo_readers(1 << 20, 1 << 20, 1.0);
    FrontierResult::build("cmd".into(), "vda".into(), workload, &settings, &samples)
        .expect("the points hold solo")
}

/// A static point for tests: the writer at `queue_depth` × `request_kib` KiB.
#[cfg(test)]
pub(crate) fn direct(queue_depth: u32, request_kib: u64) -> Setting {
    Setting::Static {
        queue_depth,
        request_bytes: request_kib << 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontier::measure::sample;

    fn built() -> FrontierResult {
        // Two rounds; solo reads 1000/s then 800/s.
        frontier_of(&[
            (Setting::Solo, &[(1.0, 1000.0, 950.0), (1.0, 800.0, 760.0)]),
            (
                direct(1, 128),
                &[(450.0, 950.0, 900.0), (470.0, 760.0, 720.0)],
            ),
            (
                direct(2, 1024),
                &[(1800.0, 700.0, 500.0), (1700.0, 560.0, 400.0)],
            ),
            (
                Setting::Tailguard(Variant::Default),
                &[(460.0, 800.0, 600.0), (440.0, 640.0, 480.0)],
            ),
        ])
    }

    fn workload() -> Workload {
        Workload::with_demo_readers(1 << 20, 1 << 20, 1.0)
    }

    #[test]
    fn ratios_are_per_round_against_that_rounds_solo() {
        let result = built();
        assert_eq!(result.rounds, 2);
        assert_eq!(result.write_rate_source, WriteRateSource::Disk);
        let static_slow = &result.points[1];
        // 900/1000 and 720/800: both 0.9.
        assert!((static_slow.worst_500ms_over_solo.median - 0.9).abs() < 1e-9);
        assert!((static_slow.mean_over_solo.min - 0.95).abs() < 1e-9);
        assert_eq!(static_slow.write_mb_per_s.median, 460.0);
        assert!(static_slow.on_static_frontier && result.points[2].on_static_frontier);
        assert!(!result.points[3].on_static_frontier, "only static points");
    }

    #[test]
    fn tailguard_is_matched_with_the_static_point_at_its_rate() {
        let result = built();
        let versus = result.points[3].versus_static.as_ref().unwrap();
        assert_eq!(versus.static_point.as_deref(), Some("direct QD1 128k"));
        assert_eq!(versus.standing, Standing::Loses);
        // 0.6 against 0.9.
        assert!((versus.worst_500ms_difference.unwrap() + 0.3).abs() < 1e-9);
        assert!(result.points[1].versus_static.is_none());
        assert!(describe_versus(versus).starts_with("loses to direct QD1 128k (0.90"));
    }

    #[test]
    fn each_round_is_compared_with_its_own_static_points() {
        let result = built();
        let by_round = result.points[3]
            .versus_static
            .as_ref()
            .unwrap()
            .by_round
            .unwrap();
        // Round 0: 0.6 at 460 MB/s; that round's line joins 450/0.9 and
        // 1800/0.5 there. Round 1: 440 MB/s is left of that round's static
        // points (470 to 1700), where the line runs from the readers alone
        // (1 MB/s, 760/800).
        let round_0 = 0.6 - (0.9 - 0.4 * 10.0 / 1350.0);
        let round_1 = 0.6 - (0.95 - 0.05 * 439.0 / 469.0);
        let against_line = by_round.against_line.unwrap();
        assert!(
            (against_line.min - round_1).abs() < 1e-9,
            "{against_line:?}"
        );
        assert!(
            (against_line.max - round_0).abs() < 1e-9,
            "{against_line:?}"
        );
        assert_eq!(
            (by_round.line_rounds, by_round.line_rounds_at_or_above),
            (2, 0)
        );
        // The medians' line also starts at the readers alone: 1 MB/s, 0.95
        // (both rounds' 950/1000 and 760/800), to QD1 128k's 460/0.9.
        let medians_line = result.points[3]
            .versus_static
            .as_ref()
            .unwrap()
            .frontier_worst_500ms_at_rate
            .unwrap();
        assert!((medians_line - (0.95 - 0.05 * 449.0 / 459.0)).abs() < 1e-9);
        // Both rounds have QD1 128k within 10% of tailguard's rate: 0.6
        // against 0.9 in each.
        let same_rate = by_round.against_same_rate.unwrap();
        assert!((same_rate.min + 0.3).abs() < 1e-9 && (same_rate.max + 0.3).abs() < 1e-9);
        assert_eq!(
            (
                by_round.same_rate_rounds,
                by_round.same_rate_rounds_at_or_above
            ),
            (2, 0)
        );
        let line = describe_by_round(&by_round);
        assert!(
            line.starts_with("against the line -0.300 [-0.303 -0.297], at or above in 0 of 2"),
            "{line}"
        );
        assert!(
            line.ends_with("-0.300 [-0.300 -0.300], at or above in 0 of 2"),
            "{line}"
        );
        let table = render_table(&result);
        assert!(table.contains("round by round"), "{table}");
        assert!(table.contains(&format!("  tailguard: {line}")), "{table}");
    }

    #[test]
    fn a_round_with_tailguard_at_or_above_counts() {
        // The disk drifts: round 1 writes less and reads less everywhere.
        // Tailguard is 0.01 over each round's own line.
        let result = frontier_of(&[
            (Setting::Solo, &[(0.0, 1000.0, 950.0), (0.0, 1000.0, 950.0)]),
            (
                direct(1, 256),
                &[(400.0, 950.0, 900.0), (300.0, 850.0, 800.0)],
            ),
            (
                direct(2, 256),
                &[(1000.0, 650.0, 600.0), (800.0, 550.0, 500.0)],
            ),
            (
                Setting::Tailguard(Variant::Default),
                &[(940.0, 650.0, 640.0), (550.0, 700.0, 660.0)],
            ),
        ]);
        let by_round = result.points[3]
            .versus_static
            .as_ref()
            .unwrap()
            .by_round
            .unwrap();
        assert_eq!(
            (by_round.line_rounds, by_round.line_rounds_at_or_above),
            (2, 2)
        );
        let against_line = by_round.against_line.unwrap();
        assert!((against_line.min - 0.01).abs() < 1e-9, "{against_line:?}");
        // Round 0 matches QD2 256k (1000 MB/s): 0.64 against 0.60. Round 1
        // has nothing within 10% of 550 MB/s.
        assert_eq!(
            (
                by_round.same_rate_rounds,
                by_round.same_rate_rounds_at_or_above
            ),
            (1, 1)
        );
    }

    #[test]
    fn one_round_has_no_round_by_round_comparison() {
        let result = frontier_of(&[
            (Setting::Solo, &[(0.0, 1000.0, 900.0)]),
            (direct(1, 128), &[(450.0, 900.0, 850.0)]),
            (
                Setting::Tailguard(Variant::Default),
                &[(460.0, 850.0, 800.0)],
            ),
        ]);
        let versus = result.points[2].versus_static.as_ref().unwrap();
        assert_eq!(versus.by_round, None);
        assert!(!render_table(&result).contains("round by round"));
    }

    #[test]
    fn a_verdict_also_names_the_static_line_at_the_points_own_rate() {
        // The default on the disk: 0.63 at 1293 MB/s, matched with QD2 256k
        // (0.65 at 1753 MB/s, writing more), where the line gives 0.72.
        let versus = VersusStatic {
            standing: Standing::Ties,
            static_point: Some("direct QD2 256k".into()),
            static_write_mb_per_s: Some(1753.0),
            static_worst_500ms_over_solo: Some(0.65),
            worst_500ms_difference: Some(-0.02),
            same_rate: false,
            frontier_worst_500ms_at_rate: Some(0.72),
            by_round: None,
        };
        assert_eq!(
            describe_versus(&versus),
            "ties direct QD2 256k (0.65 at 1753 MB/s, writing more): -0.02; \
             the static line there: 0.72 (-0.09)"
        );
        let without_line = VersusStatic {
            frontier_worst_500ms_at_rate: None,
            ..versus
        };
        assert!(describe_versus(&without_line).ends_with("writing more): -0.02"));
    }

    #[test]
    fn the_table_is_sorted_by_write_rate_and_marks_the_frontier() {
        let table = render_table(&built());
        let names: Vec<&str> = table
            .lines()
            .skip(1)
            .take(4)
            .map(|line| line.split("  ").next().unwrap().trim())
            .collect();
        assert_eq!(
            names,
            ["solo", "tailguard", "direct QD1 128k", "direct QD2 1m"],
            "{table}"
        );
        let marked: Vec<&str> = table
            .lines()
            .skip(1)
            .take(4)
            .filter(|line| line.split_whitespace().any(|cell| cell == "*"))
            .collect();
        assert_eq!(marked.len(), 2, "{table}");
        assert!(
            marked.iter().all(|line| line.starts_with("direct")),
            "{table}"
        );
        assert!(table.contains("[440-460]"), "min-max over rounds: {table}");
        assert!(table.contains("readers that never pause"), "{table}");
        let mut pausing = built();
        pausing.workload.reader_pattern = ReaderPattern::Periodic {
            run_s: 2.0,
            pause_s: 1.0,
        };
        let table = render_table(&pausing);
        assert!(
            table.contains("readers running 2 s then pausing 1 s in turn"),
            "{table}"
        );
    }

    #[test]
    fn the_json_has_one_object_per_point_with_summaries() {
        let value = serde_json::to_value(built()).unwrap();
        let points = value["points"].as_array().unwrap();
        assert_eq!(points.len(), 4);
        for point in points {
            for key in [
                "write_mb_per_s",
                "worst_500ms_over_solo",
                "mean_over_solo",
                "read_p9999_us",
                "read_max_us",
            ] {
                let summary = &point[key];
                let (low, middle, high) = (
                    summary["min"].as_f64().unwrap(),
                    summary["median"].as_f64().unwrap(),
                    summary["max"].as_f64().unwrap(),
                );
                assert!(low <= middle && middle <= high, "{key}: {summary}");
            }
            assert_eq!(point["samples"].as_array().unwrap().len(), 2);
        }
        assert_eq!(points[3]["versus_static"]["standing"], "loses");
        let by_round = &points[3]["versus_static"]["by_round"];
        assert_eq!(by_round["line_rounds"], 2);
        assert_eq!(by_round["same_rate_rounds"], 2);
        assert!(by_round["against_same_rate"]["median"].as_f64().unwrap() < 0.0);
        assert_eq!(points[1]["kind"], "static");
        assert_eq!(points[1]["request_bytes"], 131072);
        assert_eq!(value["write_rate_source"], "disk");
        assert_eq!(value["workload"]["reader_pattern"]["readers"], "continuous");
    }

    #[test]
    fn without_device_counters_the_writers_rate_stands_in() {
        let settings = [Setting::Solo, Setting::Tailguard(Variant::Default)];
        let mut tailguard = sample(0, 300.0, 900.0, 800.0);
        tailguard.disk_write_mb_per_s = None;
        let samples = vec![vec![sample(0, 0.0, 1000.0, 900.0)], vec![tailguard]];
        let result = FrontierResult::build(
            "cmd".into(),
            "tmpfs".into(),
            workload(),
            &settings,
            &samples,
        )
        .unwrap();
        assert_eq!(result.write_rate_source, WriteRateSource::Writer);
        assert_eq!(result.points[1].write_mb_per_s.median, 300.0);
        assert_eq!(
            result.points[1].versus_static.as_ref().unwrap().standing,
            Standing::Unmatched
        );
    }
}
