//! Mapping files to the devices that serve them.
//!
//! The engine keeps one dispatcher and one in-flight budget per device, so
//! every file it opens must first be mapped to a [`DeviceId`]. The mapping
//! starts from the file's `st_dev` (or, for a block device node opened
//! directly, its `st_rdev`) and looks the number up in sysfs under
//! `/sys/dev/block/MAJ:MIN`, a symlink into `/sys/devices/...`. If the target
//! directory holds a `partition` file, the number names a partition and the
//! whole disk is its parent directory: its `dev` file gives the disk's
//! `MAJ:MIN`, and the disk's `queue/` directory gives the attributes. Two files
//! on one disk therefore share a [`DeviceId`] even when they live on
//! different partitions, because a partition has no queue of its own. Whole
//! disks of every kind the kernel lists under `/sys/block` (virtio `vdX`,
//! SCSI `sdX`, NVMe namespaces, loop and device-mapper `dm-N` devices) are
//! handled the same way. A stacked device (dm, md, loop) is treated as a
//! device of its own: its queue is what the engine submits to, even though
//! the kernel may forward the requests to a disk that other files use too.
//! What it forwards to is recorded in [`DeviceInfo::backing`] (a loop device's
//! backing file's device, a dm/md device's first disk in `slaves/`), so that
//! the default profile is chosen by the hardware at the bottom of the stack:
//! a loop device's own `rotational` flag is 1 whatever it sits on on older
//! kernels, and on newer ones copied from the disk under its file (0 over
//! tmpfs), so it is not read as the hardware's.
//!
//! The queue attributes are read from `queue/rotational`,
//! `queue/logical_block_size`, `queue/max_sectors_kb`, `queue/nr_requests`
//! and `queue/write_cache`. A missing or unreadable attribute is not an
//! error, since kernels differ in what they expose; it falls back to a
//! documented default ([`DEFAULT_ROTATIONAL`], [`DEFAULT_LOGICAL_BLOCK_SIZE`],
//! [`DEFAULT_MAX_REQUEST_BYTES`], [`DEFAULT_NR_REQUESTS`], and `None` for the
//! write cache).
//!
//! btrfs reports an anonymous device number, one per subvolume, so `st_dev`
//! does not name its disk. A file on btrfs is mapped through the
//! filesystem's id instead (the `BTRFS_IOC_FS_INFO` ioctl): sysfs lists the
//! filesystem's member devices under `/sys/fs/btrfs/<fsid>/devices`, and the
//! first of them (by name) is looked up as above. Files in every subvolume of
//! one filesystem therefore share its disk's [`DeviceId`], with the files of
//! other filesystems on that disk; a filesystem over several disks is
//! served as its first one, as a dm device is judged by its first disk.
//!
//! A filesystem without a block device (tmpfs, overlay, proc, NFS, and a
//! btrfs whose members cannot be found) has
//! major number 0 in `st_dev`, or a number that sysfs does not list. A
//! number whose sysfs entry cannot be read (sysfs not mounted, or hidden by
//! AppArmor, SELinux or a sandbox: EACCES, ENOTDIR, a partition without a
//! readable parent) is treated the same way, with the error logged at debug
//! level: a file that the process may open is scheduled, with default
//! attributes, rather than refused. Each
//! such filesystem becomes one pseudo device: its id is `st_dev` with
//! [`PSEUDO_DEVICE_TAG`] (bit 63) set, which no real `dev_t` can carry
//! because the kernel encodes device numbers in 32 bits; its name is the
//! filesystem type from `statfs` plus the device number, such as
//! `tmpfs:0:27`. The sysfs root is a parameter of the internal lookup
//! function, so the partition logic can be tested against a fake tree.
//!
//! [`direct_io_alignment`] asks the kernel, through `statx(STATX_DIOALIGN)`,
//! which memory and file-offset alignment a file needs for `O_DIRECT`, and
//! falls back to the device's logical block size when the kernel does not
//! say.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Identifies a device: files with equal ids share a dispatcher and a budget.
///
/// For a block device this is the whole disk's `dev_t` (`makedev(maj, min)`);
/// for a filesystem without one it is `st_dev | PSEUDO_DEVICE_TAG`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u64);

impl DeviceId {
    /// Whether this id names a pseudo device (a filesystem without a block
    /// device) rather than a real disk.
    pub fn is_pseudo(self) -> bool {
        self.0 & PSEUDO_DEVICE_TAG != 0
    }
}

/// Bit set in the [`DeviceId`] of every pseudo device. The kernel's `dev_t`
/// is 32 bits wide (12-bit major, 20-bit minor), and glibc's 64-bit encoding
/// of it never reaches bit 63, so a tagged id cannot equal a real one.
pub const PSEUDO_DEVICE_TAG: u64 = 1 << 63;

/// `queue/rotational` default when the file is missing: assume a spinning
/// disk, the conservative choice for a scheduler (less concurrency).
pub const DEFAULT_ROTATIONAL: bool = true;
/// `queue/logical_block_size` default, and the block size of pseudo devices.
pub const DEFAULT_LOGICAL_BLOCK_SIZE: u32 = 512;
/// `queue/max_sectors_kb` default (512 KiB), also used for pseudo devices.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 512 * 1024;
/// `queue/nr_requests` default: the kernel's `BLKDEV_DEFAULT_RQ`, also used
/// for pseudo devices.
pub const DEFAULT_NR_REQUESTS: u32 = 128;

const SYSFS_ROOT: &str = "/sys";

/// What the engine knows about the device behind a file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// The whole disk's `dev_t` for block devices; a tagged pseudo id for
    /// filesystems without one.
    pub id: DeviceId,
    /// Kernel name of the whole disk (`vda`, `nvme0n1`, `loop3`, `dm-0`), or
    /// `FSTYPE:MAJ:MIN` (such as `tmpfs:0:27`) for a pseudo device.
    pub name: String,
    /// False for pseudo devices.
    pub block_device: bool,
    /// `queue/rotational`; false for pseudo devices.
    pub rotational: bool,
    /// `queue/logical_block_size` in bytes (512 for pseudo devices).
    pub logical_block_size: u32,
    /// `queue/max_sectors_kb * 1024` (512 KiB for pseudo devices).
    pub max_request_bytes: u64,
    /// `queue/nr_requests`.
    pub nr_requests: u32,
    /// `queue/write_cache`: `Some(true)` for "write back", `Some(false)` for
    /// "write through", `None` when unknown (and for pseudo devices).
    pub write_cache: Option<bool>,
    /// For a stacked device, the device it forwards to: a loop device's backing
    /// file's device, or a device-mapper / md device's first underlying disk
    /// (`slaves/`). `None` for plain disks and pseudo devices.
    pub backing: Option<Box<DeviceInfo>>,
}

impl DeviceInfo {
    /// The device at the bottom of a stack (itself when not stacked): the one
    /// whose kind (rotational, virtual) says what the hardware is. A loop
    /// device's own flag depends on the kernel (1 whatever its backing file
    /// lives on, on older ones), so it is not taken as the hardware's.
    pub fn innermost(&self) -> &DeviceInfo {
        let mut device = self;
        while let Some(backing) = &device.backing {
            device = backing;
        }
        device
    }
}

/// How deep [`DeviceInfo::backing`] chains are followed (a loop device over a
/// file on a dm device over a disk is three).
const BACKING_DEPTH_MAX: u32 = 4;

/// Alignment that `O_DIRECT` requires of a file's I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirectIoAlignment {
    /// Required alignment of the memory buffer's address, in bytes.
    pub memory_bytes: u32,
    /// Required alignment of file offsets and lengths, in bytes.
    pub offset_bytes: u32,
}

/// Maps an open file to its device.
///
/// A file that is itself a block device node maps to that device (its
/// `st_rdev`); any other file maps to the device holding its filesystem.
pub fn device_of(file: &File) -> io::Result<DeviceInfo> {
    let fd = file.as_raw_fd();
    let describe = || match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
        Ok(path) => format!("file descriptor {fd} ({})", path.display()),
        Err(_) => format!("file descriptor {fd}"),
    };
    let meta = file.metadata().map_err(|e| context(e, &describe()))?;
    let (dev, block_node) = device_number(&meta);
    let fs_type = || fstatfs_type(file);
    let fsid = || btrfs_fsid(file);
    device_from_number(Path::new(SYSFS_ROOT), dev, block_node, fs_type, fsid)
        .map_err(|e| context(e, &describe()))
}

/// Maps a path (a file, a directory, or a block device node) to its device.
///
/// A block device node is not opened, so it needs no permission beyond
/// `stat`. On btrfs the path is opened for the filesystem's id (see the
/// module docs) in a way that neither blocks nor acts on a device: a regular
/// file or directory itself, anything else (a FIFO, a device node, a socket)
/// through its parent directory, without blocking.
pub fn device_of_path(path: &Path) -> io::Result<DeviceInfo> {
    let describe = || path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| context(e, &describe()))?;
    let (dev, block_node) = device_number(&meta);
    let fs_type = || statfs_type(path);
    // The ioctl needs an open file; one that cannot be opened is mapped as a
    // pseudo device.
    let fsid = || open_for_fs_ioctl(path, &meta).and_then(|file| btrfs_fsid(&file));
    device_from_number(Path::new(SYSFS_ROOT), dev, block_node, fs_type, fsid)
        .map_err(|e| context(e, &describe()))
}

/// Opens `path`, described by `meta`, for an ioctl about its filesystem.
///
/// A regular file or a directory is opened itself. Anything else is
/// represented by its parent directory, which holds it on the same
/// filesystem (unless the path is a mount point of its own): opening a FIFO
/// waits for a writer, opening or closing a character device may act on
/// the device (a watchdog starts, a tape rewinds), and a socket cannot be
/// opened at all. The open is read-only, non-blocking and takes no controlling
/// terminal, so that a path replaced by a FIFO or a terminal after `meta` was
/// read still cannot hang or change the process. `None` when the open fails.
fn open_for_fs_ioctl(path: &Path, meta: &std::fs::Metadata) -> Option<File> {
    use rustix::fs::{Mode, OFlags};
    let kind = meta.file_type();
    let target = if kind.is_file() || kind.is_dir() {
        path
    } else {
        match path.parent() {
            Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
            Some(parent) => parent,
            None => path,
        }
    };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    rustix::fs::open(target, flags, Mode::empty())
        .ok()
        .map(File::from)
}

/// The alignment `O_DIRECT` I/O on `file` needs.
///
/// Uses `statx(STATX_DIOALIGN)` when the kernel reports it with nonzero
/// values (kernel 6.1 and later, on filesystems that implement it). When the
/// kernel does not report it, or reports 0 (direct I/O unsupported on this
/// file: the `O_DIRECT` open fails, or, as on ext4 with `data=journal`, the
/// filesystem serves the requests through its cache), both alignments fall
/// back to the device's logical block size.
pub fn direct_io_alignment(file: &File, device: &DeviceInfo) -> DirectIoAlignment {
    let fallback = DirectIoAlignment {
        memory_bytes: device.logical_block_size,
        offset_bytes: device.logical_block_size,
    };
    // An empty path with AT_EMPTY_PATH makes statx describe the open
    // descriptor itself.
    let Ok(stx) = rustix::fs::statx(
        file,
        c"",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    ) else {
        return fallback;
    };
    if stx.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() == 0
        || stx.stx_dio_mem_align == 0
        || stx.stx_dio_offset_align == 0
    {
        return fallback;
    }
    DirectIoAlignment {
        memory_bytes: stx.stx_dio_mem_align,
        offset_bytes: stx.stx_dio_offset_align,
    }
}

fn context(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("cannot map {what} to a device: {err}"))
}

/// The device number a file is mapped by, and whether the file is a block
/// device node: a node's `st_rdev` (the device it names), any other file's
/// `st_dev` (the device holding it).
fn device_number(meta: &std::fs::Metadata) -> (libc::dev_t, bool) {
    if meta.file_type().is_block_device() {
        (meta.rdev(), true)
    } else {
        (meta.dev(), false)
    }
}

/// The common part of [`device_of`] and [`device_of_path`]: resolves the
/// device number `dev` ([`device_number`]) against `sysfs`; `btrfs_fsid`
/// gives a btrfs filesystem's id (see the module docs).
///
/// A sysfs lookup that fails, whatever the error, maps a file to a pseudo
/// device, as a number sysfs does not list does. A block device node has no
/// filesystem to stand for it, so for one either is an error.
fn device_from_number(
    sysfs: &Path,
    dev: libc::dev_t,
    block_node: bool,
    fs_type: impl FnOnce() -> io::Result<i64>,
    btrfs_fsid: impl FnOnce() -> Option<[u8; 16]>,
) -> io::Result<DeviceInfo> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut lookup_error = None;
    if major != 0 {
        match block_device_info(sysfs, major, minor) {
            Ok(Some(info)) => return Ok(info),
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(
                    %error,
                    major,
                    minor,
                    sysfs = %sysfs.display(),
                    "cannot look the device up in sysfs; mapping it as a pseudo device"
                );
                lookup_error = Some(error);
            }
        }
    }
    if block_node {
        let block = sysfs.join("dev/block");
        return Err(match lookup_error {
            Some(error) => io::Error::new(
                error.kind(),
                format!(
                    "cannot look block device {major}:{minor} up under {}: {error}; \
                     allow the process to read sysfs (AppArmor, SELinux or sandbox policy)",
                    block.display()
                ),
            ),
            None => io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "block device {major}:{minor} is not listed under {}; \
                     check that the device exists and that sysfs is mounted at {}",
                    block.display(),
                    sysfs.display()
                ),
            ),
        });
    }
    let fs_type = fs_type()?;
    if fs_type & 0xffff_ffff == BTRFS_MAGIC {
        if let Some(info) = btrfs_fsid().and_then(|fsid| btrfs_disk(sysfs, &fsid)) {
            return Ok(info);
        }
    }
    Ok(pseudo_device(dev, fs_type))
}

/// btrfs's `statfs` magic number.
const BTRFS_MAGIC: i64 = 0x9123_683e;

/// `struct btrfs_ioctl_fs_info_args` of `linux/btrfs.h` (1024 bytes).
#[repr(C)]
struct BtrfsFsInfo {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    nodesize: u32,
    sectorsize: u32,
    clone_alignment: u32,
    csum_type: u16,
    csum_size: u16,
    /// In: which optional fields to fill (none); out: which were.
    flags: u64,
    generation: u64,
    metadata_uuid: [u8; 16],
    reserved: [u8; 944],
}

/// The id of the btrfs filesystem holding `file` (`BTRFS_IOC_FS_INFO`), or
/// `None` where the ioctl fails (not btrfs, or refused).
fn btrfs_fsid(file: &File) -> Option<[u8; 16]> {
    const FS_INFO: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<BtrfsFsInfo>(0x94, 31);
    let mut info = BtrfsFsInfo {
        max_id: 0,
        num_devices: 0,
        fsid: [0; 16],
        nodesize: 0,
        sectorsize: 0,
        clone_alignment: 0,
        csum_type: 0,
        csum_size: 0,
        flags: 0,
        generation: 0,
        metadata_uuid: [0; 16],
        reserved: [0; 944],
    };
    // SAFETY: BTRFS_IOC_FS_INFO reads and writes one `btrfs_ioctl_fs_info_args`,
    // which `BtrfsFsInfo` lays out exactly (repr(C), 1024 bytes), initialised
    // with no optional field asked for; on another filesystem the opcode is
    // refused.
    let updater = unsafe { rustix::ioctl::Updater::<FS_INFO, BtrfsFsInfo>::new(&mut info) };
    // SAFETY: as above: the opcode and the argument's type match.
    unsafe { rustix::ioctl::ioctl(file, updater) }.ok()?;
    Some(info.fsid)
}

/// The disk under the btrfs filesystem `fsid`: its first member device, by
/// name, under `sysfs/fs/btrfs/<fsid>/devices`, mapped as any block device.
fn btrfs_disk(sysfs: &Path, fsid: &[u8; 16]) -> Option<DeviceInfo> {
    let hex: String = fsid.iter().map(|byte| format!("{byte:02x}")).collect();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let devices = sysfs.join("fs/btrfs").join(uuid).join("devices");
    let mut members: Vec<_> = std::fs::read_dir(devices)
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    members.sort();
    let dev = std::fs::read_to_string(members.first()?.join("dev")).ok()?;
    let (major, minor) = parse_maj_min(dev.trim())?;
    block_device_info(sysfs, major, minor).ok().flatten()
}

/// Looks `major:minor` up under `sysfs` (normally `/sys`). Returns `None`
/// when sysfs does not list the number (a filesystem without a block
/// device), and an error when the lookup fails otherwise (an unreadable or
/// malformed entry), which [`device_from_number`] reports.
fn block_device_info(sysfs: &Path, major: u32, minor: u32) -> io::Result<Option<DeviceInfo>> {
    let link = sysfs.join(format!("dev/block/{major}:{minor}"));
    let dir = match std::fs::canonicalize(&link) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (disk_dir, id) = if dir.join("partition").exists() {
        let parent = dir.parent().map(Path::to_path_buf).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("partition {} has no parent disk in sysfs", dir.display()),
            )
        })?;
        let dev_file = parent.join("dev");
        let text = std::fs::read_to_string(&dev_file).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot read whole disk number {}: {e}", dev_file.display()),
            )
        })?;
        let (maj, min) = parse_maj_min(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds {:?}, not MAJ:MIN",
                    dev_file.display(),
                    text.trim()
                ),
            )
        })?;
        (parent, libc::makedev(maj, min))
    } else {
        (dir, libc::makedev(major, minor))
    };
    let mut info = read_queue(&disk_dir, id);
    info.backing = backing_device(sysfs, &disk_dir, 0).map(Box::new);
    Ok(Some(info))
}

/// The device a stacked disk forwards to, if `disk_dir` is a loop device with
/// a backing file or a dm/md device with underlying disks. Lookup failures
/// (a deleted backing file, a race with teardown) leave it unknown: the device
/// is then judged by its own attributes.
fn backing_device(sysfs: &Path, disk_dir: &Path, depth: u32) -> Option<DeviceInfo> {
    if depth >= BACKING_DEPTH_MAX {
        return None;
    }
    let backing_file = disk_dir.join("loop/backing_file");
    // Bytes, not text: a backing file's path need not be UTF-8.
    if let Ok(bytes) = std::fs::read(&backing_file) {
        let path = Path::new(std::ffi::OsStr::from_bytes(
            bytes.strip_suffix(b"\n").unwrap_or(&bytes),
        ));
        let meta = std::fs::metadata(path).ok()?;
        return nested_device(sysfs, device_number(&meta).0, depth);
    }
    let mut slaves: Vec<_> = std::fs::read_dir(disk_dir.join("slaves"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .collect();
    slaves.sort_by_key(|entry| entry.file_name());
    let first = slaves.first()?;
    let text = std::fs::read_to_string(first.path().join("dev")).ok()?;
    let (major, minor) = parse_maj_min(&text)?;
    nested_device(sysfs, libc::makedev(major, minor), depth)
}

/// [`block_device_info`] for a device under a stack, one level deeper.
fn nested_device(sysfs: &Path, dev: libc::dev_t, depth: u32) -> Option<DeviceInfo> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return None;
    }
    let link = sysfs.join(format!("dev/block/{major}:{minor}"));
    let dir = std::fs::canonicalize(link).ok()?;
    let disk_dir = if dir.join("partition").exists() {
        dir.parent()?.to_path_buf()
    } else {
        dir
    };
    let text = std::fs::read_to_string(disk_dir.join("dev")).ok()?;
    let (disk_major, disk_minor) = parse_maj_min(&text)?;
    let mut info = read_queue(&disk_dir, libc::makedev(disk_major, disk_minor));
    info.backing = backing_device(sysfs, &disk_dir, depth + 1).map(Box::new);
    Some(info)
}

fn read_queue(disk_dir: &Path, id: libc::dev_t) -> DeviceInfo {
    let name = disk_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let queue = disk_dir.join("queue");
    let attr = |file: &str| -> Option<String> {
        std::fs::read_to_string(queue.join(file))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let number = |file: &str| -> Option<u64> { attr(file)?.parse().ok() };
    DeviceInfo {
        id: DeviceId(id),
        name,
        block_device: true,
        rotational: number("rotational")
            .map(|v| v != 0)
            .unwrap_or(DEFAULT_ROTATIONAL),
        logical_block_size: number("logical_block_size")
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .unwrap_or(DEFAULT_LOGICAL_BLOCK_SIZE),
        max_request_bytes: number("max_sectors_kb")
            .and_then(|kb| kb.checked_mul(1024))
            .filter(|&v| v > 0)
            .unwrap_or(DEFAULT_MAX_REQUEST_BYTES),
        nr_requests: number("nr_requests")
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .unwrap_or(DEFAULT_NR_REQUESTS),
        write_cache: attr("write_cache").and_then(|s| parse_write_cache(&s)),
        backing: None,
    }
}

fn parse_maj_min(text: &str) -> Option<(u32, u32)> {
    let (maj, min) = text.trim().split_once(':')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

fn parse_write_cache(text: &str) -> Option<bool> {
    match text.trim() {
        "write back" => Some(true),
        "write through" => Some(false),
        _ => None,
    }
}

fn pseudo_device(dev: libc::dev_t, fs_type: i64) -> DeviceInfo {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    DeviceInfo {
        id: DeviceId(dev | PSEUDO_DEVICE_TAG),
        name: format!("{}:{major}:{minor}", fs_type_name(fs_type)),
        block_device: false,
        rotational: false,
        logical_block_size: DEFAULT_LOGICAL_BLOCK_SIZE,
        max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        nr_requests: DEFAULT_NR_REQUESTS,
        write_cache: None,
        backing: None,
    }
}

/// A short name for a `statfs` `f_type` magic number; unknown types print as
/// hexadecimal.
fn fs_type_name(magic: i64) -> String {
    let known: &[(i64, &str)] = &[
        (0x0102_1994, "tmpfs"),
        (0x794c_7630, "overlay"),
        (0x9fa0, "proc"),
        (0x6265_6572, "sysfs"),
        (0x1373, "devtmpfs"),
        (0x6969, "nfs"),
        (0x6573_5546, "fuse"),
        (0x9123_683e, "btrfs"),
        (0x2fc1_2fc1, "zfs"),
        (0x6367_7270, "cgroup2"),
        (0x0027_e0eb, "cgroup"),
        (0x9584_58f6, "hugetlbfs"),
        (0x1cd1, "devpts"),
        (0x6462_6720, "debugfs"),
        (0x7472_6163, "tracefs"),
        (0xef53, "ext4"),
        (0x5846_5342, "xfs"),
        (0xff53_4d42, "cifs"),
        (0x0102_1997, "9p"),
        (0x5346_414f, "afs"),
        (0x4244, "hfs"),
        (0x6e73_6673, "nsfs"),
        (0x5049_5045, "pipefs"),
        (0x534f_434b, "sockfs"),
    ];
    // statfs reports f_type as a signed word; compare its low 32 bits.
    let magic32 = magic & 0xffff_ffff;
    known
        .iter()
        .find(|(m, _)| *m == magic32)
        .map(|(_, n)| (*n).to_owned())
        .unwrap_or_else(|| format!("fs{magic32:#x}"))
}

/// `f_type` widened to `i64`: it is `i64` on x86_64 but `i32` or `u32` on
/// other targets, so the conversion is the identity only on some of them.
#[allow(clippy::useless_conversion)]
fn f_type_of(st: &rustix::fs::StatFs) -> i64 {
    i64::from(st.f_type)
}

fn fstatfs_type(file: &File) -> io::Result<i64> {
    Ok(f_type_of(&rustix::fs::fstatfs(file)?))
}

fn statfs_type(path: &Path) -> io::Result<i64> {
    // A path with an interior NUL byte cannot name a file: refuse it with the
    // message this function has always given, before rustix converts it.
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(crate::Error::invalid_config("path contains a NUL byte").into());
    }
    Ok(f_type_of(&rustix::fs::statfs(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    /// A scratch directory removed on drop, even when a test fails.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "tailguard-device-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Builds a fake sysfs with disk `sda` (8:0) holding partition `sda1`
    /// (8:1), plus `vdb` (252:16) whose queue lacks every attribute file.
    fn fake_sysfs(root: &Path) {
        let sda = root.join("devices/pci0000:00/host0/block/sda");
        write(&sda.join("dev"), "8:0\n");
        write(&sda.join("queue/rotational"), "1\n");
        write(&sda.join("queue/logical_block_size"), "4096\n");
        write(&sda.join("queue/max_sectors_kb"), "1280\n");
        write(&sda.join("queue/nr_requests"), "64\n");
        write(&sda.join("queue/write_cache"), "write through\n");
        write(&sda.join("sda1/dev"), "8:1\n");
        write(&sda.join("sda1/partition"), "1\n");
        let vdb = root.join("devices/virtio2/block/vdb");
        std::fs::create_dir_all(vdb.join("queue")).unwrap();
        write(&vdb.join("dev"), "252:16\n");
        std::fs::create_dir_all(root.join("dev/block")).unwrap();
        symlink(
            "../../devices/pci0000:00/host0/block/sda",
            root.join("dev/block/8:0"),
        )
        .unwrap();
        symlink(
            "../../devices/pci0000:00/host0/block/sda/sda1",
            root.join("dev/block/8:1"),
        )
        .unwrap();
        symlink(
            "../../devices/virtio2/block/vdb",
            root.join("dev/block/252:16"),
        )
        .unwrap();
    }

    #[test]
    fn a_btrfs_filesystem_maps_to_its_first_member_disk_in_fake_sysfs() {
        let scratch = Scratch::new("btrfs");
        fake_sysfs(&scratch.0);
        let fsid = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        let devices = scratch
            .0
            .join("fs/btrfs/12345678-9abc-def0-0123-456789abcdef/devices");
        std::fs::create_dir_all(&devices).unwrap();
        // Members link to their partition or disk directories.
        symlink("../../../../devices/virtio2/block/vdb", devices.join("vdb")).unwrap();
        symlink(
            "../../../../devices/pci0000:00/host0/block/sda/sda1",
            devices.join("sda1"),
        )
        .unwrap();
        let disk = btrfs_disk(&scratch.0, &fsid).expect("a member disk");
        assert_eq!(disk.name, "sda", "the first member by name, as its disk");
        assert_eq!(disk.id, DeviceId(libc::makedev(8, 0)));
        assert!(
            btrfs_disk(&scratch.0, &[0; 16]).is_none(),
            "an unknown fsid"
        );
    }

    #[test]
    fn partition_maps_to_whole_disk_in_fake_sysfs() {
        let scratch = Scratch::new("part");
        fake_sysfs(&scratch.0);
        let disk = block_device_info(&scratch.0, 8, 0).unwrap().unwrap();
        let part = block_device_info(&scratch.0, 8, 1).unwrap().unwrap();
        assert_eq!(disk, part);
        assert_eq!(part.id, DeviceId(libc::makedev(8, 0)));
        assert_eq!(part.name, "sda");
        assert!(part.block_device);
        assert!(part.rotational);
        assert_eq!(part.logical_block_size, 4096);
        assert_eq!(part.max_request_bytes, 1280 * 1024);
        assert_eq!(part.nr_requests, 64);
        assert_eq!(part.write_cache, Some(false));
    }

    #[test]
    fn missing_queue_files_use_defaults() {
        let scratch = Scratch::new("defaults");
        fake_sysfs(&scratch.0);
        let vdb = block_device_info(&scratch.0, 252, 16).unwrap().unwrap();
        assert_eq!(vdb.name, "vdb");
        assert_eq!(vdb.id, DeviceId(libc::makedev(252, 16)));
        assert_eq!(vdb.rotational, DEFAULT_ROTATIONAL);
        assert_eq!(vdb.logical_block_size, DEFAULT_LOGICAL_BLOCK_SIZE);
        assert_eq!(vdb.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
        assert_eq!(vdb.nr_requests, DEFAULT_NR_REQUESTS);
        assert_eq!(vdb.write_cache, None);
    }

    #[test]
    fn unlisted_number_is_not_a_block_device() {
        let scratch = Scratch::new("unlisted");
        fake_sysfs(&scratch.0);
        assert_eq!(block_device_info(&scratch.0, 8, 2).unwrap(), None);
    }

    #[test]
    fn partition_with_broken_parent_is_an_error() {
        let scratch = Scratch::new("broken");
        fake_sysfs(&scratch.0);
        write(
            &scratch.0.join("devices/pci0000:00/host0/block/sda/dev"),
            "garbage\n",
        );
        let err = block_device_info(&scratch.0, 8, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("not MAJ:MIN"), "{err}");
    }

    /// The `statfs` type the files mapped below report.
    const EXT4_MAGIC: i64 = 0xef53;

    fn map_file(sysfs: &Path, dev: libc::dev_t) -> io::Result<DeviceInfo> {
        device_from_number(sysfs, dev, false, || Ok(EXT4_MAGIC), || None)
    }

    #[test]
    fn a_sysfs_lookup_error_maps_a_file_to_a_pseudo_device() {
        let dev = libc::makedev(8, 1);
        let pseudo = pseudo_device(dev, EXT4_MAGIC);
        assert_eq!(pseudo.name, "ext4:8:1");

        // `dev/block` is a file where a directory belongs: the lookup fails
        // with ENOTDIR, an error other than NotFound, as EACCES is where a
        // security policy hides sysfs (root reads past file modes, so a
        // chmod cannot stand in for that here).
        let scratch = Scratch::new("notdir");
        write(&scratch.0.join("dev/block"), "");
        let err = block_device_info(&scratch.0, 8, 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
        assert_eq!(map_file(&scratch.0, dev).unwrap(), pseudo);

        // An entry that links to itself: ELOOP.
        let scratch = Scratch::new("loop");
        std::fs::create_dir_all(scratch.0.join("dev/block")).unwrap();
        symlink("8:1", scratch.0.join("dev/block/8:1")).unwrap();
        let err = block_device_info(&scratch.0, 8, 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        assert_eq!(map_file(&scratch.0, dev).unwrap(), pseudo);

        // A partition whose disk's number cannot be read.
        let scratch = Scratch::new("badparent");
        fake_sysfs(&scratch.0);
        write(
            &scratch.0.join("devices/pci0000:00/host0/block/sda/dev"),
            "garbage\n",
        );
        assert!(block_device_info(&scratch.0, 8, 1).is_err());
        assert_eq!(map_file(&scratch.0, dev).unwrap(), pseudo);

        // No sysfs at all.
        assert_eq!(map_file(&scratch.0.join("absent"), dev).unwrap(), pseudo);
    }

    #[test]
    fn a_block_node_that_sysfs_cannot_describe_is_an_error_naming_the_fix() {
        let scratch = Scratch::new("node");
        write(&scratch.0.join("dev/block"), "");
        let dev = libc::makedev(8, 1);
        let no_fs_type = || -> io::Result<i64> { panic!("a block node has no filesystem") };
        let err = device_from_number(&scratch.0, dev, true, no_fs_type, || None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotADirectory, "the cause's kind");
        assert!(
            err.to_string().contains("allow the process to read sysfs"),
            "{err}"
        );
        let err = device_from_number(&scratch.0.join("absent"), dev, true, no_fs_type, || None)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("sysfs is mounted"), "{err}");
    }

    /// Runs `lookup` on `fifo` on a thread and fails the test if it has not
    /// returned after 30 s: a hang detector, far beyond any normal open. On
    /// timeout a writer opens the FIFO, which releases an open waiting for one.
    fn returns_without_hanging<T: Send + 'static>(
        fifo: &Path,
        lookup: impl FnOnce(&Path) -> T + Send + 'static,
    ) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = fifo.to_path_buf();
        std::thread::spawn(move || sender.send(lookup(&path)));
        match receiver.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(value) => value,
            Err(_) => {
                let _writer = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(fifo);
                panic!("the lookup on the FIFO {} hangs", fifo.display());
            }
        }
    }

    #[test]
    fn a_fifo_is_never_opened_for_the_fs_ioctl() {
        let scratch = Scratch::new("fifo");
        let fifo = scratch.0.join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let meta = std::fs::metadata(&fifo).unwrap();
        assert!(meta.file_type().is_fifo());
        let opened = returns_without_hanging(&fifo, move |fifo| open_for_fs_ioctl(fifo, &meta));
        let opened = opened
            .expect("the FIFO's directory opens")
            .metadata()
            .unwrap();
        let dir = std::fs::metadata(&scratch.0).unwrap();
        assert!(
            opened.is_dir(),
            "the FIFO's parent directory is opened instead"
        );
        assert_eq!((opened.dev(), opened.ino()), (dir.dev(), dir.ino()));

        // The whole lookup returns too (on btrfs it reaches the open above).
        let info = returns_without_hanging(&fifo, device_of_path).unwrap();
        assert_eq!(info, device_of_path(&scratch.0).unwrap());
    }

    #[test]
    fn regular_files_and_directories_are_opened_themselves_devices_not() {
        let scratch = Scratch::new("opener");
        let file = scratch.0.join("file");
        write(&file, "x");
        for path in [file.as_path(), scratch.0.as_path()] {
            let meta = std::fs::metadata(path).unwrap();
            let opened = open_for_fs_ioctl(path, &meta).unwrap().metadata().unwrap();
            assert_eq!((opened.dev(), opened.ino()), (meta.dev(), meta.ino()));
        }
        // A character device stands for its directory: its open could act on
        // the device.
        let null = Path::new("/dev/null");
        let meta = std::fs::metadata(null).unwrap();
        let opened = open_for_fs_ioctl(null, &meta).unwrap().metadata().unwrap();
        let dev_dir = std::fs::metadata("/dev").unwrap();
        assert_eq!((opened.dev(), opened.ino()), (dev_dir.dev(), dev_dir.ino()));
        // A bare relative name stands for the current directory.
        let cwd = std::fs::metadata(".").unwrap();
        let relative = Path::new("tailguard-no-such-fifo");
        let opened = open_for_fs_ioctl(relative, &meta)
            .unwrap()
            .metadata()
            .unwrap();
        assert_eq!((opened.dev(), opened.ino()), (cwd.dev(), cwd.ino()));
    }

    #[test]
    fn parses_sysfs_values() {
        assert_eq!(parse_maj_min("259:3\n"), Some((259, 3)));
        assert_eq!(parse_maj_min("259"), None);
        assert_eq!(parse_write_cache("write back\n"), Some(true));
        assert_eq!(parse_write_cache("write through"), Some(false));
        assert_eq!(parse_write_cache("unknown"), None);
    }

    #[test]
    fn pseudo_ids_never_equal_real_dev_t() {
        let biggest_real = libc::makedev(0xfff, 0xf_ffff);
        assert_eq!(biggest_real & PSEUDO_DEVICE_TAG, 0);
        let pseudo = pseudo_device(libc::makedev(0, 27), 0x0102_1994);
        assert!(pseudo.id.is_pseudo());
        assert_eq!(pseudo.id.0 & !PSEUDO_DEVICE_TAG, libc::makedev(0, 27));
        assert_eq!(pseudo.name, "tmpfs:0:27");
        assert!(!pseudo.block_device);
        assert_eq!(fs_type_name(0x1234_5678), "fs0x12345678");
    }
}
