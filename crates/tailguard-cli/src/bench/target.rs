//! The target: checking it, laying out data, removing it, Ctrl-C.
//!
//! Jobs address *data regions* ([`BenchJob::job_region`]); a region spans the
//! union of its jobs' `offset..offset + size`. What a region becomes depends
//! on the target:
//!
//! - A **directory** gets one data file per region, named
//!   `.tailguard-bench-PID-N.data`, as large as the region and filled with real
//!   (pseudo-random, incompressible) data so reads hit allocated blocks. The
//!   files are registered in a [`Layout`] *before* they are created, and the
//!   layout removes them when dropped: at the end of a run, on an error, and
//!   after Ctrl-C, SIGTERM or SIGHUP (the run loop notices the flag from
//!   [`watch_interrupts`] within 100 ms and returns an error). The run holds
//!   each file's `flock` while it lives, and leftovers of killed runs are
//!   removed before laying out ([`crate::lifecycle`]).
//! - An existing **regular file** is used in place and never removed: jobs
//!   address their `offset..offset + size` of it directly. The run holds an
//!   exclusive `flock` on it, so a second run on it is refused.
//! - A **block device** is accepted only with `--allow-device`, since bench
//!   writes to it, and only when nothing has it mounted or claimed: its number
//!   must not appear in `/proc/self/mountinfo` (nor its partitions', by number
//!   or by source; [`mount_of`], which tune uses too), and it is
//!   opened with `O_EXCL`, which the kernel refuses while a filesystem, LVM,
//!   RAID or swap holds it; that exclusive descriptor is kept in the
//!   [`Layout`] for the whole run so nobody mounts it meanwhile. Its size comes
//!   from `BLKGETSIZE64`. Regions are laid out back to back from byte 0, each
//!   starting on a 1 MiB boundary, and filled like files; the jobs' offsets are
//!   rewritten to point into their region. Nothing is removed afterwards: the
//!   data the device held before is gone.
//!
//! Jobs may run on different targets ([`JobOptions::target`]):
//! [`prepare_jobs`] prepares each distinct target for its own jobs, as above,
//! and merges the plans (files of every target, device names joined by `+`).

use crate::bench::job::{BenchJob, JobOptions};
use crate::error::CliError;
use std::fs::File;
use std::os::unix::fs::{FileExt as _, FileTypeExt, MetadataExt as _, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tailguard::device::{self, DirectIoAlignment};
use tailguard_sim::scenario::Scenario;

pub use crate::lifecycle::{interrupted, watch_interrupts};

/// Files laid out for a run, removed on drop; and the exclusive descriptor of a
/// block device target, closed on drop.
#[derive(Debug, Default)]
pub struct Layout {
    created: Vec<PathBuf>,
    claimed_device: Option<File>,
    /// Open descriptors whose `flock` marks the run's own data files, and the
    /// user's file targets, as held ([`crate::lifecycle`]); released on drop.
    held: Vec<File>,
}

impl Drop for Layout {
    fn drop(&mut self) {
        // After a stop signal, large files go in the background.
        crate::lifecycle::remove_paths(&self.created);
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

impl Plan {
    /// The plan of some of its jobs (`jobs`, indices into it), in that order:
    /// the same files, so groups of one job file share their layout.
    pub fn of_jobs(&self, jobs: &[usize]) -> Plan {
        Plan {
            files: self.files.clone(),
            job_file: jobs.iter().map(|&job| self.job_file[job]).collect(),
            job_base: jobs.iter().map(|&job| self.job_base[job]).collect(),
            device_name: self.device_name.clone(),
            alignment: self.alignment,
        }
    }
}

fn usage(message: String) -> CliError {
    CliError::usage(message)
}

/// Where regions start on a block device: a multiple of this (1 MiB).
pub const DEVICE_REGION_ALIGNMENT_BYTES: u64 = 1 << 20;

/// Checks the target and lays out what the jobs need. With `direct`, also checks
/// that the target takes O_DIRECT at the jobs' block sizes and offsets. On a
/// block device the jobs' offsets are rewritten to point into their regions.
pub fn prepare(
    job: &mut BenchJob,
    target: &Path,
    allow_device: bool,
    direct: bool,
    layout: &mut Layout,
) -> Result<Plan, CliError> {
    let metadata = target_metadata(target, allow_device)?;
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
    let regions = regions(job);
    if metadata.file_type().is_block_device() {
        prepare_device(
            job,
            target,
            metadata.rdev(),
            &regions,
            direct,
            layout,
            &mut plan,
        )?;
    } else if metadata.is_dir() {
        prepare_directory(job, target, &regions, direct, layout, &mut plan)?;
    } else if metadata.is_file() {
        prepare_file(
            &job.scenario,
            target,
            metadata.len(),
            direct,
            layout,
            &mut plan,
        )?;
    } else {
        return Err(usage(format!(
            "target {} is neither a directory, a regular file nor a block device; give one \
             of those",
            target.display()
        )));
    }
    Ok(plan)
}

/// The target's metadata, refusing a missing target, and a block device
/// without `allow_device`.
fn target_metadata(target: &Path, allow_device: bool) -> Result<std::fs::Metadata, CliError> {
    let shown = target.display();
    let metadata = std::fs::metadata(target).map_err(|error| {
        usage(format!(
            "target {shown}: {error}; give an existing directory (data files are laid out in it) \
             or regular file with target = \"PATH\" or --target"
        ))
    })?;
    if metadata.file_type().is_block_device() && !allow_device {
        return Err(usage(format!(
            "target {shown} is a block device; bench writes to its target, which destroys the \
             data on the device; pass --allow-device if that is what you want, or give a \
             directory or a regular file on a filesystem"
        )));
    }
    Ok(metadata)
}

/// A block device target: claims it, places the regions on it, points the
/// jobs' offsets into their regions and fills the regions.
fn prepare_device(
    job: &mut BenchJob,
    target: &Path,
    device_number: u64,
    regions: &[(u64, u64)],
    direct: bool,
    layout: &mut Layout,
    plan: &mut Plan,
) -> Result<(), CliError> {
    let shown = target.display();
    let device = claim_device(target, device_number)?;
    let device_bytes = block_device_bytes(&device)
        .map_err(|error| usage(format!("target {shown}: cannot read its size: {error}")))?;
    let bases = place_on_device(regions, device_bytes, target)?;
    layout.claimed_device = Some(device);
    for (index, spec) in job.scenario.jobs.iter_mut().enumerate() {
        let region = job.job_region[index];
        spec.offset_bytes = bases[region] + (spec.offset_bytes - regions[region].0);
        plan.job_file.push(0);
        plan.job_base.push(0);
    }
    plan.files.push(target.to_path_buf());
    if direct {
        plan.alignment = Some(direct_alignment(target, false)?);
    }
    check_alignment(&job.scenario, plan, target)?;
    let device = layout.claimed_device.as_ref().expect("claimed above");
    for (region, &(start, end)) in regions.iter().enumerate() {
        fill(device, bases[region], end - start, target)?;
    }
    device
        .sync_all()
        .map_err(|error| usage(format!("target {shown}: {error}")))
}

/// A directory target: one data file per region, created in it.
fn prepare_directory(
    job: &BenchJob,
    target: &Path,
    regions: &[(u64, u64)],
    direct: bool,
    layout: &mut Layout,
    plan: &mut Plan,
) -> Result<(), CliError> {
    crate::lifecycle::note_leftovers(target);
    if direct {
        let probe = target.join(format!(".tailguard-bench-{}-probe", std::process::id()));
        layout.created.push(probe.clone());
        plan.alignment = Some(direct_alignment(&probe, true)?);
    }
    check_alignment(&job.scenario, plan, target)?;
    for (index, &(start, end)) in regions.iter().enumerate() {
        let path = target.join(format!(
            ".tailguard-bench-{}-{index}.data",
            std::process::id()
        ));
        layout.created.push(path.clone());
        layout.held.push(create_data_file(&path, end - start)?);
        plan.files.push(path);
    }
    for &region in &job.job_region {
        plan.job_file.push(region);
        plan.job_base.push(regions[region].0);
    }
    Ok(())
}

/// A regular file target of `target_bytes`: every job's region must fit in it.
fn prepare_file(
    scenario: &Scenario,
    target: &Path,
    target_bytes: u64,
    direct: bool,
    layout: &mut Layout,
    plan: &mut Plan,
) -> Result<(), CliError> {
    refuse_pseudo_file(target)?;
    layout.held.push(lock_file_target(target)?);
    for (index, job) in scenario.jobs.iter().enumerate() {
        let end = job.offset_bytes + job.region_bytes;
        if end > target_bytes {
            return Err(usage(format!(
                "`job[{index}].size`: the job's region ends at byte {end} but target {} \
                 has {target_bytes} bytes; shrink size or offset, or give a directory target",
                target.display()
            )));
        }
        plan.job_file.push(0);
        plan.job_base.push(0);
    }
    plan.files.push(target.to_path_buf());
    if direct {
        plan.alignment = Some(direct_alignment(target, false)?);
    }
    check_alignment(scenario, plan, target)
}

/// Prepares every job's target: its own ([`JobOptions::target`]) or
/// `default_target`; each distinct target is prepared with [`prepare`] for
/// the jobs on it, and the plans are merged. A job with neither gets an error
/// naming it.
pub fn prepare_jobs(
    job: &mut BenchJob,
    default_target: Option<&Path>,
    allow_device: bool,
    direct: bool,
    layout: &mut Layout,
) -> Result<Plan, CliError> {
    let mut targets: Vec<(PathBuf, Vec<usize>)> = Vec::new();
    for index in 0..job.scenario.jobs.len() {
        let path = match (job.options_of(index).target, default_target) {
            (Some(path), _) => path,
            (None, Some(path)) => path.to_path_buf(),
            (None, None) => {
                return Err(usage(format!(
                    "job `{}` has no target; give it one (target = \"PATH\" in its [[job]], \
                     filename= in a fio job) or pass --target PATH",
                    job.scenario.jobs[index].name
                )))
            }
        };
        match targets.iter_mut().find(|(known, _)| *known == path) {
            Some((_, jobs)) => jobs.push(index),
            None => targets.push((path, vec![index])),
        }
    }
    if let [(path, _)] = targets.as_slice() {
        return prepare(job, &path.clone(), allow_device, direct, layout);
    }
    let mut merged = Plan {
        files: Vec::new(),
        job_file: vec![0; job.scenario.jobs.len()],
        job_base: vec![0; job.scenario.jobs.len()],
        device_name: String::new(),
        alignment: None,
    };
    let mut devices: Vec<String> = Vec::new();
    for (path, jobs) in &targets {
        let mut part = sub_job(job, jobs);
        let plan = prepare(&mut part, path, allow_device, direct, layout)?;
        for (position, &index) in jobs.iter().enumerate() {
            job.scenario.jobs[index] = part.scenario.jobs[position].clone();
            merged.job_file[index] = merged.files.len() + plan.job_file[position];
            merged.job_base[index] = plan.job_base[position];
        }
        merged.files.extend(plan.files);
        merged.alignment = merged.alignment.or(plan.alignment);
        if !devices.contains(&plan.device_name) {
            devices.push(plan.device_name);
        }
    }
    merged.device_name = devices.join("+");
    Ok(merged)
}

/// The bench job of some of `job`'s jobs, with their regions renumbered.
fn sub_job(job: &BenchJob, jobs: &[usize]) -> BenchJob {
    let mut scenario = job.scenario.clone();
    scenario.jobs = jobs
        .iter()
        .map(|&index| job.scenario.jobs[index].clone())
        .collect();
    let mut regions: Vec<usize> = Vec::new();
    let job_region = jobs
        .iter()
        .map(|&index| {
            let region = job.job_region[index];
            regions
                .iter()
                .position(|&known| known == region)
                .unwrap_or_else(|| {
                    regions.push(region);
                    regions.len() - 1
                })
        })
        .collect();
    BenchJob {
        scenario,
        target: None,
        job_region,
        job_options: jobs
            .iter()
            .map(|&index| job.options_of(index))
            .collect::<Vec<JobOptions>>(),
    }
}

/// Opens `path` with O_DIRECT (creating and removing it with `probe`) and
/// returns the alignment it needs, or a clear error when it is refused.
fn direct_alignment(path: &Path, probe: bool) -> Result<DirectIoAlignment, CliError> {
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
                "target {shown}: the filesystem refuses O_DIRECT (tmpfs, ramfs and overlayfs do), \
                 which the tailguard and kernel-direct modes need; put the target on a filesystem \
                 that supports it, or run --mode kernel-buffered only"
            ))
        } else if let Some(fix) = permission_fix(&error, probe) {
            usage(format!("target {shown}: {error}; {fix}"))
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

/// The fix when opening the target failed for want of permission (not of
/// O_DIRECT): `probe` means bench was creating a data file in a directory.
fn permission_fix(error: &std::io::Error, probe: bool) -> Option<&'static str> {
    match (error.raw_os_error()?, probe) {
        (libc::EACCES | libc::EPERM, true) => Some(
            "bench cannot create its data files in this directory; give a directory you can \
             write to, or run as a user who can",
        ),
        (libc::EACCES | libc::EPERM, false) => {
            Some("bench cannot open it for reading; run as a user who can, or give another target")
        }
        (libc::EROFS, _) => {
            Some("the filesystem is read-only; give a directory on a writable filesystem")
        }
        _ => None,
    }
}

/// The pseudo-filesystem `path` lives on (procfs, sysfs, ...), whose files are
/// the kernel's views, not data on a disk; `None` for anything else or when
/// `statfs` fails.
pub fn pseudo_filesystem(path: &Path) -> Option<&'static str> {
    let kind = rustix::fs::statfs(path).ok()?.f_type as u64;
    Some(match kind {
        0x9fa0 => "procfs (/proc)",
        0x6265_6572 => "sysfs (/sys)",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x6367_7270 | 0x0027_e0eb => "cgroupfs",
        0x7363_6673 => "securityfs",
        0xcafe_4a11 => "bpffs",
        0x1cd1 => "devpts",
        _ => return None,
    })
}

/// Refuses a regular file of a pseudo-filesystem ([`pseudo_filesystem`]) as
/// a target, naming what it is and the fix.
pub fn refuse_pseudo_file(path: &Path) -> Result<(), CliError> {
    match pseudo_filesystem(path) {
        Some(filesystem) => Err(usage(format!(
            "target {} is a file of {filesystem}, the kernel's view of its own state, not data \
             on a disk; give a directory or a regular file on a disk filesystem",
            path.display()
        ))),
        None => Ok(()),
    }
}

fn check_alignment(scenario: &Scenario, plan: &Plan, target: &Path) -> Result<(), CliError> {
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

/// Each region's extent: the smallest start and the largest end of its jobs.
fn regions(job: &BenchJob) -> Vec<(u64, u64)> {
    let mut regions = vec![(u64::MAX, 0); job.region_count()];
    for (spec, &region) in job.scenario.jobs.iter().zip(&job.job_region) {
        let extent = &mut regions[region];
        extent.0 = extent.0.min(spec.offset_bytes);
        extent.1 = extent.1.max(spec.offset_bytes + spec.region_bytes);
    }
    regions
}

/// Places regions back to back on a device of `device_bytes`, each on a 1 MiB
/// boundary; returns where each starts.
fn place_on_device(
    regions: &[(u64, u64)],
    device_bytes: u64,
    target: &Path,
) -> Result<Vec<u64>, CliError> {
    let mut bases = Vec::with_capacity(regions.len());
    let mut next = 0u64;
    let mut end_bytes = 0u64;
    for &(start, end) in regions {
        bases.push(next);
        end_bytes = next + (end - start);
        next = end_bytes.next_multiple_of(DEVICE_REGION_ALIGNMENT_BYTES);
    }
    if end_bytes > device_bytes {
        let needed: u64 = regions.iter().map(|(start, end)| end - start).sum();
        return Err(usage(format!(
            "target {} holds {device_bytes} bytes but the jobs' regions need {needed} (laid out \
             back to back on 1 MiB boundaries, up to byte {end_bytes}); shrink the jobs' size",
            target.display()
        )));
    }
    Ok(bases)
}

/// Refuses a block device that is mounted, has a mounted partition, or is
/// claimed by anything else, and returns it opened exclusively (`O_EXCL`) for
/// reading and writing.
fn claim_device(path: &Path, device_number: u64) -> Result<File, CliError> {
    let shown = path.display();
    if let Some(mount) = mount_of(device_number) {
        return Err(usage(format!(
            "target {shown} (or a partition of it) is mounted at {}; bench would overwrite the \
             filesystem: unmount it first, or give a directory on it instead",
            mount.mount_point
        )));
    }
    open_exclusive(path, true, 0).map_err(|error| {
        if error.raw_os_error() == Some(libc::EBUSY) {
            device_in_use(path, "bench would overwrite its data")
        } else {
            usage(format!("target {shown}: cannot open it: {error}"))
        }
    })
}

/// Opens a block device with `O_EXCL` (and `custom_flags`), for reading, and
/// writing when `write`. The kernel refuses (EBUSY; see [`device_in_use`])
/// while a filesystem, LVM, RAID, swap or another exclusive opener holds it,
/// and while the descriptor (or a duplicate) is open nobody else can claim
/// it: bench and tune keep it for their whole run.
pub fn open_exclusive(path: &Path, write: bool, custom_flags: i32) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_EXCL | custom_flags)
        .open(path)
}

/// The error for a device [`open_exclusive`] found in use; `consequence` says
/// why the tool refuses.
pub fn device_in_use(path: &Path, consequence: &str) -> CliError {
    usage(format!(
        "target {} is in use (mounted, a partition mounted, or held by LVM, RAID, swap or \
         another program opening it exclusively); {consequence}: release it first",
        path.display()
    ))
}

/// Device numbers of the partitions of a disk, from sysfs (none for a
/// partition or a device without any).
fn partition_numbers(device_number: u64) -> Vec<u64> {
    let directory = format!(
        "/sys/dev/block/{}:{}",
        libc::major(device_number),
        libc::minor(device_number)
    );
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("partition").exists())
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("dev")).ok())
        .filter_map(|text| parse_device_number(text.trim()))
        .collect()
}

/// `MAJOR:MINOR` as a `dev_t`.
fn parse_device_number(text: &str) -> Option<u64> {
    let (major, minor) = text.split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// A mounted filesystem: what `/proc/self/mountinfo` says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The mount source, `/dev/sda1` for a disk filesystem.
    pub source: String,
    /// Where it is mounted.
    pub mount_point: String,
}

/// The first mount of the block device `device_number` or of one of its
/// partitions, if any: the check bench and tune share before touching a raw
/// device.
///
/// A mount matches by the device number in `/proc/self/mountinfo` (field 3)
/// or by its source naming a device node of one of those numbers; the second
/// catches filesystems such as btrfs whose field 3 is an anonymous number.
pub fn mount_of(device_number: u64) -> Option<Mount> {
    let mut numbers = vec![device_number];
    numbers.extend(partition_numbers(device_number));
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let mount_point = fields.get(4)?;
        // The source follows the ` - ` separator and the filesystem type.
        let separator = fields.iter().position(|field| *field == "-")?;
        let source = fields.get(separator + 2).copied().unwrap_or_default();
        let by_number =
            parse_device_number(fields.get(2)?).is_some_and(|number| numbers.contains(&number));
        let by_source = source.starts_with("/dev/")
            && std::fs::metadata(source).is_ok_and(|metadata| {
                metadata.file_type().is_block_device() && numbers.contains(&metadata.rdev())
            });
        (by_number || by_source).then(|| Mount {
            source: source.to_string(),
            mount_point: mount_point.to_string(),
        })
    })
}

/// `BLKGETSIZE64`: `_IOR(0x12, 114, u64)`, encoded for the target
/// architecture by rustix (the direction bits differ between architectures).
const BLKGETSIZE64: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u64>(0x12, 114);

/// The size of an open block device in bytes.
pub fn block_device_bytes(device: &File) -> std::io::Result<u64> {
    // SAFETY: BLKGETSIZE64 reads one u64 from the kernel, which is exactly the
    // output type the getter declares, and the descriptor stays open (borrowed
    // from `device`) for the call's duration.
    let bytes =
        unsafe { rustix::ioctl::ioctl(device, rustix::ioctl::Getter::<BLKGETSIZE64, u64>::new()) }?;
    Ok(bytes)
}

/// Creates a data file at `path`, holds its owner's lock
/// ([`crate::lifecycle::hold`]) and fills it with `bytes` of data; returns it
/// open, so the lock lasts as long as the caller keeps it.
fn create_data_file(path: &Path, bytes: u64) -> Result<File, CliError> {
    let failed = |error: std::io::Error| {
        let fix = permission_fix(&error, true).unwrap_or("give another target directory");
        usage(format!(
            "cannot lay out data file {}: {error}; {fix}",
            path.display()
        ))
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(failed)?;
    crate::lifecycle::hold(&file).map_err(failed)?;
    fill(&file, 0, bytes, path)?;
    crate::lifecycle::sync_data_interruptibly(&file, path)?;
    Ok(file)
}

/// Opens a user's file target and takes the run's lock on it before anything
/// is written ([`crate::lifecycle::lock_target`]); a second run is refused.
fn lock_file_target(path: &Path) -> Result<File, CliError> {
    let file =
        File::open(path).map_err(|error| usage(format!("target {}: {error}", path.display())))?;
    crate::lifecycle::lock_target(&file, path)?;
    Ok(file)
}

/// Writes `bytes` of pseudo-random data into `file` from `offset` on.
pub(crate) fn fill(file: &File, offset: u64, bytes: u64, path: &Path) -> Result<(), CliError> {
    let failed = |error: std::io::Error| {
        usage(format!(
            "cannot lay out data in {}: {error}",
            path.display()
        ))
    };
    let mut chunk = vec![0u8; 1 << 20];
    let mut state = 0x9E37_79B9_7F4A_7C15_u64 ^ bytes;
    let mut written = 0;
    while written < bytes {
        if interrupted() {
            return Err(CliError::interrupted());
        }
        fill_random(&mut chunk, &mut state);
        let length = (bytes - written).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..length], offset + written)
            .map_err(failed)?;
        written += length as u64;
    }
    Ok(())
}

/// Overwrites `chunk` (a multiple of 8 bytes long; a shorter tail is left as
/// is) with xorshift64 output from `state`, which it advances: cheap, and
/// incompressible enough for a disk. Bench's and tune's layouts both use it.
pub fn fill_random(chunk: &mut [u8], state: &mut u64) {
    for word in chunk.chunks_exact_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        word.copy_from_slice(&state.to_le_bytes());
    }
}

/// Makes every file's data durable and drops it from the page cache, so a run
/// starts neither with another mode's dirty pages nor with warm reads. The
/// sync stops early on Ctrl-C ([`crate::lifecycle::sync_data_interruptibly`]).
pub fn settle(plan: &Plan) -> Result<(), CliError> {
    for path in &plan.files {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|error| usage(format!("{}: {error}", path.display())))?;
        crate::lifecycle::sync_data_interruptibly(&file, path)?;
        // Advice only: a failure leaves the pages cached, which the run survives.
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rustix's encoding of `_IOR(0x12, 114, u64)` is the number the kernel
    /// headers give `BLKGETSIZE64` on the common ioctl layout.
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn blkgetsize64_has_the_kernels_number() {
        assert_eq!(u64::from(BLKGETSIZE64), 0x8008_1272);
    }
}
