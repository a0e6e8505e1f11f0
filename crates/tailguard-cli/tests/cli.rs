//! The `tailguard` binary end to end: JSON contract, bad input, exit codes.

use std::path::{Path, PathBuf};

mod common;
use common::{tailguard, tailguard_ok};

/// A file under cargo's scratch directory for tests (inside `target/`, so runs
/// leave nothing in the system's temporary directory).
fn scratch_file(name: &str, text: &str) -> PathBuf {
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tailguard-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const SMALL: &str = r#"
duration_s = 0.5
seed = 9
[[device]]
name = "disk"
model = "sata-ssd"
[[class]]
name = "reads"
shares = 100
[[class]]
name = "writes"
shares = 50
[[job]]
class = "reads"
device = "disk"
pattern = "randread"
block_size = "4k"
queue_depth = 4
[[job]]
class = "writes"
device = "disk"
pattern = "seqwrite"
block_size = "128k"
queue_depth = 4
"#;

#[test]
fn json_output_follows_the_documented_schema() {
    let path = scratch_file("small.toml", SMALL);
    let output = tailguard_ok(&[
        "sim",
        path.to_str().unwrap(),
        "--policy",
        "tailguard,fifo",
        "--json",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let runs = value.as_array().expect("an array for several policies");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["policy"], "tailguard");
    assert_eq!(runs[1]["policy"], "fifo");
    for run in runs {
        assert_eq!(run["seed"], 9);
        assert_eq!(run["duration_s"], 0.5);
        let classes = run["classes"].as_array().unwrap();
        assert_eq!(classes.len(), 2);
        for class in classes {
            for key in [
                "name",
                "device",
                "ops",
                "bytes",
                "iops",
                "mb_per_s",
                "queue_wait_us_max",
                "worst_500ms_iops",
            ] {
                assert!(class.get(key).is_some(), "missing {key} in {class}");
            }
            for key in ["p50", "p99", "p999", "p9999", "max"] {
                assert!(
                    class["latency_us"].get(key).is_some(),
                    "missing latency_us.{key}"
                );
            }
            assert!(class["ops"].as_u64().unwrap() > 0, "no progress: {class}");
            // One 0.5 s window: its rate is at most the run's (ops after the
            // window do not count in it) and positive since ops completed.
            let worst = class["worst_500ms_iops"].as_f64().unwrap();
            let iops = class["iops"].as_f64().unwrap();
            assert!(worst > 0.0 && worst <= iops + 1e-6, "{class}");
        }
    }
}

#[test]
fn one_policy_prints_one_object_and_the_seed_flag_overrides() {
    let path = scratch_file("small-seed.toml", SMALL);
    let output = tailguard(&["sim", path.to_str().unwrap(), "--seed", "77", "--json"]);
    assert!(output.status.success());
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["policy"], "tailguard");
    assert_eq!(value["seed"], 77);
}

#[test]
fn the_table_names_every_policy_and_class() {
    let path = scratch_file("small-table.toml", SMALL);
    let output = tailguard(&[
        "sim",
        path.to_str().unwrap(),
        "--policy",
        "deadline,tailguard",
    ]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "deadline",
        "tailguard",
        "reads@disk",
        "writes@disk",
        "p99.9",
        "seed 9",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

fn assert_fails_with(arguments: &[&str], needles: &[&str]) {
    let output = tailguard(arguments);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{arguments:?} should fail with status 2"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "missing {needle:?} in {stderr}");
    }
}

#[test]
fn bad_input_names_the_file_the_key_and_the_fix() {
    let bad_class = scratch_file(
        "bad-class.toml",
        &SMALL.replacen("class = \"reads\"", "class = \"raeds\"", 1),
    );
    let name = bad_class.to_str().unwrap();
    assert_fails_with(&["sim", name], &[name, "job[0].class", "raeds", "reads"]);

    let bad_model = scratch_file("bad-model.toml", &SMALL.replace("sata-ssd", "tape"));
    assert_fails_with(
        &["sim", bad_model.to_str().unwrap()],
        &["device[0].model", "nvme"],
    );

    let bad_syntax = scratch_file("bad-syntax.toml", "duration_s = [");
    assert_fails_with(
        &["sim", bad_syntax.to_str().unwrap()],
        &["bad-syntax.toml", "line 1"],
    );

    let missing = Path::new("/nonexistent/scenario.toml");
    assert_fails_with(
        &["sim", missing.to_str().unwrap()],
        &["cannot read", "scenario.toml"],
    );

    let path = scratch_file("small-policy.toml", SMALL);
    assert_fails_with(
        &["sim", path.to_str().unwrap(), "--policy", "noop"],
        &["noop", "cfq-fixed"],
    );
}
