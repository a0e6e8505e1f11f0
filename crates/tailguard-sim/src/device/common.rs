//! Machinery the device models share.
//!
//! Every model is a `Mechanism` run by a `Device`: the device owns the
//! host-side FIFO, the device's command slots (NCQ depth, NVMe queue depth, one
//! for a USB stick), the per-command overhead and a deterministic event queue.
//! A command submitted while a slot is free enters the device at once; otherwise
//! it waits in the host FIFO and enters when a command completes. Either way it
//! becomes *eligible* for service `command_overhead` after it entered the device,
//! so commands already queued inside the device overlap their overhead with the
//! service of earlier ones, while a command submitted only when its predecessor
//! completed pays the overhead in full.
//!
//! Events at equal times run in the order they were scheduled (a sequence number
//! breaks ties), so the same seed and the same calls always give the same
//! completions.
//!
//! The module also holds `FlashSsd`, the flash mechanism behind both `sata-ssd`
//! and `nvme`: parallel flash units, a data link, and a DRAM write cache drained
//! in the background, with optional garbage-collection stalls.

use super::{DeviceCompletion, DeviceRequest};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use tailguard_core::request::NANOS_PER_SECOND;
use tailguard_core::{DeviceProfile, Nanos};

/// Nanoseconds in `microseconds` (fractions are rounded).
pub(crate) fn micros(microseconds: f64) -> Nanos {
    (microseconds * 1_000.0).round().max(0.0) as Nanos
}

/// Nanoseconds to move `bytes` at `bytes_per_second`.
pub(crate) fn transfer_ns(bytes: u64, bytes_per_second: f64) -> Nanos {
    (bytes as f64 * NANOS_PER_SECOND as f64 / bytes_per_second).round() as Nanos
}

/// A seeded generator; all model randomness comes from one of these.
pub(crate) fn seeded(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A uniform draw in `low..=high` (or `low` when the range is empty).
pub(crate) fn uniform(rng: &mut ChaCha8Rng, low: u64, high: u64) -> u64 {
    if high <= low {
        low
    } else {
        rng.random_range(low..=high)
    }
}

/// A fixed 64-bit mixer (splitmix64), used to spread offsets over flash units.
pub(crate) fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Something that happens inside a device at a given time.
pub(crate) enum Event<E> {
    /// A command's overhead has passed; the mechanism may serve it.
    Eligible(DeviceRequest),
    /// A command finishes: report it and free its slot.
    Complete(u64),
    /// A mechanism-specific event.
    Model(E),
}

struct Scheduled<E> {
    at: Nanos,
    sequence: u64,
    event: Event<E>,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.sequence).cmp(&(other.at, other.sequence))
    }
}

/// The device's bookkeeping that mechanisms act on: events, slots, completions.
pub(crate) struct Context<E> {
    events: BinaryHeap<Reverse<Scheduled<E>>>,
    sequence: u64,
    host_fifo: VecDeque<DeviceRequest>,
    slots: usize,
    inside: usize,
    overhead: Nanos,
    done: VecDeque<DeviceCompletion>,
}

impl<E> Context<E> {
    fn new(slots: usize, overhead: Nanos) -> Self {
        Self {
            events: BinaryHeap::new(),
            sequence: 0,
            host_fifo: VecDeque::new(),
            slots: slots.max(1),
            inside: 0,
            overhead,
            done: VecDeque::new(),
        }
    }

    fn push(&mut self, at: Nanos, event: Event<E>) {
        self.sequence += 1;
        let sequence = self.sequence;
        self.events.push(Reverse(Scheduled {
            at,
            sequence,
            event,
        }));
    }

    /// Schedules a mechanism event.
    pub(crate) fn schedule(&mut self, at: Nanos, event: E) {
        self.push(at, Event::Model(event));
    }

    /// Schedules the completion of `token` at `at` (not before the current time).
    pub(crate) fn complete_at(&mut self, at: Nanos, token: u64) {
        self.push(at, Event::Complete(token));
    }

    /// A command enters the device at `now`, or waits in the host FIFO.
    fn accept(&mut self, now: Nanos, request: DeviceRequest) {
        if self.inside < self.slots {
            self.inside += 1;
            self.push(now + self.overhead, Event::Eligible(request));
        } else {
            self.host_fifo.push_back(request);
        }
    }

    /// Reports `token` finished at `now` and lets the next host command in.
    fn finish(&mut self, now: Nanos, token: u64) {
        self.done.push_back(DeviceCompletion {
            token,
            completed_at: now,
        });
        self.inside -= 1;
        if let Some(next) = self.host_fifo.pop_front() {
            self.accept(now, next);
        }
    }
}

/// The part of a model that decides when commands finish.
pub(crate) trait Mechanism {
    /// The mechanism's own events.
    type Event;
    /// `request` became eligible for service at `now`.
    fn eligible(&mut self, context: &mut Context<Self::Event>, now: Nanos, request: DeviceRequest);
    /// One of the mechanism's events happens at `now`.
    fn event(&mut self, context: &mut Context<Self::Event>, now: Nanos, event: Self::Event);
}

/// A mechanism with its host FIFO, command slots and event queue.
pub(crate) struct Device<M: Mechanism> {
    context: Context<M::Event>,
    mechanism: M,
}

impl<M: Mechanism> Device<M> {
    /// A device with `slots` internal command slots and a per-command overhead.
    pub(crate) fn new(mechanism: M, slots: usize, overhead: Nanos) -> Self {
        Self {
            context: Context::new(slots, overhead),
            mechanism,
        }
    }

    /// The mechanism, for inspection.
    #[cfg(test)]
    pub(crate) fn mechanism(&self) -> &M {
        &self.mechanism
    }

    fn run_until(&mut self, now: Nanos) {
        while let Some(Reverse(next)) = self.context.events.peek() {
            if next.at > now {
                break;
            }
            let Some(Reverse(Scheduled { at, event, .. })) = self.context.events.pop() else {
                break;
            };
            match event {
                Event::Eligible(request) => self.mechanism.eligible(&mut self.context, at, request),
                Event::Complete(token) => self.context.finish(at, token),
                Event::Model(event) => self.mechanism.event(&mut self.context, at, event),
            }
        }
    }

    /// See [`DeviceModel::submit`](super::DeviceModel::submit).
    pub(crate) fn submit(&mut self, now: Nanos, request: DeviceRequest) {
        self.run_until(now);
        self.context.accept(now, request);
    }

    /// See [`DeviceModel::next_event_at`](super::DeviceModel::next_event_at).
    pub(crate) fn next_event_at(&self) -> Option<Nanos> {
        let reported = self.context.done.front().map(|done| done.completed_at);
        let internal = self.context.events.peek().map(|Reverse(next)| next.at);
        match (reported, internal) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// See [`DeviceModel::advance`](super::DeviceModel::advance).
    pub(crate) fn advance(&mut self, now: Nanos, completions: &mut Vec<DeviceCompletion>) {
        self.run_until(now);
        completions.extend(self.context.done.drain(..));
    }

    /// See [`DeviceModel::outstanding`](super::DeviceModel::outstanding).
    pub(crate) fn outstanding(&self) -> usize {
        self.context.host_fifo.len() + self.context.inside
    }
}

/// Implements [`DeviceModel`](super::DeviceModel) for a struct with fields
/// `device: Device<_>` and `profile: DeviceProfile`.
macro_rules! delegate_device_model {
    ($model:ty, $name:literal) => {
        impl $crate::device::DeviceModel for $model {
            fn model_name(&self) -> &'static str {
                $name
            }
            fn submit(&mut self, now: Nanos, request: $crate::device::DeviceRequest) {
                self.device.submit(now, request);
            }
            fn next_event_at(&self) -> Option<Nanos> {
                self.device.next_event_at()
            }
            fn advance(
                &mut self,
                now: Nanos,
                completions: &mut Vec<$crate::device::DeviceCompletion>,
            ) {
                self.device.advance(now, completions);
            }
            fn profile(&self) -> DeviceProfile {
                self.profile.clone()
            }
            fn outstanding(&self) -> usize {
                self.device.outstanding()
            }
        }
    };
}
pub(crate) use delegate_device_model;

/// Garbage-collection settings of a [`FlashSsd`].
#[derive(Clone, Debug)]
pub(crate) struct GcConfig {
    /// Bytes flushed between stalls: drawn uniformly in this range.
    pub interval_bytes: (u64, u64),
    /// Stall length, drawn uniformly in this range.
    pub stall: (Nanos, Nanos),
    /// Flash units a stall keeps busy (a contiguous run, at a random start).
    pub units: usize,
}

/// Settings of a [`FlashSsd`]; see `sata_ssd.rs` and `nvme.rs` for meanings.
#[derive(Clone, Debug)]
pub(crate) struct FlashConfig {
    pub controller: Nanos,
    pub units: usize,
    pub read_latency: Nanos,
    pub read_jitter: Nanos,
    pub unit_read_bandwidth: f64,
    pub link_bandwidth: f64,
    pub full_duplex: bool,
    pub cache_bytes: u64,
    pub flush_bandwidth: f64,
    pub flush_per_write: Nanos,
    pub program_suspend: Nanos,
    pub gc: Option<GcConfig>,
}

impl FlashConfig {
    /// Mean time a unit spends reading `bytes`.
    fn unit_read_ns(&self, bytes: u64) -> f64 {
        self.read_latency as f64
            + transfer_ns(bytes, self.unit_read_bandwidth) as f64
            + self.read_jitter as f64 / 2.0
    }

    /// Mean flush time per byte lost to garbage collection.
    fn gc_ns_per_byte(&self) -> f64 {
        self.gc.as_ref().map_or(0.0, |gc| {
            let interval = (gc.interval_bytes.0 + gc.interval_bytes.1) as f64 / 2.0;
            let stall = (gc.stall.0 + gc.stall.1) as f64 / 2.0;
            stall / interval.max(1.0)
        })
    }

    /// Mean sustained (cache-full) flush time of one write of `bytes`.
    fn flush_ns(&self, bytes: u64) -> f64 {
        transfer_ns(bytes, self.flush_bandwidth) as f64
            + self.flush_per_write as f64
            + bytes as f64 * self.gc_ns_per_byte()
    }

    /// Commands per second the controller processes.
    fn controller_iops(&self) -> f64 {
        1e9 / (self.controller.max(1) as f64)
    }

    /// Random 4 KiB reads per second with `depth` commands in the device.
    pub(crate) fn read_iops(&self, depth: usize) -> f64 {
        let service = self.unit_read_ns(4096);
        let elsewhere = self.controller as f64 + transfer_ns(4096, self.link_bandwidth) as f64;
        let units = closed_network_throughput(depth, self.units, service, elsewhere);
        units
            .min(self.controller_iops())
            .min(self.link_bandwidth / 4096.0)
    }

    /// Streaming read bandwidth with `bytes` requests.
    pub(crate) fn read_bandwidth(&self, bytes: u64) -> f64 {
        let units = self.units as f64 * bytes as f64 * 1e9 / self.unit_read_ns(bytes);
        units.min(self.link_bandwidth)
    }

    /// Sustained random 4 KiB writes per second.
    pub(crate) fn write_iops(&self) -> f64 {
        (1e9 / self.flush_ns(4096))
            .min(self.link_bandwidth / 4096.0)
            .min(self.controller_iops())
    }

    /// Sustained write bandwidth with `bytes` requests.
    pub(crate) fn write_bandwidth(&self, bytes: u64) -> f64 {
        (bytes as f64 * 1e9 / self.flush_ns(bytes)).min(self.link_bandwidth)
    }

    /// The profile of a flash device holding `depth` commands, whose scheduler
    /// should send requests of at most `max_request_bytes` and aim at
    /// `latency_target_us`.
    pub(crate) fn profile(
        &self,
        depth: usize,
        max_request_bytes: u64,
        latency_target_us: u64,
    ) -> DeviceProfile {
        DeviceProfile {
            read_iops: self.read_iops(depth),
            write_iops: self.write_iops(),
            read_bandwidth: self.read_bandwidth(max_request_bytes),
            write_bandwidth: self.write_bandwidth(max_request_bytes),
            max_request_bytes,
            latency_target_us,
        }
    }
}

/// Throughput (per second) of `customers` commands cycling through `stations`
/// identical flash units (one picked at random per visit, mean service
/// `service_ns`, nearly constant) and a delay of `elsewhere_ns` outside them:
/// mean value analysis, with the residual service of a nearly constant service
/// time taken as half of it.
pub(crate) fn closed_network_throughput(
    customers: usize,
    stations: usize,
    service_ns: f64,
    elsewhere_ns: f64,
) -> f64 {
    let stations = stations.max(1) as f64;
    let (mut queue, mut utilization, mut throughput) = (0.0, 0.0, 0.0);
    for customer in 1..=customers.max(1) {
        let response = service_ns * (1.0 + queue) - utilization * service_ns / 2.0;
        throughput = customer as f64 / (response + elsewhere_ns);
        queue = throughput * response / stations;
        utilization = throughput * service_ns / stations;
    }
    throughput * 1e9
}

/// A data transfer waiting for, or using, a link.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    token: u64,
    bytes: u64,
    write: bool,
}

/// A data link (SATA, PCIe). Each direction has a FIFO; when both have work the
/// link shares its time equally between them (the direction that has used less
/// link time goes next, and a direction that was idle cannot claim the time it
/// did not use), so a read waits for at most the transfer in progress and the
/// reads ahead of it, never for a queue of large writes.
#[derive(Default)]
struct Link {
    busy: bool,
    waiting: [VecDeque<Transfer>; 2],
    used: [Nanos; 2],
}

impl Link {
    fn push(&mut self, transfer: Transfer) {
        let direction = usize::from(transfer.write);
        if self.waiting[direction].is_empty() {
            self.used[direction] = self.used[direction].max(self.used[1 - direction]);
        }
        self.waiting[direction].push_back(transfer);
    }

    fn pick(&mut self, bandwidth: f64) -> Option<Transfer> {
        let direction = match (self.waiting[0].is_empty(), self.waiting[1].is_empty()) {
            (true, true) => return None,
            (false, true) => 0,
            (true, false) => 1,
            (false, false) => usize::from(self.used[1] < self.used[0]),
        };
        let transfer = self.waiting[direction].pop_front()?;
        self.used[direction] += transfer_ns(transfer.bytes, bandwidth).max(1);
        Some(transfer)
    }
}

/// The DRAM write cache: FIFO items draining to flash in the background.
struct WriteCache {
    capacity: u64,
    /// Bytes given space but not yet transferred.
    reserved: u64,
    /// (durable at, bytes) in flush order.
    items: VecDeque<(Nanos, u64)>,
    item_bytes: u64,
    last_durable: Nanos,
    /// The flusher does nothing before this time (a GC stall).
    blocked_until: Nanos,
}

impl WriteCache {
    fn prune(&mut self, now: Nanos) {
        while let Some(&(durable, bytes)) = self.items.front() {
            if durable > now {
                break;
            }
            self.items.pop_front();
            self.item_bytes -= bytes;
        }
    }

    /// When `bytes` more fit, or `None` when only writes not yet transferred
    /// could make room.
    fn space_at(&self, now: Nanos, bytes: u64) -> Option<Nanos> {
        let wanted = self.reserved + self.item_bytes + bytes.min(self.capacity);
        let Some(mut excess) = wanted.checked_sub(self.capacity).filter(|&e| e > 0) else {
            return Some(now);
        };
        for &(durable, item) in &self.items {
            excess = excess.saturating_sub(item);
            if excess == 0 {
                return Some(durable.max(now));
            }
        }
        None
    }

    fn flushing_at(&self, at: Nanos) -> bool {
        !self.items.is_empty() && self.last_durable > at
    }
}

/// A garbage-collection stall: the flusher and `units` flash units are busy.
#[derive(Clone, Copy, Debug)]
struct GcWindow {
    start: Nanos,
    end: Nanos,
    first_unit: usize,
}

struct GcState {
    config: GcConfig,
    flushed: u64,
    next_at: u64,
    stalls: u64,
    windows: VecDeque<GcWindow>,
}

/// Events of a [`FlashSsd`].
pub(crate) enum FlashEvent {
    /// The controller processed a command; it goes to a unit or the cache.
    Processed(DeviceRequest),
    /// A unit finished reading; the data may now cross the link.
    ReadReady { token: u64, bytes: u64 },
    /// The link finished its transfer.
    LinkDone(usize),
    /// The write cache may have room for the waiting write.
    WriteWake,
}

/// A write (or flush, `bytes == 0`) waiting for cache space.
struct WaitingWrite {
    token: u64,
    bytes: u64,
}

/// The flash mechanism of `sata-ssd` and `nvme`; see the module docs.
pub(crate) struct FlashSsd {
    config: FlashConfig,
    rng: ChaCha8Rng,
    controller_free: Nanos,
    unit_free: Vec<Nanos>,
    links: [Link; 2],
    in_service: [Option<Transfer>; 2],
    writes: VecDeque<WaitingWrite>,
    wake_at: Option<Nanos>,
    cache: WriteCache,
    reserved_writes: u64,
    committed_writes: u64,
    flushes: Vec<(u64, u64)>,
    gc: Option<GcState>,
}

impl FlashSsd {
    /// A mechanism with `config`, seeded with `seed`.
    pub(crate) fn new(config: FlashConfig, seed: u64) -> Self {
        let mut rng = seeded(seed);
        let gc = config.gc.clone().map(|gc| GcState {
            next_at: uniform(&mut rng, gc.interval_bytes.0, gc.interval_bytes.1),
            config: gc,
            flushed: 0,
            stalls: 0,
            windows: VecDeque::new(),
        });
        Self {
            controller_free: 0,
            unit_free: vec![0; config.units.max(1)],
            cache: WriteCache {
                capacity: config.cache_bytes.max(1),
                reserved: 0,
                items: VecDeque::new(),
                item_bytes: 0,
                last_durable: 0,
                blocked_until: 0,
            },
            config,
            rng,
            links: Default::default(),
            in_service: [None, None],
            writes: VecDeque::new(),
            wake_at: None,
            reserved_writes: 0,
            committed_writes: 0,
            flushes: Vec::new(),
            gc,
        }
    }

    /// Garbage-collection stalls started so far (for tests).
    #[cfg(test)]
    pub(crate) fn gc_stalls(&self) -> u64 {
        self.gc.as_ref().map_or(0, |gc| gc.stalls)
    }

    fn unit_of(&self, offset: u64) -> usize {
        (mix(offset / 4096) % self.unit_free.len() as u64) as usize
    }

    fn link_of(&self, write: bool) -> usize {
        usize::from(write && self.config.full_duplex)
    }

    /// Pushes `start` past any GC stall that keeps `unit` busy during the read.
    fn after_gc(&self, unit: usize, mut start: Nanos, service: Nanos) -> Nanos {
        let Some(gc) = &self.gc else {
            return start;
        };
        let units = self.unit_free.len();
        for window in &gc.windows {
            let hit = (unit + units - window.first_unit) % units < gc.config.units;
            if hit && start < window.end && start + service > window.start {
                start = window.end;
            }
        }
        start
    }

    fn start_read(
        &mut self,
        context: &mut Context<FlashEvent>,
        now: Nanos,
        request: DeviceRequest,
    ) {
        let unit = self.unit_of(request.offset_bytes);
        let jitter = uniform(&mut self.rng, 0, self.config.read_jitter);
        let service = self.config.read_latency
            + transfer_ns(request.length_bytes, self.config.unit_read_bandwidth)
            + jitter;
        let mut start = self.after_gc(unit, now.max(self.unit_free[unit]), service);
        if self.cache.flushing_at(start) {
            start += uniform(&mut self.rng, 0, self.config.program_suspend);
        }
        let done = start + service;
        self.unit_free[unit] = done;
        context.schedule(
            done,
            FlashEvent::ReadReady {
                token: request.token,
                bytes: request.length_bytes,
            },
        );
    }

    fn enqueue_transfer(
        &mut self,
        context: &mut Context<FlashEvent>,
        now: Nanos,
        transfer: Transfer,
    ) {
        let link = self.link_of(transfer.write);
        self.links[link].push(transfer);
        if !self.links[link].busy {
            self.start_transfer(context, now, link);
        }
    }

    fn start_transfer(&mut self, context: &mut Context<FlashEvent>, now: Nanos, link: usize) {
        let Some(transfer) = self.links[link].pick(self.config.link_bandwidth) else {
            return;
        };
        self.links[link].busy = true;
        let end = now + transfer_ns(transfer.bytes, self.config.link_bandwidth);
        self.in_service[link] = Some(transfer);
        context.schedule(end, FlashEvent::LinkDone(link));
        if transfer.write {
            self.commit_write(context, end, transfer.bytes);
        }
    }

    fn finish_transfer(&mut self, context: &mut Context<FlashEvent>, now: Nanos, link: usize) {
        self.links[link].busy = false;
        if let Some(transfer) = self.in_service[link].take() {
            context.complete_at(now, transfer.token);
        }
        self.start_transfer(context, now, link);
    }

    /// A write's data is in the cache at `acknowledged`: queue it for flushing.
    fn commit_write(&mut self, context: &mut Context<FlashEvent>, acknowledged: Nanos, bytes: u64) {
        let start = acknowledged
            .max(self.cache.last_durable)
            .max(self.cache.blocked_until);
        let durable =
            start + transfer_ns(bytes, self.config.flush_bandwidth) + self.config.flush_per_write;
        self.cache.reserved -= bytes;
        self.cache.items.push_back((durable, bytes));
        self.cache.item_bytes += bytes;
        self.cache.last_durable = durable;
        self.committed_writes += 1;
        self.count_gc(durable, bytes);
        self.release_flushes(context, acknowledged);
    }

    fn count_gc(&mut self, durable: Nanos, bytes: u64) {
        let units = self.unit_free.len();
        let Some(gc) = &mut self.gc else {
            return;
        };
        gc.flushed += bytes;
        if gc.flushed < gc.next_at {
            return;
        }
        let (low, high) = gc.config.interval_bytes;
        gc.next_at = gc.flushed + uniform(&mut self.rng, low.max(1), high);
        let stall = uniform(&mut self.rng, gc.config.stall.0, gc.config.stall.1);
        let window = GcWindow {
            start: durable,
            end: durable + stall,
            first_unit: uniform(&mut self.rng, 0, units as u64 - 1) as usize,
        };
        gc.windows.push_back(window);
        gc.stalls += 1;
        self.cache.blocked_until = window.end;
    }

    fn release_flushes(&mut self, context: &mut Context<FlashEvent>, now: Nanos) {
        let committed = self.committed_writes;
        let durable = self.cache.last_durable.max(now);
        self.flushes.retain(|&(needed, token)| {
            let ready = committed >= needed;
            if ready {
                context.complete_at(durable, token);
            }
            !ready
        });
    }

    /// The end of a GC stall under way at `now`, if any.
    fn gc_stall_until(&mut self, now: Nanos) -> Option<Nanos> {
        let gc = self.gc.as_mut()?;
        while gc.windows.front().is_some_and(|w| w.end <= now) {
            gc.windows.pop_front();
        }
        gc.windows
            .iter()
            .find(|w| w.start <= now && now < w.end)
            .map(|w| w.end)
    }

    /// Moves waiting writes into the cache (and onto the link) while there is room.
    fn pump_writes(&mut self, context: &mut Context<FlashEvent>, now: Nanos) {
        self.cache.prune(now);
        while let Some(front) = self.writes.front() {
            let (token, bytes) = (front.token, front.bytes);
            if bytes == 0 {
                self.writes.pop_front();
                self.flushes.push((self.reserved_writes, token));
                self.release_flushes(context, now);
                continue;
            }
            let ready = match (self.cache.space_at(now, bytes), self.gc_stall_until(now)) {
                (Some(at), Some(end)) => Some(at.max(end)),
                (at, _) => at,
            };
            match ready {
                Some(at) if at <= now => {
                    self.writes.pop_front();
                    self.cache.reserved += bytes;
                    self.reserved_writes += 1;
                    let transfer = Transfer {
                        token,
                        bytes,
                        write: true,
                    };
                    self.enqueue_transfer(context, now, transfer);
                }
                Some(at) => {
                    if self.wake_at.is_none_or(|wake| at < wake) {
                        self.wake_at = Some(at);
                        context.schedule(at, FlashEvent::WriteWake);
                    }
                    return;
                }
                None => return,
            }
        }
    }
}

impl FlashSsd {
    /// The controller processed `request` at `now`: a read goes to its unit, a
    /// write (or flush) joins the cache's FIFO.
    fn processed(&mut self, context: &mut Context<FlashEvent>, now: Nanos, request: DeviceRequest) {
        match request.direction {
            tailguard_core::Direction::Read => self.start_read(context, now, request),
            tailguard_core::Direction::Write => {
                self.writes.push_back(WaitingWrite {
                    token: request.token,
                    bytes: request.length_bytes,
                });
                self.pump_writes(context, now);
            }
        }
    }
}

impl Mechanism for FlashSsd {
    type Event = FlashEvent;

    fn eligible(&mut self, context: &mut Context<FlashEvent>, now: Nanos, request: DeviceRequest) {
        let start = now.max(self.controller_free);
        self.controller_free = start + self.config.controller;
        context.schedule(self.controller_free, FlashEvent::Processed(request));
    }

    fn event(&mut self, context: &mut Context<FlashEvent>, now: Nanos, event: FlashEvent) {
        match event {
            FlashEvent::Processed(request) => self.processed(context, now, request),
            FlashEvent::ReadReady { token, bytes } => {
                let transfer = Transfer {
                    token,
                    bytes,
                    write: false,
                };
                self.enqueue_transfer(context, now, transfer);
            }
            FlashEvent::LinkDone(link) => {
                self.finish_transfer(context, now, link);
                self.pump_writes(context, now);
            }
            FlashEvent::WriteWake => {
                if self.wake_at == Some(now) {
                    self.wake_at = None;
                }
                self.pump_writes(context, now);
            }
        }
    }
}

/// A closed-loop driver for the models' tests.
#[cfg(test)]
pub(crate) mod driver {
    use crate::device::{DeviceCompletion, DeviceModel, DeviceRequest};
    use tailguard_core::{Direction, Nanos};

    /// What one closed-loop run measured.
    pub(crate) struct Run {
        /// Every completion, in order.
        pub completions: Vec<DeviceCompletion>,
        /// Latencies of the measured commands (after warm-up), sorted.
        pub latencies: Vec<Nanos>,
        /// Every command's latency, by token.
        pub latency_by_token: Vec<Nanos>,
        /// Measured commands per second.
        pub ops_per_second: f64,
        /// Measured bytes per second.
        pub bytes_per_second: f64,
    }

    impl Run {
        /// The latency at quantile `q` (0..=1).
        pub(crate) fn quantile(&self, q: f64) -> Nanos {
            let index = ((self.latencies.len() - 1) as f64 * q).round() as usize;
            self.latencies[index]
        }

        /// The mean latency.
        pub(crate) fn mean(&self) -> f64 {
            self.latencies.iter().sum::<Nanos>() as f64 / self.latencies.len() as f64
        }
    }

    /// Keeps `depth` commands outstanding until `total` completed, each new one
    /// submitted at the completion time of the one it replaces. `next(i)` gives
    /// command `i` as (direction, offset, length). Throughput and latency count
    /// the commands completing after the first `warmup` completions.
    pub(crate) fn closed_loop(
        device: &mut dyn DeviceModel,
        depth: usize,
        total: usize,
        warmup: usize,
        mut next: impl FnMut(usize) -> (Direction, u64, u64),
    ) -> Run {
        let mut submitted_at = vec![None; total];
        let mut lengths = vec![0; total];
        let mut submitted = 0;
        let mut submit = |device: &mut dyn DeviceModel, now: Nanos, submitted: &mut usize| {
            let (direction, offset_bytes, length_bytes) = next(*submitted);
            submitted_at[*submitted] = Some(now);
            lengths[*submitted] = length_bytes;
            device.submit(
                now,
                DeviceRequest {
                    token: *submitted as u64,
                    direction,
                    offset_bytes,
                    length_bytes,
                },
            );
            *submitted += 1;
        };
        for _ in 0..depth.min(total) {
            submit(device, 0, &mut submitted);
        }
        let mut completions = Vec::with_capacity(total);
        let mut batch = Vec::new();
        while completions.len() < total {
            let now = device
                .next_event_at()
                .expect("device idle with commands outstanding");
            device.advance(now, &mut batch);
            for completion in batch.drain(..) {
                completions.push(completion);
                if submitted < total {
                    submit(device, completion.completed_at, &mut submitted);
                }
            }
        }
        measure(completions, &submitted_at, &lengths, warmup)
    }

    fn measure(
        completions: Vec<DeviceCompletion>,
        submitted_at: &[Option<Nanos>],
        lengths: &[u64],
        warmup: usize,
    ) -> Run {
        let mut seen = vec![false; submitted_at.len()];
        for completion in &completions {
            let token = completion.token as usize;
            assert!(!seen[token], "token {token} completed twice");
            seen[token] = true;
        }
        assert!(seen.iter().all(|&s| s), "a token never completed");
        let measured = &completions[warmup..];
        let start = match warmup {
            0 => 0,
            n => completions[n - 1].completed_at,
        };
        let end = measured.last().map_or(start, |c| c.completed_at);
        let seconds = (end - start).max(1) as f64 / 1e9;
        let latency =
            |c: &DeviceCompletion| c.completed_at - submitted_at[c.token as usize].unwrap_or(0);
        let mut latency_by_token = vec![0; submitted_at.len()];
        for completion in &completions {
            latency_by_token[completion.token as usize] = latency(completion);
        }
        let mut latencies: Vec<Nanos> = measured.iter().map(latency).collect();
        latencies.sort_unstable();
        let bytes: u64 = measured.iter().map(|c| lengths[c.token as usize]).sum();
        Run {
            ops_per_second: measured.len() as f64 / seconds,
            bytes_per_second: bytes as f64 / seconds,
            completions,
            latencies,
            latency_by_token,
        }
    }

    /// A random 4 KiB-aligned offset below `span` bytes.
    pub(crate) fn random_offset(rng: &mut rand_chacha::ChaCha8Rng, span: u64) -> u64 {
        use rand::RngExt;
        rng.random_range(0..span / 4096) * 4096
    }

    /// Whether `measured` is within `tolerance` (a fraction) of `expected`.
    pub(crate) fn within(measured: f64, expected: f64, tolerance: f64) -> bool {
        (measured / expected - 1.0).abs() <= tolerance
    }

    /// Prints `measured` beside the profile's `expected` figure and asserts that
    /// it is within 10% of it.
    pub(crate) fn assert_near_profile(what: &str, measured: f64, expected: f64) {
        eprintln!("{what}: {measured:.0} vs profile {expected:.0}");
        assert!(
            within(measured, expected, 0.1),
            "{what}: {measured:.0} is not within 10% of the profile's {expected:.0}"
        );
    }

    /// `direction` for every `n`th command (0, n, 2n, ...), the other one otherwise.
    pub(crate) fn every_nth(i: usize, n: usize, direction: Direction) -> Direction {
        match (i % n == 0, direction) {
            (true, direction) => direction,
            (false, Direction::Read) => Direction::Write,
            (false, Direction::Write) => Direction::Read,
        }
    }

    /// A write of `length_bytes` at `offset_bytes` (a flush when the length is 0).
    pub(crate) fn write(token: u64, offset_bytes: u64, length_bytes: u64) -> DeviceRequest {
        DeviceRequest {
            token,
            direction: Direction::Write,
            offset_bytes,
            length_bytes,
        }
    }

    /// Runs `device` until it has no events left; returns every completion, in order.
    pub(crate) fn drain(device: &mut dyn DeviceModel) -> Vec<DeviceCompletion> {
        let mut completions = Vec::new();
        while let Some(at) = device.next_event_at() {
            device.advance(at, &mut completions);
        }
        completions
    }
}

#[cfg(test)]
mod tests {
    use crate::device::{build, ModelName};

    #[test]
    fn every_model_builds_from_an_empty_table_and_rejects_unknown_keys() {
        for model in ModelName::ALL {
            let name = model.name();
            let device = build(model, &toml::Table::new(), 1).expect(name);
            let profile = device.profile();
            eprintln!("{name}: {profile:?}");
            assert!(profile.validate().is_ok(), "{name}: {profile:?}");
            assert_eq!(device.model_name(), name);
            assert_eq!(device.outstanding(), 0);
            assert_eq!(device.next_event_at(), None);
            let mut table = toml::Table::new();
            table.insert("no_such_key".into(), toml::Value::Integer(1));
            assert!(build(model, &table, 1).is_err(), "{name}");
        }
    }
}
