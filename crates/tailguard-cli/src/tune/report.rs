//! Showing the curves: a terminal chart, and a self-contained HTML page with SVG.
//!
//! The terminal chart is one table per curve (depth, bytes in flight,
//! throughput, p50, p99) with a bar per step scaled to the curve's best
//! throughput and the knee marked, followed by a sparkline of the sustained run
//! at the knee, whose first fifth and second half give the first and steady
//! rates (the steady window's seconds are printed beside it).
//!
//! The HTML page needs no network and no script: per curve, an inline SVG of
//! latency (p50 and p99) against throughput, one point per step labelled with
//! its depth and the knee circled (the usual way to read a device's
//! latency-throughput trade-off: the curve runs right, then turns up), and an
//! SVG of the sustained run's rate over time. Both are [`Chart`]s of the one
//! SVG writer, bench's ([`crate::html::svg`]): the depth labels and the knee are
//! an overlay ([`Chart::to_svg_with`]), and the page opens and ends like bench's
//! ([`page_start`], [`PAGE_END`]).

use crate::html::svg::{circle, escape, Axis, Chart, Series, PALETTE};
use crate::html::{page_start, PAGE_END};
use crate::tune::knee::CurvePoint;
use crate::tune::Curve;
use std::fmt::Write as _;

const BAR_WIDTH_CHARS: f64 = 30.0;
const SPARK_LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// `81.2k`, `1.25M`: short numbers for tables.
pub fn short_number(value: f64) -> String {
    if value >= 1e9 {
        format!("{:.2}G", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e4 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// `4 KiB`, `1 MiB`.
pub fn short_bytes(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// A value of the curve's throughput unit: IOPS for 4 KiB curves, MB/s else.
fn throughput(curve: &Curve, point: &CurvePoint) -> f64 {
    if curve.spec.sequential {
        point.bandwidth() / 1e6
    } else {
        point.iops
    }
}

fn throughput_unit(curve: &Curve) -> &'static str {
    if curve.spec.sequential {
        "MB/s"
    } else {
        "IOPS"
    }
}

/// The terminal chart of one curve.
pub fn terminal_chart(curve: &Curve) -> String {
    let mut text = String::new();
    let best = curve
        .points
        .iter()
        .map(|point| throughput(curve, point))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let unit = throughput_unit(curve);
    let _ = writeln!(text, "{}", curve.spec.title);
    let _ = writeln!(
        text,
        "  {:>5} {:>9} {:>9} {:>9} {:>9}",
        "depth", "in flight", unit, "p50 µs", "p99 µs"
    );
    for (index, point) in curve.points.iter().enumerate() {
        let value = throughput(curve, point);
        let bar = "█".repeat((value / best * BAR_WIDTH_CHARS).round() as usize);
        let marker = if Some(index) == curve.knee {
            "  ◀ knee"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "  {:>5} {:>9} {:>9} {:>9.0} {:>9.0}  {bar}{marker}",
            point.queue_depth,
            short_bytes(point.in_flight_bytes()),
            short_number(value),
            point.latency_us_p50,
            point.latency_us_p99,
        );
    }
    if let Some(rates) = curve.rates {
        let scale = curve.sustain_scale();
        let window = curve
            .steady_window_s()
            .map(|(from_s, to_s)| format!(" (s {from_s:.1}-{to_s:.1} of {:.1})", curve.sustain_s))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "  sustained at the knee: {}  first {} {unit}, steady {} {unit}{window}{}",
            sparkline(&curve.timeline),
            short_number(rates.first * scale),
            short_number(rates.steady * scale),
            if rates.throttled() {
                "  (throttled: the steady rate is used)"
            } else {
                ""
            }
        );
    }
    text
}

/// One character per value, scaled between 0 and the largest value.
pub fn sparkline(values: &[f64]) -> String {
    let most = values.iter().copied().fold(0.0, f64::max);
    if most <= 0.0 {
        return String::new();
    }
    values
        .iter()
        .map(|value| {
            let level = (value / most * (SPARK_LEVELS.len() - 1) as f64).round() as usize;
            SPARK_LEVELS[level.min(SPARK_LEVELS.len() - 1)]
        })
        .collect()
}

/// Latency (p50 and p99) against throughput as a chart, one point per step.
fn curve_chart(curve: &Curve) -> Chart {
    let throughput_max = curve
        .points
        .iter()
        .map(|point| throughput(curve, point))
        .fold(0.0, f64::max);
    let latency_max = curve
        .points
        .iter()
        .map(|point| point.latency_us_p99)
        .fold(0.0, f64::max);
    let series = |name: &str, latency: fn(&CurvePoint) -> f64| Series {
        name: name.into(),
        points: curve
            .points
            .iter()
            .map(|point| (throughput(curve, point), latency(point)))
            .collect(),
    };
    Chart {
        title: format!("{}: latency against throughput", curve.spec.title),
        // 10% beyond the data: room for the knee's label.
        x: Axis::linear_from_zero(throughput_unit(curve), throughput_max * 1.1, short_number),
        y: Axis::linear_from_zero("latency µs", latency_max * 1.1, short_number),
        series: vec![
            series("p50", |point| point.latency_us_p50),
            series("p99", |point| point.latency_us_p99),
        ],
    }
}

/// The knee's mark: a colour of the palette that the p50 and p99 lines do not
/// use.
const KNEE_COLOUR: &str = PALETTE[2];

/// Latency (p50, p99) against throughput, one point per step, each labelled
/// with its queue depth under its p50, the knee circled.
pub fn curve_svg(curve: &Curve) -> String {
    let chart = curve_chart(curve);
    chart.to_svg_with(|plot, svg| {
        for (series, colour) in chart.series.iter().zip(PALETTE) {
            for pixel in series.points.iter().filter_map(|point| plot.at(*point)) {
                circle(svg, pixel, 3.0, colour);
            }
        }
        for point in &curve.points {
            if let Some((x, y)) = plot.at((throughput(curve, point), point.latency_us_p50)) {
                let _ = write!(
                    svg,
                    r##"<text x="{x:.1}" y="{:.1}" font-size="10" fill="#555" text-anchor="middle">{}</text>"##,
                    y + 14.0,
                    point.queue_depth
                );
            }
        }
        let knee = curve.knee_point();
        if let Some((x, y)) =
            knee.and_then(|knee| plot.at((throughput(curve, knee), knee.latency_us_p50)))
        {
            let _ = write!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="9" fill="none" stroke="{KNEE_COLOUR}" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="{KNEE_COLOUR}">knee</text>"#,
                x + 10.0,
                y - 10.0
            );
        }
    })
}

/// The sustained run's rate over time.
pub fn timeline_svg(curve: &Curve) -> String {
    let points = timeline_points(curve);
    let unit = throughput_unit(curve);
    Chart {
        title: format!("{}: sustained at the knee", curve.spec.title),
        x: Axis::linear_from_zero("seconds", curve.sustain_s, short_number),
        y: Axis::linear_from_zero(
            unit,
            points.iter().map(|point| point.1).fold(0.0, f64::max) * 1.1,
            short_number,
        ),
        series: vec![Series {
            name: unit.into(),
            points,
        }],
    }
    .to_svg()
}

/// The timeline's points, `(seconds, rate in the curve's unit)`: each value
/// stands for its interval and is drawn at its middle.
fn timeline_points(curve: &Curve) -> Vec<(f64, f64)> {
    let scale = curve.sustain_scale();
    curve
        .timeline
        .iter()
        .enumerate()
        .map(|(index, value)| ((index as f64 + 0.5) * curve.interval_s, value * scale))
        .collect()
}

/// The whole page.
pub fn html_page(title: &str, summary_lines: &[String], curves: &[Curve]) -> String {
    let mut html = page_start(
        title,
        "body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }\n\
         section { margin-bottom: 2em; }\n\
         pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }\n\
         .charts { display: flex; flex-wrap: wrap; gap: 1em; }\n",
    );
    html.push_str("<ul>");
    for line in summary_lines {
        let _ = write!(html, "<li>{}</li>", escape(line));
    }
    html.push_str("</ul>\n");
    for curve in curves {
        let _ = writeln!(
            html,
            "<section><h2>{}</h2><div class=\"charts\"><figure>{}<figcaption>latency against \
             throughput; labels are queue depths</figcaption></figure><figure>{}<figcaption>\
             sustained at the knee</figcaption></figure></div><pre>{}</pre></section>",
            escape(&curve.spec.title),
            curve_svg(curve),
            timeline_svg(curve),
            escape(&terminal_chart(curve))
        );
    }
    html.push_str(PAGE_END);
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_largest_value() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0]), "▁▅█");
        assert_eq!(sparkline(&[]), "");
    }

    #[test]
    fn numbers_and_bytes_are_short() {
        assert_eq!(short_number(81_234.0), "81.2k");
        assert_eq!(short_number(950.0), "950");
        assert_eq!(short_number(2.5e9), "2.50G");
        assert_eq!(short_bytes(4096), "4 KiB");
        assert_eq!(short_bytes(4 << 20), "4 MiB");
    }

    #[test]
    fn the_timeline_is_spaced_by_its_interval_not_by_the_run_length() {
        use crate::tune::CurveSpec;
        // 20 intervals of 0.4 s in a run that lasted 8.5 s (the tail interval,
        // cut short by the deadline, has no value).
        let curve = Curve {
            spec: CurveSpec::random(false),
            points: Vec::new(),
            knee: None,
            timeline: vec![1_000.0; 20],
            sustain_s: 8.5,
            interval_s: 0.4,
            step_s: 0.5,
            rates: None,
        };
        let seconds: Vec<f64> = timeline_points(&curve)
            .iter()
            .map(|point| point.0)
            .collect();
        assert!((seconds[0] - 0.2).abs() < 1e-9, "{seconds:?}");
        assert!((seconds[19] - 7.8).abs() < 1e-9, "{seconds:?}");
    }

    #[test]
    fn the_curve_chart_marks_every_depth_and_the_knee_on_the_shared_writer() {
        use crate::tune::CurveSpec;
        let point = |queue_depth: u32, iops: f64, latency_us: f64| CurvePoint {
            queue_depth,
            request_bytes: 4096,
            iops,
            latency_us_p50: latency_us,
            latency_us_p99: latency_us * 3.0,
        };
        let curve = Curve {
            spec: CurveSpec::random(false),
            points: vec![point(1, 10_000.0, 90.0), point(2, 19_000.0, 100.0)],
            knee: Some(1),
            timeline: vec![18_000.0, 19_000.0],
            sustain_s: 2.0,
            interval_s: 1.0,
            step_s: 0.5,
            rates: None,
        };
        let svg = curve_svg(&curve);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>"));
        // p50 and p99, each a line with a dot per step; the knee's ring.
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("r=\"3\"").count(), 4, "{svg}");
        assert_eq!(svg.matches(">knee</text>").count(), 1, "{svg}");
        assert!(
            svg.contains(">1</text>") && svg.contains(">2</text>"),
            "{svg}"
        );
        let page = html_page("tune <x>", &["a & b".into()], &[curve]);
        assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("tune &lt;x&gt;") && page.contains("a &amp; b"));
    }
}
