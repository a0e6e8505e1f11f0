//! Positional reads and writes at any offset and length, on any [`File`].
//!
//! Direct I/O only moves whole aligned blocks, so these go through *bounce
//! buffers*: an aligned buffer covering the blocks that the byte range
//! touches, drawn from a crate-wide [`BufferPool`] (64 KiB buffers, at most
//! 64 idle) when the range fits one, allocated otherwise.
//!
//! - [`File::read_at_unaligned`] reads the covering blocks in one request and
//!   copies the asked-for bytes out; [`File::read_exact_at_unaligned`] also
//!   fails a read that comes back short: `UnexpectedEof` where the file ends
//!   there, `Interrupted` where a cancel cut the read's pieces (the file's
//!   length tells them apart).
//! - [`File::write_at_unaligned`] is a **read-modify-write**: it reads the
//!   partly covered first and last blocks (where they hold file data), patches
//!   the new bytes in, and writes every covering block in one request; a write
//!   that ends past the end of the file then truncates the file to the end of
//!   the new bytes, so the zero padding of the last block does not stay, as
//!   long as the file still ends where that write left it (a writer that
//!   extended it further meanwhile keeps its bytes). On a block device node
//!   the device's size is the file's length: every partly covered block is
//!   read, and nothing is truncated. It is **not atomic** against other
//!   writers: a concurrent write to the same blocks (through this function,
//!   `write_at` or a [`StreamWriter`]) between the read and the write is
//!   overwritten with the old bytes, and a file extended by another writer
//!   between this one's last check and its truncation is cut back. Callers
//!   that share blocks between writers, or extend a file from several
//!   writers, must serialize them. It is **not cancel-safe**: a write whose
//!   future is dropped after its write went out may leave the file padded
//!   with zeros to the end of its last block.
//!
//! [`StreamWriter`]: crate::StreamWriter

use crate::buffer::AlignedBuffer;
use crate::pool::BufferPool;
use crate::scheduler::{File, IoClass};
use crate::stream::granularity_of as granularity;
use std::io;
use std::sync::LazyLock;

/// The bounce buffers of small unaligned requests.
static BOUNCE_BUFFERS: LazyLock<BufferPool> =
    LazyLock::new(|| BufferPool::new(64 * 1024, 4096, 64));

/// A buffer of `len` bytes aligned to `alignment`: from the pool when it fits.
fn bounce(len: usize, alignment: usize) -> io::Result<AlignedBuffer> {
    let pool = &*BOUNCE_BUFFERS;
    if len <= pool.buffer_bytes() && alignment <= pool.alignment() {
        let mut buffer = pool.take().map_err(io::Error::from)?;
        buffer.truncate(len);
        return Ok(buffer);
    }
    AlignedBuffer::new(len, alignment).map_err(io::Error::from)
}

/// The aligned range `[start, end)` of blocks that cover `len` bytes at
/// `offset`.
fn covering(offset: u64, len: usize, block: usize) -> (u64, u64) {
    let block = block as u64;
    let start = offset - offset % block;
    let end = (offset + len as u64).div_ceil(block) * block;
    (start, end)
}

impl File {
    /// Reads up to `out.len()` bytes at `offset` (any offset and length)
    /// through a bounce buffer; the count is short only at the end of the
    /// file. Blocking callers run it with `file.scheduler().block_on(..)`.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// let scheduler = tailguard::Scheduler::builder().build()?;
    /// let reads = scheduler.add_class("reads", 1000)?;
    /// let file = scheduler.open("/var/lib/app/log")?;
    /// let mut record = [0u8; 37];
    /// let read = scheduler.block_on(file.read_at_unaligned(&reads, &mut record, 1001))?;
    /// # let _ = read;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_at_unaligned(
        &self,
        class: &IoClass,
        out: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        crate::buffer::check_range(offset, out.len() as u64)?;
        let (block, memory) = granularity(self);
        let (start, end) = covering(offset, out.len(), block);
        let buffer = bounce((end - start) as usize, memory)?;
        let (result, buffer) = self.read_at(class, buffer, start).await;
        let outcome = result.map(|read| {
            let skip = (offset - start) as usize;
            let available = read.saturating_sub(skip).min(out.len());
            out[..available].copy_from_slice(&buffer[skip..skip + available]);
            available
        });
        BOUNCE_BUFFERS.give(buffer);
        outcome
    }

    /// Reads exactly `out.len()` bytes at `offset` (any offset and length), or
    /// fails with [`io::ErrorKind::UnexpectedEof`] naming the file and
    /// offset: the form a point lookup of a known record wants. A read that a
    /// cancel cut short while the file holds the bytes fails with
    /// [`io::ErrorKind::Interrupted`] instead, so it is not taken for a
    /// missing record.
    pub async fn read_exact_at_unaligned(
        &self,
        class: &IoClass,
        out: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
        let read = self.read_at_unaligned(class, out, offset).await?;
        if read < out.len() {
            return Err(self.short_read_error(out.len(), offset, read));
        }
        Ok(())
    }

    /// The error of a read of `asked` bytes at `offset` that returned only
    /// `read`: the end of the file where the file ends there, otherwise a
    /// read cut short by [`crate::Scheduler::cancel_pending`] or
    /// [`crate::Scheduler::shutdown_now`] (its pieces not yet at the device
    /// were cancelled), which the file's length now tells apart.
    fn short_read_error(&self, asked: usize, offset: u64, read: usize) -> io::Error {
        let path = self.path().display();
        let read_end = offset + read as u64;
        match self.length_now() {
            Ok((length, _)) if length > read_end => io::Error::new(
                io::ErrorKind::Interrupted,
                format!(
                    "{path}: {asked} bytes asked for at offset {offset}, only {read} read though \
                     the file holds {length} bytes: the rest of the read was cancelled \
                     (Scheduler::cancel_pending or shutdown_now); read again"
                ),
            ),
            _ => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{path}: {asked} bytes asked for at offset {offset}, the file ends after {read}"),
            ),
        }
    }

    /// Writes all of `data` at `offset` (any offset and length) by
    /// read-modify-write of the blocks it touches; **not atomic** against
    /// concurrent writers of those blocks, and **not cancel-safe** (see the
    /// module docs): two writes that share a block can undo each other, and
    /// the truncation after a write past the end can cut a concurrent
    /// extension of the file. Serialize writers that share blocks or extend
    /// the file, and let the future finish.
    ///
    /// ```no_run
    /// # fn main() -> std::io::Result<()> {
    /// let scheduler = tailguard::Scheduler::builder().build()?;
    /// let writes = scheduler.add_class("writes", 100)?;
    /// let file = scheduler.open("/var/lib/app/table")?;
    /// scheduler.block_on(file.write_at_unaligned(&writes, b"patched", 4093))?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_at_unaligned(
        &self,
        class: &IoClass,
        data: &[u8],
        offset: u64,
    ) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        crate::buffer::check_range(offset, data.len() as u64)?;
        let (block, memory) = granularity(self);
        let (start, end) = covering(offset, data.len(), block);
        let data_end = offset + data.len() as u64;
        let (file_len, _) = self.length_now()?;
        let mut buffer = bounce((end - start) as usize, memory)?;
        let head = (offset - start) as usize;
        let tail = (data_end - start) as usize;
        buffer[..head].fill(0);
        buffer[tail..].fill(0);
        let last_block = end - block as u64;
        if head > 0 && start < file_len {
            self.read_block_into(class, &mut buffer, start, start, block, memory)
                .await?;
        }
        let last_read_already = head > 0 && last_block == start;
        if data_end < end && last_block < file_len && !last_read_already {
            self.read_block_into(class, &mut buffer, start, last_block, block, memory)
                .await?;
        }
        buffer[head..tail].copy_from_slice(data);
        let requested = buffer.len();
        let cancels_at_start = self.scheduler().cancels();
        let (result, buffer) = self.write_at(class, buffer, start).await;
        BOUNCE_BUFFERS.give(buffer);
        let written = result?;
        if written != requested {
            let cut_by_cancel = self.scheduler().cancels() != cancels_at_start;
            return Err(crate::request_error::short_write(
                self.path(),
                start,
                written,
                requested,
                cut_by_cancel,
            ));
        }
        if end > file_len.max(data_end) {
            self.cut_padding(end, file_len.max(data_end))?;
        }
        Ok(())
    }

    /// Truncates to `length` a file that a write padded to `padded_end`,
    /// unless it is a block device or ends elsewhere now (another writer
    /// extended it further).
    fn cut_padding(&self, padded_end: u64, length: u64) -> io::Result<()> {
        let (length_now, block_device) = self.length_now()?;
        if !block_device && length_now == padded_end {
            self.std_file().set_len(length)?;
        }
        Ok(())
    }

    /// Reads the block at `block_offset` into `buffer` (which starts at file
    /// offset `buffer_offset`), for a read-modify-write.
    async fn read_block_into(
        &self,
        class: &IoClass,
        buffer: &mut AlignedBuffer,
        buffer_offset: u64,
        block_offset: u64,
        block: usize,
        memory: usize,
    ) -> io::Result<()> {
        let scratch = bounce(block, memory)?;
        let (result, scratch) = self.read_at(class, scratch, block_offset).await;
        let outcome = result.map(|read| {
            let at = (block_offset - buffer_offset) as usize;
            buffer[at..at + read].copy_from_slice(&scratch[..read]);
        });
        BOUNCE_BUFFERS.give(scratch);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::covering;

    #[test]
    fn covering_blocks_include_both_partial_ends() {
        assert_eq!(covering(0, 4096, 4096), (0, 4096));
        assert_eq!(covering(1, 1, 4096), (0, 4096));
        assert_eq!(covering(4095, 2, 4096), (0, 8192));
        assert_eq!(covering(10_000, 100, 512), (9728, 10240));
        assert_eq!(covering(5, 3, 1), (5, 8));
    }
}
