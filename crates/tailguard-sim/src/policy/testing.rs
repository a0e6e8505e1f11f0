//! Fixtures shared by the policies' unit tests.

use super::{ClassInfo, PolicyContext, SimRequest, Submission};
use tailguard_core::Direction;

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
