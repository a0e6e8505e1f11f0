//! The `deadline` policy: Linux's `mq-deadline`.
//!
//! mq-deadline keeps, per device, a FIFO of reads and a FIFO of writes, each
//! request stamped with an expiry time. It dispatches in batches of up to
//! `fifo_batch` requests of one direction, prefers reads, and lets writes have a
//! batch once reads have been chosen over pending writes `writes_starved` times.
//! The device's tag count bounds how much is in flight.
//!
//! Rules implemented, per device (devices are independent):
//! - Each request goes to its direction's FIFO with a deadline: arrival +
//!   `read_expire_ms` or + `write_expire_ms`.
//! - `dispatch` sends requests while fewer than `device_depth` are in flight.
//! - A batch continues, taking the head of its direction's FIFO, until it has
//!   sent `fifo_batch` requests or that FIFO is empty. Then a new batch picks its
//!   direction, in this order:
//!   1. writes, if both directions are pending and read batches have been chosen
//!      over pending writes at least `writes_starved` times since the last write
//!      batch;
//!   2. the direction whose head's deadline has passed (both passed: the earlier
//!      deadline, reads on a tie);
//!   3. reads if any are pending, else writes.
//!
//!   A read batch chosen while writes are pending counts one toward starvation;
//!   a write batch resets the count.
//! - No timer: the policy is work conserving up to `device_depth`, so whenever a
//!   request waits the device is full and the next completion calls `dispatch`;
//!   deadlines are only looked at when a batch starts, which happens there.
//!   `next_timer_at` is always `None`.
//!
//! Simplifications: batches take requests in FIFO (arrival) order rather than in
//! offset order from the sort tree, no merging, no I/O priority levels. Rule 2
//! lets an expired direction take the next batch outright; real mq-deadline only
//! uses expiry to choose where within the already chosen direction to start, so
//! expired writes there still wait for `writes_starved`.
//!
//! Parameters (`[policy.deadline]`):
//! - `read_expire_ms`: read deadline, milliseconds (default 500).
//! - `write_expire_ms`: write deadline, milliseconds (default 5000).
//! - `fifo_batch`: most requests in one batch (default 16; 0 is treated as 1).
//! - `writes_starved`: read batches allowed over pending writes (default 2).
//! - `device_depth`: most requests in flight per device, the hardware tags
//!   (default 32; 0 is treated as 1).
//!
//! Pathology it reproduces: reads are served well, and writes are bounded only
//! loosely (one batch every `writes_starved + 1`, or after 5 s); with a slow
//! device and a deep tag queue a read still waits behind up to `device_depth`
//! commands already on the device, which the scheduler cannot take back.

use super::fifo::whole_command;
use super::{device_state, is_write, Policy, PolicyContext, Queued, SimRequest, Submission};
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};
use tailguard_core::{Direction, Nanos};

/// Parameters of the policy; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeadlineParameters {
    /// Read deadline, in milliseconds (default 500).
    pub read_expire_ms: u64,
    /// Write deadline, in milliseconds (default 5000).
    pub write_expire_ms: u64,
    /// Most requests in one batch (default 16).
    pub fifo_batch: usize,
    /// Read batches allowed while writes are pending (default 2).
    pub writes_starved: usize,
    /// Most requests in flight per device (default 32).
    pub device_depth: usize,
}

impl Default for DeadlineParameters {
    fn default() -> Self {
        Self {
            read_expire_ms: 500,
            write_expire_ms: 5000,
            fifo_batch: 16,
            writes_starved: 2,
            device_depth: 32,
        }
    }
}

/// One device's state.
#[derive(Debug, Default)]
struct DeadlineDevice {
    /// Reads, in arrival order.
    reads: VecDeque<Queued>,
    /// Writes, in arrival order.
    writes: VecDeque<Queued>,
    /// Requests on the device.
    in_flight: usize,
    /// The current batch's direction, if a batch is running.
    batch_direction: Option<Direction>,
    /// Requests sent in the current batch.
    batch_sent: usize,
    /// Read batches chosen over pending writes since the last write batch.
    starved: usize,
}

impl DeadlineDevice {
    fn fifo(&mut self, direction: Direction) -> &mut VecDeque<Queued> {
        match direction {
            Direction::Read => &mut self.reads,
            Direction::Write => &mut self.writes,
        }
    }

    /// The expired direction (rule 2), if any.
    fn expired_direction(&self, now: Nanos) -> Option<Direction> {
        let expired = |fifo: &VecDeque<Queued>| {
            fifo.front()
                .map(|head| head.deadline_ns)
                .filter(|deadline_ns| *deadline_ns <= now)
        };
        match (expired(&self.reads), expired(&self.writes)) {
            (Some(read_ns), Some(write_ns)) if write_ns < read_ns => Some(Direction::Write),
            (Some(_), _) => Some(Direction::Read),
            (None, Some(_)) => Some(Direction::Write),
            (None, None) => None,
        }
    }

    /// Picks the next batch's direction and updates the starvation count.
    fn start_batch(&mut self, now: Nanos, writes_starved: usize) -> Option<Direction> {
        let reads_pending = !self.reads.is_empty();
        let writes_pending = !self.writes.is_empty();
        let direction = if reads_pending && writes_pending && self.starved >= writes_starved {
            Direction::Write
        } else if let Some(direction) = self.expired_direction(now) {
            direction
        } else if reads_pending {
            Direction::Read
        } else if writes_pending {
            Direction::Write
        } else {
            return None;
        };
        match direction {
            Direction::Write => self.starved = 0,
            Direction::Read if writes_pending => self.starved += 1,
            Direction::Read => {}
        }
        self.batch_direction = Some(direction);
        self.batch_sent = 0;
        Some(direction)
    }

    /// The next request to send, continuing or starting a batch.
    fn next_request(&mut self, now: Nanos, parameters: &DeadlineParameters) -> Option<Queued> {
        let continuing = self.batch_direction.filter(|direction| {
            self.batch_sent < parameters.fifo_batch
                && !match direction {
                    Direction::Read => self.reads.is_empty(),
                    Direction::Write => self.writes.is_empty(),
                }
        });
        let direction = match continuing {
            Some(direction) => direction,
            None => self.start_batch(now, parameters.writes_starved)?,
        };
        let queued = self.fifo(direction).pop_front()?;
        self.batch_sent += 1;
        Some(queued)
    }
}

/// The `deadline` policy; see the module docs.
pub struct Deadline {
    /// The parameters, with zero batch and depth raised to 1.
    parameters: DeadlineParameters,
    /// Per-device state, by device index.
    devices: Vec<DeadlineDevice>,
    /// Dispatched, not completed: request id to device.
    in_flight: BTreeMap<u64, usize>,
}

impl Deadline {
    /// Builds the policy.
    pub fn new(context: &PolicyContext, parameters: DeadlineParameters) -> Self {
        let parameters = DeadlineParameters {
            fifo_batch: parameters.fifo_batch.max(1),
            device_depth: parameters.device_depth.max(1),
            ..parameters
        };
        let mut devices = Vec::new();
        devices.resize_with(context.devices.len(), DeadlineDevice::default);
        Self {
            parameters,
            devices,
            in_flight: BTreeMap::new(),
        }
    }

    fn expire_ms(&self, request: &SimRequest) -> u64 {
        if is_write(request) {
            self.parameters.write_expire_ms
        } else {
            self.parameters.read_expire_ms
        }
    }

    /// Sends everything device `index` may send at `now`.
    fn dispatch_device(&mut self, index: usize, now: Nanos, out: &mut Vec<Submission>) {
        let device = &mut self.devices[index];
        while device.in_flight < self.parameters.device_depth {
            let Some(queued) = device.next_request(now, &self.parameters) else {
                break;
            };
            device.in_flight += 1;
            self.in_flight.insert(queued.request.id, index);
            out.push(whole_command(&queued.request));
        }
    }
}

impl Policy for Deadline {
    fn name(&self) -> &'static str {
        "deadline"
    }

    fn submit(&mut self, now: Nanos, request: SimRequest) {
        let queued = Queued::new(request, now, self.expire_ms(&request));
        device_state(&mut self.devices, request.device)
            .fifo(request.direction)
            .push_back(queued);
    }

    fn complete(&mut self, _now: Nanos, _device: usize, token: u64, finished: &mut Vec<u64>) {
        let Some(device) = self.in_flight.remove(&token) else {
            return;
        };
        self.devices[device].in_flight -= 1;
        finished.push(token);
    }

    fn dispatch(&mut self, now: Nanos, out: &mut Vec<Submission>) {
        for index in 0..self.devices.len() {
            self.dispatch_device(index, now, out);
        }
    }

    fn next_timer_at(&self) -> Option<Nanos> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::{context, finish_all, ids, Steps};
    use tailguard_core::request::NANOS_PER_SECOND;

    const MS: Nanos = tailguard_core::request::NANOS_PER_MILLISECOND;

    fn request(id: u64, device: usize, direction: Direction) -> SimRequest {
        crate::policy::testing::request(id, device, direction, 4096, direction == Direction::Read)
    }

    fn dispatched(policy: &mut Deadline, now: Nanos) -> Vec<u64> {
        let mut out = Vec::new();
        policy.dispatch(now, &mut out);
        ids(&out)
    }

    fn deep() -> DeadlineParameters {
        DeadlineParameters {
            device_depth: 1_000,
            ..DeadlineParameters::default()
        }
    }

    #[test]
    fn deadline_prefers_reads_and_respects_writes_starved() {
        let mut policy = Deadline::new(&context(), deep());
        // Writes 0..10 arrive first, then reads 100..160.
        for id in 0..10 {
            policy.submit(0, request(id, 0, Direction::Write));
        }
        for id in 100..160 {
            policy.submit(0, request(id, 0, Direction::Read));
        }
        let order = dispatched(&mut policy, 0);
        let mut expected: Vec<u64> = (100..132).collect(); // two read batches
        expected.extend(0..10); // then the starved writes
        expected.extend(132..160); // then reads again
        assert_eq!(order, expected);
        assert_eq!(policy.next_timer_at(), None);
    }

    #[test]
    fn deadline_respects_device_depth_per_device() {
        let parameters = DeadlineParameters {
            device_depth: 4,
            ..DeadlineParameters::default()
        };
        let mut policy = Deadline::new(&context(), parameters);
        for id in 0..10 {
            policy.submit(0, request(id, 0, Direction::Read));
            policy.submit(0, request(100 + id, 1, Direction::Read));
        }
        assert_eq!(
            dispatched(&mut policy, 0),
            vec![0, 1, 2, 3, 100, 101, 102, 103]
        );
        assert!(dispatched(&mut policy, 1).is_empty());
        let mut finished = Vec::new();
        policy.complete(2, 0, 1, &mut finished);
        assert_eq!(dispatched(&mut policy, 2), vec![4]);
        policy.complete(3, 1, 100, &mut finished);
        policy.complete(3, 1, 103, &mut finished);
        assert_eq!(dispatched(&mut policy, 3), vec![104, 105]);
        assert_eq!(finished, vec![1, 100, 103]);
    }

    #[test]
    fn deadline_serves_expired_write_before_more_reads() {
        // Writes would never get a batch by starvation; only expiry helps.
        let parameters = DeadlineParameters {
            device_depth: 1,
            writes_starved: usize::MAX,
            ..DeadlineParameters::default()
        };
        let mut policy = Deadline::new(&context(), parameters);
        policy.submit(0, request(0, 0, Direction::Write));
        // One read always queued, each served in 1 ms, depth 1.
        let mut next_read = 1;
        policy.submit(0, request(next_read, 0, Direction::Read));
        let mut finished = Vec::new();
        let mut write_sent_at = None;
        let mut now = 0;
        while now < 10 * NANOS_PER_SECOND && write_sent_at.is_none() {
            let sent = dispatched(&mut policy, now);
            assert_eq!(sent.len(), 1);
            if sent[0] == 0 {
                write_sent_at = Some(now);
            }
            now += MS;
            policy.complete(now, 0, sent[0], &mut finished);
            next_read += 1;
            policy.submit(now, request(next_read, 0, Direction::Read));
        }
        let sent_at = write_sent_at.expect("the expired write must be served");
        // Due at 5 s; served at the first batch boundary after that.
        assert!(sent_at >= 5 * NANOS_PER_SECOND, "too early: {sent_at}");
        assert!(
            sent_at <= 5 * NANOS_PER_SECOND + 16 * MS,
            "too late: {sent_at}"
        );
    }

    #[test]
    fn deadline_write_batch_is_not_cut_by_new_reads() {
        let parameters = DeadlineParameters {
            device_depth: 1,
            ..DeadlineParameters::default()
        };
        let mut policy = Deadline::new(&context(), parameters);
        for id in 0..20 {
            policy.submit(0, request(id, 0, Direction::Write));
        }
        let mut finished = Vec::new();
        let mut order: Vec<u64> = Vec::new();
        for step in 0..21 {
            let sent = dispatched(&mut policy, step);
            assert_eq!(sent.len(), 1);
            order.extend(&sent);
            if step == 0 {
                // A read arrives just after the write batch started.
                policy.submit(step, request(100, 0, Direction::Read));
            }
            policy.complete(step, 0, sent[0], &mut finished);
        }
        // The write batch runs its 16; the read takes the next boundary.
        let mut expected: Vec<u64> = (0..16).collect();
        expected.push(100);
        expected.extend(16..20);
        assert_eq!(order, expected);
    }

    #[test]
    fn deadline_finishes_every_request_exactly_once() {
        let parameters = DeadlineParameters {
            device_depth: 3,
            ..DeadlineParameters::default()
        };
        let mut policy = Deadline::new(&context(), parameters);
        let total = 200u64;
        for id in 0..total {
            let direction = if id % 4 == 0 {
                Direction::Write
            } else {
                Direction::Read
            };
            policy.submit(id * MS, request(id, (id % 2) as usize, direction));
        }
        let steps = Steps {
            first_ns: total * MS,
            step_ns: MS,
            completions_per_step: 2,
            device_of: &|id| (id % 2) as usize,
        };
        finish_all(&mut policy, total, steps, |_| {});
    }
}
