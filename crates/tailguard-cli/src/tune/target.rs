//! What tune measures on, and what it may write.
//!
//! Safety rule: **tune writes only into a file it created itself, unless told
//! otherwise.**
//!
//! - A directory: tune lays out its own file, `.tailguard-tune-PID.data`
//!   (`--size`, default 1 GiB or a quarter of the free space, whichever is
//!   smaller), filled with incompressible data so reads hit allocated blocks,
//!   and removes it at the end, on errors, and after Ctrl-C, SIGTERM or SIGHUP
//!   ([`TestFile`]'s `Drop`). It holds the file's `flock` while it runs, and
//!   removes what killed runs left in the directory first
//!   ([`crate::lifecycle`]). The layout takes at most a fifth of the time budget; a slow disk
//!   gets a smaller file rather than a longer run. Read and write tests run.
//! - An existing regular file: used in place and never removed. Only read
//!   tests run, unless `--allow-write`, which overwrites its contents. Tune
//!   holds an exclusive `flock` on it, so a second run on it is refused. It
//!   must hold written data throughout: a hole, or space reserved with
//!   `fallocate` and never written, reads back as zeros without touching the
//!   device, so such a file is refused.
//! - A block device: refused unless `--allow-device`, and refused while it or a
//!   partition on it is mounted or anything holds it, as bench does: it is
//!   opened with `O_EXCL` ([`open_exclusive`]), which the kernel refuses while a
//!   filesystem, LVM, RAID, swap or another program holds it, and that
//!   descriptor is the one measured, so nobody can mount or claim the device
//!   during the run. Only read tests run, unless `--allow-write`, which
//!   destroys the data on it.
//!
//! Everything is opened with O_DIRECT; a filesystem that refuses it gets an
//! error saying so, since tune measures the device, not the page cache.

use crate::bench::target::{
    block_device_bytes, device_in_use, fill_random, interrupted, mount_of, open_exclusive, Mount,
};
use crate::error::CliError;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tailguard::device::{self, DeviceInfo};
use tailguard::AlignedBuffer;

/// Default size of the file laid out in a directory: 1 GiB.
pub const DEFAULT_SIZE_BYTES: u64 = 1 << 30;
/// The smallest test file worth measuring: 16 MiB.
pub const MINIMUM_SIZE_BYTES: u64 = 16 << 20;
/// Layout writes in pieces of this size.
const LAYOUT_CHUNK_BYTES: usize = 1 << 20;

/// What kind of target was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A directory: tune's own file in it.
    Directory,
    /// A user's regular file.
    RegularFile,
    /// A block device node.
    BlockDevice,
}

/// The open test file; removes the file tune laid out when dropped.
pub struct TestFile {
    /// Opened with O_DIRECT, for reading (and writing when allowed).
    pub file: File,
    /// The path measured (the laid-out file for a directory).
    pub path: PathBuf,
    /// Bytes of the file the tests use.
    pub size_bytes: u64,
    /// Whether write tests may run.
    pub writable: bool,
    /// The device behind it.
    pub device: DeviceInfo,
    /// O_DIRECT memory alignment.
    pub alignment_bytes: usize,
    /// What was given.
    pub kind: TargetKind,
    /// The file to remove on drop (a directory target's own file).
    remove_on_drop: Option<PathBuf>,
}

impl Drop for TestFile {
    fn drop(&mut self) {
        if let Some(path) = &self.remove_on_drop {
            // After a stop signal, a large file goes in the background.
            crate::lifecycle::remove_paths(std::slice::from_ref(path));
        }
    }
}

/// How to prepare the target.
#[derive(Clone, Debug)]
pub struct TargetOptions {
    /// `--size`: the file to lay out in a directory.
    pub size_bytes: Option<u64>,
    /// `--allow-device`.
    pub allow_device: bool,
    /// `--allow-write`.
    pub allow_write: bool,
    /// How long the layout may take at most.
    pub layout_budget: Duration,
}

fn usage(message: String) -> CliError {
    CliError::usage(message)
}

/// Checks the target and opens (or lays out) the test file.
pub fn prepare(target: &Path, options: &TargetOptions) -> Result<TestFile, CliError> {
    let shown = target.display();
    let metadata = std::fs::metadata(target).map_err(|error| {
        usage(format!(
            "target {shown}: {error}; give an existing directory (tune lays out its own file \
             in it), a regular file, or a block device with --allow-device"
        ))
    })?;
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        lay_out(target, options)
    } else if file_type.is_file() {
        crate::bench::target::refuse_pseudo_file(target)?;
        open_existing(target, TargetKind::RegularFile, options.allow_write)
    } else if file_type.is_block_device() {
        if !options.allow_device {
            return Err(usage(format!(
                "target {shown} is a block device; measuring a raw device needs --allow-device \
                 (reads only; --allow-write as well destroys its data)"
            )));
        }
        refuse_if_mounted(target, metadata.rdev())?;
        open_existing(target, TargetKind::BlockDevice, options.allow_write)
    } else {
        Err(usage(format!(
            "target {shown} is neither a directory, a regular file nor a block device"
        )))
    }
}

fn open_direct(path: &Path, write: bool, create: bool) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(write).custom_flags(libc::O_DIRECT);
    if create {
        options.create_new(true);
    }
    options.open(path)
}

/// The error for a failed open, naming the likely fix.
fn open_error(path: &Path, error: &io::Error, creating: bool) -> CliError {
    let shown = path.display();
    let fix = match error.raw_os_error() {
        Some(libc::EINVAL) => {
            "the filesystem does not support O_DIRECT (ramfs, tmpfs on old kernels, some FUSE \
             and overlay filesystems); tune measures the device, so give a directory on a disk \
             filesystem (ext4, xfs, btrfs)"
        }
        Some(libc::EACCES | libc::EPERM) if creating => {
            "permission denied; give a directory you can write to, or run as a user who can"
        }
        Some(libc::EACCES | libc::EPERM) => {
            "permission denied; run as a user who can open it (root for block devices)"
        }
        Some(libc::EROFS) => "the filesystem is read-only; give a writable directory",
        Some(libc::EEXIST) => "a file of that name exists already; remove it (a stale tune run?)",
        _ => "check the path",
    };
    usage(format!("cannot open {shown} with O_DIRECT: {error}; {fix}"))
}

fn open_existing(path: &Path, kind: TargetKind, allow_write: bool) -> Result<TestFile, CliError> {
    let opened = if kind == TargetKind::BlockDevice {
        open_exclusive(path, allow_write, libc::O_DIRECT)
    } else {
        open_direct(path, allow_write, false)
    };
    let file = opened.map_err(|error| {
        if kind == TargetKind::BlockDevice && error.raw_os_error() == Some(libc::EBUSY) {
            device_in_use(
                path,
                if allow_write {
                    "tune --allow-write would overwrite its data"
                } else {
                    "tune would measure it while something else uses it"
                },
            )
        } else {
            open_error(path, &error, false)
        }
    })?;
    if kind == TargetKind::RegularFile {
        crate::lifecycle::lock_target(&file, path)?;
    }
    let device = device::device_of(&file).map_err(|error| usage(error.to_string()))?;
    let alignment = device::direct_io_alignment(&file, &device);
    let end = match kind {
        TargetKind::BlockDevice => block_device_bytes(&file),
        _ => file.metadata().map(|metadata| metadata.len()),
    }
    .map_err(|error| {
        usage(format!(
            "cannot find the size of {}: {error}",
            path.display()
        ))
    })?;
    if kind == TargetKind::RegularFile {
        refuse_unwritten(&file, path, end)?;
    }
    let size_bytes = end / (1 << 20) * (1 << 20);
    if size_bytes < MINIMUM_SIZE_BYTES {
        return Err(usage(format!(
            "{} holds {end} bytes; tune needs at least {} MiB to spread its requests; give a \
             directory instead (tune lays out its own file)",
            path.display(),
            MINIMUM_SIZE_BYTES >> 20
        )));
    }
    Ok(TestFile {
        file,
        path: path.to_path_buf(),
        size_bytes,
        writable: allow_write,
        device,
        alignment_bytes: alignment.memory_bytes as usize,
        kind,
        remove_on_drop: None,
    })
}

/// Refuses a regular file with space that holds no written data: a hole (a
/// sparse file) or space reserved with `fallocate` and never written. O_DIRECT
/// reads of it return zeros without reading the device, so tune would measure
/// the kernel. Holes show as fewer allocated blocks than the size; both show
/// to `SEEK_HOLE` on filesystems that report them (ext4, xfs, btrfs), which
/// count a reserved, unwritten range as a hole.
fn refuse_unwritten(file: &File, path: &Path, size_bytes: u64) -> Result<(), CliError> {
    let allocated_bytes = file
        .metadata()
        .map(|metadata| metadata.blocks() * 512)
        .unwrap_or(u64::MAX);
    let first_hole = if allocated_bytes < size_bytes {
        Some(None)
    } else {
        rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(0))
            .ok()
            .filter(|offset| *offset < size_bytes)
            .map(Some)
    };
    let Some(offset) = first_hole else {
        return Ok(());
    };
    let shown = path.display();
    let from = offset.map_or(String::new(), |offset| format!(" from byte {offset}"));
    Err(usage(format!(
        "{shown} has space with no data written in it{from} (a hole, or space reserved with \
         fallocate): O_DIRECT reads of it return zeros without reading the device, so tune \
         would measure the kernel, not the disk; write real data into it first (dd \
         if=/dev/urandom of={shown} bs=1M count={} oflag=direct conv=notrunc, or fio with \
         --rw=write), or give a directory (tune lays out its own data there)",
        size_bytes.div_ceil(1 << 20)
    )))
}

/// Refuses a block device that is mounted, or whose partition is.
fn refuse_if_mounted(target: &Path, rdev: u64) -> Result<(), CliError> {
    match mount_of(rdev) {
        Some(Mount {
            source,
            mount_point,
        }) => Err(usage(format!(
            "{} is mounted ({source} on {mount_point}); tune refuses mounted devices; give a \
             directory on it instead",
            target.display()
        ))),
        None => Ok(()),
    }
}

/// Free bytes for unprivileged users in the filesystem of `directory`;
/// `None` when unknown, as on a filesystem that reports no size at all
/// (ramfs: zero blocks, zero free, yet it takes files).
fn free_bytes(directory: &Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(directory).ok()?;
    if stats.f_blocks == 0 {
        return None;
    }
    Some(stats.f_bavail * stats.f_frsize)
}

/// How large a file to lay out: `--size`, or 1 GiB capped at a quarter of the
/// free space, rounded down to whole MiB.
pub fn layout_size(requested: Option<u64>, free: Option<u64>) -> Result<u64, CliError> {
    let mib = 1u64 << 20;
    let size = match (requested, free) {
        (Some(requested), Some(free)) if requested > free => {
            return Err(CliError::usage(format!(
                "not enough space: --size asks for {} MiB, the filesystem has {} MiB free; \
                 free some space or give a smaller --size",
                requested / mib,
                free / mib
            )))
        }
        (Some(requested), _) => requested,
        (None, Some(free)) => DEFAULT_SIZE_BYTES.min(free / 4),
        (None, None) => DEFAULT_SIZE_BYTES,
    };
    let size = size / mib * mib;
    if size < MINIMUM_SIZE_BYTES {
        return Err(CliError::usage(format!(
            "not enough space: tune needs a test file of at least {} MiB (got {} MiB to work \
             with); free some space or give a larger --size",
            MINIMUM_SIZE_BYTES / mib,
            size / mib
        )));
    }
    Ok(size)
}

/// A file this run created, removed when dropped unless disarmed (once a
/// [`TestFile`] owns its removal).
struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            crate::lifecycle::remove_paths(&[path]);
        }
    }
}

/// Looks up, with `find_device`, the device of `file`, which this run just
/// created at `path`; when that fails the file is removed before the error
/// returns, as nothing else would remove it yet.
fn device_of_created<T>(
    file: &File,
    path: &Path,
    find_device: impl FnOnce(&File) -> io::Result<T>,
) -> Result<T, CliError> {
    let created = RemoveOnDrop(Some(path.to_path_buf()));
    let device = find_device(file).map_err(|error| usage(error.to_string()))?;
    created.disarm();
    Ok(device)
}

/// Removes what killed runs left in `directory`, then sizes the test file
/// from the free space `free` finds: the leftovers' space counts as free.
fn size_after_cleanup(
    directory: &Path,
    requested: Option<u64>,
    free: impl FnOnce(&Path) -> Option<u64>,
) -> Result<u64, CliError> {
    crate::lifecycle::note_leftovers(directory);
    layout_size(requested, free(directory))
        .map_err(|message| usage(format!("{}: {message}", directory.display())))
}

fn lay_out(directory: &Path, options: &TargetOptions) -> Result<TestFile, CliError> {
    let size_bytes = size_after_cleanup(directory, options.size_bytes, free_bytes)?;
    let path = directory.join(format!(".tailguard-tune-{}.data", std::process::id()));
    let file = open_direct(&path, true, true).map_err(|error| {
        // A filesystem that refuses O_DIRECT (ramfs) creates the file before
        // it refuses: unless the name was taken, the file is this run's.
        if error.raw_os_error() != Some(libc::EEXIST) {
            let _ = std::fs::remove_file(&path);
        }
        open_error(&path, &error, true)
    })?;
    let device = device_of_created(&file, &path, device::device_of)?;
    let mut test = TestFile {
        device,
        file,
        path: path.clone(),
        size_bytes,
        writable: true,
        alignment_bytes: 4096,
        kind: TargetKind::Directory,
        remove_on_drop: Some(path),
    };
    // The owner's lock: the file is this run's while `test.file` is open.
    crate::lifecycle::hold(&test.file)
        .map_err(|error| usage(format!("cannot lock {}: {error}", test.path.display())))?;
    test.alignment_bytes =
        device::direct_io_alignment(&test.file, &test.device).memory_bytes as usize;
    // Reserve the space first: a full disk fails now, with a clear message.
    let reserved = rustix::fs::fallocate(
        &test.file,
        rustix::fs::FallocateFlags::empty(),
        0,
        size_bytes,
    );
    if reserved == Err(rustix::io::Errno::NOSPC) {
        return Err(usage(format!(
            "not enough space in {} for a {} MiB test file; free some space or give a smaller \
             --size",
            directory.display(),
            size_bytes >> 20
        )));
    }
    let written = write_data(&test, options.layout_budget)?;
    let written = written / (1 << 20) * (1 << 20);
    if written < MINIMUM_SIZE_BYTES {
        return Err(usage(format!(
            "laying out the test file wrote only {} MiB in {:.1} s; the device is very slow: \
             give a longer --duration",
            written >> 20,
            options.layout_budget.as_secs_f64()
        )));
    }
    if written < size_bytes {
        test.file
            .set_len(written)
            .map_err(|error| usage(format!("cannot shrink the test file: {error}")))?;
        test.size_bytes = written;
    }
    Ok(test)
}

/// Fills the file with incompressible data, 1 MiB at a time, until it is full
/// or the budget is spent. Returns the bytes written.
fn write_data(test: &TestFile, budget: Duration) -> Result<u64, CliError> {
    let deadline = Instant::now() + budget;
    let mut chunk = AlignedBuffer::new(LAYOUT_CHUNK_BYTES, test.alignment_bytes.max(4096))
        .map_err(|error| usage(format!("cannot allocate a layout buffer: {error}")))?;
    let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(std::process::id());
    let mut written = 0u64;
    while written < test.size_bytes && Instant::now() < deadline {
        if interrupted() {
            return Err(CliError::interrupted());
        }
        fill_random(&mut chunk, &mut state);
        test.file.write_all_at(&chunk, written).map_err(|error| {
            let fix = if error.raw_os_error() == Some(libc::ENOSPC) {
                "not enough space; free some or give a smaller --size"
            } else {
                "check the disk"
            };
            usage(format!(
                "laying out {} failed at {} MiB: {error}; {fix}",
                test.path.display(),
                written >> 20
            ))
        })?;
        written += LAYOUT_CHUNK_BYTES as u64;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_file_whose_device_is_unknown_is_removed() {
        let path =
            std::env::temp_dir().join(format!(".tailguard-tune-test-{}.data", std::process::id()));
        let file = File::create(&path).unwrap();
        let error = device_of_created(&file, &path, |_| -> io::Result<u32> {
            Err(io::Error::other("no such device"))
        })
        .unwrap_err();
        assert!(error.to_string().contains("no such device"), "{error}");
        assert!(!path.exists(), "the failed layout left {}", path.display());
        // Found, it stays for the test file to own.
        let file = File::create(&path).unwrap();
        assert_eq!(device_of_created(&file, &path, |_| Ok(7)).unwrap(), 7);
        assert!(path.exists());
        std::fs::remove_file(&path).unwrap();
    }

    /// A scratch file of `size_bytes` made by `make`, on the disk under
    /// /var/tmp; `None` (the reason printed) where O_DIRECT is refused.
    fn scratch_target(name: &str, size_bytes: u64, make: impl FnOnce(&File)) -> Option<PathBuf> {
        let path = Path::new("/var/tmp").join(format!(
            "tailguard-tune-test-{name}-{}.bin",
            std::process::id()
        ));
        let file = File::create(&path).unwrap();
        file.set_len(size_bytes).unwrap();
        make(&file);
        file.sync_all().unwrap();
        if let Err(error) = open_direct(&path, false, false) {
            std::fs::remove_file(&path).unwrap();
            assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
            eprintln!("skipped: /var/tmp refuses O_DIRECT ({error})");
            return None;
        }
        Some(path)
    }

    fn open_regular(path: &Path) -> Result<TestFile, CliError> {
        let opened = open_existing(path, TargetKind::RegularFile, false);
        std::fs::remove_file(path).unwrap();
        opened
    }

    #[test]
    fn a_file_with_unwritten_space_is_refused_and_a_written_one_taken() {
        let size_bytes = 32 << 20;
        if let Some(sparse) = scratch_target("sparse", size_bytes, |_| {}) {
            let error = open_regular(&sparse)
                .err()
                .expect("a sparse file is refused");
            assert!(error.message.contains("no data written"), "{error}");
            assert!(error.message.contains("dd if=/dev/urandom"), "{error}");
        }
        let reserve = |file: &File| {
            rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size_bytes)
                .unwrap();
        };
        if let Some(reserved) = scratch_target("reserved", size_bytes, reserve) {
            // Where the filesystem has no unwritten extents (tmpfs allocates
            // zeroed pages), a reserved file reads from memory either way.
            match open_regular(&reserved) {
                Err(error) => assert!(error.message.contains("fallocate"), "{error}"),
                Ok(_) => eprintln!("note: this filesystem reports no unwritten extents"),
            }
        }
        let write = |mut file: &File| {
            use std::io::Write;
            let chunk = vec![0x5a_u8; 1 << 20];
            for _ in 0..size_bytes >> 20 {
                file.write_all(&chunk).unwrap();
            }
        };
        if let Some(written) = scratch_target("written", size_bytes, write) {
            let test = open_regular(&written).expect("a written file is taken");
            assert_eq!(test.size_bytes, size_bytes);
        }
    }

    #[test]
    fn free_space_is_measured_after_a_killed_run_s_file_is_removed() {
        let directory = std::env::temp_dir().join(format!(
            "tailguard-tune-cleanup-test-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&directory).unwrap();
        // Named as tune names its file, by a process id no process has.
        let leftover = directory.join(".tailguard-tune-999999999.data");
        std::fs::write(&leftover, b"stale").unwrap();
        let mut leftover_when_measured = None;
        let size = size_after_cleanup(&directory, None, |_| {
            leftover_when_measured = Some(leftover.exists());
            Some(1 << 40)
        });
        std::fs::remove_dir_all(&directory).unwrap();
        assert_eq!(size, Ok(DEFAULT_SIZE_BYTES));
        assert_eq!(
            leftover_when_measured,
            Some(false),
            "free space was measured with the leftover still there"
        );
    }

    #[test]
    fn the_default_size_is_a_quarter_of_free_space_up_to_one_gib() {
        let gib = 1u64 << 30;
        assert_eq!(layout_size(None, Some(100 * gib)), Ok(gib));
        assert_eq!(layout_size(None, Some(gib)), Ok(gib / 4));
        assert_eq!(layout_size(None, None), Ok(gib));
        assert_eq!(layout_size(Some(64 << 20), Some(gib)), Ok(64 << 20));
    }

    #[test]
    fn too_little_space_is_a_clear_error() {
        let error = layout_size(None, Some(32 << 20)).unwrap_err();
        assert!(error.message.contains("not enough space"), "{error}");
        let error = layout_size(Some(1 << 30), Some(100 << 20)).unwrap_err();
        assert!(error.message.contains("--size"), "{error}");
        let error = layout_size(Some(1 << 20), None).unwrap_err();
        assert!(error.message.contains("at least 16 MiB"), "{error}");
    }
}
