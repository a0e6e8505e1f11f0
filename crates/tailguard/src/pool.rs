//! A pool of aligned buffers, so that steady-state I/O allocates nothing.
//!
//! A [`BufferPool`] hands out [`AlignedBuffer`]s of one size and alignment and
//! takes them back: [`BufferPool::take`] gives an idle buffer (restored to its
//! full length, whatever a short read left) or allocates one, and
//! [`BufferPool::give`] keeps a returned buffer for the next `take` unless the
//! pool already holds `idle_max` of them, in which case the buffer is freed.
//! Memory held idle is thus bounded by `idle_max × buffer_bytes`; buffers out
//! in requests are owned by those requests, not by the pool. A buffer of
//! another size or alignment given back is freed, so a pool never hands out
//! a buffer that breaks its promise.
//!
//! The pool is a mutex around a vector: one short critical section per take
//! or give, shared by every thread (it is `Sync`).

use crate::buffer::AlignedBuffer;
use crate::error::Error;
use std::sync::Mutex;

/// A bounded pool of equal aligned buffers; see the module docs.
///
/// ```
/// use tailguard::BufferPool;
/// let pool = BufferPool::new(4096, 4096, 8);
/// let mut buffer = pool.take().expect("allocation");
/// assert_eq!(buffer.len(), 4096);
/// buffer.truncate(100); // a short read, say
/// pool.give(buffer);
/// assert_eq!(pool.take().unwrap().len(), 4096, "restored to full length");
/// ```
#[derive(Debug)]
pub struct BufferPool {
    buffer_bytes: usize,
    alignment: usize,
    idle_max: usize,
    idle: Mutex<Vec<AlignedBuffer>>,
}

impl BufferPool {
    /// A pool of `buffer_bytes`-long buffers aligned to `alignment` (a power
    /// of two), keeping at most `idle_max` of them idle.
    pub fn new(buffer_bytes: usize, alignment: usize, idle_max: usize) -> Self {
        Self {
            buffer_bytes,
            alignment,
            idle_max,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The length of every buffer the pool hands out.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// The alignment of every buffer the pool hands out.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// How many buffers sit idle now.
    pub fn idle(&self) -> usize {
        self.idle.lock().expect("pool lock poisoned").len()
    }

    /// An idle buffer at its full length, or a new zeroed one.
    pub fn take(&self) -> Result<AlignedBuffer, Error> {
        let idle = self.idle.lock().expect("pool lock poisoned").pop();
        match idle {
            Some(mut buffer) => {
                buffer.restore_len();
                Ok(buffer)
            }
            None => AlignedBuffer::new(self.buffer_bytes, self.alignment),
        }
    }

    /// Returns `buffer` to the pool (or frees it, see the module docs).
    pub fn give(&self, buffer: AlignedBuffer) {
        if buffer.capacity() != self.buffer_bytes || buffer.alignment() != self.alignment {
            return;
        }
        let mut idle = self.idle.lock().expect("pool lock poisoned");
        if idle.len() < self.idle_max {
            idle.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_buffers_are_reused_up_to_the_bound() {
        let pool = BufferPool::new(1024, 512, 2);
        let buffers: Vec<_> = (0..3).map(|_| pool.take().unwrap()).collect();
        let addresses: Vec<_> = buffers.iter().map(|buffer| buffer.as_ptr()).collect();
        for buffer in buffers {
            pool.give(buffer);
        }
        assert_eq!(pool.idle(), 2, "the third is freed");
        let again = pool.take().unwrap();
        assert!(
            addresses.contains(&again.as_ptr()),
            "a kept buffer comes back"
        );
        assert_eq!(again.len(), 1024);
        assert_eq!(again.as_ptr() as usize % 512, 0);
    }

    #[test]
    fn foreign_buffers_are_not_kept() {
        let pool = BufferPool::new(1024, 512, 4);
        pool.give(AlignedBuffer::new(2048, 512).unwrap());
        pool.give(AlignedBuffer::new(1024, 4096).unwrap());
        assert_eq!(pool.idle(), 0);
    }
}
