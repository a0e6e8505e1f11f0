//! Latency histograms that cost what they hold.
//!
//! A [`LazyHistogram`] holds nothing until its first value, then the values
//! themselves (exact percentiles) for as long as they take less memory than
//! the counts of an HDR histogram of their range would, and past that an
//! auto-resizing HDR histogram whose counts reach only as far as the largest
//! value recorded. A class that completes a few hundred requests holds a few
//! kilobytes, not the tens or hundreds of kilobytes of counts a range of
//! milliseconds takes. The engine's per-class statistics, the simulator's
//! report and bench's all keep their latencies in it. Plain data: no clock,
//! no I/O.

use hdrhistogram::Histogram;

/// Largest latency the histograms hold: one day, in nanoseconds.
pub const HISTOGRAM_MAX_NS: u64 = 86_400 * 1_000_000_000;

/// Records `value` in an auto-resizing histogram, keeping its counts at the
/// length they need: a resize grows them as a `Vec` grows (up to twice the
/// length), so after one the histogram is replaced by its clone, which holds
/// exactly its length. A histogram resizes once per doubling of its range.
pub fn record_exact(histogram: &mut Histogram<u64>, value: u64) {
    let length = histogram.distinct_values();
    histogram
        .record(value)
        .expect("an auto-resizing histogram takes any value up to u64::MAX / 2");
    if histogram.distinct_values() != length {
        *histogram = histogram.clone();
    }
}

/// A histogram of times in nanoseconds (1 ns to one day) that costs what it
/// holds: nothing until its first value, then the values themselves,
/// exactly, for as long as they take less memory than the counts of an HDR
/// histogram of their range would, and past that an auto-resizing HDR
/// histogram with the counts the largest value recorded needs. Most pairs of
/// a run with thousands of classes complete a few hundred requests or fewer,
/// so they hold those values, a few kilobytes, not the tens or hundreds of
/// kilobytes of counts a range of milliseconds takes; a busy pair holds one
/// histogram, whose percentiles are within its precision: `DIGITS`
/// significant digits (3: 0.1%; 2: 0.8%), a parameter of the type so that a
/// histogram's inline size is its store's alone.
#[derive(Clone, Debug, PartialEq)]
pub struct LazyHistogram<const DIGITS: u8 = 3> {
    store: HistogramStore,
}

/// What a [`LazyHistogram`] holds.
#[derive(Clone, Debug, PartialEq)]
enum HistogramStore {
    /// Every value recorded, unsorted.
    Samples(Vec<u64>),
    /// Counts, once the values would take more memory than they (boxed: a
    /// histogram that never gets there keeps the HDR struct's hundred-odd
    /// bytes out of its owner).
    Counts(Box<Histogram<u64>>),
}

impl<const DIGITS: u8> Default for LazyHistogram<DIGITS> {
    fn default() -> Self {
        Self::new()
    }
}

/// How many counts an auto-resizing HDR histogram of `significant_digits`
/// holds once it covers `max_value` (hdrhistogram's layout: a bucket per
/// doubling of the range, half a bucket's sub-buckets each, plus one).
pub fn hdr_counts_len(significant_digits: u8, max_value: u64) -> usize {
    let single_unit_values = 2 * 10u64.pow(u32::from(significant_digits));
    let sub_bucket_count = single_unit_values.next_power_of_two();
    let mut buckets = 1;
    let mut smallest_untrackable = sub_bucket_count;
    while smallest_untrackable <= max_value {
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    (buckets + 1) * (sub_bucket_count / 2) as usize
}

impl<const DIGITS: u8> LazyHistogram<DIGITS> {
    /// An empty histogram whose counts, once it has them, keep `DIGITS`
    /// (1 ..= 5) significant digits.
    pub const fn new() -> Self {
        const {
            assert!(
                DIGITS >= 1 && DIGITS <= 5,
                "HDR histograms keep 1 to 5 significant digits"
            )
        };
        Self {
            store: HistogramStore::Samples(Vec::new()),
        }
    }

    /// Whether it holds its values themselves (its percentiles are exact).
    pub fn is_exact(&self) -> bool {
        matches!(self.store, HistogramStore::Samples(_))
    }

    /// Records one value, clamped to 1 ns ..= one day. When the samples are
    /// full, they double their room only if twice their number stays within
    /// the counts their range would take; else they become those counts.
    pub fn record(&mut self, nanoseconds: u64) {
        let value = nanoseconds.clamp(1, HISTOGRAM_MAX_NS);
        match &mut self.store {
            HistogramStore::Samples(samples) => {
                if samples.len() == samples.capacity() && !samples.is_empty() {
                    let max_value = samples.iter().copied().max().unwrap_or(0).max(value);
                    if 2 * samples.len() > hdr_counts_len(DIGITS, max_value) {
                        self.count_samples();
                        return self.record(value);
                    }
                    samples.reserve_exact(samples.len());
                }
                samples.push(value);
            }
            HistogramStore::Counts(histogram) => record_exact(histogram, value),
        }
    }

    /// Turns the samples into counts.
    fn count_samples(&mut self) {
        if let HistogramStore::Samples(samples) = &self.store {
            let mut histogram =
                Histogram::new(DIGITS).expect("1 to 5 significant digits are valid");
            for &value in samples {
                record_exact(&mut histogram, value);
            }
            self.store = HistogramStore::Counts(Box::new(histogram));
        }
    }

    /// Adds every value recorded in `other`, as if each had been recorded
    /// here (counts from counts where `other` has them).
    pub fn add(&mut self, other: &Self) {
        match &other.store {
            HistogramStore::Samples(samples) => {
                for &value in samples {
                    self.record(value);
                }
            }
            HistogramStore::Counts(theirs) => {
                if let HistogramStore::Samples(samples) = &self.store {
                    let mut mine = theirs.clone();
                    for &value in samples {
                        record_exact(&mut mine, value);
                    }
                    self.store = HistogramStore::Counts(mine);
                } else if let HistogramStore::Counts(mine) = &mut self.store {
                    // Auto-resizing: `add` grows this one to the other's range.
                    let _ = mine.add(&**theirs);
                }
            }
        }
    }

    /// How many values were recorded.
    pub fn len(&self) -> u64 {
        match &self.store {
            HistogramStore::Samples(samples) => samples.len() as u64,
            HistogramStore::Counts(histogram) => histogram.len(),
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recorded values in increasing order, each with how many times it
    /// was recorded (for counts: each bucket's highest value, within the
    /// precision).
    pub fn iter_recorded(&self) -> Box<dyn Iterator<Item = (u64, u64)> + '_> {
        match &self.store {
            HistogramStore::Samples(samples) => {
                let mut sorted = samples.clone();
                sorted.sort_unstable();
                Box::new(sorted.into_iter().map(|value| (value, 1)))
            }
            HistogramStore::Counts(histogram) => Box::new(
                histogram
                    .iter_recorded()
                    .map(|value| (value.value_iterated_to(), value.count_at_value())),
            ),
        }
    }

    /// The value at `quantile` (0.0 ..= 1.0): the smallest recorded value
    /// with at least that fraction of the values at or below it (exact for
    /// samples, within the precision for counts); 0 when empty.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        match &self.store {
            HistogramStore::Samples(samples) if samples.is_empty() => 0,
            HistogramStore::Samples(samples) => {
                let mut sorted = samples.clone();
                sorted.sort_unstable();
                let rank = (quantile.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
                sorted[rank.clamp(1, sorted.len()) - 1]
            }
            HistogramStore::Counts(histogram) => histogram.value_at_quantile(quantile),
        }
    }

    /// The smallest value recorded; 0 when empty.
    pub fn min(&self) -> u64 {
        match &self.store {
            HistogramStore::Samples(samples) => samples.iter().copied().min().unwrap_or(0),
            HistogramStore::Counts(histogram) => histogram.min(),
        }
    }

    /// The largest value recorded; 0 when empty.
    pub fn max(&self) -> u64 {
        match &self.store {
            HistogramStore::Samples(samples) => samples.iter().copied().max().unwrap_or(0),
            HistogramStore::Counts(histogram) => histogram.max(),
        }
    }

    /// The mean; 0.0 when empty.
    pub fn mean(&self) -> f64 {
        match &self.store {
            HistogramStore::Samples(samples) if samples.is_empty() => 0.0,
            HistogramStore::Samples(samples) => {
                samples.iter().map(|&value| value as f64).sum::<f64>() / samples.len() as f64
            }
            HistogramStore::Counts(histogram) => histogram.mean(),
        }
    }

    /// The population standard deviation; 0.0 when empty.
    pub fn stdev(&self) -> f64 {
        match &self.store {
            HistogramStore::Samples(samples) if samples.is_empty() => 0.0,
            HistogramStore::Samples(samples) => {
                let mean = self.mean();
                let squares: f64 = samples
                    .iter()
                    .map(|&value| (value as f64 - mean).powi(2))
                    .sum();
                (squares / samples.len() as f64).sqrt()
            }
            HistogramStore::Counts(histogram) => histogram.stdev(),
        }
    }

    /// How many 8-byte slots it holds on the heap: the room for its samples,
    /// or its HDR histogram's counts (as hdrhistogram's method of this name
    /// counts them).
    pub fn distinct_values(&self) -> usize {
        match &self.store {
            HistogramStore::Samples(samples) => samples.capacity(),
            HistogramStore::Counts(histogram) => histogram.distinct_values(),
        }
    }

    /// The bytes it holds on the heap: its samples or its counts.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<u64>() * self.distinct_values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` latencies from a fixed pseudo-random sequence, spread over the
    /// powers of two from 1 µs to about 134 ms.
    fn latencies_ns(count: usize) -> Vec<u64> {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
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

    #[test]
    fn a_histogram_is_a_vec_inline_and_its_counts_are_boxed() {
        let inline = std::mem::size_of::<LazyHistogram>();
        assert!(inline <= 32, "{inline} bytes");
    }

    #[test]
    fn percentiles_are_exact_while_kept_and_within_the_precision_once_counted() {
        check_percentiles::<3>(1024);
        check_percentiles::<2>(128);
    }

    /// Checks a histogram of `DIGITS` digits, whose buckets are at most
    /// 1/`width` of their values wide, against exact percentiles.
    fn check_percentiles<const DIGITS: u8>(width: u64) {
        let digits = DIGITS;
        let mut counted = false;
        for count in [1, 5, 300, 3_000, 100_000] {
            let latencies = latencies_ns(count);
            let mut histogram = LazyHistogram::<DIGITS>::new();
            latencies
                .iter()
                .for_each(|&latency| histogram.record(latency));
            let mut sorted = latencies.clone();
            sorted.sort_unstable();
            assert_eq!(histogram.len(), count as u64);
            assert!(histogram.heap_bytes() <= 8 * hdr_counts_len(digits, sorted[count - 1]));
            for quantile in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let rank = (quantile * count as f64).ceil() as usize;
                let exact = sorted[rank.clamp(1, count) - 1];
                let reported = histogram.value_at_quantile(quantile);
                if histogram.is_exact() {
                    assert_eq!(reported, exact, "{digits} digits, {count}, {quantile}");
                } else {
                    // A bucket is at most 1/width of its values wide.
                    assert!(
                        reported.abs_diff(exact) <= exact / width + 1,
                        "{digits} digits, {count}, {quantile}: {reported} for {exact}"
                    );
                    counted = true;
                }
            }
            let mean = latencies.iter().sum::<u64>() as f64 / count as f64;
            assert!((histogram.mean() - mean).abs() <= mean / width as f64 + 1.0);
        }
        assert!(counted, "{digits} digits: the most latencies were counted");
    }
}
