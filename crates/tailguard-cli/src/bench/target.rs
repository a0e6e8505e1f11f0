//! The target: checking it, laying out data files, removing them, Ctrl-C.
//!
//! A directory target gets one data file per job, named
//! `.tailguard-bench-PID-N.data`, as large as the job's region and filled with
//! real (pseudo-random, incompressible) data so reads hit allocated blocks. The
//! files are registered in a [`Layout`] *before* they are created, and the
//! layout removes them when dropped: at the end of a run, on an error, and
//! after Ctrl-C (the run loop notices the flag from [`watch_interrupts`] within
//! 100 ms and returns an error). A regular-file target is used in place and
//! never removed. Block devices are refused.

use crate::bench::BenchError;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use tailguard::device::{self, DirectIoAlignment};
use tailguard_sim::scenario::Scenario;

/// Set once SIGINT or SIGTERM arrives.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread it starts
/// afterwards) and starts a thread that waits for them with `sigwait` and raises
/// the returned flag. No handler runs inside another thread's system call, so no
/// io_uring wait is cut short with EINTR. A second signal exits at once (status
/// 130) without cleaning up. Call it before starting any other thread.
pub fn watch_interrupts() -> &'static AtomicBool {
    // SAFETY: plain libc calls on a zero-initialised, then properly initialised,
    // signal set owned by this function.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let spawned = std::thread::Builder::new()
        .name("tailguard-signals".into())
        .spawn(move || loop {
            let mut signal = 0;
            // SAFETY: `set` is a valid signal set and `signal` a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut signal) } == 0
                && INTERRUPTED.swap(true, Ordering::SeqCst)
            {
                // SAFETY: _exit is always safe to call; it ends the process.
                unsafe { libc::_exit(130) };
            }
        });
    if spawned.is_err() {
        // Without the watcher, let the default action (termination) stand.
        // SAFETY: as above, with the same set.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
    &INTERRUPTED
}

/// Whether SIGINT or SIGTERM has arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Files laid out for a run; removed on drop.
#[derive(Debug, Default)]
pub struct Layout {
    created: Vec<PathBuf>,
}

impl Drop for Layout {
    fn drop(&mut self) {
        for path in &self.created {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Where each job's requests go.
#[derive(Debug)]
pub struct Plan {
    /// The data files (one per job for a directory, else the target itself).
    pub files: Vec<PathBuf>,
    /// Per job: index into `files`.
    pub job_file: Vec<usize>,
    /// Per job: subtracted from the job's offsets (its own file starts at 0).
    pub job_base: Vec<u64>,
    /// Kernel name of the target's device (`vda`, `nvme0n1`, `tmpfs:0:27`).
    pub device_name: String,
    /// O_DIRECT alignment, when a direct mode will run.
    pub alignment: Option<DirectIoAlignment>,
}

fn usage(message: String) -> BenchError {
    BenchError::usage(message)
}

/// Checks the target and lays out what the jobs need. With `direct`, also checks
/// that the target takes O_DIRECT at the jobs' block sizes and offsets.
pub fn prepare(
    scenario: &Scenario,
    target: &Path,
    allow_device: bool,
    direct: bool,
    layout: &mut Layout,
) -> Result<Plan, BenchError> {
    let shown = target.display();
    let metadata = std::fs::metadata(target).map_err(|error| {
        usage(format!(
            "target {shown}: {error}; give an existing directory (data files are laid out in it) \
             or regular file with target = \"PATH\" or --target"
        ))
    })?;
    let file_type = metadata.file_type();
    if file_type.is_block_device() {
        return Err(usage(if allow_device {
            format!(
                "target {shown} is a block device; benchmarking raw block devices is not \
                 supported yet; give a directory or a regular file on it"
            )
        } else {
            format!(
                "target {shown} is a block device; bench writes to its target and would destroy \
                 its data, so it refuses unless --allow-device is given (and raw devices are not \
                 supported yet: give a directory or a regular file on it)"
            )
        }));
    }
    let device_name = device::device_of_path(target)
        .map(|info| info.name)
        .unwrap_or_else(|_| "target".into());
    let mut plan = Plan {
        files: Vec::new(),
        job_file: Vec::new(),
        job_base: Vec::new(),
        device_name,
        alignment: None,
    };
    if metadata.is_dir() {
        if direct {
            let probe = target.join(format!(".tailguard-bench-{}-probe", std::process::id()));
            layout.created.push(probe.clone());
            plan.alignment = Some(direct_alignment(&probe, true)?);
        }
        check_alignment(scenario, &plan, target)?;
        for (index, job) in scenario.jobs.iter().enumerate() {
            let path = target.join(format!(
                ".tailguard-bench-{}-{index}.data",
                std::process::id()
            ));
            layout.created.push(path.clone());
            fill(&path, job.region_bytes)?;
            plan.files.push(path);
            plan.job_file.push(index);
            plan.job_base.push(job.offset_bytes);
        }
    } else if metadata.is_file() {
        for (index, job) in scenario.jobs.iter().enumerate() {
            let end = job.offset_bytes + job.region_bytes;
            if end > metadata.len() {
                return Err(usage(format!(
                    "`job[{index}].size`: the job's region ends at byte {end} but target {shown} \
                     has {} bytes; shrink size or offset, or give a directory target",
                    metadata.len()
                )));
            }
            plan.job_file.push(0);
            plan.job_base.push(0);
        }
        plan.files.push(target.to_path_buf());
        if direct {
            plan.alignment = Some(direct_alignment(target, false)?);
        }
        check_alignment(scenario, &plan, target)?;
    } else {
        return Err(usage(format!(
            "target {shown} is neither a directory nor a regular file; give one of those"
        )));
    }
    Ok(plan)
}

/// Opens `path` with O_DIRECT (creating and removing it with `probe`) and
/// returns the alignment it needs, or a clear error when it is refused.
fn direct_alignment(path: &Path, probe: bool) -> Result<DirectIoAlignment, BenchError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).custom_flags(libc::O_DIRECT);
    if probe {
        options.write(true).create_new(true);
    }
    let opened = options.open(path);
    if probe {
        let _ = std::fs::remove_file(path);
    }
    let file = opened.map_err(|error| {
        let shown = if probe {
            path.parent().unwrap_or(path).display()
        } else {
            path.display()
        };
        if error.raw_os_error() == Some(libc::EINVAL) {
            usage(format!(
                "target {shown}: the filesystem refuses O_DIRECT (tmpfs and overlayfs do), which \
                 the tailguard and kernel-direct modes need; put the target on a filesystem that \
                 supports it, or run --mode kernel-buffered only"
            ))
        } else {
            usage(format!(
                "target {shown}: cannot open it with O_DIRECT: {error}"
            ))
        }
    })?;
    let info = device::device_of(&file)
        .map_err(|error| usage(format!("target {}: {error}", path.display())))?;
    Ok(device::direct_io_alignment(&file, &info))
}

fn check_alignment(scenario: &Scenario, plan: &Plan, target: &Path) -> Result<(), BenchError> {
    let Some(alignment) = plan.alignment else {
        return Ok(());
    };
    let unit = u64::from(alignment.offset_bytes.max(1));
    for (index, job) in scenario.jobs.iter().enumerate() {
        if job.block_size_bytes % unit != 0 || job.offset_bytes % unit != 0 {
            return Err(usage(format!(
                "`job[{index}].block_size`: O_DIRECT on target {} needs block sizes and offsets \
                 that are multiples of {unit} bytes; this job has block_size {} and offset {}",
                target.display(),
                job.block_size_bytes,
                job.offset_bytes
            )));
        }
    }
    Ok(())
}

/// Writes `bytes` of pseudo-random data to a new file at `path` and syncs it.
fn fill(path: &Path, bytes: u64) -> Result<(), BenchError> {
    let failed = |error: std::io::Error| {
        usage(format!(
            "cannot lay out data file {}: {error}",
            path.display()
        ))
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(failed)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut state = 0x9E37_79B9_7F4A_7C15_u64 ^ bytes;
    let mut written = 0;
    while written < bytes {
        if interrupted() {
            return Err(BenchError::interrupted());
        }
        for word in chunk.chunks_exact_mut(8) {
            // xorshift64: cheap, incompressible enough for a disk.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let length = (bytes - written).min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..length]).map_err(failed)?;
        written += length as u64;
    }
    file.sync_all().map_err(failed)
}

/// Makes every file's data durable and drops it from the page cache, so a run
/// starts neither with another mode's dirty pages nor with warm reads.
pub fn settle(plan: &Plan) -> Result<(), BenchError> {
    for path in &plan.files {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|error| usage(format!("{}: {error}", path.display())))?;
        file.sync_data()
            .map_err(|error| usage(format!("{}: {error}", path.display())))?;
        // SAFETY: a plain advisory call on an open descriptor.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    Ok(())
}
