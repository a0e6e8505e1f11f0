//! Synchronisation primitives, swapped for loom's under `cfg(tailguard_loom)`.
//!
//! The engine's cross-thread handoff ([`crate::handoff`]) takes its `Mutex`
//! from here, so `RUSTFLAGS="--cfg tailguard_loom" cargo test -p tailguard --lib loom`
//! can explore every interleaving of submitters and the engine with loom's model
//! checker, as tokio does. Nothing else in the crate needs to know.

#[cfg(tailguard_loom)]
pub(crate) use loom::sync::{Condvar, Mutex};

#[cfg(not(tailguard_loom))]
pub(crate) use std::sync::{Condvar, Mutex};
