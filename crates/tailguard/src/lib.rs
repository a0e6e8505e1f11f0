//! # tailguard: a userspace I/O scheduler (engine; work in progress)

pub mod backend;
pub mod buffer;
pub mod device;
pub mod handoff;
mod sync;
