//! The `global-cap` policy: FreeBSD's `vfs.hirunningspace`.
//!
//! FreeBSD's buffer cache counts the bytes of every write buffer handed to a
//! driver and not yet completed in one kernel-wide counter, `runningbufspace`.
//! A writer that pushes it past `vfs.hirunningspace` sleeps in
//! `waitrunningbufspace()` until completions bring it back under
//! `vfs.lorunningspace`. The counter is global: it does not know which disk the
//! bytes are waiting on.
//!
//! Rules implemented:
//! - Reads are not counted and pass straight through: each goes to its device at
//!   the next `dispatch`, in arrival order.
//! - Writes wait in one global FIFO, in arrival order across all devices.
//! - While the policy is not blocked, `dispatch` sends writes from the head of the
//!   FIFO, adding each one's length to the running write bytes. As soon as the
//!   running write bytes reach `hirunningspace_bytes` (≥), the policy is blocked
//!   and sends no more writes. So the running bytes never exceed the cap by more
//!   than one request's length.
//! - A completed write subtracts its length. A blocked policy unblocks only when
//!   the running write bytes fall strictly below `lorunningspace_bytes`; then the
//!   head of the FIFO may go again (at the next `dispatch`).
//! - No timers: only completions change anything.
//!
//! Parameters (`[policy.global-cap]`):
//! - `hirunningspace_bytes`: the cap, in bytes (default 16 MiB = 16777216);
//!   like every size, an integer or a string with a binary suffix (`"16m"`).
//!   A value of 0 is treated as 1 byte (one write at a time).
//! - `lorunningspace_bytes`: the resume watermark, in bytes. Absent or 0 means
//!   two thirds of `hirunningspace_bytes` (FreeBSD's default ratio). It is clamped
//!   to at most the cap and at least 1 byte, so a blocked policy always resumes
//!   once every write has completed.
//!
//! Pathology it reproduces (seed 001): with a fast NVMe drive and a 2 MB/s USB
//! stick, writes to the stick fill the global budget and complete slowly; the
//! policy blocks, and writes to the NVMe drive, which has nothing outstanding and
//! could take them at once, queue in the global FIFO until the stick drains below
//! the low watermark. The fast device is throttled to the slow one's pace.

use super::fifo::whole_command;
use super::{is_write, Policy, PolicyContext, SimRequest, Submission};
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};
use tailguard_core::Nanos;

/// FreeBSD's usual `vfs.hirunningspace` on a machine with plenty of memory.
pub const DEFAULT_HIRUNNINGSPACE_BYTES: u64 = 16 * 1024 * 1024;

/// Parameters of the policy; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GlobalCapParameters {
    /// Cap on in-flight write bytes over all devices (default 16 MiB); an
    /// integer or a size such as `"16m"`.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub hirunningspace_bytes: u64,
    /// Resume below this many in-flight write bytes; 0 means 2/3 of the cap.
    #[serde(deserialize_with = "crate::scenario::deserialize_bytes")]
    pub lorunningspace_bytes: u64,
}

impl Default for GlobalCapParameters {
    fn default() -> Self {
        Self {
            hirunningspace_bytes: DEFAULT_HIRUNNINGSPACE_BYTES,
            lorunningspace_bytes: 0,
        }
    }
}

impl GlobalCapParameters {
    /// The cap actually used, in bytes (at least 1).
    pub fn effective_hi_bytes(&self) -> u64 {
        self.hirunningspace_bytes.max(1)
    }

    /// The resume watermark actually used, in bytes (1..=cap).
    pub fn effective_lo_bytes(&self) -> u64 {
        let hi_bytes = self.effective_hi_bytes();
        let lo_bytes = if self.lorunningspace_bytes == 0 {
            hi_bytes / 3 * 2 + (hi_bytes % 3) * 2 / 3
        } else {
            self.lorunningspace_bytes
        };
        lo_bytes.clamp(1, hi_bytes)
    }
}

/// What the policy remembers about a dispatched request.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Whether it counts toward the running write bytes.
    write: bool,
    /// Its length in bytes.
    length_bytes: u64,
}

/// The `global-cap` policy; see the module docs.
pub struct GlobalCap {
    /// The cap, in bytes.
    hi_bytes: u64,
    /// The resume watermark, in bytes.
    lo_bytes: u64,
    /// Reads not yet dispatched, in arrival order.
    reads: VecDeque<SimRequest>,
    /// Writes not yet dispatched, in arrival order over all devices.
    writes: VecDeque<SimRequest>,
    /// Dispatched, not completed, by request id.
    in_flight: BTreeMap<u64, InFlight>,
    /// Write bytes dispatched and not completed (FreeBSD's `runningbufspace`).
    running_write_bytes: u64,
    /// Whether writers sleep until the running bytes fall below the watermark.
    blocked: bool,
}

impl GlobalCap {
    /// Builds the policy. Device and class information is unused: the cap is
    /// global and blind to both.
    pub fn new(_context: &PolicyContext, parameters: GlobalCapParameters) -> Self {
        Self {
            hi_bytes: parameters.effective_hi_bytes(),
            lo_bytes: parameters.effective_lo_bytes(),
            reads: VecDeque::new(),
            writes: VecDeque::new(),
            in_flight: BTreeMap::new(),
            running_write_bytes: 0,
            blocked: false,
        }
    }

    /// Write bytes dispatched and not completed.
    pub fn running_write_bytes(&self) -> u64 {
        self.running_write_bytes
    }

    /// Whether writes are held until the running bytes fall below the watermark.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Records a request as sent and emits its command.
    fn send(&mut self, request: &SimRequest, out: &mut Vec<Submission>) {
        let write = is_write(request);
        self.in_flight.insert(
            request.id,
            InFlight {
                write,
                length_bytes: request.length_bytes,
            },
        );
        out.push(whole_command(request));
    }

    /// Sends writes from the head of the FIFO until the cap is reached.
    fn dispatch_writes(&mut self, out: &mut Vec<Submission>) {
        while !self.blocked {
            let Some(request) = self.writes.pop_front() else {
                break;
            };
            self.running_write_bytes += request.length_bytes;
            self.send(&request, out);
            if self.running_write_bytes >= self.hi_bytes {
                self.blocked = true;
            }
        }
    }
}

impl Policy for GlobalCap {
    fn name(&self) -> &'static str {
        "global-cap"
    }

    fn submit(&mut self, _now: Nanos, request: SimRequest) {
        if is_write(&request) {
            self.writes.push_back(request);
        } else {
            self.reads.push_back(request);
        }
    }

    fn complete(&mut self, _now: Nanos, _device: usize, token: u64, finished: &mut Vec<u64>) {
        let Some(done) = self.in_flight.remove(&token) else {
            return;
        };
        if done.write {
            self.running_write_bytes -= done.length_bytes;
            if self.blocked && self.running_write_bytes < self.lo_bytes {
                self.blocked = false;
            }
        }
        finished.push(token);
    }

    fn dispatch(&mut self, _now: Nanos, out: &mut Vec<Submission>) {
        while let Some(request) = self.reads.pop_front() {
            self.send(&request, out);
        }
        self.dispatch_writes(out);
    }

    fn next_timer_at(&self) -> Option<Nanos> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::{context, finish_all, Steps};
    use tailguard_core::Direction;

    const MIB: u64 = 1024 * 1024;

    fn request(id: u64, device: usize, direction: Direction, length_bytes: u64) -> SimRequest {
        crate::policy::testing::request(id, device, direction, length_bytes, false)
    }

    fn parameters(hi_bytes: u64, lo_bytes: u64) -> GlobalCapParameters {
        GlobalCapParameters {
            hirunningspace_bytes: hi_bytes,
            lorunningspace_bytes: lo_bytes,
        }
    }

    fn dispatched(policy: &mut GlobalCap, now: Nanos) -> Vec<Submission> {
        let mut out = Vec::new();
        policy.dispatch(now, &mut out);
        out
    }

    #[test]
    fn global_cap_defaults_and_derived_low_watermark() {
        let defaults = GlobalCapParameters::default();
        assert_eq!(defaults.effective_hi_bytes(), 16 * MIB);
        assert_eq!(defaults.effective_lo_bytes(), 16 * MIB * 2 / 3);
        assert_eq!(parameters(9 * MIB, 0).effective_lo_bytes(), 6 * MIB);
        assert_eq!(parameters(9 * MIB, 20 * MIB).effective_lo_bytes(), 9 * MIB);
        assert_eq!(parameters(0, 0).effective_lo_bytes(), 1);
        let parsed: GlobalCapParameters =
            crate::device::parse(&toml::from_str("hirunningspace_bytes = 3000").unwrap()).unwrap();
        assert_eq!(parsed.effective_lo_bytes(), 2000);
        assert!(crate::device::parse::<GlobalCapParameters>(
            &toml::from_str("hirunningspace = 1").unwrap()
        )
        .is_err());
    }

    #[test]
    fn global_cap_blocks_at_hi_and_resumes_only_below_lo() {
        // hi = 10 MiB, lo = 4 MiB, writes of 3 MiB.
        let mut policy = GlobalCap::new(&context(), parameters(10 * MIB, 4 * MIB));
        for id in 0..8 {
            policy.submit(0, request(id, 0, Direction::Write, 3 * MIB));
        }
        let first = dispatched(&mut policy, 0);
        // 3, 6, 9 < 10, then 12 >= 10: four writes, over the cap by less than one.
        assert_eq!(first.len(), 4);
        assert_eq!(policy.running_write_bytes(), 12 * MIB);
        assert!(policy.running_write_bytes() < 10 * MIB + 3 * MIB);
        assert!(policy.is_blocked());
        let mut finished = Vec::new();
        // 12 -> 9 -> 6: below hi but not below lo; still blocked.
        policy.complete(1, 0, 0, &mut finished);
        assert!(dispatched(&mut policy, 1).is_empty());
        policy.complete(2, 0, 1, &mut finished);
        assert_eq!(policy.running_write_bytes(), 6 * MIB);
        assert!(policy.is_blocked());
        assert!(dispatched(&mut policy, 2).is_empty());
        // 6 -> 3 < 4: unblocked; 3+3+3 = 9, +3 = 12 >= 10 blocks again.
        policy.complete(3, 0, 2, &mut finished);
        assert!(!policy.is_blocked());
        let second = dispatched(&mut policy, 3);
        let ids: Vec<u64> = second.iter().map(|s| s.request_id).collect();
        assert_eq!(ids, vec![4, 5, 6]);
        assert_eq!(policy.running_write_bytes(), 12 * MIB);
        assert!(policy.is_blocked());
        assert_eq!(finished, vec![0, 1, 2]);
        assert_eq!(policy.next_timer_at(), None);
    }

    #[test]
    fn global_cap_reads_pass_while_blocked() {
        let mut policy = GlobalCap::new(&context(), parameters(MIB, 0));
        policy.submit(0, request(0, 0, Direction::Write, 2 * MIB));
        policy.submit(0, request(1, 0, Direction::Write, 4096));
        assert_eq!(dispatched(&mut policy, 0).len(), 1);
        assert!(policy.is_blocked());
        policy.submit(1, request(2, 1, Direction::Read, 4096));
        policy.submit(1, request(3, 0, Direction::Read, 4096));
        let reads: Vec<u64> = dispatched(&mut policy, 1)
            .iter()
            .map(|s| s.request_id)
            .collect();
        assert_eq!(reads, vec![2, 3]);
        let mut finished = Vec::new();
        policy.complete(2, 1, 2, &mut finished);
        policy.complete(2, 0, 3, &mut finished);
        assert_eq!(policy.running_write_bytes(), 2 * MIB);
        assert!(policy.is_blocked());
    }

    #[test]
    fn global_cap_slow_device_blocks_fast_device_writes() {
        // Seed 001's mechanism: device 0 is a stalled USB stick whose writes never
        // complete; device 1 is fast and completes each write right away.
        let mut policy = GlobalCap::new(&context(), parameters(16 * MIB, 0));
        let mut finished = Vec::new();
        let mut fast_sent = 0;
        let mut next_id = 0;
        for step in 0..100u64 {
            // One 1 MiB write to each device per step, slow device first.
            for device in 0..2 {
                policy.submit(step, request(next_id, device, Direction::Write, MIB));
                next_id += 1;
            }
            for submission in dispatched(&mut policy, step) {
                if submission.device == 1 {
                    fast_sent += 1;
                    let token = submission.command.token;
                    policy.complete(step, 1, token, &mut finished);
                }
            }
        }
        // The fast device completes everything it got, but the slow one's writes
        // filled the cap and never drain below lo, so the policy stays blocked and the fast device's
        // writes queue behind it.
        assert!(policy.is_blocked());
        // All running bytes are the stick's, and they never drop below lo.
        assert!(policy.running_write_bytes() >= policy.lo_bytes);
        assert_eq!(
            policy.running_write_bytes(),
            policy.in_flight.len() as u64 * MIB
        );
        assert!(policy.running_write_bytes() < 17 * MIB);
        assert!(fast_sent < 20, "fast device got {fast_sent} writes");
        assert_eq!(finished.len(), fast_sent);
        assert_eq!(
            policy.writes.len(),
            200 - policy.in_flight.len() - fast_sent
        );
    }

    #[test]
    fn global_cap_finishes_every_request_exactly_once() {
        let mut policy = GlobalCap::new(&context(), parameters(64 * 1024, 0));
        let total = 60u64;
        for id in 0..total {
            let direction = if id % 3 == 0 {
                Direction::Read
            } else {
                Direction::Write
            };
            policy.submit(0, request(id, (id % 2) as usize, direction, 16 * 1024));
        }
        // One step a nanosecond, completing the oldest outstanding command.
        let steps = Steps {
            first_ns: 1,
            step_ns: 1,
            completions_per_step: 1,
            device_of: &|_| 0,
        };
        finish_all(&mut policy, total, steps, |policy| {
            assert!(policy.running_write_bytes() < 64 * 1024 + 16 * 1024);
        });
        assert_eq!(policy.running_write_bytes(), 0);
    }
}
