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
//! A [`LatencyHistogram`] holds two views of the same values: percentiles,
//! and exact counts in fixed buckets ([`BUCKET_BOUNDS_NS`]), for exporters
//! whose histograms need fixed bounds. For the percentiles it keeps the values
//! themselves (exact percentiles) for as long as they take less memory than
//! the counts of an HDR histogram of their range would, and past that an HDR
//! histogram with 3 significant digits over 1 ns .. 1 hour, allocated then
//! with the counts the values so far need and growing (auto-resizing) to the
//! largest value recorded. So a class that has done nothing holds nothing,
//! one that has completed a few hundred requests holds those values (8 bytes
//! each), and only a busy one holds a histogram (about 8 KiB of counts per
//! doubling of its range): with thousands of classes, most hold a few
//! kilobytes, never more than a histogram. The HDR type stays private, so
//! the crate can change it without breaking callers.
//!
//! Every type here serialises with serde (a histogram as its count, sum,
//! percentiles and buckets). The structs are `#[non_exhaustive]`: fields are
//! added as the engine counts more, and readers are unaffected.
//!
//! [`crate::Scheduler::stats`] asks the engine for a [`StatsSnapshot`]; the
//! engine answers between two loop iterations, so a snapshot is consistent.

use serde::ser::{Serialize, SerializeStruct, Serializer};
use std::collections::HashMap;
use tailguard_core::histogram::LazyHistogram;

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

/// A histogram of times in nanoseconds: percentiles (exact while it holds
/// the times themselves, see [`LatencyHistogram::is_exact`], else to 3
/// significant digits), the exact count and sum, and exact counts in the
/// fixed buckets of [`BUCKET_BOUNDS_NS`].
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    /// The (clamped) times for the percentiles, min and max.
    percentiles: LazyHistogram,
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
            percentiles: LazyHistogram::new(),
            sum_ns: 0,
            bucket_counts: [0; BUCKET_BOUNDS_NS.len() + 1],
        }
    }

    /// Records one time. Values are clamped to 1 ns .. 1 hour for the
    /// percentiles; the sum and the buckets take the value as it is.
    pub fn record(&mut self, nanoseconds: u64) {
        self.percentiles
            .record(nanoseconds.clamp(1, HISTOGRAM_MAX_NS));
        self.sum_ns = self.sum_ns.saturating_add(nanoseconds);
        let bucket = BUCKET_BOUNDS_NS.partition_point(|&bound| bound < nanoseconds);
        self.bucket_counts[bucket] += 1;
    }

    /// Whether it holds the times themselves, so that its percentiles, min
    /// and max are exact (else they are to 3 significant digits).
    pub fn is_exact(&self) -> bool {
        self.percentiles.is_exact()
    }

    /// How many times were recorded.
    pub fn len(&self) -> u64 {
        self.percentiles.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The exact sum of every recorded time (saturating at `u64::MAX`).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The time at `quantile` (0.0 ..= 1.0): the smallest recorded time with
    /// at least that fraction of the times at or below it, exact while the
    /// histogram [`is_exact`](LatencyHistogram::is_exact), else to 3
    /// significant digits; 0 when empty.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        self.percentiles.value_at_quantile(quantile)
    }

    /// The smallest recorded time (exact, or to 3 significant digits as
    /// [`LatencyHistogram::value_at_quantile`]); 0 when empty.
    pub fn min(&self) -> u64 {
        self.percentiles.min()
    }

    /// The largest recorded time (exact, or to 3 significant digits as
    /// [`LatencyHistogram::value_at_quantile`]); 0 when empty.
    pub fn max(&self) -> u64 {
        self.percentiles.max()
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

    /// The bytes it holds on the heap for its percentiles (the room for its
    /// samples, or its HDR counts; the fixed buckets are inline).
    pub fn heap_bytes(&self) -> usize {
        self.percentiles.heap_bytes()
    }

    /// Adds every time recorded in `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        self.percentiles.add(&other.percentiles);
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
    /// Requests completed that reached the device (a request cancelled
    /// while queued never did).
    pub ops: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Pieces at the device now.
    pub in_flight_pieces: usize,
    /// Cost in flight now (nanoseconds of device time).
    pub in_flight_ns: u64,
    /// The in-flight budget (nanoseconds of device time).
    pub budget_ns: u64,
    /// On a device that seeks (a rotational disk), the device time per class
    /// with a backlog in a round of turns, each class's turn being its
    /// shares' part of the round (nanoseconds); `None` on devices without
    /// seeks, served strictly by virtual time.
    pub slice_ns: Option<u64>,
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
    /// Enqueue to dispatch of the last piece (to the cancel, for a request
    /// cancelled while queued); its sum is the total time queued.
    pub queue_wait_ns: LatencyHistogram,
    /// Dispatch of the last piece to completion, for each request that
    /// reached the device; its sum is the total device time.
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
    /// Per class name, in creation order (removed classes included): a
    /// class removed and added again under its name is one entry, whose
    /// counters and histograms add up both, with the shares and rate limits
    /// of the one added last (the live one), so a name is one series that
    /// only grows in the metrics.
    pub classes: Vec<ClassStats>,
}

/// `classes` (in creation order) with the classes of one name merged into
/// the first of them (see [`StatsSnapshot::classes`]).
pub(crate) fn merged_by_name(classes: &[ClassStats]) -> Vec<ClassStats> {
    let mut merged: Vec<ClassStats> = Vec::with_capacity(classes.len());
    let mut index_of: HashMap<&str, usize> = HashMap::with_capacity(classes.len());
    for class in classes {
        let Some(&index) = index_of.get(class.name.as_str()) else {
            index_of.insert(&class.name, merged.len());
            merged.push(class.clone());
            continue;
        };
        let entry = &mut merged[index];
        entry.shares = class.shares;
        entry.ops += class.ops;
        entry.bytes += class.bytes;
        entry.errors += class.errors;
        entry.queue_wait_ns.add(&class.queue_wait_ns);
        entry.device_time_ns.add(&class.device_time_ns);
        entry.latency_ns.add(&class.latency_ns);
        entry.rate_limit_bytes_per_s = class.rate_limit_bytes_per_s;
        entry.rate_limit_iops = class.rate_limit_iops;
    }
    merged
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

    /// `count` times from a fixed pseudo-random sequence, spread evenly over
    /// the powers of two from 1 µs to about 134 ms.
    fn times_ns(count: usize) -> Vec<u64> {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..count)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let power = 10 + (state >> 33) % 17;
                (1 << power) + (state >> 11) % (1 << power)
            })
            .collect()
    }

    /// The exact time at `quantile` of `sorted`: the smallest with at least
    /// that fraction at or below it.
    fn exact_at(sorted: &[u64], quantile: f64) -> u64 {
        let rank = (quantile * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    const QUANTILES: [f64; 7] = [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

    #[test]
    fn a_class_that_did_a_few_requests_holds_those_few_times() {
        let idle = ClassStats::new("idle".into(), 100);
        let histograms = [&idle.queue_wait_ns, &idle.device_time_ns, &idle.latency_ns];
        assert_eq!(histograms.map(LatencyHistogram::heap_bytes), [0, 0, 0]);
        // A thousand classes that completed 50 requests each, from 1 µs to
        // 134 ms: 8 bytes a time (and the room a `Vec` keeps), not the
        // hundred-odd kilobytes of counts a 3-digit histogram of that range
        // holds.
        let classes: Vec<LatencyHistogram> = (0..1000)
            .map(|_| {
                let mut histogram = LatencyHistogram::new();
                times_ns(50)
                    .into_iter()
                    .for_each(|time| histogram.record(time));
                histogram
            })
            .collect();
        let bytes: usize = classes.iter().map(LatencyHistogram::heap_bytes).sum();
        assert!(bytes / classes.len() <= 512, "{} bytes each", bytes / 1000);
        // Inline: the fixed buckets, the sum and a pointer's worth, not the
        // HDR struct (boxed when there are counts).
        let inline = std::mem::size_of::<LatencyHistogram>();
        assert!(
            inline <= 8 * (BUCKET_BOUNDS_NS.len() + 1) + 32,
            "{inline} bytes"
        );
        // A busy class holds one histogram for its range, samples no more.
        let mut busy = LatencyHistogram::new();
        times_ns(100_000)
            .into_iter()
            .for_each(|time| busy.record(time));
        assert!(busy.heap_bytes() <= 160 << 10, "{}", busy.heap_bytes());
    }

    #[test]
    fn percentiles_are_exact_for_a_few_times_and_within_3_digits_past_them() {
        let mut counted = false;
        for count in [1, 7, 1_000, 4_000, 200_000] {
            let times = times_ns(count);
            let mut histogram = LatencyHistogram::new();
            times.iter().for_each(|&time| histogram.record(time));
            let mut sorted = times.clone();
            sorted.sort_unstable();
            assert_eq!(histogram.len(), count as u64);
            assert_eq!(histogram.sum_ns(), times.iter().sum::<u64>());
            for quantile in QUANTILES {
                let exact = exact_at(&sorted, quantile);
                let reported = histogram.value_at_quantile(quantile);
                if histogram.is_exact() {
                    assert_eq!(reported, exact, "{count} times, quantile {quantile}");
                } else {
                    // An HDR bucket of 3 digits is at most 1/1024 of its
                    // values wide.
                    assert!(
                        reported.abs_diff(exact) <= exact / 1024 + 1,
                        "{count} times, quantile {quantile}: {reported} for {exact}"
                    );
                    counted = true;
                }
            }
        }
        assert!(counted, "the most times were counted, not kept");
    }

    #[test]
    fn adding_samples_and_counts_is_recording_them_all_in_one() {
        let times = times_ns(60_000);
        let mut all = LatencyHistogram::new();
        times.iter().for_each(|&time| all.record(time));
        // Samples into nothing, counts into samples, samples into counts,
        // counts into counts.
        let parts = [10, 40_000, 1_000];
        let mut total = LatencyHistogram::new();
        total.add(&LatencyHistogram::new());
        assert!(total.is_empty());
        let mut from = 0;
        for length in parts.into_iter().chain([times.len() - 41_010]) {
            let mut part = LatencyHistogram::new();
            times[from..from + length]
                .iter()
                .for_each(|&time| part.record(time));
            total.add(&part);
            from += length;
        }
        assert_eq!(from, times.len());
        assert_eq!(total.len(), all.len());
        assert_eq!(total.sum_ns(), all.sum_ns());
        assert_eq!(total.max(), all.max());
        for quantile in QUANTILES {
            assert_eq!(
                total.value_at_quantile(quantile),
                all.value_at_quantile(quantile)
            );
        }
        let mut long = LatencyHistogram::new();
        long.record(3_000_000_000);
        total.add(&long);
        let max = total.max();
        assert!(
            max.abs_diff(3_000_000_000) <= 3_000_000_000 / 1024,
            "{max}: the sum grew to the longer range"
        );
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
