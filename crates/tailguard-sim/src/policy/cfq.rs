//! The `cfq` and `cfq-fixed` policies: old Linux CFQ's preference for sync I/O.
//!
//! Linux's Completely Fair Queueing scheduler (2.6 to 4.x, single-queue block
//! layer) keeps per-process sync queues and one shared async queue per device
//! (buffered writeback), and treats sync I/O as the one a process is waiting on.
//! Before the upstream fix, the async queue was only allowed to dispatch when no
//! sync I/O was in flight on the device, and a newly arriving sync request
//! preempted it; under a continuous sync reader, writeback could wait tens of
//! seconds (seed 002: 15-30 s). The fix made a queue whose FIFO head had passed
//! its expiry dispatch regardless (`must_dispatch`).
//!
//! Rules implemented, per device (devices are independent):
//! - Sync requests (`SimRequest::sync`) go to one FIFO per class; async requests
//!   go to the device's single async FIFO. Each queued request gets a FIFO
//!   deadline: arrival + `fifo_expire_sync_ms` or + `fifo_expire_async_ms`.
//! - Nothing is dispatched while `device_depth` requests are in flight on the
//!   device, and no queue ever has more than `quantum` requests in flight.
//! - Sync queues are served round robin over classes, in class index order. The
//!   queue holding the turn dispatches until it has sent `quantum` requests in
//!   this turn, runs empty, or reaches `quantum` in flight; then the turn passes
//!   to the next class with queued requests below its in-flight limit.
//! - The async queue may dispatch only when no sync request is in flight on the
//!   device and none is queued. Any sync request arriving preempts it at the next
//!   `dispatch` (async requests already sent stay in flight).
//! - `cfq-fixed` only: before anything else, a queue whose head request's FIFO
//!   deadline has passed dispatches it, even while sync I/O is in flight or queued
//!   (still within `device_depth` and the queue's `quantum`). Among several
//!   expired heads, the earliest deadline goes first (ties by request id).
//!   `next_timer_at` reports the earliest head deadline still in the future, so
//!   an expiry is acted on even when no completion arrives. In plain `cfq` the
//!   deadlines change nothing and there is no timer.
//!
//! Simplifications: no time slices, no idling for a sync queue's next request
//! (`slice_idle`), no per-process queues (one per class), no I/O priorities, no
//! request merging or offset sorting, and the expiry fix is modeled as "expired
//! heads dispatch first" rather than as granting the queue a slice.
//!
//! Parameters (`[policy.cfq]` / `[policy.cfq-fixed]`):
//! - `fifo_expire_sync_ms`: sync FIFO expiry, milliseconds (default 125).
//! - `fifo_expire_async_ms`: async FIFO expiry, milliseconds (default 250).
//! - `quantum`: most requests one queue may have in flight on a device, and the
//!   length of a sync queue's round-robin turn, in requests (default 8).
//! - `device_depth`: most requests in flight on one device (default 32).
//!   `quantum` and `device_depth` of 0 are treated as 1.

use super::fifo::whole_command;
use super::{device_state, Policy, PolicyContext, Queued, SimRequest, Submission};
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};
use tailguard_core::Nanos;

/// Parameters of the policy; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CfqParameters {
    /// Sync FIFO expiry, in milliseconds (default 125).
    pub fifo_expire_sync_ms: u64,
    /// Async FIFO expiry, in milliseconds (default 250).
    pub fifo_expire_async_ms: u64,
    /// Most requests in flight per queue per device, and a sync turn's length (8).
    pub quantum: usize,
    /// Most requests in flight per device (default 32).
    pub device_depth: usize,
}

impl Default for CfqParameters {
    fn default() -> Self {
        Self {
            fifo_expire_sync_ms: 125,
            fifo_expire_async_ms: 250,
            quantum: 8,
            device_depth: 32,
        }
    }
}

/// Which queue of a device a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueKind {
    /// The sync queue of a class.
    Sync(usize),
    /// The device's shared async queue.
    Async,
}

/// One device's queues.
#[derive(Debug, Default)]
struct CfqDevice {
    /// Per-class sync FIFOs.
    sync_queues: Vec<VecDeque<Queued>>,
    /// Per-class sync requests in flight.
    sync_in_flight: Vec<usize>,
    /// The shared async FIFO.
    async_queue: VecDeque<Queued>,
    /// Async requests in flight.
    async_in_flight: usize,
    /// The class whose sync queue holds the round-robin turn.
    turn_class: usize,
    /// Requests the turn's queue has dispatched in this turn.
    turn_dispatched: usize,
}

impl CfqDevice {
    /// Makes sure class `class` has a sync queue.
    fn ensure_class(&mut self, class: usize) {
        if self.sync_queues.len() <= class {
            self.sync_queues.resize_with(class + 1, VecDeque::new);
            self.sync_in_flight.resize(class + 1, 0);
        }
    }

    fn total_in_flight(&self) -> usize {
        self.async_in_flight + self.sync_in_flight.iter().sum::<usize>()
    }

    fn sync_queued(&self) -> bool {
        self.sync_queues.iter().any(|queue| !queue.is_empty())
    }

    fn queue(&mut self, kind: QueueKind) -> &mut VecDeque<Queued> {
        match kind {
            QueueKind::Sync(class) => &mut self.sync_queues[class],
            QueueKind::Async => &mut self.async_queue,
        }
    }

    fn in_flight(&mut self, kind: QueueKind) -> &mut usize {
        match kind {
            QueueKind::Sync(class) => &mut self.sync_in_flight[class],
            QueueKind::Async => &mut self.async_in_flight,
        }
    }

    /// Every queue with its head, in a fixed order (classes, then async).
    fn heads(&self) -> impl Iterator<Item = (QueueKind, &Queued, usize)> {
        let sync = self
            .sync_queues
            .iter()
            .enumerate()
            .filter_map(|(class, queue)| {
                queue
                    .front()
                    .map(|head| (QueueKind::Sync(class), head, self.sync_in_flight[class]))
            });
        let asynchronous = self
            .async_queue
            .front()
            .map(|head| (QueueKind::Async, head, self.async_in_flight));
        sync.chain(asynchronous)
    }

    /// `cfq-fixed`: the expired head with the earliest deadline, if its queue may
    /// still send.
    fn pick_expired(&self, now: Nanos, quantum: usize) -> Option<QueueKind> {
        self.heads()
            .filter(|(_, head, in_flight)| head.deadline_ns <= now && *in_flight < quantum)
            .min_by_key(|(_, head, _)| (head.deadline_ns, head.request.id))
            .map(|(kind, _, _)| kind)
    }

    /// The sync queue that may send next under the round robin, if any.
    fn pick_sync(&mut self, quantum: usize) -> Option<QueueKind> {
        let classes = self.sync_queues.len();
        let can_send = |device: &Self, class: usize| {
            !device.sync_queues[class].is_empty() && device.sync_in_flight[class] < quantum
        };
        if classes == 0 {
            return None;
        }
        if self.turn_dispatched < quantum && can_send(self, self.turn_class) {
            self.turn_dispatched += 1;
            return Some(QueueKind::Sync(self.turn_class));
        }
        for offset in 1..=classes {
            let class = (self.turn_class + offset) % classes;
            if can_send(self, class) {
                self.turn_class = class;
                self.turn_dispatched = 1;
                return Some(QueueKind::Sync(class));
            }
        }
        None
    }

    /// The async queue, if the sync-preference rule lets it send.
    fn pick_async(&self, quantum: usize) -> Option<QueueKind> {
        let sync_busy = self.sync_in_flight.iter().any(|count| *count > 0) || self.sync_queued();
        (!sync_busy && !self.async_queue.is_empty() && self.async_in_flight < quantum)
            .then_some(QueueKind::Async)
    }

    /// The earliest head deadline after `now`.
    fn next_deadline_after(&self, now: Nanos) -> Option<Nanos> {
        self.heads()
            .map(|(_, head, _)| head.deadline_ns)
            .filter(|deadline_ns| *deadline_ns > now)
            .min()
    }
}

/// The `cfq` and `cfq-fixed` policies; see the module docs.
pub struct Cfq {
    /// The parameters, with zero limits raised to 1.
    parameters: CfqParameters,
    /// Whether expired FIFO heads must dispatch (`cfq-fixed`).
    fix_expired: bool,
    /// Per-device queues, by device index.
    devices: Vec<CfqDevice>,
    /// Dispatched, not completed: request id to (device, queue).
    in_flight: BTreeMap<u64, (usize, QueueKind)>,
    /// The `now` of the latest `dispatch`.
    last_dispatch_ns: Nanos,
}

impl Cfq {
    /// Builds the policy; `fix_expired` selects `cfq-fixed`.
    pub fn new(context: &PolicyContext, parameters: CfqParameters, fix_expired: bool) -> Self {
        let parameters = CfqParameters {
            quantum: parameters.quantum.max(1),
            device_depth: parameters.device_depth.max(1),
            ..parameters
        };
        let mut devices = Vec::new();
        devices.resize_with(context.devices.len(), CfqDevice::default);
        for device in &mut devices {
            device.ensure_class(context.classes.len().saturating_sub(1));
        }
        Self {
            parameters,
            fix_expired,
            devices,
            in_flight: BTreeMap::new(),
            last_dispatch_ns: 0,
        }
    }

    fn expire_ms(&self, sync: bool) -> u64 {
        if sync {
            self.parameters.fifo_expire_sync_ms
        } else {
            self.parameters.fifo_expire_async_ms
        }
    }

    /// Sends everything device `index` may send at `now`.
    fn dispatch_device(&mut self, index: usize, now: Nanos, out: &mut Vec<Submission>) {
        let CfqParameters {
            quantum,
            device_depth,
            ..
        } = self.parameters;
        let fix_expired = self.fix_expired;
        let device = &mut self.devices[index];
        while device.total_in_flight() < device_depth {
            let expired = if fix_expired {
                device.pick_expired(now, quantum)
            } else {
                None
            };
            let Some(kind) = expired
                .or_else(|| device.pick_sync(quantum))
                .or_else(|| device.pick_async(quantum))
            else {
                break;
            };
            let Some(queued) = device.queue(kind).pop_front() else {
                break;
            };
            *device.in_flight(kind) += 1;
            self.in_flight.insert(queued.request.id, (index, kind));
            out.push(whole_command(&queued.request));
        }
    }
}

impl Policy for Cfq {
    fn name(&self) -> &'static str {
        if self.fix_expired {
            "cfq-fixed"
        } else {
            "cfq"
        }
    }

    fn submit(&mut self, now: Nanos, request: SimRequest) {
        let queued = Queued::new(request, now, self.expire_ms(request.sync));
        let device = device_state(&mut self.devices, request.device);
        if request.sync {
            device.ensure_class(request.class);
            device.sync_queues[request.class].push_back(queued);
        } else {
            device.async_queue.push_back(queued);
        }
    }

    fn complete(&mut self, _now: Nanos, _device: usize, token: u64, finished: &mut Vec<u64>) {
        let Some((device, kind)) = self.in_flight.remove(&token) else {
            return;
        };
        *self.devices[device].in_flight(kind) -= 1;
        finished.push(token);
    }

    fn dispatch(&mut self, now: Nanos, out: &mut Vec<Submission>) {
        self.last_dispatch_ns = now;
        for index in 0..self.devices.len() {
            self.dispatch_device(index, now, out);
        }
    }

    fn next_timer_at(&self) -> Option<Nanos> {
        if !self.fix_expired {
            return None;
        }
        self.devices
            .iter()
            .filter_map(|device| device.next_deadline_after(self.last_dispatch_ns))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::{finish_all, ids, Steps};
    use crate::policy::ClassInfo;
    use tailguard_core::request::NANOS_PER_SECOND;
    use tailguard_core::Direction;

    const MS: Nanos = tailguard_core::request::NANOS_PER_MILLISECOND;

    fn context(classes: usize) -> PolicyContext {
        PolicyContext {
            devices: Vec::new(),
            classes: (0..classes)
                .map(|index| ClassInfo {
                    name: format!("class{index}"),
                    shares: 100,
                    rate_limit: None,
                })
                .collect(),
        }
    }

    fn read(id: u64, class: usize) -> SimRequest {
        SimRequest {
            id,
            class,
            device: 0,
            direction: Direction::Read,
            offset_bytes: id * 4096,
            length_bytes: 4096,
            sync: true,
        }
    }

    fn async_write(id: u64) -> SimRequest {
        SimRequest {
            direction: Direction::Write,
            sync: false,
            ..read(id, 0)
        }
    }

    /// A closed-loop harness: `readers` sync readers that each resubmit as soon
    /// as their read completes, one device serving each command in 1 ms, and one
    /// async write submitted at time 0. Returns when the write was dispatched.
    fn async_dispatch_time(fix_expired: bool, readers: u64, run_ns: Nanos) -> Option<Nanos> {
        let mut policy = Cfq::new(&context(1), CfqParameters::default(), fix_expired);
        let mut next_id = 1_000;
        policy.submit(0, async_write(0));
        for reader in 0..readers {
            policy.submit(0, read(next_id + reader, 0));
        }
        next_id += readers;
        let mut outstanding: Vec<(Nanos, u64)> = Vec::new();
        let mut finished = Vec::new();
        let mut async_sent_at = None;
        let mut now = 0;
        while now <= run_ns {
            let mut out = Vec::new();
            policy.dispatch(now, &mut out);
            for submission in out {
                if submission.request_id == 0 {
                    async_sent_at.get_or_insert(now);
                }
                outstanding.push((now + MS, submission.request_id));
            }
            // Next event: a completion or the policy's timer.
            let next_completion = outstanding.iter().map(|(at, _)| *at).min();
            let timer = policy.next_timer_at();
            now = match (next_completion, timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            let (done, rest): (Vec<_>, Vec<_>) =
                outstanding.into_iter().partition(|(at, _)| *at <= now);
            outstanding = rest;
            for (_, id) in done {
                policy.complete(now, 0, id, &mut finished);
                if id != 0 {
                    policy.submit(now, read(next_id, 0));
                    next_id += 1;
                }
            }
        }
        async_sent_at
    }

    #[test]
    fn cfq_starves_async_under_continuous_sync_for_20_seconds() {
        assert_eq!(async_dispatch_time(false, 4, 20 * NANOS_PER_SECOND), None);
    }

    #[test]
    fn cfq_fixed_dispatches_expired_async_within_expiry_plus_one_completion() {
        let sent_at = async_dispatch_time(true, 4, 20 * NANOS_PER_SECOND)
            .expect("cfq-fixed must dispatch the async write");
        assert!(sent_at >= 250 * MS, "too early: {sent_at}");
        assert!(sent_at <= 250 * MS + MS, "too late: {sent_at}");
    }

    #[test]
    fn cfq_async_runs_when_sync_is_idle_and_is_preempted_by_new_sync() {
        let mut policy = Cfq::new(&context(1), CfqParameters::default(), false);
        for id in 0..12 {
            policy.submit(0, async_write(id));
        }
        let mut out = Vec::new();
        policy.dispatch(0, &mut out);
        // No sync at all: the async queue sends up to its quantum.
        assert_eq!(ids(&out), (0..8).collect::<Vec<u64>>());
        policy.submit(1, read(100, 0));
        let mut finished = Vec::new();
        policy.complete(1, 0, 0, &mut finished);
        out.clear();
        policy.dispatch(1, &mut out);
        // The sync read goes; the async queue, with room, is preempted.
        assert_eq!(ids(&out), vec![100]);
        policy.complete(2, 0, 100, &mut finished);
        out.clear();
        policy.dispatch(2, &mut out);
        assert_eq!(ids(&out), vec![8]);
        assert_eq!(finished, vec![0, 100]);
    }

    #[test]
    fn cfq_sync_round_robin_respects_quantum_and_device_depth() {
        let parameters = CfqParameters {
            quantum: 2,
            device_depth: 5,
            ..CfqParameters::default()
        };
        let mut policy = Cfq::new(&context(3), parameters, false);
        for class in 0..3u64 {
            for index in 0..4 {
                policy.submit(0, read(class * 10 + index, class as usize));
            }
        }
        let mut out = Vec::new();
        policy.dispatch(0, &mut out);
        // Turns of 2 per class, stopped by the device depth of 5.
        assert_eq!(ids(&out), vec![0, 1, 10, 11, 20]);
        let mut finished = Vec::new();
        policy.complete(1, 0, 10, &mut finished);
        out.clear();
        policy.dispatch(1, &mut out);
        // Class 2 still holds the turn and has one in flight: it sends one more.
        assert_eq!(ids(&out), vec![21]);
        policy.complete(2, 0, 0, &mut finished);
        policy.complete(2, 0, 21, &mut finished);
        out.clear();
        policy.dispatch(2, &mut out);
        // Class 2's turn is used up; class 0 then class 1 get the free slots.
        assert_eq!(ids(&out), vec![2, 12]);
    }

    #[test]
    fn cfq_fixed_timer_reports_head_expiry() {
        let mut fixed = Cfq::new(&context(1), CfqParameters::default(), true);
        let mut plain = Cfq::new(&context(1), CfqParameters::default(), false);
        for policy in [&mut fixed, &mut plain] {
            policy.submit(0, read(1, 0));
            policy.submit(10 * MS, async_write(2));
            let mut out = Vec::new();
            policy.dispatch(10 * MS, &mut out);
            assert_eq!(ids(&out), vec![1]);
        }
        assert_eq!(fixed.name(), "cfq-fixed");
        assert_eq!(plain.name(), "cfq");
        assert_eq!(plain.next_timer_at(), None);
        assert_eq!(fixed.next_timer_at(), Some(260 * MS));
        let mut out = Vec::new();
        fixed.dispatch(260 * MS, &mut out);
        assert_eq!(
            ids(&out),
            vec![2],
            "expired async goes despite sync in flight"
        );
        assert_eq!(fixed.next_timer_at(), None);
        out.clear();
        plain.dispatch(260 * MS, &mut out);
        assert!(out.is_empty(), "plain cfq still holds the async write");
    }

    #[test]
    fn cfq_finishes_every_request_exactly_once() {
        for fix_expired in [false, true] {
            let mut policy = Cfq::new(&context(2), CfqParameters::default(), fix_expired);
            let total = 100u64;
            for id in 0..total {
                let request = if id % 3 == 0 {
                    async_write(id)
                } else {
                    read(id, (id % 2) as usize)
                };
                policy.submit(id * MS, request);
            }
            let steps = Steps {
                first_ns: 100 * MS,
                step_ns: MS,
                completions_per_step: 3,
                device_of: &|_| 0,
            };
            finish_all(&mut policy, total, steps, |_| {});
        }
    }
}
