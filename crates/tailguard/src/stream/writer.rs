//! The write-behind stream writer.
//!
//! Appended bytes are copied into the *current* aligned buffer. A full buffer
//! is written at its file offset through the scheduler, in the writer's
//! class, and the caller goes on at once with another buffer; when
//! `buffers_in_flight` buffers are out, the caller waits for the oldest.
//!
//! `flush` writes the partial tail too: the current buffer, its length
//! rounded up to the device's block with zeros after the data, lent to one
//! request and taken back when it completes, so the next appends continue
//! in it and rewrite that block later. It then waits for every request: the
//! bytes are in the file, followed by the zeros of the padded block. `sync`
//! flushes, truncates the file to its logical length where the tail was
//! padded (a metadata call made directly, not through the scheduler), then
//! runs `fdatasync` through the scheduler: the bytes are durable and the file
//! is exactly as long as what was appended. `flush` leaves the truncation to
//! `sync` and `close`, because a truncation waits for the file's direct I/O
//! and commits a metadata change, a cost that an engine flushing to make
//! recent appends readable pays for nothing. `close` flushes, truncates
//! (also whatever lay past the logical end of a file that was longer) and
//! refuses later writes. On a block device node, which has a size but no
//! length to cut, the stream owns the device from where it starts: nothing is
//! truncated, and the bytes past the stream's end in its last block are the
//! padding's zeros. A writer made with [`StreamWriter::new`] over a file
//! that already holds bytes cuts them at its first `sync` or `close`.
//! Dropping a writer that was not closed closes it (blocking) and logs an
//! error it could not report; one that had failed only waits for its writes
//! in flight and logs the error: it truncates nothing, so the file may end
//! in a padded block.

use super::{block, granularity, round_up, Flight, StickyError};
use crate::buffer::AlignedBuffer;
use crate::engine::BufResult;
use crate::scheduler::{File, IoClass, Scheduler};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// How a [`StreamWriter`] buffers.
///
/// ```
/// // 1 MiB writes, three in flight: at most 4 MiB of buffers.
/// let options = tailguard::WriterOptions {
///     buffer_bytes: 1 << 20,
///     buffers_in_flight: 3,
/// };
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Bytes per buffer, rounded up to the device's block (at most
    /// [`STREAM_BUFFER_BYTES_MAX`](super::STREAM_BUFFER_BYTES_MAX)): larger
    /// buffers make fewer, larger writes (less per-request cost) but each one
    /// holds the device longer in front of other classes' requests.
    pub buffer_bytes: usize,
    /// Buffers being written while the caller fills another (1 to
    /// [`STREAM_BUFFERS_MAX`](super::STREAM_BUFFERS_MAX)): more absorb longer
    /// bursts and keep the device busier, each costing `buffer_bytes` of
    /// memory; at the limit the caller waits.
    pub buffers_in_flight: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            buffer_bytes: 128 * 1024,
            buffers_in_flight: 4,
        }
    }
}

/// One write in flight.
struct Write {
    flight: Flight<BufResult>,
    offset: u64,
    /// Bytes of data, without padding.
    data_bytes: usize,
    /// A write of the partial current buffer, which comes back as current.
    tail: bool,
    /// The scheduler's cancel count when the write was made: a short write
    /// while it moved was cut by a cancel, not by a full device.
    cancels_at_start: u64,
}

/// A write-behind byte stream into a [`File`]; see the module docs of
/// [`crate::stream`].
///
/// ```no_run
/// use std::io::Write;
/// use tailguard::{OpenOptions, Scheduler, StreamWriter, WriterOptions};
/// # fn main() -> std::io::Result<()> {
/// let scheduler = Scheduler::builder().build()?;
/// let logging = scheduler.add_class("log", 100)?;
/// let file = OpenOptions::new().write(true).create(true).truncate(true)
///     .open(&scheduler, "/var/lib/app/log")?;
/// let mut log = StreamWriter::new(file, &logging, WriterOptions::default());
/// log.write_all(b"any length, any alignment\n")?;
/// log.sync()?; // durable
/// log.close()?; // the file is 26 bytes long
/// # Ok(())
/// # }
/// ```
pub struct StreamWriter {
    file: Arc<File>,
    class: IoClass,
    /// The device's offset and length granularity.
    block_bytes: usize,
    memory_alignment: usize,
    buffer_bytes: usize,
    buffers_in_flight: usize,
    /// File offset of the current buffer's first byte (a multiple of the block).
    buffer_offset: u64,
    /// The buffer being filled; `None` when none is taken yet, or while a tail
    /// write has it.
    current: Option<AlignedBuffer>,
    /// Bytes of data in the current buffer.
    filled: usize,
    /// Bytes of the current buffer already written by a tail write.
    tail_written: usize,
    tail_out: bool,
    writes: VecDeque<Write>,
    idle: Vec<AlignedBuffer>,
    buffers_made: usize,
    /// The file may extend past the logical end: a padded tail, or the old
    /// bytes after the offset an appending writer started at.
    longer_on_disk: bool,
    /// Every byte before this offset was written by a completed request.
    written_through: u64,
    sync: Option<Flight<io::Result<()>>>,
    error: StickyError,
    closed: bool,
}

impl std::fmt::Debug for StreamWriter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StreamWriter")
            .field("file", &self.file)
            .field("class", &self.class.name())
            .field("logical_len", &self.logical_len())
            .field("writes_in_flight", &self.writes.len())
            .finish_non_exhaustive()
    }
}

impl StreamWriter {
    /// A writer that appends to `file` from offset 0, in `class`.
    pub fn new(file: impl Into<Arc<File>>, class: &IoClass, options: WriterOptions) -> Self {
        let file = file.into();
        let (block_bytes, memory_alignment) = granularity(&file);
        // A file that already holds bytes keeps them past the stream's end
        // until the first `sync` or `close` cuts them (where its length is
        // unknown, that cut happens anyway).
        let longer_on_disk = file
            .length_now()
            .map_or(true, |(length, device)| length > 0 && !device);
        Self {
            buffer_bytes: round_up(options.buffer_bytes, block_bytes),
            buffers_in_flight: options
                .buffers_in_flight
                .clamp(1, super::STREAM_BUFFERS_MAX),
            file,
            class: class.clone(),
            block_bytes,
            memory_alignment,
            buffer_offset: 0,
            current: None,
            filled: 0,
            tail_written: 0,
            tail_out: false,
            writes: VecDeque::new(),
            idle: Vec::new(),
            buffers_made: 0,
            longer_on_disk,
            written_through: 0,
            sync: None,
            error: StickyError::default(),
            closed: false,
        }
    }

    /// A writer that goes on appending to `file` at byte `offset` (any
    /// offset, such as the logical end a recovery found), in `class`; blocks
    /// on one read when `offset` is not on a block boundary (see
    /// [`StreamWriter::appending_async`]).
    pub fn appending(
        file: impl Into<Arc<File>>,
        class: &IoClass,
        options: WriterOptions,
        offset: u64,
    ) -> io::Result<Self> {
        let file = file.into();
        let scheduler = file.scheduler().clone();
        scheduler.block_on(Self::appending_async(file, class, options, offset))
    }

    /// Async form of [`StreamWriter::appending`]: where `offset` falls inside
    /// a block, reads that block's bytes before `offset` into the first
    /// buffer, so that the first write of the block keeps them. The file's
    /// bytes from `offset` on are replaced by what is appended (and cut off
    /// by `sync` or `close`); an `offset` past the end of the file fails.
    pub async fn appending_async(
        file: impl Into<Arc<File>>,
        class: &IoClass,
        options: WriterOptions,
        offset: u64,
    ) -> io::Result<Self> {
        let mut writer = Self::new(file, class, options);
        // Closed until it is set up: a setup that fails or is cancelled drops
        // the writer, whose drop must not truncate a file it never wrote.
        writer.closed = true;
        writer.start_at(offset).await?;
        writer.closed = false;
        Ok(writer)
    }

    /// Positions a new writer at `offset`, reading the bytes of its block
    /// before it when it is not on a block boundary.
    async fn start_at(&mut self, offset: u64) -> io::Result<()> {
        let (file_len, _) = self.file.length_now()?;
        if offset > file_len {
            return Err(past_the_end(&self.file, offset, file_len));
        }
        let aligned = offset - offset % self.block_bytes as u64;
        let partial = (offset - aligned) as usize;
        self.buffer_offset = aligned;
        self.written_through = offset;
        // The old bytes from `offset` on are cut off by the first `sync`.
        self.longer_on_disk = file_len > offset;
        if partial == 0 {
            return Ok(());
        }
        let head =
            AlignedBuffer::new(self.block_bytes, self.memory_alignment).map_err(io::Error::from)?;
        let (result, head) = self.file.read_at(&self.class, head, aligned).await;
        let read = result?;
        if read < partial {
            return Err(past_the_end(&self.file, offset, aligned + read as u64));
        }
        let mut buffer = AlignedBuffer::new(self.buffer_bytes, self.memory_alignment)
            .map_err(io::Error::from)?;
        buffer[..partial].copy_from_slice(&head[..partial]);
        self.buffers_made += 1;
        self.current = Some(buffer);
        self.filled = partial;
        self.tail_written = partial;
        Ok(())
    }

    /// The file written to (shared: read it with `read_at` meanwhile; bytes
    /// are there once a `flush` that followed them has returned; past
    /// [`StreamWriter::logical_len`] it may hold zeros until `sync` or
    /// `close`).
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Bytes appended so far: the file's length after the next `sync` or
    /// `close` (a `flush` may leave the last block padded with zeros).
    pub fn logical_len(&self) -> u64 {
        self.buffer_offset + self.filled as u64
    }

    /// How far the file is written: every byte before this offset has been
    /// written by a completed request (it is readable with `read_at` now),
    /// without waiting for anything. It advances as writes complete, in
    /// file order, so an engine can publish records up to it as it appends
    /// instead of stalling its appends on a `flush`; the partial tail
    /// counts once a `flush` has written it.
    pub fn written_len(&mut self) -> u64 {
        self.reap_finished();
        self.written_through
    }

    /// Buffers this writer has allocated: at most `buffers_in_flight + 1`,
    /// whatever was written.
    pub fn buffers_allocated(&self) -> usize {
        self.buffers_made
    }

    /// `flush`, truncation to the logical length, then `fdatasync` through
    /// the scheduler: every byte appended so far, and the file's length, are
    /// durable when it returns.
    pub fn sync(&mut self) -> io::Result<()> {
        block(self, Self::scheduler, Self::poll_sync)
    }

    /// Flushes, truncates the file to [`StreamWriter::logical_len`] and
    /// refuses later writes. Not durable by itself: `sync` first for that.
    pub fn close(&mut self) -> io::Result<()> {
        block(self, Self::scheduler, Self::poll_close_inner)
    }

    /// Appends all of `data` (async form of `write_all`).
    pub async fn write_all_async(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let written =
                std::future::poll_fn(|context| self.poll_write_inner(context, data)).await?;
            data = &data[written..];
        }
        Ok(())
    }

    /// Async form of `flush`.
    pub async fn flush_async(&mut self) -> io::Result<()> {
        std::future::poll_fn(|context| self.poll_flush_inner(context)).await
    }

    /// Async form of [`StreamWriter::sync`].
    pub async fn sync_async(&mut self) -> io::Result<()> {
        std::future::poll_fn(|context| self.poll_sync(context)).await
    }

    /// Async form of [`StreamWriter::close`].
    pub async fn close_async(&mut self) -> io::Result<()> {
        std::future::poll_fn(|context| self.poll_close_inner(context)).await
    }

    /// `flush`, then `fdatasync`, as a poll function.
    pub fn poll_sync(&mut self, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.sync.is_none() {
            ready!(self.poll_flush_inner(context))?;
            if self.longer_on_disk {
                self.truncate_to_logical_len()?;
            }
        }
        let sync = self
            .sync
            .get_or_insert_with(|| Flight::start(self.file.fdatasync(&self.class)));
        ready!(sync.poll_done(context));
        let result = self.sync.take().expect("present").into_result();
        if let Err(error) = result {
            // After a failed fdatasync the kernel may have dropped the dirty
            // data: the stream cannot promise anything any more.
            self.error.set_error(error);
        }
        Poll::Ready(self.error.check())
    }

    fn scheduler(&self) -> Scheduler {
        self.file.scheduler().clone()
    }

    fn check(&mut self) -> io::Result<()> {
        self.error.check()?;
        if self.closed {
            return Err(io::Error::other(
                "the stream writer is closed; open a new one to write more",
            ));
        }
        Ok(())
    }

    fn poll_write_inner(
        &mut self,
        context: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // A sync dropped before its fdatasync came back does not cover these
        // bytes: the next sync flushes them and starts its own.
        self.sync = None;
        ready!(self.poll_current(context))?;
        let buffer = self.current.as_mut().expect("poll_current gives a buffer");
        let copied = data.len().min(self.buffer_bytes - self.filled);
        buffer[self.filled..self.filled + copied].copy_from_slice(&data[..copied]);
        self.filled += copied;
        if self.filled == self.buffer_bytes {
            let buffer = self.current.take().expect("present");
            self.submit(buffer, false);
            self.buffer_offset += self.buffer_bytes as u64;
            self.filled = 0;
            self.tail_written = 0;
        }
        self.reap_finished();
        Poll::Ready(Ok(copied))
    }

    /// Makes sure there is a current buffer: the tail back from its write, an
    /// idle one, a new one while under the limit, or the oldest write's.
    fn poll_current(&mut self, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.current.is_some() {
                return Poll::Ready(Ok(()));
            }
            // While the tail is out, the oldest write is waited for until the
            // tail (the queue's last) comes back: writes complete in file
            // order, so `written_len` never passes one still in flight.
            if !self.tail_out {
                if let Some(mut buffer) = self.idle.pop() {
                    buffer.restore_len();
                    self.current = Some(buffer);
                    continue;
                }
                if self.buffers_made < self.buffers_in_flight + 1 {
                    let buffer = AlignedBuffer::new(self.buffer_bytes, self.memory_alignment)
                        .map_err(io::Error::from)?;
                    self.buffers_made += 1;
                    self.current = Some(buffer);
                    continue;
                }
            }
            let oldest = self.writes.front_mut().expect("a write is in flight");
            ready!(oldest.flight.poll_done(context));
            let write = self.writes.pop_front().expect("present");
            self.complete(write);
            self.error.check()?;
        }
    }

    /// Hands `buffer` (its visible length) to a write at the current offset.
    fn submit(&mut self, buffer: AlignedBuffer, tail: bool) {
        let data_bytes = if tail { self.filled } else { buffer.len() };
        let offset = self.buffer_offset;
        let cancels_at_start = self.file.scheduler().cancels();
        let future = self.file.write_at(&self.class, buffer, offset);
        self.writes.push_back(Write {
            flight: Flight::start(future),
            offset,
            data_bytes,
            tail,
            cancels_at_start,
        });
    }

    /// Takes a finished write's buffer back and records its error, if any.
    fn complete(&mut self, write: Write) {
        let (result, mut buffer) = write.flight.into_result();
        let requested = buffer.len();
        buffer.restore_len();
        if write.tail {
            self.tail_out = false;
            self.current = Some(buffer);
        } else {
            self.idle.push(buffer);
        }
        match result {
            Ok(written) if written == requested => {
                if write.tail {
                    self.tail_written = write.data_bytes;
                }
                // Writes complete here in file order (the queue's, and the
                // tail is always last); after a failure nothing advances.
                if !self.error.is_set() {
                    let end = write.offset + write.data_bytes as u64;
                    self.written_through = self.written_through.max(end);
                }
            }
            Ok(written) => {
                let cut_by_cancel = self.file.scheduler().cancels() != write.cancels_at_start;
                self.error.set_error(crate::request_error::short_write(
                    self.file.path(),
                    write.offset,
                    written,
                    requested,
                    cut_by_cancel,
                ));
            }
            Err(error) => self.error.set(
                error.kind(),
                Some(format!(
                    "{}: write of {requested} bytes at offset {} failed",
                    self.file.path().display(),
                    write.offset
                )),
                Some(error),
            ),
        }
    }

    /// Takes back every write at the front of the queue that has finished, so
    /// that errors surface on the next call and buffers return early.
    fn reap_finished(&mut self) {
        let mut context = Context::from_waker(std::task::Waker::noop());
        while let Some(front) = self.writes.front_mut() {
            if front.flight.poll_done(&mut context).is_pending() {
                return;
            }
            let write = self.writes.pop_front().expect("present");
            self.complete(write);
        }
    }

    /// Ready once every write in flight has come back (results dropped).
    fn poll_writes_done(&mut self, context: &mut Context<'_>) -> Poll<()> {
        for write in &mut self.writes {
            ready!(write.flight.poll_done(context));
        }
        self.writes.clear();
        Poll::Ready(())
    }

    fn poll_flush_inner(&mut self, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        if self.filled > self.tail_written && !self.tail_out {
            let mut buffer = self.current.take().expect("a partial buffer is current");
            let padded = round_up(self.filled, self.block_bytes);
            buffer[self.filled..padded].fill(0);
            buffer.truncate(padded);
            self.longer_on_disk |= padded > self.filled;
            self.tail_out = true;
            self.submit(buffer, true);
        }
        for write in &mut self.writes {
            ready!(write.flight.poll_done(context));
        }
        while let Some(write) = self.writes.pop_front() {
            self.complete(write);
        }
        Poll::Ready(self.error.check())
    }

    /// Cuts the file at the stream's end; a block device, which has no
    /// length to cut, is left as it is.
    fn truncate_to_logical_len(&mut self) -> io::Result<()> {
        let length = self.logical_len();
        let truncated = match self.file.length_now() {
            Ok((_, true)) => Ok(()),
            Ok((_, false)) => self.file.std_file().set_len(length),
            Err(error) => Err(error),
        };
        if let Err(error) = truncated {
            self.error.set(
                error.kind(),
                Some(format!(
                    "{}: truncating to the logical length {length} failed",
                    self.file.path().display()
                )),
                Some(error),
            );
            return self.error.check();
        }
        self.longer_on_disk = false;
        Ok(())
    }

    fn poll_close_inner(&mut self, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.closed {
            return Poll::Ready(self.error.check());
        }
        ready!(self.poll_flush_inner(context))?;
        // A file that was longer than what this stream wrote ends here too.
        self.truncate_to_logical_len()?;
        self.closed = true;
        self.idle.clear();
        self.current = None;
        Poll::Ready(Ok(()))
    }
}

fn past_the_end(file: &File, offset: u64, file_len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "{}: cannot append at offset {offset}, the file ends at {file_len}; append at \
             {file_len} or less",
            file.path().display()
        ),
    )
}

impl io::Write for StreamWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        block(self, Self::scheduler, |this, context| {
            this.poll_write_inner(context, data)
        })
    }

    /// Writes the partial tail and waits for every write: the bytes are in
    /// the file (not durable: see [`StreamWriter::sync`]).
    fn flush(&mut self) -> io::Result<()> {
        block(self, Self::scheduler, Self::poll_flush_inner)
    }
}

impl futures_io::AsyncWrite for StreamWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_inner(context, data)
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_inner(context)
    }

    fn poll_close(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_close_inner(context)
    }
}

impl Drop for StreamWriter {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        if self.error.is_set() {
            // An error no call has reported yet must not vanish unseen.
            if let Some(error) = self.error.unreported() {
                tracing::error!("a dropped stream writer had failed: {error}");
            }
            // Its writes still in flight land anyway (a dropped request is
            // still carried out): wait for them, so that none lands after
            // the writer is gone (over a file a recovery truncated since).
            block(self, Self::scheduler, Self::poll_writes_done);
            return;
        }
        if let Err(error) = self.close() {
            tracing::error!(
                "{}: closing the dropped stream writer failed: {error}",
                self.file.path().display()
            );
        }
    }
}
