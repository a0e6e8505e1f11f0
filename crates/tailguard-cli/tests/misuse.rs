//! The binary used as a careless or hostile new user would use it: output
//! paths that cannot be written (checked before the run, one overwrite rule
//! everywhere), targets that are not disks (ramfs, /proc, a read-only
//! directory), values of the wrong kind, and paths that need shell quoting.
//! Each error must name what is wrong and the fix. Root-only checks (a ramfs
//! mount, a read-only bind mount) skip with a printed reason otherwise and
//! unmount on every exit path.

mod common;

use common::{
    assert_empty, entries, refused, scratch_dir, tailguard, tailguard_ok, text, Scratch, TINY_JOB,
};
use std::path::PathBuf;
use std::process::Command;

const SCENARIO: &str = r#"
duration_s = 0.2
[[device]]
name = "disk"
model = "nvme"
[[class]]
name = "reads"
shares = 100
[[job]]
class = "reads"
device = "disk"
pattern = "randread"
block_size = "4k"
queue_depth = 1
"#;

/// A mount on a fresh directory, unmounted (lazily) and removed on drop, so
/// a failing assertion leaves nothing mounted.
struct Mounted(PathBuf);

impl Mounted {
    /// Mounts with `mount ARGUMENTS DIRECTORY`; `None` (with the reason
    /// printed) when not root or when mount fails.
    fn new(name: &str, arguments: &[&str]) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped the {name} check: mounting needs root");
            return None;
        }
        let directory = scratch_dir("misuse-mount", name);
        let status = Command::new("mount")
            .args(arguments)
            .arg(&directory)
            .status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!("skipped the {name} check: mount {arguments:?} failed: {status:?}");
            let _ = std::fs::remove_dir(&directory);
            return None;
        }
        Some(Self(directory))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn output_paths_are_checked_before_the_run() {
    let scratch = Scratch::new("misuse", "outputs");
    let target = scratch.0.join("target");
    std::fs::create_dir(&target).unwrap();
    let missing = scratch.0.join("no-such-directory/profile.toml");

    let run = tailguard(&[
        "tune",
        text(&target),
        "--duration",
        "2s",
        "--size",
        "16m",
        "--output",
        text(&missing),
    ]);
    let error = refused(&run);
    assert!(
        error.contains("--output") && error.contains("does not exist"),
        "{error}"
    );
    assert!(run.stdout.is_empty(), "nothing was measured: {run:?}");
    assert_empty(&target);

    let jobs = scratch.file("tiny.toml", TINY_JOB);
    let run = tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        text(&target),
        "--report",
        text(&scratch.0.join("no-such-directory/report.html")),
    ]);
    let error = refused(&run);
    assert!(
        error.contains("--report") && error.contains("does not exist"),
        "{error}"
    );
    assert!(run.stdout.is_empty(), "nothing was run: {run:?}");

    let run = tailguard(&[
        "frontier",
        text(&target),
        "--quick",
        "--depths",
        "1",
        "--sizes",
        "128k",
        "--latency-targets",
        "none",
        "--no-adaptive",
        "--duration",
        "1s",
        "--size-mib",
        "16",
        "--json",
        text(&target),
    ]);
    let error = refused(&run);
    assert!(
        error.contains("--json") && error.contains("is a directory"),
        "{error}"
    );
    assert!(run.stdout.is_empty(), "nothing was run: {run:?}");
    assert_empty(&target);
}

#[test]
fn every_command_refuses_to_overwrite_without_allow_overwrite() {
    let scratch = Scratch::new("misuse", "overwrite");
    let target = scratch.0.join("target");
    std::fs::create_dir(&target).unwrap();
    let existing = scratch.file("existing.html", "keep me");
    let jobs = scratch.file("tiny.toml", TINY_JOB);
    let bench = |extra: &[&str]| {
        let mut arguments = vec![
            "bench",
            text(&jobs),
            "--target",
            text(&target),
            "--mode",
            "kernel-direct",
            "--report",
            text(&existing),
        ];
        arguments.extend_from_slice(extra);
        tailguard(&arguments)
    };
    let error = refused(&bench(&[]));
    assert!(error.contains("--allow-overwrite"), "{error}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");

    for arguments in [
        vec!["tune", text(&target), "--output", text(&existing)],
        vec!["demo", text(&target), "--report", text(&existing)],
        vec!["frontier", text(&target), "--report", text(&existing)],
    ] {
        let error = refused(&tailguard(&arguments));
        assert!(
            error.contains("--allow-overwrite"),
            "{arguments:?}: {error}"
        );
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
        assert_empty(&target);
    }

    let run = bench(&["--allow-overwrite"]);
    assert!(run.status.success(), "{run:?}");
    assert!(std::fs::read_to_string(&existing)
        .unwrap()
        .contains("<html"));
    assert_empty(&target);
}

#[test]
fn ramfs_runs_kernel_buffered_and_is_not_reported_as_full() {
    let Some(ramfs) = Mounted::new("ramfs", &["-t", "ramfs", "none"]) else {
        return;
    };
    let scratch = Scratch::new("misuse", "ramfs");
    let jobs = scratch.file("tiny.toml", TINY_JOB);
    let run = tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        text(&ramfs.0),
        "--mode",
        "kernel-buffered",
        "--json",
    ]);
    assert!(
        run.status.success(),
        "the mode the O_DIRECT error advises runs: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(entries(&ramfs.0), Vec::<String>::new());

    // The direct modes are refused for O_DIRECT, with the way out.
    let error = refused(&tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        text(&ramfs.0),
    ]));
    assert!(
        error.contains("O_DIRECT") && error.contains("kernel-buffered"),
        "{error}"
    );

    // tune: the reason is O_DIRECT, not "0 MiB free".
    let error = refused(&tailguard(&[
        "tune",
        text(&ramfs.0),
        "--duration",
        "2s",
        "--output",
        text(&scratch.0.join("profile.toml")),
    ]));
    assert!(error.contains("O_DIRECT"), "{error}");
    assert!(
        !error.contains("MiB free") && !error.contains("0 MiB"),
        "{error}"
    );
    assert_eq!(entries(&ramfs.0), Vec::<String>::new());
}

#[test]
fn an_unwritable_directory_is_blamed_for_permissions_not_o_direct() {
    let source = Scratch::new("misuse", "read-only-source");
    let path = source.0.to_str().unwrap().to_string();
    let Some(read_only) = Mounted::new("read-only bind", &["--bind", "-o", "ro", &path]) else {
        return;
    };
    let scratch = Scratch::new("misuse", "read-only");
    let jobs = scratch.file("tiny.toml", TINY_JOB);
    let error = refused(&tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        text(&read_only.0),
    ]));
    assert!(error.contains("read-only"), "{error}");
    assert!(!error.contains("O_DIRECT"), "{error}");
}

#[test]
fn pseudo_files_are_named_as_such() {
    let scratch = Scratch::new("misuse", "proc");
    let jobs = scratch.file("tiny.toml", TINY_JOB);
    let error = refused(&tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        "/proc/self/mem",
    ]));
    assert!(error.contains("procfs"), "{error}");
    assert!(!error.contains("0 bytes"), "{error}");
    let error = refused(&tailguard(&[
        "tune",
        "/proc/self/mem",
        "--output",
        text(&scratch.0.join("profile.toml")),
    ]));
    assert!(error.contains("procfs"), "{error}");
}

#[test]
fn a_negative_block_size_names_its_job_and_key() {
    let scratch = Scratch::new("misuse", "negative");
    let jobs = scratch.file(
        "negative.toml",
        &TINY_JOB.replace("block_size = \"64k\"", "block_size = -4096"),
    );
    let error = refused(&tailguard(&[
        "bench",
        text(&jobs),
        "--target",
        text(&scratch.0),
    ]));
    assert!(error.contains("job[1].block_size"), "{error}");
    assert!(error.contains("negative"), "{error}");
}

#[test]
fn reproduce_lines_are_shell_quoted() {
    let scratch = Scratch::new("misuse", "quoting");
    let directory = scratch.0.join("it's here");
    std::fs::create_dir(&directory).unwrap();
    let scenario = directory.join("a scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let run = tailguard_ok(&["sim", text(&scenario)]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let quoted = format!("'{}'", text(&scenario).replace('\'', "'\\''"));
    assert!(
        stdout.contains(&format!("reproduce: tailguard sim {quoted} ")),
        "{stdout}"
    );

    let jobs = directory.join("tiny jobs.toml");
    std::fs::write(&jobs, TINY_JOB).unwrap();
    let run = tailguard_ok(&[
        "bench",
        text(&jobs),
        "--target",
        text(&directory),
        "--mode",
        "kernel-direct",
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let quoted_jobs = format!("'{}'", text(&jobs).replace('\'', "'\\''"));
    let quoted_target = format!("'{}'", text(&directory).replace('\'', "'\\''"));
    assert!(
        stdout.contains(&format!(
            "reproduce: tailguard bench {quoted_jobs} --target {quoted_target} "
        )),
        "{stdout}"
    );
}

#[test]
fn class_names_with_control_characters_are_refused() {
    let scratch = Scratch::new("misuse", "names");
    for name in ["re\\nads", "re\\u0000ads"] {
        let jobs = scratch.file(
            "names.toml",
            &TINY_JOB.replace("\"reads\"", &format!("\"{name}\"")),
        );
        let error = refused(&tailguard(&[
            "bench",
            text(&jobs),
            "--target",
            text(&scratch.0),
        ]));
        assert!(
            error.contains("class[0].name") && error.contains("control character"),
            "{error}"
        );
    }
}
