//! The `sata-ssd` device model (stub: to be written).

use super::{DeviceCompletion, DeviceModel, DeviceRequest};
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Nanos};

/// Parameters of the `sata-ssd` model.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SataSsdParameters {}

/// The `sata-ssd` model.
pub struct SataSsd {
    _parameters: SataSsdParameters,
}

impl SataSsd {
    /// Builds the model.
    pub fn new(parameters: SataSsdParameters, _seed: u64) -> Self {
        Self {
            _parameters: parameters,
        }
    }
}

impl DeviceModel for SataSsd {
    fn model_name(&self) -> &'static str {
        "sata-ssd"
    }
    fn submit(&mut self, _now: Nanos, _request: DeviceRequest) {
        unimplemented!()
    }
    fn next_event_at(&self) -> Option<Nanos> {
        unimplemented!()
    }
    fn advance(&mut self, _now: Nanos, _completions: &mut Vec<DeviceCompletion>) {
        unimplemented!()
    }
    fn profile(&self) -> DeviceProfile {
        unimplemented!()
    }
    fn outstanding(&self) -> usize {
        unimplemented!()
    }
}
