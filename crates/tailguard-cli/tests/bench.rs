//! `tailguard bench` end to end: job file errors, a tiny real run with JSON
//! (the driver's lateness, and the scheduler's own statistics in tailguard
//! mode with either `--driver`), and cleanup of the data files after a run and
//! after Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    any_block_device, assert_empty, class_names, entries, interrupt_and_wait, json_stdout,
    run_policies, tailguard, tailguard_ok, TINY_JOB,
};

/// A fresh, empty directory for a bench test.
fn scratch_dir(name: &str) -> PathBuf {
    common::scratch_dir("bench", name)
}

fn write_job(directory: &Path, text: &str) -> PathBuf {
    // The job file lives beside, not inside, the target directory.
    let path = directory.with_extension("toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the job file at `path` against `directory` with `extra` arguments and
/// asserts it succeeded.
fn bench_ok(path: &Path, directory: &Path, extra: &[&str]) -> Output {
    let mut arguments = vec![
        "bench",
        path.to_str().unwrap(),
        "--target",
        directory.to_str().unwrap(),
    ];
    arguments.extend_from_slice(extra);
    tailguard_ok(&arguments)
}

/// Removes a scratch directory and its job file once a test has checked it.
fn remove(directory: &Path) {
    common::remove_scratch(directory, &directory.with_extension("toml"));
}

fn failure(job: &str, extra: &[&str]) -> String {
    let directory = scratch_dir("bad");
    let path = write_job(&directory, job);
    let mut arguments = vec!["bench", path.to_str().unwrap()];
    arguments.extend_from_slice(extra);
    if !extra.contains(&"--target") {
        arguments.extend_from_slice(&["--target", directory.to_str().unwrap()]);
    }
    let output = tailguard(&arguments);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_empty(&directory);
    remove(&directory);
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn job_file_errors_name_the_key_and_the_fix() {
    let error = failure(
        &TINY_JOB.replace("numjobs = 2", "numjobs = 2\ncolour = 1"),
        &[],
    );
    assert!(
        error.contains("job[0].colour") && error.contains("block_size"),
        "{error}"
    );

    let error = failure(&TINY_JOB.replace("size = \"2m\"", ""), &[]);
    assert!(
        error.contains("job[1].size") && error.contains("size = "),
        "{error}"
    );

    let error = failure(
        &format!("{TINY_JOB}[[device]]\nname = \"d\"\nmodel = \"nvme\"\n"),
        &[],
    );
    assert!(error.contains("target = "), "{error}");

    let error = failure(&TINY_JOB.replace("shares = 50", "shares = 0"), &[]);
    assert!(error.contains("class[1].shares"), "{error}");

    let error = failure(
        &TINY_JOB.replace("class = \"background\"", "class = \"bulk\""),
        &[],
    );
    assert!(
        error.contains("job[1].class") && error.contains("background"),
        "{error}"
    );

    let error = failure(TINY_JOB, &["--mode", "fifo"]);
    assert!(error.contains("kernel-direct"), "{error}");
}

#[test]
fn a_missing_or_unusable_target_is_refused_clearly() {
    let error = failure(TINY_JOB, &["--target", "/nonexistent/tailguard-bench"]);
    assert!(error.contains("/nonexistent/tailguard-bench"), "{error}");

    // No target at all: the file has none and --target is absent.
    let directory = scratch_dir("notarget");
    let path = write_job(&directory, TINY_JOB);
    let output = tailguard(&["bench", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--target"));
    remove(&directory);

    // A tmpfs refuses O_DIRECT on kernels before 6.6 (newer ones take it).
    let shm = Path::new("/dev/shm");
    let probe = shm.join(format!("tailguard-bench-probe-{}", std::process::id()));
    let refused = {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe);
        let _ = std::fs::remove_file(&probe);
        matches!(opened, Err(error) if error.raw_os_error() == Some(libc::EINVAL))
    };
    if refused {
        let target = shm.join(format!("tailguard-bench-{}", std::process::id()));
        std::fs::create_dir_all(&target).unwrap();
        let error = failure(TINY_JOB, &["--target", target.to_str().unwrap()]);
        let left = entries(&target);
        let _ = std::fs::remove_dir_all(&target);
        assert!(left.is_empty(), "{left:?}");
        assert!(error.contains("O_DIRECT"), "{error}");
    } else {
        eprintln!("skipped the O_DIRECT refusal check: /dev/shm takes O_DIRECT here");
    }

    // Block devices need --allow-device.
    match any_block_device() {
        Some(device) => {
            let error = failure(TINY_JOB, &["--target", device.to_str().unwrap()]);
            assert!(error.contains("--allow-device"), "{error}");
        }
        None => eprintln!("skipped the block-device check: no block device in /dev"),
    }
}

#[test]
fn a_tiny_run_reports_every_class_per_mode_in_json_and_cleans_up() {
    let directory = scratch_dir("run");
    let path = write_job(&directory, TINY_JOB);
    let output = bench_ok(
        &path,
        &directory,
        &["--mode", "tailguard,kernel-direct", "--json"],
    );
    let runs = json_stdout(&output);
    let runs = runs.as_array().expect("an array of runs");
    assert_eq!(run_policies(runs), ["tailguard", "kernel-direct"]);
    for run in runs {
        assert_eq!(run["seed"], 5);
        assert_eq!(run["duration_s"], 0.3);
        let classes = run["classes"].as_array().unwrap();
        assert_eq!(class_names(run), ["reads", "background"]);
        for class in classes {
            for key in [
                "device",
                "ops",
                "bytes",
                "iops",
                "mb_per_s",
                "start_lateness_us_max",
                "start_lateness_us_mean",
                "submit_to_completion_us_mean",
                "submitted",
                "outstanding",
                "first_submit_s",
                "last_completion_s",
            ] {
                assert!(!class[key].is_null(), "{key} missing in {class}");
            }
            for key in ["p50", "p99", "p999", "max"] {
                assert!(class["latency_us"][key].as_f64().unwrap() > 0.0, "{class}");
            }
            assert!(class["ops"].as_u64().unwrap() > 0, "{class}");
            assert_eq!(class["outstanding"], 0);
            // The simulator's names meant the scheduler's queue: not here.
            assert!(class.get("queue_wait_us_max").is_none(), "{class}");
            check_scheduler_statistics(class, run["policy"] == "tailguard");
        }
    }
    assert_empty(&directory);
    remove(&directory);
}

/// Asserts a class carries the scheduler's own statistics in tailguard mode
/// (as many requests as the driver counted, every time split filled in) and
/// `null` in a kernel mode.
fn check_scheduler_statistics(class: &serde_json::Value, tailguard: bool) {
    let scheduler = &class["scheduler"];
    if !tailguard {
        assert!(scheduler.is_null(), "{class}");
        return;
    }
    assert_eq!(scheduler["ops"], class["ops"], "{class}");
    assert_eq!(scheduler["errors"], 0, "{class}");
    for split in ["queue_wait_us", "device_time_us", "latency_us"] {
        for key in ["mean", "p50", "p99", "p999", "max"] {
            assert!(
                scheduler[split][key].as_f64().is_some(),
                "{split}.{key}: {class}"
            );
        }
    }
    for split in ["device_time_us", "latency_us"] {
        assert!(scheduler[split]["p50"].as_f64().unwrap() > 0.0, "{class}");
    }
    let latency_max = scheduler["latency_us"]["max"].as_f64().unwrap();
    assert!(scheduler["queue_wait_us"]["max"].as_f64().unwrap() <= latency_max);
}

#[test]
fn tailguard_mode_runs_with_either_driver() {
    // `block-on` (the default) runs the engine on the driver thread, with an
    // alarm for the open-loop readers' arrivals; `engine-thread` leaves it to
    // the engine thread. Both complete every request.
    let directory = scratch_dir("drivers");
    let path = write_job(&directory, TINY_JOB);
    for driver in ["block-on", "engine-thread"] {
        let output = bench_ok(
            &path,
            &directory,
            &["--mode", "tailguard", "--driver", driver, "--json"],
        );
        let runs = json_stdout(&output);
        let run = &runs[0];
        assert_eq!(class_names(run), ["reads", "background"], "{driver}");
        for class in run["classes"].as_array().unwrap() {
            assert!(class["ops"].as_u64().unwrap() > 0, "{driver}: {class}");
            assert_eq!(class["outstanding"], 0, "{driver}: {class}");
            assert_eq!(class["submitted"], class["ops"], "{driver}: {class}");
            check_scheduler_statistics(class, true);
        }
    }
    let refused = tailguard(&[
        "bench",
        path.to_str().unwrap(),
        "--target",
        directory.to_str().unwrap(),
        "--driver",
        "tokio",
    ]);
    let stderr = common::refused(&refused);
    assert!(
        stderr.contains("block-on") && stderr.contains("engine-thread"),
        "{stderr}"
    );
    assert_empty(&directory);
    remove(&directory);
}

#[test]
fn ctrl_c_mid_run_removes_the_data_files_and_fails() {
    // kernel-direct, and tailguard, whose block-on driver sleeps in the ring
    // and must still see the interrupt.
    for mode in ["kernel-direct", "tailguard"] {
        let directory = scratch_dir("interrupt");
        let path = write_job(
            &directory,
            &TINY_JOB.replace("duration_s = 0.3", "duration_s = 30"),
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_tailguard"))
            .args([
                "bench",
                path.to_str().unwrap(),
                "--target",
                directory.to_str().unwrap(),
                "--mode",
                mode,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while entries(&directory).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            entries(&directory).len(),
            2,
            "{mode}: the data files were laid out"
        );
        std::thread::sleep(Duration::from_millis(300));
        let status = interrupt_and_wait(&mut child, Duration::from_secs(10), "bench");
        assert!(!status.success(), "{mode}: {status:?}");
        assert_eq!(status.code(), Some(130), "{mode}");
        assert_empty(&directory);
        remove(&directory);
    }
}

/// Asserts the per-class detail of a JSON class object agrees with its totals.
fn check_class_detail(class: &serde_json::Value, duration_s: f64) {
    let ops = class["ops"].as_u64().unwrap();
    let latency_max = class["latency_us"]["max"].as_f64().unwrap();
    // Timeline: consecutive seconds from 0, completions adding up to ops.
    let timeline = class["timeline"].as_array().expect("a timeline");
    assert!(!timeline.is_empty(), "{class}");
    for (index, point) in timeline.iter().enumerate() {
        assert_eq!(point["second"].as_u64(), Some(index as u64), "{class}");
        let latency = point["latency_us_max"].as_f64().unwrap();
        assert!(
            latency >= 0.0 && latency <= latency_max + 0.001,
            "{point} vs {class}"
        );
        assert!(point["mb_per_s"].as_f64().unwrap() >= 0.0);
    }
    let completed: f64 = timeline
        .iter()
        .map(|point| point["iops"].as_f64().unwrap())
        .sum();
    assert_eq!(completed as u64, ops, "timeline completions vs ops");
    let busiest = timeline
        .iter()
        .map(|point| point["latency_us_max"].as_f64().unwrap())
        .fold(0.0, f64::max);
    // The table's max is the histogram's (three significant digits).
    assert!(
        (busiest - latency_max).abs() <= latency_max * 0.002,
        "the slowest second holds the max: {busiest} vs {latency_max}"
    );
    // Worst 0.5 s: a real rate no higher than all ops in one window would give.
    let worst = class["worst_500ms_iops"].as_f64().expect("a worst rate");
    assert!(worst >= 0.0 && worst * 0.5 <= ops as f64, "{class}");
    assert!(duration_s >= 0.5);
    // Histogram: contiguous power-of-two buckets whose counts add up to ops.
    let buckets = class["latency_log2_us"].as_array().unwrap();
    let counted: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, ops);
    for pair in buckets.windows(2) {
        assert_eq!(
            pair[1]["from_us"].as_u64().unwrap(),
            pair[0]["to_us"].as_u64().unwrap() + 1
        );
    }
    let last = buckets.last().unwrap();
    assert!(last["count"].as_u64().unwrap() > 0);
    assert!(latency_max <= (last["to_us"].as_u64().unwrap() + 1) as f64);
    // Percentile curve: rising, ending at the max, agreeing with p99.
    let curve = class["latency_curve_us"].as_array().unwrap();
    let values: Vec<f64> = curve
        .iter()
        .map(|point| point["latency_us"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] <= pair[1]),
        "{values:?}"
    );
    assert!((values.last().unwrap() - latency_max).abs() <= 0.001);
    let p99 = curve
        .iter()
        .find(|point| point["percentile"].as_f64() == Some(99.0))
        .unwrap();
    assert_eq!(p99["latency_us"], class["latency_us"]["p99"]);
    let p9999 = class["latency_us"]["p9999"].as_f64().unwrap();
    assert!(p9999 >= class["latency_us"]["p999"].as_f64().unwrap() && p9999 <= latency_max);
}

#[test]
fn json_carries_timeline_histogram_and_worst_rate_and_the_report_is_one_html_page() {
    let directory = scratch_dir("detail");
    let path = write_job(
        &directory,
        &TINY_JOB.replace("duration_s = 0.3", "duration_s = 1.2"),
    );
    let report = directory.with_extension("html");
    let output = bench_ok(
        &path,
        &directory,
        &[
            "--mode",
            "kernel-direct,tailguard",
            "--json",
            "--report",
            report.to_str().unwrap(),
        ],
    );
    // Not a terminal: one plain line per run, no bar, no control characters.
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert!(
        stderr.contains("run 1/2") && stderr.contains("run 2/2"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\r'),
        "{stderr:?}"
    );
    let runs = json_stdout(&output);
    for run in runs.as_array().unwrap() {
        for class in run["classes"].as_array().unwrap() {
            check_class_detail(class, 1.2);
        }
    }
    let page = std::fs::read_to_string(&report).unwrap();
    let _ = std::fs::remove_file(&report);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.trim_end().ends_with("</html>"));
    // Three charts for each of the two classes, every one closed.
    assert_eq!(
        page.matches("<svg xmlns=\"http://www.w3.org/2000/svg\"")
            .count(),
        6
    );
    assert_eq!(page.matches("</svg>").count(), 6);
    for external in ["<script", "<link", "src=\"http", "@import"] {
        assert!(!page.contains(external), "{external}");
    }
    assert!(page.contains("kernel-direct") && page.contains("reads@"));
    assert_empty(&directory);
    remove(&directory);
}

#[test]
fn the_terminal_output_has_the_table_histograms_and_timeline() {
    let directory = scratch_dir("terminal");
    let path = write_job(
        &directory,
        &TINY_JOB.replace("duration_s = 0.3", "duration_s = 1"),
    );
    let output = bench_ok(&path, &directory, &["--mode", "kernel-direct,tailguard"]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(!text.contains("wait max"), "{text}");
    for expected in [
        "worst0.5s",
        "p99.99",
        "late max",
        "wait p99",
        "dev p99",
        "the driver's lateness",
        "reads@",
        ": latency histogram (log2 µs)",
        "usecs",
        "per-second timeline",
        "max lat",
    ] {
        assert!(text.contains(expected), "{expected} missing:\n{text}");
    }
    // Every histogram row reads `from -> to : count |bar|` with from a power of two.
    let rows: Vec<&str> = text.lines().filter(|line| line.contains(" -> ")).collect();
    assert!(!rows.is_empty(), "{text}");
    for row in rows {
        let from: u64 = row.split_whitespace().next().unwrap().parse().unwrap();
        assert!(from == 0 || from.is_power_of_two(), "{row}");
        assert!(row.ends_with('|'), "{row}");
    }
    remove(&directory);
}
