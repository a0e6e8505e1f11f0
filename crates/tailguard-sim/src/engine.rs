//! The discrete-event loop: workloads → policy → devices → policy → workloads.
//!
//! Virtual time jumps from one event to the next. At each step the engine finds
//! the earliest of: a device's next internal event, a workload timer (a job's
//! start, an open-loop arrival), and the policy's own timer. At that instant it
//!
//! 1. advances every device that has an event due, in device order, and passes
//!    each finished command to the policy; each request the policy reports
//!    finished is recorded, and its closed-loop instance submits the next one;
//! 2. fires the workload timers due, in (time, sequence) order;
//! 3. asks the policy to dispatch, and hands the commands to the devices.
//!
//! Everything is ordered by time and then by a sequence number or an index, and
//! every random draw comes from a generator seeded from the scenario seed, so a
//! run is a pure function of (scenario, policy, seed): the determinism test checks
//! that two runs give byte-identical JSON.
//!
//! Requests still unfinished when the simulated time runs out are counted as
//! `outstanding`; nothing is dropped silently.
//!
//! [`run_observed`] also hands every finished request to a callback, for
//! measurements the summary report cannot give (throughput and latency over time).

use crate::device::{DeviceCompletion, DeviceModel};
use crate::policy::{self, Policy, PolicyName, SimRequest, Submission};
use crate::report::{ClassAccumulator, RunReport};
use crate::scenario::Scenario;
use crate::workload::{RequestTemplate, Workload};
use crate::ConfigError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tailguard_core::{Nanos, NANOS_PER_SECOND_F64};

/// Steps allowed at one instant before the run is declared stuck (a model or
/// policy that keeps asking to be woken at the same time): a bug, not a workload.
const STEPS_PER_INSTANT_MAX: u64 = 50_000_000;

#[derive(Clone, Copy, Debug)]
struct Tracked {
    generation: u32,
    live: bool,
    instance: u32,
    row: u32,
    intended_at: Nanos,
    dispatched_at: Nanos,
    dispatched: bool,
    /// Bytes of its pieces handed to the device so far: the request is
    /// wholly dispatched once they reach `length_bytes`.
    dispatched_bytes: u64,
    length_bytes: u64,
}

impl Tracked {
    /// Whether its last piece has left the scheduler (a flush, of zero
    /// bytes, once it was dispatched at all).
    fn wholly_dispatched(&self) -> bool {
        self.dispatched && self.dispatched_bytes >= self.length_bytes
    }
}

/// Requests in flight, in a slab whose ids carry a generation.
#[derive(Debug, Default)]
struct RequestTable {
    slots: Vec<Tracked>,
    free: Vec<u32>,
}

impl RequestTable {
    fn insert(&mut self, mut tracked: Tracked) -> u64 {
        let index = match self.free.pop() {
            Some(index) => {
                tracked.generation = self.slots[index as usize].generation.wrapping_add(1);
                self.slots[index as usize] = tracked;
                index
            }
            None => {
                self.slots.push(tracked);
                (self.slots.len() - 1) as u32
            }
        };
        (u64::from(tracked.generation) << 32) | u64::from(index)
    }

    fn get_mut(&mut self, id: u64) -> &mut Tracked {
        let tracked = &mut self.slots[(id & u64::from(u32::MAX)) as usize];
        assert!(
            tracked.live && u64::from(tracked.generation) == id >> 32,
            "policy reported request {id:#x} that is not in flight"
        );
        tracked
    }

    fn remove(&mut self, id: u64) -> Tracked {
        let tracked = *self.get_mut(id);
        let index = (id & u64::from(u32::MAX)) as u32;
        self.slots[index as usize].live = false;
        self.free.push(index);
        tracked
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Start,
    Arrival,
}

/// A request as it finished, for [`run_observed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishedRequest {
    /// Index of the scenario class.
    pub class: usize,
    /// Index of the scenario device.
    pub device: usize,
    /// Its length.
    pub bytes: u64,
    /// When it was due (its latency counts from here).
    pub intended_at: Nanos,
    /// When its last piece left the scheduler.
    pub dispatched_at: Nanos,
    /// When it completed.
    pub completed_at: Nanos,
}

/// What [`run_observed`] calls for each finished request.
pub type Observer<'a> = &'a mut dyn FnMut(&FinishedRequest);

struct Simulation<'a> {
    observer: Option<Observer<'a>>,
    scenario: &'a Scenario,
    policy: Box<dyn Policy>,
    devices: Vec<Box<dyn DeviceModel>>,
    workload: Workload,
    timers: BinaryHeap<Reverse<(Nanos, u64, TimerKind, usize)>>,
    timer_sequence: u64,
    requests: RequestTable,
    rows: Vec<ClassAccumulator>,
    row_of_job: Vec<usize>,
    templates: Vec<RequestTemplate>,
    submissions: Vec<Submission>,
    device_completions: Vec<DeviceCompletion>,
    finished: Vec<u64>,
}

/// Runs `scenario` under `policy_name` with `seed` and returns its report.
pub fn run(
    scenario: &Scenario,
    policy_name: PolicyName,
    seed: u64,
) -> Result<RunReport, ConfigError> {
    run_inner(scenario, policy_name, seed, None)
}

/// Like [`run`], and calls `observer` for every request as it finishes, in
/// completion order.
pub fn run_observed(
    scenario: &Scenario,
    policy_name: PolicyName,
    seed: u64,
    observer: Observer<'_>,
) -> Result<RunReport, ConfigError> {
    run_inner(scenario, policy_name, seed, Some(observer))
}

fn run_inner<'a>(
    scenario: &'a Scenario,
    policy_name: PolicyName,
    seed: u64,
    observer: Option<Observer<'a>>,
) -> Result<RunReport, ConfigError> {
    let parameters = scenario
        .policy_parameters
        .get(&policy_name)
        .cloned()
        .unwrap_or_default();
    let policy = policy::build(policy_name, &scenario.policy_context(), &parameters)
        .map_err(|error| error.within(&format!("policy.{policy_name}")))?;
    let mut simulation = Simulation::new(scenario, policy, seed);
    simulation.observer = observer;
    simulation.run_to_end();
    simulation.account_undispatched();
    Ok(simulation.report(seed))
}

impl<'a> Simulation<'a> {
    fn new(scenario: &'a Scenario, policy: Box<dyn Policy>, seed: u64) -> Self {
        let (rows, row_of_job) = build_rows(scenario);
        let workload = Workload::new(scenario, seed);
        let mut simulation = Self {
            observer: None,
            scenario,
            policy,
            devices: scenario.build_devices(seed),
            workload,
            timers: BinaryHeap::new(),
            timer_sequence: 0,
            requests: RequestTable::default(),
            rows,
            row_of_job,
            templates: Vec::new(),
            submissions: Vec::new(),
            device_completions: Vec::new(),
            finished: Vec::new(),
        };
        for (instance, start) in simulation.workload.start_times().into_iter().enumerate() {
            simulation.schedule(start, TimerKind::Start, instance);
        }
        simulation
    }

    fn schedule(&mut self, at: Nanos, kind: TimerKind, instance: usize) {
        self.timers
            .push(Reverse((at, self.timer_sequence, kind, instance)));
        self.timer_sequence += 1;
    }

    fn next_instant(&self) -> Option<Nanos> {
        let timer = self.timers.peek().map(|Reverse((at, ..))| *at);
        let device = self.devices.iter().filter_map(|d| d.next_event_at()).min();
        let policy = self.policy.next_timer_at();
        [timer, device, policy].into_iter().flatten().min()
    }

    fn run_to_end(&mut self) {
        let end = self.scenario.duration_ns;
        let mut previous = 0;
        let mut steps_at_instant = 0u64;
        while let Some(now) = self.next_instant() {
            if now > end {
                break;
            }
            assert!(now >= previous, "time went backwards: {now} < {previous}");
            steps_at_instant = if now == previous {
                steps_at_instant + 1
            } else {
                0
            };
            assert!(
                steps_at_instant < STEPS_PER_INSTANT_MAX,
                "simulation stuck at {now} ns under policy {}",
                self.policy.name()
            );
            previous = now;
            self.step(now);
        }
    }

    fn step(&mut self, now: Nanos) {
        self.collect_device_completions(now);
        self.fire_timers(now);
        self.submit_templates(now);
        self.policy.dispatch(now, &mut self.submissions);
        for submission in self.submissions.drain(..) {
            let tracked = self.requests.get_mut(submission.request_id);
            tracked.dispatched_at = now;
            tracked.dispatched = true;
            tracked.dispatched_bytes = tracked
                .dispatched_bytes
                .saturating_add(submission.command.length_bytes);
            self.devices[submission.device].submit(now, submission.command);
        }
    }

    fn collect_device_completions(&mut self, now: Nanos) {
        for device_index in 0..self.devices.len() {
            let device = &mut self.devices[device_index];
            if device.next_event_at().is_none_or(|at| at > now) {
                continue;
            }
            device.advance(now, &mut self.device_completions);
            for completion in std::mem::take(&mut self.device_completions) {
                self.policy.complete(
                    completion.completed_at,
                    device_index,
                    completion.token,
                    &mut self.finished,
                );
                for id in std::mem::take(&mut self.finished) {
                    self.finish_request(id, completion.completed_at.max(now));
                }
            }
        }
    }

    fn finish_request(&mut self, id: u64, completed_at: Nanos) {
        let tracked = self.requests.remove(id);
        self.rows[tracked.row as usize].on_complete(
            completed_at,
            tracked.intended_at,
            tracked.dispatched_at,
            tracked.length_bytes,
        );
        if let Some(observer) = self.observer.as_mut() {
            let job = self.workload.job_of(tracked.instance as usize);
            observer(&FinishedRequest {
                class: job.class,
                device: job.device,
                bytes: tracked.length_bytes,
                intended_at: tracked.intended_at,
                dispatched_at: tracked.dispatched_at,
                completed_at,
            });
        }
        self.workload
            .on_completion(completed_at, tracked.instance as usize, &mut self.templates);
    }

    fn fire_timers(&mut self, now: Nanos) {
        while let Some(&Reverse((at, _, kind, instance))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let next = match kind {
                TimerKind::Start => self.workload.on_start(now, instance, &mut self.templates),
                TimerKind::Arrival => self.workload.on_timer(now, instance, &mut self.templates),
            };
            if let Some(next) = next {
                self.schedule(next, TimerKind::Arrival, instance);
            }
        }
    }

    fn submit_templates(&mut self, now: Nanos) {
        for template in std::mem::take(&mut self.templates) {
            let job = self.workload.job_of(template.instance);
            let (class, device, sync) = (job.class, job.device, job.sync);
            let row = self.row_of_job[template.job];
            let id = self.requests.insert(Tracked {
                generation: 0,
                live: true,
                instance: template.instance as u32,
                row: row as u32,
                intended_at: template.intended_at,
                dispatched_at: template.intended_at,
                dispatched: false,
                dispatched_bytes: 0,
                length_bytes: template.length_bytes,
            });
            self.rows[row].on_submit(now);
            self.policy.submit(
                now,
                SimRequest {
                    id,
                    class,
                    device,
                    direction: template.direction,
                    offset_bytes: template.offset_bytes,
                    length_bytes: template.length_bytes,
                    sync,
                },
            );
        }
    }

    /// Requests unfinished at the end count towards the longest queue wait
    /// too, or a policy that starves a class forever would look as if it
    /// never made anyone wait. A request wholly dispatched (in the device)
    /// counts its wait until its last piece was dispatched, as a finished one
    /// does; one with a piece still in the scheduler's queue (never
    /// dispatched, or split and only partly dispatched) is still waiting, and
    /// counts its wait until the end.
    fn account_undispatched(&mut self) {
        let end = self.scenario.duration_ns;
        for tracked in &self.requests.slots {
            if !tracked.live {
                continue;
            }
            let waited_until = if tracked.wholly_dispatched() {
                tracked.dispatched_at
            } else {
                end
            };
            self.rows[tracked.row as usize]
                .on_still_queued(waited_until.saturating_sub(tracked.intended_at));
        }
    }

    fn report(&self, seed: u64) -> RunReport {
        RunReport {
            policy: self.policy.name().to_string(),
            seed,
            duration_s: self.scenario.duration_ns as f64 / NANOS_PER_SECOND_F64,
            classes: self.rows.iter().map(ClassAccumulator::finish).collect(),
        }
    }
}

/// One accumulator per (class, device) pair with jobs, in order of first
/// appearance, and the row of each job. A pair whose jobs leave gaps
/// (readers that run and pause in turn) counts its worst 0.5 s rate only
/// while its jobs run ([`ClassAccumulator::active_during`]), as the bench
/// does.
fn build_rows(scenario: &Scenario) -> (Vec<ClassAccumulator>, Vec<usize>) {
    let mut keys: Vec<(usize, usize)> = Vec::new();
    let mut spans: Vec<Vec<(Nanos, Nanos)>> = Vec::new();
    let mut row_of_job = Vec::new();
    for job in &scenario.jobs {
        let key = (job.class, job.device);
        let row = keys
            .iter()
            .position(|existing| *existing == key)
            .unwrap_or_else(|| {
                keys.push(key);
                spans.push(Vec::new());
                keys.len() - 1
            });
        spans[row].push((job.start_ns, job.stop_ns));
        row_of_job.push(row);
    }
    let rows = keys
        .iter()
        .zip(&spans)
        .map(|(&(class, device), spans)| {
            let start = spans.iter().map(|span| span.0).min().unwrap_or(0);
            let stop = spans.iter().map(|span| span.1).max().unwrap_or(start);
            ClassAccumulator::new(
                scenario.classes[class].name.clone(),
                scenario.devices[device].name.clone(),
                stop.saturating_sub(start),
            )
            .starting_at(start)
            .active_during(spans)
            .covering_run(scenario.duration_ns)
        })
        .collect();
    (rows, row_of_job)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A usb-flash stick without stalls (a 1 MiB write takes about 350 ms),
    /// one class, the job and policy table given, run for `duration_s`.
    fn queue_wait_us_max(duration_s: f64, job: &str, policy: PolicyName, parameters: &str) -> f64 {
        let text = format!(
            "duration_s = {duration_s}\n[[device]]\nname = \"stick\"\nmodel = \"usb-flash\"\n\
             stall_max_us = 0.0\n[[class]]\nname = \"c\"\nshares = 1\n[[job]]\n\
             class = \"c\"\ndevice = \"stick\"\npattern = \"seqwrite\"\n\
             block_size = \"1m\"\n{job}\n{parameters}"
        );
        let scenario = Scenario::from_toml(&text).unwrap();
        let report = run(&scenario, policy, 1).unwrap();
        assert_eq!(report.classes[0].outstanding, 1, "{report:?}");
        report.classes[0].queue_wait_us_max
    }

    #[test]
    fn the_timeline_has_a_point_for_every_second_of_the_run() {
        // A reader that stops after 1 s of a 4.5 s run: five points, the
        // last three quiet.
        let text = "duration_s = 4.5\n[[device]]\nname = \"d\"\nmodel = \"nvme\"\n\
                    [[class]]\nname = \"c\"\nshares = 1\n[[job]]\nclass = \"c\"\n\
                    device = \"d\"\npattern = \"randread\"\nblock_size = \"4k\"\nstop_s = 1.0";
        let scenario = Scenario::from_toml(text).unwrap();
        let report = run(&scenario, PolicyName::Fifo, 1).unwrap();
        let timeline = &report.classes[0].timeline;
        let seconds: Vec<u64> = timeline.iter().map(|point| point.second).collect();
        assert_eq!(seconds, [0, 1, 2, 3, 4]);
        assert!(timeline[0].iops > 0.0);
        assert!(timeline[2..].iter().all(|point| point.iops == 0.0));
    }

    #[test]
    fn a_rate_never_exceeds_what_the_device_can_do() {
        // 128 writes in flight when the writer stops at 5 s of a 20 s run:
        // they finish afterwards and count in `bytes`, not in the rate over
        // the writer's 5 s.
        let text = "duration_s = 20\n[[device]]\nname = \"stick\"\nmodel = \"usb-flash\"\n\
                    [[class]]\nname = \"c\"\nshares = 1\n[[job]]\nclass = \"c\"\n\
                    device = \"stick\"\npattern = \"seqwrite\"\nblock_size = \"128k\"\n\
                    queue_depth = 128\nstop_s = 5";
        let scenario = Scenario::from_toml(text).unwrap();
        let report = run(&scenario, PolicyName::Fifo, 1).unwrap();
        let row = &report.classes[0];
        let write_mb_per_s = scenario.devices[0].profile.write_bandwidth / 1e6;
        assert!(
            row.mb_per_s <= write_mb_per_s * 1.1,
            "{} MB/s on a {write_mb_per_s} MB/s stick",
            row.mb_per_s
        );
        assert!(row.bytes as f64 / 5e6 > write_mb_per_s * 1.1, "{row:?}");
    }

    #[test]
    fn a_request_in_the_device_at_the_end_counts_its_wait_until_dispatch() {
        // Two writes at 0; the deadline policy lets one into the stick at a
        // time, so the second waits for the first (~350 ms), is dispatched,
        // and is still in the stick at 0.5 s.
        let waited_us = queue_wait_us_max(
            0.5,
            "burst_bytes = \"2m\"",
            PolicyName::Deadline,
            "[policy.deadline]\ndevice_depth = 1",
        );
        assert!(
            (300_000.0..450_000.0).contains(&waited_us),
            "{waited_us} µs: the second write's wait until its dispatch"
        );
    }

    #[test]
    fn a_request_with_pieces_still_queued_at_the_end_counts_its_wait_until_the_end() {
        // One 1 MiB write split into 128 KiB pieces (~46 ms each), a budget
        // of about one piece: at 0.2 s some pieces are still queued, so it is
        // still waiting.
        let waited_us = queue_wait_us_max(
            0.2,
            "burst_bytes = \"1m\"",
            PolicyName::Tailguard,
            "[policy.tailguard]\nbudget_us = 50000\ncontroller = \"fixed\"\n\
             quiet_reads = false",
        );
        assert_eq!(waited_us, 200_000.0);
    }
}
