//! The one error type of the `tailguard` command.
//!
//! Every subcommand (sim, bench, tune, frontier, demo) fails with a
//! [`CliError`]: a message that says what went wrong and how to fix it, and
//! the exit status `main` returns. Errors from the library crates are turned
//! into it where they cross into the command, with the context (the file, the
//! flag) that names the fix.

use std::fmt;

/// Why a `tailguard` subcommand failed, and the exit status that says so.
#[derive(Debug, PartialEq, Eq)]
pub struct CliError {
    /// What went wrong and the fix.
    pub message: String,
    /// 2 for bad input or a failed run, 130 after Ctrl-C (128 + the signal).
    pub status: u8,
}

impl CliError {
    /// Bad input, or a run that failed: exit status 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            status: 2,
        }
    }

    /// Interrupted by SIGINT, SIGTERM or SIGHUP: exit status 128 + the
    /// signal's number (130 for SIGINT).
    pub fn interrupted() -> Self {
        let signal = crate::lifecycle::interrupt_signal().unwrap_or(libc::SIGINT);
        Self {
            message: format!(
                "interrupted ({}); the data files laid out are removed (large ones by a \
                 background process that may finish after this one exits)",
                crate::lifecycle::signal_name(signal)
            ),
            status: (128 + signal) as u8,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}
