//! Requests as the core sees them.
//!
//! The core never touches data: a request is only its identity, its class, its
//! direction, where it goes and how long it is. Buffers stay with the engine (or do
//! not exist, in the simulator). Time is a plain count of nanoseconds, [`Nanos`],
//! whose origin is whatever the caller chose: virtual time in the simulator, a
//! monotonic clock's offset in the engine. The core only subtracts and compares.

use serde::{Deserialize, Serialize};

/// A point in time, or a duration, in nanoseconds. The origin is the caller's.
pub type Nanos = u64;

/// Nanoseconds in one microsecond.
pub const NANOS_PER_MICROSECOND: Nanos = 1_000;
/// Nanoseconds in one millisecond.
pub const NANOS_PER_MILLISECOND: Nanos = 1_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: Nanos = 1_000_000_000;
/// Nanoseconds in one second, as a float for rate arithmetic.
pub const NANOS_PER_SECOND_F64: f64 = 1e9;

/// Whether a request reads from or writes to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Data flows from the device.
    Read,
    /// Data flows to the device. Flushes (`fdatasync`) are writes of zero bytes.
    Write,
}

/// The caller's identity for a request. Unique among the requests a dispatcher
/// holds at one time; the caller chooses it and gets it back on completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// One request handed to a [`Dispatcher`](crate::Dispatcher).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// The caller's identity for this request.
    pub id: RequestId,
    /// The class whose queue and shares it uses.
    pub class: crate::ClassId,
    /// Read or write.
    pub direction: Direction,
    /// Byte offset on the device (or in the file).
    pub offset_bytes: u64,
    /// Length in bytes; zero is allowed (a flush).
    pub length_bytes: u64,
}
