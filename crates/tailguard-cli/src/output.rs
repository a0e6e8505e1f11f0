//! Output files (`--output`, `--report`, `--json FILE`): checked before a run,
//! with one overwrite rule for every command; and printing to standard output
//! and standard error without panicking when either is gone.
//!
//! A run can take an hour; a typo in an output path must not cost it. So every
//! command checks its output paths first, with [`check_outputs`], and the same
//! rule holds everywhere: an existing file is never replaced unless the
//! command line says `--allow-overwrite`. The check creates the file itself
//! (with `O_CREAT | O_EXCL`) and removes it at once, so whatever would stop
//! the write at the end (a missing or read-only directory, a path naming a
//! directory, a full inode table, a read-only filesystem) stops the run now,
//! with the kernel's reason, the path, the flag and the fix. `-` is
//! standard output for a flag that says it takes it (frontier's `--json`,
//! tune's `--output` and `--report`), and is then not checked; any other
//! flag refuses it, instead of writing a file named `-` at the end. Two spellings of one file (`out.json` and
//! `./out.json`) are refused as one path given twice.
//!
//! The write at the end, [`write_file`], writes a temporary file beside the
//! target, syncs it, and only then moves it into place, so a write that
//! fails (a full disk) leaves no partial file and an old file it was to
//! replace stays whole. It keeps the rule: without `--allow-overwrite` the
//! move is exclusive (`RENAME_NOREPLACE`), so a file that appeared at the
//! path during the run (another run's report, with the same default name) is
//! kept and the write fails naming the flag, instead of replacing it. A
//! replacement goes through a symbolic link to the file it names and keeps
//! that file's mode; the check before the run makes sure the directory takes
//! the new file.
//!
//! `println!` and `eprintln!` panic when their stream is a pipe whose reader
//! exited (`tailguard sim a.toml | head -1`: Rust ignores SIGPIPE, so the
//! write fails with EPIPE). [`print`] returns that as an error instead, which
//! `main` ends on quietly with [`STDOUT_CLOSED_STATUS`], and [`note`] drops a
//! note that standard error cannot take. A command that writes files writes
//! them before it prints, so a closed pipe costs none of them.

use crate::error::CliError;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Checks each `(flag, path, takes_stdout)` the command will write at the
/// end of its run: that `-` is given only where `takes_stdout` says the flag
/// reads it as standard output, that the paths differ, that none is a
/// directory, that an existing file is replaced only with `allow_overwrite`,
/// and that the file can be created.
pub fn check_outputs(
    outputs: &[(&str, &Path, bool)],
    allow_overwrite: bool,
) -> Result<(), CliError> {
    for (index, &(flag, path, takes_stdout)) in outputs.iter().enumerate() {
        if is_stdout(path) {
            if takes_stdout {
                continue;
            }
            return Err(CliError::usage(format!(
                "{flag} - : {flag} writes a file, not standard output; give a file name \
                 ({flag} ./- for a file named -)"
            )));
        }
        let key = same_file_key(path);
        if let Some((other, _, _)) = outputs[..index]
            .iter()
            .find(|(_, other, _)| same_file_key(other) == key)
        {
            return Err(CliError::usage(format!(
                "{other} and {flag} both name {}; give each its own file",
                path.display()
            )));
        }
        check_output(flag, path, allow_overwrite)?;
    }
    Ok(())
}

/// Whether an output path is `-`: standard output, for a flag that takes it.
pub fn is_stdout(path: &Path) -> bool {
    path == Path::new("-")
}

/// What names the file `path` would be, however it is written: its
/// directory resolved (`.`, `..`, symbolic links) and its own name; the path
/// as written when the directory cannot be resolved (a missing one, refused
/// later with its own message).
fn same_file_key(path: &Path) -> PathBuf {
    match (std::fs::canonicalize(directory_of(path)), path.file_name()) {
        (Ok(directory), Some(name)) => directory.join(name),
        _ => path.to_path_buf(),
    }
}

/// Checks one output path; see [`check_outputs`].
pub fn check_output(flag: &str, path: &Path, allow_overwrite: bool) -> Result<(), CliError> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(CliError::usage(format!(
            "{flag} is empty; give a file name"
        )));
    }
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => {
            return Err(CliError::usage(format!(
                "{flag} {shown} is a directory; give a file name in it, e.g. {}",
                path.join("out").display()
            )))
        }
        Ok(_) if !allow_overwrite => {
            return Err(CliError::usage(format!(
                "{flag} {shown} exists; pass --allow-overwrite to replace it, or give another \
                 {flag}"
            )))
        }
        Ok(_) => {
            // The replacement is a new file moved over it: its directory
            // must take one.
            let directory = directory_of(&resolved(path)).to_path_buf();
            return OpenOptions::new()
                .write(true)
                .open(path)
                .map(drop)
                .and_then(|()| create_temporary(&directory))
                .map(|(temporary, _)| {
                    let _ = std::fs::remove_file(temporary);
                })
                .map_err(|error| {
                    CliError::usage(format!(
                        "{flag} {shown}: cannot replace it: {error}; {}",
                        fix(&error)
                    ))
                });
        }
        Err(_) => {}
    }
    let parent = directory_of(path);
    if !parent.is_dir() {
        return Err(CliError::usage(format!(
            "{flag} {shown}: the directory {} does not exist; create it first or give a path \
             in an existing directory",
            parent.display()
        )));
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => {
            drop(file);
            let _ = std::fs::remove_file(path);
            Ok(())
        }
        Err(error) => Err(CliError::usage(format!(
            "{flag} {shown}: cannot create it: {error}; {}",
            fix(&error)
        ))),
    }
}

/// Writes `contents` to the output `path` given by `flag`, under the rule
/// of the module docs: a new file, or, with `allow_overwrite`, whatever is
/// there replaced; whole or not at all.
pub fn write_file(
    flag: &str,
    path: &Path,
    contents: &[u8],
    allow_overwrite: bool,
) -> Result<(), CliError> {
    write_with(flag, path, allow_overwrite, |file| file.write_all(contents))
}

/// [`write_file`], with the contents written by `write`: into a temporary
/// file beside `path`, synced, then moved into place. On any failure the
/// temporary file is removed and `path` is as it was.
fn write_with(
    flag: &str,
    path: &Path,
    allow_overwrite: bool,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), CliError> {
    let shown = path.display();
    let target = resolved(path);
    let directory = directory_of(&target);
    let (temporary, mut file) = create_temporary(directory).map_err(|error| {
        CliError::usage(format!(
            "{flag} {shown}: cannot create a file in {}: {error}; {}",
            directory.display(),
            fix(&error)
        ))
    })?;
    if let Ok(old) = std::fs::metadata(&target) {
        // A replacement keeps the mode of the file it replaces.
        let _ = file.set_permissions(old.permissions());
    }
    let written = write(&mut file).and_then(|()| file.sync_all());
    drop(file);
    let placed = written
        .map_err(|error| {
            CliError::usage(format!(
                "{flag} {shown}: cannot write it: {error}; {}",
                fix(&error)
            ))
        })
        .and_then(|()| place(flag, path, &temporary, &target, allow_overwrite));
    if placed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    } else if let Ok(directory) = File::open(directory) {
        // The rename itself lasting a crash; a failure here loses nothing.
        let _ = directory.sync_all();
    }
    placed
}

/// The file a write to `path` replaces: the target of a symbolic link (so
/// the link stays, as when writing through it), else `path`.
fn resolved(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

/// The directory `path` is in (`.` for a bare name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// A new hidden file in `directory`, named after this process.
fn create_temporary(directory: &Path) -> io::Result<(PathBuf, File)> {
    let mut attempt = 0;
    loop {
        let path = directory.join(format!(
            ".tailguard-output-{}-{attempt}.tmp",
            std::process::id()
        ));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Moves the written `temporary` to `path` (the output `given` names, or the
/// file its link points to): over whatever is there with `allow_overwrite`,
/// else only where nothing is (`RENAME_NOREPLACE`; where the filesystem
/// lacks it, a hard link, or at last an exclusive copy). Errors name `given`.
fn place(
    flag: &str,
    given: &Path,
    temporary: &Path,
    path: &Path,
    allow_overwrite: bool,
) -> Result<(), CliError> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use rustix::io::Errno;
    let placed = if allow_overwrite {
        std::fs::rename(temporary, path)
    } else {
        match renameat_with(CWD, temporary, CWD, path, RenameFlags::NOREPLACE) {
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                match std::fs::hard_link(temporary, path) {
                    Err(error) if error.kind() != io::ErrorKind::AlreadyExists => {
                        copy_exclusively(temporary, path)
                    }
                    linked => linked.map(|()| {
                        let _ = std::fs::remove_file(temporary);
                    }),
                }
            }
            renamed => renamed.map_err(io::Error::from),
        }
    };
    let shown = given.display();
    placed.map_err(|error| {
        if error.kind() == io::ErrorKind::AlreadyExists {
            CliError::usage(format!(
                "{flag} {shown}: a file appeared there during the run and is kept; give \
                 another path, or add --allow-overwrite to replace it"
            ))
        } else {
            CliError::usage(format!(
                "{flag} {shown}: cannot write it: {error}; {}",
                fix(&error)
            ))
        }
    })
}

/// Copies `temporary` to a new file `path` (removed again if the copy
/// fails), then removes `temporary`.
fn copy_exclusively(temporary: &Path, path: &Path) -> io::Result<()> {
    let mut target = OpenOptions::new().write(true).create_new(true).open(path)?;
    let copied = File::open(temporary)
        .and_then(|mut source| io::copy(&mut source, &mut target))
        .and_then(|_| target.sync_all());
    if copied.is_err() {
        let _ = std::fs::remove_file(path);
    } else {
        let _ = std::fs::remove_file(temporary);
    }
    copied
}

/// The exit status after standard output closed before everything was
/// printed: 128 + SIGPIPE, what a shell reports for a command that signal
/// ended. `main` ends on it without a message.
pub const STDOUT_CLOSED_STATUS: u8 = 141;

/// Prints `text` and a newline to standard output; see [`print_to`].
pub fn print(text: &str) -> Result<(), CliError> {
    print_to(&mut io::stdout().lock(), text)
}

/// Prints `text` and a newline to `out`, standard output in [`print`]. A
/// closed pipe (its reader gone, as after `| head -1`) is an error with
/// [`STDOUT_CLOSED_STATUS`], where `println!` would panic: the command stops
/// printing, and reports any other failure.
pub fn print_to(out: &mut dyn io::Write, text: &str) -> Result<(), CliError> {
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|error| {
            if error.kind() == io::ErrorKind::BrokenPipe {
                CliError {
                    message: "standard output closed before everything was printed (its \
                              reader exited); pipe into a command that reads it all to see \
                              the rest"
                        .into(),
                    status: STDOUT_CLOSED_STATUS,
                }
            } else {
                CliError::usage(format!(
                    "cannot print to standard output: {error}; redirect it to a writable file"
                ))
            }
        })
}

/// Prints a note and a newline to standard error, if it is still there
/// (`eprintln!` panics when it is not).
pub fn note(text: &str) {
    let _ = writeln!(io::stderr(), "{text}");
}

/// `Ok` when every result is; else one error with every failure's message,
/// a line each, and the first status other than [`STDOUT_CLOSED_STATUS`]
/// (that one alone when nothing else failed).
pub fn all(results: impl IntoIterator<Item = Result<(), CliError>>) -> Result<(), CliError> {
    let failures: Vec<CliError> = results.into_iter().filter_map(Result::err).collect();
    let status = failures
        .iter()
        .map(|failure| failure.status)
        .find(|&status| status != STDOUT_CLOSED_STATUS)
        .or(failures.first().map(|failure| failure.status));
    match status {
        None => Ok(()),
        Some(status) => Err(CliError {
            message: failures
                .iter()
                .map(|failure| failure.message.as_str())
                .collect::<Vec<_>>()
                .join("\nerror: "),
            status,
        }),
    }
}

/// The fix for a failed create or open, by its cause.
fn fix(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => "give a path in a directory you can write to",
        Some(libc::EROFS) => "the filesystem is read-only; give a path on a writable one",
        Some(libc::ENOSPC | libc::EDQUOT) => "the filesystem is full; free some space first",
        Some(libc::ENAMETOOLONG) => "give a shorter name",
        _ => "give another path",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let directory =
            std::env::temp_dir().join(format!("tailguard-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        directory
    }

    #[test]
    fn a_missing_directory_an_existing_file_and_a_directory_are_refused() {
        let directory = scratch("rules");
        let missing = directory.join("no-such-dir/profile.toml");
        let error = check_output("--output", &missing, false).unwrap_err();
        assert!(error.message.contains("does not exist") && error.message.contains("--output"));

        let error = check_output("--report", &directory, false).unwrap_err();
        assert!(error.message.contains("is a directory"), "{error}");

        let existing = directory.join("old.html");
        std::fs::write(&existing, "keep me").unwrap();
        let error = check_output("--report", &existing, false).unwrap_err();
        assert!(error.message.contains("--allow-overwrite"), "{error}");
        check_output("--report", &existing, true).unwrap();
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");

        let fresh = directory.join("new.toml");
        check_output("--output", &fresh, false).unwrap();
        assert!(!fresh.exists(), "the check leaves nothing behind");

        let error = check_outputs(
            &[("--output", &fresh, false), ("--report", &fresh, false)],
            false,
        )
        .unwrap_err();
        assert!(error.message.contains("--output and --report"), "{error}");
        check_outputs(&[("--json", Path::new("-"), true)], false).unwrap();
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn two_spellings_of_one_file_are_refused() {
        let directory = scratch("spellings");
        let error = check_outputs(
            &[
                ("--json", Path::new("a.json"), false),
                ("--report", Path::new("./a.json"), false),
            ],
            false,
        )
        .unwrap_err();
        assert!(error.message.contains("--json and --report"), "{error}");
        let plain = directory.join("out.json");
        let roundabout = directory.join("sub/../out.json");
        std::fs::create_dir(directory.join("sub")).unwrap();
        let error = check_outputs(
            &[("--json", &plain, false), ("--report", &roundabout, false)],
            false,
        )
        .unwrap_err();
        assert!(error.message.contains("give each its own file"), "{error}");
        check_outputs(
            &[
                ("--json", &plain, false),
                ("--report", &directory.join("out.html"), false),
            ],
            false,
        )
        .unwrap();
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_dash_is_standard_output_only_where_the_flag_says_so() {
        let dash = Path::new("-");
        check_outputs(&[("--json", dash, true)], false).unwrap();
        let error =
            check_outputs(&[("--json", dash, true), ("--report", dash, false)], false).unwrap_err();
        assert!(
            error.message.contains("--report") && error.message.contains("./-"),
            "{error}"
        );
        assert!(!dash.exists(), "nothing named - is created");
    }

    #[test]
    fn a_failed_write_leaves_no_file_and_keeps_the_old_one() {
        let directory = scratch("failed");
        let failing = |file: &mut File| {
            file.write_all(b"half a rep")?;
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        };
        let fresh = directory.join("fresh.json");
        let error = write_with("--json", &fresh, false, failing).unwrap_err();
        assert!(error.message.contains("full"), "{error}");
        assert!(!fresh.exists(), "no partial file");

        let old = directory.join("old.html");
        std::fs::write(&old, "the old report").unwrap();
        write_with("--report", &old, true, failing).unwrap_err();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "the old report");
        let left: Vec<_> = std::fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, ["old.html"], "no temporary file is left");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    /// A writer whose reader is gone.
    struct ClosedPipe;

    impl io::Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_an_error_not_a_panic_and_every_failure_is_reported() {
        let closed = print_to(&mut ClosedPipe, "table").unwrap_err();
        assert_eq!(closed.status, STDOUT_CLOSED_STATUS);
        let mut printed = Vec::new();
        print_to(&mut printed, "table").unwrap();
        assert_eq!(printed, b"table\n");

        assert_eq!(all([Ok(()), Ok(())]), Ok(()));
        let only_closed = all([Ok(()), print_to(&mut ClosedPipe, "x")]).unwrap_err();
        assert_eq!(only_closed.status, STDOUT_CLOSED_STATUS);
        let both = all([
            print_to(&mut ClosedPipe, "x"),
            Err(CliError::usage("--report r.html: cannot write it")),
        ])
        .unwrap_err();
        assert_eq!(both.status, 2);
        assert!(
            both.message.contains("standard output closed")
                && both.message.contains("\nerror: --report r.html"),
            "{both}"
        );
    }

    #[test]
    fn a_replacement_goes_through_a_link_and_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let directory = scratch("link");
        let real = directory.join("real.html");
        std::fs::write(&real, "old").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = directory.join("link.html");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_file("--report", &link, b"new", true).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn replacing_needs_a_directory_that_takes_a_new_file() {
        use std::os::unix::fs::PermissionsExt;
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root, to check as another user");
            return;
        }
        let directory = scratch("locked");
        let existing = directory.join("old.html");
        std::fs::write(&existing, "keep").unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Only this thread becomes `nobody`: it may write the file, not
        // create one beside it.
        let checked = std::thread::spawn(move || {
            // 65534 is `nobody`; only this thread's credentials change.
            rustix::thread::set_thread_uid(rustix::process::Uid::from_raw(65534)).unwrap();
            check_output("--report", &existing, true)
        })
        .join()
        .unwrap();
        let error = checked.unwrap_err();
        assert!(error.message.contains("cannot replace it"), "{error}");
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn a_file_that_appears_during_the_run_is_kept_unless_overwriting_is_allowed() {
        let directory = scratch("appears");
        let report = directory.join("report.html");
        check_output("--report", &report, false).unwrap();
        std::fs::write(&report, "keep").unwrap();
        let error = write_file("--report", &report, b"new", false).unwrap_err();
        assert!(error.message.contains("--allow-overwrite"), "{error}");
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "keep");
        write_file("--report", &report, b"new", true).unwrap();
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "new");
        let fresh = directory.join("fresh.json");
        write_file("--json", &fresh, b"{}", false).unwrap();
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "{}");
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
