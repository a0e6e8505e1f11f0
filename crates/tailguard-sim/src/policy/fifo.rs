//! The `fifo` policy (stub: to be written).

use super::{Policy, PolicyContext, SimRequest, Submission};
#[allow(unused_imports)]
use serde::Deserialize;
use tailguard_core::Nanos;

/// The `fifo` policy.
pub struct Fifo {}

impl Fifo {
    /// Builds the policy.
    pub fn new(_context: &PolicyContext) -> Self {
        Self {}
    }
}

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn submit(&mut self, _now: Nanos, _request: SimRequest) {
        unimplemented!()
    }
    fn complete(&mut self, _now: Nanos, _device: usize, _token: u64, _finished: &mut Vec<u64>) {
        unimplemented!()
    }
    fn dispatch(&mut self, _now: Nanos, _out: &mut Vec<Submission>) {
        unimplemented!()
    }
    fn next_timer_at(&self) -> Option<Nanos> {
        unimplemented!()
    }
}
