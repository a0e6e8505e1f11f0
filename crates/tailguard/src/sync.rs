//! Synchronisation primitives, swapped for loom's under `cfg(tailguard_loom)`.
//!
//! The engine's cross-thread handoff ([`crate::handoff`]) and the waker of a
//! thread in `block_on` ([`crate::completion`]'s `Parker`) take their `Mutex`,
//! `Condvar` and atomics from here, so
//! `RUSTFLAGS="--cfg tailguard_loom" cargo test -p tailguard --lib loom`
//! can explore every interleaving of submitters, wakers and the engine with
//! loom's model checker, as tokio does. Nothing else in the crate needs to
//! know. Without the cfg these are plain re-exports of `std`'s types: the
//! normal build pays nothing for the swap.

#[cfg(tailguard_loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicBool},
    Condvar, Mutex,
};

#[cfg(not(tailguard_loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicBool},
    Condvar, Mutex,
};
