//! `--report FILE.html`: one self-contained page of tables and SVG charts.
//!
//! The page is built from the same [`RunReport`]s the terminal and `--json`
//! print, so the three never disagree. It has no external anything: styles are
//! one inline `<style>` block, charts are inline `<svg>` from [`svg`], there is
//! no script and no web font, so the file can be mailed, archived or opened
//! offline. Every piece of text that comes from input (class, device and run
//! names, notes) goes through [`svg::escape`].
//!
//! Layout: the title and the caller's notes (the command that produced it, the
//! target, a verdict), the caller's extra sections (the demo's trade-off chart
//! from [`frontier`], which also makes `tailguard frontier`'s own page), a
//! summary table with one row per class and run, then per class three charts
//! with one line per run:
//!
//! - latency percentile curves, percentiles on a "nines" axis (50, 90, 99, 99.9,
//!   ... evenly spaced) and latency on a log axis; each curve stops at the
//!   highest percentile its sample count supports (at least one request beyond
//!   it), so a short run does not draw its max as its p99.999;
//! - completions per second (linear), the per-second timeline;
//! - the slowest latency per second (log); a second with nothing completed is a
//!   gap in the line.

pub mod frontier;
pub mod svg;

use crate::error::CliError;
use std::fmt::Write as _;
use std::path::Path;
use svg::{escape, Axis, Chart, Series};
use tailguard_sim::report::{human_duration, ClassReport, RunReport};

use crate::render::{class_keys, human_count};

/// The highest percentile a percentile chart ever shows.
const PERCENTILE_MAX: f64 = 99.999;

/// The pages' style sheet.
pub const STYLE: &str =
    "body { font-family: sans-serif; margin: 2em auto; max-width: 1320px; color: #222; }\n\
     table { border-collapse: collapse; margin: 1em 0; }\n\
     th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }\n\
     th:first-child, td:first-child, td:nth-child(2) { text-align: left; }\n\
     .charts { display: flex; flex-wrap: wrap; gap: 12px; }\n\
     code { background: #f4f4f4; padding: 1px 4px; }\n";

/// Renders the page.
pub fn render(title: &str, notes: &[String], reports: &[RunReport]) -> String {
    render_with_sections(title, notes, &[], reports)
}

/// Renders the page with `sections` (trusted HTML, such as
/// [`frontier::section`]) between the notes and the summary table.
pub fn render_with_sections(
    title: &str,
    notes: &[String],
    sections: &[String],
    reports: &[RunReport],
) -> String {
    let mut out = page_start(title, STYLE);
    for note in notes {
        let _ = writeln!(out, "<p>{}</p>", escape(note));
    }
    for section in sections {
        out.push_str(section);
    }
    out.push_str(&summary_table(reports));
    for (class, device) in class_keys(reports) {
        let rows: Vec<(&RunReport, &ClassReport)> = reports
            .iter()
            .filter_map(|report| Some((report, report.class(&class, &device)?)))
            .collect();
        let _ = writeln!(
            out,
            "<h2>{}</h2>\n<div class=\"charts\">",
            escape(&format!("{class}@{device}"))
        );
        for chart in [
            percentile_chart(&class, &rows),
            iops_chart(&class, &rows),
            latency_timeline_chart(&class, &rows),
        ] {
            let _ = writeln!(out, "{}", chart.to_svg());
        }
        out.push_str("</div>\n");
    }
    out.push_str(
        "<p>Latency counts from each request's intended start (open-loop jobs: its \
         arrival). Worst 0.5 s: the lowest completions per second over consecutive 0.5 s \
         windows while the class is active. Made by tailguard.</p>\n",
    );
    out.push_str(PAGE_END);
    out
}

/// The start of a self-contained page, up to and including its `<h1>`: the
/// document head with `title` (escaped) and `style` (trusted CSS, one rule per
/// line) inline. Bench's, demo's and tune's reports all open with it and end
/// with [`PAGE_END`].
pub fn page_start(title: &str, style: &str) -> String {
    let title = escape(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{style}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    )
}

/// The end of a page begun with [`page_start`].
pub const PAGE_END: &str = "</body>\n</html>\n";

/// Writes the page to the `--report` file `path` (see
/// [`crate::output::write_file`] for `allow_overwrite`).
pub fn write(
    path: &Path,
    title: &str,
    notes: &[String],
    reports: &[RunReport],
    allow_overwrite: bool,
) -> Result<(), CliError> {
    write_text(path, &render(title, notes, reports), allow_overwrite)
}

/// Writes a rendered page to the `--report` file `path` (see
/// [`crate::output::write_file`] for `allow_overwrite`).
pub fn write_text(path: &Path, page: &str, allow_overwrite: bool) -> Result<(), CliError> {
    crate::output::write_file("--report", path, page.as_bytes(), allow_overwrite)
}

fn summary_table(reports: &[RunReport]) -> String {
    let mut out = String::from(
        "<table>\n<tr><th>class</th><th>run</th><th>IOPS</th><th>MB/s</th><th>p50</th>\
         <th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th><th>worst 0.5 s</th></tr>\n",
    );
    for (class, device) in class_keys(reports) {
        for report in reports {
            let Some(row) = report.class(&class, &device) else {
                continue;
            };
            let latency = &row.latency_us;
            let cells = [
                human_count(row.iops),
                format!("{:.1}", row.mb_per_s),
                human_duration(latency.p50),
                human_duration(latency.p99),
                human_duration(latency.p999),
                human_duration(latency.p9999),
                human_duration(latency.max),
                row.worst_500ms_iops
                    .map_or_else(|| "-".into(), |iops| format!("{}/s", human_count(iops))),
            ];
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td>",
                escape(&format!("{class}@{device}")),
                escape(&report.policy)
            );
            for cell in cells {
                let _ = write!(out, "<td>{}</td>", escape(&cell));
            }
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</table>\n");
    out
}

/// The percentile points a class's sample count supports (at least one
/// request beyond the point), up to [`PERCENTILE_MAX`].
fn supported_curve(row: &ClassReport) -> Vec<(f64, f64)> {
    // The requests beyond a percentile with at most six decimals are a
    // multiple of 1e-6, so the tolerance only absorbs rounding: 10 requests
    // at p90 and 10,000 at p99.99 leave exactly one beyond.
    const ROUNDING: f64 = 1e-7;
    row.latency_curve_us
        .iter()
        .filter(|point| {
            point.percentile <= PERCENTILE_MAX + 1e-9
                && row.ops as f64 * (1.0 - point.percentile / 100.0) >= 1.0 - ROUNDING
        })
        .map(|point| (point.percentile, point.latency_us))
        .collect()
}

fn latency_axis(title: &str, values: impl Iterator<Item = f64>) -> Axis {
    let (low, high) = values
        .filter(|value| *value > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    let low = if low.is_finite() { low } else { 1.0 };
    Axis::log_decades(title, low, high.max(low), decade_label)
}

/// A power of ten of microseconds, as on a log axis: `100ns`, `10µs`, `1ms`,
/// `10s`.
fn decade_label(microseconds: f64) -> String {
    if microseconds < 1.0 {
        format!("{:.0}ns", microseconds * 1e3)
    } else if microseconds < 1e3 {
        format!("{microseconds:.0}µs")
    } else if microseconds < 1e6 {
        format!("{:.0}ms", microseconds / 1e3)
    } else {
        format!("{:.0}s", microseconds / 1e6)
    }
}

fn percentile_chart(class: &str, rows: &[(&RunReport, &ClassReport)]) -> Chart {
    let series: Vec<Series> = rows
        .iter()
        .map(|(report, row)| Series {
            name: report.policy.clone(),
            points: supported_curve(row),
        })
        .collect();
    let highest = series
        .iter()
        .flat_map(|series| series.points.iter().map(|point| point.0))
        .fold(99.9f64, f64::max);
    let y = latency_axis(
        "latency",
        series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.1)),
    );
    Chart {
        title: format!("{class}: latency percentiles"),
        x: Axis::nines("percentile", highest),
        y,
        series,
    }
}

/// Timeline points of the seconds that start within the run.
fn timeline(
    report: &RunReport,
    row: &ClassReport,
    value: impl Fn(f64, f64) -> f64,
) -> Vec<(f64, f64)> {
    row.timeline
        .iter()
        .filter(|point| (point.second as f64) < report.duration_s)
        // Each point stands for the second [s, s + 1): drawn at its middle.
        .map(|point| {
            (
                point.second as f64 + 0.5,
                value(point.iops, point.latency_us_max),
            )
        })
        .collect()
}

fn seconds_axis(rows: &[(&RunReport, &ClassReport)]) -> Axis {
    let longest = rows
        .iter()
        .map(|(report, _)| report.duration_s)
        .fold(1.0f64, f64::max);
    Axis::linear_from_zero("seconds into the run", longest, |value| format!("{value}"))
}

fn iops_chart(class: &str, rows: &[(&RunReport, &ClassReport)]) -> Chart {
    let series: Vec<Series> = rows
        .iter()
        .map(|(report, row)| Series {
            name: report.policy.clone(),
            points: timeline(report, row, |iops, _| iops),
        })
        .collect();
    let peak = series
        .iter()
        .flat_map(|series| series.points.iter().map(|point| point.1))
        .fold(0.0f64, f64::max);
    Chart {
        title: format!("{class}: completions per second"),
        x: seconds_axis(rows),
        y: Axis::linear_from_zero("IOPS", peak, human_count),
        series,
    }
}

fn latency_timeline_chart(class: &str, rows: &[(&RunReport, &ClassReport)]) -> Chart {
    let series: Vec<Series> = rows
        .iter()
        .map(|(report, row)| Series {
            name: report.policy.clone(),
            points: timeline(report, row, |_, latency| latency),
        })
        .collect();
    let y = latency_axis(
        "max latency",
        series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.1)),
    );
    Chart {
        title: format!("{class}: slowest request per second"),
        x: seconds_axis(rows),
        y,
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_sim::report::ClassAccumulator;

    fn run(policy: &str, class: &str, latency_us: &[u64]) -> RunReport {
        let mut accumulator =
            ClassAccumulator::new(class.into(), "vda".into(), 2_000_000_000).starting_at(0);
        for (index, &latency) in latency_us.iter().enumerate() {
            let completed = 10_000_000 + index as u64 * 1_000_000;
            accumulator.on_submit(completed - latency * 1_000);
            accumulator.on_complete(completed, completed - latency * 1_000, completed, 4096);
        }
        RunReport {
            policy: policy.into(),
            seed: 1,
            duration_s: 2.0,
            classes: vec![accumulator.finish()],
        }
    }

    #[test]
    fn the_page_is_self_contained_with_three_charts_per_class() {
        let latencies: Vec<u64> = (0..2_000).map(|index| 100 + index % 50).collect();
        let page = render(
            "demo <1>",
            &["ran `tailguard demo` & friends".into()],
            &[
                run("alone", "reads", &latencies),
                run("writeback", "reads", &latencies),
            ],
        );
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.trim_end().ends_with("</html>"));
        assert_eq!(page.matches("<svg").count(), 3);
        assert_eq!(page.matches("</svg>").count(), 3);
        assert!(page.contains("demo &lt;1&gt;") && page.contains("&amp; friends"));
        for external in ["<script", "<link", "src=", "@import", "url("] {
            assert!(!page.contains(external), "{external} in the page");
        }
        // One summary row per class and run.
        assert_eq!(page.matches("<tr><td>").count(), 2);
    }

    #[test]
    fn log_axes_label_decades_in_short_units() {
        let labels: Vec<String> = [10.0, 100.0, 1e3, 1e5, 1e6, 1e7]
            .into_iter()
            .map(decade_label)
            .collect();
        assert_eq!(labels, ["10µs", "100µs", "1ms", "100ms", "1s", "10s"]);
        let below: Vec<String> = [0.1, 0.01, 1.0].into_iter().map(decade_label).collect();
        assert_eq!(below, ["100ns", "10ns", "1µs"]);
    }

    #[test]
    fn percentile_curves_keep_points_supported_exactly() {
        // 10 requests leave exactly 1 beyond p90; 10,000 leave 1 beyond p99.99.
        for (ops, percentile) in [(10, 90.0), (10_000, 99.99)] {
            let report = run("exact", "reads", &vec![100; ops]);
            let curve = supported_curve(&report.classes[0]);
            let highest = curve.last().unwrap().0;
            assert_eq!(highest, percentile, "{ops} ops: {curve:?}");
        }
    }

    #[test]
    fn percentile_curves_stop_where_the_samples_do() {
        let report = run("short", "reads", &[100; 150]);
        let curve = supported_curve(&report.classes[0]);
        let highest = curve.last().unwrap().0;
        // 150 requests support p99 (1.5 beyond it) but not p99.5 (0.75).
        assert_eq!(highest, 99.0, "{curve:?}");
    }
}
