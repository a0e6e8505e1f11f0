//! (stub: to be written)
#![allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClassId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassIdStub;
pub struct ClassError; pub struct Completion; pub struct DispatchedPiece; pub struct Dispatcher; pub struct DispatcherConfig; pub struct DispatcherStats; pub struct EnqueueError;
