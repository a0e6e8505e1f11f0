//! Maps real files, pseudo filesystems, loop devices and partitions on this
//! machine to devices. Tests that need root, `losetup`, `addpart` or
//! `mkfs.ext4` print why they skip when those are missing; every loop device,
//! partition, mount and scratch file they create is removed by a guard's
//! `Drop`, even when an assertion fails.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use tailguard::buffer::{check_alignment, AlignedBuffer};
use tailguard::device::{device_of, device_of_path, direct_io_alignment, DeviceId, DeviceInfo};

/// Loop tests attach and detach devices; run them one at a time.
static LOOP_LOCK: Mutex<()> = Mutex::new(());

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("device-mapping-{tag}-{}", std::process::id()));
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

/// An attached loop device; its added partitions are deleted and the device
/// detached on drop.
struct LoopDevice {
    node: String,
    partitions: Vec<u32>,
}

impl LoopDevice {
    /// [`LoopDevice::attach`], or `None` with the reason printed (a test
    /// then skips).
    fn attach_or_skip(image: &Path) -> Option<LoopDevice> {
        Self::attach(image)
            .map_err(|error| println!("skipped: {error}"))
            .ok()
    }

    fn attach(image: &Path) -> Result<LoopDevice, String> {
        let node = run("losetup", &["-f", "--show", image.to_str().unwrap()])?;
        Ok(LoopDevice {
            node: node.trim().to_owned(),
            partitions: Vec::new(),
        })
    }

    /// Adds partition `number` covering `sectors` 512-byte sectors from
    /// `start` (BLKPG through `addpart`, which needs no partition-table
    /// parser in the kernel), and returns its node once it exists.
    fn add_partition(&mut self, number: u32, start: u64, sectors: u64) -> Result<String, String> {
        run(
            "addpart",
            &[
                &self.node,
                &number.to_string(),
                &start.to_string(),
                &sectors.to_string(),
            ],
        )?;
        self.partitions.push(number);
        let node = format!("{}p{number}", self.node);
        for _ in 0..100 {
            if Path::new(&node).exists() {
                return Ok(node);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("{node} did not appear"))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        for number in self.partitions.drain(..) {
            let _ = run("delpart", &[&self.node, &number.to_string()]);
        }
        if let Err(e) = run("losetup", &["-d", &self.node]) {
            eprintln!("warning: could not detach {}: {e}", self.node);
        }
    }
}

/// A mounted filesystem, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn new(node: &str, dir: &Path) -> Result<Mount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        run("mount", &[node, dir.to_str().unwrap()])?;
        Ok(Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = run("umount", &[self.0.to_str().unwrap()]) {
            eprintln!("warning: could not unmount {}: {e}", self.0.display());
        }
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Why loop tests cannot run here, if they cannot.
fn loop_skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: cannot attach loop devices".into());
    }
    if !have("losetup") {
        return Some("losetup is not installed".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing".into());
    }
    None
}

fn sysfs_attr(name: &str, attr: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/block/{name}/queue/{attr}"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Checks `info` against what sysfs says for its disk directly.
fn assert_matches_sysfs(info: &DeviceInfo) {
    let lbs = sysfs_attr(&info.name, "logical_block_size").expect("logical_block_size");
    assert_eq!(info.logical_block_size.to_string(), lbs, "{info:?}");
    let kb: u64 = sysfs_attr(&info.name, "max_sectors_kb")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(info.max_request_bytes, kb * 1024, "{info:?}");
    let rot = sysfs_attr(&info.name, "rotational").unwrap();
    assert_eq!(info.rotational, rot == "1", "{info:?}");
    let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", info.name)).unwrap();
    let (maj, min) = dev.trim().split_once(':').unwrap();
    let id = libc::makedev(maj.parse().unwrap(), min.parse().unwrap());
    assert_eq!(info.id, DeviceId(id), "{info:?}");
}

#[test]
fn root_is_on_a_block_device() {
    for path in [Path::new("/"), Path::new(env!("CARGO_TARGET_TMPDIR"))] {
        let info = device_of_path(path).unwrap();
        println!("{} -> {info:?}", path.display());
        if !info.block_device {
            println!(
                "note: {} is not on a block device here ({}); nothing more to check",
                path.display(),
                info.name
            );
            continue;
        }
        assert!(!info.id.is_pseudo());
        assert!(
            Path::new("/sys/block").join(&info.name).exists(),
            "{info:?}"
        );
        assert_matches_sysfs(&info);
        let dir = File::open(path).unwrap();
        assert_eq!(device_of(&dir).unwrap(), info);
    }
}

#[test]
fn two_files_in_one_directory_share_a_device() {
    let scratch = Scratch::new("pair");
    let a = scratch.0.join("a");
    let b = scratch.0.join("b");
    std::fs::write(&a, b"a").unwrap();
    std::fs::write(&b, b"b").unwrap();
    let ia = device_of(&File::open(&a).unwrap()).unwrap();
    let ib = device_of_path(&b).unwrap();
    assert_eq!(ia.id, ib.id);
    assert_eq!(ia, ib);
    assert_eq!(ia, device_of_path(&scratch.0).unwrap());
}

#[test]
fn dev_shm_is_a_pseudo_device() {
    let shm = Path::new("/dev/shm");
    if !shm.exists() {
        println!("skipped: /dev/shm does not exist");
        return;
    }
    let info = device_of_path(shm).unwrap();
    println!("/dev/shm -> {info:?}");
    assert!(!info.block_device);
    assert!(info.id.is_pseudo());
    assert!(info.name.starts_with("tmpfs:"), "{info:?}");
    assert_eq!(info.logical_block_size, 512);
    assert_eq!(info.max_request_bytes, 512 * 1024);
    // A file on it maps to the same pseudo device, and differs from `/`.
    let path = shm.join(format!("tailguard-device-mapping-{}", std::process::id()));
    let file = File::create(&path).unwrap();
    let on_file = device_of(&file);
    let _ = std::fs::remove_file(&path);
    assert_eq!(on_file.unwrap(), info);
    assert_ne!(device_of_path(Path::new("/")).unwrap().id, info.id);
}

#[test]
fn proc_is_a_pseudo_device() {
    let info = device_of_path(Path::new("/proc/self/status")).unwrap();
    println!("/proc/self/status -> {info:?}");
    assert!(!info.block_device);
    assert!(info.id.is_pseudo());
    assert!(info.name.starts_with("proc:"), "{info:?}");
    let file = File::open("/proc/self/status").unwrap();
    assert_eq!(device_of(&file).unwrap().id, info.id);
}

#[test]
fn missing_path_error_names_the_path() {
    let err = device_of_path(Path::new("/no/such/tailguard/file")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("/no/such/tailguard/file"), "{err}");
}

#[test]
fn loop_device_node_maps_to_loop() {
    if let Some(reason) = loop_skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let _lock = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("loopnode");
    let image = scratch.0.join("disk.img");
    File::create(&image).unwrap().set_len(16 << 20).unwrap();
    let Some(dev) = LoopDevice::attach_or_skip(&image) else {
        return;
    };
    let info = device_of_path(Path::new(&dev.node)).unwrap();
    println!("{} -> {info:?}", dev.node);
    assert!(info.block_device);
    assert_eq!(format!("/dev/{}", info.name), dev.node);
    let meta = std::fs::metadata(&dev.node).unwrap();
    assert!(meta.file_type().is_block_device());
    assert_eq!(info.id, DeviceId(meta.rdev()));
    assert_matches_sysfs(&info);
    // The node's own filesystem (devtmpfs) is not what a node maps to.
    assert_ne!(info.id, device_of_path(Path::new("/dev")).unwrap().id);
    let node = File::open(&dev.node).unwrap();
    assert_eq!(device_of(&node).unwrap(), info);
    let align = direct_io_alignment(&node, &info);
    println!("{} direct-I/O alignment: {align:?}", dev.node);
    assert!(align.memory_bytes.is_power_of_two() && align.offset_bytes.is_power_of_two());

    // The loop device forwards to the device holding its image file, and the
    // default profile is chosen by that hardware, not by the loop device's own
    // `rotational` flag (which older kernels set to 1 whatever the image is
    // on).
    let image_device = device_of_path(&image).unwrap();
    if !image_device.block_device {
        // An image on tmpfs or overlay: nothing underneath to name.
        assert!(info.backing.is_none(), "{info:?}");
        return;
    }
    let backing = info
        .backing
        .as_deref()
        .expect("a loop device records its backing file's device");
    assert_eq!(backing.id, image_device.id);
    assert_eq!(info.innermost().name, image_device.innermost().name);
    assert_eq!(
        tailguard::scheduler::default_profile(&info),
        tailguard::scheduler::default_profile(&image_device),
        "a loop device gets the profile of the disk under it"
    );
}

#[test]
fn partitions_and_filesystems_on_a_loop_disk() {
    if let Some(reason) = loop_skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    if !have("addpart") || !have("delpart") {
        println!("skipped: addpart/delpart (util-linux) are not installed");
        return;
    }
    let _lock = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("loopparts");
    let image = scratch.0.join("disk.img");
    File::create(&image).unwrap().set_len(64 << 20).unwrap();
    // Declared before the mounts so that it is dropped after them.
    let Some(mut dev) = LoopDevice::attach_or_skip(&image) else {
        return;
    };
    let parts = match (
        dev.add_partition(1, 2048, 49_152),
        dev.add_partition(2, 51_200, 77_824),
    ) {
        (Ok(p1), Ok(p2)) => [p1, p2],
        (Err(e), _) | (_, Err(e)) => {
            println!("skipped: cannot add partitions: {e}");
            return;
        }
    };
    let whole = device_of_path(Path::new(&dev.node)).unwrap();
    println!("{} -> {whole:?}", dev.node);
    for part in &parts {
        let info = device_of_path(Path::new(part)).unwrap();
        println!("{part} -> {info:?}");
        assert_eq!(info, whole, "partition {part} must map to its whole disk");
    }
    let Some(mounts) = mount_ext4(&parts, &scratch) else {
        return;
    };
    check_files_on_partitions(&mounts, &whole, &parts[0]);
    drop(mounts);
}

/// An ext4 filesystem made and mounted on each of `parts`, under `scratch`;
/// `None` (with the reason printed) where mkfs.ext4 or the mount is missing.
fn mount_ext4(parts: &[String; 2], scratch: &Scratch) -> Option<Vec<Mount>> {
    if !have("mkfs.ext4") {
        println!("skipped filesystem checks: mkfs.ext4 is not installed");
        return None;
    }
    let mut mounts = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if let Err(e) = run("mkfs.ext4", &["-q", "-F", part]) {
            println!("skipped filesystem checks: {e}");
            return None;
        }
        match Mount::new(part, &scratch.0.join(format!("mnt{i}"))) {
            Ok(m) => mounts.push(m),
            Err(e) => {
                println!("skipped filesystem checks: {e}");
                return None;
            }
        }
    }
    Some(mounts)
}

/// A file on each of the two partitions' filesystems maps to the `whole`
/// disk, not to the root filesystem's; the first one's O_DIRECT alignment is
/// sane, and an aligned write reads back through it.
fn check_files_on_partitions(mounts: &[Mount], whole: &DeviceInfo, first_part: &str) {
    let mut files = Vec::new();
    for m in mounts {
        let path = m.0.join("data");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        files.push(file);
    }
    let a = device_of(&files[0]).unwrap();
    let b = device_of(&files[1]).unwrap();
    assert_eq!(&a, whole, "file on partition 1");
    assert_eq!(&b, whole, "file on partition 2");
    assert_ne!(a.id, device_of_path(Path::new("/")).unwrap().id);

    let align = direct_io_alignment(&files[0], &a);
    println!("ext4 on {first_part} direct-I/O alignment: {align:?}");
    assert!(align.memory_bytes.is_power_of_two() && align.offset_bytes.is_power_of_two());
    assert!(align.offset_bytes <= 4096, "{align:?}");

    // An aligned O_DIRECT write and read back through AlignedBuffer.
    use std::os::unix::fs::FileExt;
    let block = align.offset_bytes.max(align.memory_bytes) as usize;
    let data = AlignedBuffer::from_slice(&vec![0x5a; block * 2], block).unwrap();
    check_alignment(
        data.as_ptr() as usize,
        data.len() as u64,
        block as u64,
        align,
    )
    .unwrap();
    files[0].write_all_at(&data, block as u64).unwrap();
    let mut back = AlignedBuffer::new(block * 4, block).unwrap();
    let n = files[0].read_at(&mut back, block as u64).unwrap();
    back.truncate(n);
    assert_eq!(&back[..], &data[..], "short or wrong O_DIRECT read");
}

/// On a block device node, whose `st_size` is 0, the device's size is the
/// file's length: an unaligned write reads the blocks it partly covers (it
/// used to take them for past the end and write zeros over the neighbouring
/// bytes), a stream appends at an offset inside the device, and neither
/// tries to truncate the device.
#[test]
fn unaligned_writes_and_streams_on_a_device_node_keep_its_other_bytes() {
    if let Some(reason) = loop_skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let _lock = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("loopunaligned");
    let image = scratch.0.join("disk.img");
    let original: Vec<u8> = (0..1 << 20).map(|index| (index % 251 + 1) as u8).collect();
    std::fs::write(&image, &original).unwrap();
    let Some(dev) = LoopDevice::attach_or_skip(&image) else {
        return;
    };
    let scheduler = tailguard::Scheduler::builder().build().unwrap();
    let class = scheduler.add_class("c", 100).unwrap();
    let node = tailguard::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&scheduler, Path::new(&dev.node))
        .unwrap();
    scheduler
        .block_on(node.write_at_unaligned(&class, b"patched", 4093))
        .unwrap();
    let mut expected = original.clone();
    expected[4093..4100].copy_from_slice(b"patched");

    let block = node.alignment().offset_bytes as usize;
    let mut writer = tailguard::StreamWriter::appending(
        node,
        &class,
        tailguard::WriterOptions::default(),
        10_000,
    )
    .expect("a stream starts inside the device");
    std::io::Write::write_all(&mut writer, b"stream").unwrap();
    writer.close().expect("closing truncates nothing");
    expected[10_000..10_006].copy_from_slice(b"stream");
    // The stream owns the device from its start: its last block is padded.
    expected[10_006..10_006usize.next_multiple_of(block)].fill(0);

    let node = tailguard::OpenOptions::new()
        .read(true)
        .open(&scheduler, Path::new(&dev.node))
        .unwrap();
    let mut back = vec![0; 16_384];
    let read = scheduler
        .block_on(node.read_at_unaligned(&class, &mut back, 0))
        .unwrap();
    assert_eq!(read, back.len());
    let first_difference = back.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "the device's other bytes are kept");
    assert_eq!(
        std::fs::metadata(&image).unwrap().len(),
        original.len() as u64
    );
}

/// Files in two subvolumes of one btrfs filesystem (each with its own
/// anonymous `st_dev`) map to the disk under it, one device, not to a pseudo
/// device per subvolume. Needs root, `losetup` and `mkfs.btrfs`.
#[test]
fn btrfs_subvolumes_map_to_the_disk_under_them() {
    if let Some(reason) = loop_skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    if !have("mkfs.btrfs") || !have("btrfs") {
        println!("skipped: mkfs.btrfs/btrfs (btrfs-progs) are not installed");
        return;
    }
    let _lock = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("btrfs");
    let image = scratch.0.join("disk.img");
    File::create(&image).unwrap().set_len(256 << 20).unwrap();
    let Some(dev) = LoopDevice::attach_or_skip(&image) else {
        return;
    };
    if let Err(e) = run("mkfs.btrfs", &["-q", "-f", &dev.node]) {
        println!("skipped: {e}");
        return;
    }
    let mount = match Mount::new(&dev.node, &scratch.0.join("mnt")) {
        Ok(mount) => mount,
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    let subvolume = mount.0.join("sub");
    run(
        "btrfs",
        &["-q", "subvolume", "create", subvolume.to_str().unwrap()],
    )
    .unwrap();
    let top = mount.0.join("a");
    let inner = subvolume.join("b");
    std::fs::write(&top, b"a").unwrap();
    std::fs::write(&inner, b"b").unwrap();
    assert_ne!(
        std::fs::metadata(&top).unwrap().dev(),
        std::fs::metadata(&inner).unwrap().dev(),
        "btrfs gives each subvolume its own st_dev"
    );
    let disk = device_of_path(Path::new(&dev.node)).unwrap();
    for path in [&top, &inner] {
        let info = device_of(&File::open(path).unwrap()).unwrap();
        println!("{} -> {info:?}", path.display());
        assert_eq!(info, disk, "{}", path.display());
        assert_eq!(device_of_path(path).unwrap(), disk, "{}", path.display());
    }
    drop(mount);
}

/// A loop device over a file whose path is not UTF-8 still records the
/// device under that file (its `loop/backing_file` is read as bytes).
#[test]
fn a_loop_device_over_a_file_named_in_no_utf8_finds_its_backing_device() {
    use std::os::unix::ffi::OsStrExt;
    if let Some(reason) = loop_skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let _lock = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("loopbytes");
    let image = scratch
        .0
        .join(std::ffi::OsStr::from_bytes(b"disk-\xff\xfe.img"));
    File::create(&image).unwrap().set_len(16 << 20).unwrap();
    let image_device = device_of_path(&image).unwrap();
    if !image_device.block_device {
        println!("skipped: the scratch directory is not on a block device");
        return;
    }
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&image)
        .output()
        .unwrap();
    if !out.status.success() {
        println!("skipped: losetup: {}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    let dev = LoopDevice {
        node: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        partitions: Vec::new(),
    };
    let info = device_of_path(Path::new(&dev.node)).unwrap();
    let backing = info.backing.as_deref().expect("the backing file's device");
    assert_eq!(backing.id, image_device.id);
}
