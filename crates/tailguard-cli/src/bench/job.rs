//! Bench job files: a sim scenario without devices, plus the `target`.
//!
//! A bench job file has the shape of a `tailguard sim` scenario (see
//! docs/reference/scenario-files.md): `duration_s`, `seed`, `[[class]]` and `[[job]]` tables with
//! the same keys and meanings. Instead of `[[device]]` tables it has one top-level
//! `target = "PATH"` (or `--target` on the command line) that every job runs on,
//! so a job's `device` key is ignored. A class's caps (`limit_bytes_per_s`,
//! `limit_iops`, `limit_burst_ms`) are the scenario's too, and apply in the
//! `tailguard` mode only: the kernel modes have no per-class cap, so they run
//! the class uncapped. Every job must give `size`: the bytes of
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
//!
//! Three optional job keys are bench's own and never reach the scenario
//! ([`JobOptions`]): `io_size` makes a job *size-bounded* (each instance stops
//! once it has moved that many bytes, or at `stop_s`, whichever comes first;
//! a job file whose jobs are all size-bounded may leave `stop_s` and
//! `duration_s` at a generous cap), `group` runs jobs in groups one after
//! another (group 0 first, each group starting when the one before has
//! finished, its jobs' `start_s`/`stop_s` counted from the group's start,
//! each group reported on its own), and `target` runs one job on a target of
//! its own (a directory, regular file or block device; `--target` on the
//! command line overrides every job's).

use std::path::{Path, PathBuf};
use tailguard_sim::scenario::Scenario;
use tailguard_sim::ConfigError;

/// Top-level keys a bench job file may have.
const TOP_KEYS: [&str; 5] = ["duration_s", "seed", "target", "class", "job"];

/// Keys a `[[job]]` table may have (those of a sim job but `sync`, which
/// only the simulator's cfq-like policies read, and bench's own).
const JOB_KEYS: [&str; 17] = [
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
    "offset",
    "size",
    "io_size",
    "group",
    "target",
    "write_buffers",
];

/// What bench adds to a scenario job: how much it moves, when it runs, where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobOptions {
    /// Bytes each instance moves before it stops (`None`: it runs until its
    /// `stop_s`). fio's `size`/`io_size` times `loops` for a job without
    /// `time_based`.
    pub io_bytes_per_instance: Option<u64>,
    /// The group the job runs in; groups run one after another in ascending
    /// order (fio's `stonewall`).
    pub group: usize,
    /// The job's own target, overriding [`BenchJob::target`].
    pub target: Option<PathBuf>,
    /// How long after its start the job's requests begin to count in the
    /// report (fio's `ramp_time`); 0: from the start.
    pub ramp_ns: u64,
    /// How long each instance of a closed-loop job waits after a completion
    /// before it submits the next request (fio's `thinktime`); 0: at once.
    pub think_ns: u64,
    /// How requests are shaped beyond the scenario's pattern and block size
    /// (fio's `bssplit`, `bsrange`, `percentage_random`, `rw=...:N`).
    pub shape: crate::bench::shape::Shape,
    /// Whether writes carry a checksummed pattern that reads check, and the
    /// job's written blocks are read back and checked when its group ends
    /// (fio's `verify`).
    pub verify: bool,
    /// After every this many writes an instance issues a sync of its file
    /// (fio's `fsync=N`, `fdatasync=N`); 0: never.
    pub sync_every_writes: u32,
    /// What that sync is.
    pub sync_kind: SyncKind,
    /// Whether the job's file is fsynced, through the mode, once its
    /// group's I/O has completed (fio's `end_fsync`); a size-bounded job's
    /// time runs until that fsync is done.
    pub end_fsync: bool,
    /// Whether an open-loop job's arrivals are evenly spaced at its rate
    /// (fio's default `rate_process=linear`) rather than Poisson.
    pub even_arrivals: bool,
    /// The bytes of buffers a writing job's requests cycle through, each
    /// used again only after all the others (0: one per request in flight,
    /// as fio). A writer that streams new data sends fresh memory with every
    /// write; one that rewrites a single buffer sends memory still in the
    /// caches of whatever copies it, which writers of different depths would
    /// then not pay alike.
    pub write_buffer_bytes: u64,
}

/// A request that makes written data durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncKind {
    /// `fsync`: data and metadata.
    #[default]
    Fsync,
    /// `fdatasync`: data and what is needed to read it back.
    Fdatasync,
}

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
    /// Per job: its [`JobOptions`] (all default for a plain job file).
    pub job_options: Vec<JobOptions>,
}

impl BenchJob {
    /// Reads and validates a job file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
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
        check_top_keys(&table)?;
        let target = take_target(&mut table)?;
        let mut options = take_jobs(&mut table)?;
        let scenario = to_scenario(table)?;
        round_io_sizes(&scenario, &mut options)?;
        let job_region = (0..scenario.jobs.len()).collect();
        Ok(Self {
            scenario,
            target,
            job_region,
            job_options: options,
        })
    }

    /// The groups, in the order they run: per group, the indices of its jobs.
    pub fn groups(&self) -> Vec<Vec<usize>> {
        let mut numbers: Vec<usize> = self.options().map(|options| options.group).collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
            .iter()
            .map(|&group| {
                (0..self.scenario.jobs.len())
                    .filter(|&job| self.options_of(job).group == group)
                    .collect()
            })
            .collect()
    }

    /// The job's options (the default when `job_options` is shorter).
    pub fn options_of(&self, job: usize) -> JobOptions {
        self.job_options.get(job).cloned().unwrap_or_default()
    }

    fn options(&self) -> impl Iterator<Item = JobOptions> + '_ {
        (0..self.scenario.jobs.len()).map(|job| self.options_of(job))
    }

    /// The scenario of one group (`jobs` from [`BenchJob::groups`]): its jobs
    /// only, lasting until the last of them stops.
    pub fn group_scenario(&self, jobs: &[usize]) -> Scenario {
        let mut scenario = self.scenario.clone();
        scenario.jobs = jobs
            .iter()
            .map(|&job| self.scenario.jobs[job].clone())
            .collect();
        scenario.duration_ns = scenario
            .jobs
            .iter()
            .map(|job| job.stop_ns)
            .max()
            .unwrap_or(scenario.duration_ns);
        scenario
    }

    /// The number of data regions.
    pub fn region_count(&self) -> usize {
        self.job_region.iter().max().map_or(0, |last| last + 1)
    }
}

/// Refuses top-level keys a job file does not have, naming the fix.
fn check_top_keys(table: &toml::Table) -> Result<(), ConfigError> {
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
    Ok(())
}

/// Takes the `target` path out of the table, if there is one.
fn take_target(table: &mut toml::Table) -> Result<Option<PathBuf>, ConfigError> {
    match table.remove("target") {
        None => Ok(None),
        Some(toml::Value::String(path)) if !path.is_empty() => Ok(Some(PathBuf::from(path))),
        Some(other) => Err(ConfigError::new(
            "target",
            format!(
                "must be a non-empty path string, got {}; e.g. target = \"/mnt/ssd/bench\"",
                other.type_str()
            ),
        )),
    }
}

/// Checks each `[[job]]`, takes out its bench-only options, and points it at
/// the one target device; returns the options, per job.
fn take_jobs(table: &mut toml::Table) -> Result<Vec<JobOptions>, ConfigError> {
    let Some(toml::Value::Array(jobs)) = table.get_mut("job") else {
        return Err(ConfigError::new(
            "job",
            "the job file has no [[job]]; add at least one",
        ));
    };
    let mut options = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.iter_mut().enumerate() {
        let toml::Value::Table(job) = job else {
            return Err(ConfigError::new(
                format!("job[{index}]"),
                "must be a table; write [[job]]",
            ));
        };
        if job.contains_key("sync") {
            return Err(ConfigError::new(
                format!("job[{index}].sync"),
                "is the simulator's hint for its cfq-like policies, which bench does not run; \
                 remove it (the modes submit every request the same way)",
            ));
        }
        if let Some(key) = job.keys().find(|key| !JOB_KEYS.contains(&key.as_str())) {
            return Err(ConfigError::new(
                format!("job[{index}].{key}"),
                format!("unknown key; use one of: {}", JOB_KEYS.join(", ")),
            ));
        }
        options.push(
            take_job_options(job).map_err(|(key, message)| {
                ConfigError::new(format!("job[{index}].{key}"), message)
            })?,
        );
        if !job.contains_key("size") {
            return Err(ConfigError::new(
                format!("job[{index}].size"),
                "is missing; give the bytes the job addresses, e.g. size = \"256m\" \
                 (in a directory target, the size of the data file laid out for it)",
            ));
        }
        job.insert("device".into(), TARGET_DEVICE.into());
    }
    Ok(options)
}

/// Rounds each job's `io_size` down to whole blocks of its `block_size`:
/// the last request of a bounded instance moves what is left of its bytes,
/// and a part of a block is a request O_DIRECT refuses. An `io_size` below
/// one block is refused, naming the smallest that moves one.
fn round_io_sizes(scenario: &Scenario, options: &mut [JobOptions]) -> Result<(), ConfigError> {
    for (index, (job, options)) in scenario.jobs.iter().zip(options).enumerate() {
        let Some(bytes) = options.io_bytes_per_instance else {
            continue;
        };
        let block = job.block_size_bytes.max(1);
        if bytes < block {
            return Err(ConfigError::new(
                format!("job[{index}].io_size"),
                format!(
                    "{bytes} bytes is less than one block ({block} bytes, `block_size`); give \
                     at least io_size = {block} (it is rounded down to whole blocks)"
                ),
            ));
        }
        options.io_bytes_per_instance = Some(bytes / block * block);
    }
    Ok(())
}

/// The job file as a scenario: its jobs on one device standing for the
/// target (an `nvme` model, which bench never simulates).
fn to_scenario(mut table: toml::Table) -> Result<Scenario, ConfigError> {
    let mut device = toml::Table::new();
    device.insert("name".into(), TARGET_DEVICE.into());
    device.insert("model".into(), "nvme".into());
    table.insert(
        "device".into(),
        toml::Value::Array(vec![toml::Value::Table(device)]),
    );
    let mapped = toml::to_string(&table)
        .map_err(|error| ConfigError::new("(job file)", error.to_string()))?;
    Scenario::from_toml(&mapped).map_err(|mut error| {
        // Line numbers refer to the mapped text, not the file: name the
        // key on that line instead (`job[0].block_size`).
        if let Some(line) = error.key.strip_prefix("line ") {
            error.key = line
                .parse()
                .ok()
                .and_then(|line| key_at_line(&mapped, line))
                .unwrap_or_else(|| "(job file)".into());
        }
        error
    })
}

/// Removes bench's own keys (`io_size`, `group`, `target`) from a job table;
/// an error is (key, message).
fn take_job_options(job: &mut toml::Table) -> Result<JobOptions, (&'static str, String)> {
    let io_bytes_per_instance = match job.remove("io_size") {
        None => None,
        Some(value) => Some(bytes_value(&value).filter(|bytes| *bytes > 0).ok_or((
            "io_size",
            format!(
                "`{value}` is not a size; give the bytes each instance moves before it stops, \
                 e.g. io_size = \"1g\""
            ),
        ))?),
    };
    let group = match job.remove("group") {
        None => 0,
        Some(toml::Value::Integer(group)) if group >= 0 => group as usize,
        Some(other) => {
            return Err((
                "group",
                format!("`{other}` is not a group number; give 0, 1, 2, ... (groups run in order)"),
            ))
        }
    };
    let target = match job.remove("target") {
        None => None,
        Some(toml::Value::String(path)) if !path.is_empty() => Some(PathBuf::from(path)),
        Some(other) => {
            return Err((
                "target",
                format!("`{other}` is not a path; e.g. target = \"/mnt/ssd/bench\""),
            ))
        }
    };
    let write_buffer_bytes = match job.remove("write_buffers") {
        None => 0,
        Some(value) => bytes_value(&value).ok_or((
            "write_buffers",
            format!(
                "`{value}` is not a size; give the bytes of buffers the job's writes cycle \
                 through, e.g. write_buffers = \"8m\""
            ),
        ))?,
    };
    Ok(JobOptions {
        io_bytes_per_instance,
        group,
        target,
        write_buffer_bytes,
        ..JobOptions::default()
    })
}

/// A byte count: an integer or a size string ("4k", "1g").
fn bytes_value(value: &toml::Value) -> Option<u64> {
    match value {
        toml::Value::Integer(bytes) => u64::try_from(*bytes).ok(),
        toml::Value::String(text) => tailguard_sim::scenario::parse_bytes(text).ok(),
        _ => None,
    }
}

/// The dotted key on line `line` (1-based) of TOML that `toml::to_string`
/// wrote: `job[2].block_size` under the third `[[job]]`, `duration_s` at the
/// top; `None` when the line holds no `key = value`.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (key, _) = lines.get(line.checked_sub(1)?)?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let header = lines[..line - 1]
        .iter()
        .rposition(|text| text.trim_start().starts_with('['));
    let Some(header) = header else {
        return Some(key.to_string());
    };
    let table = lines[header].trim();
    Some(
        match table.strip_prefix("[[").and_then(|t| t.strip_suffix("]]")) {
            Some(name) => {
                let index = lines[..header]
                    .iter()
                    .filter(|text| text.trim() == table)
                    .count();
                format!("{name}[{index}].{key}")
            }
            None => format!("{}.{key}", table.trim_matches(|c| c == '[' || c == ']')),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_caps_reach_the_scenario_and_bad_ones_name_the_key() {
        let text = "duration_s = 1\ntarget = \"/tmp/x\"\n[[class]]\nname = \"c\"\nshares = 10\n\
             limit_bytes_per_s = \"4m\"\nlimit_iops = 200\n\
             [[job]]\nclass = \"c\"\npattern = \"seqwrite\"\nblock_size = \"64k\"\nsize = \"1m\"\n";
        let job = BenchJob::from_toml(text).unwrap();
        let limit = job.scenario.classes[0].rate_limit().unwrap();
        assert_eq!(limit.bytes_per_s, Some(4 << 20));
        assert_eq!(limit.iops, Some(200));
        let error =
            BenchJob::from_toml(&text.replace("limit_iops = 200", "limit_iops = 0")).unwrap_err();
        assert_eq!(error.key, "class[0].limit_iops", "{error}");
    }

    #[test]
    fn a_value_of_the_wrong_kind_names_its_job_and_key() {
        let text = "duration_s = 1\ntarget = \"/tmp/x\"\n[[class]]\nname = \"r\"\nshares = 10\n\
             [[job]]\nclass = \"r\"\npattern = \"randread\"\nblock_size = \"4k\"\nsize = \"1m\"\n\
             [[job]]\nclass = \"r\"\npattern = \"randread\"\nblock_size = -4096\nsize = \"1m\"\n";
        let error = BenchJob::from_toml(text).unwrap_err();
        assert_eq!(error.key, "job[1].block_size", "{error}");
        assert!(error.message.contains("negative"), "{error}");
        assert!(!error.to_string().contains("untagged enum"), "{error}");
        let error =
            BenchJob::from_toml(&text.replace("duration_s = 1", "duration_s = \"x\"")).unwrap_err();
        assert_eq!(error.key, "duration_s", "{error}");
    }

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
        assert_eq!(job.job_options, [JobOptions::default()]);
    }

    #[test]
    fn bench_keys_set_job_options_and_groups() {
        let job = BenchJob::from_toml(
            "duration_s = 10\n[[class]]\nname = \"r\"\nshares = 10\n\
             [[job]]\nclass = \"r\"\npattern = \"seqread\"\nblock_size = \"4k\"\nsize = \"1m\"\n\
             io_size = \"2m\"\ngroup = 1\ntarget = \"/dev/null\"\n\
             [[job]]\nclass = \"r\"\npattern = \"randread\"\nblock_size = \"4k\"\nsize = \"1m\"\n\
             stop_s = 2\n",
        )
        .unwrap();
        assert_eq!(
            job.job_options[0],
            JobOptions {
                io_bytes_per_instance: Some(2 << 20),
                group: 1,
                target: Some(PathBuf::from("/dev/null")),
                ..JobOptions::default()
            }
        );
        assert_eq!(job.groups(), [vec![1], vec![0]]);
        assert_eq!(job.group_scenario(&[1]).duration_ns, 2_000_000_000);
        let error = BenchJob::from_toml(
            "duration_s = 1\n[[class]]\nname = \"r\"\nshares = 1\n[[job]]\nclass = \"r\"\n\
             pattern = \"seqread\"\nblock_size = \"4k\"\nsize = \"1m\"\ngroup = -1\n",
        )
        .unwrap_err();
        assert_eq!(error.key, "job[0].group");
    }

    #[test]
    fn the_simulators_sync_key_is_refused() {
        let error = BenchJob::from_toml(
            "duration_s = 1\n[[class]]\nname = \"r\"\nshares = 1\n[[job]]\nclass = \"r\"\n\
             pattern = \"seqwrite\"\nblock_size = \"4k\"\nsize = \"1m\"\nsync = false\n",
        )
        .unwrap_err();
        assert_eq!(error.key, "job[0].sync", "{error}");
        assert!(error.message.contains("remove it"), "{error}");
    }

    #[test]
    fn io_size_is_rounded_down_to_whole_blocks() {
        let text = |io_size: &str| {
            format!(
                "duration_s = 10\n[[class]]\nname = \"r\"\nshares = 1\n[[job]]\nclass = \"r\"\n\
                 pattern = \"seqread\"\nblock_size = \"4k\"\nsize = \"1m\"\nio_size = {io_size}\n"
            )
        };
        let job = BenchJob::from_toml(&text("\"10k\"")).unwrap();
        assert_eq!(job.job_options[0].io_bytes_per_instance, Some(8 << 10));
        let job = BenchJob::from_toml(&text("\"12k\"")).unwrap();
        assert_eq!(job.job_options[0].io_bytes_per_instance, Some(12 << 10));
        let error = BenchJob::from_toml(&text("1000")).unwrap_err();
        assert_eq!(error.key, "job[0].io_size", "{error}");
        assert!(error.message.contains("io_size = 4096"), "{error}");
    }

    #[test]
    fn the_seed_001_job_file_puts_each_writer_on_its_own_target() {
        let job = BenchJob::from_toml(include_str!(
            "../../../../benchmarks/seed001-two-targets.toml"
        ))
        .unwrap();
        assert_eq!(job.target, None, "no file-wide target");
        let targets: Vec<_> = (0..3)
            .map(|index| job.options_of(index).target.unwrap())
            .collect();
        assert_eq!(
            targets,
            [
                PathBuf::from("/var/tmp"),
                PathBuf::from("/var/tmp"),
                PathBuf::from("/dev/STICK")
            ]
        );
        assert_eq!(job.groups(), [vec![0], vec![1, 2]], "alone, then beside");
    }
}
