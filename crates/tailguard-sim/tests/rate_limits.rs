//! Per-class caps in the simulator: a capped background writer beside
//! uncapped random reads on the `sata-ssd` model, under the `tailguard`
//! policy.
//!
//! - A cap in bytes/s, and one in requests/s, each hold the writer within 5%
//!   of the cap over the run, although the device could give it far more.
//! - The reads take what the cap leaves: with the capped writer beside them
//!   they move at least 90% of what they move alone (the writer's cap is a
//!   few percent of the device), and far more than beside the same writer
//!   uncapped. So the device does not idle while the writer waits for tokens.

use tailguard_sim::engine::run;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::report::RunReport;
use tailguard_sim::scenario::Scenario;

const DURATION_S: f64 = 2.0;

/// The scenario with `writer_cap` (TOML lines for the writer's class, or
/// `None` for no writer job at all).
fn scenario(writer_cap: Option<&str>) -> Scenario {
    let writer = match writer_cap {
        Some(cap) => format!(
            r#"
[[class]]
name = "background"
shares = 100
{cap}
[[job]]
class = "background"
device = "disk"
pattern = "seqwrite"
block_size = "128k"
queue_depth = 8
"#
        ),
        None => String::new(),
    };
    Scenario::from_toml(&format!(
        r#"
duration_s = {DURATION_S}
[[device]]
name = "disk"
model = "sata-ssd"
[[class]]
name = "reads"
shares = 100
[[job]]
class = "reads"
device = "disk"
pattern = "randread"
block_size = "4k"
queue_depth = 16
{writer}
"#
    ))
    .unwrap()
}

fn report(writer_cap: Option<&str>) -> RunReport {
    run(&scenario(writer_cap), PolicyName::Tailguard, 1).unwrap()
}

/// (ops, bytes) of the class named `name`.
fn moved(report: &RunReport, name: &str) -> (u64, u64) {
    let row = report
        .classes
        .iter()
        .find(|row| row.name == name)
        .unwrap_or_else(|| panic!("no row for {name}"));
    (row.ops, row.bytes)
}

fn assert_within_5_percent(measured: f64, cap: f64, what: &str) {
    let ratio = measured / cap;
    assert!(
        (0.95..=1.05).contains(&ratio),
        "{what}: {measured:.0} against a cap of {cap:.0} ({ratio:.3})"
    );
}

#[test]
fn a_byte_cap_holds_the_writer_and_the_reads_take_the_rest() {
    let alone = moved(&report(None), "reads").0;
    let uncapped = report(Some(""));
    let capped = report(Some("limit_bytes_per_s = \"20m\""));
    let (_, writer_bytes) = moved(&capped, "background");
    assert_within_5_percent(
        writer_bytes as f64 / DURATION_S,
        20.0 * 1_048_576.0,
        "writer bytes/s",
    );
    let (uncapped_writer_ops, uncapped_writer_bytes) = moved(&uncapped, "background");
    assert!(
        uncapped_writer_bytes > 4 * writer_bytes,
        "uncapped, the writer would move far more: {uncapped_writer_bytes} ({uncapped_writer_ops} ops)"
    );
    let reads_capped = moved(&capped, "reads").0;
    let reads_uncapped = moved(&uncapped, "reads").0;
    assert!(
        reads_capped as f64 >= 0.9 * alone as f64,
        "reads beside the capped writer: {reads_capped}, alone: {alone}"
    );
    assert!(
        reads_capped as f64 > 1.2 * reads_uncapped as f64,
        "reads beside the capped writer: {reads_capped}, beside it uncapped: {reads_uncapped}"
    );
}

#[test]
fn an_iops_cap_holds_the_writer_and_the_reads_take_the_rest() {
    let alone = moved(&report(None), "reads").0;
    let capped = report(Some("limit_iops = 150"));
    let (writer_ops, _) = moved(&capped, "background");
    assert_within_5_percent(writer_ops as f64 / DURATION_S, 150.0, "writer requests/s");
    let reads_capped = moved(&capped, "reads").0;
    assert!(
        reads_capped as f64 >= 0.9 * alone as f64,
        "reads beside the capped writer: {reads_capped}, alone: {alone}"
    );
}

#[test]
fn only_capped_work_queued_still_moves_at_the_cap() {
    // No other class: nothing but the cap's own wake-ups drives the writer.
    let scenario = Scenario::from_toml(&format!(
        r#"
duration_s = {DURATION_S}
[[device]]
name = "disk"
model = "sata-ssd"
[[class]]
name = "background"
shares = 100
limit_bytes_per_s = "8m"
limit_iops = 1000
[[job]]
class = "background"
device = "disk"
pattern = "randwrite"
block_size = "64k"
queue_depth = 4
"#
    ))
    .unwrap();
    let report = run(&scenario, PolicyName::Tailguard, 3).unwrap();
    let (_, bytes) = moved(&report, "background");
    assert_within_5_percent(bytes as f64 / DURATION_S, 8.0 * 1_048_576.0, "bytes/s");
}
