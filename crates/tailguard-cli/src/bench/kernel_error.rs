//! The errors of the kernel modes' requests, with the fix.
//!
//! In `kernel-direct` and `kernel-buffered` modes bench hands its requests to
//! the kernel itself, and a failed one comes back as a bare errno. The
//! driver's message names the job, the operation, its offset and length, and
//! the file; this adds what the errno means for a benchmark run and what to
//! change: a [`KernelError`] is an [`io::Error`] payload of the errno's own
//! [`io::ErrorKind`] whose text is the kernel's, the errno's name and the fix
//! where one is known (the tailguard mode's errors carry the library's own).

use std::fmt;
use std::io;

/// What a failed kernel-mode request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A read, O_DIRECT or through the page cache.
    Read,
    /// A write, O_DIRECT or through the page cache.
    Write,
    /// `fsync` or `fdatasync`.
    Sync,
}

/// A kernel-mode request's errno, with the fix; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelError {
    /// The errno, positive.
    pub errno: i32,
    /// What the request did.
    pub operation: Operation,
    /// Whether the request went with O_DIRECT.
    pub direct: bool,
}

impl KernelError {
    /// As an [`io::Error`] of the errno's kind.
    pub fn into_io_error(self) -> io::Error {
        io::Error::new(io::Error::from_raw_os_error(self.errno).kind(), self)
    }

    /// The errno's symbolic name, for the errnos a run meets.
    fn name(&self) -> Option<&'static str> {
        Some(match self.errno {
            libc::EINVAL => "EINVAL",
            libc::EBADF => "EBADF",
            libc::EFBIG => "EFBIG",
            libc::ENOSPC => "ENOSPC",
            libc::EDQUOT => "EDQUOT",
            libc::EIO => "EIO",
            libc::ENODEV => "ENODEV",
            libc::ENXIO => "ENXIO",
            libc::EROFS => "EROFS",
            libc::EACCES => "EACCES",
            libc::EPERM => "EPERM",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EAGAIN => "EAGAIN",
            libc::ECANCELED => "ECANCELED",
            libc::EINTR => "EINTR",
            _ => return None,
        })
    }

    /// What the errno means for this request and what to change.
    fn fix(&self) -> Option<&'static str> {
        Some(match (self.errno, self.direct, self.operation) {
            // kernel-buffered mode reads with O_DIRECT too (where the file
            // opens with it), so only a write has the page cache to go to.
            (libc::EINVAL, true, Operation::Read) => {
                "the kernel refused this O_DIRECT read: its offset, length and buffer must be \
                 multiples of the device's logical block size (make the job's block_size and \
                 offset multiples of it); every mode reads with O_DIRECT where the file \
                 opens with it, kernel-buffered too"
            }
            (libc::EINVAL, true, Operation::Write) => {
                "the kernel refused this O_DIRECT write: its offset, length and buffer must be \
                 multiples of the device's logical block size (make the job's block_size and \
                 offset multiples of it), and the filesystem must take O_DIRECT; --mode \
                 kernel-buffered writes through the page cache"
            }
            (libc::EINVAL, _, Operation::Sync) => {
                "the kernel refused to sync this file: its filesystem or device does not \
                 take fsync/fdatasync; drop the job's sync option, or use a target on \
                 another filesystem"
            }
            (libc::EINVAL, _, _) => {
                "the kernel refused the request on this file: its filesystem does not take \
                 positioned reads and writes this way; use a target on another filesystem"
            }
            (libc::EBADF, _, _) => {
                "the file was not open for this operation (a bug in bench: please report it \
                 with the job file)"
            }
            (libc::EFBIG, _, _) => {
                "the request ends past the largest file this process may write (the shell's \
                 `ulimit -f`) or the filesystem holds: raise the limit (`ulimit -f \
                 unlimited`) or make the job's size smaller"
            }
            (libc::ENOSPC, _, _) => {
                "the filesystem is full: free space on it or make the jobs' sizes smaller"
            }
            (libc::EDQUOT, _, _) => {
                "this user's disk quota is used up: free space or make the jobs' sizes smaller"
            }
            (libc::EIO, _, _) => {
                "the device reported an I/O error: its messages are in `dmesg`; a failing \
                 disk, or a device that went away (unplugged, a loop device detached), gives \
                 this"
            }
            (libc::ENODEV | libc::ENXIO, _, _) => {
                "the device went away (unplugged or detached): reattach it or pick another \
                 target"
            }
            (libc::EROFS, _, _) => {
                "the filesystem is read-only: remount it read-write or pick a writable target"
            }
            (libc::EACCES | libc::EPERM, _, _) => {
                "permission denied: run as a user that may write the target, or pick another"
            }
            (libc::EOPNOTSUPP, _, _) => {
                "this filesystem or device does not take the operation: use a target on \
                 another filesystem, or another --mode"
            }
            _ => return None,
        })
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kernel = io::Error::from_raw_os_error(self.errno);
        match self.name() {
            Some(name) => write!(formatter, "{kernel}, {name}")?,
            None => write!(formatter, "{kernel}")?,
        }
        if let Some(fix) = self.fix() {
            write!(formatter, ": {fix}")?;
        }
        Ok(())
    }
}

impl std::error::Error for KernelError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(errno: i32, operation: Operation, direct: bool) -> String {
        KernelError {
            errno,
            operation,
            direct,
        }
        .into_io_error()
        .to_string()
    }

    #[test]
    fn an_errno_comes_with_its_name_and_fix() {
        let efbig = text(libc::EFBIG, Operation::Write, false);
        assert!(
            efbig.starts_with("File too large (os error 27), EFBIG: "),
            "{efbig}"
        );
        assert!(efbig.contains("ulimit -f"), "{efbig}");
        let direct = text(libc::EINVAL, Operation::Read, true);
        assert!(
            direct.contains("O_DIRECT") && direct.contains("block_size"),
            "{direct}"
        );
        // kernel-buffered reads with O_DIRECT as well: no help for a read.
        assert!(!direct.contains("--mode kernel-buffered"), "{direct}");
        let write = text(libc::EINVAL, Operation::Write, true);
        assert!(write.contains("--mode kernel-buffered"), "{write}");
        let sync = text(libc::EINVAL, Operation::Sync, false);
        assert!(sync.contains("fsync/fdatasync"), "{sync}");
        assert!(text(libc::EIO, Operation::Read, true).contains("dmesg"));
    }

    #[test]
    fn the_error_keeps_the_errno_kind() {
        let error = KernelError {
            errno: libc::ENOSPC,
            operation: Operation::Write,
            direct: true,
        }
        .into_io_error();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        // An errno without a known fix is the kernel's text alone.
        assert_eq!(
            text(libc::ESPIPE, Operation::Read, false),
            io::Error::from_raw_os_error(libc::ESPIPE).to_string()
        );
    }
}
