//! Progress of real runs: a bar on a terminal, plain lines otherwise.
//!
//! Bench and demo runs take seconds to minutes, so a person at a terminal gets
//! an [`indicatif`] bar per run (its name, elapsed and total seconds) on stderr.
//! When stderr is not a terminal (piped, redirected, under a test harness) no
//! bar is drawn at all: each run prints one line when it starts instead, which
//! reads well in a log and keeps control characters out of captured output.
//!
//! The driver reports the run's elapsed time through [`RunProgress::tick`]; it
//! may call it as often as it likes, since the bar redraws at most a few times
//! a second.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::io::IsTerminal as _;
use tailguard_core::Nanos;

/// Progress of a series of runs.
#[derive(Debug)]
pub struct Progress {
    /// Whether bars are drawn (stderr is a terminal).
    bars: bool,
    /// What the lines and bars are prefixed with (`tailguard bench`).
    program: &'static str,
}

impl Progress {
    /// Bars when stderr is a terminal, lines otherwise.
    pub fn new(program: &'static str) -> Self {
        Self {
            bars: std::io::stderr().is_terminal(),
            program,
        }
    }

    /// Starts a run of `duration_ns` named `name`.
    pub fn start_run(&self, name: &str, duration_ns: Nanos) -> RunProgress {
        let duration_ms = duration_ns / 1_000_000;
        if !self.bars {
            crate::output::note(&format!(
                "{}: {name} ({} s)",
                self.program,
                duration_ns as f64 / 1e9
            ));
            return RunProgress {
                bar: ProgressBar::hidden(),
            };
        }
        // Configured while hidden, so the first frame already has the name.
        let bar =
            ProgressBar::with_draw_target(Some(duration_ms.max(1)), ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template("{prefix} {msg} [{bar:30}] {elapsed} of {total}")
            .map(|style| {
                style.progress_chars("=> ").with_key(
                    "total",
                    |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                        let _ = write!(out, "{:.0}s", state.len().unwrap_or(0) as f64 / 1e3);
                    },
                )
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(format!("{}:", self.program));
        bar.set_message(name.to_string());
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        RunProgress { bar }
    }
}

/// One run's bar (hidden when not on a terminal).
#[derive(Debug)]
pub struct RunProgress {
    bar: ProgressBar,
}

impl RunProgress {
    /// The run has been going for `elapsed_ns`.
    pub fn tick(&self, elapsed_ns: Nanos) {
        let position = (elapsed_ns / 1_000_000).min(self.bar.length().unwrap_or(u64::MAX));
        self.bar.set_position(position);
    }

    /// Whether anything is drawn.
    #[cfg(test)]
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }
}

impl Drop for RunProgress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bar_is_drawn_off_a_terminal() {
        // Under the test harness stderr is captured, not a terminal.
        let progress = Progress {
            bars: false,
            program: "test",
        };
        let run = progress.start_run("run 1/1: tailguard", 2_000_000_000);
        run.tick(1_000_000_000);
        assert!(run.is_hidden());
    }
}
