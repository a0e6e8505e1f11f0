//! The bench job TOML and fio job file parsers under fuzzing: mutated copies
//! of the job files in `benchmarks/` and of small valid fio job files, and
//! random text, go through `BenchJob::from_toml` and `FioImport::from_text`.
//! Each must return (no panic, no hang) a job or an error naming a key and
//! saying what is wrong; an accepted job must be one the bench driver can
//! group and lay out.
//!
//! These are unit tests because the command is a binary crate; CI runs a
//! fixed set of cases, and `PROPTEST_CASES=100000 cargo test --release -p
//! tailguard-cli --bin tailguard fuzz` runs a longer campaign
//! (`PROPTEST_RNG_SEED=N` for other inputs).

#[path = "../../../tailguard-sim/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use super::fio::FioImport;
use super::job::BenchJob;
use fuzz_support::{config, mutated, parse_bounded, random_text};
use proptest::prelude::*;
use tailguard_sim::ConfigError;

const JOB_BASES: &[&str] = &[
    include_str!("../../../../benchmarks/bench-writeback.toml"),
    include_str!("../../../../benchmarks/demo-readers.toml"),
    include_str!("../../../../benchmarks/demo-scenario.toml"),
    include_str!("../../../../benchmarks/seed001-two-targets.toml"),
];

const FIO_BASES: &[&str] = &[
    "; two jobs\n[global]\nruntime=2\ntime_based\ndirectory=/srv/bench\n\n[reads]\n\
     rw=randread\nbs=4k\niodepth=16\nsize=1g\n\n[writes]\nrw=write\nbs=1m\nnumjobs=2\n\
     size=256m\noffset=1g\nstartdelay=500ms\nprio=0\n",
    "[global]\nioengine=libaio\ndirect=1\nruntime=5s\nsize=64m\n\n[mixed]\nrw=randrw\n\
     rwmixread=70\nbs=8k\niodepth=4\nrate_iops=500,200\n\n[later]\nstonewall\nrw=write\n\
     bs=128k\nfsync=8\nend_fsync=1\nthinktime=100\n",
    "[job]\nrw=read\nbs=64k\nrate=10m\nnumjobs=3\nruntime=1\nsize=1g\n",
];

/// A refusal names a key and says something about it.
fn check_refused(error: &ConfigError, text: &str) {
    assert!(
        !error.key.is_empty(),
        "an error naming no key for {text:?}: {error}"
    );
    assert!(
        !error.message.trim().is_empty(),
        "an empty error for {text:?}"
    );
    assert!(
        !error.message.contains("untagged enum"),
        "the error names serde's internals, not the fix: {error}"
    );
}

/// An accepted job can be grouped and laid out, as the driver does first.
fn check_accepted(job: &BenchJob) {
    let groups = job.groups();
    for group in &groups {
        let _ = job.group_scenario(group);
    }
    let _ = job.region_count();
}

fn check_job(text: &str) {
    match parse_bounded(text, BenchJob::from_toml) {
        Ok(job) => check_accepted(&job),
        Err(error) => check_refused(&error, text),
    }
}

fn check_fio(text: &str) {
    match parse_bounded(text, FioImport::from_text) {
        Ok(imported) => check_accepted(&imported.job),
        Err(error) => check_refused(&error, text),
    }
}

#[test]
fn every_base_file_parses() {
    for text in JOB_BASES {
        BenchJob::from_toml(text).unwrap();
    }
    for text in FIO_BASES {
        FioImport::from_text(text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_bench_jobs_parse_or_fail_cleanly(text in mutated(JOB_BASES)) {
        check_job(&text);
    }

    #[test]
    fn mutated_fio_files_import_or_fail_cleanly(text in mutated(FIO_BASES)) {
        check_fio(&text);
    }

    #[test]
    fn random_text_fails_cleanly_as_job_and_fio_file(text in random_text()) {
        check_job(&text);
        check_fio(&text);
    }
}
