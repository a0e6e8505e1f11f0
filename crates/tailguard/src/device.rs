//! Mapping files to devices (stub: to be written).

/// Identifies a device: files with equal ids share a dispatcher and a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u64);
