//! Saturating classes: the scheduler must not hold them below what the
//! device delivers with no scheduler at all.
//!
//! A class with a deep queue of its own (here 2 × 32 outstanding requests)
//! waits for itself more than for anyone else, so the latency target is not
//! its promise and the budget is sized by throughput (the controller's module
//! docs, rules 1 and 5). Each case runs the same scenario under `fifo`
//! (everything straight to the device model) and under the default
//! `tailguard` policy, over several seeds. One class alone must move at least
//! 95% of fifo's bytes; two together must keep the device at least 90% busy
//! (each class's bytes over its pattern's bytes alone under fifo, summed)
//! and split it by their shares.
//!
//! Three classes of one pattern are checked the same way (shares 100, 200
//! and 400). Every model and pattern alone is checked. On `hdd` the two classes'
//! regions lie 16 GiB apart and the dispatcher's slices serve one region at
//! a time, each class charged at the pace the disk serves it, which keeps
//! even the mixes of two or three random classes over 90% busy where fifo,
//! seeking between the regions, stays under it. On `usb-flash`
//! two random readers, whose 128 reads fit the stick's budget, are split by
//! shares only because the controller shrinks a budget that binds nothing
//! while several classes share the device (its rule 14).

use tailguard_sim::engine::run_observed;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::scenario::Scenario;

const SEEDS: [u64; 3] = [1, 2, 3];

/// Simulated seconds per model: enough for thousands of requests (tens on
/// the stick), few enough to keep the test to seconds. `sata-ssd`'s writes
/// run for longer than its write cache absorbs them at full speed (half a
/// second), and its writes alone for long enough that the budget's knee
/// search has found larger pieces.
fn duration_s(model: &str, jobs: &str) -> f64 {
    match model {
        "nvme" => 0.25,
        "sata-ssd" if jobs.contains("seqwrite") => 5.0,
        "sata-ssd" => 0.5,
        "hdd" => 10.0,
        _ => 6.0,
    }
}

/// One saturating job of class `name` (2 × 32 outstanding), its region
/// starting at `offset`.
fn job(name: &str, shares: u32, pattern: &str, offset: &str) -> String {
    let block = match pattern {
        "randread" | "randwrite" => "4k",
        _ => "128k",
    };
    format!(
        r#"
[[class]]
name = "{name}"
shares = {shares}
[[job]]
name = "{name}"
class = "{name}"
device = "dev"
pattern = "{pattern}"
block_size = "{block}"
queue_depth = 32
numjobs = 2
offset = "{offset}"
size = "16g"
"#
    )
}

fn scenario(model: &str, jobs: &str) -> Scenario {
    Scenario::from_toml(&format!(
        r#"
duration_s = {duration_s}
[[device]]
name = "dev"
model = "{model}"
{jobs}"#,
        duration_s = duration_s(model, jobs)
    ))
    .unwrap()
}

/// Bytes each of `classes` moved under `policy`.
fn bytes(scenario: &Scenario, policy: PolicyName, seed: u64, classes: &[&str]) -> Vec<f64> {
    measure(scenario, policy, seed, classes).0
}

/// Bytes each of `classes` moved under `policy`, and the fraction of the run
/// during which the device held at least one of the requests (from the last
/// piece's dispatch to the completion): the device's busy time, which counts
/// a seek as busy, unlike the bytes.
fn measure(
    scenario: &Scenario,
    policy: PolicyName,
    seed: u64,
    classes: &[&str],
) -> (Vec<f64>, f64) {
    let mut intervals = Vec::new();
    let report = run_observed(scenario, policy, seed, &mut |request| {
        intervals.push((request.dispatched_at, request.completed_at))
    })
    .unwrap();
    intervals.sort_unstable();
    let (mut busy_ns, mut covered_to) = (0, 0);
    for (from, to) in intervals {
        busy_ns += to.saturating_sub(from.max(covered_to));
        covered_to = covered_to.max(to);
    }
    let bytes = classes
        .iter()
        .map(|name| report.class(name, "dev").unwrap().bytes as f64)
        .collect();
    (bytes, busy_ns as f64 / scenario.duration_ns as f64)
}

/// tailguard's bytes over fifo's for one class alone, for each seed.
fn ratios(model: &str, pattern: &str) -> Vec<f64> {
    let scenario = scenario(model, &job("alone", 100, pattern, "0"));
    SEEDS
        .iter()
        .map(|&seed| {
            let ours = bytes(&scenario, PolicyName::Tailguard, seed, &["alone"]);
            let fifo = bytes(&scenario, PolicyName::Fifo, seed, &["alone"]);
            ours[0] / fifo[0]
        })
        .collect()
}

fn check(cases: &[(&str, &str)]) {
    let mut failures = Vec::new();
    for &(model, pattern) in cases {
        let ratios = ratios(model, pattern);
        println!("{model} {pattern}: tailguard / fifo = {ratios:.3?}");
        if let Some(worst) = ratios.iter().copied().reduce(f64::min) {
            if worst < 0.95 {
                failures.push(format!("{model} {pattern}: {worst:.3}"));
            }
        }
    }
    assert!(failures.is_empty(), "below 95% of fifo: {failures:?}");
}

#[test]
fn a_saturating_reader_alone_gets_the_whole_device() {
    check(&[
        ("nvme", "randread"),
        ("nvme", "seqread"),
        ("sata-ssd", "randread"),
        ("sata-ssd", "seqread"),
        ("hdd", "randread"),
        ("hdd", "seqread"),
        ("usb-flash", "randread"),
        ("usb-flash", "seqread"),
    ]);
}

#[test]
fn a_saturating_writer_alone_gets_the_whole_device() {
    check(&[
        ("nvme", "randwrite"),
        ("nvme", "seqwrite"),
        ("sata-ssd", "randwrite"),
        ("sata-ssd", "seqwrite"),
        ("hdd", "randwrite"),
        ("hdd", "seqwrite"),
        ("usb-flash", "randwrite"),
        ("usb-flash", "seqwrite"),
    ]);
}

/// The device's busy fraction under tailguard with two saturating classes
/// (shares 100 and 300, regions 16 GiB apart), and class b's part of it, for
/// each seed: each class's bytes over its pattern's bytes alone under fifo,
/// summed. Prints the device's busy time under both policies beside it (it
/// counts seeks as work, so it is not the criterion).
fn busy(model: &str, first: &str, second: &str) -> Vec<(f64, f64)> {
    let mix = scenario(
        model,
        &(job("a", 100, first, "0") + &job("b", 300, second, "16g")),
    );
    let alone = |pattern: &str, seed: u64| {
        let scenario = scenario(model, &job("a", 100, pattern, "0"));
        bytes(&scenario, PolicyName::Fifo, seed, &["a"])[0]
    };
    SEEDS
        .iter()
        .map(|&seed| {
            let (ours, time_busy) = measure(&mix, PolicyName::Tailguard, seed, &["a", "b"]);
            let fifo_time_busy = measure(&mix, PolicyName::Fifo, seed, &[]).1;
            println!("  seed {seed}: device busy time tailguard {time_busy:.3}, fifo {fifo_time_busy:.3}");
            let a = ours[0] / alone(first, seed);
            let b = ours[1] / alone(second, seed);
            (a + b, b / (a + b))
        })
        .collect()
}

/// Two saturating classes keep the device at least 90% busy and split it by
/// their shares: where both run the same pattern, b's part is within 0.1 of
/// 0.75 (fifo splits 0.5). Where they differ, the part is measured against
/// each pattern's rate alone, which weighs device time only as well as the
/// profile's costs do, so only the busy fraction is checked, except on the
/// hdd, whose classes are charged at the pace the disk serves them
/// (`tailguard_core::pace`): there shares split the disk's own time.
#[test]
fn two_saturating_classes_keep_the_device_busy_and_split_it_by_shares() {
    let mut failures = Vec::new();
    for (model, first, second) in [
        ("nvme", "randread", "randread"),
        ("nvme", "randread", "seqwrite"),
        ("nvme", "randread", "randwrite"),
        ("nvme", "seqwrite", "seqwrite"),
        ("nvme", "seqread", "seqwrite"),
        ("sata-ssd", "randread", "randread"),
        ("sata-ssd", "randread", "seqwrite"),
        ("sata-ssd", "randread", "randwrite"),
        ("sata-ssd", "seqread", "seqwrite"),
        ("sata-ssd", "seqwrite", "seqwrite"),
        ("hdd", "randread", "randread"),
        ("hdd", "randread", "seqwrite"),
        ("hdd", "randread", "randwrite"),
        ("hdd", "seqwrite", "seqwrite"),
        ("hdd", "seqread", "seqwrite"),
        ("usb-flash", "randread", "randread"),
        ("usb-flash", "seqwrite", "seqwrite"),
    ] {
        let results = busy(model, first, second);
        println!("{model} {first}+{second}: (busy, b's part) = {results:.3?}");
        for (busy, part) in results {
            let split_checked = first == second || model == "hdd";
            if busy < 0.9 || (split_checked && (part - 0.75).abs() > 0.1) {
                failures.push(format!("{model} {first}+{second}: {busy:.3} b {part:.2}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "below 90% busy or off the shares: {failures:?}"
    );
}

/// Three saturating classes of one pattern (shares 100, 200 and 400, regions
/// 16 GiB apart) keep the device at least 90% busy and split it by their
/// shares, each class's part within 0.05 of its share. On the hdd the
/// slices serve one region at a time in turns by shares, and each class is
/// charged at its pace (`tailguard_core::pace`), so a turn of random reads
/// that the disk reorders three times faster than the cost model charges
/// lasts its part of the disk's time rather than a third of it.
#[test]
fn three_saturating_classes_split_the_device_by_their_shares() {
    const SHARES: [u32; 3] = [100, 200, 400];
    let mut failures = Vec::new();
    for (model, pattern) in [
        ("nvme", "randread"),
        ("nvme", "seqwrite"),
        ("sata-ssd", "randread"),
        ("sata-ssd", "seqwrite"),
        ("hdd", "randread"),
        ("hdd", "seqwrite"),
        ("usb-flash", "randread"),
        ("usb-flash", "seqwrite"),
    ] {
        let jobs: String = ["a", "b", "c"]
            .iter()
            .zip(SHARES)
            .enumerate()
            .map(|(index, (name, shares))| job(name, shares, pattern, &format!("{}g", 16 * index)))
            .collect();
        let mix = scenario(model, &jobs);
        let alone = scenario(model, &job("a", 100, pattern, "0"));
        for seed in SEEDS {
            let rate_alone = bytes(&alone, PolicyName::Fifo, seed, &["a"])[0];
            let busy_of = |policy| -> (f64, Vec<f64>) {
                let parts: Vec<f64> = bytes(&mix, policy, seed, &["a", "b", "c"])
                    .iter()
                    .map(|bytes| bytes / rate_alone)
                    .collect();
                (parts.iter().sum(), parts)
            };
            let (busy, parts) = busy_of(PolicyName::Tailguard);
            let floor = 0.9;
            let total_shares: u32 = SHARES.iter().sum();
            let off_shares = parts.iter().zip(SHARES).any(|(part, shares)| {
                (part / busy - f64::from(shares) / f64::from(total_shares)).abs() > 0.05
            });
            println!("{model} {pattern} seed {seed}: busy {busy:.3} (floor {floor:.3}), parts {parts:.3?}");
            if busy < floor || off_shares {
                failures.push(format!(
                    "{model} {pattern} seed {seed}: {busy:.3} {parts:.3?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "not busy or off the shares: {failures:?}"
    );
}
