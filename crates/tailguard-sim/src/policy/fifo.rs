//! The `fifo` policy: no scheduler at all.
//!
//! Models Linux's `none` I/O scheduler on a multi-queue block device with an
//! unlimited tag space: the block layer hands every request to the driver the
//! moment it is submitted, and the device (here, the device model's host-side
//! FIFO and its internal queue) decides everything else.
//!
//! Rules: each submitted request is queued; the next `dispatch` sends every queued
//! request to its device, in arrival order (submission order, across all devices),
//! as one command whose token is the request id. There is no depth limit and no
//! reordering, so a completion simply finishes its request. The policy never needs
//! a timer.
//!
//! Parameters: none.
//!
//! Pathology it reproduces: none by itself; it is the "do nothing" baseline. Any
//! tail latency seen under `fifo` comes from the device (a deep internal queue, a
//! slow flash translation layer, head-of-line blocking in the host FIFO), which is
//! what the other policies are compared against.

use super::{Policy, PolicyContext, SimRequest, Submission};
use crate::device::DeviceRequest;
use std::collections::{BTreeSet, VecDeque};
use tailguard_core::Nanos;

/// The `fifo` policy; see the module docs.
pub struct Fifo {
    /// Submitted, not yet dispatched, in arrival order.
    pending: VecDeque<SimRequest>,
    /// Ids dispatched and not yet completed.
    in_flight_ids: BTreeSet<u64>,
}

impl Fifo {
    /// Builds the policy. The context is unused: `none` looks at nothing.
    pub fn new(_context: &PolicyContext) -> Self {
        Self {
            pending: VecDeque::new(),
            in_flight_ids: BTreeSet::new(),
        }
    }
}

/// The device command for a request that is sent whole (token = request id).
pub(crate) fn whole_command(request: &SimRequest) -> Submission {
    Submission {
        device: request.device,
        request_id: request.id,
        command: DeviceRequest {
            token: request.id,
            direction: request.direction,
            offset_bytes: request.offset_bytes,
            length_bytes: request.length_bytes,
        },
    }
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn submit(&mut self, _now: Nanos, request: SimRequest) {
        self.pending.push_back(request);
    }

    fn complete(&mut self, _now: Nanos, _device: usize, token: u64, finished: &mut Vec<u64>) {
        if self.in_flight_ids.remove(&token) {
            finished.push(token);
        }
    }

    fn dispatch(&mut self, _now: Nanos, out: &mut Vec<Submission>) {
        for request in self.pending.drain(..) {
            self.in_flight_ids.insert(request.id);
            out.push(whole_command(&request));
        }
    }

    fn next_timer_at(&self) -> Option<Nanos> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::context;
    use tailguard_core::Direction;

    fn request(id: u64, device: usize, direction: Direction) -> SimRequest {
        crate::policy::testing::request(id, device, direction, 4096, direction == Direction::Read)
    }

    #[test]
    fn fifo_dispatches_everything_at_once_in_arrival_order() {
        let mut policy = Fifo::new(&context());
        let ids = [7, 3, 9, 1, 5];
        for (index, id) in ids.iter().enumerate() {
            let direction = if index % 2 == 0 {
                Direction::Read
            } else {
                Direction::Write
            };
            policy.submit(0, request(*id, (*id % 2) as usize, direction));
        }
        let mut out = Vec::new();
        policy.dispatch(0, &mut out);
        let sent: Vec<u64> = out.iter().map(|s| s.request_id).collect();
        assert_eq!(sent, ids);
        for submission in &out {
            assert_eq!(submission.command.token, submission.request_id);
            assert_eq!(submission.device, (submission.request_id as usize) % 2);
            assert_eq!(submission.command.length_bytes, 4096);
        }
        let mut again = Vec::new();
        policy.dispatch(1, &mut again);
        assert!(again.is_empty(), "nothing is dispatched twice");
        assert_eq!(policy.next_timer_at(), None);
    }

    #[test]
    fn fifo_finishes_each_request_exactly_once() {
        let mut policy = Fifo::new(&context());
        for id in 0..10 {
            policy.submit(id, request(id, 0, Direction::Write));
        }
        let mut out = Vec::new();
        policy.dispatch(10, &mut out);
        assert_eq!(out.len(), 10);
        let mut finished = Vec::new();
        for submission in out.iter().rev() {
            policy.complete(20, 0, submission.command.token, &mut finished);
        }
        // A repeated completion does not finish a request twice.
        policy.complete(21, 0, 3, &mut finished);
        let mut sorted = finished.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<u64>>());
    }
}
