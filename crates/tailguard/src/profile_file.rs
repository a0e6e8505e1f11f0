//! Profile files: what `tailguard tune` measured, for the library, `bench` and `demo`.
//!
//! A profile file is TOML (`tailguard-profile.toml` by default) with a format
//! version, optional metadata, an optional `[default]` profile for devices
//! without their own, and one `[device.NAME]` section per device:
//!
//! ```toml
//! version = 1
//!
//! [metadata]                       # informational; never changes scheduling
//! tool = "tailguard tune"
//! tool_version = "0.1.0"
//! date = "2025-01-31T12:00:00Z"
//! target = "/var/lib/app"
//! duration_s = 60.0
//! notes = ["random writes throttled: 12000 IOPS first, 3000 steady"]
//!
//! [device.nvme0n1]                 # the kernel name of the whole disk
//! # match_path = "/var/lib/app"    # or: whichever device holds this path at load time
//! read_iops = 420000.0             # steady-state 4 KiB random reads per second
//! write_iops = 180000.0
//! read_bandwidth = 3.1e9           # steady-state streaming bytes per second
//! write_bandwidth = 1.9e9
//! max_request_bytes = 524288       # optional, default 512 KiB
//! latency_target_us = 1000         # optional, default 1000
//!
//! [device.nvme0n1.first]           # optional: the rates of the first seconds
//! read_iops = 430000.0             # (cloud disks burst, then fall)
//! write_iops = 400000.0
//! read_bandwidth = 3.2e9
//! write_bandwidth = 2.0e9
//!
//! [device.nvme0n1.knee.random_read] # optional, per curve: where throughput stops
//! request_bytes = 4096              # growing (< 5% more) while latency still rises
//! queue_depth = 32
//! in_flight_bytes = 131072
//! iops = 415000.0
//! bandwidth = 1.7e9
//! latency_us_p50 = 71.0
//! latency_us_p99 = 190.0
//! ```
//!
//! The knees are `random_read`, `random_write` (4 KiB) and `sequential_read`,
//! `sequential_write` (large requests; their `in_flight_bytes` is the byte
//! budget that saturates the device). Only the four steady-state rates, the
//! request size and the latency target reach the scheduler
//! ([`tailguard_core::DeviceProfile`]); the rest documents the measurement and
//! gives a controller a place to start.
//!
//! ## Versions and unknown keys
//!
//! `version` is read before anything else, so a file from a newer tailguard
//! fails with "version N is not supported; this tailguard reads version 1"
//! rather than with a confusing unknown-key error. Unknown keys are errors (with
//! their line), because a misspelt `read_iop` silently ignored would leave a
//! device on the default profile.
//!
//! ## Seastar's `io_properties.yaml`
//!
//! [`ProfileFile::from_seastar_yaml_str`] and [`ProfileFile::to_seastar_yaml_string`]
//! read and write Seastar's format (`disks:` list of `mountpoint` or
//! `mountpoints`, `read_iops`, `read_bandwidth`, `write_iops`,
//! `write_bandwidth`, optional `read_saturation_length`,
//! `write_saturation_length`, and the ignored `duplex`, `rate_factor`,
//! `physical_block_size`), so users of that ecosystem can bring their numbers.
//! Each mountpoint becomes a section matched by path. Values may carry Seastar's
//! binary suffixes (`545M`, `64k`). The larger saturation length becomes
//! `max_request_bytes`. What the format lacks (knees, first rates, metadata,
//! the default section, latency targets) is dropped on writing; a latency
//! target other than the default, which reading the file back would not
//! give, is named by [`ProfileFile::seastar_losses`] so that a writer can
//! say so.
//!
//! The YAML is parsed with `saphyr`, a pure-Rust YAML 1.2 library that is
//! maintained today (serde_yaml is archived, and its forks keep a C-to-Rust
//! translation of libyaml full of `unsafe`). A hand parser was considered: the
//! subset looks tiny, but real files come from yaml-cpp, from PyYAML's
//! `yaml.dump` (list items at the key's indentation), and from people (comments,
//! quotes, flow style `{...}`), and a parser that gets one of those wrong would
//! misread someone's disk. The mapping from the YAML tree to profiles is done
//! by hand here, which gives errors naming the disk and key.

use crate::error::Error;
use crate::scheduler::SchedulerBuilder;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use tailguard_core::DeviceProfile;

/// The profile file format version this tailguard reads and writes.
pub const PROFILE_FILE_VERSION: u32 = 1;

/// `max_request_bytes` of a section that does not give one: 512 KiB.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 512 * 1024;

/// `latency_target_us` of a section that does not give one: 1 ms.
pub const DEFAULT_LATENCY_TARGET_US: u64 = 1_000;

/// A whole profile file; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProfileFile {
    /// The format version, [`PROFILE_FILE_VERSION`].
    pub version: u32,
    /// Who measured what, when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// The profile of every device without its own section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DeviceEntry>,
    /// Per device, by kernel name (or by a label when `match_path` is given).
    #[serde(default, rename = "device", skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, DeviceEntry>,
}

/// Informational: how the numbers were obtained.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Metadata {
    /// The program that wrote the file (`tailguard tune`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// Its version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_version: String,
    /// When, as RFC 3339 UTC (`2025-01-31T12:00:00Z`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub date: String,
    /// The path that was measured.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// How long the measurement ran, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Anything a reader should know (rates not measured, throttling seen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Four rates: IOPS at 4 KiB and streaming bandwidth, per direction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rates {
    /// 4 KiB random reads per second.
    pub read_iops: f64,
    /// 4 KiB random writes per second.
    pub write_iops: f64,
    /// Streaming reads, bytes per second.
    pub read_bandwidth: f64,
    /// Streaming writes, bytes per second.
    pub write_bandwidth: f64,
}

/// One device's section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DeviceEntry {
    /// Match the device holding this path when the file is loaded, instead of
    /// the section's name (device names change across boots; paths do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_path: Option<PathBuf>,
    /// Steady-state 4 KiB random reads per second: what the scheduler uses.
    pub read_iops: f64,
    /// Steady-state 4 KiB random writes per second.
    pub write_iops: f64,
    /// Steady-state streaming reads, bytes per second.
    pub read_bandwidth: f64,
    /// Steady-state streaming writes, bytes per second.
    pub write_bandwidth: f64,
    /// The largest request sent to the device (default [`DEFAULT_MAX_REQUEST_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// The latency target (default [`DEFAULT_LATENCY_TARGET_US`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target_us: Option<u64>,
    /// The rates of the first seconds, before any throttling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Rates>,
    /// Where each curve stops paying off.
    #[serde(default, skip_serializing_if = "Knees::is_empty")]
    pub knee: Knees,
}

/// The knee of each measured curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Knees {
    /// 4 KiB random reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_read: Option<Knee>,
    /// 4 KiB random writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_write: Option<Knee>,
    /// Large sequential reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential_read: Option<Knee>,
    /// Large sequential writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential_write: Option<Knee>,
}

impl Knees {
    /// Whether no knee is known.
    pub fn is_empty(&self) -> bool {
        self.random_read.is_none()
            && self.random_write.is_none()
            && self.sequential_read.is_none()
            && self.sequential_write.is_none()
    }
}

/// The point of a latency-versus-throughput curve past which more concurrency
/// buys less than 5% more throughput while latency keeps rising.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Knee {
    /// Size of each request on this curve.
    pub request_bytes: u64,
    /// Requests in flight at the knee.
    pub queue_depth: u32,
    /// Bytes in flight at the knee (`queue_depth × request_bytes`).
    pub in_flight_bytes: u64,
    /// Requests per second at the knee.
    pub iops: f64,
    /// Bytes per second at the knee.
    pub bandwidth: f64,
    /// Median latency at the knee, µs.
    pub latency_us_p50: f64,
    /// 99th percentile latency at the knee, µs.
    pub latency_us_p99: f64,
}

impl DeviceEntry {
    /// A section with only the four rates.
    pub fn from_rates(rates: Rates) -> Self {
        Self {
            match_path: None,
            read_iops: rates.read_iops,
            write_iops: rates.write_iops,
            read_bandwidth: rates.read_bandwidth,
            write_bandwidth: rates.write_bandwidth,
            max_request_bytes: None,
            latency_target_us: None,
            first: None,
            knee: Knees::default(),
        }
    }

    /// The four steady-state rates.
    pub fn rates(&self) -> Rates {
        Rates {
            read_iops: self.read_iops,
            write_iops: self.write_iops,
            read_bandwidth: self.read_bandwidth,
            write_bandwidth: self.write_bandwidth,
        }
    }

    /// The scheduler's view of this section, with the documented defaults.
    pub fn to_device_profile(&self) -> DeviceProfile {
        DeviceProfile {
            read_iops: self.read_iops,
            write_iops: self.write_iops,
            read_bandwidth: self.read_bandwidth,
            write_bandwidth: self.write_bandwidth,
            max_request_bytes: self.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES),
            latency_target_us: self.latency_target_us.unwrap_or(DEFAULT_LATENCY_TARGET_US),
        }
    }
}

/// Profiles ready for [`SchedulerBuilder::profile`] and
/// [`SchedulerBuilder::default_profile`]: device names resolved, values checked.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ResolvedProfiles {
    /// Per device kernel name.
    pub devices: BTreeMap<String, DeviceProfile>,
    /// For every other device.
    pub default: Option<DeviceProfile>,
}

/// Which format a file is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProfileFormat {
    /// tailguard's TOML.
    Toml,
    /// Seastar's `io_properties.yaml`.
    SeastarYaml,
}

impl ProfileFormat {
    /// `.yaml` and `.yml` files are Seastar's; everything else is TOML.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("yaml" | "yml") => Self::SeastarYaml,
            _ => Self::Toml,
        }
    }
}

impl ProfileFile {
    /// An empty file of the current version.
    pub fn new() -> Self {
        Self {
            version: PROFILE_FILE_VERSION,
            ..Self::default()
        }
    }

    /// Reads a file: Seastar YAML for `.yaml`/`.yml`, else TOML.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| {
            Error::profile_file(format!(
                "{error}; give the file `tailguard tune` wrote (tailguard-profile.toml by default)"
            ))
            .with_path(path)
        })?;
        let parsed = match ProfileFormat::of_path(path) {
            ProfileFormat::Toml => Self::from_toml_str(&text),
            ProfileFormat::SeastarYaml => Self::from_seastar_yaml_str(&text),
        };
        parsed.map_err(|error| error.with_path(path))
    }

    /// Writes the file in `format`.
    pub fn save(&self, path: impl AsRef<Path>, format: ProfileFormat) -> io::Result<()> {
        std::fs::write(path, self.to_string_in(format)?)
    }

    /// The file's text in `format`.
    pub fn to_string_in(&self, format: ProfileFormat) -> Result<String, Error> {
        match format {
            ProfileFormat::Toml => self.to_toml_string(),
            ProfileFormat::SeastarYaml => self.to_seastar_yaml_string(),
        }
    }

    /// Parses TOML, checking the version first; see the module docs.
    pub fn from_toml_str(text: &str) -> Result<Self, Error> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|error| Error::profile_file(format!("not valid TOML: {error}")))?;
        check_version(table.get("version"))?;
        let file: Self =
            toml::from_str(text).map_err(|error| Error::profile_file(format!("{error}")))?;
        file.check_values()?;
        Ok(file)
    }

    /// The TOML text, with a header naming the format.
    pub fn to_toml_string(&self) -> Result<String, Error> {
        let body = toml::to_string_pretty(self)
            .map_err(|error| Error::profile_file(format!("cannot write TOML: {error}")))?;
        Ok(format!(
            "# tailguard device profile (format version {PROFILE_FILE_VERSION}).\n\
             # Rates are steady-state: 4 KiB random IOPS, streaming bandwidth in bytes/s.\n\
             # Load it with Scheduler::builder().profile_file(PATH) or --profile PATH.\n\n{body}"
        ))
    }

    /// Every section's values, checked as the scheduler will check them.
    fn check_values(&self) -> Result<(), Error> {
        let sections = self
            .default
            .iter()
            .map(|entry| ("[default]".to_string(), entry))
            .chain(
                self.devices
                    .iter()
                    .map(|(name, entry)| (format!("[device.{name}]"), entry)),
            );
        for (section, entry) in sections {
            entry
                .to_device_profile()
                .validate()
                .map_err(|error| Error::profile_file(format!("section {section}: {error}")))?;
        }
        Ok(())
    }

    /// Device names resolved (`match_path` looked up now) and values checked.
    pub fn resolve(&self) -> Result<ResolvedProfiles, Error> {
        self.check_values()?;
        let mut resolved = ResolvedProfiles {
            devices: BTreeMap::new(),
            default: self.default.as_ref().map(DeviceEntry::to_device_profile),
        };
        // The section each device came from, to refuse a second one that
        // disagrees with it (two mountpoints of one disk may repeat its
        // numbers).
        let mut sections_of: BTreeMap<String, &String> = BTreeMap::new();
        for (name, entry) in &self.devices {
            let device_name = match &entry.match_path {
                None => name.clone(),
                Some(path) => {
                    crate::device::device_of_path(path)
                        .map_err(|error| {
                            Error::profile_file(format!(
                            "section [device.{name}] matches the device of {}, which cannot be \
                             found here ({error}); fix match_path, or remove it to match the \
                             device by the section's name",
                            path.display()
                        ))
                        })?
                        .name
                }
            };
            let profile = entry.to_device_profile();
            if let Some(first) = sections_of.insert(device_name.clone(), name) {
                if resolved.devices[&device_name] != profile {
                    return Err(Error::profile_file(format!(
                        "sections [device.{first}] and [device.{name}] both match device \
                         {device_name} with different values; keep one of them"
                    )));
                }
            }
            resolved.devices.insert(device_name, profile);
        }
        Ok(resolved)
    }

    /// Parses Seastar's `io_properties.yaml`; see the module docs.
    pub fn from_seastar_yaml_str(text: &str) -> Result<Self, Error> {
        use saphyr::{LoadableYamlNode, Yaml};
        let documents = Yaml::load_from_str(text)
            .map_err(|error| Error::profile_file(format!("not valid YAML: {error}")))?;
        let Some(document) = documents.first() else {
            return Err(Error::profile_file(
                "the file is empty; Seastar's io_properties.yaml starts with `disks:`",
            ));
        };
        let top = document.as_mapping().ok_or_else(|| {
            Error::profile_file("the top level must be a mapping with a `disks:` list")
        })?;
        for key in top.keys() {
            if key.as_str() != Some("disks") {
                return Err(Error::profile_file(format!(
                    "unknown top-level key {}; Seastar's io_properties.yaml has only `disks`",
                    describe_yaml(key)
                )));
            }
        }
        let disks = document
            .as_mapping_get("disks")
            .and_then(Yaml::as_sequence)
            .ok_or_else(|| {
                Error::profile_file("`disks` is missing or not a list; write `disks:` then `- mountpoint: ...` items")
            })?;
        let mut file = Self::new();
        file.metadata = Some(Metadata {
            tool: "seastar io_properties.yaml".into(),
            ..Metadata::default()
        });
        for (index, disk) in disks.iter().enumerate() {
            let (mountpoints, entry) = seastar_disk(disk)
                .map_err(|message| Error::profile_file(format!("disks[{index}]: {message}")))?;
            for mountpoint in mountpoints {
                let mut entry = entry.clone();
                entry.match_path = Some(PathBuf::from(&mountpoint));
                if file.devices.insert(mountpoint.clone(), entry).is_some() {
                    return Err(Error::profile_file(format!(
                        "disks[{index}]: mountpoint {mountpoint} is listed twice; keep one entry"
                    )));
                }
            }
        }
        file.check_values()?;
        Ok(file)
    }

    /// What writing this file in Seastar's format loses that reading it back
    /// would not restore, one line per section: a latency target other than
    /// [`DEFAULT_LATENCY_TARGET_US`] (the format has no key for it, and a disk's
    /// target of tens of milliseconds read back as 1 ms throttles the disk).
    pub fn seastar_losses(&self) -> Vec<String> {
        self.devices
            .iter()
            .filter_map(|(name, entry)| {
                let target_us = entry.latency_target_us?;
                (target_us != DEFAULT_LATENCY_TARGET_US).then(|| {
                    format!(
                        "[device.{name}]: latency_target_us = {target_us} is not in Seastar's \
                         format; read back, the section gets {DEFAULT_LATENCY_TARGET_US} µs (give \
                         the scheduler its target, or keep the TOML profile)"
                    )
                })
            })
            .collect()
    }

    /// Seastar's `io_properties.yaml`: one disk per section, its mountpoint the
    /// section's `match_path`, else the metadata's target.
    pub fn to_seastar_yaml_string(&self) -> Result<String, Error> {
        let target = self
            .metadata
            .as_ref()
            .map(|metadata| metadata.target.clone())
            .filter(|target| !target.is_empty());
        let mut text = String::from("# Seastar I/O properties, written by tailguard.\ndisks:\n");
        for (name, entry) in &self.devices {
            let mountpoint = match (&entry.match_path, &target) {
                (Some(path), _) => path.display().to_string(),
                (None, Some(target)) if self.devices.len() == 1 => target.clone(),
                _ => {
                    return Err(Error::profile_file(format!(
                        "section [device.{name}] has no match_path, and Seastar's format needs \
                         a mountpoint per disk; add match_path = \"/mount/point\""
                    )))
                }
            };
            let rates = entry.rates();
            text.push_str(&format!("  - mountpoint: {}\n", yaml_quoted(&mountpoint)));
            for (key, value) in [
                ("read_iops", rates.read_iops),
                ("read_bandwidth", rates.read_bandwidth),
                ("write_iops", rates.write_iops),
                ("write_bandwidth", rates.write_bandwidth),
            ] {
                text.push_str(&format!("    {key}: {}\n", value.round() as u64));
            }
            if let Some(bytes) = entry.max_request_bytes {
                text.push_str(&format!("    read_saturation_length: {bytes}\n"));
                text.push_str(&format!("    write_saturation_length: {bytes}\n"));
            }
        }
        if self.devices.is_empty() {
            return Err(Error::profile_file(
                "no [device.NAME] section to write; Seastar's format has no default disk",
            ));
        }
        Ok(text)
    }
}

fn check_version(version: Option<&toml::Value>) -> Result<(), Error> {
    let supported = PROFILE_FILE_VERSION;
    match version {
        None => Err(Error::profile_file(format!(
            "no `version` key; this tailguard reads profile files of version {supported}: \
             add `version = {supported}` at the top"
        ))),
        Some(toml::Value::Integer(found)) if *found == i64::from(supported) => Ok(()),
        Some(toml::Value::Integer(found)) => Err(Error::profile_file(format!(
            "version {found} is not supported; this tailguard reads profile files of version \
             {supported}: re-run `tailguard tune` with this tailguard, or use the tailguard \
             that wrote the file"
        ))),
        Some(other) => Err(Error::profile_file(format!(
            "`version` must be the integer {supported}, got {other}"
        ))),
    }
}

/// One entry of Seastar's `disks:` list: its mountpoints and its numbers.
fn seastar_disk(disk: &saphyr::Yaml) -> Result<(Vec<String>, DeviceEntry), String> {
    const REQUIRED: [&str; 4] = [
        "read_iops",
        "read_bandwidth",
        "write_iops",
        "write_bandwidth",
    ];
    const KNOWN: [&str; 11] = [
        "mountpoint",
        "mountpoints",
        "read_iops",
        "read_bandwidth",
        "write_iops",
        "write_bandwidth",
        "read_saturation_length",
        "write_saturation_length",
        "duplex",
        "rate_factor",
        "physical_block_size",
    ];
    let mapping = disk
        .as_mapping()
        .ok_or("must be a mapping with `mountpoint`, `read_iops`, ...")?;
    for key in mapping.keys() {
        if !key.as_str().is_some_and(|key| KNOWN.contains(&key)) {
            return Err(format!(
                "unknown key {}; Seastar's disk entries take {}",
                describe_yaml(key),
                KNOWN.join(", ")
            ));
        }
    }
    let mountpoints = seastar_mountpoints(disk)?;
    let mut values = [0.0; 4];
    for (value, key) in values.iter_mut().zip(REQUIRED) {
        let node = disk
            .as_mapping_get(key)
            .ok_or_else(|| format!("`{key}` is missing; Seastar requires all of {REQUIRED:?}"))?;
        *value = seastar_quantity(node).map_err(|message| format!("`{key}`: {message}"))?;
    }
    let [read_iops, read_bandwidth, write_iops, write_bandwidth] = values;
    let mut entry = DeviceEntry::from_rates(Rates {
        read_iops,
        write_iops,
        read_bandwidth,
        write_bandwidth,
    });
    let mut saturation_bytes: Option<u64> = None;
    for key in ["read_saturation_length", "write_saturation_length"] {
        if let Some(node) = disk.as_mapping_get(key) {
            let bytes = seastar_quantity(node).map_err(|message| format!("`{key}`: {message}"))?;
            if !(SATURATION_BYTES_MIN as f64..=SATURATION_BYTES_MAX as f64).contains(&bytes) {
                return Err(format!(
                    "`{key}`: {bytes} bytes is not a request size; give 4k to 1G, e.g. 128k"
                ));
            }
            saturation_bytes = Some(saturation_bytes.unwrap_or(0).max(bytes as u64));
        }
    }
    entry.max_request_bytes = saturation_bytes;
    Ok((mountpoints, entry))
}

/// The smallest Seastar saturation length accepted: one 4 KiB page, the
/// smallest `max_request_bytes`.
const SATURATION_BYTES_MIN: u64 = tailguard_core::profile::MAX_REQUEST_BYTES_MIN;

/// The largest Seastar saturation length accepted (1 GiB): far above any
/// device's useful request size, and within what the TOML format can hold.
const SATURATION_BYTES_MAX: u64 = 1 << 30;

fn seastar_mountpoints(disk: &saphyr::Yaml) -> Result<Vec<String>, String> {
    let single = disk.as_mapping_get("mountpoint");
    let several = disk.as_mapping_get("mountpoints");
    match (single, several) {
        (Some(node), None) => node
            .as_str()
            .map(|path| vec![path.to_string()])
            .ok_or_else(|| "`mountpoint` must be a path".to_string()),
        (None, Some(node)) => node
            .as_sequence()
            .filter(|list| !list.is_empty())
            .ok_or_else(|| "`mountpoints` must be a non-empty list of paths".to_string())?
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| "`mountpoints` must list paths".to_string())
            })
            .collect(),
        (Some(_), Some(_)) => Err("give `mountpoint` or `mountpoints`, not both".into()),
        (None, None) => Err("`mountpoint` is missing".into()),
    }
}

/// A Seastar quantity: a number, or a string with a binary suffix k, M, G or T
/// (as Seastar's `parse_memory_size`).
fn seastar_quantity(node: &saphyr::Yaml) -> Result<f64, String> {
    if let Some(integer) = node.as_integer() {
        return Ok(integer as f64);
    }
    if let Some(float) = node.as_floating_point() {
        return Ok(float);
    }
    let text = node
        .as_str()
        .ok_or_else(|| format!("must be a number, got {}", describe_yaml(node)))?
        .trim();
    parse_suffixed(text).ok_or_else(|| {
        format!("`{text}` is not a number; write digits with an optional k, M, G or T suffix")
    })
}

/// `545M` → 545 × 2^20. `None` when it is not a number with an optional suffix.
pub fn parse_suffixed(text: &str) -> Option<f64> {
    let (digits, multiplier) = match text.chars().last()? {
        'k' | 'K' => (&text[..text.len() - 1], 1u64 << 10),
        'M' | 'm' => (&text[..text.len() - 1], 1 << 20),
        'G' | 'g' => (&text[..text.len() - 1], 1 << 30),
        'T' | 't' => (&text[..text.len() - 1], 1 << 40),
        _ => (text, 1),
    };
    let value: f64 = digits.trim().parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value * multiplier as f64)
}

fn describe_yaml(node: &saphyr::Yaml) -> String {
    match node.as_str() {
        Some(text) => format!("`{text}`"),
        None => format!("{node:?}"),
    }
}

/// A YAML double-quoted scalar: backslashes, quotes and control characters
/// escaped, so that any path reads back as itself.
fn yaml_quoted(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            control if control.is_control() => {
                quoted.push_str(&format!("\\u{:04x}", u32::from(control)));
            }
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

impl SchedulerBuilder {
    /// Every profile in a profile file (TOML, or Seastar YAML for `.yaml`):
    /// each `[device.NAME]` as [`SchedulerBuilder::profile`], `[default]` as
    /// [`SchedulerBuilder::default_profile`].
    pub fn profile_file(mut self, path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let resolved = ProfileFile::load(path)?
            .resolve()
            .map_err(|error| error.with_path(path))?;
        for (device, profile) in resolved.devices {
            self = self.profile(&device, profile);
        }
        if let Some(profile) = resolved.default {
            self = self.default_profile(profile);
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_binary_and_garbage_is_refused() {
        assert_eq!(parse_suffixed("64k"), Some(65536.0));
        assert_eq!(parse_suffixed("545M"), Some(545.0 * 1048576.0));
        assert_eq!(parse_suffixed("1G"), Some(1073741824.0));
        assert_eq!(parse_suffixed("95000"), Some(95000.0));
        assert_eq!(parse_suffixed("fast"), None);
        assert_eq!(parse_suffixed("M"), None);
        assert_eq!(parse_suffixed("-5k"), None);
    }

    #[test]
    fn a_latency_target_lost_by_seastar_s_format_is_named() {
        let rates = Rates {
            read_iops: 150.0,
            write_iops: 140.0,
            read_bandwidth: 150e6,
            write_bandwidth: 140e6,
        };
        let mut file = ProfileFile::new();
        let mut disk = DeviceEntry::from_rates(rates);
        disk.match_path = Some(PathBuf::from("/mnt/disk"));
        disk.latency_target_us = Some(40_000);
        file.devices.insert("sda".into(), disk.clone());
        disk.match_path = Some(PathBuf::from("/mnt/b"));
        disk.latency_target_us = Some(DEFAULT_LATENCY_TARGET_US);
        file.devices.insert("sdb".into(), disk.clone());
        disk.match_path = Some(PathBuf::from("/mnt/c"));
        disk.latency_target_us = None;
        file.devices.insert("sdc".into(), disk);
        let losses = file.seastar_losses();
        assert_eq!(losses.len(), 1, "{losses:?}");
        assert!(
            losses[0].starts_with("[device.sda]: latency_target_us = 40000"),
            "{losses:?}"
        );
        let text = file.to_seastar_yaml_string().unwrap();
        let back = ProfileFile::from_seastar_yaml_str(&text).unwrap();
        assert!(
            back.seastar_losses().is_empty(),
            "what is read back has the default"
        );
    }

    #[test]
    fn quoting_escapes_quotes_and_backslashes() {
        assert_eq!(yaml_quoted(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
    }
}
