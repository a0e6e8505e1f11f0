//! The io_uring backend (stub: to be written).

use super::{Backend, BackendKind, EngineWaker, Op, OpResult};
use std::io;
use std::sync::Arc;

/// One io_uring ring owned by the engine thread.
pub struct Uring {}

impl Uring {
    /// A ring of `depth` submission entries.
    pub fn new(_depth: u32) -> io::Result<Self> {
        Err(io::Error::other("not yet written"))
    }
}

impl Backend for Uring {
    fn kind(&self) -> BackendKind {
        BackendKind::IoUring
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
