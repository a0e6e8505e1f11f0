//! # tailguard-core: the pure scheduling core
//!
//! Everything tailguard decides about *when* a request may go to a device lives in
//! this crate, and nothing in it reads a clock, spawns a thread or performs I/O.
//! Time arrives as an argument ([`Nanos`]), and so do completions. The
//! deterministic simulator (`tailguard-sim`) and the real io_uring engine drive the
//! same code, so every policy can be tested with a manual clock.
//!
//! The pieces, each in its own module:
//!
//! - [`profile`]: what a device can do (IOPS and bandwidth per direction, largest
//!   request, latency target) and the **cost model** that turns a request into
//!   nanoseconds of device time.
//! - [`fair_queue`]: weighted fair queueing by cost/shares between classes, with
//!   bounded credit for classes that wake from idle.
//! - [`rate_limit`]: optional per-class caps in bytes/s and operations/s,
//!   token buckets that hold a class in the fair queue while it is in debt.
//! - [`budget`]: the per-device **in-flight budget** in cost units.
//! - [`controller`]: the hook a latency controller uses to resize the budget
//!   ([`LatencyController`], [`ControllerChoice`]), and the **adaptive
//!   latency controller** that resizes it
//!   from completions: the smallest budget that sustains throughput while reads
//!   meet the latency target, found without a profile.
//! - [`streams`]: on a device that seeks, which pieces continue a sequential
//!   stream and so cost only their transfer.
//! - [`pace`]: on a device that seeks, how fast it serves each class's charged
//!   cost, so that a slice lasts the disk's time it names.
//! - [`dispatcher`]: one per device; splits oversize requests, queues them in the
//!   fair queue, dispatches while the budget allows, and rejoins pieces on
//!   completion. It is the only type an engine needs.
//! - [`error`]: [`CoreError`], the one error type of every fallible operation
//!   here, with messages that name the fix.
//!
//! The design's central inequality is: *in-flight cost ≤ budget*. Cost is device
//! time, so the budget is the amount of work the device may hold, and therefore the
//! queueing delay a newly arrived request sees at the device. The fair queue decides
//! *who* goes next; the budget decides *whether* anyone may go now.

pub mod budget;
pub mod controller;
pub mod dispatcher;
pub mod error;
pub mod fair_queue;
pub mod histogram;
pub mod pace;
pub mod profile;
pub mod quiet_reads;
pub mod rate_limit;
pub mod request;
pub mod streams;

pub use budget::Budget;
pub use controller::{
    AdaptiveBudget, BudgetBounds, CompletionSample, ControllerChoice, ControllerConfig,
    ControllerStats, FixedBudget, LatencyController, Situation,
};
pub use dispatcher::{
    CancelledPiece, ClassId, ClassStats, Completion, DispatchedPiece, Dispatcher, DispatcherConfig,
    DispatcherStats, SLICE_LATENCY_TARGETS,
};
pub use error::CoreError;
pub use profile::{CostModel, DeviceProfile};
pub use quiet_reads::QuietReads;
pub use rate_limit::{RateLimit, DEFAULT_BURST_NS};
pub use request::{
    Direction, IoRequest, Nanos, RequestId, NANOS_PER_MICROSECOND, NANOS_PER_MILLISECOND,
    NANOS_PER_SECOND, NANOS_PER_SECOND_F64,
};
