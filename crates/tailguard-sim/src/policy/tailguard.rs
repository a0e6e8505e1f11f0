//! The `tailguard` policy: the real scheduling core, one dispatcher per device.
//!
//! This is not a model of tailguard: it is [`tailguard_core::Dispatcher`] itself,
//! driven by the simulator's clock exactly as the io_uring engine drives it with a
//! real one. Each scenario device gets its own dispatcher, built from the
//! device's profile (what calibration would measure, possibly overridden by the
//! scenario's `[device.profile]`), so devices never share a budget (seed 001).
//! Every scenario class exists on every device with the same shares and the
//! same rate limit (a cap of 50 MB/s is 50 MB/s on each device). A class held
//! by its cap is woken through [`Policy::next_timer_at`]: the earliest
//! [`Dispatcher::next_eligible_at`] over the devices.
//!
//! A rotational model (`hdd`) is a device that seeks
//! ([`DispatcherConfig::seeks`]), as the engine takes a rotational disk: its
//! dispatcher serves backlogged classes in slices and charges a piece that
//! continues a sequential stream its transfer alone.
//!
//! Each call to `dispatch` drains, for every device, everything its budget admits
//! in one batch, which is what the engine does per loop iteration (seed 003: the
//! submission path takes the whole queue at once).
//!
//! Parameters (`[policy.tailguard]` in a scenario):
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `budget_us` | derived | overrides every device's (starting) in-flight budget, in µs of device time, at most [`POLICY_TIME_US_MAX`] |
//! | `controller` | `adaptive` | `adaptive`: [`tailguard_core::AdaptiveBudget`] resizes each budget from completions; `fixed`: the budget never changes |
//! | `slice_us` | derived | on a rotational device, the slice (see [`DispatcherConfig::slice_ns`]) in µs of device time, at most [`POLICY_TIME_US_MAX`]; `0` turns it off; default: [`SLICE_LATENCY_TARGETS`] latency targets. Devices without seeks never slice |
//! | `profile` | `model` | `model`: each dispatcher starts from the device's profile; `none`: from [`DeviceProfile::uncalibrated`] (keeping the device's `max_request_bytes` and latency target), as a device nobody calibrated |
//! | `quiet_reads` | `true` | with `controller = "fixed"`, the engine's quiet-reads rule ([`QuietReads::default`]: four budgets after 100 ms without a read); `false`: one budget always. The adaptive controller never takes it ([`ControllerChoice::quiet_reads`]) |

use super::{Policy, PolicyContext, SimRequest, Submission};
use crate::device::DeviceRequest;
use crate::ConfigError;
use serde::Deserialize;
use tailguard_core::{
    ClassId, DeviceProfile, DispatchedPiece, Dispatcher, DispatcherConfig, IoRequest,
    LatencyController, Nanos, QuietReads, RequestId, NANOS_PER_MICROSECOND,
};

/// Which latency controller each dispatcher uses: the core's one list.
pub use tailguard_core::ControllerChoice;

/// The simulator's default controller: [`ControllerChoice::Adaptive`], with
/// which every seed scenario meets its criteria (`tests/seed_scenarios.rs`).
fn default_controller() -> ControllerChoice {
    ControllerChoice::Adaptive
}

/// A rotational device's default slice, in latency targets: the core's,
/// which the engine uses too.
pub use tailguard_core::SLICE_LATENCY_TARGETS;

/// Which profile each dispatcher starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileChoice {
    /// The device's profile (the model's, with the scenario's overrides).
    #[default]
    Model,
    /// No calibration: [`DeviceProfile::uncalibrated`].
    None,
}

/// Parameters of the `tailguard` policy.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TailguardParameters {
    /// Overrides every device's budget, in microseconds of device time.
    pub budget_us: Option<u64>,
    /// The latency controller.
    #[serde(default = "default_controller")]
    pub controller: ControllerChoice,
    /// The profile dispatchers start from.
    pub profile: ProfileChoice,
    /// Overrides a rotational device's slice, in microseconds (0: none).
    pub slice_us: Option<u64>,
    /// Whether a fixed budget deepens while no one reads, as the engine's
    /// does (see the module docs).
    pub quiet_reads: bool,
}

impl Default for TailguardParameters {
    fn default() -> Self {
        Self {
            budget_us: None,
            controller: default_controller(),
            profile: ProfileChoice::default(),
            slice_us: None,
            quiet_reads: true,
        }
    }
}

impl TailguardParameters {
    /// Refuses a `budget_us` or `slice_us` past [`POLICY_TIME_US_MAX`],
    /// naming the key (the checks [`TailguardPolicy::new`] makes that need
    /// no device).
    pub fn validate(&self) -> Result<(), ConfigError> {
        policy_time_ns(self.budget_us, "budget_us")?;
        policy_time_ns(self.slice_us, "slice_us").map(drop)
    }
}

/// The longest `budget_us` or `slice_us` accepted: a day of device time, as
/// long as the longest scenario ([`crate::scenario::DURATION_S_MAX`]), so
/// either in nanoseconds, and their sum, fit the core's arithmetic.
pub const POLICY_TIME_US_MAX: u64 = 86_400_000_000;

/// `value_us` (the parameter `key`) in nanoseconds, refused past
/// [`POLICY_TIME_US_MAX`] naming the key.
fn policy_time_ns(value_us: Option<u64>, key: &str) -> Result<Option<Nanos>, ConfigError> {
    let Some(value_us) = value_us else {
        return Ok(None);
    };
    value_us
        .checked_mul(NANOS_PER_MICROSECOND)
        .filter(|_| value_us <= POLICY_TIME_US_MAX)
        .map(Some)
        .ok_or_else(|| {
            ConfigError::new(
                key,
                format!("{value_us} is out of range; give 0 to {POLICY_TIME_US_MAX} µs"),
            )
        })
}

type DeviceDispatcher = Dispatcher<Box<dyn LatencyController>>;

struct DeviceState {
    dispatcher: DeviceDispatcher,
    classes: Vec<ClassId>,
}

/// The `tailguard` policy; see the module docs.
pub struct TailguardPolicy {
    devices: Vec<DeviceState>,
    pieces: Vec<DispatchedPiece>,
}

impl TailguardPolicy {
    /// One dispatcher per device, every class on each.
    pub fn new(
        context: &PolicyContext,
        parameters: TailguardParameters,
    ) -> Result<Self, ConfigError> {
        let budget_ns = policy_time_ns(parameters.budget_us, "budget_us")?;
        let slice_ns = policy_time_ns(parameters.slice_us, "slice_us")?;
        let devices = context
            .devices
            .iter()
            .map(|device| {
                let profile = match parameters.profile {
                    ProfileChoice::Model => device.profile.clone(),
                    ProfileChoice::None => DeviceProfile::uncalibrated(
                        device.profile.max_request_bytes,
                        device.profile.latency_target_us,
                    ),
                };
                let controller = parameters.controller.build(&profile);
                let mut config = DispatcherConfig::new(profile);
                config.budget_ns = budget_ns;
                config.slice_ns = device
                    .rotational
                    .then(|| {
                        slice_ns.unwrap_or(DispatcherConfig::default_slice_ns(&config.profile))
                    })
                    .filter(|&slice_ns| slice_ns > 0);
                config.seeks = device.rotational;
                // The simulator has no device that serves through a file.
                config.pipeline_pieces = parameters
                    .controller
                    .pipeline_pieces(device.rotational, false);
                config.spare_latency_classes = parameters.controller.spares_latency_classes();
                config.quiet_reads = parameters
                    .controller
                    .quiet_reads(parameters.quiet_reads.then(QuietReads::default));
                let mut dispatcher = Dispatcher::with_controller(config, controller)
                    .map_err(ConfigError::from_profile)?;
                let classes = context
                    .classes
                    .iter()
                    .map(|class| {
                        let id = dispatcher
                            .add_class(class.shares)
                            .map_err(|error| ConfigError::new("shares", error.to_string()))?;
                        dispatcher
                            .set_rate_limit(0, id, class.rate_limit)
                            .map_err(|error| ConfigError::new("limit", error.to_string()))?;
                        Ok(id)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(DeviceState {
                    dispatcher,
                    classes,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Self {
            devices,
            pieces: Vec::new(),
        })
    }

    /// The dispatcher of a device (for tests and reports).
    pub fn dispatcher(&self, device: usize) -> &DeviceDispatcher {
        &self.devices[device].dispatcher
    }
}

impl Policy for TailguardPolicy {
    fn name(&self) -> &'static str {
        "tailguard"
    }

    fn submit(&mut self, now: Nanos, request: SimRequest) {
        let device = &mut self.devices[request.device];
        device
            .dispatcher
            .enqueue(
                now,
                IoRequest {
                    id: RequestId(request.id),
                    class: device.classes[request.class],
                    direction: request.direction,
                    offset_bytes: request.offset_bytes,
                    length_bytes: request.length_bytes,
                },
            )
            .expect("every scenario class exists on every device");
    }

    fn complete(&mut self, now: Nanos, device: usize, token: u64, finished: &mut Vec<u64>) {
        let completion = self.devices[device]
            .dispatcher
            .complete(now, token)
            .expect("devices complete each token once");
        finished.extend(completion.map(|completion| completion.request.0));
    }

    fn dispatch(&mut self, now: Nanos, out: &mut Vec<Submission>) {
        for (device_index, device) in self.devices.iter_mut().enumerate() {
            device.dispatcher.dispatch(now, &mut self.pieces);
            out.extend(self.pieces.drain(..).map(|piece| Submission {
                device: device_index,
                request_id: piece.request.0,
                command: DeviceRequest {
                    token: piece.token,
                    direction: piece.direction,
                    offset_bytes: piece.offset_bytes,
                    length_bytes: piece.length_bytes,
                },
            }));
        }
    }

    fn next_timer_at(&self) -> Option<Nanos> {
        self.devices
            .iter()
            .filter_map(|device| device.dispatcher.next_eligible_at())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::PolicyName;
    use crate::scenario::Scenario;

    fn run_with(parameters: &str) -> Result<(), crate::ConfigError> {
        let text = format!(
            "duration_s = 0.1\n[[device]]\nname = \"d\"\nmodel = \"hdd\"\n\
             [[class]]\nname = \"c\"\nshares = 1\n[[job]]\nclass = \"c\"\ndevice = \"d\"\n\
             pattern = \"randread\"\nblock_size = \"4k\"\n[policy.tailguard]\n{parameters}"
        );
        let scenario = Scenario::from_toml(&text)?;
        crate::engine::run(&scenario, PolicyName::Tailguard, 1).map(|_| ())
    }

    #[test]
    fn budgets_and_slices_too_long_to_hold_are_refused_naming_the_key() {
        for key in ["budget_us", "slice_us"] {
            for value in ["9223372036854775807", "86400000001"] {
                let error = run_with(&format!("{key} = {value}")).unwrap_err();
                assert_eq!(error.key, format!("policy.tailguard.{key}"), "{error}");
            }
            run_with(&format!("{key} = 86400000000")).unwrap();
        }
    }
}
