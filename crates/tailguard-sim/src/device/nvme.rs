//! The `nvme` device model: a PCIe NVMe SSD with deep internal parallelism.
//!
//! Commands wait in a host FIFO until one of `queue_depth` submission slots is
//! free and become eligible `command_overhead_us` after entering the device. A
//! controller processes commands one at a time (`controller_us` each). A read is
//! then served by one of `parallel_units` flash units, picked by hashing its
//! 4 KiB-page offset; a unit serves its reads in arrival order, each taking
//! `read_latency_us` plus the length at `unit_read_bandwidth_bytes_per_s` plus a
//! uniform jitter of up to `read_jitter_us`. The data then crosses the PCIe
//! link, which is full duplex: reads and writes have a link each, of
//! `link_bandwidth_bytes_per_s`. Latency grows with depth past saturation
//! because commands queue at the units and the controller.
//!
//! Writes wait for room in a DRAM write cache of `write_cache_bytes` (in arrival
//! order), cross the link and are acknowledged. The cache drains in the
//! background at `flush_bandwidth_bytes_per_s` plus `flush_per_write_us` per
//! write; while it drains, a read may wait up to `program_suspend_us` more.
//! Garbage collection: each time the drain has written a random amount between
//! `gc_interval_min_bytes` and `gc_interval_max_bytes` more, a stall of a random
//! length between `gc_stall_min_us` and `gc_stall_max_us` starts when that write
//! is drained. During the stall the drain stops, no write enters the cache (so
//! writes wait), and reads to `gc_units` consecutive units (at a random first
//! unit) wait for its end. All draws come from the seeded generator. A flush
//! (zero-byte write) completes once every earlier write has been drained.
//!
//! | parameter | default | unit | meaning |
//! |---|---|---|---|
//! | `queue_depth` | 1024 | commands | commands the device holds; more wait in the host FIFO |
//! | `command_overhead_us` | 3 | µs | from entering the device to eligible for service |
//! | `controller_us` | 1 | µs | controller time per command (serial) |
//! | `parallel_units` | 48 | units | independent flash units serving reads |
//! | `read_latency_us` | 70 | µs | fixed unit time of a read |
//! | `read_jitter_us` | 4 | µs | extra unit time, uniform in 0..=this |
//! | `unit_read_bandwidth_bytes_per_s` | 1e9 | B/s | a unit's read rate |
//! | `link_bandwidth_bytes_per_s` | 3e9 | B/s | PCIe rate per direction |
//! | `write_cache_bytes` | 256 MiB | bytes | DRAM write cache |
//! | `flush_bandwidth_bytes_per_s` | 1.8e9 | B/s | cache drain rate to flash |
//! | `flush_per_write_us` | 2.5 | µs | extra drain time per write |
//! | `program_suspend_us` | 10 | µs | a read's extra wait while the cache drains, uniform in 0..=this |
//! | `gc_interval_min_bytes` | 128 MiB | bytes | least drained between GC stalls |
//! | `gc_interval_max_bytes` | 384 MiB | bytes | most drained between GC stalls |
//! | `gc_stall_min_us` | 2000 | µs | shortest GC stall |
//! | `gc_stall_max_us` | 6000 | µs | longest GC stall |
//! | `gc_units` | 8 | units | units a GC stall keeps busy |
//! | `max_request_bytes` | 512 KiB | bytes | profile: the split size a scheduler should use |
//! | `latency_target_us` | 300 | µs | profile: suggested latency target |
//!
//! Default profile: 617k read IOPS (48 units / 77 µs, by mean value analysis at
//! depth 1024), 207k sustained write IOPS, 3 GB/s read bandwidth (the link), about 1.74 GB/s
//! sustained write bandwidth (including GC stalls). A lone 4 KiB read takes about
//! 80 µs.

use super::common::{delegate_device_model, micros, Device, FlashConfig, FlashSsd, GcConfig};
use super::validate_range;
use crate::ConfigError;
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Nanos};

/// Parameters of the `nvme` model; see the module docs for the table.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmeParameters {
    /// Commands the device holds (submission queue depth).
    pub queue_depth: usize,
    /// Microseconds from entering the device to being eligible for service.
    pub command_overhead_us: f64,
    /// Controller time per command (serial), µs.
    pub controller_us: f64,
    /// Flash units serving reads in parallel.
    pub parallel_units: usize,
    /// Fixed unit time of a read, µs.
    pub read_latency_us: f64,
    /// Extra unit time of a read, uniform in 0..=this, µs.
    pub read_jitter_us: f64,
    /// A unit's read rate, bytes per second.
    pub unit_read_bandwidth_bytes_per_s: f64,
    /// PCIe rate per direction, bytes per second.
    pub link_bandwidth_bytes_per_s: f64,
    /// Size of the DRAM write cache, bytes.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub write_cache_bytes: u64,
    /// Rate at which the cache drains to flash, bytes per second.
    pub flush_bandwidth_bytes_per_s: f64,
    /// Extra drain time per write, µs.
    pub flush_per_write_us: f64,
    /// Largest extra wait of a read while the cache drains, µs.
    pub program_suspend_us: f64,
    /// Least bytes drained between two GC stalls.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub gc_interval_min_bytes: u64,
    /// Most bytes drained between two GC stalls.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub gc_interval_max_bytes: u64,
    /// Shortest GC stall, µs.
    pub gc_stall_min_us: f64,
    /// Longest GC stall, µs (0 disables GC stalls).
    pub gc_stall_max_us: f64,
    /// Units a GC stall keeps busy.
    pub gc_units: usize,
    /// Profile: the largest request a scheduler should send.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub max_request_bytes: u64,
    /// Profile: the suggested latency target, µs.
    pub latency_target_us: u64,
}

impl Default for NvmeParameters {
    fn default() -> Self {
        Self {
            queue_depth: 1024,
            command_overhead_us: 3.0,
            controller_us: 1.0,
            parallel_units: 48,
            read_latency_us: 70.0,
            read_jitter_us: 4.0,
            unit_read_bandwidth_bytes_per_s: 1e9,
            link_bandwidth_bytes_per_s: 3e9,
            write_cache_bytes: 256 << 20,
            flush_bandwidth_bytes_per_s: 1.8e9,
            flush_per_write_us: 2.5,
            program_suspend_us: 10.0,
            gc_interval_min_bytes: 128 << 20,
            gc_interval_max_bytes: 384 << 20,
            gc_stall_min_us: 2_000.0,
            gc_stall_max_us: 6_000.0,
            gc_units: 8,
            max_request_bytes: 512 << 10,
            latency_target_us: 300,
        }
    }
}

impl NvmeParameters {
    /// Refuses a GC interval or a GC stall whose least value is above its
    /// most (the stall times only while GC stalls are on,
    /// `gc_stall_max_us > 0`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_range(
            "gc_interval_min_bytes",
            self.gc_interval_min_bytes as f64,
            "gc_interval_max_bytes",
            self.gc_interval_max_bytes as f64,
        )?;
        if self.gc_stall_max_us > 0.0 {
            validate_range(
                "gc_stall_min_us",
                self.gc_stall_min_us,
                "gc_stall_max_us",
                self.gc_stall_max_us,
            )?;
        }
        Ok(())
    }

    fn flash_config(&self) -> FlashConfig {
        let units = self.parallel_units.max(1);
        let gc = (self.gc_stall_max_us > 0.0).then(|| GcConfig {
            interval_bytes: (self.gc_interval_min_bytes, self.gc_interval_max_bytes),
            stall: (micros(self.gc_stall_min_us), micros(self.gc_stall_max_us)),
            units: self.gc_units.min(units),
        });
        FlashConfig {
            controller: micros(self.controller_us),
            units,
            read_latency: micros(self.read_latency_us),
            read_jitter: micros(self.read_jitter_us),
            unit_read_bandwidth: self.unit_read_bandwidth_bytes_per_s,
            link_bandwidth: self.link_bandwidth_bytes_per_s,
            full_duplex: true,
            cache_bytes: self.write_cache_bytes,
            flush_bandwidth: self.flush_bandwidth_bytes_per_s,
            flush_per_write: micros(self.flush_per_write_us),
            program_suspend: micros(self.program_suspend_us),
            gc,
        }
    }

    fn profile(&self) -> DeviceProfile {
        self.flash_config().profile(
            self.queue_depth,
            self.max_request_bytes,
            self.latency_target_us,
        )
    }
}

/// The `nvme` model; see the module docs.
pub struct Nvme {
    device: Device<FlashSsd>,
    profile: DeviceProfile,
}

impl Nvme {
    /// Builds the model, seeding its generator with `seed`.
    pub fn new(parameters: NvmeParameters, seed: u64) -> Self {
        let mechanism = FlashSsd::new(parameters.flash_config(), seed);
        let overhead = micros(parameters.command_overhead_us);
        Self {
            device: Device::new(mechanism, parameters.queue_depth, overhead),
            profile: parameters.profile(),
        }
    }
}

delegate_device_model!(Nvme, "nvme");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::common::driver::{
        assert_near_profile, closed_loop, every_nth, random_offset, within, Run,
    };
    use crate::device::DeviceModel;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tailguard_core::Direction;

    const SPAN: u64 = 1 << 40;

    fn random_run(
        parameters: NvmeParameters,
        direction: Direction,
        depth: usize,
        total: usize,
    ) -> (Run, Nvme) {
        let mut device = Nvme::new(parameters, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let run = closed_loop(&mut device, depth, total, total / 5, move |_| {
            (direction, random_offset(&mut rng, SPAN), 4096)
        });
        (run, device)
    }

    #[test]
    fn a_lone_read_takes_about_80_us() {
        let (run, _) = random_run(NvmeParameters::default(), Direction::Read, 1, 2000);
        let mean = run.mean() / 1e3;
        eprintln!(
            "QD1 read: mean {mean:.1} µs, p99 {} µs",
            run.quantile(0.99) / 1000
        );
        assert!((75.0..=90.0).contains(&mean), "{mean}");
    }

    #[test]
    fn read_iops_at_depth_match_the_profile_and_latency_grows() {
        let (deep, device) = random_run(NvmeParameters::default(), Direction::Read, 1024, 60_000);
        let (shallow, _) = random_run(NvmeParameters::default(), Direction::Read, 32, 20_000);
        let profile = device.profile();
        eprintln!(
            "read IOPS: depth 32 {:.0} (mean {:.0} µs), depth 1024 {:.0} (mean {:.0} µs), profile {:.0}",
            shallow.ops_per_second,
            shallow.mean() / 1e3,
            deep.ops_per_second,
            deep.mean() / 1e3,
            profile.read_iops
        );
        assert!((500e3..=700e3).contains(&profile.read_iops));
        assert!(within(deep.ops_per_second, profile.read_iops, 0.1));
        assert!(deep.mean() > 10.0 * shallow.mean());
    }

    #[test]
    fn sustained_writes_match_the_profile_and_gc_stalls_happen() {
        let parameters = NvmeParameters {
            write_cache_bytes: 16 << 20,
            gc_interval_min_bytes: 16 << 20,
            gc_interval_max_bytes: 48 << 20,
            ..NvmeParameters::default()
        };
        let profile = parameters.profile();
        let mut device = Nvme::new(parameters.clone(), 2);
        let run = closed_loop(&mut device, 64, 6000, 1000, |i| {
            (Direction::Write, i as u64 * (512 << 10), 512 << 10)
        });
        let stalls = device.device.mechanism().gc_stalls();
        eprintln!(
            "write bandwidth {:.0} vs profile {:.0}, {stalls} GC stalls, p99.9 {} µs",
            run.bytes_per_second,
            profile.write_bandwidth,
            run.quantile(0.999) / 1000
        );
        assert!(within(run.bytes_per_second, profile.write_bandwidth, 0.1));
        assert!(stalls >= 50);
        let (writes, _) = random_run(parameters, Direction::Write, 64, 40_000);
        assert_near_profile("write IOPS", writes.ops_per_second, profile.write_iops);
    }

    #[test]
    fn read_bandwidth_matches_the_profile() {
        let mut device = Nvme::new(NvmeParameters::default(), 3);
        let run = closed_loop(&mut device, 64, 4000, 500, |i| {
            (Direction::Read, i as u64 * (512 << 10), 512 << 10)
        });
        let profile = device.profile();
        assert_near_profile(
            "read bandwidth",
            run.bytes_per_second,
            profile.read_bandwidth,
        );
    }

    #[test]
    fn same_seed_same_completions() {
        let run = |seed| {
            let parameters = NvmeParameters {
                write_cache_bytes: 4 << 20,
                gc_interval_min_bytes: 2 << 20,
                gc_interval_max_bytes: 8 << 20,
                ..NvmeParameters::default()
            };
            let mut device = Nvme::new(parameters, seed);
            let mut rng = ChaCha8Rng::seed_from_u64(8);
            closed_loop(&mut device, 128, 10_000, 0, move |i| {
                let direction = every_nth(i, 2, Direction::Write);
                let length = match i % 97 {
                    0 => 0,
                    1..=10 => 256 << 10,
                    _ => 4096,
                };
                (direction, random_offset(&mut rng, SPAN), length)
            })
            .completions
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
