//! The thread-pool backend (stub: to be written).

use super::{Backend, BackendKind, EngineWaker, Op, OpResult};
use std::io;
use std::sync::Arc;

/// A pool of threads doing `pread`/`pwrite`/`fsync`.
pub struct ThreadPool {}

impl ThreadPool {
    /// `threads` workers; at most `depth` ops in flight.
    pub fn new(_threads: usize, _depth: u32) -> io::Result<Self> {
        Err(io::Error::other("not yet written"))
    }
}

impl Backend for ThreadPool {
    fn kind(&self) -> BackendKind {
        BackendKind::Threads
    }
    unsafe fn push(&mut self, _op: Op) -> Result<(), Op> {
        unimplemented!()
    }
    fn submit(&mut self, _wait: bool) -> io::Result<()> {
        unimplemented!()
    }
    fn reap(&mut self, _out: &mut Vec<OpResult>) {
        unimplemented!()
    }
    fn waker(&self) -> Arc<dyn EngineWaker> {
        unimplemented!()
    }
    fn in_flight(&self) -> usize {
        unimplemented!()
    }
}
