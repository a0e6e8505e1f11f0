//! The error of a request the kernel failed, with what was asked and where.
//!
//! A bare "Bad file descriptor (os error 9)" says neither which file nor which
//! operation; with many files and classes in flight that is no help. So a
//! failed read, write or sync comes back as an [`io::Error`] of the errno's
//! own [`io::ErrorKind`] whose payload is a [`RequestError`]: the errno, the
//! operation, its offset and length, and the file's path (what
//! `/proc/self/fd` names for the descriptor, looked up only on failure), with
//! a hint for the errnos a caller can fix (EBADF, EINVAL, EFBIG, ENOSPC).
//!
//! The payload hides the errno from [`io::Error::raw_os_error`]; read it with
//! [`os_error_code`], which takes both kinds of error.

use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// A request the kernel failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
    /// The kernel's errno.
    pub errno: i32,
    /// `read`, `write`, `fsync` or `fdatasync`.
    pub operation: &'static str,
    /// The file, as `/proc/self/fd` names its descriptor (`None` if unknown).
    pub path: Option<PathBuf>,
    /// The request's first byte.
    pub offset: u64,
    /// The request's length in bytes (0 for syncs).
    pub length_bytes: u64,
}

impl RequestError {
    /// The error of `operation` on `file`, with the errno the kernel gave.
    pub fn new(
        errno: i32,
        operation: &'static str,
        file: Option<&std::fs::File>,
        offset: u64,
        length_bytes: u64,
    ) -> Self {
        let path = file.and_then(|file| {
            std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
        });
        Self {
            errno,
            operation,
            path,
            offset,
            length_bytes,
        }
    }

    /// As an [`io::Error`] of the errno's kind.
    pub fn into_io_error(self) -> io::Error {
        io::Error::new(io::Error::from_raw_os_error(self.errno).kind(), self)
    }

    /// What the caller can do about this errno, if anything specific.
    fn hint(&self) -> Option<&'static str> {
        Some(match self.errno {
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
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.as_ref().map_or_else(
            || "(unknown file)".to_string(),
            |path| path.display().to_string(),
        );
        if self.length_bytes > 0 {
            write!(
                formatter,
                "{} of {} bytes at offset {} of {path}: {}",
                self.operation,
                self.length_bytes,
                self.offset,
                io::Error::from_raw_os_error(self.errno)
            )?;
        } else {
            write!(
                formatter,
                "{} of {path}: {}",
                self.operation,
                io::Error::from_raw_os_error(self.errno)
            )?;
        }
        match self.hint() {
            Some(hint) => write!(formatter, "; {hint}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for RequestError {}

/// The error of the engine's request `message` of `length_bytes` that the
/// kernel failed with `errno`.
pub(crate) fn of_message(
    errno: i32,
    message: &crate::engine::IoMessage,
    length_bytes: u64,
) -> io::Error {
    use crate::engine::IoKind;
    let operation = match message.kind {
        IoKind::Read => "read",
        IoKind::Write => "write",
        IoKind::Fsync => "fsync",
        IoKind::Fdatasync => "fdatasync",
        IoKind::Nop => "nop",
    };
    RequestError::new(
        errno,
        operation,
        message.file.as_deref(),
        message.offset,
        length_bytes,
    )
    .into_io_error()
}

/// The errno behind `error`: its raw OS error, or that of a [`RequestError`]
/// inside it.
pub fn os_error_code(error: &io::Error) -> Option<i32> {
    error.raw_os_error().or_else(|| {
        error
            .get_ref()?
            .downcast_ref::<RequestError>()
            .map(|request| request.errno)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_operation_the_path_and_the_fix() {
        let path = std::env::temp_dir().join(format!("tailguard-request-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let error =
            RequestError::new(libc::EBADF, "write", Some(&file), 8192, 4096).into_io_error();
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
        let sync = RequestError::new(libc::EFBIG, "fsync", None, 0, 0).to_string();
        assert!(sync.starts_with("fsync of (unknown file): "), "{sync}");
        assert!(sync.contains("largest file"), "{sync}");
        assert_eq!(
            os_error_code(&io::Error::from_raw_os_error(libc::EIO)),
            Some(libc::EIO)
        );
        std::fs::remove_file(&path).unwrap();
    }
}
