//! The adaptive latency controller, checked in the simulator.
//!
//! - On every model, starting from no profile, a saturating sequential writer
//!   reaches 90% of the device's maximum (the same writer alone under `fifo`,
//!   unlimited depth) within 2 simulated seconds, while 4 KiB reads beside it keep
//!   their p99 within the latency target, or within the device's floor where the
//!   target is below it (the floor: read p99 with the writes one small piece at a
//!   time, `budget_us = 1`; since a class with nothing in flight may always send
//!   a piece, reads no longer wait behind a write the device stalls, so on `nvme`
//!   this floor fell from 1.77 ms to 0.18 ms, below the target). Met on `nvme`
//!   and `sata-ssd`; `hdd` and `usb-flash` are ignored with the numbers and the
//!   reason.
//! - `scenarios/controller-slowdown.toml`: the controller reacts to a device slowed
//!   to 30% within 1 s and recovers within 1 s after it speeds up again. (With
//!   `controller = "fixed"` in that file the same test fails: reaction 2.0 s, so
//!   it measures the controller, not the scenario.)

use std::path::Path;
use tailguard_core::{Nanos, NANOS_PER_MILLISECOND, NANOS_PER_SECOND};
use tailguard_sim::engine::{run_observed, FinishedRequest};
use tailguard_sim::scenario::Scenario;

/// Per-request results of one run.
fn observe(scenario: &Scenario, policy: &str) -> Vec<FinishedRequest> {
    let mut finished = Vec::new();
    run_observed(scenario, policy, scenario.seed, &mut |request| {
        finished.push(*request)
    })
    .unwrap_or_else(|error| panic!("{policy}: {error}"));
    finished
}

fn class_index(scenario: &Scenario, name: &str) -> usize {
    scenario
        .classes
        .iter()
        .position(|class| class.name == name)
        .unwrap()
}

/// Bytes per second of `class` completed in `[from, to)`.
fn rate(finished: &[FinishedRequest], class: usize, from: Nanos, to: Nanos) -> f64 {
    let bytes: u64 = finished
        .iter()
        .filter(|r| r.class == class && (from..to).contains(&r.completed_at))
        .map(|r| r.bytes)
        .sum();
    bytes as f64 * NANOS_PER_SECOND as f64 / (to - from) as f64
}

/// p99 latency (µs) of `class`'s requests completed in `[from, to)`.
fn p99_us(finished: &[FinishedRequest], class: usize, from: Nanos, to: Nanos) -> f64 {
    let mut latencies: Vec<Nanos> = finished
        .iter()
        .filter(|r| r.class == class && (from..to).contains(&r.completed_at))
        .map(|r| r.completed_at - r.intended_at)
        .collect();
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.sort_unstable();
    let index = ((latencies.len() as f64 * 0.99).ceil() as usize).clamp(1, latencies.len()) - 1;
    latencies[index] as f64 / 1e3
}

const SECOND: Nanos = NANOS_PER_SECOND;

fn model_scenario(model: &str, block: &str, read_iops: f64, tailguard: &str) -> Scenario {
    Scenario::from_toml(&format!(
        r#"
duration_s = 4
seed = 5

[[device]]
name = "dev"
model = "{model}"

[[class]]
name = "reads"
shares = 100

[[class]]
name = "bulk"
shares = 100

[[job]]
name = "readers"
class = "reads"
device = "dev"
pattern = "randread"
block_size = "4k"
rate_iops = {read_iops:?}

[[job]]
name = "writer"
class = "bulk"
device = "dev"
pattern = "seqwrite"
block_size = "{block}"
queue_depth = 32
sync = false
offset = "32g"
size = "8g"

[policy.tailguard]
{tailguard}
"#
    ))
    .unwrap()
}

fn converges_on(model: &str, block: &str, read_iops: f64) {
    let adaptive = model_scenario(
        model,
        block,
        read_iops,
        "controller = \"adaptive\"\nprofile = \"none\"",
    );
    let target_us = adaptive.devices[0].profile.latency_target_us as f64;
    let (reads, bulk) = (
        class_index(&adaptive, "reads"),
        class_index(&adaptive, "bulk"),
    );
    let mut alone = adaptive.clone();
    alone.jobs.retain(|job| job.name != "readers");
    let max = rate(&observe(&alone, "fifo"), bulk, SECOND, 4 * SECOND);
    let floor_scenario = model_scenario(
        model,
        block,
        read_iops,
        "controller = \"fixed\"\nbudget_us = 1",
    );
    let floor_us = p99_us(
        &observe(&floor_scenario, "tailguard"),
        reads,
        2 * SECOND,
        4 * SECOND,
    );

    let finished = observe(&adaptive, "tailguard");
    let got = rate(&finished, bulk, 2 * SECOND, 4 * SECOND);
    let p99 = p99_us(&finished, reads, 2 * SECOND, 4 * SECOND);
    // Convergence: the first 100 ms interval from which on throughput stays ≥ 90%.
    let step = 100 * NANOS_PER_MILLISECOND;
    let converged_at = (0..40)
        .rev()
        .take_while(|&i| rate(&finished, bulk, i * step, (i + 1) * step) >= 0.9 * max)
        .last()
        .map_or(f64::NAN, |i| (i * step) as f64 / 1e9);
    println!(
        "{model}: writes {:.1} MB/s of {:.1} MB/s max ({:.1}%), at 90% from {converged_at:.1} s; \
         read p99 {p99:.0} µs, target {target_us:.0} µs, floor {floor_us:.0} µs",
        got / 1e6,
        max / 1e6,
        100.0 * got / max
    );
    assert!(got >= 0.9 * max, "{model}: {got} < 90% of {max}");
    let allowed = target_us.max(floor_us);
    assert!(p99 <= allowed, "{model}: read p99 {p99} µs > {allowed} µs");
}

#[test]
fn nvme_converges_without_a_profile() {
    converges_on("nvme", "1m", 1000.0);
}

#[test]
fn sata_ssd_converges_without_a_profile() {
    converges_on("sata-ssd", "1m", 1000.0);
}

#[test]
#[ignore = "not met yet: 97.6% of the media rate but read p99 1.29 s (target 50 ms). The \
            disk's shortest-seek-first queue starves a read behind the sequential writes, and \
            the controller judges the wait a floor (little work ahead). With the dispatcher's \
            overdue hook on (slack target/6) it gave 69% and p99 56 ms, and cost the slowdown \
            scenario its recovery. 20 random reads/s cost ~13 ms of seek and rotation each \
            (26% of the disk), so 90% with a 50 ms p99 may be out of any scheduler's reach \
            at that read rate"]
fn hdd_converges_without_a_profile() {
    converges_on("hdd", "1m", 20.0);
}

#[test]
#[ignore = "not met yet: 112% of the maximum but read p99 2.04 s (target 500 ms, floor \
            470 ms). The stick serves one command at a time and stalls 200-600 ms; windows of \
            at most 200 ms see one read or none, so late reads never reach the classifier and \
            Little's law, blind to stalls, lets the budget hold several 128 KiB writes"]
fn usb_flash_converges_without_a_profile() {
    converges_on("usb-flash", "128k", 5.0);
}

#[test]
fn slowdown_scenario_reaction_and_recovery() {
    let scenario = Scenario::from_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/controller-slowdown.toml"),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let target_us = scenario.devices[0].profile.latency_target_us as f64;
    let (reads, writes) = (
        class_index(&scenario, "reads"),
        class_index(&scenario, "background"),
    );
    let finished = observe(&scenario, "tailguard");
    let step = 100 * NANOS_PER_MILLISECOND;
    let before = rate(&finished, writes, 2 * SECOND, 3 * SECOND);
    for i in 20..70 {
        println!(
            "{:.1} s: writes {:.1} MB/s, read p99 {:.0} µs",
            (i * step) as f64 / 1e9,
            rate(&finished, writes, i * step, (i + 1) * step) / 1e6,
            p99_us(&finished, reads, i * step, (i + 1) * step)
        );
    }
    // Reaction: the first interval after 3 s from which read p99 stays within the
    // target until the device speeds up at 5 s.
    let within = |i: u64| p99_us(&finished, reads, i * step, (i + 1) * step) <= target_us;
    let reacted = (30..50)
        .rev()
        .take_while(|&i| within(i))
        .last()
        .unwrap_or(50);
    let reaction_s = (reacted - 30) as f64 * 0.1;
    // Recovery: the first interval after 5 s from which writes stay at 90% of
    // their rate before the slowdown (and reads within the target) to the end.
    let recovered = (50..70)
        .rev()
        .take_while(|&i| {
            within(i) && rate(&finished, writes, i * step, (i + 1) * step) >= 0.9 * before
        })
        .last()
        .unwrap_or(70);
    let recovery_s = (recovered - 50) as f64 * 0.1;
    println!(
        "before {:.1} MB/s; reaction {reaction_s:.1} s, recovery {recovery_s:.1} s",
        before / 1e6
    );
    assert!(reaction_s <= 1.0, "reaction {reaction_s} s");
    assert!(recovery_s <= 1.0, "recovery {recovery_s} s");
}
