//! fio job files as people write them, end to end through `tailguard bench
//! --fio`: size-bounded jobs move exactly their bytes in every mode,
//! stonewalled groups run and are reported one after another, jobs run on
//! their own files, and `--target` overrides every job's file.

use std::path::{Path, PathBuf};

mod common;
use common::{assert_empty, class_names, entries, json_stdout, remove_scratch, tailguard_ok};

/// A fresh scratch directory and the path of a fio file beside it.
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    common::scratch_with_file("fio-semantics", name, "fio")
}

/// Runs `text` as a fio file with `extra` arguments; returns the JSON runs
/// and the notes printed to stderr.
fn bench(fio: &Path, text: &str, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    std::fs::write(fio, text).unwrap();
    let mut arguments = vec!["bench", "--fio", fio.to_str().unwrap(), "--json"];
    arguments.extend_from_slice(extra);
    let output = tailguard_ok(&arguments);
    let runs = json_stdout(&output).as_array().unwrap().clone();
    (runs, String::from_utf8_lossy(&output.stderr).into_owned())
}

fn class_u64(run: &serde_json::Value, class: usize, field: &str) -> u64 {
    run["classes"][class][field].as_u64().unwrap()
}

#[test]
fn size_bounded_jobs_move_exactly_their_bytes_in_every_mode() {
    let (directory, fio) = scratch("bounded");
    let text = format!(
        "[global]\ndirectory={}\nbs=64k\ndirect=1\n\
         [seq]\nrw=read\nsize=1m\nnumjobs=2 ; each clone reads the whole size\n\
         [passes]\nrw=randwrite\nsize=512k\nloops=3\niodepth=4\n\
         [mixed]\nrw=randrw\nrwmixread=50\nsize=1m\nio_size=2m\n",
        directory.display()
    );
    let (runs, notes) = bench(&fio, &text, &[]);
    assert!(
        notes.contains("stops after 1048576 bytes per instance"),
        "{notes}"
    );
    assert_eq!(runs.len(), 3, "one run per mode");
    for run in &runs {
        assert_eq!(class_names(run), ["seq", "passes", "mixed"]);
        // 2 clones x 1 MiB, 3 passes x 512 KiB, 2 MiB of reads and writes.
        assert_eq!(class_u64(run, 0, "bytes"), 2 << 20, "{run}");
        assert_eq!(class_u64(run, 1, "bytes"), 3 * (512 << 10), "{run}");
        assert_eq!(class_u64(run, 2, "bytes"), 2 << 20, "{run}");
        for class in 0..3 {
            assert_eq!(class_u64(run, class, "outstanding"), 0, "{run}");
        }
        // The run ends when the bytes are done, far before the one-day cap.
        assert!(run["duration_s"].as_f64().unwrap() < 60.0, "{run}");
        assert!(run["classes"][0]["iops"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn stonewalled_groups_run_one_after_another_and_report_on_their_own() {
    let (directory, fio) = scratch("groups");
    let text = format!(
        "[global]\ndirectory={}\nbs=64k\nsize=512k\n\
         [first]\nrw=write\n[beside]\nrw=read\n\
         [second]\nstonewall\nrw=randread\n[third]\nwait_for=second\nrw=read\n",
        directory.display()
    );
    let (runs, _) = bench(&fio, &text, &["--mode", "kernel-direct,tailguard"]);
    let groups: Vec<(u64, Vec<&str>)> = runs
        .iter()
        .map(|run| (run["group"].as_u64().unwrap(), class_names(run)))
        .collect();
    assert_eq!(
        groups,
        [
            (0, vec!["first", "beside"]),
            (1, vec!["second"]),
            (2, vec!["third"]),
            (0, vec!["first", "beside"]),
            (1, vec!["second"]),
            (2, vec!["third"]),
        ]
    );
    for run in &runs {
        for class in 0..run["classes"].as_array().unwrap().len() {
            assert_eq!(class_u64(run, class, "bytes"), 512 << 10, "{run}");
        }
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn jobs_run_on_their_own_files_unless_target_overrides_them() {
    let (directory, fio) = scratch("targets");
    let (left, right) = (directory.join("left"), directory.join("right"));
    for side in [&left, &right] {
        std::fs::create_dir(side).unwrap();
        std::fs::write(side.join("data"), vec![9u8; 1 << 20]).unwrap();
    }
    let text = format!(
        "[global]\nbs=64k\nrw=read\n[l]\nfilename={}\n[r]\nfilename={}\n\
         [both]\nfilename={}:{}\nnrfiles=2\nrw=randread\n",
        left.join("data").display(),
        right.join("data").display(),
        left.join("data").display(),
        right.join("data").display(),
    );
    let (runs, notes) = bench(&fio, &text, &["--mode", "kernel-direct"]);
    assert!(notes.contains("both.f0: randread"), "{notes}");
    let run = &runs[0];
    // No size: each file's own 1 MiB; `both` reads its two files' 2 MiB (at
    // iodepth 1, all of it from its first file, keeping the job's depth).
    assert_eq!(class_u64(run, 0, "bytes"), 1 << 20, "{run}");
    assert_eq!(class_u64(run, 1, "bytes"), 1 << 20, "{run}");
    assert_eq!(class_u64(run, 2, "bytes"), 2 << 20, "{run}");
    assert_eq!(entries(&left), ["data"]);

    // --target: every job runs on the scratch directory given instead, in
    // data files laid out and removed there; the named files are untouched.
    let elsewhere = directory.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let text = format!(
        "[global]\nbs=64k\nrw=write\nsize=256k\n[l]\nfilename={}\n[r]\nfilename={}\n",
        left.join("data").display(),
        right.join("data").display(),
    );
    let (runs, _) = bench(
        &fio,
        &text,
        &[
            "--mode",
            "kernel-direct",
            "--target",
            elsewhere.to_str().unwrap(),
        ],
    );
    assert_eq!(class_u64(&runs[0], 0, "bytes"), 256 << 10);
    assert_empty(&elsewhere);
    for side in [&left, &right] {
        assert_eq!(
            std::fs::read(side.join("data")).unwrap(),
            vec![9u8; 1 << 20]
        );
    }
    remove_scratch(&directory, &fio);
}

#[test]
fn a_missing_filename_becomes_a_data_file_beside_it() {
    let (directory, fio) = scratch("missing");
    let text = format!(
        "[w]\nfilename={}\nrw=write\nbs=64k\nsize=256k\n",
        directory.join("new.dat").display()
    );
    let (runs, notes) = bench(&fio, &text, &["--mode", "kernel-direct"]);
    assert!(notes.contains("does not exist yet"), "{notes}");
    assert_eq!(class_u64(&runs[0], 0, "bytes"), 256 << 10);
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn fio_json_output_reads_with_fios_own_field_names() {
    let (directory, fio) = scratch("fiojson");
    let text = format!(
        "[global]\ndirectory={}\nsize=512k\n[reader]\nrw=randread\nbs=4k\niodepth=4\n\
         [mixer]\nstonewall\nrw=rw\nbs=64k\n",
        directory.display()
    );
    std::fs::write(&fio, text).unwrap();
    let output = tailguard_ok(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--mode",
        "kernel-direct",
        "--output-format",
        "fio-json",
    ]);
    let json = json_stdout(&output);
    let jobs = json["jobs"].as_array().expect("fio's jobs[]");
    let names: Vec<&str> = jobs
        .iter()
        .map(|j| j["jobname"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reader", "mixer"]);
    assert_eq!(jobs[0]["groupid"], 0);
    assert_eq!(jobs[1]["groupid"], 1);
    let read = &jobs[0]["read"];
    assert_eq!(read["io_bytes"], 512 << 10);
    assert_eq!(read["total_ios"], 128);
    assert_eq!(jobs[0]["write"]["io_bytes"], 0);
    assert!(read["iops"].as_f64().unwrap() > 0.0);
    assert!(read["bw"].as_u64().unwrap() > 0, "{read}");
    assert!(read["runtime"].as_u64().is_some(), "{read}");
    for latency in ["clat_ns", "lat_ns", "slat_ns"] {
        let percentiles = &read[latency]["percentile"];
        let p50 = percentiles["50.000000"].as_u64().unwrap();
        let p99 = percentiles["99.000000"].as_u64().unwrap();
        assert!(p50 <= p99, "{latency}: {percentiles}");
        assert_eq!(read[latency]["N"], 128);
    }
    // Submission to completion never exceeds intended start to completion.
    assert!(read["clat_ns"]["mean"].as_f64() <= read["lat_ns"]["mean"].as_f64());
    // The mixed job: both sections, 512 KiB in all (split by rwmixread).
    let mixer = &jobs[1];
    let moved =
        mixer["read"]["io_bytes"].as_u64().unwrap() + mixer["write"]["io_bytes"].as_u64().unwrap();
    assert_eq!(moved, 512 << 10);
    assert!(mixer["write"]["clat_ns"]["percentile"]["99.990000"].is_u64());
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

/// Each of the three modes read back and checked what a verify job wrote.
fn assert_read_back_once_per_mode(notes: &str) {
    assert_eq!(
        notes
            .matches("written blocks read back and checked")
            .count(),
        3,
        "one read-back per mode: {notes}"
    );
}

#[test]
fn verify_writes_checksummed_blocks_and_reads_them_back_in_every_mode() {
    let (directory, fio) = scratch("verify");
    let text = format!(
        "[global]\ndirectory={}\nsize=1m\n\
         [write]\nrw=randwrite\nbssplit=4k/50:16k/50\niodepth=4\nverify=crc32c\n\
         [read]\nstonewall\nrw=read\nbs=64k\nverify=crc32c\n",
        directory.display()
    );
    let (runs, notes) = bench(&fio, &text, &[]);
    assert_read_back_once_per_mode(&notes);
    for run in runs.iter().filter(|run| run["group"] == 0) {
        // Exactly the job's bytes, mixed block sizes and all.
        assert_eq!(class_u64(run, 0, "bytes"), 1 << 20, "{run}");
        let ops = class_u64(run, 0, "ops");
        assert!(ops > 64 && ops < 256, "4k and 16k requests: {run}");
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn a_block_size_range_draws_as_fio_does_and_verifies_in_every_mode() {
    let (directory, fio) = scratch("bsrange");
    let text = format!(
        "[global]\ndirectory={}\nsize=1m\n\
         [write]\nrw=randwrite\nbsrange=4k-64k\niodepth=4\nverify=crc32c\n",
        directory.display()
    );
    let (runs, notes) = bench(&fio, &text, &[]);
    assert_read_back_once_per_mode(&notes);
    for run in &runs {
        assert_eq!(class_u64(run, 0, "bytes"), 1 << 20, "{run}");
        // fio draws 4k, 8k, ... 64k equally (a mean of 34 KiB: about 30
        // requests for 1 MiB); powers of two alone would mean 24.8 KiB
        // (about 41).
        let ops = class_u64(run, 0, "ops");
        assert!((22..=37).contains(&ops), "{ops} requests: {run}");
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn a_ramp_keeps_the_first_requests_out_of_the_report() {
    let (directory, fio) = scratch("ramp");
    let text = format!(
        "[r]\ndirectory={}\nsize=1m\nrw=randread\nruntime=200ms\nramp_time=100ms\ntime_based\n",
        directory.display()
    );
    let (runs, notes) = bench(&fio, &text, &["--mode", "kernel-direct"]);
    assert!(notes.contains("runs until 0.3 s"), "{notes}");
    let class = &runs[0]["classes"][0];
    // Requests submitted during the ramp do not count.
    assert!(class["first_submit_s"].as_f64().unwrap() >= 0.1, "{class}");
    assert_eq!(class["outstanding"], 0, "{class}");
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn jobs_with_syncs_complete_in_every_mode() {
    let (directory, fio) = scratch("syncs");
    let text = format!(
        "[global]\ndirectory={}\nsize=512k\nrw=randwrite\n\
         [every4]\nbs=64k\nfsync=4\nend_fsync=1\n[data]\nfdatasync=16\niodepth=4\n",
        directory.display()
    );
    let (runs, _) = bench(&fio, &text, &[]);
    assert_eq!(runs.len(), 3);
    for run in &runs {
        for class in 0..2 {
            assert_eq!(class_u64(run, class, "bytes"), 512 << 10, "{run}");
            assert_eq!(class_u64(run, class, "outstanding"), 0, "{run}");
        }
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn linear_rates_space_arrivals_evenly_and_poisson_ones_do_not() {
    let (directory, fio) = scratch("rates");
    let text = format!(
        "[global]\ndirectory={}\nsize=1m\nrw=randread\nrate_iops=1000\nruntime=300ms\n\
         time_based\n[linear]\n[poisson]\nrate_process=poisson\n",
        directory.display()
    );
    let (runs, _) = bench(&fio, &text, &["--mode", "kernel-direct"]);
    // Evenly spaced: one arrival every millisecond from the start, 300 in all.
    assert_eq!(class_u64(&runs[0], 0, "ops"), 300, "{}", runs[0]);
    let poisson = class_u64(&runs[0], 1, "ops");
    assert!((200..400).contains(&poisson), "{poisson}");
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}
