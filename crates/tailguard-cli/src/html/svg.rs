//! Hand-written SVG line charts: axes with linear, log or "nines" scales, one
//! polyline per series, a legend.
//!
//! A [`Chart`] holds its series in data units; each [`Axis`] maps data to a
//! position through its [`Scale`] (linear; log10 for latency; "nines",
//! `-log10(1 - p/100)`, for percentiles, so 90, 99, 99.9 and 99.99 are evenly
//! spaced and the tail gets the room). Ticks are chosen per scale: powers of ten
//! for log, the nines themselves for percentiles, 1-2-5 steps for linear.
//! Points that a scale cannot place (zero or less on a log axis, 100 on the
//! nines axis) are left out, breaking the line there.
//!
//! The output is a standalone `<svg>` element with inline attributes only (no
//! CSS classes, scripts or fonts beyond the generic `sans-serif`), every text
//! escaped with [`escape`], so it can be pasted into any page.
//!
//! This is the one SVG writer of the CLI: bench's and demo's report draw plain
//! [`Chart`]s, and tune's draws its curves as charts too, adding its marks
//! (queue-depth labels, the knee) with [`Chart::to_svg_with`], which hands an
//! overlay the [`Plot`] that maps data to pixels, and the [`circle`] and
//! [`polyline`] primitives the charts use themselves.

use std::fmt::Write as _;

/// Colours of the series, in order (distinct in print and for most colour
/// vision deficiencies).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

/// Escapes text for HTML and SVG content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// How an axis maps data to position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// Proportional.
    Linear,
    /// Proportional to log10 (positive values only).
    Log10,
    /// Percentiles in percent, at `-log10(1 - p/100)` (below 100 only).
    Nines,
}

impl Scale {
    /// The position of `value` before scaling to pixels, if it can be placed.
    pub fn transform(self, value: f64) -> Option<f64> {
        let position = match self {
            Self::Linear => value,
            Self::Log10 if value > 0.0 => value.log10(),
            Self::Nines if value < 100.0 => -(1.0 - value / 100.0).log10(),
            _ => return None,
        };
        position.is_finite().then_some(position)
    }
}

/// The most powers of ten a log axis spans.
pub const DECADES_MAX: i32 = 30;

/// One axis: its scale, range in data units, ticks and title.
#[derive(Clone, Debug)]
pub struct Axis {
    /// The title.
    pub title: String,
    /// The scale.
    pub scale: Scale,
    /// Smallest value shown.
    pub min: f64,
    /// Largest value shown.
    pub max: f64,
    /// (value, label) of each tick.
    pub ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A linear axis from 0 to just above `max`, with 1-2-5 ticks (0 to 1
    /// where `max` is not a positive finite number).
    pub fn linear_from_zero(title: &str, max: f64, label: impl Fn(f64) -> String) -> Self {
        let max = if max > 0.0 && max.is_finite() {
            max
        } else {
            1.0
        };
        let rough = max / 5.0;
        let magnitude = 10f64.powf(rough.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|factor| factor * magnitude)
            .find(|step| *step >= rough)
            .unwrap_or(10.0 * magnitude);
        let top = (max / step).ceil() * step;
        let ticks = (0..=(top / step).round() as usize)
            .map(|index| {
                let value = index as f64 * step;
                (value, label(value))
            })
            .collect();
        Self {
            title: title.into(),
            scale: Scale::Linear,
            min: 0.0,
            max: top,
            ticks,
        }
    }

    /// A log axis over whole powers of ten around `low..=high` (positive),
    /// at most [`DECADES_MAX`] of them from the bottom. A `low` that is not
    /// positive and finite counts as 1, a `high` that is not finite as `low`.
    pub fn log_decades(title: &str, low: f64, high: f64, label: impl Fn(f64) -> String) -> Self {
        let low = if low > 0.0 && low.is_finite() {
            low
        } else {
            1.0
        };
        let high = if high.is_finite() { high.max(low) } else { low };
        let first = low.log10().floor() as i32;
        let mut last = (high.log10().ceil() as i32).min(first + DECADES_MAX);
        if last == first {
            last += 1;
        }
        let ticks = (first..=last)
            .map(|exponent| {
                let value = 10f64.powi(exponent);
                (value, label(value))
            })
            .collect();
        Self {
            title: title.into(),
            scale: Scale::Log10,
            min: 10f64.powi(first),
            max: 10f64.powi(last),
            ticks,
        }
    }

    /// A percentile axis from 50 to `last` (one of 99.9, 99.99, ...).
    pub fn nines(title: &str, last: f64) -> Self {
        let ticks = [50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999]
            .into_iter()
            .filter(|&value| value <= last + 1e-9)
            .map(|value| (value, format!("{value}")))
            .collect();
        Self {
            title: title.into(),
            scale: Scale::Nines,
            min: 50.0,
            max: last,
            ticks,
        }
    }

    /// Where `value` falls between the ends, 0 to 1 (outside when off range).
    fn fraction(&self, value: f64) -> Option<f64> {
        let low = self.scale.transform(self.min)?;
        let high = self.scale.transform(self.max)?;
        let position = self.scale.transform(value)?;
        (high > low).then(|| (position - low) / (high - low))
    }
}

/// A named line.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its legend entry.
    pub name: String,
    /// (x, y) in data units.
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Shown above the plot.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// The lines, coloured from [`PALETTE`] in order.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 28.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 48.0;

const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
const PLOT_HEIGHT: f64 = HEIGHT - TOP - BOTTOM;

/// Where a chart's data lands in the picture, in pixels.
pub struct Plot<'chart> {
    x: &'chart Axis,
    y: &'chart Axis,
}

impl Plot<'_> {
    /// The horizontal pixel of `value`, if the x axis can place it (clamped to
    /// the plot area).
    pub fn x_at(&self, value: f64) -> Option<f64> {
        self.x
            .fraction(value)
            .map(|fraction| LEFT + fraction.clamp(0.0, 1.0) * PLOT_WIDTH)
    }

    /// The vertical pixel of `value`, if the y axis can place it (clamped to
    /// the plot area).
    pub fn y_at(&self, value: f64) -> Option<f64> {
        self.y
            .fraction(value)
            .map(|fraction| TOP + (1.0 - fraction.clamp(0.0, 1.0)) * PLOT_HEIGHT)
    }

    /// The pixel of a data point, if both axes can place it.
    pub fn at(&self, (x, y): (f64, f64)) -> Option<(f64, f64)> {
        Some((self.x_at(x)?, self.y_at(y)?))
    }
}

/// Writes a filled circle of `radius` pixels at `(x, y)`.
pub fn circle(out: &mut String, (x, y): (f64, f64), radius: f64, fill: &str) {
    let _ = write!(
        out,
        "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{radius}\" fill=\"{fill}\"/>"
    );
}

/// Writes a line through `points` (pixels).
pub fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str) {
    let points: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = write!(
        out,
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" \
         points=\"{}\"/>",
        points.join(" ")
    );
}

impl Chart {
    /// The chart as an `<svg>` element.
    pub fn to_svg(&self) -> String {
        self.to_svg_with(|_, _| {})
    }

    /// The chart as an `<svg>` element, with what `overlay` writes drawn over
    /// its lines; the overlay places its marks with the [`Plot`].
    pub fn to_svg_with(&self, overlay: impl FnOnce(&Plot, &mut String)) -> String {
        let plot = Plot {
            x: &self.x,
            y: &self.y,
        };
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\" \
             role=\"img\" aria-label=\"{}\">",
            escape(&self.title)
        );
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>",
            escape(&self.title)
        );
        self.write_legend(&mut out);
        self.write_grid(&plot, &mut out);
        let _ = write!(
            out,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{PLOT_WIDTH}\" height=\"{PLOT_HEIGHT}\" \
             fill=\"none\" stroke=\"#888\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" \
             transform=\"rotate(-90 14 {:.1})\">{}</text>",
            LEFT + PLOT_WIDTH / 2.0,
            HEIGHT - 8.0,
            escape(&self.x.title),
            TOP + PLOT_HEIGHT / 2.0,
            TOP + PLOT_HEIGHT / 2.0,
            escape(&self.y.title)
        );
        for (index, series) in self.series.iter().enumerate() {
            let colour = PALETTE[index % PALETTE.len()];
            for segment in segments(&series.points, &plot) {
                if segment.len() == 1 {
                    circle(&mut out, segment[0], 2.0, colour);
                } else {
                    polyline(&mut out, &segment, colour);
                }
            }
        }
        overlay(&plot, &mut out);
        out.push_str("</svg>");
        out
    }

    /// The legend, one row under the title: a colour swatch and the name of
    /// each series.
    fn write_legend(&self, out: &mut String) {
        let mut legend_x = LEFT;
        for (index, series) in self.series.iter().enumerate() {
            let colour = PALETTE[index % PALETTE.len()];
            let _ = write!(
                out,
                "<rect x=\"{legend_x:.1}\" y=\"26\" width=\"14\" height=\"4\" fill=\"{colour}\"/>\
                 <text x=\"{:.1}\" y=\"32\">{}</text>",
                legend_x + 18.0,
                escape(&series.name)
            );
            legend_x += 30.0 + 6.5 * series.name.chars().count() as f64;
        }
    }

    /// The grid lines and tick labels of both axes.
    fn write_grid(&self, plot: &Plot, out: &mut String) {
        for (value, label) in &self.x.ticks {
            if let Some(x) = plot.x_at(*value) {
                let _ = write!(
                    out,
                    "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
                     <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                    TOP + PLOT_HEIGHT,
                    TOP + PLOT_HEIGHT + 14.0,
                    escape(label)
                );
            }
        }
        for (value, label) in &self.y.ticks {
            if let Some(y) = plot.y_at(*value) {
                let _ = write!(
                    out,
                    "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                    LEFT + PLOT_WIDTH,
                    LEFT - 6.0,
                    y + 4.0,
                    escape(label)
                );
            }
        }
    }
}

/// The points in pixels, split where one cannot be placed.
fn segments(points: &[(f64, f64)], plot: &Plot) -> Vec<Vec<(f64, f64)>> {
    let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for &point in points {
        match plot.at(point) {
            Some(pixel) => segments.last_mut().expect("never empty").push(pixel),
            None => segments.push(Vec::new()),
        }
    }
    segments.retain(|segment| !segment.is_empty());
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinite_bounds_give_bounded_finite_axes() {
        let log = Axis::log_decades("latency", 1.0, f64::INFINITY, |value| format!("{value}"));
        assert!(log.ticks.len() <= 31, "{} ticks", log.ticks.len());
        assert!(log.min.is_finite() && log.max.is_finite(), "{log:?}");
        let log = Axis::log_decades("latency", f64::NAN, f64::NAN, |value| format!("{value}"));
        assert!(log.ticks.len() <= 31 && log.max.is_finite(), "{log:?}");
        for max in [f64::INFINITY, f64::NAN] {
            let linear = Axis::linear_from_zero("rate", max, |value| format!("{value}"));
            assert!(linear.max.is_finite() && linear.max > 0.0, "{linear:?}");
            assert!(
                !linear.ticks.is_empty() && linear.ticks.len() <= 12,
                "{linear:?}"
            );
        }
    }

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn nines_space_the_tail_evenly() {
        let at = |value| Scale::Nines.transform(value).unwrap();
        assert!((at(90.0) - 1.0).abs() < 1e-9);
        assert!((at(99.9) - 3.0).abs() < 1e-9);
        assert!(((at(99.99) - at(99.9)) - (at(99.9) - at(99.0))).abs() < 1e-6);
        assert_eq!(Scale::Nines.transform(100.0), None);
        assert_eq!(Scale::Log10.transform(0.0), None);
    }

    #[test]
    fn linear_ticks_are_round_and_cover_the_maximum() {
        let axis = Axis::linear_from_zero("IOPS", 41_234.0, |value| format!("{value}"));
        let values: Vec<f64> = axis.ticks.iter().map(|tick| tick.0).collect();
        assert_eq!(
            values,
            [0.0, 10_000.0, 20_000.0, 30_000.0, 40_000.0, 50_000.0]
        );
        assert_eq!(axis.max, 50_000.0);
        let log = Axis::log_decades("latency", 150.0, 2_000_000.0, |value| format!("{value}"));
        assert_eq!(log.ticks.len(), 6, "100 µs to 10 s: six decades");
    }

    #[test]
    fn a_chart_is_one_svg_with_a_line_per_series_and_escaped_text() {
        let chart = Chart {
            title: "reads <vda>".into(),
            x: Axis::nines("percentile", 99.99),
            y: Axis::log_decades("latency", 100.0, 10_000.0, |value| format!("{value}")),
            series: vec![
                Series {
                    name: "a&b".into(),
                    points: vec![(50.0, 150.0), (99.0, 400.0), (99.99, 9_000.0)],
                },
                Series {
                    name: "max only".into(),
                    // 100 cannot be placed on the nines axis: a lone point remains.
                    points: vec![(99.0, 500.0), (100.0, 800.0)],
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("reads &lt;vda&gt;") && svg.contains("a&amp;b"));
        assert!(!svg.contains("<vda>"));
    }
}
