//! Simulated devices.
//!
//! A device model is a deterministic state machine in virtual time. The simulation
//! engine hands it requests with [`DeviceModel::submit`], asks when its next
//! internal event happens with [`DeviceModel::next_event_at`], and moves it forward
//! with [`DeviceModel::advance`], which reports every request finished by then.
//! Models never see classes or policies: a device only sees what a host controller
//! would see, commands in arrival order.
//!
//! Every model keeps a host-side FIFO in front of its own command queue (NCQ,
//! NVMe submission queues), so a policy with unlimited depth (`fifo`) can hand it
//! any number of requests, exactly like the kernel's `none` scheduler.
//!
//! Each model documents its parameters at the top of its file. All parameters are
//! overridable from a scenario's `[[device]]` table; unknown keys are errors.
//! Models draw randomness only from the seeded generator they are built with.
//!
//! ## Slowdowns, for every model
//!
//! A `[[device]]` table may also give `slowdown = [{ start_s = 5.0, stop_s = 10.0,
//! factor = 0.3 }]`: between `start_s` and `stop_s` the device runs at `factor`
//! of its speed (0.3: everything inside it takes 1/0.3 times as long, so its
//! throughput drops to 30% and its latencies grow 3.3×), as a device does when it
//! throttles, rebuilds or is shared. [`Slowed`] implements it once for every model
//! by dilating time: the model runs on its own clock, which advances `factor` ns
//! per real ns inside a window and 1 ns per ns outside, so queued work finishes
//! late by exactly the stretched part. Windows must not overlap and must end
//! by [`DURATION_S_MAX`]; factors are in (0, 1000]. The profile is the device's normal one (what calibration measured
//! before the slowdown).

use crate::scenario::DURATION_S_MAX;
use crate::ConfigError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tailguard_core::{DeviceProfile, Direction, Nanos, NANOS_PER_SECOND_F64};

pub mod common;
pub mod hdd;
pub mod nvme;
pub mod sata_ssd;
pub mod usb_flash;

/// A command as it reaches a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRequest {
    /// The submitter's token, returned on completion.
    pub token: u64,
    /// Read or write (a write of zero bytes is a flush).
    pub direction: Direction,
    /// Byte offset on the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub length_bytes: u64,
}

/// A command the device finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCompletion {
    /// The token given at submission.
    pub token: u64,
    /// When it finished.
    pub completed_at: Nanos,
}

/// A simulated device; see the module docs.
pub trait DeviceModel: Send {
    /// The model's name, as in scenario files (`nvme`, `sata-ssd`, ...).
    fn model_name(&self) -> &'static str;

    /// A command arrives at `now`. `now` never decreases between calls.
    fn submit(&mut self, now: Nanos, request: DeviceRequest);

    /// The time of the next internal event (a completion or a state change), or
    /// `None` when the device is idle and holds no command.
    fn next_event_at(&self) -> Option<Nanos>;

    /// Moves the device to `now` (never before a time already passed), appending
    /// every command finished at or before `now`, in completion order.
    fn advance(&mut self, now: Nanos, completions: &mut Vec<DeviceCompletion>);

    /// What calibration would measure on this device: random 4 KiB IOPS and
    /// streaming bandwidth per direction, its largest request, and the latency
    /// target the model suggests. Derived from the model's parameters.
    fn profile(&self) -> DeviceProfile;

    /// Commands the device holds: queued at the host side, queued inside, in service.
    fn outstanding(&self) -> usize;
}

/// The device models a scenario may use (a `[[device]]` table's `model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelName {
    /// [`nvme::Nvme`].
    Nvme,
    /// [`sata_ssd::SataSsd`].
    SataSsd,
    /// [`hdd::Hdd`].
    Hdd,
    /// [`usb_flash::UsbFlash`].
    UsbFlash,
}

impl ModelName {
    /// Every model, in the order error messages list them.
    pub const ALL: [Self; 4] = [Self::Nvme, Self::SataSsd, Self::Hdd, Self::UsbFlash];

    /// The model's name in scenario files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nvme => "nvme",
            Self::SataSsd => "sata-ssd",
            Self::Hdd => "hdd",
            Self::UsbFlash => "usb-flash",
        }
    }

    /// Parses a scenario's `model`; the error lists the models there are.
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|model| model.name() == name)
            .ok_or_else(|| {
                ConfigError::new(
                    "model",
                    format!(
                        "unknown device model `{name}`; use one of: {}",
                        Self::ALL.map(Self::name).join(", ")
                    ),
                )
            })
    }
}

/// Builds a model by name from a scenario's `[[device]]` table (with `name` and
/// `model` already removed), seeding its random generator with `seed`.
pub fn build(
    model: ModelName,
    parameters: &toml::Table,
    seed: u64,
) -> Result<Box<dyn DeviceModel>, ConfigError> {
    let mut parameters = parameters.clone();
    let slowdown = match parameters.remove("slowdown") {
        Some(value) => Vec::<SlowdownWindow>::deserialize(value).map_err(|error| {
            ConfigError::new("slowdown", error.to_string().trim_end().to_string())
        })?,
        None => Vec::new(),
    };
    let inner = build_model(model, &parameters, seed)?;
    if slowdown.is_empty() {
        Ok(inner)
    } else {
        Ok(Box::new(Slowed::new(inner, &slowdown)?))
    }
}

/// Model parameters a model divides by or sizes a queue with: each must be
/// above zero (`ncq_depth = 0` would be a disk that holds no command).
const POSITIVE_PARAMETERS: [&str; 14] = [
    "rpm",
    "ncq_depth",
    "queue_depth",
    "parallel_units",
    "flash_dies",
    "capacity_bytes",
    "max_request_bytes",
    "media_rate_bytes_per_s",
    "unit_read_bandwidth_bytes_per_s",
    "die_read_bandwidth_bytes_per_s",
    "link_bandwidth_bytes_per_s",
    "flush_bandwidth_bytes_per_s",
    "read_bandwidth_bytes_per_s",
    "write_bandwidth_bytes_per_s",
];

/// The longest time a model parameter in microseconds (a key ending in
/// `_us`: seeks, overheads, latencies, stalls) may give, an hour: far beyond
/// any device's, and short enough that the model's times stay far from
/// overflow.
pub const DEVICE_TIME_US_MAX: f64 = 3.6e9;

/// The most commands a model's queue (`ncq_depth`, `queue_depth`) or its
/// parallel units may number: far beyond any real device, and a bound on the
/// model's memory.
pub const QUEUE_SLOTS_MAX: i64 = 65_536;

/// Refuses model parameters no device has, naming the key: a number that is
/// negative, not finite, or zero where the model needs it above zero
/// (`POSITIVE_PARAMETERS`); a time longer than [`DEVICE_TIME_US_MAX`]; a
/// queue deeper than [`QUEUE_SLOTS_MAX`]. So the
/// error names the parameter the user wrote (`rpm`), not the profile number
/// derived from it, and no model silently rounds a zero up.
pub fn validate_parameters(parameters: &toml::Table) -> Result<(), ConfigError> {
    for (key, value) in parameters {
        let number = match value {
            toml::Value::Integer(number) => *number as f64,
            toml::Value::Float(number) => *number,
            // A size written with a suffix ("64m") is checked as its bytes;
            // one that does not parse is left to the model's parse to name.
            toml::Value::String(text) if key.ends_with("_bytes") => {
                match crate::scenario::parse_bytes(text) {
                    Ok(bytes) => bytes as f64,
                    Err(_) => continue,
                }
            }
            _ => continue,
        };
        let positive = POSITIVE_PARAMETERS.contains(&key.as_str());
        if !number.is_finite() || number < 0.0 || (positive && number == 0.0) {
            let wanted = if positive { "above 0" } else { "0 or more" };
            return Err(ConfigError::new(
                key.as_str(),
                format!("{number} is not usable; give a finite number {wanted}"),
            ));
        }
        if key.ends_with("_us") && number > DEVICE_TIME_US_MAX {
            return Err(ConfigError::new(
                key.as_str(),
                format!("{number} µs is out of range; give 0 to {DEVICE_TIME_US_MAX} (an hour)"),
            ));
        }
        let slots = ["ncq_depth", "queue_depth", "parallel_units", "flash_dies"];
        if slots.contains(&key.as_str()) && number > QUEUE_SLOTS_MAX as f64 {
            return Err(ConfigError::new(
                key.as_str(),
                format!("{number} is out of range; give 1 to {QUEUE_SLOTS_MAX}"),
            ));
        }
    }
    Ok(())
}

/// Refuses a range whose least value (`min_key`) is above its most
/// (`max_key`), naming `min_key`: a model draws uniformly in `min..=max`
/// (the least value alone when the range is empty) while its profile counts
/// on the mean `(min + max) / 2`, so the two would disagree.
pub(crate) fn validate_range(
    min_key: &str,
    min: f64,
    max_key: &str,
    max: f64,
) -> Result<(), ConfigError> {
    if min <= max {
        return Ok(());
    }
    Err(ConfigError::new(
        min_key,
        format!("{min} is above {max_key} ({max}); give a {min_key} at most {max_key}"),
    ))
}

fn build_model(
    model: ModelName,
    parameters: &toml::Table,
    seed: u64,
) -> Result<Box<dyn DeviceModel>, ConfigError> {
    validate_parameters(parameters)?;
    match model {
        ModelName::Nvme => {
            let parameters: nvme::NvmeParameters = parse(parameters)?;
            parameters.validate()?;
            Ok(Box::new(nvme::Nvme::new(parameters, seed)))
        }
        ModelName::SataSsd => Ok(Box::new(sata_ssd::SataSsd::new(parse(parameters)?, seed))),
        ModelName::Hdd => {
            let parameters: hdd::HddParameters = parse(parameters)?;
            parameters.validate()?;
            Ok(Box::new(hdd::Hdd::new(parameters, seed)))
        }
        ModelName::UsbFlash => {
            let parameters: usb_flash::UsbFlashParameters = parse(parameters)?;
            parameters.validate()?;
            Ok(Box::new(usb_flash::UsbFlash::new(parameters, seed)))
        }
    }
}

/// The bytes a model addresses, for models that have a capacity (`hdd`'s
/// `capacity_bytes`, which sets its track count); `None` for models whose
/// timing does not depend on where a request lands. `parameters` are a
/// `[[device]]` table that already built.
pub fn capacity_bytes(model: ModelName, parameters: &toml::Table) -> Option<u64> {
    match model {
        ModelName::Hdd => {
            let mut parameters = parameters.clone();
            parameters.remove("slowdown");
            parse::<hdd::HddParameters>(&parameters)
                .ok()
                .map(|parameters| parameters.capacity_bytes)
        }
        ModelName::Nvme | ModelName::SataSsd | ModelName::UsbFlash => None,
    }
}

/// Parses a model's (or policy's) parameter struct from a table; the message
/// names the bad key, and the caller adds where the table is.
pub fn parse<T: DeserializeOwned>(parameters: &toml::Table) -> Result<T, ConfigError> {
    T::deserialize(toml::Value::Table(parameters.clone()))
        .map_err(|error| ConfigError::new("parameters", error.to_string().trim_end().to_string()))
}

/// One slowdown window of a `[[device]]` table's `slowdown` list.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlowdownWindow {
    /// When the device slows down, in simulated seconds.
    pub start_s: f64,
    /// When it is back to full speed.
    pub stop_s: f64,
    /// Its speed meanwhile, as a fraction of normal (0.3: 30%).
    pub factor: f64,
}

/// The largest slowdown factor accepted (a speed-up of 1000×).
pub const SLOWDOWN_FACTOR_MAX: f64 = 1000.0;

/// A slowdown window's times and factor, checked against the stop of the
/// window before it in time; the error names the field at fault.
fn validate_window(window: &SlowdownWindow, previous_stop: f64) -> Result<(), ConfigError> {
    if !(window.start_s.is_finite() && window.start_s >= previous_stop) {
        return Err(ConfigError::new(
            "start_s",
            format!(
                "start_s {} must be a finite time at or after the previous window's stop ({previous_stop}); windows must not overlap",
                window.start_s
            ),
        ));
    }
    if !(window.stop_s.is_finite() && window.stop_s > window.start_s) {
        return Err(ConfigError::new(
            "stop_s",
            format!(
                "stop_s {} must be after start_s {}",
                window.stop_s, window.start_s
            ),
        ));
    }
    if window.stop_s > DURATION_S_MAX {
        return Err(ConfigError::new(
            "stop_s",
            format!(
                "{} is past the longest run ({DURATION_S_MAX} s); give a stop_s up to \
                 {DURATION_S_MAX}",
                window.stop_s
            ),
        ));
    }
    if !(window.factor > 0.0 && window.factor <= SLOWDOWN_FACTOR_MAX) {
        return Err(ConfigError::new(
            "factor",
            format!(
                "factor {} must be in (0, {SLOWDOWN_FACTOR_MAX}]; 0.3 means 30% of normal speed",
                window.factor
            ),
        ));
    }
    Ok(())
}

/// A breakpoint of the real-time → device-time map: from `real_ns` on, the
/// device clock reads `device_ns` and advances `factor` per real ns.
#[derive(Clone, Copy, Debug)]
struct Segment {
    real_ns: Nanos,
    device_ns: Nanos,
    factor: f64,
}

/// A model run at a scheduled fraction of its speed; see the module docs.
pub struct Slowed {
    inner: Box<dyn DeviceModel>,
    segments: Vec<Segment>,
}

impl Slowed {
    /// Wraps `inner` with `windows` (validated here; an error names a window
    /// by its index in `windows`, as the user wrote them, not in time order).
    pub fn new(
        inner: Box<dyn DeviceModel>,
        windows: &[SlowdownWindow],
    ) -> Result<Self, ConfigError> {
        let mut order: Vec<usize> = (0..windows.len()).collect();
        order.sort_by(|&a, &b| windows[a].start_s.total_cmp(&windows[b].start_s));
        let mut segments = vec![Segment {
            real_ns: 0,
            device_ns: 0,
            factor: 1.0,
        }];
        let mut previous_stop = 0.0;
        for index in order {
            let window = &windows[index];
            validate_window(window, previous_stop)
                .map_err(|error| error.within(&format!("slowdown[{index}]")))?;
            previous_stop = window.stop_s;
            for (at_s, factor) in [(window.start_s, window.factor), (window.stop_s, 1.0)] {
                let real_ns = (at_s * NANOS_PER_SECOND_F64).round() as Nanos;
                let last = *segments.last().expect("one segment at least");
                let device_ns = last.device_ns
                    + ((real_ns - last.real_ns) as f64 * last.factor).floor() as Nanos;
                segments.push(Segment {
                    real_ns,
                    device_ns,
                    factor,
                });
            }
        }
        Ok(Self { inner, segments })
    }

    /// The device clock at real time `real_ns` (monotonic, rounded down).
    fn to_device(&self, real_ns: Nanos) -> Nanos {
        let index = self.segments.partition_point(|s| s.real_ns <= real_ns) - 1;
        let segment = self.segments[index];
        segment.device_ns + ((real_ns - segment.real_ns) as f64 * segment.factor).floor() as Nanos
    }

    /// The first real time at which the device clock reaches `device_ns`.
    fn to_real(&self, device_ns: Nanos) -> Nanos {
        let index = self.segments.partition_point(|s| s.device_ns <= device_ns) - 1;
        let segment = self.segments[index];
        let mut real_ns = segment.real_ns
            + ((device_ns - segment.device_ns) as f64 / segment.factor).ceil() as Nanos;
        // Float rounding may land one ns either side; settle on the exact first one.
        while real_ns > segment.real_ns && self.to_device(real_ns - 1) >= device_ns {
            real_ns -= 1;
        }
        while self.to_device(real_ns) < device_ns {
            real_ns += 1;
        }
        real_ns
    }
}

impl DeviceModel for Slowed {
    fn model_name(&self) -> &'static str {
        self.inner.model_name()
    }

    fn submit(&mut self, now: Nanos, request: DeviceRequest) {
        let device_now = self.to_device(now);
        self.inner.submit(device_now, request);
    }

    fn next_event_at(&self) -> Option<Nanos> {
        self.inner.next_event_at().map(|at| self.to_real(at))
    }

    fn advance(&mut self, now: Nanos, completions: &mut Vec<DeviceCompletion>) {
        let first = completions.len();
        self.inner.advance(self.to_device(now), completions);
        for completion in &mut completions[first..] {
            completion.completed_at = self.to_real(completion.completed_at).min(now);
        }
    }

    fn profile(&self) -> DeviceProfile {
        self.inner.profile()
    }

    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slowed(windows: &[SlowdownWindow]) -> Slowed {
        Slowed::new(usb_flash(), windows).unwrap()
    }

    fn usb_flash() -> Box<dyn DeviceModel> {
        build(ModelName::UsbFlash, &toml::Table::new(), 1).unwrap()
    }

    fn window(start_s: f64, stop_s: f64, factor: f64) -> SlowdownWindow {
        SlowdownWindow {
            start_s,
            stop_s,
            factor,
        }
    }

    #[test]
    fn time_runs_at_the_factor_inside_a_window_and_maps_back_exactly() {
        let device = slowed(&[SlowdownWindow {
            start_s: 1.0,
            stop_s: 2.0,
            factor: 0.25,
        }]);
        assert_eq!(device.to_device(500_000_000), 500_000_000);
        assert_eq!(device.to_device(2_000_000_000), 1_250_000_000);
        assert_eq!(device.to_device(3_000_000_000), 2_250_000_000);
        for real in [0, 999_999_999, 1_000_000_001, 1_234_567_891, 2_000_000_003] {
            let device_ns = device.to_device(real);
            let back = device.to_real(device_ns);
            assert!(
                back <= real && device.to_device(back) == device_ns,
                "{real}"
            );
        }
    }

    #[test]
    fn overlapping_or_empty_windows_are_refused() {
        assert!(Slowed::new(usb_flash(), &[window(1.0, 3.0, 0.5), window(2.0, 4.0, 0.5)]).is_err());
        assert!(Slowed::new(usb_flash(), &[window(1.0, 1.0, 0.5)]).is_err());
        assert!(Slowed::new(usb_flash(), &[window(1.0, 2.0, 0.0)]).is_err());
    }

    #[test]
    fn errors_name_a_window_by_its_place_in_the_list() {
        // The bad window comes first in time but second in the list.
        let windows = [window(5.0, 6.0, 0.5), window(1.0, 2.0, 0.0)];
        let error = Slowed::new(usb_flash(), &windows).err().unwrap();
        assert_eq!(error.key, "slowdown[1].factor", "{error}");
        let windows = [window(5.0, 6.0, 0.5), window(1.0, 5.5, 0.5)];
        let error = Slowed::new(usb_flash(), &windows).err().unwrap();
        assert_eq!(error.key, "slowdown[0].start_s", "{error}");
    }

    #[test]
    fn windows_past_the_longest_run_are_refused_naming_stop_s() {
        let windows = [window(0.0, 1e8, 1000.0), window(2e8, 3e8, 0.5)];
        let error = Slowed::new(usb_flash(), &windows).err().unwrap();
        assert_eq!(error.key, "slowdown[0].stop_s", "{error}");
        let windows = [window(0.0, 8e4, 1000.0), window(8e4, DURATION_S_MAX, 0.5)];
        let device = Slowed::new(usb_flash(), &windows).unwrap();
        let end_ns = (DURATION_S_MAX * NANOS_PER_SECOND_F64) as Nanos;
        let device_end_ns = device.to_device(end_ns);
        assert!(device_end_ns > end_ns, "{device_end_ns}");
        assert!(device.to_real(device_end_ns) <= end_ns);
    }
}
