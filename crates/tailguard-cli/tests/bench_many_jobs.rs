//! `tailguard bench` on a fio file of 2,000 one-line jobs, in the scheduler
//! and straight to the kernel: every job runs and reports, and the run's
//! memory stays in tens of megabytes (the child's peak resident set, from
//! `getrusage`), because a job's latency histograms hold its few hundred
//! times, not counts for their whole range.
//!
//! One test per file: `RUSAGE_CHILDREN` covers every child this process ran.

mod common;
use common::{json_stdout, scratch_with_file, tailguard_ok};

/// The jobs.
const JOBS: usize = 2000;

/// Far above what the run needs (the binary, the parsed jobs, a 4 KiB
/// buffer and a few KiB of statistics per job), far below what histograms
/// holding counts for their range from a job's first request would take
/// (hundreds of kilobytes a job: half a gigabyte and more for these jobs).
const PEAK_RSS_BYTES_MAX: u64 = 160 << 20;

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

#[test]
fn two_thousand_one_line_jobs_run_in_tens_of_megabytes() {
    let (directory, fio) = scratch_with_file("bench-many-jobs", "fio", "fio");
    let data = directory.join("data");
    std::fs::write(&data, vec![0u8; 1 << 20]).unwrap();
    let mut text = format!(
        "[global]\nruntime=300ms\ntime_based\nfilename={}\nbs=4k\nsize=1m\nrw=randread\n",
        data.display()
    );
    for job in 0..JOBS {
        text += &format!("[j{job}]\n");
    }
    std::fs::write(&fio, text).unwrap();
    let output = tailguard_ok(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--mode",
        "tailguard,kernel-direct",
        "--json",
    ]);
    let peak = children_peak_rss_bytes();
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_file(&fio);
    let runs = json_stdout(&output);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        let classes = run["classes"].as_array().unwrap();
        assert_eq!(classes.len(), JOBS, "{}", run["policy"]);
        let ops: u64 = classes
            .iter()
            .map(|class| class["ops"].as_u64().unwrap())
            .sum();
        assert!(ops >= JOBS as u64, "{}: {ops} requests", run["policy"]);
    }
    assert!(
        peak < PEAK_RSS_BYTES_MAX,
        "bench's peak resident set was {peak} bytes for {JOBS} jobs"
    );
}
