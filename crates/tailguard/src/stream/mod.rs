//! Byte streams over a [`File`]: a write-behind [`StreamWriter`] and a
//! read-ahead [`StreamReader`], for engines that write and read the way
//! buffered I/O lets them (any length, any alignment) while every request
//! still goes through the scheduler, in the stream's [`IoClass`].
//!
//! Both keep a bounded set of aligned buffers: the writer fills one while the
//! others are being written, and the reader consumes one while the next ones
//! are being read. Memory is `buffer_bytes × (buffers + 1)` at most; a writer
//! that has every buffer in flight makes its caller wait for the oldest
//! (backpressure), never allocates more.
//!
//! Each type works both ways:
//!
//! - **blocking**: [`std::io::Write`] / [`std::io::Read`], plus `sync` and
//!   `close`. A call that has to wait runs [`Scheduler::block_on`], so the
//!   calling thread runs the engine itself while it waits;
//! - **async**: [`futures_io::AsyncWrite`] / [`futures_io::AsyncRead`], plus
//!   `*_async` methods. The `futures-io` traits are the runtime-agnostic ones
//!   (the engine itself needs no runtime); tokio users adapt them with
//!   `tokio_util::compat`. Do not call the blocking methods from an async
//!   task: they block its thread.
//!
//! Errors are sticky: once a request of the stream fails, the call that sees
//! it reports what the stream was doing and the error it got, and every later
//! call reports the same, saying the stream failed earlier. Each report keeps
//! the error it got as its source, so [`crate::os_error_code`] finds the
//! kernel's errno in all of them. A failed write is never forgotten, even if
//! the bytes it carried were accepted by an earlier call that returned `Ok`.
//! A report is never of kind `Interrupted` (a request a cancel failed or cut
//! is reported as `Other`, its source keeping the kind): std's `write_all`,
//! `read_to_end` and `io::copy` retry that kind, and would get the same
//! report back forever.
//!
//! [`File`]: crate::File
//! [`IoClass`]: crate::IoClass
//! [`Scheduler::block_on`]: crate::Scheduler::block_on

mod reader;
mod writer;

pub use reader::{ReaderOptions, StreamReader};
pub use writer::{StreamWriter, WriterOptions};

use crate::completion::IoFuture;
use crate::scheduler::{File, Scheduler};
use granularity_of as granularity;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The allocation alignment of stream buffers: a page, which satisfies every
/// device's direct-I/O memory alignment in practice; a larger one is used
/// where the device asks for it.
const PAGE_BYTES: usize = 4096;

/// The offset and length granularity of `file`'s direct I/O (1 without
/// O_DIRECT), and the memory alignment to allocate buffers with.
pub(crate) fn granularity_of(file: &File) -> (usize, usize) {
    let alignment = file.alignment();
    let block = (alignment.offset_bytes as usize).max(1);
    let memory = (alignment.memory_bytes as usize)
        .max(PAGE_BYTES)
        .next_power_of_two();
    (block, memory)
}

/// The largest buffer a stream uses, 1 GiB: a larger `buffer_bytes` is
/// clamped to it (one such write already holds a disk for seconds).
pub const STREAM_BUFFER_BYTES_MAX: usize = 1 << 30;

/// The most buffers a stream keeps in flight: a larger `buffers_in_flight`
/// or `read_ahead_buffers` is clamped to it.
pub const STREAM_BUFFERS_MAX: usize = 1024;

/// `bytes`, at most [`STREAM_BUFFER_BYTES_MAX`], rounded up to a multiple
/// of `block` (at least one block).
fn round_up(bytes: usize, block: usize) -> usize {
    bytes.clamp(1, STREAM_BUFFER_BYTES_MAX).div_ceil(block) * block
}

/// A request in flight, or its result once it has come.
enum Flight<T> {
    Waiting(IoFuture<T>),
    Done(T),
}

impl<T> Flight<T> {
    /// A fresh request, polled once so that the engine thread is woken if it
    /// sleeps (a deferred push is paid by the first pending poll, see
    /// `crate::completion`).
    fn start(mut future: IoFuture<T>) -> Self {
        let mut context = Context::from_waker(Waker::noop());
        match Pin::new(&mut future).poll(&mut context) {
            Poll::Ready(value) => Flight::Done(value),
            Poll::Pending => Flight::Waiting(future),
        }
    }

    /// Ready once the result has come (then it stays `Done`).
    fn poll_done(&mut self, context: &mut Context<'_>) -> Poll<()> {
        if let Flight::Waiting(future) = self {
            match Pin::new(future).poll(context) {
                Poll::Ready(value) => *self = Flight::Done(value),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }

    /// The result; only after `poll_done` was ready.
    fn into_result(self) -> T {
        match self {
            Flight::Done(value) => value,
            Flight::Waiting(_) => unreachable!("a flight is taken only once done"),
        }
    }
}

/// The first error of a stream, kept for every later call.
#[derive(Default)]
struct StickyError {
    failure: Option<Arc<Failure>>,
    /// Whether a call has reported it already.
    reported: bool,
}

/// Why a stream stopped: what it was doing, and the error it got, reported
/// as `kind`.
#[derive(Debug)]
struct Failure {
    kind: io::ErrorKind,
    context: Option<String>,
    source: Option<io::Error>,
}

impl fmt::Display for Failure {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.context, &self.source) {
            (Some(context), Some(source)) => write!(formatter, "{context}: {source}"),
            (Some(context), None) => formatter.write_str(context),
            (None, Some(source)) => write!(formatter, "{source}"),
            (None, None) => formatter.write_str("the stream failed"),
        }
    }
}

/// A stream's failure as an [`io::Error`]'s payload. Its source is the error
/// the stream got, so [`crate::os_error_code`] finds the kernel's errno in
/// every report, the later ones included.
#[derive(Debug)]
struct Report {
    failure: Arc<Failure>,
    /// A later report: says the stream failed earlier.
    later: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.later {
            formatter.write_str("the stream failed earlier and accepts no more requests: ")?;
        }
        write!(formatter, "{}", self.failure)
    }
}

impl std::error::Error for Report {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failure
            .source
            .as_ref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl StickyError {
    /// Records that the stream failed with `source` while doing what
    /// `context` says, reported as `kind`, unless a failure is recorded
    /// already (then this one is logged: the first is the one reported).
    fn set(&mut self, kind: io::ErrorKind, context: Option<String>, source: Option<io::Error>) {
        // Never `Interrupted`: the failure comes back from every later call,
        // and std's `write_all`, `read_exact`, `read_to_end` and `io::copy`
        // retry that kind, so they would retry it forever. A request a cancel
        // failed or cut is reported as `Other`; its source keeps the kind.
        let kind = match kind {
            io::ErrorKind::Interrupted => io::ErrorKind::Other,
            kind => kind,
        };
        let failure = Failure {
            kind,
            context,
            source,
        };
        if self.failure.is_some() {
            tracing::warn!("stream error after an earlier one: {failure}");
            return;
        }
        self.failure = Some(Arc::new(failure));
    }

    /// Records `error` as it is (of its own kind, with no context).
    fn set_error(&mut self, error: io::Error) {
        self.set(error.kind(), None, Some(error));
    }

    fn is_set(&self) -> bool {
        self.failure.is_some()
    }

    /// The failure as its first report, if no call has reported it yet.
    fn unreported(&mut self) -> Option<io::Error> {
        if self.reported {
            return None;
        }
        self.check().err()
    }

    /// The error to report now, if any: the later reports say the stream
    /// failed earlier.
    fn check(&mut self) -> io::Result<()> {
        let Some(failure) = &self.failure else {
            return Ok(());
        };
        let later = std::mem::replace(&mut self.reported, true);
        Err(io::Error::new(
            failure.kind,
            Report {
                failure: failure.clone(),
                later,
            },
        ))
    }
}

/// Runs `step` to completion from a plain thread: once with a no-op waker
/// (most calls finish at once: a copy into a buffer), and if that is pending,
/// under the `block_on` of the scheduler that `scheduler` names, which runs
/// the engine meanwhile.
fn block<S, T>(
    state: &mut S,
    scheduler: impl FnOnce(&S) -> Scheduler,
    mut step: impl FnMut(&mut S, &mut Context<'_>) -> Poll<T>,
) -> T {
    let mut context = Context::from_waker(Waker::noop());
    if let Poll::Ready(value) = step(state, &mut context) {
        return value;
    }
    let scheduler = scheduler(state);
    scheduler.block_on(std::future::poll_fn(|context| step(state, context)))
}
