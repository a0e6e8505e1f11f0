//! Bench job files: a sim scenario without devices, plus the `target`.
//!
//! A bench job file has the shape of a `tailguard sim` scenario (see the README's
//! "Scenario files"): `duration_s`, `seed`, `[[class]]` and `[[job]]` tables with
//! the same keys and meanings. Instead of `[[device]]` tables it has one top-level
//! `target = "PATH"` (or `--target` on the command line) that every job runs on,
//! so a job's `device` key is ignored. Every job must give `size`: the bytes of
//! its region, which is also the size of the data file laid out for it when the
//! target is a directory.
//!
//! Parsing maps the file onto a [`Scenario`] with one pseudo device named
//! `target`, so validation (ranges, names, units) and the workload generator are
//! exactly the simulator's. [`BenchJob::from_table`] is the entry point for
//! other front ends (the fio import builds a table and goes through it).
//!
//! Jobs address *data regions*: a directory target gets one data file per
//! region and a block device one stretch of the device per region. In a job
//! file every job has a region of its own; the fio import puts the read and
//! write halves of one mixed fio job into one shared region, as fio does
//! (see [`BenchJob::job_region`]).

use std::path::{Path, PathBuf};
use tailguard_sim::scenario::{Scenario, ScenarioError};
use tailguard_sim::ConfigError;

/// Top-level keys a bench job file may have.
const TOP_KEYS: [&str; 5] = ["duration_s", "seed", "target", "class", "job"];

/// Keys a `[[job]]` table may have (those of a sim job).
const JOB_KEYS: [&str; 14] = [
    "name",
    "class",
    "device",
    "pattern",
    "block_size",
    "queue_depth",
    "rate_iops",
    "burst_bytes",
    "numjobs",
    "start_s",
    "stop_s",
    "sync",
    "offset",
    "size",
];

/// The name of the one device every job runs on.
pub const TARGET_DEVICE: &str = "target";

/// A parsed and validated bench job file.
#[derive(Clone, Debug)]
pub struct BenchJob {
    /// The workload, as a scenario with the one device `target`.
    pub scenario: Scenario,
    /// The `target` key, if the file has one.
    pub target: Option<PathBuf>,
    /// Per job: the index of the data region it addresses. Jobs that share a
    /// region share its data file (directory target) or its stretch of the
    /// device; the region spans the union of their `offset..offset + size`.
    pub job_region: Vec<usize>,
}

impl BenchJob {
    /// Reads and validates a job file.
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        tailguard_sim::scenario::read_config_file(path, Self::from_toml)
    }

    /// Parses and validates a job file from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = text
            .parse()
            .map_err(|error: toml::de::Error| tailguard_sim::scenario::toml_error(text, &error))?;
        Self::from_table(table)
    }

    /// Validates a job file already parsed into a TOML table; every job gets a
    /// data region of its own.
    pub fn from_table(mut table: toml::Table) -> Result<Self, ConfigError> {
        for key in table.keys() {
            match key.as_str() {
                key if TOP_KEYS.contains(&key) => {}
                "device" => {
                    return Err(ConfigError::new(
                        "device",
                        "bench jobs run on one real target, not on device models; remove the \
                         [[device]] tables and set target = \"PATH\" (or pass --target)",
                    ))
                }
                "policies" | "policy" => {
                    return Err(ConfigError::new(
                        key,
                        "bench compares modes, not simulated policies; remove it and pass \
                         --mode tailguard,kernel-direct,kernel-buffered",
                    ))
                }
                other => {
                    return Err(ConfigError::new(
                        other,
                        format!("unknown key; use one of: {}", TOP_KEYS.join(", ")),
                    ))
                }
            }
        }
        let target = match table.remove("target") {
            None => None,
            Some(toml::Value::String(path)) if !path.is_empty() => Some(PathBuf::from(path)),
            Some(other) => {
                return Err(ConfigError::new(
                    "target",
                    format!(
                        "must be a non-empty path string, got {}; e.g. target = \"/mnt/ssd/bench\"",
                        other.type_str()
                    ),
                ))
            }
        };
        let Some(toml::Value::Array(jobs)) = table.get_mut("job") else {
            return Err(ConfigError::new(
                "job",
                "the job file has no [[job]]; add at least one",
            ));
        };
        for (index, job) in jobs.iter_mut().enumerate() {
            let toml::Value::Table(job) = job else {
                return Err(ConfigError::new(
                    format!("job[{index}]"),
                    "must be a table; write [[job]]",
                ));
            };
            if let Some(key) = job.keys().find(|key| !JOB_KEYS.contains(&key.as_str())) {
                return Err(ConfigError::new(
                    format!("job[{index}].{key}"),
                    format!("unknown key; use one of: {}", JOB_KEYS.join(", ")),
                ));
            }
            if !job.contains_key("size") {
                return Err(ConfigError::new(
                    format!("job[{index}].size"),
                    "is missing; give the bytes the job addresses, e.g. size = \"256m\" \
                     (in a directory target, the size of the data file laid out for it)",
                ));
            }
            job.insert("device".into(), TARGET_DEVICE.into());
        }
        let mut device = toml::Table::new();
        device.insert("name".into(), TARGET_DEVICE.into());
        device.insert("model".into(), "nvme".into());
        table.insert(
            "device".into(),
            toml::Value::Array(vec![toml::Value::Table(device)]),
        );
        let mapped = toml::to_string(&table)
            .map_err(|error| ConfigError::new("(job file)", error.to_string()))?;
        let scenario = Scenario::from_toml(&mapped).map_err(|mut error| {
            // Line numbers refer to the mapped text, not the file: drop them.
            if error.key.starts_with("line ") {
                error.key = "(job file)".into();
            }
            error
        })?;
        let job_region = (0..scenario.jobs.len()).collect();
        Ok(Self {
            scenario,
            target,
            job_region,
        })
    }

    /// The number of data regions.
    pub fn region_count(&self) -> usize {
        self.job_region.iter().max().map_or(0, |last| last + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_file_maps_onto_a_scenario() {
        let job = BenchJob::from_toml(
            "duration_s = 1\ntarget = \"/tmp/x\"\n[[class]]\nname = \"r\"\nshares = 10\n\
             [[job]]\nclass = \"r\"\npattern = \"randread\"\nblock_size = \"4k\"\nsize = \"1m\"\n",
        )
        .unwrap();
        assert_eq!(job.target, Some(PathBuf::from("/tmp/x")));
        assert_eq!(job.scenario.devices.len(), 1);
        assert_eq!(job.scenario.jobs[0].region_bytes, 1 << 20);
    }
}
