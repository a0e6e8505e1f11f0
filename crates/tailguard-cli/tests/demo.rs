//! `tailguard demo` end to end, shrunk with `--duration-s` and `--size-mib`:
//! the three runs side by side, the frontier against static settings, both
//! verdicts, the HTML report, and cleanup after a run, after a bad argument
//! and after Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{assert_empty, entries, interrupt_and_wait, tailguard, tailguard_ok};

/// A fresh, empty directory on disk for a demo test.
fn scratch_dir(name: &str) -> PathBuf {
    common::scratch_dir("demo", name)
}

#[test]
fn a_tiny_demo_compares_three_runs_writes_its_report_and_cleans_up() {
    let directory = scratch_dir("run");
    let report = directory.with_extension("html");
    let output = tailguard_ok(&[
        "demo",
        directory.to_str().unwrap(),
        "--duration-s",
        "1.2",
        "--size-mib",
        "8",
        "--report",
        report.to_str().unwrap(),
    ]);
    let text = String::from_utf8(output.stdout).unwrap();
    check_comparison(&text);
    check_verdicts_and_frontier(&text);
    let page = std::fs::read_to_string(&report).expect("the report was written");
    let _ = std::fs::remove_file(&report);
    check_report(&page);
    assert!(
        entries(&directory).is_empty(),
        "left behind: {:?}",
        entries(&directory)
    );
    let _ = std::fs::remove_dir_all(&directory);
}

/// The line of the demo's output `text` that starts with `prefix`.
fn line_starting<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line:\n{text}"))
}

/// The comparison table: alone, the problem, the fix, in that order, a cell
/// each in every row, and writes only in the two runs that write.
fn check_comparison(text: &str) {
    let header = text
        .lines()
        .find(|line| line.contains("alone"))
        .unwrap_or_else(|| panic!("no comparison header:\n{text}"));
    let columns: Vec<&str> = ["alone", "kernel writeback", "tailguard"]
        .into_iter()
        .filter(|name| header.contains(name))
        .collect();
    assert_eq!(columns.len(), 3, "{header}");
    assert!(
        header.find("alone") < header.find("kernel writeback")
            && header.find("kernel writeback") < header.find("tailguard"),
        "alone, the problem, the fix: {header}"
    );
    for row in [
        "read p99 ",
        "read p99.9 ",
        "read p99.99",
        "read max",
        "read worst 0.5 s",
        "write MB/s (app)",
        "disk writes MB/s",
    ] {
        let line = line_starting(text, row);
        assert_eq!(
            line.split_whitespace().count() - row.split_whitespace().count(),
            3,
            "{line}"
        );
    }
    // The alone run has no writes; the two others wrote something.
    let writes = line_starting(text, "write MB/s (app)");
    let cells: Vec<&str> = writes.split_whitespace().skip(3).collect();
    assert_eq!(cells[0], "-", "{writes}");
    assert!(cells[1].parse::<f64>().unwrap() > 0.0, "{writes}");
    assert!(cells[2].parse::<f64>().unwrap() > 0.0, "{writes}");
}

/// Both verdicts, and the frontier's table: solo, four static settings,
/// tailguard.
fn check_verdicts_and_frontier(text: &str) {
    let verdict = line_starting(text, "verdict: ");
    assert!(verdict.contains("% of solo"), "{verdict}");
    let static_verdict = line_starting(text, "verdict against static settings: ");
    assert!(
        ["beats", "ties", "loses", "no static setting"]
            .iter()
            .any(|word| static_verdict.contains(word)),
        "{static_verdict}"
    );
    for point in ["solo", "direct QD1 128k", "direct QD2 1m", "tailguard"] {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("{point} "))),
            "no frontier row for {point}:\n{text}"
        );
    }
}

/// The HTML report: a whole page, the trade-off chart, then reads and
/// writes, three charts each, and both verdicts.
fn check_report(page: &str) {
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    assert_eq!(
        page.matches("</svg>").count(),
        7,
        "the frontier, and two classes, three charts each"
    );
    assert!(page.contains("kernel writeback") && page.contains("Verdict: "));
    assert!(page.contains("Verdict against static settings: "));
}

#[test]
fn bad_arguments_fail_clearly_and_leave_nothing() {
    let output = tailguard(&["demo", "/nonexistent/tailguard-demo"]);
    let error = common::refused(&output);
    assert!(error.contains("not a directory"), "{error}");

    let directory = scratch_dir("bad");
    for (flag, value) in [("--duration-s", "0"), ("--size-mib", "0")] {
        let output = tailguard(&["demo", directory.to_str().unwrap(), flag, value]);
        let error = common::refused(&output);
        assert!(error.contains(flag), "{error}");
        assert_empty(&directory);
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn ctrl_c_mid_demo_removes_its_directory_and_fails() {
    let directory = scratch_dir("interrupt");
    let report = directory.with_extension("html");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args([
            "demo",
            directory.to_str().unwrap(),
            "--duration-s",
            "60",
            "--size-mib",
            "8",
            "--report",
            report.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the demo's directory and both of its files.
    let files = |directory: &Path| -> usize {
        entries(directory)
            .iter()
            .map(|name| std::fs::read_dir(directory.join(name)).map_or(0, |inner| inner.count()))
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while files(&directory) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(entries(&directory).len(), 1, "the demo made its directory");
    std::thread::sleep(Duration::from_millis(500));
    let status = interrupt_and_wait(&mut child, Duration::from_secs(20), "demo");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_empty(&directory);
    assert!(!report.exists(), "no report for an interrupted demo");
    let _ = std::fs::remove_dir_all(&directory);
}
