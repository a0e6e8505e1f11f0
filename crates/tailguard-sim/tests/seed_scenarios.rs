//! Every shipped scenario (`scenarios/seed-*.toml`) shows its seed document's
//! pathology under the baseline policy and its absence under tailguard.
//!
//! Each test loads the scenario exactly as `tailguard sim` does, runs the
//! policies, and asserts the relations the scenario's header comment states.
//! Baselines that need "the same workload without the antagonist" drop that job
//! from the parsed scenario and run again with the same seed.
//!
//! Each relation must hold on every seed of [`SEEDS`], not only on the one
//! the scenario file names: a relation that holds by the luck of one random
//! draw is not the scenario's property. Seed 003 is the exception: nothing in
//! it is random (the `hdd` model draws no numbers and sequential writes draw
//! no offsets), so every seed gives the same run; it runs once, on the file's
//! seed, and checks that another seed indeed gives the identical report.

use std::path::{Path, PathBuf};
use tailguard_core::{CostModel, Direction, NANOS_PER_SECOND_F64};
use tailguard_sim::engine::run;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::report::{ClassReport, RunReport};
use tailguard_sim::scenario::Scenario;

fn scenario_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

/// The seeds every scenario runs with.
const SEEDS: [u64; 5] = [1, 2, 3, 4, 5];

/// Runs `check` on every seed of [`SEEDS`] and fails naming the seeds it
/// failed on (each failure's message is printed as it happens).
fn on_every_seed(check: fn(u64)) {
    let failed: Vec<u64> = SEEDS
        .iter()
        .copied()
        .filter(|&seed| std::panic::catch_unwind(|| check(seed)).is_err())
        .collect();
    assert!(failed.is_empty(), "failed on seeds {failed:?} of {SEEDS:?}");
}

/// The scenario file `name`, its random draws made from `seed`.
fn load(name: &str, seed: u64) -> Scenario {
    let mut scenario =
        Scenario::from_file(&scenario_path(name)).unwrap_or_else(|error| panic!("{error}"));
    scenario.seed = seed;
    println!("{name}, seed {seed}");
    scenario
}

fn without_job(mut scenario: Scenario, job: &str) -> Scenario {
    let before = scenario.jobs.len();
    scenario.jobs.retain(|spec| spec.name != job);
    assert_eq!(scenario.jobs.len(), before - 1, "no job named {job}");
    scenario
}

fn simulate(scenario: &Scenario, policy: PolicyName) -> RunReport {
    run(scenario, policy, scenario.seed).unwrap_or_else(|error| panic!("{policy}: {error}"))
}

fn row<'a>(report: &'a RunReport, class: &str, device: &str) -> &'a ClassReport {
    report
        .class(class, device)
        .unwrap_or_else(|| panic!("{}: no row {class}@{device}", report.policy))
}

#[test]
fn seed_000_writeback_hurts_reads_under_fifo_but_not_under_tailguard() {
    on_every_seed(seed_000_writeback_hurts_reads_under_fifo_but_not_under_tailguard_on);
}

fn seed_000_writeback_hurts_reads_under_fifo_but_not_under_tailguard_on(seed: u64) {
    let scenario = load("seed-000-writeback.toml", seed);
    let read_only = simulate(
        &without_job(scenario.clone(), "writeback"),
        PolicyName::Tailguard,
    );
    let read_only_p999 = row(&read_only, "reads", "ssd").latency_us.p999;
    let fifo = simulate(&scenario, PolicyName::Fifo);
    let tailguard = simulate(&scenario, PolicyName::Tailguard);
    let fifo_p999 = row(&fifo, "reads", "ssd").latency_us.p999;
    let tailguard_reads = row(&tailguard, "reads", "ssd");
    let tailguard_p999 = tailguard_reads.latency_us.p999;
    println!(
        "read p99.9: alone {read_only_p999} µs, fifo {fifo_p999} µs, tailguard {tailguard_p999} µs \
         ({} of {} reads unfinished)",
        tailguard_reads.outstanding, tailguard_reads.submitted
    );
    // p99.9 rests on the reads that finished: expect under tailguard at most
    // 0.1% of the reads unfinished at the end, or p99.9 could hide reads
    // left waiting.
    assert!(
        tailguard_reads.outstanding * 1000 <= tailguard_reads.submitted,
        "tailguard left {} of {} reads unfinished",
        tailguard_reads.outstanding,
        tailguard_reads.submitted
    );
    // Expect the pathology under fifo: at least 20x the read-only p99.9.
    assert!(
        fifo_p999 >= 20.0 * read_only_p999,
        "fifo p99.9 {fifo_p999} vs {read_only_p999}"
    );
    // Expect tailguard to keep reads within 2x of their read-only p99.9.
    assert!(
        tailguard_p999 <= 2.0 * read_only_p999,
        "tailguard p99.9 {tailguard_p999} vs {read_only_p999}"
    );

    let burst_seconds = |report: &RunReport| {
        let writes = row(report, "background", "ssd");
        assert_eq!(
            writes.outstanding, 0,
            "{}: the burst did not finish",
            report.policy
        );
        writes.last_completion_s - writes.first_submit_s
    };
    let (fifo_burst, tailguard_burst) = (burst_seconds(&fifo), burst_seconds(&tailguard));
    println!("burst: fifo {fifo_burst:.2} s, tailguard {tailguard_burst:.2} s");
    // Expect the burst to finish within 1.5x of its time under fifo.
    assert!(
        tailguard_burst <= 1.5 * fifo_burst,
        "{tailguard_burst} vs {fifo_burst}"
    );
}

#[test]
fn seed_001_a_slow_device_throttles_a_fast_one_only_under_a_global_cap() {
    on_every_seed(seed_001_a_slow_device_throttles_a_fast_one_only_under_a_global_cap_on);
}

fn seed_001_a_slow_device_throttles_a_fast_one_only_under_a_global_cap_on(seed: u64) {
    let scenario = load("seed-001-slow-device.toml", seed);
    let alone = without_job(scenario.clone(), "stick-writer");
    for policy in [PolicyName::GlobalCap, PolicyName::Tailguard] {
        let alone_mb_per_s = row(&simulate(&alone, policy), "copy", "disk").mb_per_s;
        let shared = simulate(&scenario, policy);
        let shared_mb_per_s = row(&shared, "copy", "disk").mb_per_s;
        let stick_mb_per_s = row(&shared, "copy", "stick").mb_per_s;
        let drop = 1.0 - shared_mb_per_s / alone_mb_per_s;
        println!("{policy}: disk alone {alone_mb_per_s} MB/s, beside the stick {shared_mb_per_s} MB/s (drop {:.1}%), stick {stick_mb_per_s} MB/s", drop * 100.0);
        assert!(
            stick_mb_per_s > 0.5,
            "{policy}: the stick must make progress"
        );
        if policy == PolicyName::GlobalCap {
            // Expect the pathology: the disk loses at least 30%.
            assert!(drop >= 0.30, "global-cap drop {drop}");
        } else {
            // Expect per-device budgets to keep the loss within 5%.
            assert!(drop <= 0.05, "tailguard drop {drop}");
        }
    }
}

/// Device time a row consumed by the profile's cost model.
fn device_time_s(cost_model: &CostModel, row: &ClassReport, direction: Direction) -> f64 {
    let bytes_per_op = row.bytes.checked_div(row.ops).unwrap_or(0);
    row.ops as f64 * cost_model.cost_ns(direction, bytes_per_op) as f64 / NANOS_PER_SECOND_F64
}

#[test]
fn seed_002_cfq_starves_async_writes_and_the_fixes_bound_their_wait() {
    on_every_seed(seed_002_cfq_starves_async_writes_and_the_fixes_bound_their_wait_on);
}

fn seed_002_cfq_starves_async_writes_and_the_fixes_bound_their_wait_on(seed: u64) {
    let scenario = load("seed-002-starvation.toml", seed);
    let profile = scenario.devices[0].profile.clone();
    let cost_model = CostModel::new(&profile);

    let cfq = simulate(&scenario, PolicyName::Cfq);
    let cfq_wait_s = row(&cfq, "metadata", "ssd").queue_wait_us_max / 1e6;
    println!("cfq: longest async wait {cfq_wait_s:.2} s");
    // Expect the seed's starvation: at least 10 s.
    assert!(cfq_wait_s >= 10.0, "cfq async wait {cfq_wait_s} s");

    let fixed = simulate(&scenario, PolicyName::CfqFixed);
    let fixed_wait_ms = row(&fixed, "metadata", "ssd").queue_wait_us_max / 1e3;
    println!("cfq-fixed: longest async wait {fixed_wait_ms:.1} ms");
    // Expect cfq-fixed's bound: the async FIFO expiry (250 ms) plus one
    // dispatch round; allow a full second.
    assert!(
        fixed_wait_ms <= 1_000.0,
        "cfq-fixed async wait {fixed_wait_ms} ms"
    );

    // tailguard's bound: (k + 1) × gap_max, with k = requests of the class ahead
    // (queue_depth − 1), gap_max from fair_queue's module docs.
    let mut dispatcher =
        tailguard_core::Dispatcher::new(tailguard_core::DispatcherConfig::new(profile)).unwrap();
    let metadata = dispatcher.add_class(100).unwrap();
    dispatcher.add_class(100).unwrap();
    let gap_ns = dispatcher.gap_bound_ns(metadata).unwrap();
    let bound_ms = 4.0 * gap_ns as f64 / 1e6;
    let tailguard = simulate(&scenario, PolicyName::Tailguard);
    let writes = row(&tailguard, "metadata", "ssd");
    let reads = row(&tailguard, "sync-reads", "ssd");
    let wait_ms = writes.queue_wait_us_max / 1e3;
    println!("tailguard: longest async wait {wait_ms:.2} ms (bound {bound_ms:.2} ms)");
    // Expect tailguard within its documented bound.
    assert!(
        wait_ms <= bound_ms,
        "tailguard async wait {wait_ms} ms > bound {bound_ms} ms"
    );

    let write_time = device_time_s(&cost_model, writes, Direction::Write);
    let read_time = device_time_s(&cost_model, reads, Direction::Read);
    let write_fraction = write_time / (write_time + read_time);
    println!(
        "tailguard: async share of device time {:.1}%",
        write_fraction * 100.0
    );
    // Expect the async class to get at least its share (equal shares: 50%),
    // within the 5% tolerance of the fairness property.
    assert!(
        write_fraction >= 0.5 * 0.95,
        "async fraction {write_fraction}"
    );
}

/// Deterministic, so run once (see the module docs): on the file's seed,
/// after checking that a different seed gives the identical run, which would
/// fail (and call for [`on_every_seed`]) if the case ever drew anything.
#[test]
fn seed_003_queued_sync_writes_reach_the_media_rate_through_tailguard() {
    let name = "seed-003-hdd-sync-writes.toml";
    let file_seed = Scenario::from_file(&scenario_path(name)).unwrap().seed;
    let other_seed = file_seed.wrapping_add(1);
    let classes = |seed| simulate(&load(name, seed), PolicyName::Fifo).classes;
    assert_eq!(
        classes(file_seed),
        classes(other_seed),
        "{name} now depends on the seed: run it with on_every_seed"
    );
    let scenario = load(name, file_seed);
    let media_rate = scenario.devices[0].profile.write_bandwidth;
    let revolution_s = 60.0 / 7200.0;
    for policy in [PolicyName::Fifo, PolicyName::Tailguard] {
        let report = simulate(&scenario, policy);
        let one = row(&report, "one-at-a-time", "disk");
        println!("{policy}: one at a time {} writes/s", one.iops);
        // Expect about one write per revolution (120/s): between 0.8 and 1.2 of it.
        let per_revolution = one.iops * revolution_s;
        assert!(
            (0.8..=1.2).contains(&per_revolution),
            "{policy}: {per_revolution} per revolution"
        );
    }
    let report = simulate(&scenario, PolicyName::Tailguard);
    let queued = row(&report, "queued", "disk");
    let fraction = queued.mb_per_s * 1e6 / media_rate;
    println!(
        "tailguard: queued {} MB/s = {:.1}% of the media rate",
        queued.mb_per_s,
        fraction * 100.0
    );
    // Expect queued writes through tailguard at 80% of the media rate or more.
    assert!(fraction >= 0.80, "queued fraction {fraction}");
}
