//! The quiet-reads rule in the simulator: the `tailguard` policy with
//! `controller = "fixed"` deepens its budget while no one reads, as the
//! engine's fixed budget does, and `quiet_reads = false` keeps one budget.
//!
//! Each case runs one scenario twice, the rule on and off, over several
//! seeds where something in it is random. A writer alone on a device nobody
//! calibrated (`profile = "none"`, as the engine runs without a profile) must
//! move more bytes with the rule (on `nvme` over every seed, since its garbage
//! collection stalls are drawn; on `sata-ssd` once, since a lone sequential
//! writer there draws nothing and every seed gives the same run);
//! while readers come and go, the rule must cost the readers none of their
//! requests; and the adaptive controller, which grows its budget itself,
//! must not take the rule at all (identical runs).

use tailguard_sim::policy::PolicyName;
use tailguard_sim::report::RunReport;
use tailguard_sim::scenario::Scenario;

const SEEDS: [u64; 3] = [1, 2, 3];

/// A writer keeping 4 × 1 MiB queued on `model`, and, with `reader_periods`,
/// 16 closed-loop 4 KiB readers that run 0.25 s and pause 0.25 s that many
/// times.
fn scenario(model: &str, controller: &str, quiet_reads: bool, reader_periods: u32) -> Scenario {
    let mut text = format!(
        r#"
duration_s = 1.0
[[device]]
name = "dev"
model = "{model}"
[policy.tailguard]
controller = "{controller}"
profile = "none"
quiet_reads = {quiet_reads}
[[class]]
name = "writes"
shares = 100
[[job]]
name = "writer"
class = "writes"
device = "dev"
pattern = "seqwrite"
block_size = "1m"
queue_depth = 4
size = "16g"
offset = "16g"
[[class]]
name = "reads"
shares = 400
"#
    );
    for period in 0..reader_periods {
        let start_s = f64::from(period) * 0.5;
        text += &format!(
            r#"
[[job]]
name = "readers{period}"
class = "reads"
device = "dev"
pattern = "randread"
block_size = "4k"
queue_depth = 1
numjobs = 16
size = "1g"
start_s = {start_s}
stop_s = {stop_s}
"#,
            stop_s = start_s + 0.25
        );
    }
    Scenario::from_toml(&text).unwrap()
}

fn run(scenario: &Scenario, seed: u64) -> RunReport {
    tailguard_sim::engine::run(scenario, PolicyName::Tailguard, seed).unwrap()
}

fn bytes(report: &RunReport, class: &str) -> u64 {
    report.class(class, "dev").map_or(0, |row| row.bytes)
}

#[test]
fn a_lone_writer_streams_faster_with_the_rule() {
    // sata-ssd: deterministic (see the module docs), so one seed.
    for (model, seeds) in [("nvme", &SEEDS[..]), ("sata-ssd", &SEEDS[..1])] {
        for &seed in seeds {
            let on = bytes(&run(&scenario(model, "fixed", true, 0), seed), "writes");
            let off = bytes(&run(&scenario(model, "fixed", false, 0), seed), "writes");
            println!("{model} seed {seed}: writes with the rule {on} B, without {off} B");
            assert!(
                on > off,
                "{model} seed {seed}: the rule did not deepen the budget ({on} B against {off} B)"
            );
        }
    }
}

#[test]
fn readers_that_come_and_go_lose_no_requests_to_the_rule() {
    for model in ["nvme", "sata-ssd"] {
        for seed in SEEDS {
            let on = run(&scenario(model, "fixed", true, 2), seed);
            let off = run(&scenario(model, "fixed", false, 2), seed);
            let (reads_on, reads_off) = (bytes(&on, "reads"), bytes(&off, "reads"));
            let (writes_on, writes_off) = (bytes(&on, "writes"), bytes(&off, "writes"));
            println!(
                "{model} seed {seed}: reads {reads_on} B against {reads_off} B, \
                 writes {writes_on} B against {writes_off} B"
            );
            // Closed-loop readers complete a request per round trip: the
            // rule may delay the first reads after a pause, by at most a few
            // budgets, which over a quarter second is well under 2%.
            assert!(
                reads_on as f64 >= 0.98 * reads_off as f64,
                "{model} seed {seed}: the readers lost requests to the rule"
            );
            assert!(
                writes_on >= writes_off,
                "{model} seed {seed}: the writer lost bytes to the rule"
            );
        }
    }
}

#[test]
fn the_adaptive_controller_ignores_the_rule() {
    for seed in SEEDS {
        let on = run(&scenario("nvme", "adaptive", true, 2), seed);
        let off = run(&scenario("nvme", "adaptive", false, 2), seed);
        assert_eq!(
            (bytes(&on, "reads"), bytes(&on, "writes")),
            (bytes(&off, "reads"), bytes(&off, "writes")),
            "seed {seed}: the adaptive controller took the rule"
        );
    }
}
