//! Helpers shared by the binary's integration tests: running the binary,
//! scratch directories on disk, reading its JSON, interrupting it, and loop
//! devices.
//!
//! Each test file compiles this module on its own and uses only part of it,
//! hence the `dead_code` allowance.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Runs the `tailguard` binary with `arguments`.
pub fn tailguard(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

/// Runs the binary and asserts it succeeded, showing its stderr if not.
pub fn tailguard_ok(arguments: &[&str]) -> Output {
    let output = tailguard(arguments);
    assert!(
        output.status.success(),
        "tailguard {arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A fresh, empty directory `PREFIX-NAME-PID-N` under the target's temporary
/// directory (which is on a disk, not tmpfs, so O_DIRECT works). The caller
/// removes it.
pub fn scratch_dir(prefix: &str, name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{prefix}-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

/// A fresh scratch directory (as [`scratch_dir`]), removed on drop (also when
/// an assertion fails) with the job, report and JSON files a run may leave
/// beside it.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(prefix: &str, name: &str) -> Self {
        Self(scratch_dir(prefix, name))
    }

    /// The directory's path as text, for the binary's arguments.
    pub fn text(&self) -> &str {
        text(&self.0)
    }

    /// Writes `contents` to the file `name` in the directory; returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        for extension in ["toml", "html", "json"] {
            let _ = std::fs::remove_file(self.0.with_extension(extension));
        }
    }
}

/// `path` as text, for the binary's arguments.
pub fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Asserts that the binary refused to run (exit status 2, a usage error);
/// returns what it said on stderr.
pub fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh scratch directory (as [`scratch_dir`]) and beside it the path of
/// a job file with `extension` for it, so that the file is not in the
/// directory a run must leave empty.
pub fn scratch_with_file(prefix: &str, name: &str, extension: &str) -> (PathBuf, PathBuf) {
    let directory = scratch_dir(prefix, name);
    let file = directory.with_extension(extension);
    (directory, file)
}

/// Removes a scratch directory and the job file beside it, once a test has
/// checked them.
pub fn remove_scratch(directory: &Path, file: &Path) {
    let _ = std::fs::remove_dir_all(directory);
    let _ = std::fs::remove_file(file);
}

/// The names in `directory`.
pub fn entries(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Asserts `directory` is empty: a run left nothing behind.
pub fn assert_empty(directory: &Path) {
    let left = entries(directory);
    assert!(left.is_empty(), "{left:?}");
}

/// The run's stdout parsed as JSON.
pub fn json_stdout(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The `policy` (the mode, for bench) of each run in a `--json` array.
pub fn run_policies(runs: &[serde_json::Value]) -> Vec<&str> {
    runs.iter()
        .map(|run| run["policy"].as_str().expect("a policy per run"))
        .collect()
}

/// The class names of one run object, in report order.
pub fn class_names(run: &serde_json::Value) -> Vec<&str> {
    run["classes"]
        .as_array()
        .expect("a classes array")
        .iter()
        .map(|class| class["name"].as_str().expect("a name per class"))
        .collect()
}

/// Some block device node in /dev, if there is one.
pub fn any_block_device() -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    std::fs::read_dir("/dev").unwrap().find_map(|entry| {
        let entry = entry.ok()?;
        entry
            .file_type()
            .ok()?
            .is_block_device()
            .then(|| entry.path())
    })
}

/// Sends SIGINT to `child` and waits up to `within` for it to exit; kills it
/// and fails the test if it does not. `what` names the command in the failure.
pub fn interrupt_and_wait(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    signal_and_wait(child, libc::SIGINT, within, what)
}

/// Sends `signal` to `child` and waits up to `within` for it to exit; kills it
/// and fails the test if it does not. `what` names the command in the failure.
pub fn signal_and_wait(
    child: &mut Child,
    signal: libc::c_int,
    within: Duration,
    what: &str,
) -> ExitStatus {
    // SAFETY: a plain kill(2) of the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not stop within {within:?} of signal {signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loop device over a fresh image file; unmounted, detached and removed on
/// drop (also when an assertion fails).
pub struct LoopDevice {
    /// The device node, `/dev/loopN`.
    pub device: PathBuf,
    /// The image file behind it.
    pub image: PathBuf,
    /// Where [`LoopDevice::mount`] mounted it.
    pub mount_point: Option<PathBuf>,
}

impl LoopDevice {
    /// Attaches a zeroed image of `bytes`, or says why it cannot.
    pub fn attach(name: &str, bytes: u64) -> Result<Self, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: loop devices need root".into());
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let image = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "device-{name}-{}-{}.img",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::File::create(&image)
            .and_then(|file| file.set_len(bytes))
            .map_err(|error| format!("cannot create {}: {error}", image.display()))?;
        let output = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image)
            .output();
        let output = match output {
            Ok(output) if output.status.success() => output,
            Ok(output) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!(
                    "losetup failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            Err(error) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!("cannot run losetup: {error}"));
            }
        };
        let device = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        Ok(Self {
            device,
            image,
            mount_point: None,
        })
    }

    /// The device node as a command-line argument.
    pub fn path(&self) -> &str {
        self.device.to_str().unwrap()
    }

    /// Puts ext4 on it and mounts it, or says why it cannot.
    pub fn mount(&mut self) -> Result<(), String> {
        let formatted = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&self.device)
            .output()
            .map_err(|error| format!("cannot run mkfs.ext4: {error}"))?;
        if !formatted.status.success() {
            return Err("mkfs.ext4 failed".into());
        }
        let point = self.image.with_extension("mnt");
        std::fs::create_dir_all(&point).map_err(|error| error.to_string())?;
        let mounted = Command::new("mount")
            .arg(&self.device)
            .arg(&point)
            .status()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !mounted.success() {
            let _ = std::fs::remove_dir(&point);
            return Err("mount failed".into());
        }
        self.mount_point = Some(point);
        Ok(())
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Some(point) = &self.mount_point {
            let _ = Command::new("umount").arg(point).status();
            let _ = std::fs::remove_dir(point);
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Attaches a loop device, or prints why the test skips and returns `None`.
pub fn loop_device(test: &str, bytes: u64) -> Option<LoopDevice> {
    match LoopDevice::attach(test, bytes) {
        Ok(device) => Some(device),
        Err(reason) => {
            eprintln!("skipped {test}: {reason}");
            None
        }
    }
}

/// A job file small enough for a run of a fraction of a second: readers at
/// a fixed rate beside a sequential writer, in two classes.
pub const TINY_JOB: &str = r#"
duration_s = 0.3
seed = 5
[[class]]
name = "reads"
shares = 100
[[class]]
name = "background"
shares = 50
[[job]]
name = "readers"
class = "reads"
pattern = "randread"
block_size = "4k"
rate_iops = 1000.0
numjobs = 2
size = "1m"
[[job]]
name = "writer"
class = "background"
pattern = "seqwrite"
block_size = "64k"
queue_depth = 2
size = "2m"
"#;
