//! Fixtures shared by the policies' unit tests.

use super::{ClassInfo, Policy, PolicyContext, SimRequest, Submission};
use tailguard_core::{Direction, Nanos};

/// A context with one class of 100 shares and no device profiles (the baseline
/// policies grow their per-device state on demand).
pub(crate) fn context() -> PolicyContext {
    PolicyContext {
        devices: Vec::new(),
        classes: vec![ClassInfo {
            name: "all".into(),
            shares: 100,
            rate_limit: None,
        }],
    }
}

/// A request of class 0; reads are sync, writes async unless `sync` says.
pub(crate) fn request(
    id: u64,
    device: usize,
    direction: Direction,
    length_bytes: u64,
    sync: bool,
) -> SimRequest {
    SimRequest {
        id,
        class: 0,
        device,
        direction,
        offset_bytes: id * length_bytes,
        length_bytes,
        sync,
    }
}

/// The request ids of dispatched commands, in order.
pub(crate) fn ids(out: &[Submission]) -> Vec<u64> {
    out.iter().map(|submission| submission.request_id).collect()
}

/// How [`finish_all`] drives a policy.
pub(crate) struct Steps<'a> {
    /// The `now` of the first step.
    pub first_ns: Nanos,
    /// How far `now` moves between steps.
    pub step_ns: Nanos,
    /// Outstanding commands completed per step, oldest first.
    pub completions_per_step: usize,
    /// The device a request id was submitted to.
    pub device_of: &'a dyn Fn(u64) -> usize,
}

/// Drives `policy`, holding requests `0..total`, until every one finished: each
/// step dispatches, then completes the oldest outstanding commands, then calls
/// `after_step`. Asserts that a step never finds nothing outstanding while
/// requests remain, and that every request was sent and finished exactly once.
/// Returns the ids in the order they were sent.
pub(crate) fn finish_all<P: Policy>(
    policy: &mut P,
    total: u64,
    steps: Steps<'_>,
    mut after_step: impl FnMut(&P),
) -> Vec<u64> {
    let mut sent = Vec::new();
    let mut finished = Vec::new();
    let mut now = steps.first_ns;
    while finished.len() < total as usize {
        let mut out = Vec::new();
        policy.dispatch(now, &mut out);
        sent.extend(ids(&out));
        let pending: Vec<u64> = sent
            .iter()
            .copied()
            .filter(|id| !finished.contains(id))
            .collect();
        assert!(!pending.is_empty(), "stalled with nothing in flight");
        for id in pending.iter().take(steps.completions_per_step) {
            policy.complete(now, (steps.device_of)(*id), *id, &mut finished);
        }
        after_step(policy);
        now += steps.step_ns;
    }
    let all: Vec<u64> = (0..total).collect();
    let mut sorted_sent = sent.clone();
    sorted_sent.sort_unstable();
    finished.sort_unstable();
    assert_eq!(sorted_sent, all);
    assert_eq!(finished, all);
    sent
}
