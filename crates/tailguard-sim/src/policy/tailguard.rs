//! The `tailguard` policy (stub: to be written).

use super::{Policy, PolicyContext, SimRequest, Submission};
#[allow(unused_imports)]
use serde::Deserialize;
use tailguard_core::Nanos;

/// Parameters of the policy.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TailguardParameters {}

/// The `tailguard` policy.
pub struct TailguardPolicy {}

impl TailguardPolicy {
    /// Builds the policy.
    pub fn new(_context: &PolicyContext, _parameters: TailguardParameters) -> Result<Self, crate::ConfigError> {
        Ok(Self {})
    }
}

impl Policy for TailguardPolicy {
    fn name(&self) -> &'static str {
        "tailguard"
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
