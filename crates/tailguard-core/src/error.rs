//! The crate's one error type.
//!
//! Every fallible operation of the core returns [`CoreError`]: a profile value
//! that cannot be used, a class operation that is refused, a rate limit that
//! caps nothing or would stop its class, and a completion for a token that is
//! not in flight. There is one variant per case, each with the values a caller
//! needs to react, and each message names the fix.

use crate::dispatcher::ClassId;
use crate::fair_queue::{SHARES_MAX, SHARES_MIN};
use crate::rate_limit::BURST_NS_MAX;
use crate::request::Nanos;
use std::fmt;

/// Why the core refused a value, a request or a completion.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoreError {
    /// A profile value that cannot be used.
    InvalidProfile {
        /// The offending profile key.
        key: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Shares must be within `SHARES_MIN..=SHARES_MAX`.
    InvalidShares(u32),
    /// The handle names no live class (removed, or from another dispatcher).
    UnknownClass(ClassId),
    /// The class is being removed and accepts no new requests.
    Retiring(ClassId),
    /// A rate limit with neither bytes per second nor operations per second set.
    NothingCapped,
    /// A rate limit of zero (would stop the class forever); names the field.
    ZeroRate(&'static str),
    /// A rate limit whose burst is zero or longer than [`BURST_NS_MAX`].
    InvalidBurst(Nanos),
    /// A completion named a token that is not in flight (unknown, or completed
    /// already): a caller bug that would otherwise complete a request twice.
    UnknownToken(u64),
    /// A request whose end (offset plus length) passes `u64::MAX`.
    RequestOutOfRange {
        /// The request's first byte.
        offset_bytes: u64,
        /// Its length.
        length_bytes: u64,
    },
    /// A request that would split into more than `u32::MAX` pieces.
    TooManyPieces {
        /// The request's length.
        length_bytes: u64,
        /// The split size it would be cut at.
        split_bytes: u64,
    },
}

impl fmt::Display for CoreError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidProfile { key, message } => {
                write!(formatter, "profile key `{key}`: {message}")
            }
            Self::InvalidShares(shares) => write!(
                formatter,
                "shares must be between {SHARES_MIN} and {SHARES_MAX}, got {shares}"
            ),
            Self::UnknownClass(class) => write!(
                formatter,
                "class {class:?} does not exist (removed, or from another dispatcher); \
                 use a handle that add_class on this dispatcher returned"
            ),
            Self::Retiring(class) => write!(
                formatter,
                "class {class:?} is being removed and accepts no new requests; \
                 add a new class for new requests"
            ),
            Self::NothingCapped => formatter.write_str(
                "a rate limit needs bytes_per_s or iops (or both); use None for no limit",
            ),
            Self::ZeroRate(field) => write!(
                formatter,
                "{field} must be at least 1 (a zero rate would stop the class); use None for no limit"
            ),
            Self::InvalidBurst(burst_ns) => write!(
                formatter,
                "burst_ns must be between 1 and {BURST_NS_MAX}, got {burst_ns}"
            ),
            Self::UnknownToken(token) => write!(
                formatter,
                "token {token:#x} is not in flight (completed twice?); \
                 complete each dispatched token exactly once"
            ),
            Self::RequestOutOfRange {
                offset_bytes,
                length_bytes,
            } => write!(
                formatter,
                "a request of {length_bytes} bytes at offset {offset_bytes} ends past the \
                 largest offset; keep offset + length within u64"
            ),
            Self::TooManyPieces {
                length_bytes,
                split_bytes,
            } => write!(
                formatter,
                "a request of {length_bytes} bytes would split into more than {} pieces of \
                 {split_bytes} bytes; make it smaller",
                u32::MAX
            ),
        }
    }
}

impl std::error::Error for CoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_errors_name_the_key_and_the_fix() {
        let error = CoreError::InvalidProfile {
            key: "read_iops",
            message: "run `tailguard tune` to measure it".to_string(),
        };
        assert_eq!(
            error.to_string(),
            "profile key `read_iops`: run `tailguard tune` to measure it"
        );
    }

    #[test]
    fn rate_limit_errors_name_the_field_and_the_bound() {
        assert!(CoreError::ZeroRate("iops")
            .to_string()
            .starts_with("iops must be at least 1"));
        assert!(CoreError::InvalidBurst(0)
            .to_string()
            .contains(&BURST_NS_MAX.to_string()));
        assert!(CoreError::NothingCapped.to_string().contains("use None"));
    }
}
