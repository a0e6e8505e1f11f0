//! The read-ahead stream reader.
//!
//! The reader keeps `read_ahead_buffers` aligned reads in flight at the
//! consecutive offsets after the one being consumed, through the scheduler
//! in the reader's class; the caller copies out of the oldest finished
//! buffer, and each buffer consumed goes back (restored to its full length)
//! for the next read. A short read drops the reads issued past it. One that
//! ends off a block, or brings nothing, marks the end of the file: the
//! stream ends after its bytes. One that ends on a block may be the end of
//! the file or a request cut short (`Scheduler::cancel_pending` answers a
//! split read with the bytes its pieces transferred), so the reader reads on
//! from where it ended: nothing there is the end, an error is the stream's
//! error, more bytes go on (also those of a file grown meanwhile). A start
//! offset off the device's block reads from the block before it and skips
//! the bytes in front.

use super::{block, granularity, round_up, Flight, StickyError};
use crate::buffer::AlignedBuffer;
use crate::engine::BufResult;
use crate::scheduler::{File, IoClass, Scheduler};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// How a [`StreamReader`] reads ahead.
///
/// ```
/// // A compaction scan: large reads, several ahead.
/// let options = tailguard::ReaderOptions {
///     buffer_bytes: 512 * 1024,
///     ..Default::default()
/// };
/// assert_eq!(options.read_ahead_buffers, 2);
/// ```
#[derive(Clone, Debug)]
pub struct ReaderOptions {
    /// Bytes per read, rounded up to the device's block (at most
    /// [`STREAM_BUFFER_BYTES_MAX`](super::STREAM_BUFFER_BYTES_MAX)): larger
    /// reads cost less per byte but each holds the device longer in front of
    /// other classes' requests.
    pub buffer_bytes: usize,
    /// Reads kept in flight ahead of the caller (1 to
    /// [`STREAM_BUFFERS_MAX`](super::STREAM_BUFFERS_MAX)): more hide more
    /// device latency on sequential scans, each costing `buffer_bytes` of
    /// memory.
    pub read_ahead_buffers: usize,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            buffer_bytes: 128 * 1024,
            read_ahead_buffers: 2,
        }
    }
}

/// A read-ahead byte stream out of a [`File`]; see the module docs of
/// [`crate::stream`].
///
/// ```no_run
/// use std::io::Read;
/// use tailguard::{ReaderOptions, Scheduler, StreamReader};
/// # fn main() -> std::io::Result<()> {
/// let scheduler = Scheduler::builder().build()?;
/// let scans = scheduler.add_class("scans", 10)?;
/// let file = scheduler.open("/var/lib/app/log")?;
/// let mut contents = Vec::new();
/// StreamReader::new(file, &scans, ReaderOptions::default()).read_to_end(&mut contents)?;
/// # Ok(())
/// # }
/// ```
pub struct StreamReader {
    file: Arc<File>,
    class: IoClass,
    memory_alignment: usize,
    block_bytes: usize,
    buffer_bytes: usize,
    read_ahead_buffers: usize,
    /// File offset of the next read to issue.
    next_offset: u64,
    /// The reads in flight, oldest first, with their file offsets.
    reads: VecDeque<(u64, Flight<BufResult>)>,
    /// The buffer being consumed (its length: the bytes read) and how far.
    current: Option<AlignedBuffer>,
    consumed: usize,
    /// Bytes to skip at the start of the first buffer (an unaligned start).
    skip: usize,
    idle: Vec<AlignedBuffer>,
    /// A short read came: nothing past it is read.
    end_seen: bool,
    /// Stream position: bytes from the file's start.
    position: u64,
    error: StickyError,
}

impl std::fmt::Debug for StreamReader {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StreamReader")
            .field("file", &self.file)
            .field("class", &self.class.name())
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl StreamReader {
    /// A reader of `file` from its start, in `class`.
    pub fn new(file: impl Into<Arc<File>>, class: &IoClass, options: ReaderOptions) -> Self {
        Self::starting_at(file, class, options, 0)
    }

    /// A reader of `file` from byte `offset` (any offset), in `class`.
    pub fn starting_at(
        file: impl Into<Arc<File>>,
        class: &IoClass,
        options: ReaderOptions,
        offset: u64,
    ) -> Self {
        let file = file.into();
        let (block_bytes, memory_alignment) = granularity(&file);
        let aligned = offset - offset % block_bytes as u64;
        Self {
            buffer_bytes: round_up(options.buffer_bytes, block_bytes),
            read_ahead_buffers: options
                .read_ahead_buffers
                .clamp(1, super::STREAM_BUFFERS_MAX),
            file,
            class: class.clone(),
            memory_alignment,
            block_bytes,
            next_offset: aligned,
            reads: VecDeque::new(),
            current: None,
            consumed: 0,
            skip: (offset - aligned) as usize,
            idle: Vec::new(),
            end_seen: false,
            position: offset,
            error: StickyError::default(),
        }
    }

    /// The file read from.
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// The offset of the next byte `read` returns.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Reads into `out` (async form of `read`); 0 at the end of the file.
    pub async fn read_async(&mut self, out: &mut [u8]) -> io::Result<usize> {
        std::future::poll_fn(|context| self.poll_read_inner(context, out)).await
    }

    fn scheduler(&self) -> Scheduler {
        self.file.scheduler().clone()
    }

    fn poll_read_inner(
        &mut self,
        context: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.error.check()?;
        loop {
            if let Some(buffer) = &self.current {
                if self.consumed < buffer.len() {
                    let copied = out.len().min(buffer.len() - self.consumed);
                    out[..copied].copy_from_slice(&buffer[self.consumed..self.consumed + copied]);
                    self.consumed += copied;
                    self.position += copied as u64;
                    return Poll::Ready(Ok(copied));
                }
                let mut buffer = self.current.take().expect("present");
                buffer.restore_len();
                self.idle.push(buffer);
            }
            if out.is_empty() {
                return Poll::Ready(Ok(0));
            }
            self.issue_reads()?;
            let Some((_, oldest)) = self.reads.front_mut() else {
                return Poll::Ready(Ok(0));
            };
            ready!(oldest.poll_done(context));
            let (offset, flight) = self.reads.pop_front().expect("present");
            let (result, mut buffer) = flight.into_result();
            let read = match result {
                Ok(read) => read,
                Err(error) => {
                    self.error.set(
                        error.kind(),
                        Some(format!(
                            "{}: read of {} bytes at offset {offset} failed",
                            self.file.path().display(),
                            self.buffer_bytes
                        )),
                        Some(error),
                    );
                    return Poll::Ready(self.error.check().map(|()| 0));
                }
            };
            if read < buffer.len() {
                self.after_short_read(offset, read);
            }
            buffer.truncate(read);
            self.consumed = std::mem::take(&mut self.skip).min(read);
            self.current = Some(buffer);
        }
    }

    /// Drops the reads issued past a short one of `read` bytes at `offset`,
    /// and ends the stream after it or reads on from its end (see the
    /// module docs).
    fn after_short_read(&mut self, offset: u64, read: usize) {
        self.reads.clear();
        if read == 0 || read % self.block_bytes != 0 {
            self.end_seen = true;
        } else {
            self.next_offset = offset + read as u64;
        }
    }

    /// Keeps `read_ahead_buffers` reads in flight until the end is seen.
    fn issue_reads(&mut self) -> io::Result<()> {
        while !self.end_seen && self.reads.len() < self.read_ahead_buffers {
            let buffer = match self.idle.pop() {
                Some(buffer) => buffer,
                None => AlignedBuffer::new(self.buffer_bytes, self.memory_alignment)
                    .map_err(io::Error::from)?,
            };
            let future = self.file.read_at(&self.class, buffer, self.next_offset);
            self.reads
                .push_back((self.next_offset, Flight::start(future)));
            // Saturating: a read that far fails on its own (its end would
            // pass the largest file offset).
            self.next_offset = self.next_offset.saturating_add(self.buffer_bytes as u64);
        }
        Ok(())
    }
}

impl io::Read for StreamReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        block(self, Self::scheduler, |this, context| {
            this.poll_read_inner(context, out)
        })
    }
}

impl futures_io::AsyncRead for StreamReader {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_read_inner(context, out)
    }
}
