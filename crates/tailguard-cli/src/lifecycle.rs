//! A run's life: stopping on a signal, owning what it lays out, refusing a
//! second run on a file another one holds, and removing what a killed run
//! left behind.
//!
//! - **Signals.** [`watch_interrupts`] blocks SIGINT (Ctrl-C), SIGTERM and
//!   SIGHUP (a closed terminal) in the calling thread, and so in every thread
//!   started afterwards, and starts a thread that waits for them with
//!   `sigwait` and raises a flag the run loops poll ([`interrupted`]). No
//!   handler runs inside another thread's system call, so no io_uring wait is
//!   cut short with EINTR. The run then stops, removes its files and exits
//!   with 128 + the signal's number (130 for SIGINT, 129 for SIGHUP, 143 for
//!   SIGTERM). A second signal exits at once with that status, without
//!   removing anything: the next run does ([`remove_leftovers`]).
//! - **Ownership.** Whatever bench, tune, frontier or demo lays out in a
//!   directory carries the owner's process id in its name
//!   (`.tailguard-bench-PID-N.data`, `.tailguard-tune-PID.data`,
//!   `tailguard-demo-PID/`), and the owner holds an exclusive `flock` on each
//!   such file or directory from its creation to its removal ([`hold`]). The
//!   kernel releases a `flock` when its holder dies, however it dies
//!   (`kill -9` and the OOM killer included), so a free lock means a dead
//!   owner whatever happened to the process id since.
//! - **Leftovers.** [`remove_leftovers`] removes the entries of those names in
//!   a directory whose owner is dead: their lock is free *and* no running
//!   `tailguard` process has the id in their name. The second check covers
//!   the moment between a file's creation and its lock, and makes the rule
//!   conservative: a live owner's files are never removed; a dead owner's
//!   files whose id a new `tailguard` process has taken wait for a later run.
//!   Every run that lays out files calls it on its directory first
//!   ([`note_leftovers`]), and `tailguard clean DIR` calls it alone.
//! - **Removing without waiting.** A run removes what it laid out when it
//!   ends ([`remove_paths`]). After a stop signal, files of hundreds of MiB
//!   or more are removed by a child process the run forks, which holds every
//!   descriptor the run had: the filesystem's work of freeing them (tenths
//!   of a second per GiB) is the child's, not the stop's.
//! - **Waiting for the disk.** Syncing gigabytes of dirty pages (a data
//!   file just laid out, or a file a buffered run wrote, before the next
//!   run) goes in steps that check for a stop ([`sync_data_interruptibly`]),
//!   so Ctrl-C is not held back until the device has written them all.
//! - **File targets.** [`lock_target`] takes an exclusive `flock` on a user's
//!   file (bench's or tune's target) before anything is written to it and
//!   keeps it for the run. A second run on the same file is refused with the
//!   holder's process id, found in `/proc/locks`, and the fix.

use crate::error::CliError;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that arrived first (0 while none has).
static INTERRUPT_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The signals that stop a run: Ctrl-C, `kill`, and a closed terminal.
const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread it
/// starts afterwards) and starts a thread that waits for them with `sigwait`
/// and records the first ([`interrupted`]). A second signal exits at once
/// with status 128 + its number, without cleaning up. Call it before starting
/// any other thread.
pub fn watch_interrupts() {
    // SAFETY: plain libc calls on a zero-initialised, then properly initialised,
    // signal set owned by this function.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in STOP_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let spawned = std::thread::Builder::new()
        .name("tailguard-signals".into())
        .spawn(move || loop {
            let mut signal = 0;
            // SAFETY: `set` is a valid signal set and `signal` a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                continue;
            }
            if INTERRUPT_SIGNAL
                .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // SAFETY: _exit is always safe to call; it ends the process.
                unsafe { libc::_exit(128 + signal) };
            }
        });
    if spawned.is_err() {
        // Without the watcher, let the default action (termination) stand.
        // SAFETY: as above, with the same set.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

/// Whether SIGINT, SIGTERM or SIGHUP has arrived.
pub fn interrupted() -> bool {
    INTERRUPT_SIGNAL.load(Ordering::SeqCst) != 0
}

/// The signal that stopped the run, if one did.
pub fn interrupt_signal() -> Option<i32> {
    match INTERRUPT_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Bytes of dirty pages [`sync_data_interruptibly`] writes back per step:
/// smaller steps notice a stop sooner, larger ones keep more of the device's
/// queue busy. Two steps are in flight at a time.
const SYNC_STEP_BYTES: u64 = 8 << 20;

/// `fdatasync`, in steps that check for a stop signal between them: the
/// dirty pages are written back [`SYNC_STEP_BYTES`] at a time with
/// `sync_file_range` (the next step started before the previous one is waited
/// for), then `fdatasync` makes the rest (metadata, the device's cache)
/// durable. A plain `fdatasync` of gigabytes of dirty pages cannot be
/// interrupted and would hold Ctrl-C back for as long as the device takes;
/// this one returns [`CliError::interrupted`] within about two steps'
/// write time. `path` names the file in errors.
pub fn sync_data_interruptibly(file: &File, path: &Path) -> Result<(), CliError> {
    let failed =
        |error: io::Error| CliError::usage(format!("cannot sync {}: {error}", path.display()));
    let length_bytes = file.metadata().map_err(failed)?.len();
    let range = |offset: u64, flags: libc::c_uint| -> io::Result<()> {
        let length = SYNC_STEP_BYTES.min(length_bytes - offset);
        // SAFETY: sync_file_range only reads its scalar arguments; the
        // descriptor is valid for the call (borrowed from `file`).
        let result = unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(file),
                offset as libc::off64_t,
                length as libc::off64_t,
                flags,
            )
        };
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let mut previous: Option<u64> = None;
    let mut offset = 0;
    while offset < length_bytes {
        if interrupted() {
            return Err(CliError::interrupted());
        }
        match range(offset, libc::SYNC_FILE_RANGE_WRITE) {
            // Filesystems without it: one plain fdatasync below.
            Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => break,
            result => result.map_err(failed)?,
        }
        if let Some(start) = previous {
            range(
                start,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            )
            .map_err(failed)?;
        }
        previous = Some(offset);
        offset += SYNC_STEP_BYTES;
    }
    if interrupted() {
        return Err(CliError::interrupted());
    }
    file.sync_data().map_err(failed)
}

/// Allocated bytes from which [`remove_paths`] removes in a child process
/// after a stop signal: freeing the extents of a large file (and waiting for
/// its pages under writeback) takes the filesystem tenths of a second per
/// GiB, which a stop should not wait for, while a fork costs a millisecond
/// or two, which small files do not repay.
const BACKGROUND_REMOVAL_BYTES_MIN: u64 = 256 << 20;

/// Removes what a run laid out: files, and directories with the files in
/// them. Normally at once. After a stop signal, when they hold at least
/// [`BACKGROUND_REMOVAL_BYTES_MIN`], in a child process this one forks, so
/// that the exit does not wait for the filesystem: the child holds every
/// descriptor this process had (its data files and the owner's `flock`s among
/// them), so the files are freed by the child's removal, never by this
/// process's exit; and if the child is killed, the next run's
/// [`remove_leftovers`] finds the files with a dead owner.
pub fn remove_paths(paths: &[PathBuf]) {
    if interrupted() && allocated_bytes(paths) >= BACKGROUND_REMOVAL_BYTES_MIN {
        match remove_in_child(paths) {
            Ok(_) => return,
            Err(error) => tracing::debug!(%error, "cannot fork a remover; removing here"),
        }
    }
    for path in paths {
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
    }
}

/// The bytes the filesystem allocated to `paths` (a directory: to the files
/// in it).
fn allocated_bytes(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|path| tree_allocated_bytes(path.as_path()))
        .sum()
}

/// The bytes the filesystem allocated to `path` and, for a directory (not a
/// link to one), to everything under it.
fn tree_allocated_bytes(path: &Path) -> u64 {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = metadata.blocks() * 512;
    if !metadata.is_dir() {
        return own;
    }
    let under: u64 = std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|entry| tree_allocated_bytes(&entry.path()))
            .sum()
    });
    own + under
}

/// Forks a child that removes `paths` (a directory with everything under
/// it) and exits; returns its process id. The child closes
/// its standard streams first, so that a pipe reading this process's output
/// ends when this process does.
fn remove_in_child(paths: &[PathBuf]) -> io::Result<libc::pid_t> {
    // Everything the child needs is made here: between fork and exit it makes
    // only async-signal-safe calls (close, unlink, rmdir, _exit), since
    // another thread may have held a lock (the allocator's) at the fork.
    let mut files = Vec::new();
    let mut directories = Vec::new();
    for path in paths {
        collect_tree(path, &mut files, &mut directories);
    }
    // SAFETY: fork has no memory-safety preconditions; the child below only
    // makes async-signal-safe calls on data prepared before it, then exits.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: close, unlink, rmdir and _exit on valid descriptors and
            // NUL-terminated strings owned by this (copied) address space.
            unsafe {
                for descriptor in 0..3 {
                    libc::close(descriptor);
                }
                for file in &files {
                    libc::unlink(file.as_ptr());
                }
                for directory in &directories {
                    libc::rmdir(directory.as_ptr());
                }
                libc::_exit(0)
            }
        }
        child => Ok(child),
    }
}

/// Appends `path` to `files`, or, for a directory (not a link to one), every
/// file under it to `files` and it and its subdirectories to `directories`,
/// deepest first: the order that removes a tree.
fn collect_tree(
    path: &Path,
    files: &mut Vec<std::ffi::CString>,
    directories: &mut Vec<std::ffi::CString>,
) {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    let is_directory = std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir());
    if !is_directory {
        files.push(name);
        return;
    }
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.filter_map(Result::ok) {
            collect_tree(&entry.path(), files, directories);
        }
    }
    directories.push(name);
}

/// The name of a stop signal (`SIGHUP`), for messages.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Takes the owner's exclusive `flock` on a file or directory this run has
/// just created, for as long as `file` (or a duplicate of it) stays open. It
/// waits while another run's [`remove_leftovers`] probes the lock (a moment).
pub fn hold(file: &File) -> io::Result<()> {
    rustix::fs::flock(file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(())
}

/// Takes an exclusive `flock` on a user's file target for the run (kept while
/// `file` stays open), or refuses with the holder's process id and the fix.
/// A lock this process already holds through another descriptor (the same
/// file named twice) counts as held.
pub fn lock_target(file: &File, path: &Path) -> Result<(), CliError> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let holder = file.metadata().ok().and_then(|metadata| {
                // `/proc/locks` is read in several chunks, and locks taken
                // or dropped by others between two of them shift its lines,
                // so a read can miss the holder's line: look again.
                (0..PROC_LOCKS_READS).find_map(|_| {
                    flock_holder(&std::fs::read_to_string("/proc/locks").ok()?, &metadata)
                })
            });
            if holder == Some(std::process::id()) {
                return Ok(());
            }
            let who = match holder {
                Some(pid) => format!("process {pid}{}", process_label(pid)),
                None => "another process".to_string(),
            };
            Err(CliError::usage(format!(
                "target {} is locked by {who}: another run is using it, and two runs on one file \
                 would collide; wait for that run to end (or stop it{}), or give another target",
                path.display(),
                holder.map_or_else(String::new, |pid| format!(": kill {pid}"))
            )))
        }
        // Filesystems without flock (some network ones): run unlocked.
        Err(_) => Ok(()),
    }
}

/// How many times [`lock_target`] reads `/proc/locks` for the holder of a
/// refused lock before it names none: each read is a few chunks, between
/// which other processes' locks may shift the lines past the holder's.
const PROC_LOCKS_READS: usize = 3;

/// ` (tailguard bench ...)`: the command line of process `pid`, if readable.
fn process_label(pid: u32) -> String {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let words: Vec<String> = raw
        .split(|&byte| byte == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    if words.is_empty() {
        return String::new();
    }
    let program = Path::new(&words[0])
        .file_name()
        .map_or_else(|| words[0].clone(), |name| name.to_string_lossy().into());
    let rest = words[1..].join(" ");
    format!(" ({program} {rest})").replace(" )", ")")
}

/// The process holding a `FLOCK` on the file of `metadata`, from the text of
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`: the
/// device as hexadecimal `major:minor`, then the inode).
fn flock_holder(locks: &str, metadata: &std::fs::Metadata) -> Option<u32> {
    let wanted = format!(
        "{:02x}:{:02x}:{}",
        libc::major(metadata.dev()),
        libc::minor(metadata.dev()),
        metadata.ino()
    );
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Blocked waiters are listed as `1: -> FLOCK ...`: not holders.
        if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&wanted.as_str()) {
            return None;
        }
        fields.get(4)?.parse().ok()
    })
}

/// What a run lays out in a directory, by name: the owner's process id, if
/// `name` is one of those names.
pub fn owner_of(name: &str) -> Option<u32> {
    let digits = if let Some(rest) = name.strip_prefix(".tailguard-bench-") {
        rest.split('-').next()?
    } else if let Some(rest) = name.strip_prefix(".tailguard-tune-") {
        rest.strip_suffix(".data")?
    } else if let Some(rest) = name.strip_prefix(".tailguard-output-") {
        // An output file's replacement, written beside it and renamed over
        // it at the end (`output::write_file`): a run killed in between
        // leaves it.
        rest.strip_suffix(".tmp")?.split('-').next()?
    } else {
        name.strip_prefix("tailguard-demo-")?
    };
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a `tailguard` process with id `pid` runs: it might own files
/// named with that id and not have locked them yet.
fn tailguard_runs_as(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(name) => name.trim_end() == "tailguard",
        // No such process (or no /proc): no owner to protect.
        // Without /proc nothing can be told: assume it runs.
        Err(error) => error.kind() != io::ErrorKind::NotFound || !Path::new("/proc/self").exists(),
    }
}

/// What [`remove_leftovers`] did in a directory.
#[derive(Debug, Default)]
pub struct Cleanup {
    /// Entries of dead owners, removed: (path, owner's process id).
    pub removed: Vec<(PathBuf, u32)>,
    /// Entries of live owners, left alone.
    pub live: Vec<(PathBuf, u32)>,
    /// Entries of dead owners that could not be removed, and why.
    pub failed: Vec<(PathBuf, io::Error)>,
}

/// Removes the files and directories that runs killed before they could clean
/// up left in `directory`: entries named as [`owner_of`] knows whose owner's
/// `flock` is free and whose process id no running `tailguard` has.
pub fn remove_leftovers(directory: &Path) -> Cleanup {
    scan_leftovers(directory, true)
}

/// [`remove_leftovers`], removing only when `remove`; without it `removed`
/// lists what would go.
fn scan_leftovers(directory: &Path, remove: bool) -> Cleanup {
    let mut cleanup = Cleanup::default();
    let Ok(entries) = std::fs::read_dir(directory) else {
        return cleanup;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_of) else {
            continue;
        };
        // Only what a run makes: a FIFO of such a name would block the probe's
        // open, and a link is somebody else's.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if !kind.is_file() && !kind.is_dir() {
            continue;
        }
        let path = entry.path();
        if pid == std::process::id() || owner_alive(&path, pid) {
            cleanup.live.push((path, pid));
            continue;
        }
        let removed = if !remove {
            Ok(())
        } else if kind.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => cleanup.removed.push((path, pid)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => cleanup.failed.push((path, error)),
        }
    }
    cleanup
}

/// Whether the owner of `path` (named with `pid`) may still be running: its
/// lock is held, or a `tailguard` process has that id.
fn owner_alive(path: &Path, pid: u32) -> bool {
    let locked = match File::open(path) {
        Ok(file) => {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
                Err(rustix::io::Errno::WOULDBLOCK) => true,
                // Free (the probe's lock goes with `file`), or no flock here.
                _ => false,
            }
        }
        // Gone meanwhile: nothing to remove. Unreadable: leave it alone.
        Err(_) => true,
    };
    locked || tailguard_runs_as(pid)
}

/// Runs [`remove_leftovers`] on `directory` and says on standard error what it
/// removed and what it could not.
pub fn note_leftovers(directory: &Path) {
    let cleanup = remove_leftovers(directory);
    for (path, pid) in &cleanup.removed {
        eprintln!(
            "note: removed {}, left by tailguard process {pid}, which is no longer running",
            path.display()
        );
    }
    for (path, error) in &cleanup.failed {
        eprintln!(
            "warning: cannot remove {}, left by an earlier tailguard run: {error}; remove it by \
             hand",
            path.display()
        );
    }
}

/// `tailguard clean DIR` arguments.
#[derive(Debug, clap::Args)]
pub struct CleanArguments {
    /// The directories to clean (the targets of earlier bench, tune, frontier
    /// or demo runs); default: the current directory.
    pub directories: Vec<PathBuf>,
    /// List what would be removed and what is kept, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `tailguard clean`: removes what killed runs left in each directory,
/// and lists what live runs still hold.
pub fn run_clean(arguments: &CleanArguments) -> Result<(), CliError> {
    let directories = if arguments.directories.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        arguments.directories.clone()
    };
    let mut failed = 0;
    for directory in &directories {
        if !directory.is_dir() {
            return Err(CliError::usage(format!(
                "{} is not a directory; give the directory an earlier run laid out its files in",
                directory.display()
            )));
        }
        let cleanup = scan_leftovers(directory, !arguments.dry_run);
        let verb = if arguments.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for (path, pid) in &cleanup.removed {
            println!("{verb} {} (process {pid} is gone)", path.display());
        }
        for (path, pid) in &cleanup.live {
            println!("kept {} (process {pid} is running)", path.display());
        }
        for (path, error) in &cleanup.failed {
            eprintln!("cannot remove {}: {error}", path.display());
        }
        failed += cleanup.failed.len();
        if cleanup.removed.is_empty() && cleanup.live.is_empty() && cleanup.failed.is_empty() {
            println!("{}: nothing left by tailguard runs", directory.display());
        }
    }
    if failed > 0 {
        return Err(CliError::usage(format!(
            "{failed} leftover(s) could not be removed; check their permissions and remove them \
             by hand"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let directory =
            std::env::temp_dir().join(format!("tailguard-lifecycle-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        directory
    }

    /// A process id no process has: above the kernel's largest.
    fn unused_pid() -> u32 {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .unwrap_or(4_194_304)
            + 1
    }

    #[test]
    fn a_forked_remover_removes_files_and_directories() {
        let directory = scratch("remover");
        let demo = directory.join("tailguard-demo-1");
        std::fs::create_dir(&demo).unwrap();
        std::fs::write(demo.join("read.data"), vec![1u8; 64 << 10]).unwrap();
        std::fs::write(demo.join("write.data"), vec![2u8; 4096]).unwrap();
        std::fs::create_dir(demo.join("frontier")).unwrap();
        std::fs::write(demo.join("frontier").join("point.data"), [4u8; 512]).unwrap();
        let data = directory.join(".tailguard-bench-1-0.data");
        std::fs::write(&data, vec![3u8; 64 << 10]).unwrap();
        let held = File::open(&data).unwrap();
        hold(&held).unwrap();
        let paths = [demo.clone(), data.clone()];
        assert!(
            allocated_bytes(&paths) >= 2 * (64 << 10),
            "the files' blocks count"
        );
        let child = remove_in_child(&paths).unwrap();
        let mut status = 0;
        // SAFETY: waits for the child this test forked; `status` is ours.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(
            !demo.exists() && !data.exists(),
            "the child removed everything"
        );
        drop(held);
        assert_eq!(std::fs::read_dir(&directory).unwrap().count(), 0);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_stepwise_sync_writes_back_every_step_and_an_empty_file() {
        use std::io::Write as _;
        let directory = scratch("sync");
        for bytes in [0, SYNC_STEP_BYTES * 2 + 4096] {
            let path = directory.join(format!("{bytes}.data"));
            let mut file = File::create(&path).unwrap();
            file.write_all(&vec![0x5a; bytes as usize]).unwrap();
            sync_data_interruptibly(&file, &path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap().len() as u64, bytes);
        }
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn names_give_their_owner() {
        assert_eq!(owner_of(".tailguard-bench-42-0.data"), Some(42));
        assert_eq!(owner_of(".tailguard-bench-42-probe"), Some(42));
        assert_eq!(owner_of(".tailguard-tune-7.data"), Some(7));
        assert_eq!(owner_of("tailguard-demo-99"), Some(99));
        assert_eq!(owner_of(".tailguard-output-31-0.tmp"), Some(31));
        assert_eq!(owner_of(".tailguard-output-31-12.tmp"), Some(31));
        for name in [
            ".tailguard-output-31-0",
            ".tailguard-output--0.tmp",
            ".tailguard-output-x1-0.tmp",
            "tailguard-demo-",
            "tailguard-demo-9x",
            ".tailguard-tune-7",
            ".tailguard-bench--1-0.data",
            "my-data",
            "tailguard-profile.toml",
        ] {
            assert_eq!(owner_of(name), None, "{name}");
        }
    }

    #[test]
    fn dead_owners_files_go_and_held_ones_stay() {
        let directory = scratch("dead");
        let dead = unused_pid();
        let data = directory.join(format!(".tailguard-bench-{dead}-0.data"));
        let tune = directory.join(format!(".tailguard-tune-{dead}.data"));
        let demo = directory.join(format!("tailguard-demo-{dead}"));
        let output = directory.join(format!(".tailguard-output-{dead}-0.tmp"));
        std::fs::write(&output, b"{}").unwrap();
        std::fs::write(&data, b"x").unwrap();
        std::fs::write(&tune, b"x").unwrap();
        std::fs::create_dir_all(demo.join("frontier")).unwrap();
        std::fs::write(demo.join("writes.data"), b"x").unwrap();
        // Held by a "live owner" (this test) under a dead-looking id.
        let held = directory.join(format!(".tailguard-bench-{dead}-1.data"));
        std::fs::write(&held, b"x").unwrap();
        let holder = File::open(&held).unwrap();
        hold(&holder).unwrap();
        let user = directory.join("user.data");
        std::fs::write(&user, b"x").unwrap();
        // Not a file or directory: never opened (a FIFO would block) nor removed.
        let socket = directory.join(format!(".tailguard-bench-{dead}-2.data"));
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let link = directory.join(format!(".tailguard-bench-{dead}-3.data"));
        std::os::unix::fs::symlink(&user, &link).unwrap();

        let cleanup = remove_leftovers(&directory);
        assert_eq!(cleanup.removed.len(), 4, "{cleanup:?}");
        assert!(cleanup.failed.is_empty(), "{cleanup:?}");
        assert!(!data.exists() && !tune.exists() && !demo.exists() && !output.exists());
        assert!(held.exists(), "a held file stays");
        assert_eq!(cleanup.live, vec![(held.clone(), dead)]);
        assert!(user.exists(), "other files are not touched");
        assert!(socket.exists() && link.symlink_metadata().is_ok());
        drop(holder);
        let cleanup = remove_leftovers(&directory);
        assert_eq!(cleanup.removed, vec![(held.clone(), dead)]);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn own_files_and_a_live_tailguards_stay() {
        let directory = scratch("own");
        let own = directory.join(format!(".tailguard-bench-{}-0.data", std::process::id()));
        std::fs::write(&own, b"x").unwrap();
        let cleanup = remove_leftovers(&directory);
        assert!(cleanup.removed.is_empty(), "{cleanup:?}");
        assert!(own.exists());
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_second_lock_on_a_target_is_refused_naming_the_holder() {
        let directory = scratch("lock");
        let path = directory.join("target.data");
        std::fs::write(&path, b"x").unwrap();
        let first = File::open(&path).unwrap();
        lock_target(&first, &path).unwrap();
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        assert_eq!(
            flock_holder(&locks, &first.metadata().unwrap()),
            Some(std::process::id()),
            "{locks}"
        );
        // This process holds it: the same file named twice is allowed.
        let second = File::open(&path).unwrap();
        lock_target(&second, &path).unwrap();
        drop(first);
        drop(second);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn proc_locks_lines_are_read_by_device_and_inode() {
        let directory = scratch("parse");
        let path = directory.join("target.data");
        std::fs::write(&path, b"x").unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        let id = format!(
            "{:02x}:{:02x}:{}",
            libc::major(metadata.dev()),
            libc::minor(metadata.dev()),
            metadata.ino()
        );
        let text = format!(
            "1: POSIX  ADVISORY  WRITE 11 {id} 0 EOF\n\
             2: FLOCK  ADVISORY  WRITE 22 00:01:1 0 EOF\n\
             3: FLOCK  ADVISORY  WRITE 33 {id} 0 EOF\n\
             3: -> FLOCK  ADVISORY  WRITE 44 {id} 0 EOF\n"
        );
        assert_eq!(flock_holder(&text, &metadata), Some(33));
        assert_eq!(flock_holder("", &metadata), None);
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
