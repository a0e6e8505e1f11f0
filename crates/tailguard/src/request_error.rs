//! The [`Error`] of a request the kernel failed, with what was asked and where.
//!
//! A bare "Bad file descriptor (os error 9)" says neither which file nor which
//! operation; with many files and classes in flight that is no help. So a
//! failed read, write or sync comes back as an [`io::Error`] of the errno's
//! own [`io::ErrorKind`] whose payload is an [`Error`] of kind
//! [`ErrorKind::Request`]: the errno, the operation, its offset and length,
//! and the file's path (what `/proc/self/fd` names for the descriptor, looked
//! up only on failure). Its message adds a hint for the errnos a caller can
//! fix (EBADF, EINVAL, EFBIG, ENOSPC). A write that comes back short (no
//! errno) gets [`short_write`]'s error, which names its cause.

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, ErrorKind, Operation};

/// The error of a write at `offset` that wrote `written` of its `requested`
/// bytes to `path`, for callers that need all of it: `Interrupted` where
/// `cut_by_cancel` (a cancel asked for while it was out: the rest of its
/// pieces never reached the device), otherwise `WriteZero`, the device
/// having stopped short (full, or a file size limit).
pub(crate) fn short_write(
    path: &Path,
    offset: u64,
    written: usize,
    requested: usize,
    cut_by_cancel: bool,
) -> io::Error {
    let path = path.display();
    if cut_by_cancel {
        return io::Error::new(
            io::ErrorKind::Interrupted,
            format!(
                "{path}: write cut short by a cancel (Scheduler::cancel_pending or shutdown_now), \
                 {written} of {requested} bytes at offset {offset} written"
            ),
        );
    }
    io::Error::new(
        io::ErrorKind::WriteZero,
        format!(
            "{path}: short write, {written} of {requested} bytes at offset {offset}; the device \
             or filesystem is probably full"
        ),
    )
}

/// The error of `operation` on `file`, with the errno the kernel gave.
pub(crate) fn request(
    errno: i32,
    operation: Operation,
    file: Option<&std::fs::File>,
    offset: u64,
    length_bytes: u64,
) -> Error {
    let error = Error::new(ErrorKind::Request {
        errno,
        operation,
        offset,
        length_bytes,
    });
    let path = file
        .and_then(|file| std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok());
    match path {
        Some(path) => error.with_path(path),
        None => error,
    }
}

/// What the caller can do about `errno`, if anything specific.
fn hint(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EBADF => {
            "the file is not open for this: open it with read(true) or write(true) as needed"
        }
        libc::EINVAL => {
            "the kernel refused the request: check that offset and length suit the file \
             (O_DIRECT needs them aligned to its block size) and that the file takes this \
             operation"
        }
        libc::EFBIG => "the request ends past the largest file the filesystem holds",
        libc::ENOSPC => "the filesystem is full: free some space",
        _ => return None,
    })
}

/// The message of a request the kernel failed: the operation, its extent,
/// the file, the errno's text and the hint.
pub(crate) fn describe(
    formatter: &mut fmt::Formatter<'_>,
    errno: i32,
    operation: Operation,
    offset: u64,
    length_bytes: u64,
    path: Option<&Path>,
) -> fmt::Result {
    let path = path.map_or_else(
        || "(unknown file)".to_string(),
        |path| path.display().to_string(),
    );
    let os_error = io::Error::from_raw_os_error(errno);
    if length_bytes > 0 {
        write!(
            formatter,
            "{operation} of {length_bytes} bytes at offset {offset} of {path}: {os_error}"
        )?;
    } else {
        write!(formatter, "{operation} of {path}: {os_error}")?;
    }
    match hint(errno) {
        Some(hint) => write!(formatter, "; {hint}"),
        None => Ok(()),
    }
}

/// The error of the engine's request `message` of `length_bytes` that the
/// kernel failed with `errno`.
pub(crate) fn of_message(
    errno: i32,
    message: &crate::engine::IoMessage,
    length_bytes: u64,
) -> io::Error {
    use crate::engine::IoKind;
    let operation = match message.kind {
        IoKind::Read => Operation::Read,
        IoKind::Write => Operation::Write,
        IoKind::Fsync => Operation::Fsync,
        IoKind::Fdatasync => Operation::Fdatasync,
        IoKind::Nop => Operation::Nop,
    };
    request(
        errno,
        operation,
        message.file.as_deref(),
        message.offset,
        length_bytes,
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::os_error_code;

    #[test]
    fn the_message_names_the_operation_the_path_and_the_fix() {
        let path = std::env::temp_dir().join(format!("tailguard-request-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let error: io::Error =
            request(libc::EBADF, Operation::Write, Some(&file), 8192, 4096).into();
        let text = error.to_string();
        assert!(
            text.contains("write of 4096 bytes at offset 8192"),
            "{text}"
        );
        assert!(
            text.contains(path.file_name().unwrap().to_str().unwrap()),
            "{text}"
        );
        assert!(text.contains("write(true)"), "{text}");
        assert_eq!(os_error_code(&error), Some(libc::EBADF));
        assert_eq!(
            error.kind(),
            io::Error::from_raw_os_error(libc::EBADF).kind()
        );
        let inner = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<Error>())
            .expect("the payload is the library's error");
        assert_eq!(inner.path().and_then(|p| p.file_name()), path.file_name());
        assert_eq!(inner.raw_os_error(), Some(libc::EBADF));
        let sync = request(libc::EFBIG, Operation::Fsync, None, 0, 0).to_string();
        assert!(sync.starts_with("fsync of (unknown file): "), "{sync}");
        assert!(sync.contains("largest file"), "{sync}");
        assert_eq!(
            os_error_code(&io::Error::from_raw_os_error(libc::EIO)),
            Some(libc::EIO)
        );
        std::fs::remove_file(&path).unwrap();
    }
}
