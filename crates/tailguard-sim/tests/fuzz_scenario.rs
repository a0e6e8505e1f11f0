//! The scenario parser under fuzzing: mutated copies of every scenario in
//! `scenarios/` and `benchmarks/sim-100k-iops.toml`, and random text, go
//! through `Scenario::from_toml`, which must return (no panic, no hang) a
//! scenario or an error naming a key and saying what is wrong.
//!
//! CI runs a fixed set of cases; `PROPTEST_CASES=100000 cargo test --release
//! -p tailguard-sim --test fuzz_scenario` runs a longer campaign
//! (`PROPTEST_RNG_SEED=N` for other inputs).

#[path = "fuzz_support/mod.rs"]
mod fuzz_support;

use fuzz_support::{config, mutated, parse_bounded, random_text};
use proptest::prelude::*;
use tailguard_sim::scenario::{Arrival, Scenario, ARRIVALS_MAX, REQUESTS_HELD_MAX};

const BASES: &[&str] = &[
    include_str!("../../../scenarios/controller-slowdown.toml"),
    include_str!("../../../scenarios/rate-limit-compaction.toml"),
    include_str!("../../../scenarios/seed-000-writeback.toml"),
    include_str!("../../../scenarios/seed-001-slow-device.toml"),
    include_str!("../../../scenarios/seed-002-starvation.toml"),
    include_str!("../../../scenarios/seed-003-hdd-sync-writes.toml"),
    include_str!("../../../benchmarks/sim-100k-iops.toml"),
];

/// Parses `text`; an accepted scenario must be one the simulator can hold,
/// and a refusal must say something.
fn check(text: &str) {
    match parse_bounded(text, Scenario::from_toml) {
        Ok(scenario) => {
            for job in &scenario.jobs {
                assert!(
                    job.start_ns < job.stop_ns && job.stop_ns <= scenario.duration_ns,
                    "a job that runs for no time was accepted: {job:?}"
                );
                let instances = f64::from(job.numjobs);
                let span_s = (job.stop_ns - job.start_ns) as f64 / 1e9;
                match job.arrival {
                    Arrival::OpenLoop { rate_iops } => {
                        assert!(rate_iops * instances * span_s <= ARRIVALS_MAX as f64)
                    }
                    Arrival::Burst { burst_bytes } => assert!(
                        burst_bytes.div_ceil(job.block_size_bytes) * u64::from(job.numjobs)
                            <= REQUESTS_HELD_MAX
                    ),
                    Arrival::ClosedLoop { queue_depth } => assert!(
                        u64::from(queue_depth) * u64::from(job.numjobs) <= REQUESTS_HELD_MAX
                    ),
                }
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert!(!message.trim().is_empty(), "empty error for {text:?}");
            assert!(
                !message.contains("untagged enum"),
                "the error names serde's internals, not the fix: {message}"
            );
        }
    }
}

#[test]
fn every_base_scenario_parses() {
    for base in BASES {
        Scenario::from_toml(base).unwrap();
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_scenarios_parse_or_fail_cleanly(text in mutated(BASES)) {
        check(&text);
    }

    #[test]
    fn random_text_fails_cleanly(text in random_text()) {
        check(&text);
    }
}
