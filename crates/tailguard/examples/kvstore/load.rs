//! The load generator: readers doing random point reads as fast as they
//! complete (closed loop), one writer overwriting random keys, and the
//! compactor running whenever enough segments are sealed, all at once for a
//! fixed time. Reads are timed one by one into a histogram; every value read
//! is checked to belong to its key, so a store that returns the wrong bytes
//! fails the run instead of looking fast.

use crate::store::{LogWriter, Store};
use hdrhistogram::Histogram;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the load does.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// How long the measured phase runs.
    pub duration: Duration,
    /// Reader threads.
    pub readers: usize,
    /// Keys 0..keys exist (preloaded) and are read and overwritten.
    pub keys: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// The writer's pace in bytes per second; 0: as fast as it goes.
    pub write_bytes_per_s: u64,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Reads done.
    pub reads: u64,
    /// Reads per second.
    pub reads_per_s: f64,
    /// Read latency percentiles and maximum, microseconds.
    pub read_p50_us: f64,
    /// 99th percentile.
    pub read_p99_us: f64,
    /// 99.9th percentile.
    pub read_p999_us: f64,
    /// Maximum.
    pub read_max_us: f64,
    /// Bytes the writer published per second.
    pub write_mib_per_s: f64,
    /// Compactions finished during the run.
    pub compactions: u64,
    /// Bytes compaction copied per second.
    pub compaction_mib_per_s: f64,
}

/// A value of `len` bytes for `key`: the key, then a byte pattern of `salt`.
pub fn value_of(key: u64, salt: u64, len: usize) -> Vec<u8> {
    let mut value = vec![(salt % 251) as u8; len.max(8)];
    value[..8].copy_from_slice(&key.to_le_bytes());
    value
}

/// A xorshift generator: enough randomness for picking keys, and no crate.
struct Random(u64);

impl Random {
    fn next_below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Writes every key once and seals the log, so that the run starts with a
/// full store on disk.
pub fn preload(store: &Store, config: &LoadConfig) -> io::Result<()> {
    let mut writer = LogWriter::new(store)?;
    for key in 0..config.keys {
        writer.put(key, &value_of(key, 0, config.value_bytes))?;
    }
    writer.seal()
}

/// Runs the readers, the writer and the compactor for `config.duration`.
pub fn run(store: &Store, config: &LoadConfig) -> io::Result<LoadReport> {
    let stop = AtomicBool::new(false);
    let compactions_before = store.compaction_totals();
    let started = Instant::now();
    let (histograms, published_bytes, elapsed_s) = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..config.readers)
            .map(|index| {
                scope.spawn({
                    let stop = &stop;
                    move || read_loop(store, config, index as u64, stop)
                })
            })
            .collect();
        let writer = scope.spawn(|| write_loop(store, config, &stop));
        let compactor = scope.spawn(|| compact_loop(store, &stop));
        std::thread::sleep(config.duration);
        stop.store(true, Ordering::Relaxed);
        let elapsed_s = started.elapsed().as_secs_f64();
        let histograms: io::Result<Vec<_>> = readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .collect();
        let written = writer.join().unwrap();
        compactor.join().unwrap()?;
        io::Result::Ok((histograms?, written?, elapsed_s))
    })?;
    let mut merged = Histogram::<u64>::new(3).unwrap();
    for histogram in &histograms {
        merged.add(histogram).unwrap();
    }
    let compactions = store.compaction_totals();
    let microseconds = |ns: u64| ns as f64 / 1000.0;
    Ok(LoadReport {
        reads: merged.len(),
        reads_per_s: merged.len() as f64 / elapsed_s,
        read_p50_us: microseconds(merged.value_at_quantile(0.5)),
        read_p99_us: microseconds(merged.value_at_quantile(0.99)),
        read_p999_us: microseconds(merged.value_at_quantile(0.999)),
        read_max_us: microseconds(merged.max()),
        write_mib_per_s: published_bytes as f64 / elapsed_s / (1 << 20) as f64,
        compactions: compactions.runs - compactions_before.runs,
        compaction_mib_per_s: (compactions.copied_bytes - compactions_before.copied_bytes) as f64
            / elapsed_s
            / (1 << 20) as f64,
    })
}

fn read_loop(
    store: &Store,
    config: &LoadConfig,
    seed: u64,
    stop: &AtomicBool,
) -> io::Result<Histogram<u64>> {
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    let mut random = Random(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut value = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let key = random.next_below(config.keys);
        let started = Instant::now();
        let found = store.get(key, &mut value)?;
        histogram
            .record(started.elapsed().as_nanos() as u64)
            .unwrap();
        if !found || value[..8] != key.to_le_bytes() {
            return Err(io::Error::other(format!(
                "key {key}: the store returned the wrong value (found: {found})"
            )));
        }
    }
    Ok(histogram)
}

/// Overwrites random keys until stopped; returns the bytes published.
fn write_loop(store: &Store, config: &LoadConfig, stop: &AtomicBool) -> io::Result<u64> {
    let mut writer = LogWriter::new(store)?;
    let mut random = Random(0x2545_F491_4F6C_DD1D);
    let started = Instant::now();
    let mut written = 0u64;
    let mut salt = 1;
    while !stop.load(Ordering::Relaxed) {
        let key = random.next_below(config.keys);
        writer.put(key, &value_of(key, salt, config.value_bytes))?;
        salt += 1;
        written += config.value_bytes as u64;
        if config.write_bytes_per_s > 0 {
            let due = Duration::from_secs_f64(written as f64 / config.write_bytes_per_s as f64);
            if let Some(early) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(early);
            }
        }
    }
    Ok(writer.published_bytes)
}

fn compact_loop(store: &Store, stop: &AtomicBool) -> io::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        if !store.compact()? {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}
