//! Scheduling policies the simulator can compare.
//!
//! A policy sits between the workloads and the devices. Workloads [`Policy::submit`]
//! requests; the engine calls [`Policy::dispatch`] after every event, and the
//! policy moves whatever it lets go to the devices as [`Submission`]s; devices
//! report finished tokens through [`Policy::complete`]. A policy that splits a
//! request into several device commands reports the original request complete only
//! when the last piece is done.
//!
//! - `tailguard`: the real core ([`tailguard_core::Dispatcher`]), one per device.
//! - `fifo`: no scheduler, unlimited depth (the kernel's `none`).
//! - `global-cap`: FreeBSD's `hirunningspace`: one byte cap on in-flight writes
//!   shared by all devices, with hi/lo watermarks (seed 001).
//! - `cfq` and `cfq-fixed`: old CFQ's sync preference (seed 002), without and with
//!   the FIFO-expiry fix.
//! - `deadline`: mq-deadline's read/write expiry and `writes_starved`.
//!
//! Policies never read a clock: `now` is passed in. When a policy wants to act at
//! a time where nothing else happens (an expiry), it says so in
//! [`Policy::next_timer_at`] and the engine calls `dispatch` then.

use crate::device::DeviceRequest;
use crate::ConfigError;
use tailguard_core::{DeviceProfile, Direction, Nanos, RateLimit};

pub mod cfq;
pub mod deadline;
pub mod fifo;
pub mod global_cap;
pub mod tailguard;
#[cfg(test)]
mod testing;

/// A request as a workload submits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimRequest {
    /// Unique for the whole run.
    pub id: u64,
    /// Index of the scenario class.
    pub class: usize,
    /// Index of the scenario device.
    pub device: usize,
    /// Read or write.
    pub direction: Direction,
    /// Byte offset on the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub length_bytes: u64,
    /// Whether the submitter waits for it (what cfq-like policies look at).
    pub sync: bool,
}

/// A command a policy sends to a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submission {
    /// Index of the scenario device.
    pub device: usize,
    /// The [`SimRequest::id`] this command is (a piece of).
    pub request_id: u64,
    /// The command itself; its token comes back through [`Policy::complete`].
    pub command: DeviceRequest,
}

/// A device as policies see it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// The scenario's name for it.
    pub name: String,
    /// What calibration would measure on it.
    pub profile: DeviceProfile,
}

/// A class as policies see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassInfo {
    /// The scenario's name for it.
    pub name: String,
    /// Its shares (1..=10000).
    pub shares: u32,
    /// Its cap, if any (only the `tailguard` policy enforces caps).
    pub rate_limit: Option<RateLimit>,
}

/// What a policy is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyContext {
    /// Devices, by scenario index.
    pub devices: Vec<DeviceInfo>,
    /// Classes, by scenario index.
    pub classes: Vec<ClassInfo>,
}

/// A scheduling policy; see the module docs.
pub trait Policy {
    /// The policy's name, as given to `--policy`.
    fn name(&self) -> &'static str;

    /// A workload submits a request at `now`.
    fn submit(&mut self, now: Nanos, request: SimRequest);

    /// A device finished the command with `token`. Appends to `finished` the ids
    /// of requests that are now complete (all their pieces done).
    fn complete(&mut self, now: Nanos, device: usize, token: u64, finished: &mut Vec<u64>);

    /// Appends every command the policy lets go at `now`.
    fn dispatch(&mut self, now: Nanos, out: &mut Vec<Submission>);

    /// When the policy next needs `dispatch` called although nothing else happens.
    fn next_timer_at(&self) -> Option<Nanos>;
}

/// The policy names `--policy` accepts.
pub const POLICY_NAMES: [&str; 6] = [
    "tailguard",
    "fifo",
    "global-cap",
    "cfq",
    "cfq-fixed",
    "deadline",
];

/// Builds a policy by name. `parameters` is the scenario's optional
/// `[policy.NAME]` table (for example `hirunningspace_bytes` for `global-cap`).
pub fn build(
    name: &str,
    context: &PolicyContext,
    parameters: &toml::Table,
) -> Result<Box<dyn Policy>, ConfigError> {
    match name {
        "tailguard" => Ok(Box::new(tailguard::TailguardPolicy::new(
            context,
            crate::device::parse(parameters)?,
        )?)),
        "fifo" => Ok(Box::new(fifo::Fifo::new(context))),
        "global-cap" => Ok(Box::new(global_cap::GlobalCap::new(
            context,
            crate::device::parse(parameters)?,
        ))),
        "cfq" => Ok(Box::new(cfq::Cfq::new(
            context,
            crate::device::parse(parameters)?,
            false,
        ))),
        "cfq-fixed" => Ok(Box::new(cfq::Cfq::new(
            context,
            crate::device::parse(parameters)?,
            true,
        ))),
        "deadline" => Ok(Box::new(deadline::Deadline::new(
            context,
            crate::device::parse(parameters)?,
        ))),
        other => Err(ConfigError::new(
            "policy",
            format!(
                "unknown policy `{other}`; use one of: {}",
                POLICY_NAMES.join(", ")
            ),
        )),
    }
}

/// Whether a request's direction is a write (helper for policies).
pub fn is_write(request: &SimRequest) -> bool {
    request.direction == Direction::Write
}
