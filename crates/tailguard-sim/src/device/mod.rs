//! Simulated devices.
//!
//! A device model is a deterministic state machine in virtual time. The simulation
//! engine hands it requests with [`DeviceModel::submit`], asks when its next
//! internal event happens with [`DeviceModel::next_event_at`], and moves it forward
//! with [`DeviceModel::advance`], which reports every request finished by then.
//! Models never see classes or policies: a device only sees what a host controller
//! would see, commands in arrival order.
//!
//! Every model keeps a host-side FIFO in front of its own command queue (NCQ,
//! NVMe submission queues), so a policy with unlimited depth (`fifo`) can hand it
//! any number of requests, exactly like the kernel's `none` scheduler.
//!
//! Each model documents its parameters at the top of its file. All parameters are
//! overridable from a scenario's `[[device]]` table; unknown keys are errors.
//! Models draw randomness only from the seeded generator they are built with.

use crate::ConfigError;
use serde::de::DeserializeOwned;
use tailguard_core::{DeviceProfile, Direction, Nanos};

pub mod common;
pub mod hdd;
pub mod nvme;
pub mod sata_ssd;
pub mod usb_flash;

/// A command as it reaches a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRequest {
    /// The submitter's token, returned on completion.
    pub token: u64,
    /// Read or write (a write of zero bytes is a flush).
    pub direction: Direction,
    /// Byte offset on the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub length_bytes: u64,
}

/// A command the device finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCompletion {
    /// The token given at submission.
    pub token: u64,
    /// When it finished.
    pub completed_at: Nanos,
}

/// A simulated device; see the module docs.
pub trait DeviceModel: Send {
    /// The model's name, as in scenario files (`nvme`, `sata-ssd`, ...).
    fn model_name(&self) -> &'static str;

    /// A command arrives at `now`. `now` never decreases between calls.
    fn submit(&mut self, now: Nanos, request: DeviceRequest);

    /// The time of the next internal event (a completion or a state change), or
    /// `None` when the device is idle and holds no command.
    fn next_event_at(&self) -> Option<Nanos>;

    /// Moves the device to `now` (never before a time already passed), appending
    /// every command finished at or before `now`, in completion order.
    fn advance(&mut self, now: Nanos, completions: &mut Vec<DeviceCompletion>);

    /// What calibration would measure on this device: random 4 KiB IOPS and
    /// streaming bandwidth per direction, its largest request, and the latency
    /// target the model suggests. Derived from the model's parameters.
    fn profile(&self) -> DeviceProfile;

    /// Commands the device holds: queued at the host side, queued inside, in service.
    fn outstanding(&self) -> usize;
}

/// The device model names a scenario may use.
pub const MODEL_NAMES: [&str; 4] = ["nvme", "sata-ssd", "hdd", "usb-flash"];

/// Builds a model by name from a scenario's `[[device]]` table (with `name` and
/// `model` already removed), seeding its random generator with `seed`.
pub fn build(
    model: &str,
    parameters: &toml::Table,
    seed: u64,
) -> Result<Box<dyn DeviceModel>, ConfigError> {
    match model {
        "nvme" => Ok(Box::new(nvme::Nvme::new(parse(parameters)?, seed))),
        "sata-ssd" => Ok(Box::new(sata_ssd::SataSsd::new(parse(parameters)?, seed))),
        "hdd" => Ok(Box::new(hdd::Hdd::new(parse(parameters)?, seed))),
        "usb-flash" => Ok(Box::new(usb_flash::UsbFlash::new(parse(parameters)?, seed))),
        other => Err(ConfigError::new(
            "model",
            format!(
                "unknown device model `{other}`; use one of: {}",
                MODEL_NAMES.join(", ")
            ),
        )),
    }
}

/// Parses a model's (or policy's) parameter struct from a table; the message
/// names the bad key, and the caller adds where the table is.
pub fn parse<T: DeserializeOwned>(parameters: &toml::Table) -> Result<T, ConfigError> {
    T::deserialize(toml::Value::Table(parameters.clone()))
        .map_err(|error| ConfigError::new("parameters", error.to_string().trim_end().to_string()))
}
