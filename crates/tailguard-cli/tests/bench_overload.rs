//! `tailguard bench` under a load the device cannot serve: open-loop readers
//! asking far more than the disk gives, beside a closed-loop writer. The run
//! ends normally, its memory stays bounded (the child's peak resident set,
//! from `getrusage`), and the JSON reports the overload with every arrival
//! accounted for (served or dropped).
//!
//! One test per file: `RUSAGE_CHILDREN` covers every child this process ran.

use std::path::Path;

mod common;
use common::{json_stdout, scratch_dir, tailguard_ok};

/// Far above the bound the run needs (a few thousand 4 KiB buffers and the
/// binary itself), far below what holding every arrival takes (200,000 of
/// them hold 800 MB of buffers alone).
const PEAK_RSS_BYTES_MAX: u64 = 256 << 20;

const OVERLOAD: &str = r#"
duration_s = 0.5
seed = 3
[[class]]
name = "reads"
shares = 100
[[class]]
name = "writes"
shares = 100
[[job]]
name = "readers"
class = "reads"
pattern = "randread"
block_size = "4k"
rate_iops = 400000.0
size = "16m"
[[job]]
name = "writer"
class = "writes"
pattern = "seqwrite"
block_size = "128k"
queue_depth = 2
size = "16m"
"#;

/// The largest resident set of any child this process has waited for.
fn children_peak_rss_bytes() -> u64 {
    // SAFETY: `getrusage` writes into the zeroed struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        usage
    };
    usage.ru_maxrss as u64 * 1024
}

fn remove(directory: &Path) {
    let _ = std::fs::remove_dir_all(directory);
    let _ = std::fs::remove_file(directory.with_extension("toml"));
}

#[test]
fn open_loop_overload_is_reported_and_memory_stays_bounded() {
    let directory = scratch_dir("bench-overload", "open-loop");
    let job = directory.with_extension("toml");
    std::fs::write(&job, OVERLOAD).unwrap();
    let output = tailguard_ok(&[
        "bench",
        job.to_str().unwrap(),
        "--target",
        directory.to_str().unwrap(),
        "--mode",
        "kernel-direct",
        "--json",
    ]);
    let peak = children_peak_rss_bytes();
    remove(&directory);
    assert!(
        peak < PEAK_RSS_BYTES_MAX,
        "bench's peak resident set was {peak} bytes"
    );
    let runs = json_stdout(&output);
    let run = &runs[0];
    let Some(readers) = run["overload"]
        .as_array()
        .and_then(|overload| overload.iter().find(|entry| entry["job"] == "readers"))
    else {
        // A device (and driver) fast enough to serve every arrival: the
        // memory bound above is all there is to check.
        eprintln!("skipping the overload checks: this device served every arrival");
        return;
    };
    let reads = run["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|class| class["name"] == "reads")
        .unwrap();
    let arrivals = readers["arrivals"].as_u64().unwrap();
    let dropped = readers["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "{readers}");
    assert_eq!(
        arrivals,
        reads["ops"].as_u64().unwrap() + dropped,
        "{readers}"
    );
    assert_eq!(readers["asked_iops"].as_f64(), Some(400_000.0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("overload: job `readers`"), "{stderr}");
}
