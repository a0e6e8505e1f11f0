//! The `usb-flash` device model (stub: to be written).

use super::{DeviceCompletion, DeviceModel, DeviceRequest};
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Nanos};

/// Parameters of the `usb-flash` model.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsbFlashParameters {}

/// The `usb-flash` model.
pub struct UsbFlash {
    _parameters: UsbFlashParameters,
}

impl UsbFlash {
    /// Builds the model.
    pub fn new(parameters: UsbFlashParameters, _seed: u64) -> Self {
        Self {
            _parameters: parameters,
        }
    }
}

impl DeviceModel for UsbFlash {
    fn model_name(&self) -> &'static str {
        "usb-flash"
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
