//! `--fio FILE`: a documented subset of fio job files, imported as a bench job.
//!
//! fio job files are INI files: a `[global]` section sets defaults for the job
//! sections after it, and every other `[NAME]` section is one job. Lines are
//! `option=value` or a bare `option` (a boolean flag); lines starting with `#`
//! or `;` are comments. The import reads that syntax itself (no fio needed),
//! then maps every job section onto the bench job model, so it goes through the
//! same validation ([`BenchJob::from_table`]) as a TOML job file:
//!
//! - Each fio job section becomes **one class** named after the job (its `name=`
//!   or its section name), with shares from `prio`/`prioclass` ([`shares_of`]:
//!   best effort `(8 - prio) * 25`, so the default prio 4 gives 100; realtime
//!   ten times that; idle 1). Shares are proportional, not strict priorities.
//! - A job with one direction (`read`, `write`, `randread`, `randwrite`) becomes
//!   one bench job in that class. A mixed job (`rw`/`readwrite`, `randrw`)
//!   becomes two, `NAME.read` and `NAME.write`, sharing one data region: the
//!   `iodepth` is split between them by `rwmixread` (each keeps at least 1, so
//!   a mixed job at depth 1 runs at depth 2 in all), or each gets its own
//!   `rate_iops` when one is given.
//! - `rate_iops` (or `rate` in bytes/s, divided by the block size) makes a job
//!   open loop: Poisson arrivals at that mean rate per instance, latency from
//!   the arrival. fio's default `rate_process=linear` spaces arrivals evenly
//!   and never exceeds `iodepth` in flight; bench's open loop has no depth cap.
//! - `runtime` (required) and `startdelay` give each job its stop and start;
//!   the run lasts until the last job stops. Bench always runs for the time
//!   given, as with `time_based`; without it fio would stop a job once it had
//!   moved `size` bytes (a note says so).
//! - `filename` (with `directory` prepended when both are given) is the target,
//!   shared by every job as in fio; `directory` alone is a directory target in
//!   which each fio job gets a data file. All jobs must agree on the target;
//!   `--target` overrides it. Without `size`, a job takes the size of the
//!   existing file or block device named by `filename`.
//! - Sizes follow fio's rules with its default `kb_base=1024`: `k`, `kb`, `ki`
//!   mean 1024 and `kib` means 1000 (fio inverts the IEC suffixes for old
//!   scripts; `kb_base=1000` swaps them back); `m`, `g`, `t` likewise. Times
//!   take `us`, `ms`, `s` (the default), `m`, `h`, `d`.
//! - `ioengine`, `direct`/`buffered` and a list of reporting options are
//!   accepted and ignored with a note: bench's `--mode` decides how the I/O is
//!   done. Any other option is an error that names it, its line, and the
//!   supported list.

use crate::bench::job::BenchJob;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use tailguard_sim::scenario::ScenarioError;
use tailguard_sim::ConfigError;

/// Options the import maps onto the bench job.
pub const SUPPORTED_OPTIONS: [&str; 23] = [
    "name",
    "rw",
    "readwrite",
    "rwmixread",
    "rwmixwrite",
    "bs",
    "blocksize",
    "iodepth",
    "numjobs",
    "size",
    "offset",
    "runtime",
    "time_based",
    "startdelay",
    "rate_iops",
    "rate",
    "direct",
    "buffered",
    "filename",
    "directory",
    "prio",
    "prioclass",
    "kb_base",
];

/// Options accepted and ignored: they change fio's engine or its reporting,
/// which bench's `--mode` and its own report replace.
pub const IGNORED_OPTIONS: [&str; 31] = [
    "ioengine",
    "group_reporting",
    "thread",
    "description",
    "new_group",
    "lat_percentiles",
    "clat_percentiles",
    "slat_percentiles",
    "percentile_list",
    "gtod_reduce",
    "disable_lat",
    "disable_clat",
    "disable_slat",
    "unified_rw_reporting",
    "randrepeat",
    "allrandrepeat",
    "norandommap",
    "random_generator",
    "invalidate",
    "refill_buffers",
    "exitall",
    "per_job_logs",
    "log_avg_msec",
    "write_lat_log",
    "write_bw_log",
    "write_iops_log",
    "iodepth_batch",
    "iodepth_batch_complete",
    "fixedbufs",
    "registerfiles",
    "rate_process",
];

/// The block size fio uses when none is given.
const DEFAULT_BLOCK_SIZE_BYTES: u64 = 4096;
/// fio's default `prio` (best effort, middle level).
const DEFAULT_PRIO: u32 = 4;

/// A fio job file imported as a bench job.
#[derive(Debug)]
pub struct FioImport {
    /// The bench job: one class per fio job, one or two bench jobs per class.
    pub job: BenchJob,
    /// What the import did that a fio user should know, one line each
    /// (`line N: ...`): the mapping of every job, ignored options, and where
    /// bench's semantics differ.
    pub notes: Vec<String>,
}

/// One `option[=value]` line.
#[derive(Clone, Debug)]
struct Setting {
    line: usize,
    key: String,
    value: Option<String>,
}

/// One `[name]` section and its settings.
#[derive(Debug)]
struct Section {
    name: String,
    line: usize,
    settings: Vec<Setting>,
}

fn at(line: usize, message: impl Into<String>) -> ConfigError {
    ConfigError::new(format!("line {line}"), message)
}

impl FioImport {
    /// Reads and imports a fio job file.
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        tailguard_sim::scenario::read_config_file(path, Self::from_text)
    }

    /// Imports a fio job file's text.
    pub fn from_text(text: &str) -> Result<Self, ConfigError> {
        let sections = lex(text)?;
        let mut notes = Vec::new();
        let mut noted = BTreeSet::new();
        let mut globals: Vec<Setting> = Vec::new();
        let mut jobs = Vec::new();
        for section in sections {
            for setting in &section.settings {
                check_known(setting, &mut notes, &mut noted)?;
            }
            if section.name == "global" {
                globals.extend(section.settings);
                continue;
            }
            let mut effective = globals.clone();
            effective.extend(section.settings.iter().cloned());
            jobs.push(FioJob::from_settings(
                &section, &effective, &mut notes, &mut noted,
            )?);
        }
        if jobs.is_empty() {
            return Err(ConfigError::new(
                "(fio file)",
                "has no job section; add one, e.g. [randread] with rw=randread, bs=4k, \
                 iodepth=16, size=1g, runtime=30",
            ));
        }
        build(&jobs, notes)
    }
}

/// Splits the text into sections of settings.
fn lex(text: &str) -> Result<Vec<Section>, ConfigError> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .ok_or_else(|| {
                    at(
                        line,
                        format!("`{trimmed}` is not a section header; write [jobname]"),
                    )
                })?;
            sections.push(Section {
                name: name.to_string(),
                line,
                settings: Vec::new(),
            });
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err(at(
                line,
                format!("`{trimmed}` is outside any section; put it under [global] or a [job]"),
            ));
        };
        let (key, value) = match trimmed.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim().to_string())),
            None => (trimmed, None),
        };
        section.settings.push(Setting {
            line,
            key: key.to_string(),
            value,
        });
    }
    Ok(sections)
}

/// Refuses unknown options; notes ignored ones once each.
fn check_known(
    setting: &Setting,
    notes: &mut Vec<String>,
    noted: &mut BTreeSet<String>,
) -> Result<(), ConfigError> {
    let key = setting.key.as_str();
    if IGNORED_OPTIONS.contains(&key) {
        if noted.insert(key.to_string()) {
            let why = match key {
                "ioengine" => {
                    "bench's --mode decides how the I/O is done (tailguard and kernel-direct: \
                     io_uring with O_DIRECT; kernel-buffered: the page cache)"
                }
                "rate_process" => {
                    "bench's open-loop jobs always use Poisson arrivals (fio's \
                     rate_process=poisson)"
                }
                _ => "it changes fio's reporting or engine, not the workload",
            };
            notes.push(format!("line {}: `{key}` ignored: {why}", setting.line));
        }
        return Ok(());
    }
    if SUPPORTED_OPTIONS.contains(&key) {
        return Ok(());
    }
    let hint = match key {
        "stonewall" | "wait_for" => {
            "bench runs every job at once; to run jobs one after another, give them \
             startdelay= values, or split the file"
        }
        "include" => "bench does not follow includes; paste the included file in",
        "bsrange" | "bssplit" => "bench uses one block size per direction; give bs=",
        "ramp_time" => "bench measures from the start; lengthen runtime instead",
        _ => "it is not in the supported subset",
    };
    Err(at(
        setting.line,
        format!(
            "fio option `{key}` is not supported: {hint}. Supported: {}; accepted and \
             ignored: {}",
            SUPPORTED_OPTIONS.join(", "),
            IGNORED_OPTIONS.join(", ")
        ),
    ))
}

/// The directions a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Read,
    Write,
    Both,
}

/// One fio job section, its options resolved and parsed.
#[derive(Debug)]
struct FioJob {
    name: String,
    line: usize,
    random: bool,
    mix: Mix,
    read_percent: u32,
    block_size_bytes: [u64; 2],
    iodepth: u32,
    numjobs: u32,
    size_bytes: u64,
    offset_bytes: u64,
    start_ns: u64,
    stop_ns: u64,
    rate_iops: [Option<f64>; 2],
    shares: u32,
    target: Option<PathBuf>,
    /// Whether the target came from `filename` (every job shares it).
    shared_file: bool,
}

/// The last value of each option (later settings override earlier ones), with
/// aliases resolved.
struct Options<'a> {
    values: BTreeMap<&'static str, &'a Setting>,
    kb_base: u64,
}

impl<'a> Options<'a> {
    fn new(settings: &'a [Setting]) -> Result<Self, ConfigError> {
        let mut values = BTreeMap::new();
        for setting in settings {
            let canonical = match setting.key.as_str() {
                "readwrite" => "rw",
                "blocksize" => "bs",
                other => match SUPPORTED_OPTIONS.iter().find(|known| **known == other) {
                    Some(known) => *known,
                    None => continue,
                },
            };
            values.insert(canonical, setting);
        }
        let mut options = Self {
            values,
            kb_base: 1024,
        };
        if let Some((_, base)) = options.parse("kb_base", |text| {
            text.parse::<u64>()
                .ok()
                .filter(|base| *base == 1000 || *base == 1024)
                .ok_or_else(|| format!("`{text}` is not 1000 or 1024"))
        })? {
            options.kb_base = base;
        }
        Ok(options)
    }

    fn get(&self, key: &str) -> Option<&'a Setting> {
        self.values.get(key).copied()
    }

    /// Parses an option's value when it is set; the error names the option and
    /// its line.
    fn parse<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<(usize, T)>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        let value = setting.value.as_deref().ok_or_else(|| {
            at(
                setting.line,
                format!("`{key}` needs a value: write {key}=VALUE"),
            )
        })?;
        parse(value)
            .map(|parsed| Some((setting.line, parsed)))
            .map_err(|message| at(setting.line, format!("`{key}={value}`: {message}")))
    }

    /// A boolean flag: bare (`time_based`) or `=1`/`=0`.
    fn flag(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match setting.value.as_deref() {
            None | Some("1") | Some("true") => Ok(Some(true)),
            Some("0") | Some("false") => Ok(Some(false)),
            Some(other) => Err(at(
                setting.line,
                format!("`{key}={other}`: give 1 or 0 (or the bare `{key}`)"),
            )),
        }
    }
}

impl FioJob {
    fn from_settings(
        section: &Section,
        settings: &[Setting],
        notes: &mut Vec<String>,
        noted: &mut BTreeSet<String>,
    ) -> Result<Self, ConfigError> {
        let options = Options::new(settings)?;
        let kb_base = options.kb_base;
        for key in ["bs", "size", "offset", "rate"] {
            let Some(setting) = options.get(key) else {
                continue;
            };
            let value = setting.value.as_deref().unwrap_or_default();
            if value.to_ascii_lowercase().contains("ib") && noted.insert(format!("ib{key}")) {
                notes.push(format!(
                    "line {}: `{key}={value}`: like fio, bench reads KiB/MiB/GiB as powers of \
                     1000 unless kb_base=1000 (fio inverts the IEC units for old scripts); \
                     write k/m/g for powers of 1024",
                    setting.line
                ));
            }
        }
        let bytes = |text: &str| parse_fio_bytes(text, kb_base);
        let name = options
            .parse("name", |text| Ok(text.to_string()))?
            .map_or_else(|| section.name.clone(), |(_, name)| name);
        let (random, mix) = options
            .parse("rw", parse_rw)?
            .map_or((false, Mix::Read), |(_, rw)| rw);
        let read_percent = read_percent(&options)?;
        let mix = match (mix, read_percent) {
            (Mix::Both, 100) => Mix::Read,
            (Mix::Both, 0) => Mix::Write,
            (mix, _) => mix,
        };
        let block_size_bytes = options
            .parse("bs", |text| {
                let parts = per_direction(text, |part| {
                    let size = bytes(part)?;
                    if size % 512 != 0 && part.to_ascii_lowercase().ends_with("ib") {
                        return Err(format!(
                            "`{part}` is {size} bytes in fio's units (with kb_base=1024, fio's \
                             default, KiB means 1000); write 4k for 4096"
                        ));
                    }
                    Ok(size)
                })?;
                Ok([
                    parts[0].unwrap_or(DEFAULT_BLOCK_SIZE_BYTES),
                    parts[1].unwrap_or(DEFAULT_BLOCK_SIZE_BYTES),
                ])
            })?
            .map_or([DEFAULT_BLOCK_SIZE_BYTES; 2], |(_, sizes)| sizes);
        let iodepth = options
            .parse("iodepth", |text| parse_count(text, "a queue depth"))?
            .map_or(1, |(_, depth)| depth);
        let numjobs = options
            .parse("numjobs", |text| parse_count(text, "a number of jobs"))?
            .map_or(1, |(_, count)| count);
        let offset_bytes = options
            .parse("offset", bytes)?
            .map_or(0, |(_, offset)| offset);
        let start_ns = options
            .parse("startdelay", parse_fio_time_ns)?
            .map_or(0, |(_, ns)| ns);
        let (runtime_line, runtime_ns) =
            options
                .parse("runtime", parse_fio_time_ns)?
                .ok_or_else(|| {
                    at(
                        section.line,
                        format!(
                        "job `{name}` has no `runtime`: bench runs every job for a fixed time; \
                         add runtime=30 (seconds; and time_based)"
                    ),
                    )
                })?;
        if runtime_ns == 0 {
            return Err(at(runtime_line, "`runtime` is 0; give a positive time"));
        }
        if options.flag("time_based")? != Some(true) && noted.insert("time_based".into()) {
            notes.push(format!(
                "line {}: no `time_based`: bench runs job `{name}` for its full runtime; fio \
                 would stop it once it had moved `size` bytes",
                section.line
            ));
        }
        let direct = match (options.flag("direct")?, options.flag("buffered")?) {
            (Some(direct), _) => direct,
            (None, Some(buffered)) => !buffered,
            (None, None) => false,
        };
        if !direct && noted.insert("direct".into()) {
            notes.push(format!(
                "line {}: fio would do buffered I/O for job `{name}` (direct=0, fio's default); \
                 in bench the mode decides: tailguard and kernel-direct use O_DIRECT, \
                 kernel-buffered the page cache",
                section.line
            ));
        }
        let rate_iops = rates(&options, block_size_bytes, kb_base)?;
        let shares = shares_of(&options)?;
        let filename = options.parse("filename", |text| {
            if text.contains(':') {
                Err("bench runs on one target; give a single file name (no `:` list)".into())
            } else {
                Ok(PathBuf::from(text))
            }
        })?;
        let directory = options.parse("directory", |text| Ok(PathBuf::from(text)))?;
        let shared_file = filename.is_some();
        let target = match (directory, filename) {
            (Some((_, directory)), Some((_, file))) => Some(directory.join(file)),
            (None, Some((_, file))) => Some(file),
            (Some((_, directory)), None) => Some(directory),
            (None, None) => None,
        };
        let size_bytes = match options.parse("size", |text| {
            if text.ends_with('%') {
                Err("percentages of the file are not supported; give bytes, e.g. size=1g".into())
            } else {
                bytes(text)
            }
        })? {
            Some((_, size)) => size,
            None => default_size(target.as_deref().filter(|_| shared_file)).ok_or_else(|| {
                at(
                    section.line,
                    format!(
                        "job `{name}` has no `size`; give the bytes it addresses, e.g. size=1g \
                         (bench takes the size of filename= only when it names an existing \
                         file or block device)"
                    ),
                )
            })?,
        };
        Ok(Self {
            name,
            line: section.line,
            random,
            mix,
            read_percent,
            block_size_bytes,
            iodepth,
            numjobs,
            size_bytes,
            offset_bytes,
            start_ns,
            stop_ns: start_ns + runtime_ns,
            rate_iops,
            shares,
            target,
            shared_file,
        })
    }

    /// The bench jobs it becomes: (name suffix, is write, queue depth or rate).
    fn directions(&self) -> Vec<(bool, Load)> {
        let load = |write: bool, depth: u32| match self.rate_iops[usize::from(write)] {
            Some(rate) => Load::Rate(rate),
            None => Load::Depth(depth),
        };
        match self.mix {
            Mix::Read => vec![(false, load(false, self.iodepth))],
            Mix::Write => vec![(true, load(true, self.iodepth))],
            Mix::Both => {
                let (reads, writes) = split_depth(self.iodepth, self.read_percent);
                vec![(false, load(false, reads)), (true, load(true, writes))]
            }
        }
    }
}

/// How a bench job generates requests.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    Depth(u32),
    Rate(f64),
}

/// Splits a mixed job's depth by its read percentage, each side keeping at
/// least one request in flight.
fn split_depth(depth: u32, read_percent: u32) -> (u32, u32) {
    if depth < 2 {
        return (1, 1);
    }
    let reads = ((u64::from(depth) * u64::from(read_percent) + 50) / 100) as u32;
    let reads = reads.clamp(1, depth - 1);
    (reads, depth - reads)
}

/// `rwmixread`, or `100 - rwmixwrite`; the later line wins when both are set.
fn read_percent(options: &Options) -> Result<u32, ConfigError> {
    let percent = |text: &str| {
        text.parse::<u32>()
            .ok()
            .filter(|percent| *percent <= 100)
            .ok_or_else(|| format!("`{text}` is not a percentage from 0 to 100"))
    };
    let read = options.parse("rwmixread", percent)?;
    let write = options.parse("rwmixwrite", percent)?;
    Ok(match (read, write) {
        (Some((read_line, read)), Some((write_line, write))) => {
            if write_line > read_line {
                100 - write
            } else {
                read
            }
        }
        (Some((_, read)), None) => read,
        (None, Some((_, write))) => 100 - write,
        (None, None) => 50,
    })
}

/// Per-direction open-loop rates from `rate_iops`, or from `rate` (bytes/s)
/// divided by the direction's block size.
fn rates(
    options: &Options,
    block_size_bytes: [u64; 2],
    kb_base: u64,
) -> Result<[Option<f64>; 2], ConfigError> {
    let iops = options.parse("rate_iops", |text| {
        per_direction(text, |part| {
            part.parse::<f64>()
                .ok()
                .filter(|rate| rate.is_finite() && *rate > 0.0)
                .ok_or_else(|| format!("`{part}` is not a rate above 0"))
        })
    })?;
    let bandwidth = options.parse("rate", |text| {
        per_direction(text, |part| parse_fio_bytes(part, kb_base))
    })?;
    match (iops, bandwidth) {
        (Some((line, _)), Some(_)) => Err(at(
            line,
            "give rate_iops or rate, not both: bench turns either into one open-loop rate",
        )),
        (Some((_, iops)), None) => Ok(iops),
        (None, Some((line, bytes_per_s))) => {
            let mut rates = [None; 2];
            for direction in 0..2 {
                if let Some(bytes) = bytes_per_s[direction] {
                    let rate = bytes as f64 / block_size_bytes[direction] as f64;
                    if rate <= 0.0 {
                        return Err(at(line, "`rate` must be above 0"));
                    }
                    rates[direction] = Some(rate);
                }
            }
            Ok(rates)
        }
        (None, None) => Ok([None; 2]),
    }
}

/// Shares from fio's I/O priority: best effort (class 2, or 0 = none) gets
/// `(8 - prio) * 25` (prio 4, the default, gives 100); realtime (class 1) ten
/// times that; idle (class 3) 1.
pub fn shares_from_priority(prioclass: u32, prio: u32) -> u32 {
    let level = 8 - prio.min(7);
    match prioclass {
        1 => level * 250,
        3 => 1,
        _ => level * 25,
    }
}

fn shares_of(options: &Options) -> Result<u32, ConfigError> {
    let prio = options
        .parse("prio", |text| {
            text.parse::<u32>()
                .ok()
                .filter(|prio| *prio <= 7)
                .ok_or_else(|| format!("`{text}` is not a priority from 0 (highest) to 7"))
        })?
        .map_or(DEFAULT_PRIO, |(_, prio)| prio);
    let prioclass = options
        .parse("prioclass", |text| {
            text.parse::<u32>()
                .ok()
                .filter(|class| *class <= 3)
                .ok_or_else(|| {
                    format!("`{text}` is not a class: 1 realtime, 2 best effort, 3 idle")
                })
        })?
        .map_or(2, |(_, class)| class);
    Ok(shares_from_priority(prioclass, prio))
}

/// The size of an existing regular file or block device, if `path` is one.
fn default_size(path: Option<&Path>) -> Option<u64> {
    let path = path?;
    let metadata = std::fs::metadata(path).ok()?;
    if metadata.is_file() {
        Some(metadata.len()).filter(|bytes| *bytes > 0)
    } else if metadata.file_type().is_block_device() {
        let device = std::fs::File::open(path).ok()?;
        crate::bench::target::block_device_bytes(&device).ok()
    } else {
        None
    }
}

/// `read`, `write`, `randread`, `randwrite`, `rw`/`readwrite`, `randrw`.
fn parse_rw(text: &str) -> Result<(bool, Mix), String> {
    if text.contains(':') {
        return Err("offset modifiers (`:N`) are not supported; drop the `:` part".into());
    }
    Ok(match text {
        "read" => (false, Mix::Read),
        "write" => (false, Mix::Write),
        "randread" => (true, Mix::Read),
        "randwrite" => (true, Mix::Write),
        "rw" | "readwrite" => (false, Mix::Both),
        "randrw" => (true, Mix::Both),
        _ => {
            return Err(
                "not supported; use read, write, randread, randwrite, rw (readwrite) or randrw"
                    .into(),
            )
        }
    })
}

/// A whole number from 1 up.
fn parse_count(text: &str, what: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|count| *count > 0)
        .ok_or_else(|| format!("`{text}` is not {what} (a whole number from 1)"))
}

/// fio's `R[,W[,T]]` per-direction values: one value applies to reads and
/// writes; an empty part leaves that direction unset; trims are ignored.
fn per_direction<T: Copy>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<[Option<T>; 2], String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let value = |part: &str| {
        if part.is_empty() {
            Ok(None)
        } else {
            parse(part).map(Some)
        }
    };
    let read = value(parts[0])?;
    let write = match parts.get(1) {
        Some(part) => value(part)?,
        None => read,
    };
    Ok([read, write])
}

/// A fio size: a whole number with an optional unit. With `kb_base` 1024 (fio's
/// default) `k`, `kb` and `ki` are 1024 and `kib` is 1000; with 1000 the other
/// way round. Likewise `m`, `g`, `t`, `p`. Not case sensitive; `0x` hex is
/// accepted.
pub fn parse_fio_bytes(text: &str, kb_base: u64) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.strip_prefix("0x") {
        Some(hex) => hex.split_at(
            hex.find(|c: char| !c.is_ascii_hexdigit())
                .unwrap_or(hex.len()),
        ),
        None => lower.split_at(
            lower
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(lower.len()),
        ),
    };
    let value = if lower.starts_with("0x") {
        u64::from_str_radix(digits, 16).ok()
    } else {
        digits.parse::<u64>().ok()
    };
    let bad = || {
        format!(
            "`{text}` is not a size; write bytes or e.g. 4k, 128k, 1m, 2g (fio units: k = 1024)"
        )
    };
    let value = value.ok_or_else(bad)?;
    let unit = unit.trim();
    let (power, rest) = match unit.chars().next() {
        None => (0, ""),
        Some('b') if unit == "b" => (0, ""),
        Some(letter) => {
            let power = match letter {
                'k' => 1,
                'm' => 2,
                'g' => 3,
                't' => 4,
                'p' => 5,
                _ => return Err(bad()),
            };
            (power, &unit[1..])
        }
    };
    let inverted = if kb_base == 1024 { 1000 } else { 1024 };
    let base = match rest {
        "" | "b" | "i" => kb_base,
        "ib" => inverted,
        _ => return Err(bad()),
    };
    let multiplier = base.pow(power);
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// A fio time in nanoseconds: a whole number, seconds by default, or with
/// `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`, `h`, `d` (not case sensitive).
pub fn parse_fio_time_ns(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(digits_end);
    let bad = || format!("`{text}` is not a time; write e.g. 30 (seconds), 500ms, 2m, 1h");
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ns: u64 = match unit.trim() {
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(bad()),
    };
    value
        .checked_mul(unit_ns)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// Builds the bench job from the parsed fio jobs.
fn build(jobs: &[FioJob], mut notes: Vec<String>) -> Result<FioImport, ConfigError> {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for job in jobs {
        if let Some(first) = names.insert(&job.name, job.line) {
            return Err(at(
                job.line,
                format!(
                    "job name `{}` is also used at line {first}; each job becomes a class, so \
                     names must be unique: rename one (name=)",
                    job.name
                ),
            ));
        }
    }
    let target = jobs[0].target.clone();
    if let Some(other) = jobs.iter().find(|job| job.target != target) {
        return Err(at(
            other.line,
            format!(
                "job `{}` runs on {} but job `{}` on {}; bench runs every job on one target: \
                 give them the same filename=/directory= (or pass --target)",
                other.name,
                shown_target(&other.target),
                jobs[0].name,
                shown_target(&target)
            ),
        ));
    }
    let duration_ns = jobs.iter().map(|job| job.stop_ns).max().unwrap_or(0);
    let mut classes = Vec::new();
    let mut bench_jobs = Vec::new();
    // Per bench job: (fio job's line, region).
    let mut origins: Vec<(usize, usize)> = Vec::new();
    let shared_file = jobs.iter().any(|job| job.shared_file);
    let mut rate_noted = false;
    for (index, job) in jobs.iter().enumerate() {
        let mut class = toml::Table::new();
        class.insert("name".into(), job.name.clone().into());
        class.insert("shares".into(), i64::from(job.shares).into());
        classes.push(toml::Value::Table(class));
        let directions = job.directions();
        let mut described = Vec::new();
        for &(write, load) in &directions {
            let name = match (directions.len(), write) {
                (1, _) => job.name.clone(),
                (_, false) => format!("{}.read", job.name),
                (_, true) => format!("{}.write", job.name),
            };
            let pattern = match (job.random, write) {
                (true, false) => "randread",
                (true, true) => "randwrite",
                (false, false) => "seqread",
                (false, true) => "seqwrite",
            };
            let block_size = job.block_size_bytes[usize::from(write)];
            let mut table = toml::Table::new();
            table.insert("name".into(), name.clone().into());
            table.insert("class".into(), job.name.clone().into());
            table.insert("pattern".into(), pattern.into());
            table.insert("block_size".into(), to_integer(block_size).into());
            match load {
                Load::Depth(depth) => {
                    table.insert("queue_depth".into(), i64::from(depth).into());
                    described.push(format!(
                        "{name}: {pattern} {block_size} B at queue depth {depth}"
                    ));
                }
                Load::Rate(rate) => {
                    table.insert("rate_iops".into(), rate.into());
                    described.push(format!(
                        "{name}: {pattern} {block_size} B at {rate} IOPS (open loop)"
                    ));
                }
            }
            table.insert("numjobs".into(), i64::from(job.numjobs).into());
            table.insert("start_s".into(), (job.start_ns as f64 / 1e9).into());
            table.insert("stop_s".into(), (job.stop_ns as f64 / 1e9).into());
            table.insert("offset".into(), to_integer(job.offset_bytes).into());
            table.insert("size".into(), to_integer(job.size_bytes).into());
            bench_jobs.push(toml::Value::Table(table));
            origins.push((job.line, if shared_file { 0 } else { index }));
        }
        notes.push(format!(
            "line {}: job `{}` -> class `{}` (shares {}), {} instance(s), {} bytes from offset \
             {}, {}-{} s: {}",
            job.line,
            job.name,
            job.name,
            job.shares,
            job.numjobs,
            job.size_bytes,
            job.offset_bytes,
            job.start_ns as f64 / 1e9,
            job.stop_ns as f64 / 1e9,
            described.join("; ")
        ));
        if job.mix == Mix::Both && job.iodepth < 2 && job.rate_iops.iter().any(Option::is_none) {
            notes.push(format!(
                "line {}: job `{}` mixes reads and writes at iodepth=1: bench runs the two \
                 directions as two jobs of depth 1 each (2 in flight in all)",
                job.line, job.name
            ));
        }
        if job.rate_iops.iter().any(Option::is_some) && !rate_noted {
            rate_noted = true;
            notes.push(format!(
                "line {}: rates become open-loop Poisson arrivals without a cap on requests in \
                 flight (iodepth is not applied to them), latency counted from each arrival",
                job.line
            ));
        }
        if job.numjobs > 1 && !job.shared_file {
            notes.push(format!(
                "line {}: job `{}`'s {} instances share one data file (fio gives each clone \
                 its own)",
                job.line, job.name, job.numjobs
            ));
        }
    }
    let mut table = toml::Table::new();
    table.insert("duration_s".into(), (duration_ns as f64 / 1e9).into());
    if let Some(target) = &target {
        table.insert("target".into(), target.display().to_string().into());
    }
    table.insert("class".into(), toml::Value::Array(classes));
    table.insert("job".into(), toml::Value::Array(bench_jobs));
    let mut job = BenchJob::from_table(table).map_err(|mut error| {
        // Point at the fio job the failing bench job came from.
        if let Some(index) = error
            .key
            .strip_prefix("job[")
            .or_else(|| error.key.strip_prefix("class["))
            .and_then(|rest| rest.split(']').next())
            .and_then(|index| index.parse::<usize>().ok())
        {
            let line = if error.key.starts_with("job[") {
                origins.get(index).map(|origin| origin.0)
            } else {
                jobs.get(index).map(|job| job.line)
            };
            if let Some(line) = line {
                let option = match error.key.rsplit('.').next().unwrap_or_default() {
                    "block_size" => "bs",
                    "queue_depth" => "iodepth",
                    "start_s" => "startdelay/runtime",
                    "shares" => "prio",
                    other => other,
                }
                .to_string();
                error.message = format!("`{option}`: {}", error.message);
                error.key = format!("line {line}");
            }
        }
        error
    })?;
    job.job_region = origins.iter().map(|origin| origin.1).collect();
    compact_regions(&mut job.job_region);
    Ok(FioImport { job, notes })
}

/// Renumbers regions 0, 1, 2, ... in order of first use.
fn compact_regions(regions: &mut [usize]) {
    let mut seen: Vec<usize> = Vec::new();
    for region in regions.iter_mut() {
        let index = match seen.iter().position(|old| old == region) {
            Some(index) => index,
            None => {
                seen.push(*region);
                seen.len() - 1
            }
        };
        *region = index;
    }
}

fn shown_target(target: &Option<PathBuf>) -> String {
    target.as_ref().map_or_else(
        || "no filename/directory".into(),
        |path| path.display().to_string(),
    )
}

/// A byte count as a TOML integer (TOML integers are signed 64-bit).
fn to_integer(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    use tailguard_sim::scenario::{Arrival, Pattern};

    fn import(text: &str) -> FioImport {
        FioImport::from_text(text).unwrap_or_else(|error| panic!("{error}"))
    }

    fn failure(text: &str) -> ConfigError {
        FioImport::from_text(text).expect_err("the import should fail")
    }

    const TWO_JOBS: &str = "\
; comment
# another
[global]
runtime=2
time_based
directory=/srv/bench

[reads]
rw=randread
bs=4k
iodepth=16
size=1g

[writes]
rw=write
bs=1m
numjobs=2
size=256m
offset=1g
startdelay=500ms
prio=0
";

    #[test]
    fn each_job_becomes_a_class_and_globals_apply() {
        let imported = import(TWO_JOBS);
        let scenario = &imported.job.scenario;
        let names: Vec<&str> = scenario.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["reads", "writes"]);
        assert_eq!(scenario.classes[0].shares, 100);
        assert_eq!(scenario.classes[1].shares, 200);
        assert_eq!(scenario.duration_ns, 2_500_000_000);
        let reads = &scenario.jobs[0];
        assert_eq!(reads.pattern, Pattern::Randread);
        assert_eq!(reads.block_size_bytes, 4096);
        assert_eq!(reads.arrival, Arrival::ClosedLoop { queue_depth: 16 });
        assert_eq!(reads.region_bytes, 1 << 30);
        assert_eq!((reads.start_ns, reads.stop_ns), (0, 2_000_000_000));
        let writes = &scenario.jobs[1];
        assert_eq!(writes.pattern, Pattern::Seqwrite);
        assert_eq!(writes.block_size_bytes, 1 << 20);
        assert_eq!(writes.numjobs, 2);
        assert_eq!(writes.offset_bytes, 1 << 30);
        assert_eq!(writes.arrival, Arrival::ClosedLoop { queue_depth: 1 });
        assert_eq!(
            (writes.start_ns, writes.stop_ns),
            (500_000_000, 2_500_000_000)
        );
        assert_eq!(imported.job.target, Some(PathBuf::from("/srv/bench")));
        // A directory: each fio job gets its own data file.
        assert_eq!(imported.job.job_region, [0, 1]);
    }

    #[test]
    fn mixed_jobs_split_into_two_sharing_a_region() {
        let imported = import(
            "[global]\nruntime=1\nsize=64m\n[mix]\nrw=randrw\nrwmixread=70\nbs=4k,64k\n\
             iodepth=16\n[seq]\nrw=readwrite\nrwmixwrite=25\niodepth=4\n",
        );
        let jobs = &imported.job.scenario.jobs;
        let summary: Vec<(&str, Pattern, u64, Arrival)> = jobs
            .iter()
            .map(|job| {
                (
                    job.name.as_str(),
                    job.pattern,
                    job.block_size_bytes,
                    job.arrival,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "mix.read",
                    Pattern::Randread,
                    4096,
                    Arrival::ClosedLoop { queue_depth: 11 }
                ),
                (
                    "mix.write",
                    Pattern::Randwrite,
                    65536,
                    Arrival::ClosedLoop { queue_depth: 5 }
                ),
                (
                    "seq.read",
                    Pattern::Seqread,
                    4096,
                    Arrival::ClosedLoop { queue_depth: 3 }
                ),
                (
                    "seq.write",
                    Pattern::Seqwrite,
                    4096,
                    Arrival::ClosedLoop { queue_depth: 1 }
                ),
            ]
        );
        assert_eq!(jobs[0].class, jobs[1].class);
        assert_eq!(imported.job.job_region, [0, 0, 1, 1]);
    }

    #[test]
    fn rates_make_jobs_open_loop() {
        let imported = import(
            "[global]\nruntime=1\nsize=8m\n[r]\nrw=randrw\nrate_iops=500,100\n\
             [b]\nrw=write\nbs=64k\nrate=1m\n",
        );
        let arrivals: Vec<Arrival> = imported
            .job
            .scenario
            .jobs
            .iter()
            .map(|j| j.arrival)
            .collect();
        assert_eq!(
            arrivals,
            [
                Arrival::OpenLoop { rate_iops: 500.0 },
                Arrival::OpenLoop { rate_iops: 100.0 },
                Arrival::OpenLoop { rate_iops: 16.0 },
            ]
        );
        let error = failure("[r]\nruntime=1\nsize=8m\nrate_iops=5\nrate=1m\n");
        assert_eq!(error.key, "line 4");
    }

    #[test]
    fn filename_is_the_shared_target() {
        let imported = import(
            "[global]\ndirectory=/data\nfilename=bench.file\nruntime=1\nsize=1m\n\
             [a]\nrw=randread\n[b]\nrw=randwrite\n",
        );
        assert_eq!(imported.job.target, Some(PathBuf::from("/data/bench.file")));
        assert_eq!(imported.job.job_region, [0, 0]);
        let error = failure("[a]\nruntime=1\nsize=1m\nfilename=/x\n[b]\nruntime=1\nsize=1m\n");
        assert_eq!(error.key, "line 5");
        assert!(error.message.contains("one target"), "{error}");
    }

    #[test]
    fn ignored_options_get_notes_and_unknown_ones_errors_with_lines() {
        let imported = import("[a]\nioengine=io_uring\nruntime=1\nsize=1m\ngroup_reporting\n");
        let notes = imported.notes.join("\n");
        assert!(notes.contains("line 2: `ioengine` ignored"), "{notes}");
        assert!(
            notes.contains("line 5: `group_reporting` ignored"),
            "{notes}"
        );
        assert!(notes.contains("time_based"), "{notes}");

        let error = failure("[a]\nruntime=1\nsize=1m\nverify=md5\n");
        assert_eq!(error.key, "line 4");
        assert!(error.message.contains("`verify`"), "{error}");
        assert!(error.message.contains("rwmixread"), "{error}");

        let error = failure("[a]\nruntime=1\nsize=1m\nstonewall\n");
        assert!(error.message.contains("startdelay"), "{error}");
    }

    #[test]
    fn bad_values_name_the_option_and_the_line() {
        for (text, line, needle) in [
            ("[a]\nruntime=1\nsize=1m\nbs=4q\n", "line 4", "bs=4q"),
            ("[a]\nruntime=1\nsize=1m\nrw=trim\n", "line 4", "randrw"),
            ("[a]\nruntime=1\nsize=1m\niodepth=0\n", "line 4", "iodepth"),
            ("[a]\nruntime=soon\nsize=1m\n", "line 2", "runtime"),
            ("[a]\nruntime=1\nsize=50%\n", "line 3", "percentages"),
            ("[a]\nruntime=1\nsize=1m\nprio=9\n", "line 4", "prio"),
            (
                "[a]\nruntime=1\nsize=1m\nrwmixread=120\n",
                "line 4",
                "percentage",
            ),
            ("[a]\nsize=1m\n", "line 1", "runtime"),
            ("[a]\nruntime=1\n", "line 1", "size"),
            ("rw=read\n[a]\n", "line 1", "[global]"),
            ("[a\n", "line 1", "section header"),
            (
                "[a]\nruntime=1\nsize=1m\n[a]\nruntime=1\nsize=1m\n",
                "line 4",
                "unique",
            ),
            // bench's own validation, mapped back to the fio job's line:
            ("[a]\nruntime=1\nsize=1m\nbs=4KiB\n", "line 4", "4000 bytes"),
            (
                "[a]\nruntime=1\nsize=1m\nbs=1000\n",
                "line 1",
                "`bs`: 1000 bytes",
            ),
        ] {
            let error = failure(text);
            assert_eq!(error.key, line, "{text:?}: {error}");
            assert!(error.to_string().contains(needle), "{text:?}: {error}");
        }
        assert_eq!(failure("; nothing\n").key, "(fio file)");
    }

    #[test]
    fn sizes_follow_fio_units() {
        assert_eq!(parse_fio_bytes("4k", 1024), Ok(4096));
        assert_eq!(parse_fio_bytes("4KB", 1024), Ok(4096));
        assert_eq!(parse_fio_bytes("4ki", 1024), Ok(4096));
        assert_eq!(parse_fio_bytes("4KiB", 1024), Ok(4000));
        assert_eq!(parse_fio_bytes("4KiB", 1000), Ok(4096));
        assert_eq!(parse_fio_bytes("4k", 1000), Ok(4000));
        assert_eq!(parse_fio_bytes("1m", 1024), Ok(1 << 20));
        assert_eq!(parse_fio_bytes("2g", 1024), Ok(2 << 30));
        assert_eq!(parse_fio_bytes("512", 1024), Ok(512));
        assert_eq!(parse_fio_bytes("0x1000", 1024), Ok(4096));
        assert!(parse_fio_bytes("4q", 1024).is_err());
        assert!(parse_fio_bytes("k", 1024).is_err());
    }

    #[test]
    fn times_follow_fio_units() {
        assert_eq!(parse_fio_time_ns("30"), Ok(30_000_000_000));
        assert_eq!(parse_fio_time_ns("30s"), Ok(30_000_000_000));
        assert_eq!(parse_fio_time_ns("2m"), Ok(120_000_000_000));
        assert_eq!(parse_fio_time_ns("500ms"), Ok(500_000_000));
        assert_eq!(parse_fio_time_ns("250us"), Ok(250_000));
        assert!(parse_fio_time_ns("soon").is_err());
    }

    #[test]
    fn depth_splits_keep_both_sides_busy() {
        assert_eq!(split_depth(16, 70), (11, 5));
        assert_eq!(split_depth(2, 99), (1, 1));
        assert_eq!(split_depth(1, 50), (1, 1));
        assert_eq!(split_depth(10, 50), (5, 5));
    }

    #[test]
    fn priorities_map_to_shares() {
        assert_eq!(shares_from_priority(2, 4), 100);
        assert_eq!(shares_from_priority(2, 0), 200);
        assert_eq!(shares_from_priority(2, 7), 25);
        assert_eq!(shares_from_priority(1, 4), 1000);
        assert_eq!(shares_from_priority(3, 0), 1);
    }
}
