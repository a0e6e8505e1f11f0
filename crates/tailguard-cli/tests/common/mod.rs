//! Helpers shared by the binary's integration tests.

use std::process::{Command, Output};

/// Runs the `tailguard` binary with `arguments`.
pub fn tailguard(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

/// Runs the binary and asserts it succeeded, showing its stderr if not.
pub fn tailguard_ok(arguments: &[&str]) -> Output {
    let output = tailguard(arguments);
    assert!(
        output.status.success(),
        "tailguard {arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
