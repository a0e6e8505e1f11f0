//! Statistics: counters per device and per class, latency histograms per class.
//!
//! The engine records every completed request in its class's histograms, split
//! into the three times that matter: **queue wait** (enqueue to the dispatch of
//! the last piece: the scheduler's doing), **device time** (that dispatch to
//! completion: the device's doing) and **latency** (submission to completion:
//! what the application saw). Keeping queue wait and device time apart is what
//! tells a user whether to blame the scheduler's budget or the device.
//!
//! Histograms are `hdrhistogram` with 3 significant digits over 1 ns .. 1 hour.
//! [`crate::Scheduler::stats`] asks the engine for a [`StatsSnapshot`]; the engine
//! answers between two loop iterations, so a snapshot is consistent.

use hdrhistogram::Histogram;

/// Largest value a histogram holds: one hour in nanoseconds.
const HISTOGRAM_MAX_NS: u64 = 3_600 * 1_000_000_000;

/// A latency histogram in nanoseconds.
pub type LatencyHistogram = Histogram<u64>;

pub(crate) fn new_histogram() -> LatencyHistogram {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3).expect("valid histogram bounds")
}

pub(crate) fn record(histogram: &mut LatencyHistogram, nanoseconds: u64) {
    histogram.saturating_record(nanoseconds.clamp(1, HISTOGRAM_MAX_NS));
}

/// One device's counters.
#[derive(Clone, Debug)]
pub struct DeviceStats {
    /// The device's name (`vda`, `nvme0n1`, `tmpfs:0:27`, `null`).
    pub name: String,
    /// Requests completed.
    pub ops: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Pieces at the device now.
    pub in_flight_pieces: usize,
    /// Cost in flight now (nanoseconds of device time).
    pub in_flight_ns: u64,
    /// The in-flight budget (nanoseconds of device time).
    pub budget_ns: u64,
    /// Pieces waiting in the fair queue.
    pub queued_pieces: usize,
    /// Times the budget policy resized the budget (0 under `Fixed`).
    pub budget_changes: u64,
    /// The budget policy's decision counters (all zero under `Fixed`).
    pub controller: tailguard_core::ControllerStats,
    /// The profile the dispatcher uses.
    pub profile: tailguard_core::DeviceProfile,
}

/// One class's counters and histograms, over all devices.
#[derive(Clone, Debug)]
pub struct ClassStats {
    /// The class's name.
    pub name: String,
    /// Its shares now.
    pub shares: u32,
    /// Requests completed.
    pub ops: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Requests that completed with an error.
    pub errors: u64,
    /// Enqueue to dispatch of the last piece.
    pub queue_wait_ns: LatencyHistogram,
    /// Dispatch of the last piece to completion.
    pub device_time_ns: LatencyHistogram,
    /// Submission to completion.
    pub latency_ns: LatencyHistogram,
}

impl ClassStats {
    pub(crate) fn new(name: String, shares: u32) -> Self {
        Self {
            name,
            shares,
            ops: 0,
            bytes: 0,
            errors: 0,
            queue_wait_ns: new_histogram(),
            device_time_ns: new_histogram(),
            latency_ns: new_histogram(),
        }
    }
}

/// Everything the engine counts, at one moment.
#[derive(Clone, Debug)]
pub struct StatsSnapshot {
    /// The backend in use.
    pub backend: crate::backend::BackendKind,
    /// Per device, in the order they were first used.
    pub devices: Vec<DeviceStats>,
    /// Per class, in creation order (removed classes included).
    pub classes: Vec<ClassStats>,
}

impl StatsSnapshot {
    /// The class with this name.
    pub fn class(&self, name: &str) -> Option<&ClassStats> {
        self.classes.iter().find(|class| class.name == name)
    }

    /// The device with this name.
    pub fn device(&self, name: &str) -> Option<&DeviceStats> {
        self.devices.iter().find(|device| device.name == name)
    }
}
