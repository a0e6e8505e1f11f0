//! The frontier's trade-off chart and table, as HTML.
//!
//! The chart puts disk write MB/s on x and the readers' worst 0.5 s rate over
//! solo on y, both linear from zero. Static settings are blue dots (the ones on
//! the static Pareto frontier darker, joined by the frontier line), tailguard's
//! points orange dots joined by their own line in order of write rate, each
//! dot labelled (`1x128k`: queue depth x request size; `500us`: a tailguard
//! latency target) and, over several rounds, crossed by thin min-max whiskers
//! in both directions. Up and to the right is better: a tailguard point above
//! the blue line keeps the readers higher than any static setting writing as
//! fast. The chart's title says which readers were measured: readers that
//! never pause, or readers that run and pause in turn (whose worst rate counts
//! only windows inside their running spans). The chart is a [`Chart`] from
//! [`super::svg`] with the dots, whiskers and labels drawn as its overlay.

use super::svg::{self, escape, Axis, Chart, Plot, Series, PALETTE};
use crate::frontier::grid::Setting;
use crate::frontier::measure::ReaderPattern;
use crate::frontier::result::{describe_by_round, describe_versus, FrontierResult, PointResult};
use std::fmt::Write as _;
use tailguard_sim::report::human_duration;

/// Static points on the frontier, and the frontier line.
const STATIC_COLOUR: &str = PALETTE[0];
/// Static points off the frontier.
const STATIC_OFF_FRONTIER_COLOUR: &str = PALETTE[5];
/// Tailguard's points and line.
const TAILGUARD_COLOUR: &str = PALETTE[1];

/// The short label of a point on the chart.
fn label(point: &PointResult) -> String {
    match (point.queue_depth, point.request_bytes) {
        (Some(depth), Some(bytes)) => {
            format!("{depth}x{}", crate::frontier::grid::size_label(bytes))
        }
        _ => point
            .name
            .strip_prefix("tailguard ")
            .unwrap_or("default")
            .to_string(),
    }
}

/// Medians of `points` as (write, worst ratio), sorted by write.
fn line_of<'a>(points: impl Iterator<Item = &'a PointResult>) -> Vec<(f64, f64)> {
    let mut line: Vec<(f64, f64)> = points
        .map(|point| {
            (
                point.write_mb_per_s.median,
                point.worst_500ms_over_solo.median,
            )
        })
        .collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    line
}

/// The y axis's label, saying when the windows are counted.
fn y_label(result: &FrontierResult) -> &'static str {
    match result.workload.reader_pattern {
        ReaderPattern::Continuous => "worst 0.5 s read rate / solo",
        ReaderPattern::Periodic { .. } => "worst 0.5 s read rate while running / solo",
    }
}

/// The trade-off chart as an `<svg>`.
pub fn chart(result: &FrontierResult) -> String {
    let shown: Vec<&PointResult> = result
        .points
        .iter()
        .filter(|point| point.setting != Setting::Solo)
        .collect();
    let write_max = shown
        .iter()
        .map(|point| point.write_mb_per_s.max)
        .fold(0.0f64, f64::max);
    let ratio_max = shown
        .iter()
        .map(|point| point.worst_500ms_over_solo.max)
        .fold(1.0f64, f64::max);
    let chart = Chart {
        title: format!(
            "readers' worst 0.5 s rate against disk writes: {}",
            result.workload.reader_pattern.describe()
        ),
        x: Axis::linear_from_zero("disk write MB/s", write_max * 1.05, |value| {
            format!("{value:.0}")
        }),
        y: Axis::linear_from_zero(y_label(result), ratio_max, |value| format!("{value:.1}")),
        series: vec![
            Series {
                name: "static O_DIRECT (frontier)".into(),
                points: line_of(result.points.iter().filter(|point| point.on_static_line())),
            },
            Series {
                name: "tailguard".into(),
                points: line_of(result.tailguards()),
            },
        ],
    };
    chart.to_svg_with(|plot, out| {
        for point in &shown {
            let colour = if point.setting.is_tailguard() {
                TAILGUARD_COLOUR
            } else if point.on_static_frontier {
                STATIC_COLOUR
            } else {
                STATIC_OFF_FRONTIER_COLOUR
            };
            mark(plot, out, point, colour, result.rounds > 1);
        }
    })
}

/// A point's dot, whiskers and label.
fn mark(plot: &Plot, out: &mut String, point: &PointResult, colour: &str, whiskers: bool) {
    let (write, ratio) = (&point.write_mb_per_s, &point.worst_500ms_over_solo);
    let Some(centre) = plot.at((write.median, ratio.median)) else {
        return;
    };
    if whiskers {
        if let (Some(low), Some(high)) = (
            plot.at((write.min, ratio.median)),
            plot.at((write.max, ratio.median)),
        ) {
            svg::polyline(out, &[low, high], colour);
        }
        if let (Some(low), Some(high)) = (
            plot.at((write.median, ratio.min)),
            plot.at((write.median, ratio.max)),
        ) {
            svg::polyline(out, &[low, high], colour);
        }
    }
    svg::circle(out, centre, 3.5, colour);
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"{colour}\">{}</text>",
        centre.0 + 5.0,
        centre.1 - 4.0,
        escape(&label(point))
    );
}

/// The chart and a table of every point, as one section of a page.
pub fn section(result: &FrontierResult) -> String {
    let mut out = String::from("<h2>The trade-off: tailguard against static settings</h2>\n");
    let _ = writeln!(out, "{}", chart(result));
    out.push_str(
        "<table>\n<tr><th>point</th><th>write MB/s</th><th>worst 0.5 s / solo</th>\
         <th>mean / solo</th><th>read p99.99</th><th>read max</th><th>static frontier</th>\
         <th>against static: the best at its write rate (±10%), or one dominating</th></tr>\n",
    );
    let mut order: Vec<&PointResult> = result.points.iter().collect();
    order.sort_by(|a, b| a.write_mb_per_s.median.total_cmp(&b.write_mb_per_s.median));
    for point in order {
        let range = |summary: &crate::frontier::analysis::Summary,
                     format: &dyn Fn(f64) -> String| {
            if result.rounds > 1 {
                format!(
                    "{} [{}-{}]",
                    format(summary.median),
                    format(summary.min),
                    format(summary.max)
                )
            } else {
                format(summary.median)
            }
        };
        let cells = [
            point.name.clone(),
            range(&point.write_mb_per_s, &|value| format!("{value:.0}")),
            range(&point.worst_500ms_over_solo, &|value| format!("{value:.2}")),
            range(&point.mean_over_solo, &|value| format!("{value:.2}")),
            range(&point.read_p9999_us, &human_duration),
            range(&point.read_max_us, &human_duration),
            if point.on_static_frontier { "yes" } else { "" }.into(),
            point
                .versus_static
                .as_ref()
                .map(|versus| match &versus.by_round {
                    Some(by_round) => format!(
                        "{}; round by round: {}",
                        describe_versus(versus),
                        describe_by_round(by_round)
                    ),
                    None => describe_versus(versus),
                })
                .unwrap_or_default(),
        ];
        out.push_str("<tr>");
        for cell in cells {
            let _ = write!(out, "<td>{}</td>", escape(&cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// The standalone page of `tailguard frontier --report`.
pub fn page(title: &str, notes: &[String], result: &FrontierResult) -> String {
    let mut out = super::page_start(title, super::STYLE);
    for note in notes {
        let _ = writeln!(out, "<p>{}</p>", escape(note));
    }
    out.push_str(&section(result));
    out.push_str(super::PAGE_END);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontier::grid::Variant;
    use crate::frontier::measure::{sample, Workload};
    use crate::frontier::result::{direct, frontier_of};

    #[test]
    fn the_chart_draws_every_point_and_both_lines() {
        let settings = [
            Setting::Solo,
            Setting::Static {
                queue_depth: 1,
                request_bytes: 128 << 10,
            },
            Setting::Static {
                queue_depth: 2,
                request_bytes: 1 << 20,
            },
            Setting::Static {
                queue_depth: 2,
                request_bytes: 128 << 10,
            },
            Setting::Tailguard(Variant::Default),
            Setting::Tailguard(Variant::LatencyTarget { target_us: 500 }),
        ];
        let samples = vec![
            vec![sample(0, 1.0, 1000.0, 950.0)],
            vec![sample(0, 450.0, 950.0, 900.0)],
            vec![sample(0, 1800.0, 700.0, 500.0)],
            vec![sample(0, 800.0, 700.0, 400.0)],
            vec![sample(0, 460.0, 800.0, 600.0)],
            vec![sample(0, 300.0, 900.0, 800.0)],
        ];
        let workload = Workload::with_demo_readers(1 << 20, 1 << 20, 1.0);
        let result = FrontierResult::build(
            "tailguard frontier <dir>".into(),
            "vda".into(),
            workload,
            &settings,
            &samples,
        )
        .unwrap();
        let svg = chart(&result);
        // Five dots (solo is the reference, not a dot); two lines.
        assert_eq!(svg.matches("<circle").count(), 5, "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        for text in [">1x128k<", ">2x1m<", ">default<", ">500us<"] {
            assert!(svg.contains(text), "{text} in {svg}");
        }
        assert_eq!(
            svg.matches(&format!("fill=\"{STATIC_OFF_FRONTIER_COLOUR}\""))
                .count(),
            // The off-frontier dot and its label.
            2,
            "2x128k (800 MB/s, 0.40) is dominated by 2x1m (1800 MB/s, 0.50)"
        );
        let page = page("frontier <1>", &["note & more".into()], &result);
        assert!(page.contains("frontier &lt;1&gt;") && page.contains("note &amp; more"));
        assert_eq!(page.matches("<tr><td>").count(), 6);
        assert!(svg.contains("readers that never pause"), "{svg}");

        let mut pausing = result;
        pausing.workload.reader_pattern = ReaderPattern::Periodic {
            run_s: 1.0,
            pause_s: 0.5,
        };
        let svg = chart(&pausing);
        assert!(
            svg.contains("readers running 1 s then pausing 0.5 s in turn"),
            "{svg}"
        );
        assert!(svg.contains("read rate while running / solo"), "{svg}");
    }

    #[test]
    fn the_table_gives_round_by_round_verdicts_over_several_rounds() {
        let result = frontier_of(&[
            (Setting::Solo, &[(0.0, 1000.0, 950.0), (0.0, 900.0, 850.0)]),
            (
                direct(1, 128),
                &[(450.0, 950.0, 900.0), (430.0, 850.0, 800.0)],
            ),
            (
                Setting::Tailguard(Variant::Default),
                &[(460.0, 950.0, 920.0), (440.0, 850.0, 810.0)],
            ),
        ]);
        let table = section(&result);
        assert!(
            table.contains(
                "; round by round: against the line (no round to compare); \
                            against the best static point within ±10% +0.016"
            ),
            "{table}"
        );
        assert!(table.contains("at or above in 2 of 2"), "{table}");
    }
}
