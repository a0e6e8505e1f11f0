//! `tailguard bench --fio FILE` end to end: errors with line numbers, the
//! mapping notes, a short imported run with `--json`, cleanup of the data files
//! laid out for it, and block devices refused without `--allow-device`.

use std::path::{Path, PathBuf};

mod common;
use common::{
    any_block_device, assert_empty, class_names, entries, json_stdout, remove_scratch,
    run_policies, tailguard, tailguard_ok,
};

/// A fresh, empty directory (on a disk, so O_DIRECT works), and beside it the
/// path for a fio file.
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    common::scratch_with_file("fio", name, "fio")
}

/// Runs bench on `text` as a fio file against a scratch directory; expects
/// exit status 2 and nothing left behind; returns stderr.
fn refused(text: &str) -> String {
    let (directory, fio) = scratch("bad");
    std::fs::write(&fio, text).unwrap();
    let output = tailguard(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--target",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
    String::from_utf8(output.stderr).unwrap()
}

/// A reader and a mixed reader/writer, 0.3 s, in `directory=`.
fn two_jobs(directory: &Path) -> String {
    format!(
        "; imported by the tests\n\
         [global]\n\
         ioengine=io_uring\n\
         direct=1\n\
         runtime=300ms\n\
         time_based\n\
         directory={}\n\
         \n\
         [lookups]\n\
         rw=randread\n\
         bs=4k\n\
         iodepth=4\n\
         size=1m\n\
         \n\
         [ingest]\n\
         rw=randrw\n\
         rwmixread=75\n\
         bs=4k,64k\n\
         iodepth=4\n\
         size=2m\n\
         prio=7\n",
        directory.display()
    )
}

#[test]
fn errors_name_the_line_the_option_and_the_fix() {
    let error = refused("[a]\nrw=randread\nruntime=1\nsize=1m\nzonemode=zbd\n");
    assert!(error.contains("line 5"), "{error}");
    assert!(
        error.contains("`zonemode`") && error.contains("give size= and offset="),
        "{error}"
    );

    let error = refused("[a]\nrw=randread\nruntime=1\nsize=1m\nbs=4x\n");
    assert!(
        error.contains("line 5") && error.contains("bs=4x"),
        "{error}"
    );

    let error = refused("[a]\nrw=randtrim\nruntime=1\nsize=1m\n");
    assert!(
        error.contains("line 2") && error.contains("randrw"),
        "{error}"
    );

    let error = refused("[global]\nsize=1m\n\n[a]\nrw=read\ntime_based\n");
    assert!(
        error.contains("line 6") && error.contains("runtime="),
        "{error}"
    );

    let error = refused("[a]\nruntime=1\nsize=1m\niodepth=deep\n");
    assert!(
        error.contains("line 4") && error.contains("iodepth"),
        "{error}"
    );

    let error = refused("[a]\nruntime=1\nsize=1m\nbs=4KiB\n");
    assert!(
        error.contains("line 4") && error.contains("4000"),
        "{error}"
    );

    // Both a job file and --fio: exactly one of the two.
    let output = tailguard(&["bench", "jobs.toml", "--fio", "job.fio"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = tailguard(&["bench"]);
    let error = common::refused(&output);
    assert!(error.contains("--fio"), "{error}");
}

#[test]
fn an_imported_job_runs_reports_its_classes_and_cleans_up() {
    let (directory, fio) = scratch("run");
    std::fs::write(&fio, two_jobs(&directory)).unwrap();
    let output = tailguard_ok(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--mode",
        "kernel-direct,tailguard",
        "--json",
    ]);
    let notes = String::from_utf8_lossy(&output.stderr);
    assert!(notes.contains("`ioengine=io_uring` accepted"), "{notes}");
    assert!(
        notes.contains("ingest.read: randread 4096 B at queue depth 3")
            && notes.contains("ingest.write: randwrite 65536 B at queue depth 1"),
        "{notes}"
    );
    assert!(notes.contains("class `ingest` (shares 25)"), "{notes}");

    let runs = json_stdout(&output);
    let runs = runs.as_array().expect("an array of runs");
    assert_eq!(run_policies(runs), ["kernel-direct", "tailguard"]);
    for run in runs {
        assert_eq!(run["duration_s"], 0.3);
        let classes = run["classes"].as_array().unwrap();
        assert_eq!(class_names(run), ["lookups", "ingest"]);
        for class in classes {
            assert!(class["ops"].as_u64().unwrap() > 0, "{class}");
            assert!(
                class["latency_us"]["p50"].as_f64().unwrap() > 0.0,
                "{class}"
            );
            assert_eq!(class["outstanding"], 0);
        }
        // The mixed job's 64 KiB writes came through: more bytes per op than
        // the 4 KiB-only reader.
        let bytes_per_op = |class: &serde_json::Value| {
            class["bytes"].as_f64().unwrap() / class["ops"].as_f64().unwrap()
        };
        assert_eq!(bytes_per_op(&classes[0]), 4096.0);
        assert!(bytes_per_op(&classes[1]) > 4096.0, "{}", classes[1]);
    }
    assert_empty(&directory);
    remove_scratch(&directory, &fio);
}

#[test]
fn a_fio_filename_is_used_in_place_and_kept() {
    let (directory, fio) = scratch("file");
    let file = directory.join("existing.dat");
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    std::fs::write(
        &fio,
        format!(
            "[reads]\nfilename={}\nrw=randread\nruntime=200ms\ntime_based\n",
            file.display()
        ),
    )
    .unwrap();
    let output = tailguard_ok(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--mode",
        "kernel-direct",
        "--json",
    ]);
    let notes = String::from_utf8_lossy(&output.stderr);
    // No size=: the file's own size.
    assert!(notes.contains(&format!("{} bytes", 1 << 20)), "{notes}");
    let runs = json_stdout(&output);
    assert!(runs[0]["classes"][0]["ops"].as_u64().unwrap() > 0);
    assert_eq!(entries(&directory), ["existing.dat"]);
    assert_eq!(std::fs::read(&file).unwrap(), vec![7u8; 1 << 20]);
    remove_scratch(&directory, &fio);
}

#[test]
fn a_block_device_is_refused_without_allow_device() {
    let Some(device) = any_block_device() else {
        eprintln!("skipped: no block device in /dev");
        return;
    };
    let (directory, fio) = scratch("device");
    std::fs::write(
        &fio,
        format!(
            "[w]\nfilename={}\nrw=write\nsize=1m\nruntime=1\n",
            device.display()
        ),
    )
    .unwrap();
    let output = tailguard(&["bench", "--fio", fio.to_str().unwrap()]);
    let error = common::refused(&output);
    assert!(
        error.contains("--allow-device") && error.contains("destroys"),
        "{error}"
    );
    remove_scratch(&directory, &fio);
}
