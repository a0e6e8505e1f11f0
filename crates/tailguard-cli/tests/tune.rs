//! `tailguard tune` end to end on a temporary directory and on a loop device: a
//! short run writes a profile the library loads, and unsafe requests are
//! refused (a device while held or mounted, as bench refuses it). Asserts
//! structure and positive rates, never timing values.

mod common;

use common::{tailguard, tailguard_ok, text, Scratch};
use tailguard::profile_file::{ProfileFile, PROFILE_FILE_VERSION};

#[test]
fn a_short_run_writes_a_profile_the_library_loads() {
    let directory = Scratch::new("tune", "short");
    let target = directory.0.join("target");
    std::fs::create_dir(&target).unwrap();
    let output = directory.0.join("profile.toml");
    let report = directory.0.join("report.html");
    let run = tailguard_ok(&[
        "tune",
        text(&target),
        "--duration",
        "3s",
        "--size",
        "32m",
        "--output",
        text(&output),
        "--report",
        text(&report),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.contains(&format!("profile written to {}", output.display())),
        "{stdout}"
    );
    assert!(stdout.contains("knee"), "{stdout}");
    // The laid-out test file is gone.
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);

    let profile = ProfileFile::load(&output).expect("the profile loads");
    check_tuned_profile(&profile);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"));

    // The library takes the file, and maps the directory's device to it.
    let resolved = profile.resolve().expect("the profile resolves");
    let device = tailguard::device::device_of_path(&target).unwrap().name;
    assert!(
        resolved.devices.contains_key(&device),
        "{device}: {resolved:?}"
    );
    let scheduler = tailguard::Scheduler::builder()
        .profile_file(&output)
        .and_then(|builder| builder.build())
        .expect("the scheduler accepts the profile");
    scheduler.shutdown();

    check_seastar_format(&directory, &target);
}

/// A profile from `tailguard tune`: its version and metadata, one device
/// with positive rates, a first-request figure and a consistent knee on
/// every curve.
fn check_tuned_profile(profile: &ProfileFile) {
    assert_eq!(profile.version, PROFILE_FILE_VERSION);
    let metadata = profile.metadata.as_ref().expect("metadata");
    assert_eq!(metadata.tool, "tailguard tune");
    assert!(!metadata.date.is_empty());
    assert_eq!(profile.devices.len(), 1);
    let entry = profile.devices.values().next().unwrap();
    for rate in [
        entry.read_iops,
        entry.write_iops,
        entry.read_bandwidth,
        entry.write_bandwidth,
    ] {
        assert!(rate > 0.0, "{entry:?}");
    }
    assert!(entry.first.is_some());
    for knee in [
        entry.knee.random_read,
        entry.knee.random_write,
        entry.knee.sequential_read,
        entry.knee.sequential_write,
    ] {
        let knee = knee.expect("every curve has a knee");
        assert!(knee.queue_depth >= 1);
        assert_eq!(
            knee.in_flight_bytes,
            u64::from(knee.queue_depth) * knee.request_bytes
        );
    }
}

/// Seastar's format from a short run on `target`: it loads, with positive
/// rates, matching the target's path.
fn check_seastar_format(directory: &Scratch, target: &std::path::Path) {
    let yaml = directory.0.join("io_properties.yaml");
    tailguard_ok(&[
        "tune",
        text(target),
        "--duration",
        "2s",
        "--size",
        "16m",
        "--format",
        "seastar",
        "--output",
        text(&yaml),
    ]);
    let seastar = ProfileFile::load(&yaml).expect("the YAML loads");
    let entry = seastar.devices.values().next().expect("one disk");
    assert!(entry.read_iops > 0.0 && entry.write_bandwidth > 0.0);
    assert_eq!(
        entry.match_path.as_deref(),
        Some(std::fs::canonicalize(target).unwrap().as_path())
    );
}

#[test]
fn an_existing_file_is_only_read_and_outputs_are_not_overwritten() {
    let directory = Scratch::new("tune", "existing");
    let data = directory.0.join("user.data");
    let contents: Vec<u8> = (0..(16u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&data, &contents).unwrap();
    let output = directory.0.join("profile.toml");
    let run = tailguard_ok(&[
        "tune",
        text(&data),
        "--duration",
        "1s",
        "--output",
        text(&output),
    ]);
    assert_eq!(
        std::fs::read(&data).unwrap(),
        contents,
        "the user's file changed"
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("--allow-write"), "{stdout}");
    let profile = ProfileFile::load(&output).unwrap();
    let notes = &profile.metadata.unwrap().notes;
    assert!(
        notes.iter().any(|note| note.contains("random_write")),
        "{notes:?}"
    );

    let again = tailguard(&[
        "tune",
        text(&data),
        "--duration",
        "1s",
        "--output",
        text(&output),
    ]);
    let stderr = common::refused(&again);
    assert!(stderr.contains("--allow-overwrite"), "{stderr}");
}

/// `--output -` is standard output, as `-` is for `frontier --json`: the
/// profile goes there, the charts and summary to standard error, and no file
/// named `-` appears. Both outputs on standard output are refused up front.
#[test]
fn a_dash_output_is_standard_output_not_a_file() {
    let directory = Scratch::new("tune", "dash");
    std::fs::create_dir(directory.0.join("target")).unwrap();
    let tune = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tailguard"))
            .current_dir(&directory.0)
            .args(["tune", "target", "--duration", "2s", "--size", "32m"])
            .args(["--curves", "random_read"])
            .args(extra)
            .output()
            .expect("the binary runs")
    };
    let run = tune(&["--output", "-"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        !directory.0.join("-").exists(),
        "--output - wrote a file named -"
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let profile = ProfileFile::from_toml_str(&stdout)
        .unwrap_or_else(|error| panic!("standard output is not a profile ({error}): {stdout}"));
    assert_eq!(profile.devices.len(), 1);
    assert!(stderr.contains("knee"), "{stderr}");

    let both = tune(&["--output", "-", "--report", "-"]);
    let stderr = common::refused(&both);
    assert!(stderr.contains("standard output"), "{stderr}");
    assert!(!directory.0.join("-").exists());
}

#[test]
fn block_devices_need_allow_device_and_bad_targets_say_why() {
    let refused = tailguard(&["tune", "/dev/null", "--duration", "1s"]);
    assert_eq!(refused.status.code(), Some(2));
    let missing = tailguard(&["tune", "/no/such/tailguard/dir", "--duration", "1s"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("give an existing directory"), "{stderr}");
    let short = tailguard(&["tune", ".", "--duration", "0.1s"]);
    let stderr = String::from_utf8_lossy(&short.stderr);
    assert!(stderr.contains("between 1 s"), "{stderr}");
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .find(|source| {
            use std::os::unix::fs::FileTypeExt;
            source.starts_with("/dev/")
                && std::fs::metadata(source).is_ok_and(|meta| meta.file_type().is_block_device())
        });
    let Some(device) = mounted else {
        eprintln!("skipped the mounted-device check: no block device is mounted here");
        return;
    };
    let without_flag = tailguard(&["tune", &device, "--duration", "1s"]);
    let stderr = String::from_utf8_lossy(&without_flag.stderr);
    assert!(stderr.contains("--allow-device"), "{stderr}");
    let with_flag = tailguard(&["tune", &device, "--allow-device", "--duration", "1s"]);
    let stderr = String::from_utf8_lossy(&with_flag.stderr);
    assert!(stderr.contains("is mounted"), "{stderr}");
}

/// A loop device: measured read-only with --allow-device (its bytes stay as
/// they were), and refused, as bench refuses it, while another program holds
/// it exclusively or it is mounted. Needs root and `losetup`; skips with the
/// reason otherwise. The guard detaches the device even when an assertion
/// fails.
#[test]
fn a_device_is_measured_read_only_and_refused_while_held_or_mounted() {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(mut device) = common::loop_device("tune", 32 << 20) else {
        return;
    };
    let directory = Scratch::new("tune", "device");
    let output = directory.0.join("profile.toml");

    // Held exclusively by another program (here: this test). A plain open
    // would not notice; tune's O_EXCL does.
    {
        let _held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&device.device)
            .unwrap();
        let refused = tailguard(&[
            "tune",
            device.path(),
            "--allow-device",
            "--duration",
            "1s",
            "--output",
            text(&output),
        ]);
        let stderr = common::refused(&refused);
        assert!(
            stderr.contains("is in use") && stderr.contains("release it first"),
            "{stderr}"
        );
        assert!(!output.exists(), "refused, yet a profile was written");
    }

    let run = tailguard_ok(&[
        "tune",
        device.path(),
        "--allow-device",
        "--duration",
        "2s",
        "--curves",
        "random_read",
        "--output",
        text(&output),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("of device"), "{stdout}");
    let image = std::fs::read(&device.image).unwrap();
    assert!(image.iter().all(|&byte| byte == 0), "a read-only run wrote");
    let profile = ProfileFile::load(&output).expect("the profile loads");
    let entry = profile.devices.values().next().expect("one device");
    assert!(entry.knee.random_read.is_some(), "{entry:?}");
    let notes = &profile.metadata.expect("metadata").notes;
    assert!(
        notes
            .iter()
            .any(|note| note.starts_with("random_read: ") && note.contains("ramp_time=")),
        "{notes:?}"
    );

    match device.mount() {
        Ok(()) => {
            let mounted = tailguard(&[
                "tune",
                device.path(),
                "--allow-device",
                "--duration",
                "1s",
                "--output",
                text(&directory.0.join("mounted.toml")),
            ]);
            let stderr = common::refused(&mounted);
            assert!(stderr.contains("is mounted"), "{stderr}");
        }
        Err(reason) => eprintln!("skipped the mounted check: {reason}"),
    }
}
