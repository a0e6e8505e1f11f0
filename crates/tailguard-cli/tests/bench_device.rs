//! `tailguard bench` on block devices: loop devices over image files that the
//! tests create, checked, and detach again (even when an assertion fails: the
//! `common::LoopDevice` guard unmounts and detaches on drop).
//!
//! Loop devices need root and `losetup`; without them every test prints why it
//! skipped and passes. The checks: refusal without `--allow-device` (naming the
//! flag and the data loss), refusal while mounted or held exclusively, a real
//! run whose regions land back to back on the device, and a fio file that
//! names the device and takes its size from it.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

mod common;
use common::{json_stdout, loop_device, tailguard, tailguard_ok};

fn write_file(name: &str, text: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("device-{name}-{}.job", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// Two jobs: 1 MiB of random reads and 1.5 MiB of sequential writes.
const TWO_REGIONS: &str = r#"
duration_s = 0.3
[[class]]
name = "reads"
shares = 100
[[class]]
name = "writes"
shares = 100
[[job]]
class = "reads"
pattern = "randread"
block_size = "4k"
queue_depth = 2
size = "1m"
[[job]]
class = "writes"
pattern = "seqwrite"
block_size = "64k"
queue_depth = 1
size = "1536k"
offset = "8m"
"#;

const MIB: usize = 1 << 20;

#[test]
fn a_device_needs_allow_device_and_then_gets_its_regions_back_to_back() {
    let Some(device) = loop_device("regions", 16 << 20) else {
        return;
    };
    let job = write_file("regions", TWO_REGIONS);
    let job = job.to_str().unwrap();

    let refused = tailguard(&["bench", job, "--target", device.path()]);
    let error = common::refused(&refused);
    assert!(
        error.contains("--allow-device") && error.contains("destroys"),
        "{error}"
    );
    let image = std::fs::read(&device.image).unwrap();
    assert!(image.iter().all(|&byte| byte == 0), "refused, yet written");

    let output = tailguard_ok(&[
        "bench",
        job,
        "--target",
        device.path(),
        "--allow-device",
        "--mode",
        "kernel-direct,tailguard",
        "--json",
    ]);
    let runs = json_stdout(&output);
    for run in runs.as_array().unwrap() {
        let classes = run["classes"].as_array().unwrap();
        assert_eq!(classes.len(), 2, "{run}");
        for class in classes {
            assert!(class["ops"].as_u64().unwrap() > 0, "{class}");
        }
    }
    // Region 0 (1 MiB) at byte 0, region 1 (1.5 MiB) at the next 1 MiB
    // boundary, both filled; the job's offset (8 MiB) does not place it, and
    // nothing past the regions is touched.
    let image = std::fs::read(&device.image).unwrap();
    let zero_blocks = |from: usize, to: usize| {
        image[from..to]
            .chunks(4096)
            .filter(|block| block.iter().all(|&byte| byte == 0))
            .count()
    };
    assert_eq!(zero_blocks(0, MIB), 0, "region 0 is filled");
    assert_eq!(zero_blocks(MIB, MIB + 3 * MIB / 2), 0, "region 1 is filled");
    assert_eq!(
        zero_blocks(MIB + 3 * MIB / 2, 16 * MIB),
        (16 * MIB - MIB - 3 * MIB / 2) / 4096,
        "nothing is written past the regions"
    );
    let _ = std::fs::remove_file(job);
}

#[test]
fn a_mounted_or_claimed_device_is_refused_even_with_allow_device() {
    let Some(mut device) = loop_device("mounted", 32 << 20) else {
        return;
    };
    let job = write_file("mounted", TWO_REGIONS);
    let job = job.to_str().unwrap();

    // Held exclusively by another program (here: this test).
    {
        let _held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&device.device)
            .unwrap();
        let output = tailguard(&["bench", job, "--target", device.path(), "--allow-device"]);
        let error = common::refused(&output);
        assert!(error.contains("in use"), "{error}");
    }

    match device.mount() {
        Ok(()) => {
            let output = tailguard(&["bench", job, "--target", device.path(), "--allow-device"]);
            let error = common::refused(&output);
            let point = device.mount_point.as_ref().unwrap();
            assert!(
                error.contains("mounted at") && error.contains(point.to_str().unwrap()),
                "{error}"
            );
        }
        Err(reason) => eprintln!("skipped the mounted check: {reason}"),
    }
    let _ = std::fs::remove_file(job);
}

#[test]
fn a_fio_file_naming_the_device_takes_its_size() {
    let Some(device) = loop_device("fio", 8 << 20) else {
        return;
    };
    let fio = write_file(
        "fio",
        &format!(
            "[global]\nfilename={}\nruntime=200ms\ntime_based\nioengine=io_uring\ndirect=1\n\
             [reads]\nrw=randread\nbs=4k\niodepth=2\n",
            device.path()
        ),
    );
    let output = tailguard_ok(&[
        "bench",
        "--fio",
        fio.to_str().unwrap(),
        "--allow-device",
        "--mode",
        "kernel-direct",
        "--json",
    ]);
    let notes = String::from_utf8_lossy(&output.stderr);
    assert!(notes.contains(&format!("{} bytes", 8 << 20)), "{notes}");
    let runs = json_stdout(&output);
    let class = &runs[0]["classes"][0];
    assert_eq!(class["name"], "reads");
    assert!(class["ops"].as_u64().unwrap() > 0, "{class}");
    let _ = std::fs::remove_file(fio);
}
