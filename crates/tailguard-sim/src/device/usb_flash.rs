//! The `usb-flash` device model: the seed's failing USB stick.
//!
//! The stick takes one command at a time (USB mass storage has no command
//! queueing): the host FIFO holds the rest, and each command pays
//! `command_overhead_us` after the previous one completed before it starts. A
//! read then moves its bytes at `read_bandwidth_bytes_per_s`, a write at
//! `write_bandwidth_bytes_per_s`. There is no write cache: a write completes when
//! it is stored, and a flush (zero-byte write) completes after its overhead.
//!
//! The stick stalls: each time a random amount between `stall_interval_min_bytes`
//! and `stall_interval_max_bytes` more has been written, the write that crosses
//! the mark takes an extra stall of a random length between `stall_min_us` and
//! `stall_max_us` (its controller erasing and remapping blocks). Nothing completes
//! during a stall, since nothing else is in the device. With the defaults the raw
//! 3 MB/s write rate falls to about 2 MB/s sustained once stalls are counted.
//! All draws come from the seeded generator.
//!
//! The suggested latency target is 500 ms: below the typical stall, any target
//! would be missed by every request queued behind a stall no matter what a
//! scheduler does.
//!
//! | parameter | default | unit | meaning |
//! |---|---|---|---|
//! | `command_overhead_us` | 1000 | µs | per-command protocol time, not overlapped |
//! | `read_bandwidth_bytes_per_s` | 20e6 | B/s | read rate |
//! | `write_bandwidth_bytes_per_s` | 3e6 | B/s | write rate between stalls |
//! | `stall_interval_min_bytes` | 1 MiB | bytes | least written between stalls |
//! | `stall_interval_max_bytes` | 4 MiB | bytes | most written between stalls |
//! | `stall_min_us` | 200000 | µs | shortest stall |
//! | `stall_max_us` | 600000 | µs | longest stall (0 disables stalls) |
//! | `max_request_bytes` | 128 KiB | bytes | profile: the split size a scheduler should use |
//! | `latency_target_us` | 500000 | µs | profile: suggested latency target |
//!
//! Default profile: about 830 read IOPS and 17.4 MB/s read bandwidth; about 335
//! write IOPS and 2.03 MB/s write bandwidth with 128 KiB writes, stalls included.

use super::common::{
    delegate_device_model, micros, seeded, transfer_ns, uniform, Context, Device, Mechanism,
};
use super::{validate_range, DeviceRequest};
use crate::ConfigError;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Direction, Nanos};

/// Parameters of the `usb-flash` model; see the module docs for the table.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsbFlashParameters {
    /// Per-command protocol time, µs.
    pub command_overhead_us: f64,
    /// Read rate, bytes per second.
    pub read_bandwidth_bytes_per_s: f64,
    /// Write rate between stalls, bytes per second.
    pub write_bandwidth_bytes_per_s: f64,
    /// Least bytes written between two stalls.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub stall_interval_min_bytes: u64,
    /// Most bytes written between two stalls.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub stall_interval_max_bytes: u64,
    /// Shortest stall, µs.
    pub stall_min_us: f64,
    /// Longest stall, µs (0 disables stalls).
    pub stall_max_us: f64,
    /// Profile: the largest request a scheduler should send.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub max_request_bytes: u64,
    /// Profile: the suggested latency target, µs.
    pub latency_target_us: u64,
}

impl Default for UsbFlashParameters {
    fn default() -> Self {
        Self {
            command_overhead_us: 1_000.0,
            read_bandwidth_bytes_per_s: 20e6,
            write_bandwidth_bytes_per_s: 3e6,
            stall_interval_min_bytes: 1 << 20,
            stall_interval_max_bytes: 4 << 20,
            stall_min_us: 200_000.0,
            stall_max_us: 600_000.0,
            max_request_bytes: 128 << 10,
            latency_target_us: 500_000,
        }
    }
}

impl UsbFlashParameters {
    /// Refuses a stall interval or a stall whose least value is above its
    /// most (the stall times only while stalls are on, `stall_max_us > 0`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_range(
            "stall_interval_min_bytes",
            self.stall_interval_min_bytes as f64,
            "stall_interval_max_bytes",
            self.stall_interval_max_bytes as f64,
        )?;
        if self.stall_max_us > 0.0 {
            validate_range(
                "stall_min_us",
                self.stall_min_us,
                "stall_max_us",
                self.stall_max_us,
            )?;
        }
        Ok(())
    }

    /// Mean stall time per byte written.
    fn stall_ns_per_byte(&self) -> f64 {
        if self.stall_max_us <= 0.0 {
            return 0.0;
        }
        let interval = (self.stall_interval_min_bytes + self.stall_interval_max_bytes) as f64 / 2.0;
        micros((self.stall_min_us + self.stall_max_us) / 2.0) as f64 / interval.max(1.0)
    }

    /// Mean time of one command of `bytes`, overhead and stalls included.
    fn command_ns(&self, direction: Direction, bytes: u64) -> f64 {
        let overhead = micros(self.command_overhead_us) as f64;
        match direction {
            Direction::Read => {
                overhead + transfer_ns(bytes, self.read_bandwidth_bytes_per_s) as f64
            }
            Direction::Write => {
                overhead
                    + transfer_ns(bytes, self.write_bandwidth_bytes_per_s) as f64
                    + bytes as f64 * self.stall_ns_per_byte()
            }
        }
    }

    fn profile(&self) -> DeviceProfile {
        let largest = self.max_request_bytes;
        let rate = |direction, bytes| 1e9 / self.command_ns(direction, bytes);
        DeviceProfile {
            read_iops: rate(Direction::Read, 4096),
            write_iops: rate(Direction::Write, 4096),
            read_bandwidth: rate(Direction::Read, largest) * largest as f64,
            write_bandwidth: rate(Direction::Write, largest) * largest as f64,
            max_request_bytes: largest,
            latency_target_us: self.latency_target_us,
        }
    }
}

/// Events of the stick: none besides completions.
pub(crate) enum StickEvent {}

/// The stick's mechanism: one command at a time, stalls while writing.
pub(crate) struct Stick {
    parameters: UsbFlashParameters,
    rng: ChaCha8Rng,
    written: u64,
    next_stall_at: u64,
    stalls: u64,
}

impl Stick {
    fn new(parameters: UsbFlashParameters, seed: u64) -> Self {
        let mut rng = seeded(seed);
        let next_stall_at = Self::interval(&parameters, &mut rng);
        Self {
            parameters,
            rng,
            written: 0,
            next_stall_at,
            stalls: 0,
        }
    }

    fn interval(parameters: &UsbFlashParameters, rng: &mut ChaCha8Rng) -> u64 {
        let low = parameters.stall_interval_min_bytes.max(1);
        uniform(rng, low, parameters.stall_interval_max_bytes.max(low))
    }

    /// The stall a write of `bytes` runs into, if it crosses the next mark.
    fn stall_for(&mut self, bytes: u64) -> Nanos {
        self.written += bytes;
        if self.parameters.stall_max_us <= 0.0 || self.written < self.next_stall_at {
            return 0;
        }
        self.next_stall_at = self.written + Self::interval(&self.parameters, &mut self.rng);
        self.stalls += 1;
        let low = micros(self.parameters.stall_min_us);
        let high = micros(self.parameters.stall_max_us);
        uniform(&mut self.rng, low, high.max(low))
    }
}

impl Mechanism for Stick {
    type Event = StickEvent;

    fn eligible(&mut self, context: &mut Context<StickEvent>, now: Nanos, request: DeviceRequest) {
        let bytes = request.length_bytes;
        let service = match request.direction {
            Direction::Read => transfer_ns(bytes, self.parameters.read_bandwidth_bytes_per_s),
            Direction::Write => {
                transfer_ns(bytes, self.parameters.write_bandwidth_bytes_per_s)
                    + self.stall_for(bytes)
            }
        };
        context.complete_at(now + service, request.token);
    }

    fn event(&mut self, _context: &mut Context<StickEvent>, _now: Nanos, event: StickEvent) {
        match event {}
    }
}

/// The `usb-flash` model; see the module docs.
pub struct UsbFlash {
    device: Device<Stick>,
    profile: DeviceProfile,
}

impl UsbFlash {
    /// Builds the model, seeding its generator with `seed`.
    pub fn new(parameters: UsbFlashParameters, seed: u64) -> Self {
        let overhead = micros(parameters.command_overhead_us);
        let profile = parameters.profile();
        Self {
            device: Device::new(Stick::new(parameters, seed), 1, overhead),
            profile,
        }
    }
}

delegate_device_model!(UsbFlash, "usb-flash");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::common::driver::{
        assert_near_profile, closed_loop, every_nth, random_offset, within,
    };
    use crate::device::DeviceModel;
    use rand::SeedableRng;

    #[test]
    fn writes_run_at_about_2_mb_per_s_with_long_stalls() {
        let mut device = UsbFlash::new(UsbFlashParameters::default(), 1);
        let run = closed_loop(&mut device, 32, 2000, 0, |i| {
            (Direction::Write, i as u64 * (128 << 10), 128 << 10)
        });
        let profile = device.profile();
        let stalls = device.device.mechanism().stalls;
        let longest_service = run
            .completions
            .windows(2)
            .map(|pair| pair[1].completed_at - pair[0].completed_at)
            .max()
            .unwrap();
        eprintln!(
            "128 KiB writes: {:.0} B/s vs profile {:.0}, {stalls} stalls, longest gap {} ms",
            run.bytes_per_second,
            profile.write_bandwidth,
            longest_service / 1_000_000
        );
        assert!(within(run.bytes_per_second, 2e6, 0.15));
        assert!(within(run.bytes_per_second, profile.write_bandwidth, 0.1));
        assert!(stalls >= 50);
        assert!(longest_service >= 200_000_000);
    }

    #[test]
    fn small_requests_match_the_profile() {
        let profile = UsbFlashParameters::default().profile();
        for direction in [Direction::Read, Direction::Write] {
            let mut device = UsbFlash::new(UsbFlashParameters::default(), 2);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
            let run = closed_loop(&mut device, 4, 20_000, 100, move |_| {
                (direction, random_offset(&mut rng, 1 << 33), 4096)
            });
            let expected = match direction {
                Direction::Read => profile.read_iops,
                Direction::Write => profile.write_iops,
            };
            let what = format!("{direction:?} 4 KiB per second");
            assert_near_profile(&what, run.ops_per_second, expected);
        }
        let mut device = UsbFlash::new(UsbFlashParameters::default(), 2);
        let run = closed_loop(&mut device, 2, 500, 10, |i| {
            (Direction::Read, i as u64 * (128 << 10), 128 << 10)
        });
        assert!(within(run.bytes_per_second, profile.read_bandwidth, 0.1));
    }

    #[test]
    fn one_command_at_a_time_and_same_seed_same_completions() {
        let run = |seed| {
            let mut device = UsbFlash::new(UsbFlashParameters::default(), seed);
            let run = closed_loop(&mut device, 16, 3000, 0, |i| {
                let direction = every_nth(i, 3, Direction::Read);
                let length = if i % 40 == 0 { 0 } else { 64 << 10 };
                (direction, i as u64 * (64 << 10), length)
            });
            run.completions
        };
        let first = run(4);
        assert_eq!(first, run(4));
        assert_ne!(first, run(5));
        // Serial service: consecutive completions are at least one overhead apart.
        assert!(first
            .windows(2)
            .all(|pair| pair[1].completed_at - pair[0].completed_at >= 1_000_000));
    }
}
