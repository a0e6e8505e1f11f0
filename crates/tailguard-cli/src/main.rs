//! The `tailguard` command: a thin pipeline over the library crates.
//!
//! Each subcommand parses its arguments with clap, calls the library, and prints
//! the result as a table (for people) or JSON (for programs). Errors print their
//! cause with the fix and exit with status 2; nothing panics on bad input.
//!
//! - `tailguard sim SCENARIO.toml... [--policy P[,P...]] [--seed N] [--json]`
//!   runs scenarios in the deterministic simulator and compares policies.
//! - `tailguard tune PATH [--duration 60s] [--output FILE] [--format toml|seastar] [--report FILE.html]`
//!   measures a device's IOPS, bandwidth and knees, and writes its profile.
//! - `tailguard bench JOBS.toml [--target PATH] [--mode M[,M...]] [--repeat N] [--json]
//!   [--report FILE.html]` runs a job file on a real disk and compares tailguard
//!   with plain kernel I/O.
//! - `tailguard frontier [DIR] [--quick] [--depths QD,...] [--sizes SIZE,...]
//!   [--latency-targets LATENCY,...] [--rounds N] [--json FILE] [--report FILE.html]`
//!   traces the read/write trade-off of static O_DIRECT settings and of
//!   tailguard on one disk.
//! - `tailguard demo [DIR] [--quick]` runs the embedded main job (readers alone,
//!   beside kernel writeback, beside writes through tailguard), a small
//!   frontier against static O_DIRECT settings, and writes
//!   `tailguard-demo.html`.
//! - `tailguard clean [DIR...]` removes what killed runs left in a directory
//!   (every run also does so in its own directory first; see [`lifecycle`]).
//!
//! The library's `tracing` events go to standard error: warnings by default
//! (such as the announced fall-back from io_uring to the thread pool), more
//! with `RUST_LOG` (for example `RUST_LOG=tailguard::controller=info` shows
//! every budget change of the adaptive controller).

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod error;
mod flags;
mod frontier;
mod html;
mod lifecycle;
mod metrics;
mod output;
mod progress;
mod render;
mod tune;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::report::{render_table, RunReport};
use tailguard_sim::scenario::Scenario;

/// tailguard: flat read latency while writes stream.
#[derive(Debug, Parser)]
#[command(name = "tailguard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run scenarios in the deterministic device simulator and compare policies.
    Sim(SimArguments),
    /// Run a job file on a real disk and compare tailguard with plain kernel I/O.
    Bench(bench::BenchArguments),
    /// Measure a device (IOPS, bandwidth, latency knees) and write its profile.
    Tune(tune::TuneArguments),
    /// Trace the read/write trade-off of static O_DIRECT settings and of
    /// tailguard on a disk (readers beside a sequential writer).
    Frontier(frontier::FrontierArguments),
    /// Show on this machine's disk what kernel writeback does to readers, and
    /// what tailguard does instead, and how it compares with static O_DIRECT
    /// settings (about 3 minutes; --quick about 1).
    Demo(demo::DemoArguments),
    /// Remove what killed bench, tune, frontier or demo runs left in a
    /// directory (files named with a process id that no longer runs); files
    /// of running ones stay.
    Clean(lifecycle::CleanArguments),
}

#[derive(Debug, clap::Args)]
struct SimArguments {
    /// Scenario files (TOML; see docs/reference/scenario-files.md).
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    /// Policies to compare, comma-separated: tailguard, fifo, global-cap, cfq,
    /// cfq-fixed, deadline. Default: the scenario's `policies`, else tailguard.
    #[arg(long, value_delimiter = ',', value_parser = flags::SIM_POLICY)]
    policy: Vec<PolicyName>,
    /// Overrides the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Print JSON instead of a table: an object per policy (an array of them when
    /// several policies, or several scenarios, are run).
    #[arg(long)]
    json: bool,
}

/// Library events to standard error, filtered by `RUST_LOG` (default: warnings).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Only fails if a subscriber is already set, which nothing here does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(arguments) => run_sim(&arguments),
        Command::Bench(arguments) => bench::run(&arguments),
        Command::Tune(arguments) => tune::run(&arguments),
        Command::Frontier(arguments) => frontier::run(&arguments),
        Command::Demo(arguments) => demo::run(&arguments),
        Command::Clean(arguments) => lifecycle::run_clean(&arguments),
    }
    .and_then(|()| metrics::linger());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Standard output closed under the command (`| head -1`): it stops
        // there, as the default SIGPIPE would have stopped it.
        Err(error) if error.status == output::STDOUT_CLOSED_STATUS => ExitCode::from(error.status),
        Err(error) => {
            // Not eprintln!, which panics when standard error is gone (a
            // closed terminal, whose SIGHUP may be why the run stopped).
            let _ = writeln!(std::io::stderr(), "error: {}", error.message);
            ExitCode::from(error.status)
        }
    }
}

fn run_sim(arguments: &SimArguments) -> Result<(), error::CliError> {
    // Every file is read before any runs: a typo in the last one costs no
    // run and prints no table.
    let scenarios = arguments
        .scenarios
        .iter()
        .map(|path| {
            Scenario::from_file(path).map_err(|error| error::CliError::usage(error.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut all_reports: Vec<RunReport> = Vec::new();
    for (path, scenario) in arguments.scenarios.iter().zip(&scenarios) {
        let seed = arguments.seed.unwrap_or(scenario.seed);
        let policies = if !arguments.policy.is_empty() {
            arguments.policy.clone()
        } else if !scenario.policies.is_empty() {
            scenario.policies.clone()
        } else {
            vec![PolicyName::Tailguard]
        };
        let reports = policies
            .iter()
            .map(|policy| {
                tailguard_sim::engine::run(scenario, *policy, seed)
                    .map_err(|error| error::CliError::usage(format!("{}: {error}", path.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !arguments.json {
            output::print(&format!(
                "{} — seed {seed}, {} simulated seconds (reproduce: tailguard sim {} --seed {seed} --policy {})",
                path.display(),
                reports[0].duration_s,
                render::shell_quote_path(path),
                policies
                    .iter()
                    .map(|policy| policy.name())
                    .collect::<Vec<_>>()
                    .join(",")
            ))?;
            output::print(&render_table(&reports))?;
        }
        all_reports.extend(reports);
    }
    if arguments.json {
        let text = if all_reports.len() == 1 {
            serde_json::to_string_pretty(&all_reports[0])
        } else {
            serde_json::to_string_pretty(&all_reports)
        };
        output::print(&text.map_err(|error| error::CliError::usage(error.to_string()))?)?;
    }
    Ok(())
}
