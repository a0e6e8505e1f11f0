//! Scenario files: devices, classes and jobs, in TOML.
//!
//! A scenario says what runs, never how it is scheduled: the policy is chosen on
//! the command line, so one file compares several. Every key is documented in the
//! README ("Scenario files"); these names are the contract:
//!
//! ```toml
//! duration_s = 20          # simulated seconds
//! seed = 7                 # optional, default 1; --seed overrides
//! policies = ["fifo", "tailguard"]  # optional: compared when --policy is not given
//!
//! [[device]]
//! name = "disk"
//! model = "sata-ssd"       # nvme | sata-ssd | hdd | usb-flash
//! # any model parameter, e.g. ncq_depth = 16
//! [device.profile]         # optional: what the scheduler believes (as if calibrated)
//! latency_target_us = 300
//!
//! [[class]]
//! name = "reads"
//! shares = 100             # 1..=10000
//! limit_bytes_per_s = "50m" # optional cap, bytes/s (binary suffixes); tailguard policy only
//! limit_iops = 2000        # optional cap, requests/s; tailguard policy only
//! limit_burst_ms = 20      # optional, how much of the cap an idle class may spend at once
//!
//! [[job]]
//! class = "reads"
//! device = "disk"
//! pattern = "randread"     # randread | randwrite | seqread | seqwrite
//! block_size = "4k"
//! queue_depth = 8          # closed loop; or rate_iops = N (open loop); or burst_bytes
//! ```
//!
//! Parsing is strict: unknown keys, unknown names and impossible values are errors
//! that name the key and say how to fix it, and nothing panics on bad input.

use crate::device::{self, DeviceModel};
use crate::policy::{ClassInfo, DeviceInfo, PolicyContext, PolicyName};
use crate::ConfigError;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use tailguard_core::fair_queue::{SHARES_MAX, SHARES_MIN};
use tailguard_core::CoreError;
use tailguard_core::{
    DeviceProfile, Direction, Nanos, RateLimit, DEFAULT_BURST_NS, NANOS_PER_MILLISECOND,
    NANOS_PER_SECOND_F64,
};

/// The longest scenario accepted, in simulated seconds (one day).
pub const DURATION_S_MAX: f64 = 86_400.0;
/// The largest block size accepted (1 GiB).
pub const BLOCK_SIZE_BYTES_MAX: u64 = 1 << 30;
/// The deepest closed-loop queue accepted per job instance.
pub const QUEUE_DEPTH_MAX: u32 = 65_536;
/// The most instances (`numjobs`) of one job.
pub const NUMJOBS_MAX: u32 = 4_096;
/// Most requests one job (all its instances) may hold in flight at once, by
/// `queue_depth` or by `burst_bytes`: 16 GiB of 4 KiB requests, and a bound
/// on the simulator's memory (each held request costs about a hundred bytes).
pub const REQUESTS_HELD_MAX: u64 = 1 << 22;
/// Most requests one job (all its instances) may bring by open-loop arrivals
/// over its run, and all the jobs of a scenario together: enough for a
/// million IOPS for half a minute, and a bound on how long a simulation runs
/// and on what a device that falls behind queues (each queued request costs
/// about a hundred bytes: at most a few GB).
pub const ARRIVALS_MAX: u64 = 1 << 25;
/// The size of the address space a job uses when it names none (16 GiB).
pub const REGION_BYTES_DEFAULT: u64 = 16 << 30;

/// A byte count written as an integer or with a binary suffix (`4k`, `1m`, `2g`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BytesVisitor)
    }
}

/// Reads a plain `u64` size field (`#[serde(deserialize_with = ...)]`) as
/// [`Bytes`] reads a size: an integer or a string with a binary suffix.
pub fn deserialize_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    Bytes::deserialize(deserializer).map(|bytes| bytes.0)
}

/// Reads a size from an integer or a string, with errors that say what a size
/// looks like (instead of serde's "did not match any variant").
struct BytesVisitor;

impl de::Visitor<'_> for BytesVisitor {
    type Value = Bytes;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a size: a number of bytes, or a string such as \"4k\", \"1m\", \"2g\"")
    }

    fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Bytes, E> {
        Ok(Bytes(bytes))
    }

    fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<Bytes, E> {
        u64::try_from(bytes).map(Bytes).map_err(|_| {
            E::custom(format!(
                "{bytes} is negative; a size is a number of bytes, e.g. 4096 or \"4k\""
            ))
        })
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Bytes, E> {
        parse_bytes(text).map(Bytes).map_err(E::custom)
    }
}

/// Parses `4096`, `4k`, `128K`, `1m`, `2g`, `1t` (powers of 1024; a trailing `b`
/// or `ib` is allowed: `4KiB`, `1MB`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let stripped = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, multiplier) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    let value: u64 = digits.trim().parse().map_err(|_| {
        format!("`{text}` is not a size; write a number of bytes or e.g. \"4k\", \"1m\", \"2g\"")
    })?;
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// A job's access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Random aligned reads.
    Randread,
    /// Random aligned writes.
    Randwrite,
    /// Sequential reads, wrapping at the end of the region.
    Seqread,
    /// Sequential writes, wrapping at the end of the region.
    Seqwrite,
}

impl Pattern {
    /// The direction of its requests.
    pub fn direction(self) -> Direction {
        match self {
            Self::Randread | Self::Seqread => Direction::Read,
            Self::Randwrite | Self::Seqwrite => Direction::Write,
        }
    }

    /// Whether offsets are drawn at random.
    pub fn is_random(self) -> bool {
        matches!(self, Self::Randread | Self::Randwrite)
    }
}

/// Overrides of what the scheduler believes about a device.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverrides {
    /// Random 4 KiB reads per second.
    pub read_iops: Option<f64>,
    /// Random 4 KiB writes per second.
    pub write_iops: Option<f64>,
    /// Streaming read bandwidth, bytes per second.
    pub read_bandwidth: Option<f64>,
    /// Streaming write bandwidth, bytes per second.
    pub write_bandwidth: Option<f64>,
    /// Largest request; larger ones are split.
    pub max_request_bytes: Option<Bytes>,
    /// The latency target.
    pub latency_target_us: Option<u64>,
}

impl ProfileOverrides {
    fn apply(&self, mut profile: DeviceProfile) -> DeviceProfile {
        profile.read_iops = self.read_iops.unwrap_or(profile.read_iops);
        profile.write_iops = self.write_iops.unwrap_or(profile.write_iops);
        profile.read_bandwidth = self.read_bandwidth.unwrap_or(profile.read_bandwidth);
        profile.write_bandwidth = self.write_bandwidth.unwrap_or(profile.write_bandwidth);
        if let Some(Bytes(bytes)) = self.max_request_bytes {
            profile.max_request_bytes = bytes;
        }
        profile.latency_target_us = self.latency_target_us.unwrap_or(profile.latency_target_us);
        profile
    }
}

/// A scenario's device: a model, its parameters, and the profile policies use.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSpec {
    /// The name jobs refer to.
    pub name: String,
    /// The model.
    pub model: device::ModelName,
    /// Model parameters, as written.
    pub parameters: toml::Table,
    /// What the scheduler believes about the device.
    pub profile: DeviceProfile,
}

/// A scenario's class.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// The name jobs refer to.
    pub name: String,
    /// Shares, 1..=10000.
    pub shares: u32,
    /// A cap in bytes per second (`limit_bytes_per_s`), enforced by the
    /// `tailguard` policy; the baselines have no such cap and ignore it.
    #[serde(default)]
    pub limit_bytes_per_s: Option<Bytes>,
    /// A cap in requests per second (`limit_iops`; not the job's `rate_iops`,
    /// which is an arrival rate), enforced by the `tailguard` policy.
    #[serde(default)]
    pub limit_iops: Option<u64>,
    /// The caps' burst in milliseconds (`limit_burst_ms`, default 20).
    #[serde(default)]
    pub limit_burst_ms: Option<u64>,
}

impl ClassSpec {
    /// The class's rate limit, if it has a cap; validated by
    /// [`Scenario::from_toml`].
    pub fn rate_limit(&self) -> Option<RateLimit> {
        if self.limit_bytes_per_s.is_none() && self.limit_iops.is_none() {
            return None;
        }
        Some(RateLimit {
            bytes_per_s: self.limit_bytes_per_s.map(|bytes| bytes.0),
            iops: self.limit_iops,
            burst_ns: self.limit_burst_ms.map_or(DEFAULT_BURST_NS, |ms| {
                ms.saturating_mul(NANOS_PER_MILLISECOND)
            }),
        })
    }
}

/// How a job generates requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrival {
    /// Keep this many requests outstanding per instance.
    ClosedLoop {
        /// Outstanding requests per instance.
        queue_depth: u32,
    },
    /// Poisson arrivals at this mean rate per instance; latency counts from the
    /// intended arrival.
    OpenLoop {
        /// Mean arrivals per second per instance.
        rate_iops: f64,
    },
    /// Everything submitted at once at the start, as kernel writeback does.
    Burst {
        /// Total bytes per instance, submitted as `ceil(burst_bytes /
        /// block_size)` whole block-size requests (rounded up).
        burst_bytes: u64,
    },
}

/// A scenario's job, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    /// Its name (default `job<N>`).
    pub name: String,
    /// Index into [`Scenario::classes`].
    pub class: usize,
    /// Index into [`Scenario::devices`].
    pub device: usize,
    /// Access pattern.
    pub pattern: Pattern,
    /// Bytes per request.
    pub block_size_bytes: u64,
    /// How requests arrive.
    pub arrival: Arrival,
    /// Identical instances (each with its own depth or rate, and its own
    /// sequential cursor).
    pub numjobs: u32,
    /// When it starts.
    pub start_ns: Nanos,
    /// When it stops submitting.
    pub stop_ns: Nanos,
    /// Whether the submitter waits for its requests (cfq-like policies look).
    pub sync: bool,
    /// First byte of the region it addresses.
    pub offset_bytes: u64,
    /// Size of the region it addresses.
    pub region_bytes: u64,
}

/// A parsed and validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Simulated duration.
    pub duration_ns: Nanos,
    /// The seed (from the file, or the default).
    pub seed: u64,
    /// Devices, in file order.
    pub devices: Vec<DeviceSpec>,
    /// Classes, in file order.
    pub classes: Vec<ClassSpec>,
    /// Jobs, in file order.
    pub jobs: Vec<JobSpec>,
    /// `[policy.NAME]` tables.
    pub policy_parameters: BTreeMap<PolicyName, toml::Table>,
    /// The policies to compare when the command line names none.
    pub policies: Vec<PolicyName>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    duration_s: f64,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default)]
    device: Vec<toml::Table>,
    #[serde(default)]
    class: Vec<ClassSpec>,
    #[serde(default)]
    job: Vec<RawJob>,
    #[serde(default)]
    policy: BTreeMap<String, toml::Table>,
    #[serde(default)]
    policies: Vec<String>,
}

fn default_seed() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Option<String>,
    class: String,
    device: String,
    pattern: Pattern,
    block_size: Bytes,
    queue_depth: Option<u32>,
    rate_iops: Option<f64>,
    burst_bytes: Option<Bytes>,
    #[serde(default = "default_numjobs")]
    numjobs: u32,
    start_s: Option<f64>,
    stop_s: Option<f64>,
    sync: Option<bool>,
    offset: Option<Bytes>,
    size: Option<Bytes>,
}

/// Checks a class's caps, naming the key at fault.
/// The `[[device]]` tables as devices, an error naming the table's index.
fn parse_devices(tables: &[toml::Table]) -> Result<Vec<DeviceSpec>, ConfigError> {
    tables
        .iter()
        .enumerate()
        .map(|(index, table)| {
            parse_device(table).map_err(|error| error.within(&format!("device[{index}]")))
        })
        .collect()
}

/// Every class's shares in range and rate limit valid.
fn validate_classes(classes: &[ClassSpec]) -> Result<(), ConfigError> {
    for (index, class) in classes.iter().enumerate() {
        if !(SHARES_MIN..=SHARES_MAX).contains(&class.shares) {
            return Err(ConfigError::new(
                format!("class[{index}].shares"),
                format!(
                    "{} is out of range; shares go from {SHARES_MIN} to {SHARES_MAX}",
                    class.shares
                ),
            ));
        }
        validate_rate_limit(class).map_err(|error| error.within(&format!("class[{index}]")))?;
    }
    Ok(())
}

/// The `[policy.NAME]` parameter tables and the `policies` list, with their
/// names parsed and every table checked against its policy's parameters,
/// whichever policies run.
fn parse_policies(
    parameters: BTreeMap<String, toml::Table>,
    names: &[String],
) -> Result<(BTreeMap<PolicyName, toml::Table>, Vec<PolicyName>), ConfigError> {
    let policy_parameters = parameters
        .into_iter()
        .map(|(name, parameters)| {
            let key = format!("policy.{name}");
            let policy = PolicyName::parse(&name, key.as_str())?;
            crate::policy::validate_parameters(policy, &parameters)
                .map_err(|error| error.within(&key))?;
            Ok((policy, parameters))
        })
        .collect::<Result<BTreeMap<_, _>, ConfigError>>()?;
    let policies = names
        .iter()
        .map(|name| PolicyName::parse(name, "policies"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((policy_parameters, policies))
}

fn validate_rate_limit(class: &ClassSpec) -> Result<(), ConfigError> {
    if class.limit_burst_ms.is_some() && class.rate_limit().is_none() {
        return Err(ConfigError::new(
            "limit_burst_ms",
            "a burst needs a cap; add limit_bytes_per_s or limit_iops, or remove it",
        ));
    }
    let Some(limit) = class.rate_limit() else {
        return Ok(());
    };
    limit.validate().map_err(|error| {
        let key = match error {
            CoreError::ZeroRate("bytes_per_s") => "limit_bytes_per_s",
            CoreError::ZeroRate(_) => "limit_iops",
            _ => "limit_burst_ms",
        };
        let message = match error {
            CoreError::ZeroRate(_) => {
                "must be at least 1 (a zero cap would stop the class); remove the key for no cap"
                    .to_string()
            }
            _ => format!(
                "must be between 1 and {} ms",
                tailguard_core::rate_limit::BURST_NS_MAX / NANOS_PER_MILLISECOND
            ),
        };
        ConfigError::new(key, message)
    })
}

fn default_numjobs() -> u32 {
    1
}

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        read_config_file(path, Self::from_toml)
    }

    /// Parses and validates a scenario from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawScenario = toml::from_str(text).map_err(|error| toml_error(text, &error))?;
        validate_duration(raw.duration_s)?;
        let duration_ns = seconds_to_ns(raw.duration_s);
        let devices = parse_devices(&raw.device)?;
        let classes = raw.class;
        validate_names(devices.iter().map(|device| device.name.as_str()), "device")?;
        validate_names(classes.iter().map(|class| class.name.as_str()), "class")?;
        validate_printable(devices.iter().map(|device| device.name.as_str()), "device")?;
        validate_printable(classes.iter().map(|class| class.name.as_str()), "class")?;
        validate_classes(&classes)?;
        let jobs = raw
            .job
            .into_iter()
            .enumerate()
            .map(|(index, job)| {
                parse_job(index, job, &devices, &classes, duration_ns)
                    .map_err(|error| error.within(&format!("job[{index}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        validate_printable(jobs.iter().map(|job| job.name.as_str()), "job")?;
        if jobs.is_empty() {
            return Err(ConfigError::new(
                "job",
                "the scenario has no [[job]]; add at least one",
            ));
        }
        validate_scenario_load(&jobs)?;
        let (policy_parameters, policies) = parse_policies(raw.policy, &raw.policies)?;
        Ok(Self {
            duration_ns,
            seed: raw.seed,
            devices,
            classes,
            jobs,
            policy_parameters,
            policies,
        })
    }

    /// What policies are built from.
    pub fn policy_context(&self) -> PolicyContext {
        PolicyContext {
            devices: self
                .devices
                .iter()
                .map(|device| DeviceInfo {
                    name: device.name.clone(),
                    profile: device.profile.clone(),
                    rotational: device.model == device::ModelName::Hdd,
                })
                .collect(),
            classes: self
                .classes
                .iter()
                .map(|class| ClassInfo {
                    name: class.name.clone(),
                    shares: class.shares,
                    rate_limit: class.rate_limit(),
                })
                .collect(),
        }
    }

    /// Builds the device models, seeded from `seed`.
    pub fn build_devices(&self, seed: u64) -> Vec<Box<dyn DeviceModel>> {
        self.devices
            .iter()
            .enumerate()
            .map(|(index, spec)| {
                device::build(spec.model, &spec.parameters, derive_seed(seed, 1, index))
                    .expect("validated at parse time")
            })
            .collect()
    }
}

/// Reads a configuration file and parses it with `parse`, naming the file in
/// every error (shared by scenario and bench job files).
pub fn read_config_file<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        ConfigError::new("(file)", format!("cannot read it: {error}; check the path")).in_file(path)
    })?;
    parse(&text).map_err(|error| error.in_file(path))
}

/// A TOML syntax or schema error, located by line.
pub fn toml_error(text: &str, error: &toml::de::Error) -> ConfigError {
    let location = error
        .span()
        .map(|span| format!("line {}", text[..span.start].matches('\n').count() + 1))
        .unwrap_or_else(|| "(top level)".into());
    ConfigError::new(location, error.message().to_string())
}

/// A seed for one component, derived from the scenario seed (splitmix64), so
/// components (devices, job instances) draw independent streams. `index` is
/// the component's position in scenario order, so adding one shifts the
/// seeds of those after it, never of those before.
pub fn derive_seed(seed: u64, component: u64, index: usize) -> u64 {
    let mut value = seed
        ^ component.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (index as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    value ^ (value >> 31)
}

fn seconds_to_ns(seconds: f64) -> Nanos {
    (seconds * NANOS_PER_SECOND_F64).round() as Nanos
}

fn validate_duration(duration_s: f64) -> Result<(), ConfigError> {
    if duration_s.is_finite() && duration_s > 0.0 && duration_s <= DURATION_S_MAX {
        Ok(())
    } else {
        Err(ConfigError::new(
            "duration_s",
            format!("{duration_s} is not a usable duration; give seconds in (0, {DURATION_S_MAX}]"),
        ))
    }
}

fn validate_names<'a>(names: impl Iterator<Item = &'a str>, kind: &str) -> Result<(), ConfigError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, name) in names.enumerate() {
        if name.is_empty() {
            return Err(ConfigError::new(
                format!("{kind}[{index}].name"),
                "is empty; give it a name",
            ));
        }
        if !seen.insert(name) {
            return Err(ConfigError::new(
                format!("{kind}[{index}].name"),
                format!("`{name}` is used twice; names must be unique"),
            ));
        }
    }
    Ok(())
}

/// Refuses names with control characters (NUL, newline, escape, ...): names
/// go into tables, JSON keys and metric labels, where such bytes would break
/// rows or forge them.
fn validate_printable<'a>(
    names: impl Iterator<Item = &'a str>,
    kind: &str,
) -> Result<(), ConfigError> {
    for (index, name) in names.enumerate() {
        if let Some(bad) = name.chars().find(|character| character.is_control()) {
            return Err(ConfigError::new(
                format!("{kind}[{index}].name"),
                format!(
                    "{:?} holds the control character {:?}; use printable characters only",
                    name, bad
                ),
            ));
        }
    }
    Ok(())
}

/// The largest byte a job may address: the end of its region must fit the
/// kernel's file offsets (`off_t`, signed 64 bits).
pub const ADDRESS_BYTES_MAX: u64 = i64::MAX as u64;

/// Refuses a job region the simulator cannot address: an offset that is not a
/// multiple of 512 (the sector every model counts in), or an end
/// (`offset + size`) past [`ADDRESS_BYTES_MAX`].
fn validate_region(offset_bytes: u64, region_bytes: u64) -> Result<(), ConfigError> {
    if offset_bytes % 512 != 0 {
        return Err(ConfigError::new(
            "offset",
            format!(
                "{offset_bytes} is not a multiple of 512; give a sector-aligned offset, e.g. \
                 \"1m\""
            ),
        ));
    }
    match offset_bytes.checked_add(region_bytes) {
        Some(end) if end <= ADDRESS_BYTES_MAX => Ok(()),
        _ => Err(ConfigError::new(
            "offset",
            format!(
                "offset {offset_bytes} + size {region_bytes} ends past byte {ADDRESS_BYTES_MAX}, \
                 the largest file offset; give a smaller offset or size"
            ),
        )),
    }
}

/// Refuses a job region that ends past its device's capacity (models with
/// one: `hdd`), since the model would fold every offset past the end onto its
/// last track and serve them without seeking.
fn validate_capacity(
    offset_bytes: u64,
    region_bytes: u64,
    device_index: usize,
    device: &DeviceSpec,
) -> Result<(), ConfigError> {
    let Some(capacity_bytes) = device::capacity_bytes(device.model, &device.parameters) else {
        return Ok(());
    };
    // validate_region checked that the sum does not overflow.
    let end_bytes = offset_bytes + region_bytes;
    if end_bytes <= capacity_bytes {
        return Ok(());
    }
    Err(ConfigError::new(
        "size",
        format!(
            "the region (offset {offset_bytes} + size {region_bytes} = {end_bytes} bytes) ends \
             past device[{device_index}].capacity_bytes ({capacity_bytes}); give a smaller \
             size or offset (size defaults to {REGION_BYTES_DEFAULT}), or a larger capacity_bytes"
        ),
    ))
}

fn take_string(table: &mut toml::Table, key: &str) -> Result<String, ConfigError> {
    match table.remove(key) {
        Some(toml::Value::String(value)) => Ok(value),
        Some(other) => Err(ConfigError::new(
            key,
            format!("must be a string, got {}", other.type_str()),
        )),
        None => Err(ConfigError::new(key, "is missing")),
    }
}

fn parse_device(table: &toml::Table) -> Result<DeviceSpec, ConfigError> {
    let mut parameters = table.clone();
    let name = take_string(&mut parameters, "name")?;
    let model = device::ModelName::parse(&take_string(&mut parameters, "model")?)?;
    let overrides = match parameters.remove("profile") {
        Some(value) => ProfileOverrides::deserialize(value).map_err(|error| {
            ConfigError::new("profile", error.to_string().trim_end().to_string())
        })?,
        None => ProfileOverrides::default(),
    };
    let built = device::build(model, &parameters, 0)?;
    let profile = overrides.apply(built.profile());
    profile.validate().map_err(ConfigError::from_profile)?;
    Ok(DeviceSpec {
        name,
        model,
        parameters,
        profile,
    })
}

fn find(
    names: impl Iterator<Item = String>,
    wanted: &str,
    key: &str,
) -> Result<usize, ConfigError> {
    let names: Vec<String> = names.collect();
    names.iter().position(|name| name == wanted).ok_or_else(|| {
        ConfigError::new(
            key,
            format!(
                "`{wanted}` is not defined; define it in a [[{key}]] table or use one of: {}",
                names.join(", ")
            ),
        )
    })
}

fn parse_job(
    index: usize,
    job: RawJob,
    devices: &[DeviceSpec],
    classes: &[ClassSpec],
    duration_ns: Nanos,
) -> Result<JobSpec, ConfigError> {
    let class = find(classes.iter().map(|c| c.name.clone()), &job.class, "class")?;
    let device = find(
        devices.iter().map(|d| d.name.clone()),
        &job.device,
        "device",
    )?;
    let block_size_bytes = job.block_size.0;
    if block_size_bytes == 0
        || block_size_bytes > BLOCK_SIZE_BYTES_MAX
        || block_size_bytes % 512 != 0
    {
        return Err(ConfigError::new(
            "block_size",
            format!(
                "{block_size_bytes} bytes is not usable; give a multiple of 512 up to 1g, e.g. \"4k\""
            ),
        ));
    }
    let arrival = parse_arrival(&job)?;
    if job.numjobs == 0 || job.numjobs > NUMJOBS_MAX {
        return Err(ConfigError::new(
            "numjobs",
            format!("{} is out of range; give 1 to {NUMJOBS_MAX}", job.numjobs),
        ));
    }
    let start_s = job.start_s.unwrap_or(0.0);
    let stop_s = job
        .stop_s
        .unwrap_or(duration_ns as f64 / NANOS_PER_SECOND_F64);
    if !(start_s.is_finite() && stop_s.is_finite() && 0.0 <= start_s && start_s < stop_s) {
        return Err(ConfigError::new(
            "start_s",
            format!("start_s {start_s} and stop_s {stop_s} must satisfy 0 <= start_s < stop_s"),
        ));
    }
    let start_ns = seconds_to_ns(start_s);
    let stop_ns = seconds_to_ns(stop_s).min(duration_ns);
    if start_ns >= stop_ns {
        let duration_s = duration_ns as f64 / NANOS_PER_SECOND_F64;
        return Err(ConfigError::new(
            "start_s",
            format!(
                "start_s {start_s} is not before the end of the run (duration_s {duration_s}); \
                 give a start_s below duration_s, or a longer duration_s"
            ),
        ));
    }
    // The span the job runs for, after stop_s is clipped to the run's end.
    let span_s = (stop_ns - start_ns) as f64 / NANOS_PER_SECOND_F64;
    validate_load(arrival, block_size_bytes, job.numjobs, span_s)?;
    let region_bytes = job.size.map_or(REGION_BYTES_DEFAULT, |size| size.0);
    if region_bytes < block_size_bytes {
        return Err(ConfigError::new(
            "size",
            format!("the region ({region_bytes} bytes) is smaller than one block; make it larger"),
        ));
    }
    let offset_bytes = job.offset.map_or(0, |offset| offset.0);
    validate_region(offset_bytes, region_bytes)?;
    validate_capacity(offset_bytes, region_bytes, device, &devices[device])?;
    Ok(JobSpec {
        name: job.name.unwrap_or_else(|| format!("job{index}")),
        class,
        device,
        pattern: job.pattern,
        block_size_bytes,
        arrival,
        numjobs: job.numjobs,
        start_ns,
        stop_ns,
        sync: job.sync.unwrap_or(true),
        offset_bytes,
        region_bytes,
    })
}

/// Refuses a job whose requests the simulator cannot hold: more than
/// [`REQUESTS_HELD_MAX`] in flight at once (closed loop or burst), or more than
/// [`ARRIVALS_MAX`] open-loop arrivals over `span_s` seconds.
fn validate_load(
    arrival: Arrival,
    block_size_bytes: u64,
    numjobs: u32,
    span_s: f64,
) -> Result<(), ConfigError> {
    let instances = u64::from(numjobs);
    let (key, requests, limit, what) = match arrival {
        Arrival::ClosedLoop { queue_depth } => (
            "queue_depth",
            (u64::from(queue_depth) * instances) as f64,
            REQUESTS_HELD_MAX,
            "requests in flight (queue_depth x numjobs)",
        ),
        Arrival::Burst { burst_bytes } => (
            "burst_bytes",
            (burst_bytes.div_ceil(block_size_bytes) as f64) * instances as f64,
            REQUESTS_HELD_MAX,
            "requests in flight (burst_bytes / block_size x numjobs)",
        ),
        Arrival::OpenLoop { rate_iops } => (
            "rate_iops",
            rate_iops * instances as f64 * span_s,
            ARRIVALS_MAX,
            "arrivals over the run (rate_iops x numjobs x seconds)",
        ),
    };
    if requests > limit as f64 {
        return Err(ConfigError::new(
            key,
            format!(
                "asks for {requests:.3e} {what}, more than the simulator holds ({limit}); \
                 lower {key} or numjobs"
            ),
        ));
    }
    Ok(())
}

/// Refuses a scenario whose jobs *together* bring more requests than the
/// simulator holds (each job alone passed [`validate_load`]): more than
/// [`REQUESTS_HELD_MAX`] in flight at once by `queue_depth` and
/// `burst_bytes`, or more than [`ARRIVALS_MAX`] open-loop arrivals. The key
/// named is that of the job bringing the most.
fn validate_scenario_load(jobs: &[JobSpec]) -> Result<(), ConfigError> {
    // Per job: (requests held at once, open-loop arrivals).
    let loads: Vec<(f64, f64)> = jobs
        .iter()
        .map(|job| {
            let instances = f64::from(job.numjobs);
            match job.arrival {
                Arrival::ClosedLoop { queue_depth } => (f64::from(queue_depth) * instances, 0.0),
                Arrival::Burst { burst_bytes } => (
                    burst_bytes.div_ceil(job.block_size_bytes) as f64 * instances,
                    0.0,
                ),
                Arrival::OpenLoop { rate_iops } => {
                    let span_s =
                        job.stop_ns.saturating_sub(job.start_ns) as f64 / NANOS_PER_SECOND_F64;
                    (0.0, rate_iops * instances * span_s)
                }
            }
        })
        .collect();
    let largest = |load: fn(&(f64, f64)) -> f64| {
        let total: f64 = loads.iter().map(load).sum();
        // The first of the largest.
        let job = (0..loads.len()).fold(0, |best, job| {
            if load(&loads[job]) > load(&loads[best]) {
                job
            } else {
                best
            }
        });
        (total, job)
    };
    let (held, held_job) = largest(|load| load.0);
    if held > REQUESTS_HELD_MAX as f64 {
        let key = match jobs[held_job].arrival {
            Arrival::Burst { .. } => "burst_bytes",
            _ => "queue_depth",
        };
        return Err(ConfigError::new(
            format!("job[{held_job}].{key}"),
            format!(
                "the jobs together ask for {held:.3e} requests in flight (queue_depth x numjobs \
                 and burst_bytes / block_size x numjobs), more than the simulator holds \
                 ({REQUESTS_HELD_MAX}); lower them, or split the scenario"
            ),
        ));
    }
    let (arrivals, arrivals_job) = largest(|load| load.1);
    if arrivals > ARRIVALS_MAX as f64 {
        return Err(ConfigError::new(
            format!("job[{arrivals_job}].rate_iops"),
            format!(
                "the jobs together bring {arrivals:.3e} open-loop arrivals (rate_iops x numjobs \
                 x seconds), more than the simulator holds ({ARRIVALS_MAX}); lower the rates \
                 or duration_s, or split the scenario"
            ),
        ));
    }
    Ok(())
}

fn parse_arrival(job: &RawJob) -> Result<Arrival, ConfigError> {
    match (job.queue_depth, job.rate_iops, job.burst_bytes) {
        (None, None, None) => Ok(Arrival::ClosedLoop { queue_depth: 1 }),
        (Some(queue_depth), None, None) => {
            if queue_depth == 0 || queue_depth > QUEUE_DEPTH_MAX {
                return Err(ConfigError::new(
                    "queue_depth",
                    format!("{queue_depth} is out of range; give 1 to {QUEUE_DEPTH_MAX}"),
                ));
            }
            Ok(Arrival::ClosedLoop { queue_depth })
        }
        (None, Some(rate_iops), None) => {
            if !(rate_iops.is_finite() && rate_iops > 0.0) {
                return Err(ConfigError::new(
                    "rate_iops",
                    format!("{rate_iops} is not a rate; give requests per second above 0"),
                ));
            }
            Ok(Arrival::OpenLoop { rate_iops })
        }
        (None, None, Some(Bytes(burst_bytes))) => {
            if burst_bytes < job.block_size.0 {
                return Err(ConfigError::new(
                    "burst_bytes",
                    "is smaller than one block; give at least block_size bytes",
                ));
            }
            Ok(Arrival::Burst { burst_bytes })
        }
        _ => Err(ConfigError::new(
            "queue_depth",
            "give only one of queue_depth (closed loop), rate_iops (open loop) and burst_bytes",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
duration_s = 2
[[device]]
name = "disk"
model = "sata-ssd"
[[class]]
name = "reads"
shares = 100
[[job]]
class = "reads"
device = "disk"
pattern = "randread"
block_size = "4k"
queue_depth = 8
"#;

    /// [`MINIMAL`] with `lines` added to its job.
    fn with_job_lines(lines: &str) -> String {
        MINIMAL.replace("queue_depth = 8", &format!("queue_depth = 8\n{lines}"))
    }

    #[test]
    fn loads_the_simulator_cannot_hold_are_refused_naming_the_key() {
        for (line, key) in [
            ("rate_iops = 1e300", "job[0].rate_iops"),
            ("rate_iops = 1e9", "job[0].rate_iops"),
            ("burst_bytes = \"1000t\"", "job[0].burst_bytes"),
            ("queue_depth = 65536\nnumjobs = 4096", "job[0].queue_depth"),
        ] {
            let text = MINIMAL.replace("queue_depth = 8", line);
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, key, "{line}: {error}");
            assert!(error.to_string().contains("more than the simulator holds"));
        }
        let text = MINIMAL.replace("queue_depth = 8", "rate_iops = 1e6");
        assert!(Scenario::from_toml(&text).is_ok());
        // A stop_s past the end of the run counts only the seconds that run.
        let text = MINIMAL
            .replace("duration_s = 2", "duration_s = 10")
            .replace("queue_depth = 8", "rate_iops = 1e6\nstop_s = 100");
        let scenario = Scenario::from_toml(&text).unwrap();
        assert_eq!(scenario.jobs[0].stop_ns, scenario.duration_ns);
    }

    #[test]
    fn loads_the_simulator_cannot_hold_together_are_refused_naming_a_key() {
        let job = |n: usize, load: &str| {
            format!(
                "[[job]]\nname = \"j{n}\"\nclass = \"reads\"\ndevice = \"disk\"\n\
                 pattern = \"randread\"\nblock_size = \"4k\"\n{load}\n"
            )
        };
        let head = MINIMAL
            .split("[[job]]")
            .next()
            .unwrap()
            .replace("duration_s = 2", "duration_s = 20");
        // Each job alone is within the limits; together they are not.
        let arrivals = "rate_iops = 1e6";
        let held = "queue_depth = 65536\nnumjobs = 48";
        for (jobs, key) in [
            (vec![arrivals, arrivals], "job[0].rate_iops"),
            (vec!["queue_depth = 1", held, held], "job[1].queue_depth"),
        ] {
            for load in &jobs {
                let alone = format!("{head}{}", job(0, load));
                assert!(Scenario::from_toml(&alone).is_ok(), "{load} alone");
            }
            let text = jobs
                .iter()
                .enumerate()
                .fold(head.clone(), |text, (n, load)| text + &job(n, load));
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, key, "{error}");
            assert!(
                error.to_string().contains("more than the simulator holds"),
                "{error}"
            );
        }
    }

    #[test]
    fn sizes_of_the_wrong_kind_say_what_a_size_is() {
        for value in ["-4096", "true", "1.5", "[]"] {
            let text = MINIMAL.replace("\"4k\"", value);
            let message = Scenario::from_toml(&text).unwrap_err().to_string();
            assert!(!message.contains("untagged enum"), "{value}: {message}");
            assert!(message.contains("4k"), "{value}: {message}");
        }
    }

    #[test]
    fn device_parameters_no_device_has_are_refused_naming_the_key() {
        for (line, key) in [
            ("ncq_depth = 0", "device[0].ncq_depth"),
            ("ncq_depth = 1000000000", "device[0].ncq_depth"),
            (
                "link_bandwidth_bytes_per_s = 0",
                "device[0].link_bandwidth_bytes_per_s",
            ),
            ("read_latency_us = -5.0", "device[0].read_latency_us"),
            ("read_latency_us = nan", "device[0].read_latency_us"),
            ("read_latency_us = 1e300", "device[0].read_latency_us"),
            ("controller_us = 4e9", "device[0].controller_us"),
        ] {
            let text = MINIMAL.replace(
                "model = \"sata-ssd\"",
                &format!("model = \"sata-ssd\"\n{line}"),
            );
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, key, "{line}: {error}");
        }
        for key in ["read_bandwidth_bytes_per_s", "write_bandwidth_bytes_per_s"] {
            let text = MINIMAL.replace(
                "model = \"sata-ssd\"",
                &format!("model = \"usb-flash\"\n{key} = 0"),
            );
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, format!("device[0].{key}"), "{error}");
        }
        let text = MINIMAL.replace(
            "model = \"sata-ssd\"",
            "model = \"hdd\"\nseek_settle_us = 1e300\nfull_stroke_seek_us = 1e300",
        );
        let error = Scenario::from_toml(&text).unwrap_err();
        assert!(error.key.ends_with("_us"), "{error}");
        let text = MINIMAL.replace("model = \"sata-ssd\"", "model = \"hdd\"\nrpm = 0");
        let error = Scenario::from_toml(&text).unwrap_err();
        assert_eq!(error.key, "device[0].rpm", "{error}");
        assert!(!error.to_string().contains("read_iops"), "{error}");
        let text = MINIMAL.replace("model = \"sata-ssd\"", "model = \"hdd\"\nrpm = 5400");
        assert!(Scenario::from_toml(&text).is_ok());
    }

    #[test]
    fn an_hdd_full_stroke_seek_shorter_than_its_settle_is_refused_naming_the_key() {
        let hdd = |lines: &str| {
            MINIMAL.replace("model = \"sata-ssd\"", &format!("model = \"hdd\"\n{lines}"))
        };
        let error =
            Scenario::from_toml(&hdd("seek_settle_us = 500.0\nfull_stroke_seek_us = 100.0"))
                .unwrap_err();
        assert_eq!(error.key, "device[0].full_stroke_seek_us", "{error}");
        assert!(error.message.contains("seek_settle_us"), "{error}");
        assert!(
            Scenario::from_toml(&hdd("seek_settle_us = 500.0\nfull_stroke_seek_us = 500.0"))
                .is_ok()
        );
    }

    #[test]
    fn a_model_range_whose_min_is_above_its_max_is_refused_naming_the_key() {
        let device = |model: &str, lines: &str| {
            MINIMAL.replace(
                "model = \"sata-ssd\"",
                &format!("model = \"{model}\"\n{lines}"),
            )
        };
        for (model, lines, key) in [
            (
                "usb-flash",
                "stall_interval_min_bytes = 4194304\nstall_interval_max_bytes = 1048576",
                "stall_interval_min_bytes",
            ),
            (
                "usb-flash",
                "stall_min_us = 600000.0\nstall_max_us = 200000.0",
                "stall_min_us",
            ),
            (
                "nvme",
                "gc_interval_min_bytes = 402653184\ngc_interval_max_bytes = 134217728",
                "gc_interval_min_bytes",
            ),
            (
                "nvme",
                "gc_stall_min_us = 6000.0\ngc_stall_max_us = 2000.0",
                "gc_stall_min_us",
            ),
        ] {
            let error = Scenario::from_toml(&device(model, lines)).unwrap_err();
            assert_eq!(error.key, format!("device[0].{key}"), "{error}");
            assert!(
                error.message.contains(&key.replace("min", "max")),
                "{error}"
            );
        }
        // Equal ends, and stalls turned off whatever their least length.
        for (model, lines) in [
            (
                "usb-flash",
                "stall_min_us = 300000.0\nstall_max_us = 300000.0",
            ),
            ("usb-flash", "stall_max_us = 0.0"),
            ("nvme", "gc_stall_max_us = 0.0"),
        ] {
            let parsed = Scenario::from_toml(&device(model, lines));
            assert!(parsed.is_ok(), "{lines}: {parsed:?}");
        }
    }

    #[test]
    fn model_sizes_take_binary_suffixes() {
        let device = |model: &str, lines: &str| {
            MINIMAL.replace(
                "model = \"sata-ssd\"",
                &format!("model = \"{model}\"\n{lines}"),
            )
        };
        for (model, suffixed, plain) in [
            (
                "sata-ssd",
                "write_cache_bytes = \"8m\"\nmax_request_bytes = \"256KiB\"",
                "write_cache_bytes = 8388608\nmax_request_bytes = 262144",
            ),
            (
                "nvme",
                "gc_interval_min_bytes = \"64m\"\ngc_interval_max_bytes = \"128m\"",
                "gc_interval_min_bytes = 67108864\ngc_interval_max_bytes = 134217728",
            ),
            (
                "hdd",
                "capacity_bytes = \"2t\"\nwrite_cache_bytes = \"32m\"",
                "capacity_bytes = 2199023255552\nwrite_cache_bytes = 33554432",
            ),
            (
                "usb-flash",
                "stall_interval_min_bytes = \"2m\"\nstall_interval_max_bytes = \"8m\"",
                "stall_interval_min_bytes = 2097152\nstall_interval_max_bytes = 8388608",
            ),
        ] {
            let suffixed = Scenario::from_toml(&device(model, suffixed))
                .unwrap_or_else(|error| panic!("{model}: {error}"));
            let plain = Scenario::from_toml(&device(model, plain)).unwrap();
            assert_eq!(
                suffixed.devices[0].profile, plain.devices[0].profile,
                "{model}"
            );
        }
        let suffixed = Scenario::from_toml(&device("sata-ssd", "max_request_bytes = \"256k\""));
        assert_eq!(
            suffixed.unwrap().devices[0].profile.max_request_bytes,
            262_144
        );
        // A suffixed size is held to the same rules as a plain one.
        let error = error_of(&device("hdd", "capacity_bytes = \"0k\""));
        assert_eq!(error.key, "device[0].capacity_bytes", "{error}");
    }

    #[test]
    fn a_job_region_past_an_hdd_capacity_is_refused_naming_the_keys() {
        let hdd = MINIMAL.replace(
            "model = \"sata-ssd\"",
            "model = \"hdd\"\ncapacity_bytes = 1073741824",
        );
        for region in ["", "size = \"2g\"", "size = \"1g\"\noffset = \"4k\""] {
            let text = hdd.replace("queue_depth = 8", &format!("queue_depth = 8\n{region}"));
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, "job[0].size", "{region}: {error}");
            assert!(
                error.message.contains("device[0].capacity_bytes"),
                "{error}"
            );
        }
        for region in ["size = \"1g\"", "size = \"512m\"\noffset = \"512m\""] {
            let text = hdd.replace("queue_depth = 8", &format!("queue_depth = 8\n{region}"));
            assert!(Scenario::from_toml(&text).is_ok(), "{region}");
        }
    }

    #[test]
    fn unaligned_or_unaddressable_offsets_are_refused_naming_the_key() {
        for line in [
            "offset = 1000",
            "offset = 18446744073709551615",
            "offset = 9223372036854775296",
        ] {
            let text = with_job_lines(line);
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, "job[0].offset", "{line}: {error}");
        }
        let text = with_job_lines("offset = \"1m\"");
        assert_eq!(
            Scenario::from_toml(&text).unwrap().jobs[0].offset_bytes,
            1 << 20
        );
    }

    #[test]
    fn names_with_control_characters_are_refused() {
        for (from, to, key) in [
            ("name = \"reads\"", "name = \"re\\nads\"", "class[0].name"),
            (
                "name = \"reads\"",
                "name = \"re\\u0000ads\"",
                "class[0].name",
            ),
            (
                "name = \"disk\"",
                "name = \"di\\u001bsk\"",
                "device[0].name",
            ),
            (
                "class = \"reads\"",
                "name = \"j\\rob\"\nclass = \"reads\"",
                "job[0].name",
            ),
        ] {
            let text = MINIMAL.replacen(from, to, 1);
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, key, "{text}: {error}");
            assert!(error.message.contains("control character"), "{error}");
        }
    }

    #[test]
    fn a_job_starting_at_or_after_the_end_of_the_run_is_refused_naming_start_s() {
        for line in [
            "start_s = 2.0\nstop_s = 3.0",
            "start_s = 5.0\nstop_s = 9.0",
            "start_s = 1.9999999999\nstop_s = 3.0",
        ] {
            let text = with_job_lines(line);
            let error = Scenario::from_toml(&text).unwrap_err();
            assert_eq!(error.key, "job[0].start_s", "{line}: {error}");
            assert!(error.message.contains("duration_s"), "{line}: {error}");
        }
        let text = with_job_lines("start_s = 1.5");
        let job = &Scenario::from_toml(&text).unwrap().jobs[0];
        assert!(job.start_ns < job.stop_ns, "{job:?}");
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4k"), Ok(4096));
        assert_eq!(parse_bytes("128KiB"), Ok(131_072));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_bytes("512"), Ok(512));
        assert!(parse_bytes("four").is_err());
    }

    #[test]
    fn the_minimal_scenario_parses() {
        let scenario = Scenario::from_toml(MINIMAL).unwrap();
        assert_eq!(scenario.duration_ns, 2_000_000_000);
        assert_eq!(
            scenario.jobs[0].arrival,
            Arrival::ClosedLoop { queue_depth: 8 }
        );
        assert_eq!(scenario.seed, 1);
    }

    fn error_of(text: &str) -> ConfigError {
        Scenario::from_toml(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_key_and_the_fix() {
        let error =
            error_of(&MINIMAL.replace("class = \"reads\"\ndevice", "class = \"nope\"\ndevice"));
        assert_eq!(error.key, "job[0].class");
        assert!(error.message.contains("reads"), "{error}");

        let error = error_of(&MINIMAL.replace("shares = 100", "shares = 0"));
        assert_eq!(error.key, "class[0].shares");

        let error = error_of(&MINIMAL.replace("\"sata-ssd\"", "\"floppy\""));
        assert_eq!(error.key, "device[0].model");
        assert!(error.message.contains("nvme"), "{error}");

        let error = error_of(&with_job_lines("rate_iops = 5.0"));
        assert_eq!(error.key, "job[0].queue_depth");

        let error = error_of(&MINIMAL.replace("block_size = \"4k\"", "block_size = \"4q\""));
        assert!(error.message.contains("4q"), "{error}");

        let error = error_of(&MINIMAL.replace("duration_s = 2", "duration_s = 2\ncolour = 1"));
        assert!(error.message.contains("colour"), "{error}");
        assert_eq!(error.key, "line 3");

        let error = error_of(&MINIMAL.replace("duration_s = 2", "duration_s = -1"));
        assert_eq!(error.key, "duration_s");
    }

    #[test]
    fn policy_tables_are_checked_at_parse_time_whichever_policy_runs() {
        // No `policies` list: only the default policy runs, and a table of
        // any policy is still refused naming the key at fault.
        for (table, key, word) in [
            ("[policy.fifo]\ndepth = 4", "policy.fifo.depth", "depth"),
            (
                "[policy.deadline]\nread_expire = 5",
                "policy.deadline.parameters",
                "read_expire",
            ),
            (
                "[policy.tailguard]\nbudget_us = 86400000001",
                "policy.tailguard.budget_us",
                "86400000001",
            ),
        ] {
            let error = error_of(&format!("{MINIMAL}\n{table}\n"));
            assert_eq!(error.key, key, "{table}: {error}");
            assert!(error.message.contains(word), "{table}: {error}");
        }
        let scenario = Scenario::from_toml(&format!(
            "{MINIMAL}\n[policy.fifo]\n[policy.global-cap]\nhirunningspace_bytes = \"8m\"\n\
             lorunningspace_bytes = 4096\n"
        ))
        .unwrap();
        assert_eq!(scenario.policy_parameters.len(), 2);
    }

    #[test]
    fn class_caps_parse_and_bad_ones_name_the_key() {
        let capped = MINIMAL.replace(
            "shares = 100",
            "shares = 100\nlimit_bytes_per_s = \"2m\"\nlimit_iops = 300\nlimit_burst_ms = 5",
        );
        let scenario = Scenario::from_toml(&capped).unwrap();
        assert_eq!(
            scenario.classes[0].rate_limit(),
            Some(RateLimit {
                bytes_per_s: Some(2 << 20),
                iops: Some(300),
                burst_ns: 5 * NANOS_PER_MILLISECOND,
            })
        );
        assert_eq!(
            Scenario::from_toml(MINIMAL).unwrap().classes[0].rate_limit(),
            None
        );
        for (line, key) in [
            ("limit_bytes_per_s = 0", "class[0].limit_bytes_per_s"),
            ("limit_iops = 0", "class[0].limit_iops"),
            (
                "limit_iops = 5\nlimit_burst_ms = 0",
                "class[0].limit_burst_ms",
            ),
            ("limit_burst_ms = 5", "class[0].limit_burst_ms"),
        ] {
            let error =
                error_of(&MINIMAL.replace("shares = 100", &format!("shares = 100\n{line}")));
            assert_eq!(error.key, key, "{line}: {error}");
        }
        let error = error_of(&MINIMAL.replace("shares = 100", "shares = 100\nlimit_iops = -3"));
        // Type errors come from the TOML reader and name the line.
        assert_eq!(error.key, "line 9", "{error}");
    }
}
