//! The `hdd` device model (stub: to be written).

use super::{DeviceCompletion, DeviceModel, DeviceRequest};
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Nanos};

/// Parameters of the `hdd` model.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HddParameters {}

/// The `hdd` model.
pub struct Hdd {
    _parameters: HddParameters,
}

impl Hdd {
    /// Builds the model.
    pub fn new(parameters: HddParameters, _seed: u64) -> Self {
        Self {
            _parameters: parameters,
        }
    }
}

impl DeviceModel for Hdd {
    fn model_name(&self) -> &'static str {
        "hdd"
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
