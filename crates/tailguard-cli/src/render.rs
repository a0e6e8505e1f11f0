//! Terminal renderings of a run beyond the per-class table: the per-second
//! timeline as sparklines, and the latency histograms.
//!
//! Everything here is a pure function from [`RunReport`]s to text, so tests can
//! check it without running anything. Rows are labelled `class@device` and the
//! run's policy (the mode in bench), in the order the table uses.
//!
//! The timeline prints two sparklines per class and run: completions per second
//! on a linear scale and the slowest latency per second on a log scale, each
//! scaled to its own row's range (printed beside it), so a stall shows as a dip
//! in the first and a spike in the second. Where the longest run is longer
//! than [`SPARKLINE_WIDTH_MAX`] seconds, every row merges the same number of
//! neighbouring seconds into one character (mean rate, largest latency), the
//! number the header states, so the rows share one time scale. Only the seconds that start within the run's
//! `duration_s` are drawn: after it, requests only drain (the JSON keeps them).

//!
//! The histograms are bcc's `xfsdist` layout (`from -> to : count |****|`, in
//! power-of-two microseconds), one block per class with the runs side by side
//! over the same bucket rows, each bar scaled to its own run's fullest bucket.
//! A bucket with requests always gets at least one `*`: a handful of 100 ms
//! reads among a million fast ones is the point of the picture.

use std::fmt::Write as _;
use tailguard_sim::report::{human_duration, Log2Bucket, RunReport, TimelineSecond};

/// The widest sparkline, in characters.
pub const SPARKLINE_WIDTH_MAX: usize = 60;

/// Sparkline levels, lowest first.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The (class, device) pairs of all runs, in order of first appearance.
pub fn class_keys(reports: &[RunReport]) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for report in reports {
        for row in &report.classes {
            let key = (row.name.clone(), row.device.clone());
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// A count with a k/M suffix: `950`, `41.2k`, `1.20M`.
pub fn human_count(value: f64) -> String {
    if value < 1_000.0 {
        format!("{value:.0}")
    } else if value < 1_000_000.0 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{:.2}M", value / 1e6)
    }
}

/// One character per value, scaled between the smallest and largest value
/// (all at the lowest level when they are equal).
pub fn sparkline(values: &[f64]) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|&value| {
            let fraction = if high > low {
                (value - low) / (high - low)
            } else {
                0.0
            };
            LEVELS[((fraction * (LEVELS.len() - 1) as f64).round() as usize).min(LEVELS.len() - 1)]
        })
        .collect()
}

/// Merges every `per_character` seconds into one point: mean rate, largest
/// latency.
fn merged(timeline: &[TimelineSecond], per_character: usize) -> Vec<(f64, f64)> {
    timeline
        .chunks(per_character.max(1))
        .map(|chunk| {
            let iops = chunk.iter().map(|point| point.iops).sum::<f64>() / chunk.len() as f64;
            let latency = chunk
                .iter()
                .map(|point| point.latency_us_max)
                .fold(0.0, f64::max);
            (iops, latency)
        })
        .collect()
}

/// The per-second timeline of every class in every run, as sparklines.
pub fn render_timeline(reports: &[RunReport]) -> String {
    let keys = class_keys(reports);
    let label_width = keys
        .iter()
        .map(|(class, device)| class.chars().count() + 1 + device.chars().count())
        .chain(reports.iter().map(|report| report.policy.chars().count()))
        .max()
        .unwrap_or(0);
    let longest = reports
        .iter()
        .flat_map(|report| {
            report
                .classes
                .iter()
                .map(|row| drawn(&row.timeline, report.duration_s).len())
        })
        .max()
        .unwrap_or(0);
    let per_character = longest.div_ceil(SPARKLINE_WIDTH_MAX).max(1);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "per-second timeline ({}; each row scaled to its own range, ▁ low … █ high; \
         latency on a log scale)",
        if per_character == 1 {
            "one character per second".to_string()
        } else {
            format!("one character per {per_character} s")
        }
    );
    for (class, device) in &keys {
        let _ = writeln!(out, "{class}@{device}");
        for report in reports {
            let Some(row) = report.class(class, device) else {
                continue;
            };
            let points = merged(drawn(&row.timeline, report.duration_s), per_character);
            // A timeline covers the whole run, so a class that completed
            // nothing has empty points rather than none.
            if points.is_empty() || row.ops == 0 {
                let _ = writeln!(out, "  {:label_width$}  (nothing completed)", report.policy);
                continue;
            }
            write_timeline_rows(&mut out, &report.policy, label_width, &points);
        }
    }
    out
}

/// The two sparkline rows of one class in one run, labelled `label`: IOPS,
/// and the max latency on a log scale, each with its range.
fn write_timeline_rows(out: &mut String, label: &str, label_width: usize, points: &[(f64, f64)]) {
    let iops: Vec<f64> = points.iter().map(|point| point.0).collect();
    let latency = log_latency(points);
    let (iops_low, iops_high) = range(&iops);
    let (latency_low_us, latency_high_us) = range(
        &points
            .iter()
            .map(|point| point.1)
            .filter(|value| *value > 0.0)
            .collect::<Vec<_>>(),
    );
    let _ = writeln!(
        out,
        "  {:label_width$}  IOPS     {}  {}–{}",
        label,
        sparkline(&iops),
        human_count(iops_low),
        human_count(iops_high)
    );
    let _ = writeln!(
        out,
        "  {:label_width$}  max lat  {}  {}–{}",
        "",
        sparkline(&latency),
        human_duration(latency_low_us),
        human_duration(latency_high_us)
    );
}

/// Each point's max latency as log10 for a sparkline; a second with nothing
/// completed sits at the bottom (the lowest latency drawn).
fn log_latency(points: &[(f64, f64)]) -> Vec<f64> {
    let latency: Vec<f64> = points
        .iter()
        .map(|point| {
            if point.1 > 0.0 {
                point.1.log10()
            } else {
                f64::NAN
            }
        })
        .collect();
    let latency_low = latency
        .iter()
        .copied()
        .filter(|value| value.is_finite())
        .fold(f64::INFINITY, f64::min);
    latency
        .iter()
        .map(|&value| {
            if value.is_finite() {
                value
            } else {
                latency_low
            }
        })
        .collect()
}

/// The seconds that start before `duration_s`.
fn drawn(timeline: &[TimelineSecond], duration_s: f64) -> &[TimelineSecond] {
    let within = timeline
        .iter()
        .take_while(|point| (point.second as f64) < duration_s)
        .count();
    &timeline[..within]
}

/// The widest histogram bar: for one run, and for each of several.
const BAR_WIDTH_ONE: usize = 40;
const BAR_WIDTH_SEVERAL: usize = 20;

/// A bar of `*` for `count` against `fullest`, at least one for any count.
pub fn bar(count: u64, fullest: u64, width: usize) -> String {
    if count == 0 || fullest == 0 {
        return String::new();
    }
    let stars = ((count as f64 / fullest as f64) * width as f64).round() as usize;
    "*".repeat(stars.clamp(1, width))
}

/// The count of the bucket starting at `from_us` (0 when absent).
fn count_at(buckets: &[Log2Bucket], from_us: u64) -> u64 {
    buckets
        .iter()
        .find(|bucket| bucket.from_us == from_us)
        .map_or(0, |bucket| bucket.count)
}

/// The latency histogram of every class, runs side by side.
pub fn render_histograms(reports: &[RunReport]) -> String {
    let width = if reports.len() > 1 {
        BAR_WIDTH_SEVERAL
    } else {
        BAR_WIDTH_ONE
    };
    let mut out = String::new();
    for (class, device) in class_keys(reports) {
        let rows: Vec<Option<&[Log2Bucket]>> = reports
            .iter()
            .map(|report| {
                report
                    .class(&class, &device)
                    .map(|row| row.latency_log2_us.as_slice())
            })
            .collect();
        // The bucket rows: from the lowest to the highest non-empty in any run.
        let mut starts: Vec<(u64, u64)> = rows
            .iter()
            .flatten()
            .flat_map(|buckets| buckets.iter())
            .filter(|bucket| bucket.count > 0)
            .map(|bucket| (bucket.from_us, bucket.to_us))
            .collect();
        starts.sort_unstable();
        let (Some(&(low, _)), Some(&(_, high))) = (starts.first(), starts.last()) else {
            continue;
        };
        let _ = writeln!(out, "{class}@{device}: latency histogram (log2 µs)");
        let _ = write!(out, "{:>24} ", "usecs");
        for report in reports {
            let title: String = report.policy.chars().take(width + 10).collect();
            let _ = write!(out, ": {title:<w$} ", w = width + 11);
        }
        let trimmed = out.trim_end_matches(' ').len();
        out.truncate(trimmed);
        out.push('\n');
        let fullest: Vec<u64> = rows
            .iter()
            .map(|buckets| {
                buckets.map_or(0, |buckets| {
                    buckets.iter().map(|bucket| bucket.count).max().unwrap_or(0)
                })
            })
            .collect();
        let mut from = low;
        loop {
            let to = if from == 0 { 1 } else { 2 * from - 1 };
            let _ = write!(out, "{:>10} -> {:<10} ", from, to);
            for (buckets, &fullest) in rows.iter().zip(&fullest) {
                let count = buckets.map_or(0, |buckets| count_at(buckets, from));
                let _ = write!(
                    out,
                    ": {count:<8} |{:<width$}| ",
                    bar(count, fullest, width)
                );
            }
            let trimmed = out.trim_end_matches(' ').len();
            out.truncate(trimmed);
            out.push('\n');
            if to >= high {
                break;
            }
            from = to + 1;
        }
    }
    out
}

/// The smallest and largest value (0, 0 when empty).
fn range(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    (
        values.iter().copied().fold(f64::INFINITY, f64::min),
        values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// `text` as one shell word: as is when it holds only characters no POSIX
/// shell treats specially, else in single quotes (each `'` written `'\''`),
/// so a "reproduce:" line pastes back into a shell as the same arguments.
pub fn shell_quote(text: &str) -> String {
    let plain =
        |character: char| character.is_ascii_alphanumeric() || "_-./,:=+@%".contains(character);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// A path as one shell word ([`shell_quote`] of its lossy UTF-8 form).
pub fn shell_quote_path(path: &std::path::Path) -> String {
    shell_quote(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailguard_sim::report::ClassAccumulator;

    /// A run whose class completes `per_second[i]` requests of latency
    /// `latency_us[i]` in second `i`.
    fn run(policy: &str, per_second: &[u64], latency_us: &[u64]) -> RunReport {
        let seconds = per_second.len() as u64;
        let mut accumulator =
            ClassAccumulator::new("reads".into(), "vda".into(), seconds * 1_000_000_000)
                .starting_at(0);
        for (second, (&count, &latency)) in per_second.iter().zip(latency_us).enumerate() {
            for index in 0..count {
                let completed = second as u64 * 1_000_000_000 + 100_000_000 + index * 1_000;
                let intended = completed - latency * 1_000;
                accumulator.on_submit(intended);
                accumulator.on_complete(completed, intended, intended, 4096);
            }
        }
        RunReport {
            policy: policy.into(),
            seed: 1,
            duration_s: seconds as f64,
            classes: vec![accumulator.finish()],
        }
    }

    #[test]
    fn sparklines_span_the_levels_from_low_to_high() {
        assert_eq!(sparkline(&[0.0, 7.0, 3.5, 7.0]), "▁█▅█");
        assert_eq!(sparkline(&[5.0, 5.0]), "▁▁");
    }

    #[test]
    fn a_stall_shows_as_a_dip_in_iops_and_a_spike_in_latency() {
        let text = render_timeline(&[
            run("alone", &[100, 100, 100], &[200, 200, 200]),
            run("writeback", &[100, 1, 100], &[200, 800_000, 200]),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("one character per second"), "{text}");
        assert_eq!(lines[1], "reads@vda");
        assert!(
            lines[2].contains("alone") && lines[2].contains("▁▁▁"),
            "{text}"
        );
        assert!(
            lines[4].contains("writeback") && lines[4].contains("█▁█"),
            "{text}"
        );
        assert!(lines[4].ends_with("1–100"), "{text}");
        assert!(
            lines[5].contains("▁█▁") && lines[5].ends_with("200µs–800.0ms"),
            "{text}"
        );
    }

    #[test]
    fn a_class_that_completed_nothing_says_so_over_a_whole_run_timeline() {
        let starved = ClassAccumulator::new("reads".into(), "vda".into(), 3_000_000_000)
            .starting_at(0)
            .covering_run(3_000_000_000);
        let report = RunReport {
            policy: "starved".into(),
            seed: 1,
            duration_s: 3.0,
            classes: vec![starved.finish()],
        };
        assert_eq!(report.classes[0].timeline.len(), 3, "the run's seconds");
        let text = render_timeline(&[report]);
        assert!(text.contains("(nothing completed)"), "{text}");
    }

    #[test]
    fn seconds_after_the_run_are_not_drawn() {
        let mut report = run("drain", &[100, 100, 2], &[200, 200, 9_000]);
        report.duration_s = 2.0;
        let text = render_timeline(&[report]);
        assert!(
            text.lines().nth(2).unwrap().ends_with("▁▁  100–100"),
            "{text}"
        );
    }

    #[test]
    fn histograms_put_runs_side_by_side_over_the_same_buckets() {
        let text = render_histograms(&[
            run("alone", &[100, 100], &[200, 200]),
            run("writeback", &[150, 1], &[200, 70_000]),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "reads@vda: latency histogram (log2 µs)");
        assert!(
            lines[1].contains("usecs") && lines[1].contains(": alone"),
            "{text}"
        );
        assert!(lines[1].contains(": writeback"), "{text}");
        // 200 µs falls in 128 -> 255; 70 ms in 65536 -> 131071.
        let first = lines[2];
        assert!(first.trim_start().starts_with("128 -> 255"), "{text}");
        assert!(
            first.contains(&format!(": 200      |{}|", "*".repeat(20))),
            "{text}"
        );
        assert!(
            first.contains(&format!(": 150      |{}|", "*".repeat(20))),
            "{text}"
        );
        let last = lines.last().unwrap();
        assert!(last.trim_start().starts_with("65536 -> 131071"), "{text}");
        // One slow request still gets a star; the other run has none there.
        assert!(last.contains(": 0        |                    |"), "{text}");
        assert!(
            last.ends_with(": 1        |*                   |"),
            "{text}"
        );
        assert_eq!(lines.len(), 2 + 10, "128..=131071 is ten buckets: {text}");
    }

    #[test]
    fn bars_scale_to_the_fullest_bucket_and_never_hide_a_request() {
        assert_eq!(bar(10, 10, 40).len(), 40);
        assert_eq!(bar(5, 10, 40).len(), 20);
        assert_eq!(bar(1, 1_000_000, 40), "*");
        assert_eq!(bar(0, 10, 40), "");
    }

    #[test]
    fn long_runs_merge_seconds_to_fit_the_width() {
        let seconds = SPARKLINE_WIDTH_MAX * 2 + 1;
        let text = render_timeline(&[run("long", &vec![10; seconds], &vec![100; seconds])]);
        assert!(text.contains("one character per 3 s"), "{text}");
        let line = text.lines().nth(2).unwrap();
        let characters = line.chars().filter(|c| LEVELS.contains(c)).count();
        assert_eq!(characters, seconds.div_ceil(3));
    }

    #[test]
    fn every_row_merges_seconds_as_the_header_says() {
        let long = SPARKLINE_WIDTH_MAX * 2 + 1;
        let text = render_timeline(&[
            run("long", &vec![10; long], &vec![100; long]),
            run("short", &[10; 30], &[100; 30]),
        ]);
        assert!(text.contains("one character per 3 s"), "{text}");
        let characters = |label: &str| {
            let line = text.lines().find(|line| line.contains(label)).unwrap();
            line.chars().filter(|c| LEVELS.contains(c)).count()
        };
        assert_eq!(characters("long"), long.div_ceil(3), "{text}");
        assert_eq!(characters("short"), 10, "30 s at 3 s a character: {text}");
    }

    #[test]
    fn shell_words_paste_back_as_the_same_arguments() {
        assert_eq!(super::shell_quote("jobs/a.toml"), "jobs/a.toml");
        assert_eq!(super::shell_quote("my jobs.toml"), "'my jobs.toml'");
        assert_eq!(super::shell_quote("it's"), "'it'\\''s'");
        assert_eq!(super::shell_quote(""), "''");
        assert_eq!(super::shell_quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
        assert_eq!(super::shell_quote("a\nb"), "'a\nb'");
    }
}
