//! # tailguard-sim: a deterministic device simulator
//!
//! A discrete-event simulator in virtual time that drives tailguard's scheduling
//! core (and the baselines it is compared with) against models of real devices.
//! The same scenario file and seed always give byte-identical results: every
//! random draw comes from generators seeded from the scenario seed, events at equal
//! times are ordered by a sequence number, and nothing reads a clock.
//!
//! - [`device`]: device models (`nvme`, `sata-ssd`, `hdd`, `usb-flash`).
//! - [`policy`]: the policies (`tailguard` and the baselines).
//! - [`scenario`]: the scenario file format.
//! - [`workload`]: jobs that generate requests (closed and open loop, bursts).
//! - [`engine`]: the event loop that ties them together.
//! - [`report`]: per-class results, as a table or JSON.

use std::fmt;

pub mod device;
pub mod engine;
pub mod policy;
pub mod report;
pub mod scenario;
pub mod workload;

/// The crate's error: a scenario (or a configuration value in it) that
/// cannot be used: which file, which key, what is wrong, the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, if it came from one.
    pub file: Option<String>,
    /// Where the problem is, as a dotted key path (`device[1].model`).
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ConfigError {
    /// A new error for `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: None,
            key: key.into(),
            message: message.into(),
        }
    }

    /// Names the file the error was found in.
    pub fn in_file(mut self, path: &std::path::Path) -> Self {
        self.file = Some(path.display().to_string());
        self
    }

    /// A core error about a device profile, keyed `profile.KEY` when the core
    /// names the profile key at fault, `profile` otherwise.
    pub fn from_profile(error: tailguard_core::CoreError) -> Self {
        match error {
            tailguard_core::CoreError::InvalidProfile { key, message } => {
                Self::new(format!("profile.{key}"), message)
            }
            other => Self::new("profile", other.to_string()),
        }
    }

    /// Prefixes the key with its enclosing table (`device[0]` + `model`).
    pub fn within(mut self, prefix: &str) -> Self {
        self.key = format!("{prefix}.{}", self.key);
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(formatter, "{file}: ")?;
        }
        write!(formatter, "`{}`: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}
