//! Showing the curves: a terminal chart, and a self-contained HTML page with SVG.
//!
//! The terminal chart is one table per curve (depth, bytes in flight,
//! throughput, p50, p99) with a bar per step scaled to the curve's best
//! throughput and the knee marked, followed by a sparkline of the sustained run
//! at the knee, whose first and second halves give the first and steady rates.
//!
//! The HTML page needs no network and no script: per curve, an inline SVG of
//! latency (p50 and p99) against throughput, one point per step labelled with
//! its depth and the knee circled (the usual way to read a device's
//! latency-throughput trade-off: the curve runs right, then turns up), and an
//! SVG of the sustained run's rate over time. The SVG writer is deliberately
//! small (lines, circles, text) and lives here; bench's HTML report may share it
//! later.

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
        let _ = writeln!(
            text,
            "  sustained at the knee: {}  first {} {unit}, steady {} {unit}{}",
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

const SVG_WIDTH: f64 = 560.0;
const SVG_HEIGHT: f64 = 300.0;
const MARGIN_LEFT: f64 = 70.0;
const MARGIN_RIGHT: f64 = 20.0;
const MARGIN_TOP: f64 = 20.0;
const MARGIN_BOTTOM: f64 = 45.0;

/// Maps data to the plot area of an SVG.
struct Frame {
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn x(&self, value: f64) -> f64 {
        MARGIN_LEFT + value / self.x_max * (SVG_WIDTH - MARGIN_LEFT - MARGIN_RIGHT)
    }

    fn y(&self, value: f64) -> f64 {
        SVG_HEIGHT - MARGIN_BOTTOM - value / self.y_max * (SVG_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM)
    }

    /// Axes with four ticks each, and their labels.
    fn axes(&self, svg: &mut String, x_label: &str, y_label: &str) {
        let (left, right) = (MARGIN_LEFT, SVG_WIDTH - MARGIN_RIGHT);
        let (top, bottom) = (MARGIN_TOP, SVG_HEIGHT - MARGIN_BOTTOM);
        let _ = write!(
            svg,
            r##"<path d="M{left} {top} V{bottom} H{right}" fill="none" stroke="#444"/>"##
        );
        for tick in 0..=4 {
            let fraction = f64::from(tick) / 4.0;
            let (x, y) = (self.x(self.x_max * fraction), self.y(self.y_max * fraction));
            let _ = write!(
                svg,
                r##"<text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text><line x1="{left}" x2="{right}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                bottom + 15.0,
                short_number(self.x_max * fraction),
                left - 5.0,
                y + 4.0,
                short_number(self.y_max * fraction),
            );
        }
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text><text x="14" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"##,
            (left + right) / 2.0,
            SVG_HEIGHT - 8.0,
            escape(x_label),
            (top + bottom) / 2.0,
            (top + bottom) / 2.0,
            escape(y_label),
        );
    }
}

fn polyline(svg: &mut String, points: &[(f64, f64)], color: &str) {
    let coordinates: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = write!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
        coordinates.join(" ")
    );
}

fn svg_open() -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{SVG_HEIGHT}" viewBox="0 0 {SVG_WIDTH} {SVG_HEIGHT}" font-family="sans-serif">"#
    )
}

/// Latency (p50, p99) against throughput, one point per step, the knee circled.
pub fn curve_svg(curve: &Curve) -> String {
    let frame = Frame {
        x_max: curve
            .points
            .iter()
            .map(|point| throughput(curve, point))
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.1,
        y_max: curve
            .points
            .iter()
            .map(|point| point.latency_us_p99)
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.1,
    };
    let mut svg = svg_open();
    frame.axes(&mut svg, throughput_unit(curve), "latency µs");
    for (percentile, color) in [("p50", "#1f77b4"), ("p99", "#d62728")] {
        let points: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|point| {
                let latency = if percentile == "p50" {
                    point.latency_us_p50
                } else {
                    point.latency_us_p99
                };
                (frame.x(throughput(curve, point)), frame.y(latency))
            })
            .collect();
        polyline(&mut svg, &points, color);
        for (x, y) in &points {
            let _ = write!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
            );
        }
        if let Some((x, y)) = points.last() {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" fill="{color}">{percentile}</text>"#,
                x + 6.0,
                y
            );
        }
    }
    for point in &curve.points {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" fill="#555" text-anchor="middle">{}</text>"##,
            frame.x(throughput(curve, point)),
            frame.y(point.latency_us_p50) + 14.0,
            point.queue_depth
        );
    }
    if let Some(knee) = curve.knee.map(|index| &curve.points[index]) {
        let (x, y) = (
            frame.x(throughput(curve, knee)),
            frame.y(knee.latency_us_p50),
        );
        let _ = write!(
            svg,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="9" fill="none" stroke="#2ca02c" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#2ca02c">knee</text>"##,
            x + 10.0,
            y - 10.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The sustained run's rate over time.
pub fn timeline_svg(curve: &Curve) -> String {
    let scale = curve.sustain_scale();
    let values: Vec<f64> = curve.timeline.iter().map(|value| value * scale).collect();
    let frame = Frame {
        x_max: curve.sustain_s.max(f64::MIN_POSITIVE),
        y_max: values.iter().copied().fold(0.0, f64::max).max(1.0) * 1.1,
    };
    let step_s = curve.sustain_s / values.len().max(1) as f64;
    let mut svg = svg_open();
    frame.axes(&mut svg, "seconds", throughput_unit(curve));
    let points: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .map(|(index, value)| (frame.x((index as f64 + 0.5) * step_s), frame.y(*value)))
        .collect();
    polyline(&mut svg, &points, "#1f77b4");
    svg.push_str("</svg>");
    svg
}

/// The whole page.
pub fn html_page(title: &str, summary_lines: &[String], curves: &[Curve]) -> String {
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}}\
         section{{margin-bottom:2em}}pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}\
         .charts{{display:flex;flex-wrap:wrap;gap:1em}}</style></head><body>\n<h1>{}</h1>\n<ul>",
        escape(title),
        escape(title)
    );
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
    html.push_str("</body></html>\n");
    html
}

/// Escapes text for HTML and SVG.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
    fn escaping_covers_markup() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
