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
use tailguard_core::request::NANOS_PER_MILLISECOND;
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
    /// Whether it seeks (a disk): what a host learns from the kernel's
    /// `queue/rotational` flag.
    pub rotational: bool,
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

/// The policies the simulator compares (`--policy`, a scenario's
/// `policies` and `[policy.NAME]` tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyName {
    /// The real core, one dispatcher per device.
    Tailguard,
    /// No scheduler, unlimited depth.
    Fifo,
    /// One byte cap on in-flight writes shared by all devices.
    GlobalCap,
    /// CFQ's sync preference.
    Cfq,
    /// CFQ with the FIFO-expiry fix.
    CfqFixed,
    /// mq-deadline's expiries.
    Deadline,
}

impl PolicyName {
    /// Every policy, in the order the command line lists them.
    pub const ALL: [Self; 6] = [
        Self::Tailguard,
        Self::Fifo,
        Self::GlobalCap,
        Self::Cfq,
        Self::CfqFixed,
        Self::Deadline,
    ];

    /// The policy's name on the command line, in scenario files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tailguard => "tailguard",
            Self::Fifo => "fifo",
            Self::GlobalCap => "global-cap",
            Self::Cfq => "cfq",
            Self::CfqFixed => "cfq-fixed",
            Self::Deadline => "deadline",
        }
    }

    /// Parses a name; the error, for `key`, lists the names there are.
    pub fn parse(name: &str, key: impl Into<String>) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|policy| policy.name() == name)
            .ok_or_else(|| {
                ConfigError::new(
                    key,
                    format!(
                        "unknown policy `{name}`; use one of: {}",
                        Self::ALL.map(Self::name).join(", ")
                    ),
                )
            })
    }
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// Builds a policy. `parameters` is the scenario's optional `[policy.NAME]`
/// table (for example `hirunningspace_bytes` for `global-cap`).
pub fn build(
    name: PolicyName,
    context: &PolicyContext,
    parameters: &toml::Table,
) -> Result<Box<dyn Policy>, ConfigError> {
    match name {
        PolicyName::Tailguard => Ok(Box::new(tailguard::TailguardPolicy::new(
            context,
            crate::device::parse(parameters)?,
        )?)),
        PolicyName::Fifo => {
            refuse_any_key(parameters)?;
            Ok(Box::new(fifo::Fifo::new(context)))
        }
        PolicyName::GlobalCap => Ok(Box::new(global_cap::GlobalCap::new(
            context,
            crate::device::parse(parameters)?,
        ))),
        PolicyName::Cfq => Ok(Box::new(cfq::Cfq::new(
            context,
            crate::device::parse(parameters)?,
            false,
        ))),
        PolicyName::CfqFixed => Ok(Box::new(cfq::Cfq::new(
            context,
            crate::device::parse(parameters)?,
            true,
        ))),
        PolicyName::Deadline => Ok(Box::new(deadline::Deadline::new(
            context,
            crate::device::parse(parameters)?,
        ))),
    }
}

/// Checks a `[policy.NAME]` table without building the policy: every key is
/// one of the policy's parameters and every value one it takes, so a table
/// for a policy that does not run is checked as strictly as one that does.
/// `fifo` takes no parameters, so any key is refused.
pub fn validate_parameters(name: PolicyName, parameters: &toml::Table) -> Result<(), ConfigError> {
    use crate::device::parse;
    match name {
        PolicyName::Tailguard => parse::<tailguard::TailguardParameters>(parameters)?.validate(),
        PolicyName::Fifo => refuse_any_key(parameters),
        PolicyName::GlobalCap => parse::<global_cap::GlobalCapParameters>(parameters).map(drop),
        PolicyName::Cfq | PolicyName::CfqFixed => parse::<cfq::CfqParameters>(parameters).map(drop),
        PolicyName::Deadline => parse::<deadline::DeadlineParameters>(parameters).map(drop),
    }
}

/// Refuses a parameter table with any key in it, naming the first key (for a
/// policy that takes no parameters).
fn refuse_any_key(parameters: &toml::Table) -> Result<(), ConfigError> {
    match parameters.keys().next() {
        Some(key) => Err(ConfigError::new(
            key.as_str(),
            format!("unknown parameter `{key}`: this policy takes none; remove it"),
        )),
        None => Ok(()),
    }
}

/// Whether a request's direction is a write (helper for policies).
pub fn is_write(request: &SimRequest) -> bool {
    request.direction == Direction::Write
}

/// A request waiting in a baseline policy's FIFO, with the time it expires
/// (`cfq` and `deadline` stamp every request on arrival).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queued {
    /// The request.
    pub request: SimRequest,
    /// When it expires.
    pub deadline_ns: Nanos,
}

impl Queued {
    /// `request`, arriving at `now` and expiring `expire_ms` milliseconds later
    /// (saturating at the end of time).
    pub(crate) fn new(request: SimRequest, now: Nanos, expire_ms: u64) -> Self {
        let expire_ns = expire_ms.saturating_mul(NANOS_PER_MILLISECOND);
        Self {
            request,
            deadline_ns: now.saturating_add(expire_ns),
        }
    }
}

/// The state of device `index`, growing `devices` with defaults when a request
/// names a device the policy has not seen yet.
pub(crate) fn device_state<T: Default>(devices: &mut Vec<T>, index: usize) -> &mut T {
    if devices.len() <= index {
        devices.resize_with(index + 1, T::default);
    }
    &mut devices[index]
}
