//! # tailguard: flat read latency while writes stream
//!
//! A userspace I/O scheduler for applications that do their own I/O. Files are
//! opened through a [`Scheduler`] (O_DIRECT by default); every read, write and
//! sync names an [`IoClass`] with shares, and goes through the dispatcher of the
//! file's device: a weighted fair queue by device-time cost between classes, and
//! an in-flight budget derived from the device's profile and latency target
//! (see `tailguard-core`). An engine thread runs the io_uring ring (or a thread
//! pool where io_uring is unavailable), takes submissions in batches, hands
//! each request to the kernel as it is dispatched (or all of a loop
//! iteration's at once, with `eager_submit(false)`) and reaps completions in
//! batches; a thread that blocks on a result ([`IoFuture::wait`],
//! [`Scheduler::block_on`]) runs that loop itself while the engine is free, so
//! it waits without a thread hop. The design is described in the repository's
//! `docs/design/engine.md`.
//!
//! ```no_run
//! use tailguard::{AlignedBuffer, Scheduler};
//! # fn main() -> std::io::Result<()> {
//! let scheduler = Scheduler::builder().build()?;
//! let reads = scheduler.add_class("reads", 1000)?;
//! let file = scheduler.open("/var/lib/app/data")?;
//! let alignment = file.alignment().memory_bytes as usize;
//! let buffer = AlignedBuffer::new(4096, alignment.max(4096)).expect("allocation");
//! let (result, buffer) = file.read_at(&reads, buffer, 0).wait();
//! println!("read {} bytes: {:?}", result?, &buffer[..16]);
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`scheduler`] (the API), [`device`] (files to devices),
//! [`buffer`] (aligned buffers), [`stats`] (counters and histograms),
//! [`metrics`] (the OpenMetrics text and its HTTP server), [`profile_file`]
//! (device profiles on disk), [`error`] (the library's one error type).
//!
//! # Errors
//!
//! Calls that do no I/O (profile files, buffers, alignment checks) return
//! [`Error`]; calls that do I/O return [`std::io::Result`], and when the
//! library is why one failed (the kernel refused a request, the request is
//! misaligned, a setting or profile file is refused) the [`std::io::Error`]
//! carries an [`Error`] as its payload: `error.get_ref().and_then(|e|
//! e.downcast_ref::<tailguard::Error>())` gives its [`ErrorKind`] (the
//! operation, the misaligned value, ...) and its file's path.
//!
//! # Stability
//!
//! The public API is what this page lists: the re-exports below and the
//! documented modules. Structs and enums that will grow are
//! `#[non_exhaustive]` or keep their fields private behind methods, and
//! `tests/public_api.rs` names every item and signature of it, so that an
//! accidental break fails a test. The engine's own modules (`engine`, the
//! loop; `backend`, io_uring and the thread pool; `handoff`, the submission
//! queue) are public only for this workspace's CLI, tests and benchmarks:
//! they are hidden from the documentation and may change in any release.

use std::sync::LazyLock;
use tailguard_core::DeviceProfile;

#[doc(hidden)]
pub mod backend;
pub mod buffer;
mod completion;
pub mod device;
#[doc(hidden)]
pub mod engine;
pub mod error;
#[doc(hidden)]
pub mod handoff;
pub mod metrics;
pub mod profile_file;
mod request_error;
pub mod scheduler;
pub mod stats;
mod sync;

pub use backend::{BackendChoice, BackendKind, DEFAULT_FILE_SLOTS as DEFAULT_REGISTERED_FILES};
pub use buffer::AlignedBuffer;
pub use completion::{EngineHold, IoFuture};
pub use device::{DeviceInfo, DirectIoAlignment};
pub use engine::{BufResult, ControllerChoice, CONTROLLER_TARGET};
pub use error::{os_error_code, Error, ErrorKind, Operation};
pub use metrics::{render_openmetrics, MetricsServer};
pub use profile_file::ProfileFile;
pub use scheduler::{
    ClassOptions, File, IoClass, OpenOptions, Scheduler, SchedulerBuilder, DEFAULT_ENGINE_LINGER,
};
pub use stats::{ClassStats, ControllerCounters, DeviceStats, LatencyHistogram, StatsSnapshot};
pub use tailguard_core::DeviceProfile as Profile;
pub use tailguard_core::QuietReads;
pub use tailguard_core::RateLimit;

/// The profile of a non-rotational (or virtual) device before calibration:
/// a conservative SSD. Too high a guess only deepens the queue (latency); too low
/// a guess would cap throughput, so it leans high. `tailguard tune` measures the
/// real one.
pub static DEFAULT_SSD_PROFILE: LazyLock<DeviceProfile> = LazyLock::new(|| DeviceProfile {
    read_iops: 100_000.0,
    write_iops: 50_000.0,
    read_bandwidth: 1.0e9,
    write_bandwidth: 500.0e6,
    max_request_bytes: 512 * 1024,
    latency_target_us: 1_000,
});

/// The profile of a rotational disk before calibration: 7200 rpm class.
pub static DEFAULT_DISK_PROFILE: LazyLock<DeviceProfile> = LazyLock::new(|| DeviceProfile {
    read_iops: 200.0,
    write_iops: 200.0,
    read_bandwidth: 150.0e6,
    write_bandwidth: 150.0e6,
    max_request_bytes: 1024 * 1024,
    latency_target_us: 50_000,
});

pub mod pool;
pub mod stream;
mod unaligned;
pub use pool::BufferPool;
pub use stream::{ReaderOptions, StreamReader, StreamWriter, WriterOptions};
