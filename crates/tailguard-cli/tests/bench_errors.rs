//! A kernel mode's failed request is reported with the job, the operation,
//! the file, the errno's name and the fix, not as a bare "File too large (os
//! error 27)". The failure is made without privileges: the run's file size
//! limit (`RLIMIT_FSIZE`, the shell's `ulimit -f`) is set below the end of the
//! job's writes, with SIGXFSZ ignored so that the kernel answers the write
//! with EFBIG instead of killing the process.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

mod common;
use common::scratch_dir;

const WRITER: &str = r#"
duration_s = 0.5
seed = 1
[[class]]
name = "writes"
shares = 100
[[job]]
name = "writer"
class = "writes"
pattern = "seqwrite"
block_size = "64k"
queue_depth = 2
size = "1m"
"#;

/// The file size limit: half the job's region.
const FILE_SIZE_LIMIT_BYTES: u64 = 512 << 10;

#[test]
fn a_kernel_mode_failure_names_the_errno_and_the_fix() {
    let directory = scratch_dir("bench-errors", "efbig");
    let job = directory.join("writer.toml");
    std::fs::write(&job, WRITER).unwrap();
    let target = directory.join("target.data");
    // The target exists at full size: only the writes past the limit fail.
    std::fs::File::create(&target)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    for mode in ["kernel-direct", "kernel-buffered"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tailguard"));
        command.args([
            "bench",
            job.to_str().unwrap(),
            "--target",
            target.to_str().unwrap(),
            "--mode",
            mode,
        ]);
        // SAFETY: between fork and exec the child calls only setrlimit and
        // signal, both async-signal-safe, on values it owns.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: FILE_SIZE_LIMIT_BYTES,
                    rlim_max: FILE_SIZE_LIMIT_BYTES,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{mode}: {stderr}");
        let error = stderr
            .lines()
            .find(|line| line.starts_with("error:"))
            .unwrap_or_else(|| panic!("{mode}: no error line: {stderr}"));
        for part in [
            mode,
            "job `writer`",
            "a write of 65536 bytes",
            target.to_str().unwrap(),
            "EFBIG",
            "ulimit -f",
        ] {
            assert!(
                error.contains(part),
                "{mode}: `{part}` missing from: {error}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&directory);
}
