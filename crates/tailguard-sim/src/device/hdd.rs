//! The `hdd` device model: a 7200 rpm disk with NCQ, like the seed's disk.
//!
//! Geometry: the platter turns once every `60 / rpm` seconds (8.33 ms) and the
//! head reads or writes `media_rate_bytes_per_s` while it turns, so a track holds
//! `media_rate × revolution` bytes (1.25 MB). Byte offset `o` lies on track
//! `o / track_bytes` at angle `(o mod track_bytes) / track_bytes`, and the angle
//! under the head follows absolute time: `angle(t) = (t mod revolution) /
//! revolution`. Consecutive tracks continue where the previous one ended, so a
//! long transfer crosses tracks without losing time.
//!
//! Service of a command = seek + rotational wait + transfer. A seek over `d`
//! tracks takes `seek_settle_us + (full_stroke_seek_us − seek_settle_us) ×
//! sqrt(d / tracks)` (zero on the same track); the rotational wait lasts until
//! the command's start angle comes under the head; the transfer moves the bytes at
//! the media rate. A command that starts exactly where the previous one ended and
//! is eligible when it ended starts at once (sequential streaming). One that
//! becomes eligible even a little later has missed its sector and waits almost a
//! full revolution: this is why synchronous sequential 4 KiB writes, each paying
//! `command_overhead_us` after its predecessor completed, run at one per
//! revolution (~120/s), while the same writes queued 32 deep stream at the media
//! rate.
//!
//! Up to `ncq_depth` commands are held; among the eligible ones the head serves
//! the one with the shortest positioning time (seek + rotational wait) next. With
//! `write_cache = false` (the default) a write completes when it is on the
//! platter. With `write_cache = true` a write is acknowledged as soon as it is
//! eligible, if `write_cache_bytes` has room, and destaged later like any other
//! command; otherwise it completes on the platter. A flush (zero-byte write)
//! completes when every write accepted before it is on the platter.
//!
//! | parameter | default | unit | meaning |
//! |---|---|---|---|
//! | `rpm` | 7200 | rev/min | spindle speed |
//! | `media_rate_bytes_per_s` | 150e6 | B/s | transfer rate under the head |
//! | `capacity_bytes` | 1000000000000 | bytes | modelled capacity (sets the track count) |
//! | `seek_settle_us` | 500 | µs | shortest seek (one track) |
//! | `full_stroke_seek_us` | 15000 | µs | seek across all tracks |
//! | `ncq_depth` | 32 | commands | commands the disk holds; more wait in the host FIFO |
//! | `command_overhead_us` | 50 | µs | from entering the disk to eligible for service |
//! | `write_cache` | false | bool | acknowledge writes before they reach the platter |
//! | `write_cache_bytes` | 16 MiB | bytes | write cache size when `write_cache` is on |
//! | `max_request_bytes` | 1 MiB | bytes | profile: the split size a scheduler should use |
//! | `latency_target_us` | 50000 | µs | profile: suggested latency target |
//!
//! The profile's IOPS are the expected random 4 KiB rate at `ncq_depth`: the
//! shortest of `0.7 × ncq_depth` independent positioning times (uniform random
//! track and angle) plus the transfer, integrated numerically (the factor
//! accounts for the queue keeping the candidates it passed over). Bandwidth is
//! the media rate. Default profile: 203 IOPS each way, 150 MB/s, 1 MiB, 50 ms.

use super::common::{delegate_device_model, micros, Context, Device, Mechanism};
use super::DeviceRequest;
use crate::ConfigError;
use serde::Deserialize;
use std::collections::BTreeSet;
use tailguard_core::{DeviceProfile, Direction, Nanos};

/// Parameters of the `hdd` model; see the module docs for the table.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HddParameters {
    /// Spindle speed, revolutions per minute.
    pub rpm: f64,
    /// Transfer rate under the head, bytes per second.
    pub media_rate_bytes_per_s: f64,
    /// Modelled capacity, bytes.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub capacity_bytes: u64,
    /// Shortest (one-track) seek, µs.
    pub seek_settle_us: f64,
    /// Seek across all tracks, µs.
    pub full_stroke_seek_us: f64,
    /// Commands the disk holds (NCQ depth).
    pub ncq_depth: usize,
    /// Microseconds from entering the disk to being eligible for service.
    pub command_overhead_us: f64,
    /// Whether writes are acknowledged before they reach the platter.
    pub write_cache: bool,
    /// Write cache size, bytes (with `write_cache`).
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub write_cache_bytes: u64,
    /// Profile: the largest request a scheduler should send.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub max_request_bytes: u64,
    /// Profile: the suggested latency target, µs.
    pub latency_target_us: u64,
}

impl Default for HddParameters {
    fn default() -> Self {
        Self {
            rpm: 7200.0,
            media_rate_bytes_per_s: 150e6,
            capacity_bytes: 1_000_000_000_000,
            seek_settle_us: 500.0,
            full_stroke_seek_us: 15_000.0,
            ncq_depth: 32,
            command_overhead_us: 50.0,
            write_cache: false,
            write_cache_bytes: 16 << 20,
            max_request_bytes: 1 << 20,
            latency_target_us: 50_000,
        }
    }
}

impl HddParameters {
    /// Refuses what no disk has and the seek curve cannot take: a full-stroke
    /// seek shorter than the one-track seek, which would make a seek over
    /// more tracks take less time (and the curve's slope negative).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.full_stroke_seek_us < self.seek_settle_us {
            return Err(ConfigError::new(
                "full_stroke_seek_us",
                format!(
                    "{} is shorter than seek_settle_us ({}); a seek across all tracks takes at \
                     least as long as a one-track seek, so raise full_stroke_seek_us or lower \
                     seek_settle_us",
                    self.full_stroke_seek_us, self.seek_settle_us
                ),
            ));
        }
        Ok(())
    }
}

/// The disk's geometry and timing, in integers.
#[derive(Clone, Debug)]
struct Geometry {
    revolution: Nanos,
    track_bytes: u64,
    tracks: u64,
    settle: Nanos,
    full_stroke: Nanos,
}

impl Geometry {
    fn new(parameters: &HddParameters) -> Self {
        let revolution = (60e9 / parameters.rpm.max(1.0)).round() as Nanos;
        let track_bytes = (parameters.media_rate_bytes_per_s * revolution as f64 / 1e9)
            .round()
            .max(1.0) as u64;
        Self {
            revolution,
            track_bytes,
            tracks: parameters.capacity_bytes.div_ceil(track_bytes).max(1),
            settle: micros(parameters.seek_settle_us),
            full_stroke: micros(parameters.full_stroke_seek_us),
        }
    }

    fn track_of(&self, offset: u64) -> u64 {
        (offset / self.track_bytes).min(self.tracks - 1)
    }

    /// Where `offset` lies within a revolution, in nanoseconds.
    fn angle_of(&self, offset: u64) -> Nanos {
        let within = u128::from(offset % self.track_bytes);
        (within * u128::from(self.revolution) / u128::from(self.track_bytes)) as Nanos
    }

    fn transfer(&self, bytes: u64) -> Nanos {
        (u128::from(bytes) * u128::from(self.revolution) / u128::from(self.track_bytes)) as Nanos
    }

    fn seek(&self, distance: u64) -> Nanos {
        if distance == 0 {
            return 0;
        }
        let fraction = (distance as f64 / self.tracks as f64).sqrt();
        let span = self.full_stroke.saturating_sub(self.settle);
        self.settle + (span as f64 * fraction).round() as Nanos
    }

    /// Seek plus rotational wait from `track` at time `now` to `offset`.
    fn positioning(&self, now: Nanos, track: u64, offset: u64) -> Nanos {
        let seek = self.seek(self.track_of(offset).abs_diff(track));
        let arrival = (now + seek) % self.revolution;
        let wait = (self.angle_of(offset) + self.revolution - arrival) % self.revolution;
        seek + wait
    }

    /// Expected random 4 KiB operations per second with `depth` commands queued.
    /// The commands left behind after each choice are those that were not the
    /// best, so only about 70% of the queue acts as fresh, independent candidates
    /// (`random_iops_match_the_profile_and_grow_with_depth` checks the estimate
    /// against the simulation).
    fn random_iops(&self, depth: usize) -> f64 {
        let candidates = ((depth as f64 * 0.7).round() as usize).max(1);
        let mean = expected_shortest_positioning(self, candidates);
        1e9 / (mean + self.transfer(4096) as f64)
    }
}

/// E[min of `depth` positioning times], each a seek over |U1 − U2| of the
/// tracks plus a uniform rotational wait, integrated numerically.
fn expected_shortest_positioning(geometry: &Geometry, depth: usize) -> f64 {
    const DISTANCE_STEPS: usize = 200;
    const TIME_STEPS: usize = 400;
    let revolution = geometry.revolution as f64;
    // Seek times for distances at the midpoints of DISTANCE_STEPS bins, weighted
    // by the density 2(1 − u) of |U1 − U2|.
    let seeks: Vec<(f64, f64)> = (0..DISTANCE_STEPS)
        .map(|i| {
            let u = (i as f64 + 0.5) / DISTANCE_STEPS as f64;
            let seek = geometry.seek((u * geometry.tracks as f64).round() as u64) as f64;
            (seek, 2.0 * (1.0 - u) / DISTANCE_STEPS as f64)
        })
        .collect();
    let horizon = geometry.full_stroke as f64 + revolution;
    let step = horizon / TIME_STEPS as f64;
    (0..TIME_STEPS)
        .map(|i| {
            let x = (i as f64 + 0.5) * step;
            let survival: f64 = seeks
                .iter()
                .map(|&(seek, weight)| weight * (1.0 - ((x - seek) / revolution).clamp(0.0, 1.0)))
                .sum();
            survival.powi(depth as i32) * step
        })
        .sum()
}

/// What the head does with an operation when it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// A host command: complete it.
    Host(u64),
    /// A cached write's destage: free its cache space.
    Destage,
}

/// An operation waiting for, or using, the head.
#[derive(Clone, Copy, Debug)]
struct Operation {
    owner: Owner,
    write_sequence: Option<u64>,
    offset: u64,
    bytes: u64,
}

/// Events of the disk.
pub(crate) enum HddEvent {
    /// The head finished its operation.
    HeadDone,
}

/// The disk's mechanism; see the module docs.
pub(crate) struct Disk {
    geometry: Geometry,
    write_cache: bool,
    cache_capacity: u64,
    cached_bytes: u64,
    eligible: Vec<Operation>,
    in_service: Option<Operation>,
    head_track: u64,
    /// Where the last transfer ended and when.
    last_end: Option<(u64, Nanos)>,
    writes_accepted: u64,
    not_durable: BTreeSet<u64>,
    flushes: Vec<(u64, u64)>,
}

impl Disk {
    fn new(parameters: &HddParameters) -> Self {
        Self {
            geometry: Geometry::new(parameters),
            write_cache: parameters.write_cache,
            cache_capacity: parameters.write_cache_bytes,
            cached_bytes: 0,
            eligible: Vec::new(),
            in_service: None,
            head_track: 0,
            last_end: None,
            writes_accepted: 0,
            not_durable: BTreeSet::new(),
            flushes: Vec::new(),
        }
    }

    fn positioning(&self, now: Nanos, operation: &Operation) -> Nanos {
        if self.last_end == Some((operation.offset, now)) {
            return 0;
        }
        self.geometry
            .positioning(now, self.head_track, operation.offset)
    }

    /// Starts the eligible operation with the shortest positioning time.
    fn start_next(&mut self, context: &mut Context<HddEvent>, now: Nanos) {
        if self.in_service.is_some() {
            return;
        }
        let best = self
            .eligible
            .iter()
            .enumerate()
            .min_by_key(|(index, operation)| (self.positioning(now, operation), *index))
            .map(|(index, _)| index);
        let Some(index) = best else {
            return;
        };
        let operation = self.eligible.remove(index);
        let end = now + self.positioning(now, &operation) + self.geometry.transfer(operation.bytes);
        let last_byte = operation.offset + operation.bytes.max(1) - 1;
        self.head_track = self.geometry.track_of(last_byte);
        self.last_end = Some((operation.offset + operation.bytes, end));
        self.in_service = Some(operation);
        context.schedule(end, HddEvent::HeadDone);
    }

    fn head_done(&mut self, context: &mut Context<HddEvent>, now: Nanos) {
        if let Some(operation) = self.in_service.take() {
            match operation.owner {
                Owner::Host(token) => context.complete_at(now, token),
                Owner::Destage => self.cached_bytes -= operation.bytes,
            }
            if let Some(sequence) = operation.write_sequence {
                self.not_durable.remove(&sequence);
                self.release_flushes(context, now);
            }
        }
        self.start_next(context, now);
    }

    fn release_flushes(&mut self, context: &mut Context<HddEvent>, now: Nanos) {
        let oldest = self.not_durable.first().copied().unwrap_or(u64::MAX);
        self.flushes.retain(|&(before, token)| {
            let ready = oldest >= before;
            if ready {
                context.complete_at(now, token);
            }
            !ready
        });
    }

    fn accept_write(
        &mut self,
        context: &mut Context<HddEvent>,
        now: Nanos,
        request: DeviceRequest,
    ) {
        let sequence = self.writes_accepted;
        self.writes_accepted += 1;
        self.not_durable.insert(sequence);
        let cached =
            self.write_cache && self.cached_bytes + request.length_bytes <= self.cache_capacity;
        let owner = if cached {
            self.cached_bytes += request.length_bytes;
            context.complete_at(now, request.token);
            Owner::Destage
        } else {
            Owner::Host(request.token)
        };
        self.eligible.push(Operation {
            owner,
            write_sequence: Some(sequence),
            offset: request.offset_bytes,
            bytes: request.length_bytes,
        });
    }
}

impl Mechanism for Disk {
    type Event = HddEvent;

    fn eligible(&mut self, context: &mut Context<HddEvent>, now: Nanos, request: DeviceRequest) {
        match (request.direction, request.length_bytes) {
            (Direction::Write, 0) => {
                self.flushes.push((self.writes_accepted, request.token));
                self.release_flushes(context, now);
            }
            (Direction::Write, _) => self.accept_write(context, now, request),
            (Direction::Read, _) => self.eligible.push(Operation {
                owner: Owner::Host(request.token),
                write_sequence: None,
                offset: request.offset_bytes,
                bytes: request.length_bytes,
            }),
        }
        self.start_next(context, now);
    }

    fn event(&mut self, context: &mut Context<HddEvent>, now: Nanos, event: HddEvent) {
        match event {
            HddEvent::HeadDone => self.head_done(context, now),
        }
    }
}

/// The `hdd` model; see the module docs.
pub struct Hdd {
    device: Device<Disk>,
    profile: DeviceProfile,
}

impl Hdd {
    /// Builds the model. The disk draws no random numbers: its randomness is the
    /// workload's offsets, so `seed` is unused.
    pub fn new(parameters: HddParameters, _seed: u64) -> Self {
        let disk = Disk::new(&parameters);
        let iops = disk.geometry.random_iops(parameters.ncq_depth);
        let bandwidth = disk.geometry.track_bytes as f64 * 1e9 / disk.geometry.revolution as f64;
        let profile = DeviceProfile {
            read_iops: iops,
            write_iops: iops,
            read_bandwidth: bandwidth,
            write_bandwidth: bandwidth,
            max_request_bytes: parameters.max_request_bytes,
            latency_target_us: parameters.latency_target_us,
        };
        let overhead = micros(parameters.command_overhead_us);
        Self {
            device: Device::new(disk, parameters.ncq_depth, overhead),
            profile,
        }
    }
}

delegate_device_model!(Hdd, "hdd");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::common::driver::{
        assert_near_profile, closed_loop, drain, every_nth, random_offset, within, write,
    };
    use crate::device::DeviceModel;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn random_reads(depth: usize, total: usize) -> (f64, DeviceProfile) {
        let mut device = Hdd::new(HddParameters::default(), 1);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let span = HddParameters::default().capacity_bytes;
        let run = closed_loop(&mut device, depth, total, total / 10, move |_| {
            (Direction::Read, random_offset(&mut rng, span), 4096)
        });
        (run.ops_per_second, device.profile())
    }

    fn sequential_writes(depth: usize, total: usize) -> f64 {
        let mut device = Hdd::new(HddParameters::default(), 1);
        let run = closed_loop(&mut device, depth, total, 10, |i| {
            (Direction::Write, (1 << 30) + i as u64 * 4096, 4096)
        });
        run.ops_per_second
    }

    #[test]
    fn synchronous_sequential_writes_lose_a_revolution_each() {
        let rate = sequential_writes(1, 200);
        eprintln!("QD1 sequential 4 KiB writes: {rate:.1}/s");
        assert!((110.0..=125.0).contains(&rate), "{rate}");
    }

    #[test]
    fn queued_sequential_writes_stream_at_the_media_rate() {
        let rate = sequential_writes(32, 20_000);
        let bytes = rate * 4096.0;
        eprintln!("QD32 sequential 4 KiB writes: {rate:.0}/s = {bytes:.0} B/s");
        assert!(bytes >= 0.9 * 150e6, "{bytes}");
    }

    #[test]
    fn random_iops_match_the_profile_and_grow_with_depth() {
        let (qd1, _) = random_reads(1, 400);
        let (qd32, profile) = random_reads(32, 3000);
        eprintln!(
            "random 4 KiB: QD1 {qd1:.0}/s, QD32 {qd32:.0}/s, profile {:.0}",
            profile.read_iops
        );
        assert!((60.0..=110.0).contains(&qd1), "{qd1}");
        assert!((150.0..=300.0).contains(&qd32), "{qd32}");
        assert!(within(qd32, profile.read_iops, 0.1));
    }

    #[test]
    fn large_sequential_reads_reach_the_profile_bandwidth() {
        let mut device = Hdd::new(HddParameters::default(), 1);
        let run = closed_loop(&mut device, 4, 400, 20, |i| {
            (Direction::Read, i as u64 * (1 << 20), 1 << 20)
        });
        let profile = device.profile();
        assert_near_profile(
            "1 MiB reads, B/s",
            run.bytes_per_second,
            profile.read_bandwidth,
        );
    }

    #[test]
    fn same_seed_same_completions_and_flush_waits_for_writes() {
        let run = |write_cache| {
            let parameters = HddParameters {
                write_cache,
                ..HddParameters::default()
            };
            let mut device = Hdd::new(parameters, 3);
            let mut rng = ChaCha8Rng::seed_from_u64(9);
            closed_loop(&mut device, 40, 3000, 0, move |i| {
                let direction = every_nth(i, 2, Direction::Write);
                let length = if i % 50 == 0 { 0 } else { 4096 };
                (direction, random_offset(&mut rng, 1 << 34), length)
            })
            .completions
        };
        assert_eq!(run(false), run(false));
        assert_eq!(run(true), run(true));
        assert_ne!(run(false), run(true));
    }

    #[test]
    fn write_cache_acknowledges_writes_on_arrival_and_flush_waits() {
        let parameters = HddParameters {
            write_cache: true,
            ..HddParameters::default()
        };
        let mut device = Hdd::new(parameters, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for token in 0..16 {
            let offset = random_offset(&mut rng, 1 << 36);
            device.submit(0, write(token, offset, 4096));
        }
        device.submit(0, write(100, 0, 0));
        let completions = drain(&mut device);
        assert_eq!(completions.len(), 17);
        assert!(completions[..16].iter().all(|c| c.completed_at == 50_000));
        let flush = completions[16];
        assert_eq!(flush.token, 100);
        assert!(
            flush.completed_at > 16 * 2_000_000,
            "{}",
            flush.completed_at
        );
    }
}
