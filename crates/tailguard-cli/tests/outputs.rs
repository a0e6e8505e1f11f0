//! The binary's output files and streams: which flags read `-` as standard
//! output, what happens when standard output is a closed pipe, and that a
//! bad input file stops a command before it prints anything.

mod common;

use common::Scratch;
use std::process::{Command, Stdio};

#[test]
fn frontier_refuses_a_report_on_standard_output_before_the_run() {
    let scratch = Scratch::new("outputs", "dash-report");
    let output = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(["frontier", scratch.text(), "--quick", "--size-mib", "1"])
        .args(["--duration", "1", "--report", "-"])
        .current_dir(&scratch.0)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--report") && stderr.contains("./-"),
        "{stderr}"
    );
    assert!(!scratch.0.join("-").exists(), "no file named - is written");
}

/// Standard output for a child: a pipe whose read end is already closed, so
/// its first write fails with EPIPE (Rust programs ignore SIGPIPE).
fn closed_pipe() -> Stdio {
    let (read, write) = rustix::pipe::pipe().expect("a pipe");
    drop(read);
    Stdio::from(write)
}

/// Runs the binary with `arguments` and standard output closed; its exit
/// status and standard error.
fn with_stdout_closed(arguments: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .output()
        .expect("the binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn sim_into_a_closed_pipe_stops_quietly() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/seed-000-writeback.toml"
    );
    for arguments in [
        &["sim", scenario, scenario][..],
        &["sim", scenario, "--json"][..],
    ] {
        let (status, stderr) = with_stdout_closed(arguments);
        assert!(!stderr.contains("panicked"), "{arguments:?}: {stderr}");
        assert_eq!(status, Some(141), "{arguments:?}: {stderr}");
    }
}

#[test]
fn frontier_into_a_closed_pipe_still_writes_its_files() {
    let scratch = Scratch::new("outputs", "closed-frontier");
    let (json, report) = (scratch.0.join("f.json"), scratch.0.join("r.html"));
    let (status, stderr) = with_stdout_closed(&[
        "frontier",
        scratch.text(),
        "--depths",
        "1",
        "--sizes",
        "1m",
        "--latency-targets",
        "none",
        "--no-adaptive",
        "--duration",
        "1s",
        "--size-mib",
        "64",
        "--json",
        json.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status, Some(141), "{stderr}");
    assert!(json.is_file() && report.is_file(), "{stderr}");
}

#[test]
fn sim_reads_every_scenario_before_printing_any_table() {
    let scratch = Scratch::new("outputs", "bad-scenario");
    let bad = scratch.0.join("bad.toml");
    std::fs::write(&bad, "duration_s = \"soon\"\n").unwrap();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/seed-000-writeback.toml"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(["sim", scenario, bad.to_str().unwrap()])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.toml"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "",
        "no table printed"
    );
}
