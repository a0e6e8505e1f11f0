//! The binary's output files and streams: which flags read `-` as standard
//! output, and what happens when standard output is a closed pipe.

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
