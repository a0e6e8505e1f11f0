//! # tailguard-faultdev: a programmable block device for failure tests
//!
//! [`FaultDevice::start`] serves one file, `disk`, from a FUSE filesystem in
//! this process (the `fuser` crate, no libfuse: as root it mounts with
//! mount(2)) and attaches it to a loop device with direct I/O, giving a real
//! `/dev/loopN` whose every read, write and flush reaches this process. Each
//! request is timed by one of the simulator's device models
//! (`tailguard_sim::device`: `usb-flash`, `hdd`, `sata-ssd`, `nvme`, the same
//! code the simulator runs, here in real time) or served at once
//! ([`Model::Instant`]), and the [`FaultControl`] handle injects, at any
//! moment:
//!
//! - errors on byte ranges or at a rate ([`FaultControl::error_range`],
//!   [`FaultControl::error_rate`]), after the device spent its time;
//! - stalls ([`FaultControl::stall_for`]): requests wait, unanswered;
//! - slow-down windows ([`FaultControl::slow_down_for`]);
//! - a volatile write cache ([`DeviceConfig::volatile_cache`]) that a
//!   simulated power cut ([`FaultControl::power_cut`]) throws away: only
//!   what a flush made durable survives;
//! - disappearance ([`FaultControl::disappear`]): every request fails.
//!
//! It needs root (mount, losetup); [`FaultDevice::unavailable`] says why it
//! cannot run here, so that tests skip with that reason. Dropping the
//! [`FaultDevice`], on any path including a panic's unwinding, ends every
//! fault (stalled requests finish), detaches the loop device and unmounts
//! the filesystem.
//!
//! The FUSE server runs in the process that started the device, so that
//! process must end normally: killed (SIGKILL, or a signal with no handler)
//! while the kernel holds requests for the device, it can leave threads
//! waiting on the server that died with it, and anything that looks at the
//! mount (`losetup -a`, `du` over its parent) waits too. The kernel's
//! FUSE control filesystem ends such a connection:
//! `mount -t fusectl none /sys/fs/fuse/connections`, then
//! `echo 1 > /sys/fs/fuse/connections/N/abort` (N: the mount's minor device
//! number in `/proc/self/mountinfo`), `losetup -d` and `umount -l`.

mod faults;
mod fs;
mod store;
mod timing;

pub use faults::{DeviceCounts, Ops};
pub use store::SECTOR_BYTES;

use crate::faults::{far_after, FaultState};
use crate::fs::{lock, DeviceCore, DiskFs};
use crate::store::Store;
use crate::timing::RealTimeModel;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailguard_sim::device::ModelName;

/// The timing model of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Requests are served as fast as this process can.
    Instant,
    /// The simulator's `usb-flash` model.
    UsbFlash,
    /// The simulator's `hdd` model.
    Hdd,
    /// The simulator's `sata-ssd` model.
    SataSsd,
    /// The simulator's `nvme` model.
    Nvme,
}

impl Model {
    /// The simulator's model (`None` for [`Model::Instant`]).
    pub fn sim_model(self) -> Option<ModelName> {
        match self {
            Self::Instant => None,
            Self::UsbFlash => Some(ModelName::UsbFlash),
            Self::Hdd => Some(ModelName::Hdd),
            Self::SataSsd => Some(ModelName::SataSsd),
            Self::Nvme => Some(ModelName::Nvme),
        }
    }
}

/// How to build a [`FaultDevice`].
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The timing model.
    pub model: Model,
    /// The device's size; held in memory, so a few tens of MiB at most.
    pub size_bytes: u64,
    /// Whether writes wait in a volatile cache until a flush (lost at a
    /// power cut) or are durable at once.
    pub volatile_cache: bool,
    /// Seeds the model's and the error rate's random choices.
    pub seed: u64,
    /// FUSE worker threads: the most requests served at once (the device
    /// model's queue depth); more threads, more concurrency, more memory.
    pub fuse_threads: usize,
    /// The loop device's logical block size (512 or 4096).
    pub sector_bytes: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            model: Model::Instant,
            size_bytes: 16 << 20,
            volatile_cache: false,
            seed: 1,
            fuse_threads: 8,
            sector_bytes: 4096,
        }
    }
}

/// Why a [`FaultDevice`] could not start or stop.
#[derive(Debug)]
pub enum FaultDevError {
    /// Not root, or a tool or kernel feature is missing; the text says which.
    Unavailable(String),
    /// A step failed; the text names it.
    Step {
        /// What was being done.
        step: String,
        /// Why it failed.
        error: std::io::Error,
    },
}

impl fmt::Display for FaultDevError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(reason) => write!(formatter, "fault device unavailable: {reason}"),
            Self::Step { step, error } => write!(formatter, "fault device: {step}: {error}"),
        }
    }
}

impl std::error::Error for FaultDevError {}

fn step(step: impl Into<String>) -> impl FnOnce(std::io::Error) -> FaultDevError {
    let step = step.into();
    move |error| FaultDevError::Step { step, error }
}

/// Steers a running [`FaultDevice`]; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct FaultControl {
    core: Arc<DeviceCore>,
}

impl fmt::Debug for FaultControl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("FaultControl")
            .field("counts", &self.counts())
            .finish()
    }
}

impl FaultControl {
    /// Requests of `ops` touching `offsets` (bytes) fail with `errno`
    /// (flushes, which have no range, when `offsets` holds 0).
    pub fn error_range(&self, offsets: Range<u64>, ops: Ops, errno: i32) {
        lock(&self.core.faults).add_range(offsets, ops, errno);
    }

    /// Each request of `ops` fails with `errno` with probability
    /// `per_million / 1_000_000` (replaces an earlier rate).
    pub fn error_rate(&self, per_million: u32, ops: Ops, errno: i32) {
        lock(&self.core.faults).set_rate(per_million, ops, errno);
    }

    /// Holds every request, arriving or waiting, until `duration` from now
    /// (a duration of a century or more holds them until `heal`).
    pub fn stall_for(&self, duration: Duration) {
        lock(&self.core.faults).stall_until(far_after(duration));
    }

    /// For `duration` from now, every request takes `1 / factor` times as
    /// long as the model says (factor in (0, 1]: 0.25 is a quarter speed;
    /// a smaller one counts as 0.001, a larger one as 1, and NaN as 1).
    pub fn slow_down_for(&self, factor: f64, duration: Duration) {
        lock(&self.core.faults).slow_down(factor, far_after(duration));
    }

    /// The device vanishes: every request fails with `errno` (ENODEV, EIO)
    /// until [`FaultControl::heal`].
    pub fn disappear(&self, errno: i32) {
        lock(&self.core.faults).disappear(errno);
    }

    /// Ends every fault: no error rule, no stall or slow-down, the device back.
    pub fn heal(&self) {
        lock(&self.core.faults).heal();
    }

    /// A power cut: the volatile write cache is lost (the device itself
    /// keeps running, as after a reboot). Returns the 512-byte sectors lost.
    pub fn power_cut(&self) -> u64 {
        let lost = lock(&self.core.store).power_cut();
        let mut faults = lock(&self.core.faults);
        faults.counts.power_cuts += 1;
        faults.counts.sectors_lost += lost;
        lost
    }

    /// Sectors written and not yet flushed.
    pub fn dirty_sectors(&self) -> u64 {
        lock(&self.core.store).dirty_sectors()
    }

    /// The most requests the device model held at once so far (its queue
    /// depth as the kernel path delivers it); 0 without a model.
    pub fn model_depth_max(&self) -> usize {
        self.core.model.as_ref().map_or(0, RealTimeModel::depth_max)
    }

    /// What the device served and injected so far.
    pub fn counts(&self) -> DeviceCounts {
        lock(&self.core.faults).counts
    }
}

/// A running programmable block device; see the crate docs. Dropping it
/// detaches the loop device and unmounts the filesystem.
pub struct FaultDevice {
    loop_device: Option<PathBuf>,
    mount_dir: PathBuf,
    session: Option<fuser::BackgroundSession>,
    control: FaultControl,
}

impl fmt::Debug for FaultDevice {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("FaultDevice")
            .field("loop_device", &self.loop_device)
            .field("mount_dir", &self.mount_dir)
            .finish()
    }
}

impl FaultDevice {
    /// Why a device cannot run on this machine (not root, no `/dev/fuse`, no
    /// `losetup`), or `None` when it can.
    pub fn unavailable() -> Option<String> {
        if !rustix::process::geteuid().is_root() {
            return Some("needs root (mount and losetup); run the tests as root".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Some("no /dev/fuse (modprobe fuse, or a container without it)".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Some("no /dev/loop-control (modprobe loop)".into());
        }
        match Command::new("losetup").arg("--version").output() {
            Ok(output) if output.status.success() => None,
            _ => Some("no losetup (apt-get install util-linux or mount)".into()),
        }
    }

    /// Mounts the filesystem under a new directory in `parent` and attaches
    /// its file to a loop device.
    pub fn start(config: DeviceConfig, parent: &Path) -> Result<Self, FaultDevError> {
        if let Some(reason) = Self::unavailable() {
            return Err(FaultDevError::Unavailable(reason));
        }
        let model = match config.model.sim_model() {
            None => None,
            Some(sim_model) => {
                let model =
                    tailguard_sim::device::build(sim_model, &toml::Table::new(), config.seed)
                        .map_err(|error| FaultDevError::Step {
                            step: format!("building the {} model", sim_model.name()),
                            error: std::io::Error::other(error.to_string()),
                        })?;
                Some(RealTimeModel::start(model).map_err(step("starting the model clock"))?)
            }
        };
        let core = Arc::new(DeviceCore {
            store: Mutex::new(Store::new(config.size_bytes, config.volatile_cache)),
            faults: Mutex::new(FaultState::new(config.seed)),
            model,
        });
        let control = FaultControl { core: core.clone() };
        let mount_dir = parent.join(format!(
            "tailguard-faultdev-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&mount_dir)
            .map_err(step(format!("creating {}", mount_dir.display())))?;
        let mut device = Self {
            loop_device: None,
            mount_dir,
            session: None,
            control,
        };
        let filesystem = DiskFs {
            core,
            size_bytes: config.size_bytes,
        };
        let mut fuse_config = fuser::Config::default();
        fuse_config.mount_options = vec![
            fuser::MountOption::FSName("tailguard-faultdev".into()),
            fuser::MountOption::Subtype("faultdev".into()),
        ];
        fuse_config.n_threads = Some(config.fuse_threads.max(1));
        // From here on, `device`'s Drop undoes whatever was done.
        device.session = Some(
            fuser::spawn_mount(filesystem, &device.mount_dir, &fuse_config).map_err(|error| {
                if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                    FaultDevError::Unavailable(format!(
                        "mounting FUSE was refused ({error}): a container without \
                         CAP_SYS_ADMIN, or /dev/fuse not usable here"
                    ))
                } else {
                    step(format!("mounting FUSE on {}", device.mount_dir.display()))(error)
                }
            })?,
        );
        device.loop_device = Some(attach_loop(
            &device.mount_dir.join(fs::FILE_NAME),
            config.sector_bytes,
        )?);
        Ok(device)
    }

    /// The block device, `/dev/loopN`.
    pub fn path(&self) -> &Path {
        self.loop_device
            .as_deref()
            .expect("a started device has its loop device until dropped")
    }

    /// Whether the loop device does direct I/O on its file (every request
    /// reaches the daemon without the page cache); false on kernels that
    /// refused it for this file.
    pub fn direct_io(&self) -> bool {
        let name = self.path().file_name().unwrap_or_default();
        std::fs::read_to_string(Path::new("/sys/block").join(name).join("loop/dio"))
            .is_ok_and(|flag| flag.trim() == "1")
    }

    /// The handle that injects faults.
    pub fn control(&self) -> &FaultControl {
        &self.control
    }
}

fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn attach_loop(file: &Path, sector_bytes: u32) -> Result<PathBuf, FaultDevError> {
    let output = Command::new("losetup")
        .args(["--find", "--show", "--direct-io=on", "--sector-size"])
        .arg(sector_bytes.to_string())
        .arg(file)
        .output()
        .map_err(step("running losetup"))?;
    if !output.status.success() {
        return Err(FaultDevError::Step {
            step: format!("losetup --direct-io=on {}", file.display()),
            error: std::io::Error::other(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ),
        });
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

impl Drop for FaultDevice {
    fn drop(&mut self) {
        // Stalled or failing requests finish first, so that nothing the
        // kernel waits on blocks the detach.
        self.control.heal();
        if let Some(loop_device) = self.loop_device.take() {
            detach_loop(&loop_device);
        }
        if let Some(session) = self.session.take() {
            if let Err(error) = session.umount_and_join() {
                eprintln!(
                    "tailguard-faultdev: unmounting {} failed ({error}); detaching it lazily",
                    self.mount_dir.display()
                );
                lazy_unmount(&self.mount_dir);
            }
        }
        let _ = std::fs::remove_dir(&self.mount_dir);
    }
}

/// Detaches `loop_device` and waits (a few seconds at most) until the kernel
/// has let go of the backing file, so that the unmount that follows finds
/// the filesystem unused.
fn detach_loop(loop_device: &Path) {
    match Command::new("losetup").arg("-d").arg(loop_device).status() {
        Ok(status) if status.success() => {}
        other => eprintln!(
            "tailguard-faultdev: losetup -d {} failed: {other:?}",
            loop_device.display()
        ),
    }
    let backing = Path::new("/sys/block")
        .join(loop_device.file_name().unwrap_or_default())
        .join("loop/backing_file");
    let deadline = Instant::now() + Duration::from_secs(5);
    while backing.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn lazy_unmount(mount_dir: &Path) {
    // A path with an interior NUL byte cannot be a mount point: nothing to do.
    if mount_dir.as_os_str().as_encoded_bytes().contains(&0) {
        return;
    }
    if let Err(error) = rustix::mount::unmount(mount_dir, rustix::mount::UnmountFlags::DETACH) {
        eprintln!(
            "tailguard-faultdev: umount -l {} failed: {}",
            mount_dir.display(),
            std::io::Error::from(error)
        );
    }
}
