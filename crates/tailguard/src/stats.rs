//! Statistics: counters per device and per class, latency histograms per class.
//!
//! The engine records every completed request in its class's histograms, split
//! into the three times that matter: **queue wait** (enqueue to the dispatch of
//! the last piece: the scheduler's doing), **device time** (that dispatch to
//! completion: the device's doing) and **latency** (submission to completion:
//! what the application saw). Keeping queue wait and device time apart is what
//! tells a user whether to blame the scheduler's budget or the device.
//!
//! Every counter is cumulative from the scheduler's start (operations, bytes,
//! errors, budget changes, controller decisions, starvation events), and each
//! [`LatencyHistogram`] keeps the exact sum of what it recorded, so the total
//! time queued and the total device time are counters too: a monitoring system
//! takes rates of them ([`crate::metrics`] exports them in the OpenMetrics text
//! format). Gauges (pieces in flight, the budget now) are the value at the
//! snapshot.
//!
//! A [`LatencyHistogram`] holds two views of the same values: an HDR histogram
//! with 3 significant digits over 1 ns .. 1 hour, for percentiles, and exact
//! counts in fixed buckets ([`BUCKET_BOUNDS_NS`]), for exporters whose
//! histograms need fixed bounds. The HDR type stays private, so the crate can
//! change it without breaking callers. The HDR histogram is allocated at the
//! first value recorded and grows (auto-resizes) to the largest value
//! recorded, so a class that has done nothing holds no counts, and an active
//! one only those its range of times needs (a histogram sized for an hour
//! from the start holds a third of a megabyte of them).
//!
//! Every type here serialises with serde (a histogram as its count, sum,
//! percentiles and buckets). The structs are `#[non_exhaustive]`: fields are
//! added as the engine counts more, and readers are unaffected.
//!
//! [`crate::Scheduler::stats`] asks the engine for a [`StatsSnapshot`]; the
//! engine answers between two loop iterations, so a snapshot is consistent.

use hdrhistogram::Histogram;
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// Largest value a histogram holds: one hour in nanoseconds.
const HISTOGRAM_MAX_NS: u64 = 3_600 * 1_000_000_000;

/// The upper bounds (inclusive) of the fixed buckets of every
/// [`LatencyHistogram`], in nanoseconds: 1-2.5-5 steps from 1 µs to 10 s. A
/// last bucket above them holds everything slower.
pub const BUCKET_BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A histogram of times in nanoseconds: percentiles (3 significant digits),
/// the exact count and sum, and exact counts in the fixed buckets of
/// [`BUCKET_BOUNDS_NS`].
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    /// `None` until the first value.
    histogram: Option<Histogram<u64>>,
    sum_ns: u64,
    /// Per bucket of [`BUCKET_BOUNDS_NS`], then one for everything above.
    bucket_counts: [u64; BUCKET_BOUNDS_NS.len() + 1],
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            histogram: None,
            sum_ns: 0,
            bucket_counts: [0; BUCKET_BOUNDS_NS.len() + 1],
        }
    }

    /// Records one time. Values are clamped to 1 ns .. 1 hour for the
    /// percentiles; the sum and the buckets take the value as it is.
    pub fn record(&mut self, nanoseconds: u64) {
        let histogram = self
            .histogram
            .get_or_insert_with(|| Histogram::new(3).expect("3 significant digits are valid"));
        let length = histogram.distinct_values();
        histogram
            .record(nanoseconds.clamp(1, HISTOGRAM_MAX_NS))
            .expect("an auto-resizing histogram takes any value up to an hour");
        // A resize grows the counts as a `Vec` grows (up to twice their
        // length); the clone holds exactly their length. It happens once per
        // doubling of the range.
        if histogram.distinct_values() != length {
            *histogram = histogram.clone();
        }
        self.sum_ns = self.sum_ns.saturating_add(nanoseconds);
        let bucket = BUCKET_BOUNDS_NS.partition_point(|&bound| bound < nanoseconds);
        self.bucket_counts[bucket] += 1;
    }

    /// How many times were recorded.
    pub fn len(&self) -> u64 {
        self.histogram.as_ref().map_or(0, Histogram::len)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The exact sum of every recorded time (saturating at `u64::MAX`).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The time at `quantile` (0.0 ..= 1.0), to 3 significant digits; 0 when
    /// empty.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        self.histogram
            .as_ref()
            .map_or(0, |histogram| histogram.value_at_quantile(quantile))
    }

    /// The smallest recorded time (to 3 significant digits); 0 when empty.
    pub fn min(&self) -> u64 {
        self.histogram.as_ref().map_or(0, Histogram::min)
    }

    /// The largest recorded time (to 3 significant digits); 0 when empty.
    pub fn max(&self) -> u64 {
        self.histogram.as_ref().map_or(0, Histogram::max)
    }

    /// The exact mean (from the exact sum); 0.0 when empty.
    pub fn mean(&self) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        self.sum_ns as f64 / self.len() as f64
    }

    /// The fixed buckets: (upper bound in nanoseconds, inclusive, and the
    /// count of times in the bucket, not cumulative), in increasing order; the
    /// last bucket's bound is `u64::MAX` (everything above the last of
    /// [`BUCKET_BOUNDS_NS`]).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        BUCKET_BOUNDS_NS
            .iter()
            .copied()
            .chain(std::iter::once(u64::MAX))
            .zip(self.bucket_counts.iter().copied())
    }

    /// The bytes it holds on the heap (its HDR counts; the fixed buckets are
    /// inline).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.histogram.as_ref().map_or(0, |histogram| {
            histogram.distinct_values() * std::mem::size_of::<u64>()
        })
    }

    /// Adds every time recorded in `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        match (&mut self.histogram, &other.histogram) {
            (_, None) => {}
            (None, Some(theirs)) => self.histogram = Some(theirs.clone()),
            // Auto-resizing: `add` grows this one to the other's range.
            (Some(mine), Some(theirs)) => {
                let _ = mine.add(theirs);
            }
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        for (mine, theirs) in self.bucket_counts.iter_mut().zip(other.bucket_counts) {
            *mine += theirs;
        }
    }
}

/// One fixed bucket as serialised.
#[derive(serde::Serialize)]
struct BucketJson {
    /// Inclusive upper bound; `null` for the last, unbounded bucket.
    le_ns: Option<u64>,
    count: u64,
}

impl Serialize for LatencyHistogram {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("LatencyHistogram", 10)?;
        state.serialize_field("count", &self.len())?;
        state.serialize_field("sum_ns", &self.sum_ns)?;
        state.serialize_field("min_ns", &self.min())?;
        state.serialize_field("mean_ns", &self.mean())?;
        state.serialize_field("p50_ns", &self.value_at_quantile(0.5))?;
        state.serialize_field("p90_ns", &self.value_at_quantile(0.9))?;
        state.serialize_field("p99_ns", &self.value_at_quantile(0.99))?;
        state.serialize_field("p999_ns", &self.value_at_quantile(0.999))?;
        state.serialize_field("max_ns", &self.max())?;
        let buckets: Vec<BucketJson> = self
            .buckets()
            .map(|(bound, count)| BucketJson {
                le_ns: (bound != u64::MAX).then_some(bound),
                count,
            })
            .collect();
        state.serialize_field("buckets", &buckets)?;
        state.end()
    }
}

pub(crate) fn record(histogram: &mut LatencyHistogram, nanoseconds: u64) {
    histogram.record(nanoseconds);
}

/// A latency controller's decision counters on one device (all zero under
/// [`crate::ControllerChoice::Fixed`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ControllerCounters {
    /// Windows judged (one decision each).
    pub windows: u64,
    /// Decisions that grew the budget.
    pub grows: u64,
    /// Decisions that shrank the budget.
    pub shrinks: u64,
    /// Decisions that left the budget as it was.
    pub holds: u64,
    /// Congested windows (a subset of the shrinks).
    pub congested: u64,
    /// Growth steps held to one additive step by the congestion threshold.
    pub additive_grows: u64,
    /// Starvation events: reads that were late and overtaken by more than a
    /// whole budget of newer work.
    pub starved_reads: u64,
    /// Whether the starvation rule is on now.
    pub starving: bool,
}

impl From<tailguard_core::ControllerStats> for ControllerCounters {
    fn from(stats: tailguard_core::ControllerStats) -> Self {
        Self {
            windows: stats.windows,
            grows: stats.grows,
            shrinks: stats.shrinks,
            holds: stats.holds,
            congested: stats.congested,
            additive_grows: stats.additive_grows,
            starved_reads: stats.starved_reads,
            starving: stats.starving,
        }
    }
}

/// One device's counters.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
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
    pub controller: ControllerCounters,
    /// The profile the dispatcher uses.
    pub profile: tailguard_core::DeviceProfile,
}

/// One class's counters and histograms, over all devices.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
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
    /// Enqueue to dispatch of the last piece; its sum is the total time queued.
    pub queue_wait_ns: LatencyHistogram,
    /// Dispatch of the last piece to completion; its sum is the total device
    /// time.
    pub device_time_ns: LatencyHistogram,
    /// Submission to completion.
    pub latency_ns: LatencyHistogram,
    /// The class's cap in bytes per second now, if any (per device).
    pub rate_limit_bytes_per_s: Option<u64>,
    /// The class's cap in requests per second now, if any (per device).
    pub rate_limit_iops: Option<u64>,
}

impl ClassStats {
    /// A class with nothing counted yet (for tests and reports built by hand;
    /// the engine makes the real ones).
    pub fn new(name: String, shares: u32) -> Self {
        Self {
            name,
            shares,
            ops: 0,
            bytes: 0,
            errors: 0,
            queue_wait_ns: LatencyHistogram::new(),
            device_time_ns: LatencyHistogram::new(),
            latency_ns: LatencyHistogram::new(),
            rate_limit_bytes_per_s: None,
            rate_limit_iops: None,
        }
    }
}

/// Everything the engine counts, at one moment.
#[derive(Clone, Debug, serde::Serialize)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// The backend in use.
    #[serde(serialize_with = "serialize_display")]
    pub backend: crate::backend::BackendKind,
    /// Per device, in the order they were first used.
    pub devices: Vec<DeviceStats>,
    /// Per class, in creation order (removed classes included).
    pub classes: Vec<ClassStats>,
}

fn serialize_display<S: Serializer>(
    value: &impl std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

impl StatsSnapshot {
    /// A snapshot with no device and no class (for tests and reports built by
    /// hand; [`crate::Scheduler::stats`] gives the real ones).
    pub fn new(backend: crate::backend::BackendKind) -> Self {
        Self {
            backend,
            devices: Vec::new(),
            classes: Vec::new(),
        }
    }

    /// The class with this name.
    pub fn class(&self, name: &str) -> Option<&ClassStats> {
        self.classes.iter().find(|class| class.name == name)
    }

    /// The device with this name.
    pub fn device(&self, name: &str) -> Option<&DeviceStats> {
        self.devices.iter().find(|device| device.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_class_holds_no_counts_and_an_active_one_only_its_range() {
        let idle = ClassStats::new("idle".into(), 100);
        let histograms = [&idle.queue_wait_ns, &idle.device_time_ns, &idle.latency_ns];
        assert_eq!(histograms.map(LatencyHistogram::heap_bytes), [0, 0, 0]);
        let mut active = LatencyHistogram::new();
        for latency_ns in (1..=1000).map(|step| step * 500) {
            active.record(latency_ns);
        }
        assert!(active.heap_bytes() <= 96 << 10, "{}", active.heap_bytes());
        let p50 = active.value_at_quantile(0.5);
        assert!(p50.abs_diff(250_000) <= 250, "{p50}: within 0.1%");
        let mut total = LatencyHistogram::new();
        total.add(&LatencyHistogram::new());
        assert!(total.is_empty());
        total.add(&active);
        let mut long = LatencyHistogram::new();
        long.record(3_000_000_000);
        total.add(&long);
        assert_eq!(total.len(), 1001);
        assert_eq!(total.max(), long.max(), "the sum grew to the longer range");
    }

    #[test]
    fn buckets_sum_and_percentiles_agree_with_what_was_recorded() {
        let mut histogram = LatencyHistogram::new();
        let values = [0, 1_000, 1_001, 7_000, 20_000_000_000];
        for value in values {
            histogram.record(value);
        }
        assert_eq!(histogram.len(), 5);
        assert_eq!(histogram.sum_ns(), values.iter().sum::<u64>());
        let buckets: Vec<(u64, u64)> = histogram.buckets().collect();
        assert_eq!(buckets.len(), BUCKET_BOUNDS_NS.len() + 1);
        assert_eq!(buckets[0], (1_000, 2), "0 and 1000 are at most 1 µs");
        assert_eq!(buckets[1], (2_500, 1));
        assert_eq!(buckets[3], (10_000, 1));
        assert_eq!(*buckets.last().unwrap(), (u64::MAX, 1), "above 10 s");
        assert_eq!(buckets.iter().map(|(_, count)| count).sum::<u64>(), 5);
        assert_eq!(histogram.value_at_quantile(0.5), 1_001);

        let mut total = LatencyHistogram::new();
        total.add(&histogram);
        total.add(&histogram);
        assert_eq!(total.len(), 10);
        assert_eq!(total.sum_ns(), 2 * histogram.sum_ns());
        assert_eq!(total.buckets().nth(1), Some((2_500, 2)));
    }

    #[test]
    fn a_histogram_serialises_as_its_summary_and_buckets() {
        let mut histogram = LatencyHistogram::new();
        histogram.record(1_500);
        histogram.record(2_000);
        let json = serde_json::to_value(&histogram).unwrap();
        assert_eq!(json["count"], 2);
        assert_eq!(json["sum_ns"], 3_500);
        // Below 2048 ns the percentiles are exact.
        assert_eq!(json["max_ns"], 2_000);
        assert_eq!(json["buckets"][1]["le_ns"], 2_500);
        assert_eq!(json["buckets"][1]["count"], 2);
        assert!(json["buckets"][BUCKET_BOUNDS_NS.len()]["le_ns"].is_null());
    }
}
