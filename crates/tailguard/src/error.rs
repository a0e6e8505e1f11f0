//! The one error type of the library: [`Error`], what went wrong, where, and the fix.
//!
//! Every fallible call of the library that does no I/O (profile files,
//! [`AlignedBuffer`](crate::AlignedBuffer)s, [`check_alignment`](crate::buffer::check_alignment))
//! returns a [`Error`]. Calls that do I/O return [`std::io::Result`], the
//! contract of an I/O library; when the library itself is the reason a call
//! failed (the kernel refused a request, the request is misaligned, a setting
//! is refused, a profile file is bad), the [`io::Error`] carries an [`Error`]
//! as its payload, of the matching [`io::ErrorKind`], so that
//!
//! ```
//! # fn inspect(error: &std::io::Error) {
//! let detail = error
//!     .get_ref()
//!     .and_then(|inner| inner.downcast_ref::<tailguard::Error>());
//! if let Some(detail) = detail {
//!     println!("{:?} on {:?}", detail.kind(), detail.path());
//! }
//! # }
//! ```
//!
//! gives the operation, the file and the misaligned value without parsing
//! text. An [`Error`] is a [`ErrorKind`] (what went wrong, with its numbers)
//! and the path of the file concerned, when there is one; its message says
//! both and how to fix it. [`ErrorKind`] is `#[non_exhaustive]`: new causes
//! become new variants, and a `match` keeps a `_` arm.
//!
//! A kernel-failed request hides its errno from [`io::Error::raw_os_error`]
//! (the payload is the library's); [`os_error_code`] reads it from either.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong in a call of the library, where, and how to fix it; see
/// the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    path: Option<PathBuf>,
}

/// What went wrong, with the values that say why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The kernel failed a read, write or sync.
    Request {
        /// The kernel's errno.
        errno: i32,
        /// What was asked.
        operation: Operation,
        /// The request's first byte in the file.
        offset: u64,
        /// The request's length in bytes (0 for syncs).
        length_bytes: u64,
    },
    /// A direct-I/O request's file offset is not a multiple of the device's
    /// offset alignment.
    MisalignedOffset {
        /// The file offset.
        offset: u64,
        /// The device's direct-I/O offset alignment.
        required_bytes: u32,
    },
    /// A direct-I/O request's length is not a multiple of the device's
    /// offset alignment.
    MisalignedLength {
        /// The request's length in bytes.
        length_bytes: u64,
        /// The device's direct-I/O offset alignment.
        required_bytes: u32,
    },
    /// A direct-I/O request's buffer address is not a multiple of the
    /// device's memory alignment.
    MisalignedPointer {
        /// The buffer's address.
        pointer: usize,
        /// The device's direct-I/O memory alignment.
        required_bytes: u32,
    },
    /// A request that would end past the largest file offset the kernel
    /// accepts (`i64::MAX`): its offset plus its length overflows it.
    OffsetOutOfRange {
        /// The request's first byte in the file.
        offset: u64,
        /// The request's length in bytes.
        length_bytes: u64,
    },
    /// A buffer's alignment is not a power of two (0 included).
    AlignmentNotPowerOfTwo {
        /// The alignment asked for.
        alignment_bytes: usize,
    },
    /// A buffer's length, rounded up to its alignment, does not fit in `isize`.
    BufferTooLarge {
        /// The length asked for.
        length_bytes: usize,
        /// The alignment asked for.
        alignment_bytes: usize,
    },
    /// The allocator returned no memory for a buffer.
    OutOfMemory {
        /// The length asked for.
        length_bytes: usize,
        /// The alignment asked for.
        alignment_bytes: usize,
    },
    /// A profile file that cannot be read, parsed, used or written.
    ProfileFile {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A setting (of the scheduler, its backend or an environment variable)
    /// that the library refuses.
    InvalidConfig {
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// The operation of a request the kernel failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// `read`.
    Read,
    /// `write`.
    Write,
    /// `fsync`: data and metadata.
    Fsync,
    /// `fdatasync`: data only.
    Fdatasync,
    /// A request that moves no data (the engine's own wake-ups).
    Nop,
}

impl Operation {
    /// The system call's name: `read`, `write`, `fsync`, `fdatasync` or `nop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Fsync => "fsync",
            Operation::Fdatasync => "fdatasync",
            Operation::Nop => "nop",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Error {
    /// An error of `kind` that concerns no file in particular. The library
    /// makes its own; this is for code that stands in for it (a test double
    /// of a storage layer that reports tailguard's errors).
    ///
    /// ```
    /// use tailguard::{Error, ErrorKind};
    /// let error = Error::new(ErrorKind::InvalidConfig {
    ///     message: "no such class".into(),
    /// })
    /// .with_path("/var/lib/app/log");
    /// assert_eq!(error.path(), Some(std::path::Path::new("/var/lib/app/log")));
    /// let io_error = std::io::Error::from(error);
    /// assert_eq!(io_error.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn new(kind: ErrorKind) -> Self {
        Self { kind, path: None }
    }

    /// A profile file that is wrong, with `message` saying how to fix it.
    pub(crate) fn profile_file(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ProfileFile {
            message: message.into(),
        })
    }

    /// A refused setting, with `message` saying how to fix it.
    pub(crate) fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidConfig {
            message: message.into(),
        })
    }

    /// The same error, about the file at `path`.
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The file concerned: the profile file, or the file of a failed or
    /// misaligned request (as `/proc/self/fd` names it for a failed one);
    /// `None` when the error concerns no file or the name is unknown.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The kernel's errno, for a request the kernel failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self.kind {
            ErrorKind::Request { errno, .. } => Some(errno),
            _ => None,
        }
    }

    /// Whether a direct-I/O request was refused for its alignment (offset,
    /// length or buffer address).
    pub fn is_misaligned(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::MisalignedOffset { .. }
                | ErrorKind::MisalignedLength { .. }
                | ErrorKind::MisalignedPointer { .. }
        )
    }

    /// The [`io::ErrorKind`] of the [`io::Error`] that carries this error:
    /// the errno's for a failed request, `InvalidInput` for a refused
    /// request, buffer or setting, `InvalidData` for a profile file,
    /// `OutOfMemory` for a failed allocation.
    pub fn io_error_kind(&self) -> io::ErrorKind {
        match self.kind {
            ErrorKind::Request { errno, .. } => io::Error::from_raw_os_error(errno).kind(),
            ErrorKind::ProfileFile { .. } => io::ErrorKind::InvalidData,
            ErrorKind::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            _ => io::ErrorKind::InvalidInput,
        }
    }

    /// The message of a kind that needs no path.
    fn describe(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Request {
                errno,
                operation,
                offset,
                length_bytes,
            } => crate::request_error::describe(
                formatter,
                *errno,
                *operation,
                *offset,
                *length_bytes,
                self.path(),
            ),
            ErrorKind::MisalignedOffset {
                offset,
                required_bytes,
            } => write!(
                formatter,
                "offset {offset} is not a multiple of {required_bytes} (this device's direct-I/O \
                 offset alignment); align it (for example down to {}) or use buffered I/O",
                offset - offset % u64::from(*required_bytes).max(1)
            ),
            ErrorKind::MisalignedLength {
                length_bytes,
                required_bytes,
            } => {
                let required = u64::from(*required_bytes).max(1);
                let (direction, rounded) =
                    match length_bytes.div_ceil(required).checked_mul(required) {
                        Some(up) => ("up", up),
                        None => ("down", length_bytes - length_bytes % required),
                    };
                write!(
                    formatter,
                    "length {length_bytes} is not a multiple of {required_bytes} (this device's \
                     direct-I/O offset alignment); round it {direction} to {rounded} and use an \
                     AlignedBuffer of that length"
                )
            }
            ErrorKind::MisalignedPointer {
                pointer,
                required_bytes,
            } => write!(
                formatter,
                "buffer address {pointer:#x} is not a multiple of {required_bytes} (this \
                 device's direct-I/O memory alignment); allocate it with \
                 AlignedBuffer::new(len, {required_bytes})"
            ),
            ErrorKind::OffsetOutOfRange {
                offset,
                length_bytes,
            } => write!(
                formatter,
                "a request of {length_bytes} bytes at offset {offset} would end past the \
                 largest file offset, {}; keep offset + length at most that",
                i64::MAX
            ),
            ErrorKind::AlignmentNotPowerOfTwo { alignment_bytes } => write!(
                formatter,
                "buffer alignment {alignment_bytes} is not a power of two; pass the device's \
                 direct-I/O memory alignment (such as 512 or 4096)"
            ),
            ErrorKind::BufferTooLarge {
                length_bytes,
                alignment_bytes,
            } => write!(
                formatter,
                "a buffer of {length_bytes} bytes aligned to {alignment_bytes} exceeds the \
                 largest possible allocation; split the I/O into smaller requests"
            ),
            ErrorKind::OutOfMemory {
                length_bytes,
                alignment_bytes,
            } => write!(
                formatter,
                "could not allocate {length_bytes} bytes aligned to {alignment_bytes}: out of \
                 memory; use smaller buffers or fewer requests in flight"
            ),
            ErrorKind::ProfileFile { message } | ErrorKind::InvalidConfig { message } => {
                formatter.write_str(message)
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.path) {
            // The request's message places the path itself.
            (ErrorKind::Request { .. }, _) => self.describe(formatter),
            (ErrorKind::ProfileFile { .. }, Some(path)) => {
                write!(formatter, "profile file {}: ", path.display())?;
                self.describe(formatter)
            }
            (ErrorKind::ProfileFile { .. }, None) => {
                formatter.write_str("profile file: ")?;
                self.describe(formatter)
            }
            (_, Some(path)) => {
                write!(formatter, "{}: ", path.display())?;
                self.describe(formatter)
            }
            (_, None) => self.describe(formatter),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    /// An [`io::Error`] of [`Error::io_error_kind`] whose payload is `error`.
    fn from(error: Error) -> Self {
        io::Error::new(error.io_error_kind(), error)
    }
}

/// The errno behind `error`: its raw OS error, or that of a request the
/// kernel failed (an [`Error`] inside it), looked for along the chain of
/// errors it carries (a stream's report carries the request's error as its
/// source).
pub fn os_error_code(error: &io::Error) -> Option<i32> {
    errno_in(error)
}

/// The first errno along `error`'s chain: an [`io::Error`]'s raw OS error
/// or payload, an [`Error`]'s errno, or else the error's source.
fn errno_in(error: &(dyn std::error::Error + 'static)) -> Option<i32> {
    if let Some(detail) = error.downcast_ref::<Error>() {
        return detail.raw_os_error();
    }
    if let Some(io_error) = error.downcast_ref::<io::Error>() {
        return io_error
            .raw_os_error()
            .or_else(|| errno_in(io_error.get_ref()?));
    }
    errno_in(error.source()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alignment_of_zero_is_described_without_dividing_by_it() {
        let offset = Error::new(ErrorKind::MisalignedOffset {
            offset: 1,
            required_bytes: 0,
        });
        assert!(offset.to_string().contains("down to 1"), "{offset}");
        let length = Error::new(ErrorKind::MisalignedLength {
            length_bytes: 5,
            required_bytes: 0,
        });
        assert!(length.to_string().contains("up to 5"), "{length}");
    }

    /// An error that names another as its source, as a stream's report does.
    #[derive(Debug)]
    struct Wrapping(io::Error);

    impl fmt::Display for Wrapping {
        fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(formatter, "while writing: {}", self.0)
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_errno_is_found_along_the_chain() {
        let request = Error::new(ErrorKind::Request {
            errno: libc::ENOSPC,
            operation: Operation::Write,
            offset: 0,
            length_bytes: 4096,
        });
        let direct = io::Error::from(request.clone());
        assert_eq!(direct.raw_os_error(), None, "the payload hides it");
        assert_eq!(os_error_code(&direct), Some(libc::ENOSPC));
        let wrapped = io::Error::new(io::ErrorKind::StorageFull, Wrapping(direct));
        assert_eq!(os_error_code(&wrapped), Some(libc::ENOSPC));
        let raw = io::Error::other(Wrapping(io::Error::from_raw_os_error(libc::EIO)));
        assert_eq!(os_error_code(&raw), Some(libc::EIO));
        let none = io::Error::other("no errno here");
        assert_eq!(os_error_code(&none), None);
    }

    #[test]
    fn the_io_error_carries_the_error_with_its_kind() {
        let error = Error::new(ErrorKind::MisalignedOffset {
            offset: 4097,
            required_bytes: 4096,
        })
        .with_path("/data/file");
        assert!(error.is_misaligned());
        assert_eq!(error.path(), Some(Path::new("/data/file")));
        let text = error.to_string();
        assert!(text.starts_with("/data/file: offset 4097 is not a multiple of 4096"));
        assert!(text.contains("down to 4096"), "{text}");
        let io_error = io::Error::from(error.clone());
        assert_eq!(io_error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(io_error.to_string(), text);
        let inner = io_error.get_ref().and_then(|e| e.downcast_ref::<Error>());
        assert_eq!(inner, Some(&error));
        assert_eq!(os_error_code(&io_error), None);
    }

    #[test]
    fn profile_file_errors_name_the_file_and_read_as_invalid_data() {
        let error = Error::profile_file("version 9 is newer than this tailguard reads");
        assert_eq!(
            error.to_string(),
            "profile file: version 9 is newer than this tailguard reads"
        );
        let error = error.with_path("/etc/p.toml");
        assert_eq!(
            error.to_string(),
            "profile file /etc/p.toml: version 9 is newer than this tailguard reads"
        );
        assert_eq!(error.io_error_kind(), io::ErrorKind::InvalidData);
        assert!(!error.is_misaligned());
        let config = Error::invalid_config("use off or auto");
        assert_eq!(config.to_string(), "use off or auto");
        assert_eq!(config.io_error_kind(), io::ErrorKind::InvalidInput);
    }
}
