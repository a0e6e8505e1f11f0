//! Closing the terminal a run was started from: the kernel hangs up the
//! session (SIGHUP), and the run stops like Ctrl-C, removing its files,
//! although its standard streams are gone. Alone in its test binary, so no
//! other test's child inherits the terminal's master side and keeps it open.

mod common;

use common::entries;
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const JOB: &str = r#"
duration_s = 60
[[class]]
name = "reads"
shares = 100
[[job]]
name = "readers"
class = "reads"
pattern = "randread"
block_size = "4k"
queue_depth = 1
size = "1m"
"#;

/// A new pseudo-terminal: (master, slave), the master closed on exec.
fn open_terminal() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the out pointers; a null
    // name, termios and window size are allowed.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both are fresh descriptors this test owns from here on.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: F_SETFD on a valid descriptor.
    let cloexec = unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&master),
            libc::F_SETFD,
            libc::FD_CLOEXEC,
        )
    };
    assert_eq!(cloexec, 0);
    (master, slave)
}

#[test]
fn closing_the_terminal_stops_bench_and_removes_its_files() {
    let directory = common::scratch_dir("terminal", "hangup");
    let job = directory.with_extension("toml");
    std::fs::write(&job, JOB).unwrap();
    let (master, slave) = open_terminal();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tailguard"));
    command
        .args(["bench", job.to_str().unwrap(), "--target"])
        .arg(&directory)
        .args(["--mode", "kernel-direct"])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            // A session of its own, with the terminal as its controlling one.
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    drop(command); // its copies of the terminal's slave side
    let deadline = Instant::now() + Duration::from_secs(30);
    while entries(&directory).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let laid_out = entries(&directory);
    std::thread::sleep(Duration::from_millis(300));
    drop(master); // the terminal closes: the kernel sends SIGHUP
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bench ran on for 20 s after its terminal closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let left = entries(&directory);
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_file(&job);
    assert!(!laid_out.is_empty(), "bench laid out its data file");
    assert_eq!(status.code(), Some(128 + libc::SIGHUP), "{status:?}");
    assert_eq!(left, Vec::<String>::new());
}
