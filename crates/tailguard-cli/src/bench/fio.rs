//! `--fio FILE`: fio job files, imported as a bench job.
//!
//! fio job files are INI files: a `[global]` section sets defaults for the job
//! sections after it, and every other `[NAME]` section is one job. Lines are
//! `option=value` or a bare `option` (a boolean flag); `#` and `;` start a
//! comment, on a line of their own or after a value (` ; two copies`).
//! `$pagesize`, `$mb_memory`, `$ncpus` and `${NAME}` (an environment
//! variable) are replaced in values, as fio does. The import reads that syntax
//! itself (no fio needed), then maps every job section onto the bench job
//! model, so it goes through the same validation ([`BenchJob::from_table`]) as
//! a TOML job file:
//!
//! - Each fio job section becomes **one class** named after the job (its
//!   `name=` or its section name; a repeated name gets `-2`, `-3`, ...), with
//!   shares from `prio`/`prioclass` ([`shares_from_priority`]).
//! - A job becomes one bench job per direction and per file: `read`, `write`,
//!   `randread`, `randwrite` have one direction; `rw`/`readwrite` and `randrw`
//!   two (`NAME.read`, `NAME.write`, sharing each file's data region), with the
//!   `iodepth` split by `rwmixread` (each keeps at least 1). Several files
//!   (`filename=a:b`, `nrfiles=N`) split the depth, rate and bytes of each
//!   direction evenly between them (`NAME.f0`, `NAME.f1`, ...); a depth below
//!   the number of files runs on the first `depth` files only, one request in
//!   flight each, so the job keeps its depth (bench gives every file a queue
//!   of its own, where fio cycles one queue over the files), with a note.
//! - **Size-bounded jobs**: without `time_based`, each instance stops once it
//!   has moved `io_size` bytes (default `size`; times `loops`), or
//!   `number_ios` requests, or at `runtime`, whichever comes first; with
//!   `time_based` it runs for `runtime`. A mixed job's bytes are split by
//!   `rwmixread`.
//! - **Sizes**: `size` (all files together; `filesize` per file), or without
//!   it the size of the existing file or block device; `size=N%` and
//!   `offset=N%` are percentages of that existing file's or device's size.
//! - **Groups**: `stonewall` (and `wait_for=JOB` naming a job of the current
//!   group) starts a new group; groups run one after another and are reported
//!   on their own, like fio's.
//! - **Targets**: `filename` (with `directory` prepended) names files used in
//!   place, an existing regular file or block device; a file that does not
//!   exist yet becomes a data file laid out in its directory and removed at
//!   the end. `directory` alone gets one data file per job and file. Jobs on
//!   different targets run there ([`JobOptions::target`]); `--target`
//!   overrides every job's.
//! - `rate_iops` (or `rate` in bytes/s) makes a job open loop: Poisson
//!   arrivals at that mean rate per instance, latency from the arrival.
//! - Sizes follow fio's rules with its default `kb_base=1024`: `k`, `kb`, `ki`
//!   mean 1024 and `kib` means 1000 (fio inverts the IEC suffixes for old
//!   scripts; `kb_base=1000` swaps them back); `m`, `g`, `t` likewise. Times
//!   take `us`, `ms`, `s` (the default), `m`, `h`, `d`.
//! - Every option is in one of three lists: mapped ([`MAPPED_OPTIONS`]),
//!   accepted with a note because it changes only how fio measures or which
//!   engine it uses ([`IGNORED_OPTIONS`]), or refused because it changes the
//!   I/O in a way bench cannot honour ([`REFUSED_OPTIONS`]: the error names
//!   the option, its line, why, and what to write instead). An option in none
//!   of them is refused as unknown. `ioengine=null` (no I/O at all) and other
//!   engines that do not do block I/O are refused; synchronous engines
//!   (`psync`, `sync`, ...) run at queue depth 1, as in fio.

use crate::bench::job::{BenchJob, JobOptions, SyncKind};
use crate::bench::shape::{BlockSizes, Shape};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use tailguard_sim::ConfigError;

/// Options the import maps onto the bench job.
pub const MAPPED_OPTIONS: [&str; 46] = [
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
    "filesize",
    "io_size",
    "io_limit",
    "loops",
    "number_ios",
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
    "nrfiles",
    "prio",
    "prioclass",
    "kb_base",
    "stonewall",
    "wait_for",
    "ioengine",
    "rate_process",
    "bssplit",
    "bsrange",
    "blocksize_range",
    "ramp_time",
    "verify",
    "do_verify",
    "verify_backlog",
    "thinktime",
    "percentage_random",
    "fsync",
    "fdatasync",
    "end_fsync",
    "fsync_on_close",
];

/// Options accepted and ignored, with why: they change how fio measures or
/// reports, or tune its engine, not the I/O the job does.
pub const IGNORED_OPTIONS: [(&str, &str); 46] = [
    (
        "group_reporting",
        "bench reports every job (class) on its own",
    ),
    ("new_group", "bench reports every job on its own"),
    ("thread", "bench's jobs are not processes either way"),
    ("description", "a comment"),
    (
        "lat_percentiles",
        "bench always reports latency percentiles",
    ),
    (
        "clat_percentiles",
        "bench always reports latency percentiles",
    ),
    (
        "slat_percentiles",
        "bench always reports latency percentiles",
    ),
    ("percentile_list", "bench reports its own percentiles"),
    ("gtod_reduce", "bench always takes its timestamps"),
    ("disable_lat", "bench always measures latency"),
    ("disable_clat", "bench always measures latency"),
    ("disable_slat", "bench always measures latency"),
    ("disable_bw_measurement", "bench always measures bandwidth"),
    ("clocksource", "bench uses the monotonic clock"),
    ("unified_rw_reporting", "bench reports per class"),
    ("stats", "bench always keeps statistics"),
    (
        "significant_figures",
        "bench's report has its own precision",
    ),
    ("randrepeat", "bench's offsets come from its seed"),
    ("allrandrepeat", "bench's offsets come from its seed"),
    ("randseed", "bench's offsets come from its seed"),
    (
        "norandommap",
        "bench draws random offsets with replacement (fio's norandommap)",
    ),
    ("random_generator", "bench uses its own generator"),
    ("invalidate", "bench drops the page cache before every run"),
    ("refill_buffers", "bench's data is laid out incompressible"),
    (
        "scramble_buffers",
        "bench's data is laid out incompressible",
    ),
    ("exitall", "bench's jobs end on their own bounds"),
    ("per_job_logs", "bench writes no fio logs"),
    ("log_avg_msec", "bench writes no fio logs"),
    (
        "write_lat_log",
        "bench writes no fio logs; its JSON has a per-second timeline",
    ),
    (
        "write_bw_log",
        "bench writes no fio logs; its JSON has a per-second timeline",
    ),
    (
        "write_iops_log",
        "bench writes no fio logs; its JSON has a per-second timeline",
    ),
    ("write_hist_log", "bench writes no fio logs"),
    (
        "iodepth_batch",
        "bench hands each request to the kernel as it is generated",
    ),
    (
        "iodepth_batch_submit",
        "bench hands each request to the kernel as it is generated",
    ),
    (
        "iodepth_batch_complete",
        "bench reaps completions as they come",
    ),
    (
        "iodepth_batch_complete_min",
        "bench reaps completions as they come",
    ),
    ("iodepth_low", "bench refills the queue at once"),
    ("fixedbufs", "an engine tuning; --mode decides the engine"),
    (
        "registerfiles",
        "an engine tuning; --mode decides the engine",
    ),
    (
        "sqthread_poll",
        "an engine tuning; --mode decides the engine",
    ),
    ("hipri", "an engine tuning; --mode decides the engine"),
    ("cpus_allowed", "bench's threads are not pinned"),
    ("cpumask", "bench's threads are not pinned"),
    (
        "create_on_open",
        "bench lays its data files out before the run",
    ),
    (
        "allow_file_create",
        "bench lays its data files out before the run",
    ),
    ("overwrite", "bench lays its data files out before the run"),
];

/// Options refused because they change the I/O in a way bench does not
/// honour: (option, why, what to write instead).
pub const REFUSED_OPTIONS: [(&str, &str, &str); 10] = [
    (
        "include",
        "bench does not follow includes",
        "paste the included file in",
    ),
    ("sync", "bench does not open files O_SYNC", "remove it"),
    (
        "random_distribution",
        "bench draws random offsets uniformly",
        "remove it (uniform is fio's default)",
    ),
    (
        "zonemode",
        "bench addresses the whole region",
        "give size= and offset= for the region",
    ),
    (
        "zonesize",
        "bench addresses the whole region",
        "give size= and offset= for the region",
    ),
    (
        "zonerange",
        "bench addresses the whole region",
        "give size= and offset= for the region",
    ),
    (
        "offset_increment",
        "bench's clones share the job's region",
        "give each clone its own job with offset=",
    ),
    (
        "fill_device",
        "bench's jobs have a fixed size",
        "give size= (or leave it out to use the whole file)",
    ),
    (
        "exec_prerun",
        "bench does not run commands",
        "run it before bench",
    ),
    (
        "exec_postrun",
        "bench does not run commands",
        "run it after bench",
    ),
];

/// Engines that do block I/O asynchronously: `iodepth` requests in flight.
const ASYNC_ENGINES: [&str; 5] = ["io_uring", "libaio", "posixaio", "windowsaio", "solarisaio"];
/// Engines that do one synchronous request at a time: fio runs them at
/// queue depth 1 whatever `iodepth` says.
const SYNC_ENGINES: [&str; 6] = [
    "psync",
    "sync",
    "vsync",
    "pvsync",
    "pvsync2",
    "io_uring_cmd",
];

/// The block size fio uses when none is given.
const DEFAULT_BLOCK_SIZE_BYTES: u64 = 4096;
/// fio's default `prio` (best effort, middle level).
const DEFAULT_PRIO: u32 = 4;
/// The stop of a job bounded by bytes only, and the run's longest duration:
/// the bench job model's cap (one day).
const UNBOUNDED_STOP_S: f64 = tailguard_sim::scenario::DURATION_S_MAX;

/// A fio job file imported as a bench job.
#[derive(Debug)]
pub struct FioImport {
    /// The bench job: one class per fio job, one bench job per direction and
    /// file, with per-job options (bytes, group, target).
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
    /// Whether it came from `[global]` (errors say so).
    global: bool,
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

/// Where a setting is, for an error: `line N` (`line N ([global])`).
fn setting_at(setting: &Setting, message: impl Into<String>) -> ConfigError {
    if setting.global {
        ConfigError::new(format!("line {} ([global])", setting.line), message)
    } else {
        at(setting.line, message)
    }
}

/// Notes, each said once.
#[derive(Debug, Default)]
struct Notes {
    lines: Vec<String>,
    said: BTreeSet<String>,
}

impl Notes {
    fn push(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Adds `line` unless a note with `key` was already added.
    fn once(&mut self, key: &str, line: impl FnOnce() -> String) {
        if self.said.insert(key.to_string()) {
            self.lines.push(line());
        }
    }
}

impl FioImport {
    /// Reads and imports a fio job file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        tailguard_sim::scenario::read_config_file(path, Self::from_text)
    }

    /// Imports a fio job file's text.
    pub fn from_text(text: &str) -> Result<Self, ConfigError> {
        let sections = lex(text)?;
        let mut notes = Notes::default();
        let mut globals: Vec<Setting> = Vec::new();
        let mut jobs: Vec<FioJob> = Vec::new();
        for mut section in sections {
            let global = section.name == "global";
            for setting in &mut section.settings {
                setting.global = global;
                check_known(setting, &mut notes)?;
            }
            if global {
                globals.append(&mut section.settings);
                continue;
            }
            let mut effective = globals.clone();
            effective.append(&mut section.settings);
            let mut job = FioJob::from_settings(&section, &effective, &mut notes)?;
            job.group = group_of(&effective, &jobs)?;
            jobs.push(job);
        }
        if jobs.is_empty() {
            return Err(ConfigError::new(
                "(fio file)",
                "has no job section; add one, e.g. [randread] with rw=randread, bs=4k, \
                 iodepth=16, size=1g",
            ));
        }
        rename_duplicates(&mut jobs, &mut notes);
        build(&jobs, notes)
    }
}

/// Splits the text into sections of settings: comments dropped, variables
/// replaced.
fn lex(text: &str) -> Result<Vec<Section>, ConfigError> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = strip_comment(raw).trim();
        if trimmed.is_empty() {
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
            Some((key, value)) => (
                key.trim(),
                Some(expand_variables(value.trim()).map_err(|message| at(line, message))?),
            ),
            None => (trimmed, None),
        };
        section.settings.push(Setting {
            line,
            key: key.to_string(),
            value,
            global: false,
        });
    }
    Ok(sections)
}

/// The line without its comment: from a `#` or `;` at its start or after
/// whitespace (so `a#b` in a file name stays).
fn strip_comment(line: &str) -> &str {
    let mut previous_blank = true;
    for (index, character) in line.char_indices() {
        if (character == '#' || character == ';') && previous_blank {
            return &line[..index];
        }
        previous_blank = character.is_whitespace();
    }
    line
}

/// Replaces fio's variables: `$pagesize`, `$mb_memory`, `$ncpus`, and
/// `${NAME}` (an environment variable, which must be set).
fn expand_variables(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        rest = &rest[dollar + 1..];
        if let Some(braced) = rest.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("`${{{braced}` has no closing brace; write ${{NAME}}"))?;
            let name = &braced[..end];
            let variable = std::env::var(name).map_err(|_| {
                format!("environment variable `{name}` (in `{value}`) is not set; set it or write the value")
            })?;
            out.push_str(&variable);
            rest = &braced[end + 1..];
            continue;
        }
        let known = [
            ("pagesize", system_value(libc::_SC_PAGESIZE, 1)),
            ("mb_memory", memory_mb()),
            ("ncpus", system_value(libc::_SC_NPROCESSORS_ONLN, 1)),
        ];
        match known.iter().find(|(name, _)| rest.starts_with(name)) {
            Some((name, number)) => {
                out.push_str(&number.to_string());
                rest = &rest[name.len()..];
            }
            None => {
                return Err(format!(
                    "unknown variable in `{value}`; bench knows $pagesize, $mb_memory, $ncpus \
                     and ${{ENVIRONMENT_VARIABLE}}"
                ))
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A `sysconf` value divided by `divisor`.
fn system_value(name: libc::c_int, divisor: u64) -> u64 {
    // SAFETY: sysconf only reads a system setting.
    let value = unsafe { libc::sysconf(name) };
    u64::try_from(value).unwrap_or(0) / divisor
}

/// Physical memory in MiB, as fio's `$mb_memory`.
fn memory_mb() -> u64 {
    system_value(libc::_SC_PHYS_PAGES, 1) * system_value(libc::_SC_PAGESIZE, 1) / (1 << 20)
}

/// Refuses unknown and refused options; notes ignored ones once each.
fn check_known(setting: &Setting, notes: &mut Notes) -> Result<(), ConfigError> {
    let key = setting.key.as_str();
    if let Some((_, why)) = IGNORED_OPTIONS.iter().find(|(name, _)| *name == key) {
        notes.once(key, || {
            format!(
                "line {}: `{key}` accepted and ignored: it changes how fio measures, not the \
                 I/O ({why})",
                setting.line
            )
        });
        return Ok(());
    }
    if MAPPED_OPTIONS.contains(&key) {
        return Ok(());
    }
    if let Some((_, why, instead)) = REFUSED_OPTIONS.iter().find(|(name, ..)| *name == key) {
        return Err(setting_at(
            setting,
            format!(
                "fio option `{key}` changes the I/O and bench cannot honour it: {why}; {instead}"
            ),
        ));
    }
    Err(setting_at(
        setting,
        format!(
            "fio option `{key}` is unknown to bench; it may change the I/O, so bench refuses it \
             rather than guess: remove it if it only tunes fio (docs/reference/fio-import.md \
             lists what bench maps, ignores and refuses)"
        ),
    ))
}

/// The job's group: the previous job's, or the next one after `stonewall` or
/// after `wait_for` naming a job of the current group.
fn group_of(settings: &[Setting], earlier: &[FioJob]) -> Result<usize, ConfigError> {
    let options = Options::new(settings)?;
    let current = earlier.last().map_or(0, |previous| previous.group);
    let waited = match options.parse("wait_for", |text| Ok(text.to_string()))? {
        None => None,
        Some((line, name)) => Some(earlier.iter().find(|other| other.name == name).ok_or_else(
            || {
                options.error(
                    "wait_for",
                    line,
                    format!(
                        "`wait_for={name}` names no earlier job; give the name of a job \
                             above this one"
                    ),
                )
            },
        )?),
    };
    if earlier.is_empty() {
        return Ok(0);
    }
    // `stonewall` in [global] applies to every job, as in fio: each job then
    // waits for the ones before it.
    let stonewall = options.flag("stonewall")? == Some(true);
    let waits_on_current = waited.is_some_and(|waited| waited.group == current);
    Ok(if stonewall || waits_on_current {
        current + 1
    } else {
        current
    })
}

/// Renames repeated job names `NAME-2`, `NAME-3`, ... (each job is a class,
/// and class names are unique).
fn rename_duplicates(jobs: &mut [FioJob], notes: &mut Notes) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for job in jobs.iter_mut() {
        let count = seen.entry(job.name.clone()).or_insert(0);
        *count += 1;
        if *count > 1 {
            let renamed = format!("{}-{count}", job.name);
            notes.push(format!(
                "line {}: job name `{}` is used more than once; this one's class is `{renamed}`",
                job.line, job.name
            ));
            job.name = renamed;
        }
    }
}

/// The last value of each mapped option (later settings override earlier
/// ones), with aliases resolved.
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
                "blocksize_range" => "bsrange",
                "io_limit" => "io_size",
                other => match MAPPED_OPTIONS.iter().find(|known| **known == other) {
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

    /// The line of each option that is set, by canonical name.
    fn lines(&self) -> BTreeMap<&'static str, usize> {
        self.values
            .iter()
            .map(|(key, setting)| (*key, setting.line))
            .collect()
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
            setting_at(setting, format!("`{key}` needs a value: write {key}=VALUE"))
        })?;
        parse(value)
            .map(|parsed| Some((setting.line, parsed)))
            .map_err(|message| setting_at(setting, format!("`{key}={value}`: {message}")))
    }

    /// A boolean flag: bare (`time_based`) or `=1`/`=0`.
    fn flag(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        let Some(setting) = self.get(key) else {
            return Ok(None);
        };
        match setting.value.as_deref() {
            None | Some("1") | Some("true") => Ok(Some(true)),
            Some("0") | Some("false") => Ok(Some(false)),
            Some(other) => Err(setting_at(
                setting,
                format!("`{key}={other}`: give 1 or 0 (or the bare `{key}`)"),
            )),
        }
    }

    /// An error about `key` at its line, or at `fallback` when it is unset.
    fn error(&self, key: &str, fallback: usize, message: impl Into<String>) -> ConfigError {
        match self.get(key) {
            Some(setting) => setting_at(setting, message),
            None => at(fallback, message),
        }
    }
}

/// The directions a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Read,
    Write,
    Both,
}

/// Where one of a job's files is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// An existing regular file or block device, used in place: every job
    /// naming it shares one data region.
    UsedAsIs(PathBuf),
    /// A data file laid out in this directory for this job and file alone.
    LaidOut(PathBuf),
    /// No filename or directory: the command line's `--target`.
    CommandLine,
}

/// One of a job's files: where, how large, from where.
#[derive(Clone, Debug)]
struct FioFile {
    place: Place,
    size_bytes: u64,
    offset_bytes: u64,
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
    files: Vec<FioFile>,
    start_ns: u64,
    /// When it stops submitting (`runtime`); `None`: when its bytes are done.
    stop_ns: Option<u64>,
    /// Bytes each clone moves over all its files and both directions, for a
    /// size-bounded job (no `time_based`).
    io_bytes: Option<u64>,
    rate_iops: [Option<f64>; 2],
    shares: u32,
    group: usize,
    /// Measured from `start_ns + ramp_ns` on (`ramp_time`).
    ramp_ns: u64,
    /// Wait after each completion (`thinktime`).
    think_ns: u64,
    /// Per direction: sizes and offsets beyond the pattern.
    shapes: [Shape; 2],
    /// Writes carry checksummed blocks that are read back (`verify`).
    verify: bool,
    /// A sync after every this many writes (`fsync`, `fdatasync`); 0: none.
    sync_every_writes: u32,
    sync_kind: SyncKind,
    /// An fsync when the group ends (`end_fsync`, `fsync_on_close`).
    end_fsync: bool,
    /// Rated arrivals evenly spaced (`rate_process=linear`, fio's default).
    even_arrivals: bool,
    /// The line of each option set for the job, by canonical name.
    option_lines: BTreeMap<&'static str, usize>,
}

/// A size or offset: bytes, or a percentage of the existing file or device.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Amount {
    Bytes(u64),
    Percent(f64),
}

impl Amount {
    fn parse(text: &str, kb_base: u64) -> Result<Self, String> {
        match text.trim().strip_suffix('%') {
            Some(number) => number
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|percent| (0.0..=100.0).contains(percent))
                .map(Amount::Percent)
                .ok_or_else(|| format!("`{text}` is not a percentage from 0% to 100%")),
            None => parse_fio_bytes(text, kb_base).map(Amount::Bytes),
        }
    }
}

impl FioJob {
    fn from_settings(
        section: &Section,
        settings: &[Setting],
        notes: &mut Notes,
    ) -> Result<Self, ConfigError> {
        let options = Options::new(settings)?;
        note_iec_units(&options, notes);
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
        let mut block_size_bytes = block_sizes(&options)?;
        let shapes = shapes(&options, random, &mut block_size_bytes)?;
        let iodepth = queue_depth(&options, &name, notes)?;
        let numjobs = options
            .parse("numjobs", |text| parse_count(text, "a number of jobs"))?
            .map_or(1, |(_, count)| count);
        let (start_ns, stop_ns, bounded, ramp_ns) = timing(&options, section.line, &name)?;
        let think_ns = think_time(&options)?;
        let iodepth = think_depth(&options, &name, iodepth, think_ns, notes);
        let verify = verify(&options, &name, notes)?;
        let (sync_every_writes, sync_kind) = syncs(&options)?;
        let end_fsync = options.flag("end_fsync")? == Some(true)
            || options.flag("fsync_on_close")? == Some(true);
        note_direct(&options, section.line, &name, notes)?;
        let files = files(&options, section.line, &name, block_size_bytes, notes)?;
        check_requests_fit(
            &options,
            section.line,
            &name,
            mix,
            &shapes,
            block_size_bytes,
            &files,
        )?;
        let mut job = Self {
            name,
            line: section.line,
            random,
            mix,
            read_percent,
            block_size_bytes,
            iodepth,
            numjobs,
            files,
            start_ns,
            stop_ns,
            io_bytes: None,
            rate_iops: rates(&options, mean_request_bytes(&shapes, block_size_bytes))?,
            shares: shares_of(&options)?,
            group: 0,
            ramp_ns,
            think_ns,
            shapes,
            verify,
            sync_every_writes,
            sync_kind,
            end_fsync,
            even_arrivals: rate_process(&options)?,
            option_lines: options.lines(),
        };
        if bounded {
            job.io_bytes = Some(io_bytes(&options, &job)?);
        }
        Ok(job)
    }

    /// The bench jobs it becomes per file: (is write, queue depth or rate).
    fn directions(&self) -> Vec<(bool, Load)> {
        let files = self.files.len() as u32;
        let load = |write: bool, depth: u32| match self.rate_iops[usize::from(write)] {
            Some(rate) => Load::Rate(rate / f64::from(files)),
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

    /// How many of its files the bench jobs of one direction with `load`
    /// run on: all of them, except that a queue depth below the number of
    /// files runs on the first `depth` files, one request in flight each
    /// (bench gives every file a queue of its own), so the job keeps its
    /// depth.
    fn files_used(&self, load: Load) -> usize {
        match load {
            Load::Depth(depth) => self.files.len().min(depth.max(1) as usize),
            Load::Rate(_) => self.files.len(),
        }
    }

    /// The bytes each instance of one of its bench jobs moves: the job's
    /// bytes split by direction and between the `files` files that
    /// direction runs on, whole blocks, at least one.
    fn limit_bytes(&self, write: bool, files: usize) -> Option<u64> {
        let io_bytes = self.io_bytes?;
        let share = match (self.mix, write) {
            (Mix::Both, false) => f64::from(self.read_percent) / 100.0,
            (Mix::Both, true) => f64::from(100 - self.read_percent) / 100.0,
            _ => 1.0,
        };
        let block = self.block_size_bytes[usize::from(write)];
        let bytes = io_bytes as f64 * share / files.max(1) as f64;
        let blocks = ((bytes / block as f64).ceil() as u64).clamp(1, u64::MAX / block.max(1));
        Some(blocks * block)
    }
}

/// How a bench job generates requests.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    Depth(u32),
    Rate(f64),
}

/// Notes once that fio reads `KiB` as 1000 bytes (with its default kb_base).
fn note_iec_units(options: &Options, notes: &mut Notes) {
    for key in ["bs", "size", "offset", "rate", "io_size", "filesize"] {
        let Some(setting) = options.get(key) else {
            continue;
        };
        let value = setting.value.as_deref().unwrap_or_default();
        if value.to_ascii_lowercase().contains("ib") {
            notes.once(&format!("ib{key}"), || {
                format!(
                    "line {}: `{key}={value}`: like fio, bench reads KiB/MiB/GiB as powers of \
                     1000 unless kb_base=1000 (fio inverts the IEC units for old scripts); \
                     write k/m/g for powers of 1024",
                    setting.line
                )
            });
        }
    }
}

/// `bs=R[,W]` (default 4k each); `bs=a-b` is refused (one size per direction).
fn block_sizes(options: &Options) -> Result<[u64; 2], ConfigError> {
    let kb_base = options.kb_base;
    let sizes = options.parse("bs", |text| {
        let parts = per_direction(text, |part| {
            if part.contains('-') {
                // A range: `shapes` reads it.
                return Ok(DEFAULT_BLOCK_SIZE_BYTES);
            }
            let size = parse_fio_bytes(part, kb_base)?;
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
    })?;
    Ok(sizes.map_or([DEFAULT_BLOCK_SIZE_BYTES; 2], |(_, sizes)| sizes))
}

/// Per direction, the shape of its requests: `bssplit`, `bsrange` or
/// `bs=a-b` (the smallest size becomes the job's block size),
/// `percentage_random`, and `rw`'s `:N` modifier.
fn shapes(
    options: &Options,
    random: bool,
    block_size_bytes: &mut [u64; 2],
) -> Result<[Shape; 2], ConfigError> {
    let kb_base = options.kb_base;
    let mut shapes = [Shape::default(), Shape::default()];
    let split = options.parse("bssplit", |text| {
        per_direction_list(text, |part| parse_split(part, kb_base))
    })?;
    let range = match options.parse("bsrange", |text| {
        per_direction_list(text, |part| parse_range(part, kb_base))
    })? {
        Some(range) => Some(range),
        None => options.parse("bs", |text| {
            if text.contains('-') {
                per_direction_list(text, |part| parse_range(part, kb_base))
            } else {
                Ok([None, None])
            }
        })?,
    };
    for (direction, shape) in shapes.iter_mut().enumerate() {
        let sizes = split
            .as_ref()
            .and_then(|(_, sizes)| sizes[direction].clone())
            .or_else(|| {
                range
                    .as_ref()
                    .and_then(|(_, sizes)| sizes[direction].clone())
            });
        if let Some(sizes) = sizes {
            block_size_bytes[direction] = sizes.smallest_bytes().unwrap_or(4096);
            shape.block_sizes = sizes;
        }
    }
    if let Some((_, percents)) = options.parse("percentage_random", |text| {
        per_direction(text, |part| {
            part.parse::<u32>()
                .ok()
                .filter(|percent| *percent <= 100)
                .ok_or_else(|| format!("`{part}` is not a percentage from 0 to 100"))
        })
    })? {
        for (shape, percent) in shapes.iter_mut().zip(percents) {
            shape.random_percent = percent;
        }
    }
    let modifier = options.parse("rw", |text| {
        Ok(text
            .split_once(':')
            .map(|(_, modifier)| modifier.to_string()))
    })?;
    if let Some((_, Some(modifier))) = modifier {
        rw_modifier(options, &modifier, random, &mut shapes)?;
    }
    Ok(shapes)
}

/// `rw=randread:N` (a new random offset every N requests) or `rw=read:N`
/// (N bytes skipped after each sequential request).
fn rw_modifier(
    options: &Options,
    modifier: &str,
    random: bool,
    shapes: &mut [Shape; 2],
) -> Result<(), ConfigError> {
    let setting = options.get("rw").expect("rw is set");
    let parsed = if random {
        parse_count(modifier, "a number of requests").map(|run| (run, 0))
    } else {
        parse_fio_bytes(modifier, options.kb_base).map(|skip| (0, skip))
    };
    let (run, skip) =
        parsed.map_err(|message| setting_at(setting, format!("`rw` modifier: {message}")))?;
    for shape in shapes.iter_mut() {
        shape.random_run = run;
        shape.skip_bytes = skip;
    }
    Ok(())
}

/// fio's `R,W` values that are lists or ranges themselves (`bssplit`,
/// `bsrange`): (read, write).
fn per_direction_list<T: Clone>(
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
        None => read.clone(),
    };
    Ok([read, write])
}

/// `bssplit`'s `SIZE/PERCENT:SIZE/PERCENT...`; sizes without a percentage
/// share what the others leave.
fn parse_split(text: &str, kb_base: u64) -> Result<BlockSizes, String> {
    let mut sizes = Vec::new();
    let mut unweighted = Vec::new();
    for entry in text.split(':').filter(|entry| !entry.is_empty()) {
        let (size, percent) = entry
            .split_once('/')
            .map_or((entry, None), |(size, percent)| (size, Some(percent)));
        let bytes = parse_block_size(size, kb_base)?;
        match percent {
            Some(percent) => sizes.push((
                bytes,
                percent
                    .parse::<u32>()
                    .ok()
                    .filter(|percent| *percent <= 100)
                    .ok_or_else(|| format!("`{percent}` is not a percentage"))?,
            )),
            None => unweighted.push(bytes),
        }
    }
    let given: u32 = sizes.iter().map(|(_, percent)| percent).sum();
    if given > 100 {
        return Err(format!("the percentages add up to {given}, more than 100"));
    }
    let count = unweighted.len() as u32;
    for bytes in unweighted {
        sizes.push((bytes, (100 - given) / count));
    }
    sizes.retain(|(_, weight)| *weight > 0);
    if sizes.is_empty() {
        return Err("no size has a share; write e.g. 4k/70:64k/30".into());
    }
    Ok(BlockSizes::Weighted(sizes))
}

/// `bsrange`'s `LOW-HIGH`, drawn as fio draws it ([`BlockSizes::Range`]).
fn parse_range(text: &str, kb_base: u64) -> Result<BlockSizes, String> {
    let (low, high) = text
        .split_once('-')
        .ok_or_else(|| format!("`{text}` is not a range; write e.g. 4k-64k"))?;
    let (low_bytes, high_bytes) = (
        parse_block_size(low, kb_base)?,
        parse_block_size(high, kb_base)?,
    );
    if low_bytes > high_bytes {
        return Err(format!(
            "`{text}` goes from high to low; write the smaller size first"
        ));
    }
    Ok(BlockSizes::Range {
        low_bytes,
        high_bytes,
    })
}

/// One block size: fio units, a multiple of 512.
fn parse_block_size(text: &str, kb_base: u64) -> Result<u64, String> {
    let bytes = parse_fio_bytes(text, kb_base)?;
    if bytes == 0 || bytes % 512 != 0 {
        return Err(format!(
            "`{text}` is {bytes} bytes; block sizes are multiples of 512, e.g. 4k"
        ));
    }
    Ok(bytes)
}

/// `verify` (any method but `0`/`null`): checksummed writes, checked on read
/// back; `verify_backlog` is noted (bench checks at the end of the group).
fn verify(options: &Options, name: &str, notes: &mut Notes) -> Result<bool, ConfigError> {
    let method = options.parse("verify", |text| Ok(text.to_string()))?;
    let Some((line, method)) = method else {
        return Ok(false);
    };
    if method == "0" || method == "null" {
        return Ok(false);
    }
    if let Some((line, _)) = options.parse("verify_backlog", |text| Ok(text.to_string()))? {
        notes.once("verify_backlog", || {
            format!(
                "line {line}: `verify_backlog` emulated: bench checks every written block when \
                 the job's group ends, not every N writes"
            )
        });
    }
    if options.flag("do_verify")? == Some(false) {
        notes.push(format!(
            "line {line}: job `{name}`: `do_verify=0` not honoured: bench reads back and checks \
             every block a verify job wrote"
        ));
    }
    notes.push(format!(
        "line {line}: job `{name}`: `verify={method}` emulated: writes carry a header and a \
         64-bit checksum (bench's own, whatever the method), reads of such blocks are checked, \
         and every written block is read back and checked when the group ends"
    ));
    Ok(true)
}

/// `thinktime`: microseconds unless a unit is given, as in fio.
fn think_time(options: &Options) -> Result<u64, ConfigError> {
    let think = options.parse("thinktime", |text| {
        let plain = text.chars().all(|c| c.is_ascii_digit());
        parse_fio_time_ns(&if plain {
            format!("{text}us")
        } else {
            text.to_string()
        })
    })?;
    Ok(think.map_or(0, |(_, ns)| ns))
}

/// The queue depth of a job with a think time: 1. fio stalls the whole job
/// for `thinktime` after every `thinktime_blocks` requests (default 1,
/// which bench does not let change), waiting first for what it has in
/// flight, so such a job has one request in flight whatever `iodepth`
/// says; with a depth per clone, bench's think time after each completion
/// would otherwise pace `iodepth` streams at once.
fn think_depth(
    options: &Options,
    name: &str,
    iodepth: u32,
    think_ns: u64,
    notes: &mut Notes,
) -> u32 {
    if think_ns == 0 || iodepth < 2 {
        return iodepth;
    }
    let line = options.get("thinktime").map_or(0, |setting| setting.line);
    notes.push(format!(
        "line {line}: job `{name}`: with `thinktime`, fio waits for each request and then \
         thinks before the next (thinktime_blocks=1), so it runs at queue depth 1 whatever \
         iodepth={iodepth} says; bench does the same"
    ));
    1
}

/// `rate_process`: `linear` (fio's default; evenly spaced arrivals) or
/// `poisson`.
fn rate_process(options: &Options) -> Result<bool, ConfigError> {
    let process = options.parse("rate_process", |text| match text {
        "linear" => Ok(true),
        "poisson" => Ok(false),
        _ => Err("not a rate process; use linear (fio's default) or poisson".into()),
    })?;
    Ok(process.is_none_or(|(_, linear)| linear))
}

/// `fsync=N` or `fdatasync=N` (the later line wins): a sync after every N
/// writes; 0 or unset: none.
fn syncs(options: &Options) -> Result<(u32, SyncKind), ConfigError> {
    let count = |text: &str| {
        text.parse::<u32>()
            .map_err(|_| format!("`{text}` is not a number of writes (0 for none)"))
    };
    let fsync = options.parse("fsync", count)?;
    let fdatasync = options.parse("fdatasync", count)?;
    Ok(match (fsync, fdatasync) {
        (Some((fsync_line, every)), Some((data_line, _))) if fsync_line > data_line => {
            (every, SyncKind::Fsync)
        }
        (_, Some((_, every))) => (every, SyncKind::Fdatasync),
        (Some((_, every)), None) => (every, SyncKind::Fsync),
        (None, None) => (0, SyncKind::Fsync),
    })
}

/// `iodepth`, and `ioengine`: `null` and engines that do not do block I/O are
/// refused; synchronous engines run at depth 1, as in fio.
fn queue_depth(options: &Options, name: &str, notes: &mut Notes) -> Result<u32, ConfigError> {
    let iodepth = options
        .parse("iodepth", |text| parse_count(text, "a queue depth"))?
        .map_or(1, |(_, depth)| depth);
    let Some((line, engine)) = options.parse("ioengine", |text| Ok(text.to_string()))? else {
        return Ok(iodepth);
    };
    let engine = engine.strip_prefix("external:").unwrap_or(&engine);
    if engine == "null" {
        return Err(options.error(
            "ioengine",
            line,
            "`ioengine=null` does no I/O at all, and bench always does real I/O on its target; \
             remove the job, or model the device with `tailguard sim`",
        ));
    }
    if ASYNC_ENGINES.contains(&engine) {
        notes.once("ioengine", || {
            format!(
                "line {line}: `ioengine={engine}` accepted: bench's --mode decides how the I/O is \
                 done (tailguard and kernel-direct: io_uring with O_DIRECT; kernel-buffered: \
                 threads through the page cache)"
            )
        });
        return Ok(iodepth);
    }
    if SYNC_ENGINES.contains(&engine) || engine == "mmap" {
        if iodepth > 1 {
            notes.push(format!(
                "line {line}: job `{name}`: `ioengine={engine}` is synchronous, so fio runs it at \
                 queue depth 1 whatever iodepth says; bench does the same"
            ));
        }
        return Ok(1);
    }
    Err(options.error(
        "ioengine",
        line,
        format!(
            "`ioengine={engine}` is not a block I/O engine bench can stand in for; use one of \
             {} (asynchronous) or {} (synchronous, depth 1)",
            ASYNC_ENGINES.join(", "),
            SYNC_ENGINES.join(", ")
        ),
    ))
}

/// (start, stop, size-bounded) from `startdelay`, `runtime`, `time_based`.
fn timing(
    options: &Options,
    job_line: usize,
    name: &str,
) -> Result<(u64, Option<u64>, bool, u64), ConfigError> {
    let ramp_ns = options
        .parse("ramp_time", parse_fio_time_ns)?
        .map_or(0, |(_, ns)| ns);
    let start_ns = options
        .parse("startdelay", parse_fio_time_ns)?
        .map_or(0, |(_, ns)| ns);
    let runtime = options.parse("runtime", parse_fio_time_ns)?;
    if let Some((line, 0)) = runtime {
        return Err(options.error("runtime", line, "`runtime` is 0; give a positive time"));
    }
    let time_based = options.flag("time_based")? == Some(true);
    if time_based && runtime.is_none() {
        return Err(options.error(
            "time_based",
            job_line,
            format!(
                "job `{name}` is time_based but has no `runtime`, so fio would run it until \
                 stopped; add runtime=30 (seconds), or drop time_based to stop after size bytes"
            ),
        ));
    }
    // As in fio, the ramp comes before the measured runtime.
    Ok((
        start_ns,
        runtime.map(|(_, ns)| start_ns + ramp_ns + ns),
        !time_based,
        ramp_ns,
    ))
}

/// Notes once that `direct`/`buffered` are the mode's business.
fn note_direct(
    options: &Options,
    job_line: usize,
    name: &str,
    notes: &mut Notes,
) -> Result<(), ConfigError> {
    let direct = match (options.flag("direct")?, options.flag("buffered")?) {
        (Some(direct), _) => direct,
        (None, Some(buffered)) => !buffered,
        (None, None) => false,
    };
    if !direct {
        notes.once("direct", || {
            format!(
                "line {job_line}: fio would do buffered I/O for job `{name}` (direct=0, fio's \
                 default); in bench the mode decides: tailguard and kernel-direct use O_DIRECT, \
                 kernel-buffered the page cache"
            )
        });
    }
    Ok(())
}

/// The bytes each clone moves: `io_size` (default: all its files' sizes,
/// or with `filesize`, `size` where that is less) times `loops`, or fewer
/// where `number_ios` requests (of the mean request size) come first: as in
/// fio, `number_ios` stops a job early but never extends the I/O it does.
fn io_bytes(options: &Options, job: &FioJob) -> Result<u64, ConfigError> {
    let loops = options
        .parse("loops", |text| parse_count(text, "a number of passes"))?
        .map_or(1, |(_, loops)| u64::from(loops));
    let kb_base = options.kb_base;
    let io_size = options.parse("io_size", |text| {
        parse_fio_bytes(text, kb_base).and_then(|bytes| {
            if bytes == 0 {
                Err("is 0; give the bytes the job moves, e.g. io_size=1g".into())
            } else {
                Ok(bytes)
            }
        })
    })?;
    let bytes = match io_size {
        Some((_, bytes)) => bytes,
        None => default_io_bytes(options, job)?,
    }
    .saturating_mul(loops);
    let Some((_, count)) = options.parse("number_ios", |text| {
        text.parse::<u64>()
            .ok()
            .filter(|count| *count > 0)
            .ok_or_else(|| format!("`{text}` is not a number of requests"))
    })?
    else {
        return Ok(bytes);
    };
    let read_share = match job.mix {
        Mix::Read => 1.0,
        Mix::Write => 0.0,
        Mix::Both => f64::from(job.read_percent) / 100.0,
    };
    let [read, write] = mean_request_bytes(&job.shapes, job.block_size_bytes);
    let mean_request = read * read_share + write * (1.0 - read_share);
    Ok(((count as f64 * mean_request).round() as u64).min(bytes))
}

/// The bytes a job without `io_size` moves per pass: its files' sizes
/// together. With `filesize` (which sizes the files instead of `size`), a
/// `size` in bytes below that total is the amount to move, as fio's
/// `size` then only stands in for `io_size` (fio clamps it to the files'
/// total).
fn default_io_bytes(options: &Options, job: &FioJob) -> Result<u64, ConfigError> {
    let files_bytes: u64 = job.files.iter().map(|file| file.size_bytes).sum();
    if options.get("filesize").is_none() {
        return Ok(files_bytes);
    }
    let kb_base = options.kb_base;
    Ok(
        match options.parse("size", |text| Amount::parse(text, kb_base))? {
            Some((_, Amount::Bytes(bytes))) if bytes > 0 => bytes.min(files_bytes),
            _ => files_bytes,
        },
    )
}

/// The job's files, placed and sized.
fn files(
    options: &Options,
    job_line: usize,
    name: &str,
    block_size_bytes: [u64; 2],
    notes: &mut Notes,
) -> Result<Vec<FioFile>, ConfigError> {
    let places = places(options, job_line, notes)?;
    let amounts = FileAmounts::parse(options)?;
    let alignment = block_size_bytes[0].max(block_size_bytes[1]);
    let count = places.len() as u64;
    let mut files = Vec::with_capacity(places.len());
    for place in places {
        files.push(sized_file(
            options, job_line, name, &amounts, alignment, count, place,
        )?);
    }
    Ok(files)
}

/// A job's `size`, `filesize` and `offset`, each with the line that sets it.
struct FileAmounts {
    size: Option<(usize, Amount)>,
    filesize: Option<(usize, u64)>,
    offset: Option<(usize, Amount)>,
}

impl FileAmounts {
    /// Reads the three keys; a range of file sizes is refused.
    fn parse(options: &Options) -> Result<Self, ConfigError> {
        let kb_base = options.kb_base;
        let size = options.parse("size", |text| Amount::parse(text, kb_base))?;
        let filesize = options.parse("filesize", |text| {
            if text.contains('-') {
                Err(
                    "a range of file sizes is not supported; give one size, e.g. filesize=1g"
                        .into(),
                )
            } else {
                parse_fio_bytes(text, kb_base)
            }
        })?;
        let offset = options.parse("offset", |text| Amount::parse(text, kb_base))?;
        Ok(Self {
            size,
            filesize,
            offset,
        })
    }
}

/// One of the job's `count` files at `place`, with its offset and size: a
/// percentage is of the existing file or device, rounded down to `alignment`;
/// `size` is shared between the files; without `size` the existing file's
/// size past the offset is used.
fn sized_file(
    options: &Options,
    job_line: usize,
    name: &str,
    amounts: &FileAmounts,
    alignment: u64,
    count: u64,
    place: Place,
) -> Result<FioFile, ConfigError> {
    let existing = match &place {
        Place::UsedAsIs(path) => default_size(path),
        _ => None,
    };
    let of_existing = |what: &str, line: usize, percent: f64| {
        existing
            .map(|bytes| (bytes as f64 * percent / 100.0) as u64 / alignment * alignment)
            .ok_or_else(|| {
                options.error(
                    what,
                    line,
                    format!(
                        "`{what}={percent}%` is a share of an existing file or device, and \
                         job `{name}` names none; give bytes, e.g. {what}=1g"
                    ),
                )
            })
    };
    let offset_bytes = match amounts.offset {
        None => 0,
        Some((_, Amount::Bytes(bytes))) => bytes,
        Some((line, Amount::Percent(percent))) => of_existing("offset", line, percent)?,
    };
    let size_bytes = match (amounts.filesize, amounts.size) {
        (Some((_, bytes)), _) => bytes,
        (None, Some((_, Amount::Bytes(bytes)))) => bytes / count,
        (None, Some((line, Amount::Percent(percent)))) => of_existing("size", line, percent)?
            .min(existing.unwrap_or(0).saturating_sub(offset_bytes)),
        (None, None) => existing
            .map(|bytes| bytes.saturating_sub(offset_bytes))
            .filter(|bytes| *bytes > 0)
            .ok_or_else(|| {
                at(
                    job_line,
                    format!(
                        "job `{name}` has no `size`; give the bytes it addresses, e.g. \
                         size=1g (without it, bench takes the size of the file or block \
                         device filename= names, when that exists)"
                    ),
                )
            })?,
    };
    Ok(FioFile {
        place,
        size_bytes,
        offset_bytes,
    })
}

/// Refuses a job whose largest request (`bs`, or the largest size of
/// `bssplit`/`bsrange`) is larger than the region of one of its files: such
/// a request would start at the region's first byte and run past its end,
/// over data the job was not given.
fn check_requests_fit(
    options: &Options,
    job_line: usize,
    name: &str,
    mix: Mix,
    shapes: &[Shape; 2],
    block_size_bytes: [u64; 2],
    files: &[FioFile],
) -> Result<(), ConfigError> {
    let Some(region_bytes) = files.iter().map(|file| file.size_bytes).min() else {
        return Ok(());
    };
    let directions: &[usize] = match mix {
        Mix::Read => &[0],
        Mix::Write => &[1],
        Mix::Both => &[0, 1],
    };
    for &direction in directions {
        let shape = &shapes[direction];
        let largest = shape.largest_bytes(block_size_bytes[direction]);
        if largest <= region_bytes {
            continue;
        }
        let key = if shape.block_sizes == BlockSizes::Job {
            "bs"
        } else {
            ["bssplit", "bsrange"]
                .into_iter()
                .find(|key| options.get(key).is_some())
                .unwrap_or("bs")
        };
        let per_file = if files.len() > 1 { " per file" } else { "" };
        return Err(options.error(
            key,
            job_line,
            format!(
                "job `{name}`: its largest block size ({largest} bytes, from `{key}`) is larger \
                 than the {region_bytes} bytes it addresses{per_file} (`size`/`filesize`), so \
                 a request would run past the end of its region; make the largest size in \
                 `{key}` at most {region_bytes} bytes, or raise `size`"
            ),
        ));
    }
    Ok(())
}

/// Where the job's files are: `filename` (`a:b` for several; `\:` for a
/// colon in a name), under `directory` when both are given; else `nrfiles`
/// data files in `directory`, or on the command line's `--target`.
fn places(
    options: &Options,
    job_line: usize,
    notes: &mut Notes,
) -> Result<Vec<Place>, ConfigError> {
    let directory = options.parse("directory", |text| Ok(PathBuf::from(text)))?;
    let filename = options.parse("filename", |text| Ok(split_file_names(text)))?;
    let nrfiles = options
        .parse("nrfiles", |text| parse_count(text, "a number of files"))?
        .map_or(1, |(_, count)| count as usize);
    let Some((line, names)) = filename else {
        let place = match directory {
            Some((_, directory)) => Place::LaidOut(directory),
            None => Place::CommandLine,
        };
        return Ok(vec![place; nrfiles]);
    };
    if names.is_empty() {
        return Err(options.error(
            "filename",
            job_line,
            "`filename` is empty; give a file or device",
        ));
    }
    let mut places = Vec::with_capacity(names.len());
    for name in names {
        let path = match &directory {
            Some((_, directory)) => directory.join(&name),
            None => PathBuf::from(&name),
        };
        if std::fs::metadata(&path).is_ok() {
            places.push(Place::UsedAsIs(path));
            continue;
        }
        let parent = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        if !parent.is_dir() {
            return Err(options.error(
                "filename",
                job_line,
                format!(
                    "`filename={}`: neither the file nor its directory {} exists; create the \
                     directory, or name an existing file or device",
                    path.display(),
                    parent.display()
                ),
            ));
        }
        notes.push(format!(
            "line {line}: {} does not exist yet: bench lays out a data file of the job's size in \
             {} instead, and removes it at the end (fio would create and keep {})",
            path.display(),
            parent.display(),
            path.display()
        ));
        places.push(Place::LaidOut(parent));
    }
    Ok(places)
}

/// fio's `a:b:c` file list, with `\:` standing for a colon inside a name.
fn split_file_names(text: &str) -> Vec<String> {
    let mut names = vec![String::new()];
    let mut characters = text.chars().peekable();
    while let Some(character) = characters.next() {
        match character {
            '\\' if characters.peek() == Some(&':') => {
                characters.next();
                names.last_mut().expect("one name").push(':');
            }
            ':' => names.push(String::new()),
            other => names.last_mut().expect("one name").push(other),
        }
    }
    names.retain(|name| !name.is_empty());
    names
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

/// Per direction, the mean size of its requests: by the weights of its
/// `bssplit`, over the sizes a `bsrange` draws, else its block size.
fn mean_request_bytes(shapes: &[Shape; 2], block_size_bytes: [u64; 2]) -> [f64; 2] {
    [0, 1].map(|direction| shapes[direction].mean_size_bytes(block_size_bytes[direction]))
}

/// Per-direction open-loop rates from `rate_iops`, or from `rate` (bytes/s)
/// divided by the direction's mean request size (`request_bytes`).
fn rates(options: &Options, request_bytes: [f64; 2]) -> Result<[Option<f64>; 2], ConfigError> {
    let kb_base = options.kb_base;
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
        (Some((line, _)), Some(_)) => Err(options.error(
            "rate_iops",
            line,
            "give rate_iops or rate, not both: bench turns either into one open-loop rate",
        )),
        (Some((_, iops)), None) => Ok(iops),
        (None, Some((line, bytes_per_s))) => {
            let mut rates = [None; 2];
            for direction in 0..2 {
                if let Some(bytes) = bytes_per_s[direction] {
                    let rate = bytes as f64 / request_bytes[direction];
                    if rate <= 0.0 {
                        return Err(options.error("rate", line, "`rate` must be above 0"));
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
fn default_size(path: &Path) -> Option<u64> {
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
    let text = text.split_once(':').map_or(text, |(pattern, _)| pattern);
    Ok(match text {
        "read" => (false, Mix::Read),
        "write" => (false, Mix::Write),
        "randread" => (true, Mix::Read),
        "randwrite" => (true, Mix::Write),
        "rw" | "readwrite" => (false, Mix::Both),
        "randrw" => (true, Mix::Both),
        "trim" | "randtrim" | "trimwrite" | "randtrimwrite" => {
            return Err(
                "trims are not something bench does (it reads and writes); use read, write, \
                 randread, randwrite, rw (readwrite) or randrw"
                    .into(),
            )
        }
        _ => {
            return Err(
                "not an access pattern; use read, write, randread, randwrite, rw (readwrite) or \
                 randrw"
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

/// Where a bench job's data region comes from: a file used in place (one
/// region for every job naming it), or a region of its own (fio job, file).
#[derive(Clone, Debug, PartialEq)]
enum RegionKey {
    Shared(PathBuf),
    Own(usize, usize),
}

/// One bench job being built.
struct Planned {
    table: toml::Table,
    options: JobOptions,
    region: RegionKey,
    /// The index of the fio job it came from.
    fio_job: usize,
}

/// Builds the bench job from the parsed fio jobs.
fn build(jobs: &[FioJob], mut notes: Notes) -> Result<FioImport, ConfigError> {
    let mut classes = Vec::new();
    let mut planned: Vec<Planned> = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let mut class = toml::Table::new();
        class.insert("name".into(), job.name.clone().into());
        class.insert("shares".into(), i64::from(job.shares).into());
        classes.push(toml::Value::Table(class));
        let described = plan_job(index, job, &mut planned);
        describe_job(job, &described, &mut notes);
    }
    let duration_s = jobs
        .iter()
        .map(|job| job.stop_ns.map_or(UNBOUNDED_STOP_S, |ns| ns as f64 / 1e9))
        .fold(0.0, f64::max);
    let target = common_target(&mut planned);
    let mut table = toml::Table::new();
    table.insert("duration_s".into(), duration_s.into());
    if let Some(target) = &target {
        table.insert("target".into(), target.display().to_string().into());
    }
    table.insert("class".into(), toml::Value::Array(classes));
    let tables = planned
        .iter()
        .map(|plan| toml::Value::Table(plan.table.clone()))
        .collect();
    table.insert("job".into(), toml::Value::Array(tables));
    let mut job =
        BenchJob::from_table(table).map_err(|error| locate_error(error, jobs, &planned))?;
    let mut regions: Vec<RegionKey> = Vec::new();
    job.job_region = planned
        .iter()
        .map(
            |plan| match regions.iter().position(|known| *known == plan.region) {
                Some(index) => index,
                None => {
                    regions.push(plan.region.clone());
                    regions.len() - 1
                }
            },
        )
        .collect();
    job.job_options = planned.into_iter().map(|plan| plan.options).collect();
    Ok(FioImport {
        job,
        notes: notes.lines,
    })
}

/// Adds the bench jobs of fio job `index` (per file, per direction) to
/// `planned`; returns a description of each.
fn plan_job(index: usize, job: &FioJob, planned: &mut Vec<Planned>) -> Vec<String> {
    let directions = job.directions();
    let file_count = job.files.len();
    let mut described = Vec::new();
    for (file_index, file) in job.files.iter().enumerate() {
        for &(write, load) in &directions {
            let files_used = job.files_used(load);
            if file_index >= files_used {
                continue;
            }
            let mut name = job.name.clone();
            if file_count > 1 {
                name.push_str(&format!(".f{file_index}"));
            }
            if directions.len() > 1 {
                name.push_str(if write { ".write" } else { ".read" });
            }
            let load = match load {
                Load::Depth(depth) => Load::Depth(share_of(depth, files_used, file_index)),
                rate => rate,
            };
            let (table, description) = bench_job_table(job, file, &name, write, load);
            described.push(description);
            let (region, target) = match &file.place {
                Place::UsedAsIs(path) => (RegionKey::Shared(path.clone()), Some(path.clone())),
                Place::LaidOut(directory) => {
                    (RegionKey::Own(index, file_index), Some(directory.clone()))
                }
                Place::CommandLine => (RegionKey::Own(index, file_index), None),
            };
            let options = JobOptions {
                io_bytes_per_instance: job.limit_bytes(write, files_used),
                group: job.group,
                target,
                ramp_ns: job.ramp_ns,
                think_ns: job.think_ns,
                shape: job.shapes[usize::from(write)].clone(),
                verify: job.verify,
                sync_every_writes: job.sync_every_writes,
                sync_kind: job.sync_kind,
                end_fsync: job.end_fsync,
                even_arrivals: job.even_arrivals,
                // fio's own buffers: one per request in flight.
                write_buffer_bytes: 0,
            };
            planned.push(Planned {
                table,
                options,
                region,
                fio_job: index,
            });
        }
    }
    described
}

/// File `index`'s part of `depth` split between `files` files (no more
/// files than `depth`, so each gets at least 1).
fn share_of(depth: u32, files: usize, index: usize) -> u32 {
    let files = files as u32;
    let index = index as u32;
    (depth / files + u32::from(index < depth % files)).max(1)
}

/// One bench job's TOML table, and a line describing it.
fn bench_job_table(
    job: &FioJob,
    file: &FioFile,
    name: &str,
    write: bool,
    load: Load,
) -> (toml::Table, String) {
    let pattern = match (job.random, write) {
        (true, false) => "randread",
        (true, true) => "randwrite",
        (false, false) => "seqread",
        (false, true) => "seqwrite",
    };
    let block_size = job.block_size_bytes[usize::from(write)];
    let mut table = toml::Table::new();
    table.insert("name".into(), name.into());
    table.insert("class".into(), job.name.clone().into());
    table.insert("pattern".into(), pattern.into());
    table.insert("block_size".into(), to_integer(block_size).into());
    let description = match load {
        Load::Depth(depth) => {
            table.insert("queue_depth".into(), i64::from(depth).into());
            format!("{name}: {pattern} {block_size} B at queue depth {depth}")
        }
        Load::Rate(rate) => {
            table.insert("rate_iops".into(), rate.into());
            format!("{name}: {pattern} {block_size} B at {rate} IOPS (open loop)")
        }
    };
    table.insert("numjobs".into(), i64::from(job.numjobs).into());
    table.insert("start_s".into(), (job.start_ns as f64 / 1e9).into());
    let stop_s = job.stop_ns.map_or(UNBOUNDED_STOP_S, |ns| ns as f64 / 1e9);
    table.insert("stop_s".into(), stop_s.into());
    table.insert("offset".into(), to_integer(file.offset_bytes).into());
    table.insert("size".into(), to_integer(file.size_bytes).into());
    (table, description)
}

/// Notes how a fio job was mapped, and where bench differs for it.
fn describe_job(job: &FioJob, described: &[String], notes: &mut Notes) {
    let bound = match (job.io_bytes, job.stop_ns) {
        (Some(bytes), Some(stop)) => format!(
            "stops after {bytes} bytes per instance or at {} s",
            stop as f64 / 1e9
        ),
        (Some(bytes), None) => format!("stops after {bytes} bytes per instance"),
        (None, stop) => format!("runs until {} s", stop.unwrap_or(0) as f64 / 1e9),
    };
    let files: Vec<String> = job
        .files
        .iter()
        .map(|file| {
            let place = match &file.place {
                Place::UsedAsIs(path) => path.display().to_string(),
                Place::LaidOut(directory) => format!("a data file in {}", directory.display()),
                Place::CommandLine => "--target".into(),
            };
            format!(
                "{place} ({} bytes from {})",
                file.size_bytes, file.offset_bytes
            )
        })
        .collect();
    notes.push(format!(
        "line {}: job `{}` -> class `{}` (shares {}), group {}, {} instance(s), from {} s, {}; \
         on {}: {}",
        job.line,
        job.name,
        job.name,
        job.shares,
        job.group,
        job.numjobs,
        job.start_ns as f64 / 1e9,
        bound,
        files.join(", "),
        described.join("; ")
    ));
    let files = job.files.len();
    let fewest_used = job
        .directions()
        .iter()
        .map(|&(_, load)| job.files_used(load))
        .min()
        .unwrap_or(files);
    if fewest_used < files {
        // A think time holds the job at depth 1 whatever iodepth says.
        let fix = if job.think_ns > 0 {
            "a job with `thinktime` runs at depth 1, so it keeps to its first file".to_string()
        } else {
            format!("raise iodepth to {files} to use every file")
        };
        notes.push(format!(
            "line {}: job `{}` has {files} files but keeps fewer requests in flight than that \
             (iodepth={}): bench gives every file a queue of its own, so to keep the job's \
             depth it runs on the first {fewest_used} of them, one request in flight each, \
             with the job's bytes and size bounds spread over those (fio cycles one queue over \
             all the files); {fix}",
            job.line, job.name, job.iodepth
        ));
    }
    if job.mix == Mix::Both && job.iodepth < 2 && job.rate_iops.iter().any(Option::is_none) {
        notes.push(format!(
            "line {}: job `{}` mixes reads and writes at iodepth=1: bench runs the two \
             directions as two jobs of depth 1 each (2 in flight in all)",
            job.line, job.name
        ));
    }
    if job.rate_iops.iter().any(Option::is_some) {
        notes.once("rate", || {
            format!(
                "line {}: rates become open-loop arrivals, evenly spaced (rate_process=linear, \
                 fio's default) or Poisson (rate_process=poisson), without a cap on requests \
                 in flight (fio's linear process never has more than iodepth in flight), \
                 latency counted from each arrival",
                job.line
            )
        });
    }
    let shared = job
        .files
        .iter()
        .any(|file| !matches!(file.place, Place::UsedAsIs(_)));
    if job.numjobs > 1 && shared {
        notes.push(format!(
            "line {}: job `{}`'s {} instances share each data file (fio gives each clone its \
             own)",
            job.line, job.name, job.numjobs
        ));
    }
}

/// The target every bench job shares, if they do (their own targets are then
/// cleared, so the file's one target is what `--target` overrides).
fn common_target(planned: &mut [Planned]) -> Option<PathBuf> {
    let first = planned.first()?.options.target.clone();
    if planned.iter().any(|plan| plan.options.target != first) {
        return None;
    }
    for plan in planned.iter_mut() {
        plan.options.target = None;
    }
    first
}

/// Points an error of bench's validation at the fio option (and line) the
/// failing bench job's value came from.
fn locate_error(mut error: ConfigError, jobs: &[FioJob], planned: &[Planned]) -> ConfigError {
    let Some(index) = error
        .key
        .strip_prefix("job[")
        .or_else(|| error.key.strip_prefix("class["))
        .and_then(|rest| rest.split(']').next())
        .and_then(|index| index.parse::<usize>().ok())
    else {
        return error;
    };
    let fio_job = if error.key.starts_with("job[") {
        planned.get(index).map(|plan| plan.fio_job)
    } else {
        Some(index)
    };
    let Some(job) = fio_job.and_then(|index| jobs.get(index)) else {
        return error;
    };
    let option = match error.key.rsplit('.').next().unwrap_or_default() {
        "block_size" => "bs",
        "queue_depth" => "iodepth",
        "start_s" => "runtime",
        "shares" => "prio",
        "rate_iops" => "rate_iops",
        other => other,
    };
    let option = if option == "runtime" && !job.option_lines.contains_key("runtime") {
        "startdelay"
    } else {
        option
    };
    let line = job.option_lines.get(option).copied().unwrap_or(job.line);
    error.message = format!("`{option}` of job `{}`: {}", job.name, error.message);
    error.key = format!("line {line}");
    error
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
    fn a_block_size_larger_than_the_region_is_refused_naming_the_option() {
        let refused = |text: &str, key: &str, line: &str| {
            let error = failure(text).to_string();
            assert!(error.contains(line), "{error}");
            assert!(error.contains(&format!("`{key}`")), "{error}");
            assert!(
                error.contains("largest block size (1048576 bytes"),
                "{error}"
            );
            assert!(error.contains("at most 65536 bytes"), "{error}");
        };
        refused(
            "[job]\nrw=randwrite\noffset=1g\nsize=64k\nbssplit=4k/50:1m/50\n",
            "bssplit",
            "line 5",
        );
        refused(
            "[job]\nrw=write\nsize=64k\nbsrange=4k-1m\n",
            "bsrange",
            "line 4",
        );
        refused("[job]\nrw=read\nsize=64k\nbs=4k-1m\n", "bs", "line 4");
        // Split between two files, each gets 64 KiB.
        refused(
            "[job]\nrw=randread\nnrfiles=2\nsize=128k\nbssplit=4k/50:1m/50\n",
            "bssplit",
            "line 5",
        );
        // Only the directions the job does count: the write sizes of a
        // read job, and sizes that fit, pass.
        import("[job]\nrw=randread\nsize=64k\nbssplit=4k,1m\n");
        import("[job]\nrw=randwrite\nsize=1m\nbssplit=4k/50:1m/50\n");
    }

    #[test]
    fn a_size_of_two_to_the_64_does_not_overflow_the_byte_limit() {
        let text = "[job]\nrw=write\nbs=128k\nsize=18446744073709551615\n";
        match FioImport::from_text(text) {
            Ok(imported) => {
                let limit = imported.job.options_of(0).io_bytes_per_instance.unwrap();
                assert_eq!(limit % (128 << 10), 0, "{limit}");
            }
            Err(error) => assert!(error.to_string().contains("size"), "{error}"),
        }
    }

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
    fn mixed_block_sizes_convert_rates_and_counts_at_their_mean_size() {
        // 100 MiB/s of requests half 4 KiB, half 1 MiB (mean 526,336 bytes).
        let imported = import(
            "[global]\nruntime=1\nsize=8m\n[split]\nrw=randread\nbssplit=4k/50:1m/50\n\
             rate=100m\n[range]\nrw=randread\nbsrange=4k-16k\nrate=12m\n",
        );
        let rates: Vec<f64> = imported
            .job
            .scenario
            .jobs
            .iter()
            .map(|job| match job.arrival {
                Arrival::OpenLoop { rate_iops } => rate_iops,
                other => panic!("{other:?}"),
            })
            .collect();
        let split_mean = (4096.0 + 1_048_576.0) / 2.0;
        assert!(
            (rates[0] - 104_857_600.0 / split_mean).abs() < 1e-6,
            "{rates:?}"
        );
        // bsrange=4k-16k draws 4k, 8k, 12k and 16k equally, as fio does: a
        // mean of 10k.
        let range_mean = 10_240.0;
        assert!(
            (rates[1] - 12_582_912.0 / range_mean).abs() < 1e-6,
            "{rates:?}"
        );
        // fio's long name of bsrange means the same.
        let long = import(
            "[global]\nruntime=1\nsize=8m\n[range]\nrw=randread\nblocksize_range=4k-16k\n\
             rate=12m\n",
        );
        match long.job.scenario.jobs[0].arrival {
            Arrival::OpenLoop { rate_iops } => assert_eq!(rate_iops, rates[1]),
            other => panic!("{other:?}"),
        }
        // number_ios counts requests of the mean size.
        let imported =
            import("[n]\ndirectory=/tmp\nsize=64m\nbssplit=4k/75:64k/25\nnumber_ios=100\n");
        let mean = 0.75 * 4096.0 + 0.25 * 65536.0;
        let bytes = imported.job.job_options[0].io_bytes_per_instance.unwrap();
        assert_eq!(bytes, (100.0 * mean) as u64);
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

    /// A sparse file of `bytes` in the temporary directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, bytes: u64) -> Self {
            let path = std::env::temp_dir()
                .join(format!("tailguard-fio-unit-{}-{name}", std::process::id()));
            std::fs::File::create(&path)
                .and_then(|file| file.set_len(bytes))
                .unwrap();
            Self(path)
        }

        fn name(&self) -> String {
            self.0.display().to_string()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_shared_filename_is_the_target_and_separate_ones_are_per_job() {
        let first = TempFile::new("shared", 8 << 20);
        let imported = import(&format!(
            "[global]\nfilename={}\nruntime=1\nsize=1m\n[a]\nrw=randread\n[b]\nrw=randwrite\n",
            first.name()
        ));
        assert_eq!(imported.job.target, Some(first.0.clone()));
        assert_eq!(imported.job.job_region, [0, 0]);
        assert!(imported.job.job_options.iter().all(|o| o.target.is_none()));

        let second = TempFile::new("other", 8 << 20);
        let imported = import(&format!(
            "[a]\nfilename={}\nsize=1m\n[b]\nfilename={}\nsize=1m\n",
            first.name(),
            second.name()
        ));
        assert_eq!(imported.job.target, None);
        let targets: Vec<Option<PathBuf>> = imported
            .job
            .job_options
            .iter()
            .map(|o| o.target.clone())
            .collect();
        assert_eq!(targets, [Some(first.0.clone()), Some(second.0.clone())]);
    }

    #[test]
    fn jobs_without_runtime_are_bounded_by_their_bytes() {
        // size alone: one pass; io_size and loops: more; runtime too: both.
        let imported = import(
            "[global]\ndirectory=/tmp\nbs=4k\n[one]\nrw=read\nsize=1m\n\
             [io]\nrw=randwrite\nsize=1m\nio_size=3m\nloops=2\nruntime=5\n\
             [mixed]\nrw=randrw\nrwmixread=75\nsize=4m\n[timed]\nsize=1m\nruntime=1\ntime_based\n",
        );
        let limits: Vec<Option<u64>> = imported
            .job
            .job_options
            .iter()
            .map(|o| o.io_bytes_per_instance)
            .collect();
        assert_eq!(
            limits,
            [
                Some(1 << 20),
                Some(6 << 20),
                Some(3 << 20),
                Some(1 << 20),
                None
            ]
        );
        let stops: Vec<u64> = imported
            .job
            .scenario
            .jobs
            .iter()
            .map(|j| j.stop_ns)
            .collect();
        assert_eq!(stops[1], 5_000_000_000);
        assert_eq!(stops[4], 1_000_000_000);
        assert_eq!(
            stops[0], imported.job.scenario.duration_ns,
            "no runtime: no time bound"
        );
        // number_ios: that many requests, when they come before the size.
        let imported = import("[n]\ndirectory=/tmp\nsize=1m\nbs=8k\nnumber_ios=10\n");
        assert_eq!(
            imported.job.job_options[0].io_bytes_per_instance,
            Some(80 << 10)
        );
        // More requests than the size holds do not extend the job (fio:
        // number_ios only stops a job early), with or without loops.
        let imported = import("[n]\ndirectory=/tmp\nsize=64k\nbs=8k\nnumber_ios=100\n");
        assert_eq!(
            imported.job.job_options[0].io_bytes_per_instance,
            Some(64 << 10)
        );
        let imported = import("[n]\ndirectory=/tmp\nsize=64k\nbs=8k\nloops=3\nnumber_ios=100\n");
        assert_eq!(
            imported.job.job_options[0].io_bytes_per_instance,
            Some(192 << 10)
        );
    }

    #[test]
    fn sizes_and_offsets_come_from_the_existing_file_and_percentages() {
        let file = TempFile::new("sized", 100 << 20);
        let imported = import(&format!(
            "[global]\nfilename={}\n[whole]\n[part]\nsize=50%\noffset=25%\n[rest]\noffset=96m\n",
            file.name()
        ));
        let regions: Vec<(u64, u64)> = imported
            .job
            .scenario
            .jobs
            .iter()
            .map(|job| (job.offset_bytes, job.region_bytes))
            .collect();
        assert_eq!(
            regions,
            [(0, 100 << 20), (25 << 20, 50 << 20), (96 << 20, 4 << 20)]
        );
        let error = failure("[a]\ndirectory=/tmp\nsize=50%\n");
        assert_eq!(error.key, "line 3");
        assert!(error.message.contains("existing file"), "{error}");
    }

    #[test]
    fn several_files_split_the_job() {
        let imported = import(
            "[a]\ndirectory=/tmp\nnrfiles=2\nsize=2m\nrw=randread\niodepth=5\n\
             [b]\ndirectory=/tmp\nfilesize=1m\nnrfiles=2\nrw=read\niodepth=2\n",
        );
        let jobs = &imported.job.scenario.jobs;
        let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        assert_eq!(names, ["a.f0", "a.f1", "b.f0", "b.f1"]);
        assert_eq!(jobs[0].arrival, Arrival::ClosedLoop { queue_depth: 3 });
        assert_eq!(jobs[1].arrival, Arrival::ClosedLoop { queue_depth: 2 });
        assert!(jobs.iter().all(|job| job.region_bytes == 1 << 20));
        assert_eq!(imported.job.job_region, [0, 1, 2, 3]);
        // Each file moves its share of the job's bytes.
        assert_eq!(
            imported.job.job_options[0].io_bytes_per_instance,
            Some(1 << 20)
        );
        assert_eq!(split_file_names("a:b\\:c:d"), ["a", "b:c", "d"]);
    }

    #[test]
    fn with_filesize_a_smaller_size_is_the_io_amount() {
        let bytes = |text: &str| import(text).job.job_options[0].io_bytes_per_instance;
        // Four files of 64 MiB; `size` moves 128 MiB of them, 32 MiB each.
        let four = "[a]\ndirectory=/tmp\nrw=read\nbs=1m\niodepth=4\nfilesize=64m\nnrfiles=4\n";
        assert_eq!(bytes(&format!("{four}size=128m\n")), Some(32 << 20));
        assert_eq!(bytes(four), Some(64 << 20), "without size: every file once");
        // A `size` larger than the files moves the files once (fio clamps it).
        let one = "[a]\ndirectory=/tmp\nrw=read\nbs=1m\nfilesize=64m\nsize=256m\n";
        assert_eq!(bytes(one), Some(64 << 20));
        assert_eq!(bytes(&format!("{one}io_size=512m\n")), Some(512 << 20));
    }

    #[test]
    fn more_files_than_the_depth_keep_the_jobs_depth() {
        let depths = |imported: &FioImport| -> Vec<(String, u32)> {
            imported
                .job
                .scenario
                .jobs
                .iter()
                .map(|job| match job.arrival {
                    Arrival::ClosedLoop { queue_depth } => (job.name.clone(), queue_depth),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let imported = import("[a]\ndirectory=/tmp\nnrfiles=8\nsize=8m\nrw=randread\n");
        assert_eq!(depths(&imported), [("a.f0".to_string(), 1)]);
        // The one file used moves the whole job's bytes.
        assert_eq!(
            imported.job.job_options[0].io_bytes_per_instance,
            Some(8 << 20)
        );
        assert!(
            imported
                .notes
                .iter()
                .any(|note| note.contains("runs on the first 1 of them")),
            "{:?}",
            imported.notes
        );
        let imported = import("[a]\ndirectory=/tmp\nnrfiles=8\nsize=8m\nrw=randread\niodepth=3\n");
        let total: u32 = depths(&imported).iter().map(|(_, depth)| depth).sum();
        assert_eq!(total, 3);
        assert_eq!(depths(&imported).len(), 3);
        // A mixed job keeps each direction's depth.
        let imported = import("[a]\ndirectory=/tmp\nnrfiles=8\nsize=8m\nrw=randrw\niodepth=4\n");
        let total: u32 = depths(&imported).iter().map(|(_, depth)| depth).sum();
        assert_eq!(total, 4);
        // Open-loop rates still spread over every file, without the note.
        let imported = import(
            "[a]\ndirectory=/tmp\nnrfiles=4\nsize=4m\nrw=randread\nrate_iops=400\n\
             runtime=1\ntime_based\n",
        );
        assert_eq!(imported.job.scenario.jobs.len(), 4);
        assert!(!imported.notes.iter().any(|note| note.contains("first")));
    }

    #[test]
    fn stonewall_and_wait_for_start_new_groups() {
        let imported = import(
            "[global]\ndirectory=/tmp\nsize=1m\n[a]\n[b]\n[c]\nstonewall\n[d]\nwait_for=a\n\
             [e]\nwait_for=d\n",
        );
        let groups: Vec<usize> = imported.job.job_options.iter().map(|o| o.group).collect();
        assert_eq!(groups, [0, 0, 1, 1, 2]);
        assert_eq!(imported.job.groups(), [vec![0, 1], vec![2, 3], vec![4]]);
        let error = failure("[a]\ndirectory=/tmp\nsize=1m\nwait_for=zz\n");
        assert_eq!(error.key, "line 4");
    }

    #[test]
    fn comments_variables_escapes_and_duplicate_names() {
        std::env::set_var("TAILGUARD_FIO_UNIT_SIZE", "2m");
        let imported = import(
            "[global]\ndirectory=/tmp # the scratch disk\nsize=${TAILGUARD_FIO_UNIT_SIZE}\n\
             [a]\nnumjobs=2 ; two copies\nbs=$pagesize\n[a]\nrw=write\n",
        );
        let jobs = &imported.job.scenario.jobs;
        assert_eq!(jobs[0].numjobs, 2);
        assert_eq!(jobs[0].region_bytes, 2 << 20);
        assert_eq!(
            jobs[0].block_size_bytes,
            system_value(libc::_SC_PAGESIZE, 1)
        );
        let classes: Vec<&str> = imported
            .job
            .scenario
            .classes
            .iter()
            .map(|class| class.name.as_str())
            .collect();
        assert_eq!(classes, ["a", "a-2"]);
        assert_eq!(imported.job.target, Some(PathBuf::from("/tmp")));
        assert_eq!(strip_comment("name=a#b ; c"), "name=a#b ");
        let error = failure("[a]\ndirectory=/tmp\nsize=${TAILGUARD_FIO_UNIT_UNSET_VARIABLE}\n");
        assert_eq!(error.key, "line 3");
    }

    #[test]
    fn engines_that_do_no_block_io_are_refused_and_sync_ones_run_at_depth_one() {
        let error = failure("[global]\nioengine=null\n[a]\ndirectory=/tmp\nsize=1m\n");
        assert_eq!(error.key, "line 2 ([global])");
        assert!(error.message.contains("no I/O"), "{error}");
        let imported = import("[a]\ndirectory=/tmp\nsize=1m\nioengine=psync\niodepth=8\n");
        assert_eq!(
            imported.job.scenario.jobs[0].arrival,
            Arrival::ClosedLoop { queue_depth: 1 }
        );
        assert!(imported.notes.join("\n").contains("synchronous"));
        assert!(failure("[a]\ndirectory=/tmp\nsize=1m\nioengine=net\n")
            .message
            .contains("io_uring"));
    }

    #[test]
    fn ignored_options_get_notes_and_refused_ones_say_why_and_what_instead() {
        let imported =
            import("[a]\nioengine=io_uring\nruntime=1\nsize=1m\ngroup_reporting\ndirectory=/tmp\n");
        let notes = imported.notes.join("\n");
        assert!(
            notes.contains("line 2: `ioengine=io_uring` accepted"),
            "{notes}"
        );
        assert!(
            notes.contains("line 5: `group_reporting` accepted and ignored"),
            "{notes}"
        );

        let error = failure("[global]\nzonemode=zbd\n[a]\nruntime=1\nsize=1m\n");
        assert_eq!(error.key, "line 2 ([global])");
        assert!(error.message.contains("`zonemode`"), "{error}");
        assert!(error.message.contains("give size= and offset="), "{error}");
        assert!(error.message.len() < 300, "{error}");

        let error = failure("[a]\nruntime=1\nsize=1m\nfrobnicate=3\n");
        assert_eq!(error.key, "line 4");
        assert!(error.message.contains("unknown"), "{error}");
    }

    #[test]
    fn bad_values_name_the_option_and_the_line() {
        for (text, line, needle) in [
            ("[a]\nruntime=1\nsize=1m\nbs=4q\n", "line 4", "bs=4q"),
            ("[a]\nruntime=1\nsize=1m\nrw=trim\n", "line 4", "randrw"),
            (
                "[a]\nruntime=1\nsize=1m\nrw=randread:x\n",
                "line 4",
                "modifier",
            ),
            (
                "[a]\nruntime=1\nsize=1m\nbs=8k-4k\n",
                "line 4",
                "high to low",
            ),
            ("[a]\nruntime=1\nsize=1m\niodepth=0\n", "line 4", "iodepth"),
            ("[a]\nruntime=soon\nsize=1m\n", "line 2", "runtime"),
            ("[a]\nsize=1m\ntime_based\n", "line 3", "runtime"),
            ("[a]\nruntime=1\nsize=1m\nprio=9\n", "line 4", "prio"),
            (
                "[a]\nruntime=1\nsize=1m\nrwmixread=120\n",
                "line 4",
                "percentage",
            ),
            ("[a]\nruntime=1\n", "line 1", "size"),
            ("rw=read\n[a]\n", "line 1", "[global]"),
            ("[a\n", "line 1", "section header"),
            // bench's own validation, mapped back to the option's line:
            ("[a]\nruntime=1\nsize=1m\nbs=4KiB\n", "line 4", "4000 bytes"),
            (
                "[a]\nruntime=1\nsize=1m\nbs=1000\n",
                "line 4",
                "`bs` of job `a`: 1000 bytes",
            ),
            (
                "[global]\nbs=1000\n[a]\nruntime=1\nsize=1m\n",
                "line 2",
                "`bs` of job `a`",
            ),
        ] {
            let error = failure(text);
            assert_eq!(error.key, line, "{text:?}: {error}");
            assert!(error.to_string().contains(needle), "{text:?}: {error}");
        }
        assert_eq!(failure("; nothing\n").key, "(fio file)");
    }

    #[test]
    fn a_job_with_a_think_time_runs_at_depth_one_as_in_fio() {
        let imported =
            import("[a]\ndirectory=/tmp\nsize=1m\nrw=randread\niodepth=32\nthinktime=1000\n");
        let job = &imported.job.scenario.jobs[0];
        assert_eq!(job.arrival, Arrival::ClosedLoop { queue_depth: 1 });
        assert_eq!(imported.job.job_options[0].think_ns, 1_000_000);
        assert!(
            imported
                .notes
                .iter()
                .any(|note| note.contains("iodepth=32")),
            "{:?}",
            imported.notes
        );
        let deep = import("[a]\ndirectory=/tmp\nsize=1m\nrw=randread\niodepth=32\n");
        let job = &deep.job.scenario.jobs[0];
        assert_eq!(job.arrival, Arrival::ClosedLoop { queue_depth: 32 });
        let error = failure("[a]\ndirectory=/tmp\nsize=1m\nthinktime=10\nthinktime_blocks=4\n");
        assert_eq!(error.key, "line 5", "{error}");
        // Several files: the note does not advise a depth the think time
        // overrides.
        let files = import(
            "[a]\ndirectory=/tmp\nnrfiles=4\nfilesize=1m\nrw=randread\niodepth=4\nthinktime=100\n",
        );
        let note = files.notes.iter().find(|note| note.contains("has 4 files"));
        let note = note.unwrap_or_else(|| panic!("{:?}", files.notes));
        assert!(!note.contains("raise iodepth"), "{note}");
        assert!(note.contains("keeps to its first file"), "{note}");
    }

    #[test]
    fn block_size_mixes_offset_modifiers_and_pacing_map_onto_job_options() {
        let imported = import(
            "[global]\ndirectory=/tmp\nsize=1m\n\
             [split]\nrw=randrw\nbssplit=4k/25:64k/75,16k\n\
             [range]\nrw=read\nbsrange=4k-16k\nrw=read:8k\n\
             [dash]\nrw=randread:8\nbs=8k-8k\npercentage_random=40\n\
             [paced]\nthinktime=250\nramp_time=2\nruntime=3\ntime_based\n",
        );
        let options = &imported.job.job_options;
        let jobs = &imported.job.scenario.jobs;
        let range = |low_bytes, high_bytes| BlockSizes::Range {
            low_bytes,
            high_bytes,
        };
        assert_eq!(
            options[0].shape.block_sizes,
            BlockSizes::Weighted(vec![(4096, 25), (65536, 75)])
        );
        assert_eq!(jobs[0].block_size_bytes, 4096);
        assert_eq!(
            options[1].shape.block_sizes,
            BlockSizes::Weighted(vec![(16384, 100)])
        );
        assert_eq!(jobs[1].block_size_bytes, 16384);
        assert_eq!(options[2].shape.block_sizes, range(4096, 16384));
        assert_eq!(options[2].shape.skip_bytes, 8192);
        assert_eq!(options[3].shape.random_run, 8);
        assert_eq!(options[3].shape.random_percent, Some(40));
        assert_eq!(options[3].shape.block_sizes, range(8192, 8192));
        assert_eq!(options[4].think_ns, 250_000, "thinktime is in microseconds");
        assert_eq!(options[4].ramp_ns, 2_000_000_000);
        // The ramp comes before the measured runtime.
        assert_eq!(jobs[4].stop_ns, 5_000_000_000);
        assert!(options[4].shape.is_plain());
        let error = failure("[a]\ndirectory=/tmp\nsize=1m\nbssplit=4k/70:64k/70\n");
        assert_eq!(error.key, "line 4");
        assert!(error.message.contains("more than 100"), "{error}");
    }

    #[test]
    fn syncs_map_to_every_n_writes_and_the_end() {
        let imported = import(
            "[a]\ndirectory=/tmp\nsize=1m\nrw=write\nfsync=4\nend_fsync=1\n\
             [b]\ndirectory=/tmp\nsize=1m\nrw=write\nfsync=2\nfdatasync=8\n[c]\n\
             directory=/tmp\nsize=1m\n",
        );
        let syncs: Vec<(u32, SyncKind, bool)> = imported
            .job
            .job_options
            .iter()
            .map(|o| (o.sync_every_writes, o.sync_kind, o.end_fsync))
            .collect();
        assert_eq!(
            syncs,
            [
                (4, SyncKind::Fsync, true),
                (8, SyncKind::Fdatasync, false),
                (0, SyncKind::Fsync, false)
            ]
        );
    }

    #[test]
    fn rate_process_chooses_even_or_poisson_arrivals() {
        let imported = import(
            "[global]\ndirectory=/tmp\nsize=1m\nrate_iops=100\n[a]\n[b]\nrate_process=poisson\n",
        );
        let even: Vec<bool> = imported
            .job
            .job_options
            .iter()
            .map(|o| o.even_arrivals)
            .collect();
        assert_eq!(even, [true, false]);
        let error = failure("[a]\ndirectory=/tmp\nsize=1m\nrate_process=bursty\n");
        assert_eq!(error.key, "line 4");
    }

    #[test]
    fn verify_is_emulated_and_noted() {
        let imported = import(
            "[w]\ndirectory=/tmp\nsize=1m\nrw=write\nverify=md5\nverify_backlog=8\n\
             [r]\ndirectory=/tmp\nsize=1m\nverify=0\n",
        );
        let verify: Vec<bool> = imported.job.job_options.iter().map(|o| o.verify).collect();
        assert_eq!(verify, [true, false]);
        let notes = imported.notes.join("\n");
        assert!(notes.contains("`verify=md5` emulated"), "{notes}");
        assert!(notes.contains("`verify_backlog` emulated"), "{notes}");
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
