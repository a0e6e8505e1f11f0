//! `tailguard frontier` end to end on a scratch directory: a tiny grid of
//! one-second points over two rounds, checked for the JSON's structure and
//! for numbers that agree with each other (not for their values, which are the
//! disk's), the table, the HTML page, readers that pause, cleanup after a run
//! and after Ctrl-C, and refused arguments.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{assert_empty, entries, interrupt_and_wait, tailguard, tailguard_ok};

const ROUNDS: usize = 2;

fn summary(point: &serde_json::Value, key: &str) -> (f64, f64, f64) {
    let summary = &point[key];
    let value = |field: &str| {
        summary[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}.{field} in {point}"))
    };
    (value("min"), value("median"), value("max"))
}

/// The median of two or one values, as the frontier takes it.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// Every sample of every point: two rounds, each round a permutation.
fn check_rounds(points: &[serde_json::Value]) {
    for round in 0..ROUNDS {
        let orders: BTreeSet<u64> = points
            .iter()
            .map(|point| {
                let samples = point["samples"].as_array().unwrap();
                assert_eq!(samples.len(), ROUNDS, "{point}");
                assert_eq!(samples[round]["round"], round as u64);
                samples[round]["order"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(orders, (0..points.len() as u64).collect(), "round {round}");
    }
}

/// The ratios are the samples' rates over the same round's solo rate.
fn check_ratios(points: &[serde_json::Value], solo: &serde_json::Value) {
    let solo_iops: Vec<f64> = solo["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sample| sample["read_iops"].as_f64().unwrap())
        .collect();
    for point in points {
        let samples = point["samples"].as_array().unwrap();
        let mean_ratios: Vec<f64> = samples
            .iter()
            .enumerate()
            .map(|(round, sample)| sample["read_iops"].as_f64().unwrap() / solo_iops[round])
            .collect();
        let (low, middle, high) = summary(point, "mean_over_solo");
        assert!((middle - median(&mean_ratios)).abs() < 1e-9, "{point}");
        assert!(low <= middle && middle <= high, "{point}");
        for sample in samples {
            let p9999 = sample["read_p9999_us"].as_f64().unwrap();
            let max = sample["read_max_us"].as_f64().unwrap();
            assert!(0.0 < p9999 && p9999 <= max, "{sample}");
        }
        for key in [
            "write_mb_per_s",
            "worst_500ms_over_solo",
            "read_p9999_us",
            "read_max_us",
        ] {
            let (low, middle, high) = summary(point, key);
            assert!(low <= middle && middle <= high, "{key}: {point}");
        }
    }
    let (_, solo_mean, _) = summary(solo, "mean_over_solo");
    assert!((solo_mean - 1.0).abs() < 1e-9, "{solo}");
}

/// Static points carry their setting and frontier mark, tailguard points their
/// comparison.
fn check_kinds(points: &[serde_json::Value], write_source: &str) {
    let statics: Vec<&serde_json::Value> = points
        .iter()
        .filter(|point| point["kind"] == "static")
        .collect();
    assert!(statics
        .iter()
        .all(|point| point["queue_depth"] == 1 && point["request_bytes"].as_u64().is_some()));
    assert!(
        statics
            .iter()
            .any(|point| point["on_static_frontier"] == true),
        "some static point is on the frontier"
    );
    for point in points {
        let (_, write, _) = summary(point, "write_mb_per_s");
        match point["kind"].as_str().unwrap() {
            "static" => {
                assert!(point["versus_static"].is_null());
                assert!(write > 0.0, "a static writer wrote: {point}");
            }
            "tailguard" => {
                assert_eq!(point["on_static_frontier"], false);
                let versus = &point["versus_static"];
                let standing = versus["standing"].as_str().unwrap();
                assert!(
                    ["beats", "ties", "loses", "unmatched"].contains(&standing),
                    "{versus}"
                );
                if standing != "unmatched" {
                    let name = versus["static_point"].as_str().unwrap();
                    assert!(statics.iter().any(|point| point["name"] == name));
                }
                if write_source == "writer" {
                    assert!(write > 0.0, "{point}");
                }
            }
            kind => assert_eq!(kind, "solo"),
        }
    }
}

/// Every writer cycles through the same 8 MiB of buffers, whatever its
/// request size and depth (with one buffer per request in flight, a static
/// writer at depth 1 rewrote one hot buffer, which a virtual disk's host
/// copies faster); every reader has its own.
fn check_buffers(points: &[serde_json::Value]) {
    const READERS: u64 = 16;
    const RING_BYTES: u64 = 8 << 20;
    for point in points {
        let writer_request_bytes = match point["kind"].as_str().unwrap() {
            "solo" => None,
            "static" => point["request_bytes"].as_u64(),
            _ => Some(1 << 20),
        };
        let least = READERS + writer_request_bytes.map_or(0, |bytes| RING_BYTES / bytes);
        for sample in point["samples"].as_array().unwrap() {
            let buffers = sample["buffers_allocated"].as_u64().unwrap();
            assert!(
                buffers >= least,
                "{} buffers, at least {least}: {point}",
                buffers
            );
        }
    }
}

#[test]
fn a_tiny_frontier_reports_consistent_json_a_table_and_a_chart() {
    let directory = common::scratch_dir("frontier", "run");
    let json = directory.with_extension("json");
    let report = directory.with_extension("html");
    let output = tailguard_ok(&[
        "frontier",
        directory.to_str().unwrap(),
        "--depths",
        "1",
        "--sizes",
        "128k,1m",
        "--latency-targets",
        "1ms",
        "--no-adaptive",
        "--duration",
        "1s",
        "--rounds",
        "2",
        "--size-mib",
        "8",
        "--json",
        json.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_empty(&directory);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON was written"))
            .unwrap();
    let page = std::fs::read_to_string(&report).expect("the report was written");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_dir_all(&directory);

    assert_eq!(value["rounds"], ROUNDS as u64);
    assert_eq!(value["workload"]["readers"], 16);
    assert_eq!(value["workload"]["read_request_bytes"], 4096);
    let write_source = value["write_rate_source"].as_str().unwrap();
    assert!(["disk", "writer"].contains(&write_source), "{value}");
    let points = value["points"].as_array().unwrap();
    let names: Vec<&str> = points
        .iter()
        .map(|point| point["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "solo",
            "direct QD1 128k",
            "direct QD1 1m",
            "tailguard",
            "tailguard 1ms"
        ]
    );
    check_rounds(points);
    check_ratios(points, &points[0]);
    check_kinds(points, write_source);
    check_buffers(points);

    let text = String::from_utf8(output.stdout).unwrap();
    check_table_order(&text, points);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    assert_eq!(page.matches("</svg>").count(), 1, "one trade-off chart");
    assert_eq!(page.matches("<tr><td>").count(), points.len());
}

#[test]
fn readers_that_pause_are_measured_while_they_run() {
    let directory = common::scratch_dir("frontier", "pausing");
    let json = directory.with_extension("json");
    let output = tailguard_ok(&[
        "frontier",
        directory.to_str().unwrap(),
        "--depths",
        "1",
        "--sizes",
        "1m",
        "--latency-targets",
        "none",
        "--no-adaptive",
        "--duration",
        "2s",
        "--readers-run",
        "500ms",
        "--readers-pause",
        "500ms",
        "--size-mib",
        "8",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_empty(&directory);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON was written"))
            .unwrap();
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&directory);

    let pattern = &value["workload"]["reader_pattern"];
    assert_eq!(pattern["readers"], "periodic", "{value}");
    assert_eq!(
        (pattern["run_s"].as_f64(), pattern["pause_s"].as_f64()),
        (Some(0.5), Some(0.5))
    );
    let command = value["command"].as_str().unwrap();
    assert!(
        command.contains("--readers-run 0.5s --readers-pause 0.5s"),
        "{command}"
    );
    let points = value["points"].as_array().unwrap();
    assert_eq!(points.len(), 3, "solo, one static point, tailguard");
    for point in points {
        let sample = &point["samples"][0];
        let worst = sample["read_worst_500ms_iops"].as_f64().unwrap();
        let mean = sample["read_iops"].as_f64().unwrap();
        // Counting the pauses, a 0.5 s window would hold only the reads
        // still in flight when the readers stop: a few dozen per second.
        assert!(
            worst > 0.05 * mean && worst <= 1.5 * mean,
            "worst {worst} against mean {mean} while running: {point}"
        );
    }
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("the readers running 0.5 s then pausing 0.5 s in turn"),
        "{text}"
    );
}

/// The table in `text` lists the points by write rate, as the JSON's medians
/// order them.
fn check_table_order(text: &str, points: &[serde_json::Value]) {
    let mut by_rate: Vec<(f64, &str)> = points
        .iter()
        .map(|point| {
            (
                summary(point, "write_mb_per_s").1,
                point["name"].as_str().unwrap(),
            )
        })
        .collect();
    by_rate.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rows: Vec<usize> = by_rate
        .iter()
        .map(|(_, name)| {
            text.lines()
                .position(|line| line.starts_with(&format!("{name}  ")))
                .unwrap_or_else(|| panic!("no row for {name}:\n{text}"))
        })
        .collect();
    assert!(rows.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
}

#[test]
fn bad_arguments_fail_clearly_and_leave_nothing() {
    let output = tailguard(&["frontier", "/nonexistent/tailguard-frontier"]);
    let error = common::refused(&output);
    assert!(error.contains("not a directory"), "{error}");

    let directory = common::scratch_dir("frontier", "bad");
    for (flag, value, says) in [
        ("--sizes", "6k", "multiple of 4 KiB"),
        ("--depths", "0", "out of range"),
        ("--latency-targets", "soon", "not a latency"),
        ("--duration", "100ms", "out of range"),
        ("--readers-run", "100ms", "out of range"),
        ("--readers-pause", "1s", "--readers-run"),
    ] {
        let output = tailguard(&["frontier", directory.to_str().unwrap(), flag, value]);
        let error = common::refused(&output);
        assert!(error.contains(says), "{flag} {value}: {error}");
        assert_empty(&directory);
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn ctrl_c_mid_frontier_removes_its_files_and_writes_nothing() {
    let directory = common::scratch_dir("frontier", "interrupt");
    let json = directory.with_extension("json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args([
            "frontier",
            directory.to_str().unwrap(),
            "--depths",
            "1",
            "--sizes",
            "1m",
            "--latency-targets",
            "none",
            "--duration",
            "60s",
            "--size-mib",
            "8",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the read file and the write file.
    let deadline = Instant::now() + Duration::from_secs(20);
    while entries(&directory).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        entries(&directory).len() >= 2,
        "the frontier laid out its files"
    );
    std::thread::sleep(Duration::from_millis(500));
    let status = interrupt_and_wait(&mut child, Duration::from_secs(20), "frontier");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_empty(&directory);
    assert!(!json.exists(), "no JSON for an interrupted frontier");
    let _ = std::fs::remove_dir_all(&directory);
}
