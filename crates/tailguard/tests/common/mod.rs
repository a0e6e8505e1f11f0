//! Helpers shared by this crate's integration tests: scratch files, files of
//! numbered blocks whose content names the block and its generation,
//! schedulers on each backend (io_uring skipped, with the reason printed, where this
//! machine refuses it), a watchdog against hangs, and the io_uring rings'
//! registered files.
//!
//! Each test file compiles this module on its own and uses only part of it,
//! hence the `dead_code` allowance.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;
use tailguard::{AlignedBuffer, BackendChoice, OpenOptions, Scheduler, SchedulerBuilder};

/// A path for the scratch file `name` (suffixed with the process id) in
/// `directory` under cargo's per-test temporary directory, which is on a disk
/// that takes O_DIRECT. Creates the directory and removes any file an earlier
/// run left at that path.
pub fn scratch(directory: &str, name: &str) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(directory);
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The block of the block-pattern files ([`pattern`], [`BlockFile`]).
pub const BLOCK: usize = 4096;

/// Block `index`'s content for generation `salt`: 8-byte words that name
/// both, so a block read back shows which write (if any) reached it.
pub fn pattern(index: u64, salt: u64) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    for (word, chunk) in buffer.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(index * 1_000_003 + salt * 7919 + word as u64).to_le_bytes());
    }
    buffer
}

/// A scratch file of blocks of generation 0 ([`pattern`]), removed on drop.
pub struct BlockFile {
    pub path: PathBuf,
}

impl BlockFile {
    /// The file `name` of `blocks` blocks in the scratch `directory`.
    pub fn create(directory: &str, name: &str, blocks: u64) -> Self {
        let path = scratch(directory, name);
        let content: Vec<u8> = (0..blocks)
            .flat_map(|index| pattern(index, 0).to_vec())
            .collect();
        std::fs::write(&path, content).unwrap();
        Self { path }
    }

    /// Block `index` as the file holds it now.
    pub fn block(&self, index: u64) -> Vec<u8> {
        let data = std::fs::read(&self.path).unwrap();
        data[index as usize * BLOCK..(index as usize + 1) * BLOCK].to_vec()
    }
}

impl Drop for BlockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens (creating) `path` read-write through `scheduler`, with O_DIRECT.
pub fn open_read_write(scheduler: &Scheduler, path: &std::path::Path) -> tailguard::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(scheduler, path)
        .unwrap()
}

/// `builder` built on `choice`, or `None` (with the reason printed) when this
/// machine refuses io_uring. Any other failure fails the test.
pub fn build_on(choice: BackendChoice, builder: SchedulerBuilder) -> Option<Scheduler> {
    match builder.backend(choice).build() {
        Ok(scheduler) => Some(scheduler),
        Err(error) if choice == BackendChoice::IoUring => {
            println!(
                "skipping io_uring: {error} ({})",
                tailguard::backend::refusal_reason(&error)
            );
            None
        }
        Err(error) => panic!("{choice:?}: {error}"),
    }
}

/// A scheduler with default settings on each of `choices` this machine offers,
/// in that order.
pub fn schedulers(choices: [BackendChoice; 2]) -> Vec<(BackendChoice, Scheduler)> {
    choices
        .into_iter()
        .filter_map(|choice| {
            build_on(choice, Scheduler::builder()).map(|scheduler| (choice, scheduler))
        })
        .collect()
}

/// A small tmpfs mounted for one test: unmounted, and its directory removed,
/// on drop, even when the test fails.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` bytes (`mount`'s syntax: "64k") on the scratch
    /// directory `name` in `directory`; `None`, with the reason printed, when
    /// the test does not run as root or this machine refuses the mount.
    pub fn mount(directory: &str, name: &str, size: &str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipping: mounting a small tmpfs needs root");
            return None;
        }
        let mount_point = scratch(directory, name);
        std::fs::create_dir_all(&mount_point).unwrap();
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tailguard-test",
            ])
            .arg(&mount_point)
            .status();
        if !mounted.is_ok_and(|status| status.success()) {
            let _ = std::fs::remove_dir(&mount_point);
            println!("skipping: mount -t tmpfs failed here (a container without CAP_SYS_ADMIN?)");
            return None;
        }
        Some(Self(mount_point))
    }

    /// Unmounts it now; returns whether that worked.
    pub fn unmount(&self) -> bool {
        std::process::Command::new("umount")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        self.unmount();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Runs `case` on its own thread and returns its result; a case that panics
/// fails with its panic, and one that does not finish within `limit` fails as
/// a hang instead of blocking the run.
pub fn watched<T: Send + 'static>(limit: Duration, case: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(case)));
    });
    match receiver.recv_timeout(limit) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("hang: the case did not finish within {limit:?}"),
    }
}

/// The files registered with any io_uring ring of this process, by path, as
/// the kernel lists them in each ring's `/proc/self/fdinfo` ("UserFiles").
/// `None` where no such listing is readable. The kernel skips the list when
/// the ring's lock is busy at that instant: an absence proves nothing, so
/// callers retry before concluding.
pub fn registered_paths() -> Option<Vec<PathBuf>> {
    let mut paths = Vec::new();
    let mut rings = 0;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let is_ring = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().contains("io_uring"));
        let info =
            std::fs::read_to_string(PathBuf::from("/proc/self/fdinfo").join(entry.file_name()));
        let Some(listing) = info
            .ok()
            .filter(|_| is_ring)
            .and_then(|info| Some(info.split_once("UserFiles:")?.1.to_string()))
        else {
            continue;
        };
        rings += 1;
        paths.extend(
            listing
                .lines()
                .skip(1)
                .map_while(|line| line.trim_start().split_once(": "))
                .filter(|(slot, _)| slot.chars().all(|c| c.is_ascii_digit()))
                .map(|(_, path)| PathBuf::from(path)),
        );
    }
    (rings > 0).then_some(paths)
}
