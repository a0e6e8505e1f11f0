//! Jobs that generate requests: closed loop, open loop, bursts.
//!
//! Each `[[job]]` of a scenario becomes `numjobs` *instances*. An instance owns a
//! random generator seeded from the scenario seed and its position among all
//! instances, in job order, so the same seed always gives the same requests.
//! Jobs and instances added after a job leave its requests unchanged; adding
//! one before it, or changing an earlier job's `numjobs`, shifts the seeds of
//! every instance that follows.
//!
//! - **Closed loop** (`queue_depth = N`): at its start the instance submits N
//!   requests, then one more each time one completes, until `stop_s`. This is how
//!   an application with N threads doing synchronous I/O behaves; latency is from
//!   submission to completion.
//! - **Open loop** (`rate_iops = R`): arrivals follow a Poisson process of mean
//!   rate R, whether or not earlier requests completed. Latency counts from the
//!   intended arrival time, so a stalled device cannot hide its stall by slowing the
//!   load down (no coordinated omission). An arrival drawn at or past the job's
//!   `stop_s` is dropped: arrival times saturate at the largest time there is,
//!   so a rate so low that the next gap exceeds any run (`rate_iops = 1e-15`)
//!   just brings no more requests.
//! - **Burst** (`burst_bytes = B`): at its start the instance submits
//!   `ceil(B / block_size)` block-size requests all at once, as kernel writeback
//!   hands a flush to the block layer: whole blocks, so a B that is not a
//!   multiple of the block size is rounded up to the next block.
//!
//! Offsets are block-aligned inside the job's region (`offset`, `size`): random
//! patterns draw uniformly; sequential ones advance and wrap, each instance from
//! its own slice of the region so parallel sequential streams do not overlap.

use crate::scenario::{derive_seed, Arrival, JobSpec, Scenario};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use tailguard_core::{Direction, Nanos, NANOS_PER_SECOND_F64};

/// A request an instance wants submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTemplate {
    /// The instance that generated it.
    pub instance: usize,
    /// The job the instance belongs to.
    pub job: usize,
    /// Read or write.
    pub direction: Direction,
    /// Byte offset on the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub length_bytes: u64,
    /// When it was meant to be submitted (latency counts from here).
    pub intended_at: Nanos,
}

#[derive(Debug)]
struct Instance {
    job: usize,
    rng: ChaCha8Rng,
    next_sequential_offset_bytes: u64,
    slice_start_bytes: u64,
    slice_bytes: u64,
}

/// All job instances of a scenario.
#[derive(Debug)]
pub struct Workload {
    jobs: Vec<JobSpec>,
    instances: Vec<Instance>,
}

impl Workload {
    /// The instances of every job, seeded from `seed`.
    pub fn new(scenario: &Scenario, seed: u64) -> Self {
        let mut instances = Vec::new();
        for (job_index, job) in scenario.jobs.iter().enumerate() {
            let blocks = job.region_bytes / job.block_size_bytes;
            let blocks_per_instance = (blocks / u64::from(job.numjobs)).max(1);
            for copy in 0..job.numjobs {
                let slice_start_bytes = job.offset_bytes
                    + (u64::from(copy) * blocks_per_instance % blocks) * job.block_size_bytes;
                instances.push(Instance {
                    job: job_index,
                    rng: ChaCha8Rng::seed_from_u64(derive_seed(seed, 2, instances.len())),
                    next_sequential_offset_bytes: slice_start_bytes,
                    slice_start_bytes,
                    slice_bytes: blocks_per_instance * job.block_size_bytes,
                });
            }
        }
        Self {
            jobs: scenario.jobs.clone(),
            instances,
        }
    }

    /// How many instances there are.
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    /// The job an instance belongs to.
    pub fn job_of(&self, instance: usize) -> &JobSpec {
        &self.jobs[self.instances[instance].job]
    }

    /// When each instance starts, in instance order.
    pub fn start_times(&self) -> Vec<Nanos> {
        self.instances
            .iter()
            .map(|instance| self.jobs[instance.job].start_ns)
            .collect()
    }

    /// The instance starts at `now`: pushes its initial requests, and returns
    /// when it next wants [`Workload::on_timer`] (open loop only).
    pub fn on_start(
        &mut self,
        now: Nanos,
        instance: usize,
        submit: &mut Vec<RequestTemplate>,
    ) -> Option<Nanos> {
        let job = &self.jobs[self.instances[instance].job];
        match job.arrival {
            Arrival::ClosedLoop { queue_depth } => {
                for _ in 0..queue_depth {
                    submit.push(self.next_request(instance, now));
                }
                None
            }
            Arrival::Burst { burst_bytes } => {
                let block = job.block_size_bytes;
                for _ in 0..burst_bytes.div_ceil(block) {
                    submit.push(self.next_request(instance, now));
                }
                None
            }
            Arrival::OpenLoop { .. } => Some(self.next_arrival(instance, now)),
        }
    }

    /// An open-loop instance's arrival time came: pushes one request and returns
    /// the next arrival, or `None` past the job's stop.
    pub fn on_timer(
        &mut self,
        now: Nanos,
        instance: usize,
        submit: &mut Vec<RequestTemplate>,
    ) -> Option<Nanos> {
        let stop_ns = self.jobs[self.instances[instance].job].stop_ns;
        if now >= stop_ns {
            return None;
        }
        submit.push(self.next_request(instance, now));
        Some(self.next_arrival(instance, now)).filter(|&next| next < stop_ns)
    }

    /// One of the instance's requests completed at `now`: a closed-loop instance
    /// submits the next one (before its stop).
    pub fn on_completion(
        &mut self,
        now: Nanos,
        instance: usize,
        submit: &mut Vec<RequestTemplate>,
    ) {
        let job = &self.jobs[self.instances[instance].job];
        if matches!(job.arrival, Arrival::ClosedLoop { .. }) && now < job.stop_ns {
            submit.push(self.next_request(instance, now));
        }
    }

    fn next_arrival(&mut self, instance: usize, now: Nanos) -> Nanos {
        let Arrival::OpenLoop { rate_iops } = self.jobs[self.instances[instance].job].arrival
        else {
            unreachable!("only open-loop jobs have arrivals");
        };
        let gap_s = Exp::new(rate_iops)
            .expect("rate validated positive")
            .sample(&mut self.instances[instance].rng);
        // The cast saturates, and so does the sum: a gap longer than any run is
        // an arrival past the job's stop, which `on_timer` drops.
        now.saturating_add(((gap_s * NANOS_PER_SECOND_F64).round() as Nanos).max(1))
    }

    /// One more request of the instance, intended at `now`, whatever its
    /// arrival: for a driver that lets a closed loop's or a burst's requests
    /// out one at a time (bench, under its in-flight limit) instead of through
    /// [`Workload::on_start`] and [`Workload::on_completion`].
    pub fn next_request(&mut self, instance_index: usize, now: Nanos) -> RequestTemplate {
        let instance = &mut self.instances[instance_index];
        let job = &self.jobs[instance.job];
        let block = job.block_size_bytes;
        let offset_bytes = if job.pattern.is_random() {
            let blocks = job.region_bytes / block;
            job.offset_bytes + instance.rng.random_range(0..blocks) * block
        } else {
            let offset = instance.next_sequential_offset_bytes;
            let slice_end = instance.slice_start_bytes + instance.slice_bytes;
            instance.next_sequential_offset_bytes = if offset + 2 * block > slice_end {
                instance.slice_start_bytes
            } else {
                offset + block
            };
            offset
        };
        RequestTemplate {
            instance: instance_index,
            job: instance.job,
            direction: job.pattern.direction(),
            offset_bytes,
            length_bytes: block,
            intended_at: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Pattern, Scenario};

    fn scenario(job: &str) -> Scenario {
        let text = format!(
            "duration_s = 1\n[[device]]\nname = \"d\"\nmodel = \"sata-ssd\"\n\
             [[class]]\nname = \"c\"\nshares = 1\n[[job]]\nclass = \"c\"\ndevice = \"d\"\n{job}"
        );
        Scenario::from_toml(&text).unwrap()
    }

    #[test]
    fn sequential_instances_advance_in_disjoint_slices() {
        let scenario = scenario(
            "pattern = \"seqwrite\"\nblock_size = \"4k\"\nqueue_depth = 2\nnumjobs = 2\nsize = \"1m\"",
        );
        assert_eq!(scenario.jobs[0].pattern, Pattern::Seqwrite);
        let mut workload = Workload::new(&scenario, 1);
        let mut submitted = Vec::new();
        workload.on_start(0, 0, &mut submitted);
        workload.on_start(0, 1, &mut submitted);
        let offsets: Vec<u64> = submitted.iter().map(|r| r.offset_bytes).collect();
        assert_eq!(offsets, vec![0, 4096, 512 * 1024, 512 * 1024 + 4096]);
    }

    #[test]
    fn a_burst_submits_everything_at_once() {
        let scenario =
            scenario("pattern = \"seqwrite\"\nblock_size = \"1m\"\nburst_bytes = \"64m\"");
        let mut workload = Workload::new(&scenario, 1);
        let mut submitted = Vec::new();
        assert_eq!(workload.on_start(0, 0, &mut submitted), None);
        assert_eq!(submitted.len(), 64);
        workload.on_completion(10, 0, &mut submitted);
        assert_eq!(submitted.len(), 64, "bursts do not refill");
    }

    #[test]
    fn a_rate_too_low_to_arrive_in_the_run_brings_no_request_and_no_overflow() {
        let text = |job: &str| {
            format!(
                "duration_s = 2\n[[device]]\nname = \"d\"\nmodel = \"sata-ssd\"\n\
                 [[class]]\nname = \"c\"\nshares = 1\n[[job]]\nclass = \"c\"\n\
                 device = \"d\"\n{job}"
            )
        };
        let scenario = Scenario::from_toml(&text(
            "pattern = \"randread\"\nblock_size = \"4k\"\nrate_iops = 1e-15\nstart_s = 0.5",
        ))
        .unwrap();
        let mut workload = Workload::new(&scenario, 1);
        let mut submitted = Vec::new();
        let next = workload.on_start(500_000_000, 0, &mut submitted).unwrap();
        assert!(next >= scenario.jobs[0].stop_ns, "{next}");
        assert_eq!(workload.on_timer(next, 0, &mut submitted), None);
        assert!(submitted.is_empty());
        let report = crate::engine::run(&scenario, crate::policy::PolicyName::Fifo, 1).unwrap();
        assert_eq!(report.classes[0].submitted, 0);
    }

    #[test]
    fn open_loop_arrivals_average_the_rate_and_stop() {
        let scenario = scenario(
            "pattern = \"randread\"\nblock_size = \"4k\"\nrate_iops = 1000.0\nstop_s = 0.5",
        );
        let mut workload = Workload::new(&scenario, 3);
        let mut submitted = Vec::new();
        let mut next = workload.on_start(0, 0, &mut submitted);
        while let Some(now) = next {
            next = workload.on_timer(now, 0, &mut submitted);
        }
        // Expect about 500 arrivals in 0.5 s at 1000/s (Poisson: ±5 sigma ≈ ±112).
        assert!((400..600).contains(&submitted.len()), "{}", submitted.len());
        assert!(submitted.iter().all(|r| r.intended_at < 500_000_000));
    }
}
