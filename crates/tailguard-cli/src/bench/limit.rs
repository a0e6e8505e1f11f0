//! Bench's bound on what a run holds in flight, whatever its jobs ask.
//!
//! Every request bench hands to a mode owns a buffer until it completes, so a
//! job that asks for more than the device serves (an open-loop rate above the
//! device's, a closed loop of `queue_depth = 65536` times `numjobs = 16`, a
//! burst of terabytes) would otherwise hold memory without bound. Bench keeps
//! each job's requests in flight under a limit ([`InFlightLimits`]: a request
//! count and a byte count per job, and a byte count for the whole run), and
//! what it does past the limit follows what the job means:
//!
//! - **Open loop**: an arrival that finds its job at the limit is *dropped*:
//!   counted, never submitted, its latency not recorded. The job is reported
//!   as overloaded ([`JobOverload`]) with the rate it asked for and the rate
//!   the device sustained (its completions over its active time), as fio
//!   reports the rate it achieved when `rate_iops` is more than the device
//!   serves. The latency percentiles then cover the requests that were served.
//! - **Closed loop and bursts**: the instance *owes* the request (a counter,
//!   not a queued request), and submits it when one of its job's requests
//!   completes: a closed loop deeper than the limit runs at the limit's depth,
//!   and a burst larger than it is fed through it. A held-back request's
//!   latency counts from when it was owed for bursts (so a burst's latency is
//!   still measured from its start), and from the moment it is let out for a
//!   closed loop (which runs at the limit's depth, so that moment is when its
//!   previous request completed, as for any closed-loop refill). The job is
//!   reported with the most requests it held back.
//!
//! The state here is per job and per instance counters: its size does not
//! grow with the load.

use serde::Serialize;
use std::collections::VecDeque;
use tailguard_core::Nanos;

/// The limits on requests in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlightLimits {
    /// Most requests one job (all its instances) holds in flight: deeper
    /// queues hold more buffers without reaching more of a device's
    /// parallelism (a device's queue is at most a few thousand deep).
    pub job_requests_max: u64,
    /// Most buffer bytes one job holds in flight: lower caps large-block jobs
    /// sooner, higher lets one job take more of the machine's memory.
    pub job_bytes_max: u64,
    /// Most buffer bytes the whole run holds in flight (one request is let
    /// through whatever its size when nothing else is in flight): the bound
    /// on the run's memory for buffers.
    pub run_bytes_max: u64,
}

impl Default for InFlightLimits {
    fn default() -> Self {
        Self {
            job_requests_max: 4096,
            job_bytes_max: 256 << 20,
            run_bytes_max: 1 << 30,
        }
    }
}

impl InFlightLimits {
    /// The most requests a job whose largest request is `request_bytes_max`
    /// holds in flight (at least one).
    pub fn job_requests(&self, request_bytes_max: u64) -> u64 {
        let by_bytes = self.job_bytes_max / request_bytes_max.max(1);
        self.job_requests_max.min(by_bytes).max(1)
    }
}

/// A job that met its in-flight limit during a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobOverload {
    /// The job.
    pub job: String,
    /// Its class.
    pub class: String,
    /// Its open-loop rate (all instances), when it has one.
    pub asked_iops: Option<f64>,
    /// The rate its class's requests completed at, over its active time.
    pub sustained_iops: f64,
    /// Its limit on requests in flight.
    pub in_flight_limit: u64,
    /// The most it had in flight.
    pub in_flight_peak: u64,
    /// Open-loop arrivals over the run (served or dropped).
    pub arrivals: u64,
    /// Open-loop arrivals dropped at the limit (never submitted).
    pub dropped: u64,
    /// The most closed-loop or burst requests it held back at once (owed
    /// while the job was at its limit).
    pub held_back: u64,
}

impl JobOverload {
    /// One line for the terminal.
    pub fn describe(&self) -> String {
        match self.asked_iops {
            Some(asked) => format!(
                "overload: job `{}` asked {asked:.0} IOPS; the device sustained {:.0} IOPS; \
                 {} of {} arrivals dropped with {} requests in flight (the job's limit); \
                 latency covers the served requests only",
                self.job, self.sustained_iops, self.dropped, self.arrivals, self.in_flight_limit
            ),
            None => format!(
                "limit: job `{}` asked more than {} requests in flight (the job's limit); \
                 up to {} more waited for a free slot; it ran at {:.0} IOPS",
                self.job, self.in_flight_limit, self.held_back, self.sustained_iops
            ),
        }
    }
}

/// Per job: what it holds in flight and what met the limit.
#[derive(Clone, Debug, Default)]
struct JobState {
    limit: u64,
    requests: u64,
    peak: u64,
    arrivals: u64,
    dropped: u64,
    /// Requests its instances owe.
    owed: u64,
    /// Whether it met its limit since its instances last owed nothing.
    at_limit: bool,
    /// The most it owed at once while at its limit.
    held_back: u64,
    /// Instances of the job that owe requests, each once.
    waiting: VecDeque<usize>,
}

/// Per instance: the requests it owes (closed loop and bursts).
#[derive(Clone, Copy, Debug, Default)]
struct Owed {
    count: u64,
    /// When the oldest owed request was meant to go.
    since_ns: Nanos,
    /// Whether held-back requests keep `since_ns` (bursts) or count from
    /// their release (closed loops).
    keep_since: bool,
    queued: bool,
}

/// The in-flight accounting of one run; see the module docs.
#[derive(Debug)]
pub struct InFlight {
    limits: InFlightLimits,
    jobs: Vec<JobState>,
    owed: Vec<Owed>,
    run_bytes: u64,
    run_requests: u64,
    run_requests_peak: u64,
}

impl InFlight {
    /// The accounting for jobs whose largest requests are
    /// `request_bytes_max` (per job), over `instances` instances.
    pub fn new(limits: InFlightLimits, request_bytes_max: &[u64], instances: usize) -> Self {
        let jobs = request_bytes_max
            .iter()
            .map(|&bytes| JobState {
                limit: limits.job_requests(bytes),
                ..JobState::default()
            })
            .collect();
        Self {
            limits,
            jobs,
            owed: vec![Owed::default(); instances],
            run_bytes: 0,
            run_requests: 0,
            run_requests_peak: 0,
        }
    }

    /// The limits.
    pub fn limits(&self) -> InFlightLimits {
        self.limits
    }

    /// The job's limit on requests in flight.
    pub fn job_limit(&self, job: usize) -> u64 {
        self.jobs[job].limit
    }

    /// Whether a request of `bytes` of `job` may go now.
    pub fn has_room(&self, job: usize, bytes: u64) -> bool {
        let state = &self.jobs[job];
        state.requests < state.limit
            && (self.run_requests == 0 || self.run_bytes + bytes <= self.limits.run_bytes_max)
    }

    /// An open-loop arrival of `job` came; whether it is dropped (no room for
    /// a request of `bytes`).
    pub fn arrive(&mut self, job: usize, bytes: u64) -> bool {
        let room = self.has_room(job, bytes);
        let state = &mut self.jobs[job];
        state.arrivals += 1;
        if !room {
            state.dropped += 1;
        }
        !room
    }

    /// A request of `bytes` of `job` went to the mode.
    pub fn start(&mut self, job: usize, bytes: u64) {
        let state = &mut self.jobs[job];
        state.requests += 1;
        state.peak = state.peak.max(state.requests);
        self.run_bytes += bytes;
        self.run_requests += 1;
        self.run_requests_peak = self.run_requests_peak.max(self.run_requests);
    }

    /// A request of `bytes` of `job` completed.
    pub fn finish(&mut self, job: usize, bytes: u64) {
        self.jobs[job].requests -= 1;
        self.run_bytes -= bytes;
        self.run_requests -= 1;
    }

    /// `instance` of `job` owes `count` more requests meant to go at `at`
    /// (`burst`: all of them count their latency from `at`).
    pub fn owe(&mut self, job: usize, instance: usize, count: u64, at: Nanos, burst: bool) {
        let owed = &mut self.owed[instance];
        if owed.count == 0 {
            owed.since_ns = at;
            owed.keep_since = burst;
        }
        owed.count += count;
        self.jobs[job].owed += count;
        if !owed.queued {
            owed.queued = true;
            self.jobs[job].waiting.push_back(instance);
        }
    }

    /// Forgets what `instance` of `job` owes (it has moved all its bytes).
    pub fn forgive(&mut self, job: usize, instance: usize) {
        self.jobs[job].owed -= self.owed[instance].count;
        self.owed[instance].count = 0;
    }

    /// Takes one owed request of `job` if it has room for `bytes`: its
    /// instance and its intended time (`now` for a closed-loop request while
    /// the job holds requests back).
    pub fn take_owed(&mut self, job: usize, bytes: u64, now: Nanos) -> Option<(usize, Nanos)> {
        loop {
            let Some(&instance) = self.jobs[job].waiting.front() else {
                self.jobs[job].at_limit = false;
                return None;
            };
            if self.owed[instance].count == 0 {
                self.owed[instance].queued = false;
                self.jobs[job].waiting.pop_front();
                continue;
            }
            if !self.has_room(job, bytes) {
                let state = &mut self.jobs[job];
                state.held_back = state.held_back.max(state.owed);
                state.at_limit = true;
                return None;
            }
            let state = &mut self.jobs[job];
            let owed = &mut self.owed[instance];
            let intended = if state.at_limit && !owed.keep_since {
                now.max(owed.since_ns)
            } else {
                owed.since_ns
            };
            owed.count -= 1;
            state.owed -= 1;
            if owed.count > 0 {
                // Take turns with the job's other instances.
                state.waiting.rotate_left(1);
            }
            return Some((instance, intended));
        }
    }

    /// The most requests the whole run had in flight.
    pub fn run_requests_peak(&self) -> u64 {
        self.run_requests_peak
    }

    /// Per job: (limit, peak, arrivals, dropped, held back), for jobs that
    /// met their limit.
    pub fn overloaded(&self) -> impl Iterator<Item = (usize, [u64; 5])> + '_ {
        self.jobs.iter().enumerate().filter_map(|(job, state)| {
            (state.dropped > 0 || state.held_back > 0).then_some((
                job,
                [
                    state.limit,
                    state.peak,
                    state.arrivals,
                    state.dropped,
                    state.held_back,
                ],
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> InFlightLimits {
        InFlightLimits {
            job_requests_max: 4,
            job_bytes_max: 1 << 20,
            run_bytes_max: 64 << 10,
        }
    }

    #[test]
    fn a_job_limit_follows_its_request_size() {
        let limits = limits();
        assert_eq!(limits.job_requests(4096), 4);
        assert_eq!(limits.job_requests(512 << 10), 2);
        assert_eq!(limits.job_requests(1 << 30), 1, "at least one");
    }

    #[test]
    fn arrivals_past_the_limit_are_dropped_and_counted() {
        let mut in_flight = InFlight::new(limits(), &[4096], 1);
        let mut dropped = 0;
        for _ in 0..10 {
            if in_flight.arrive(0, 4096) {
                dropped += 1;
            } else {
                in_flight.start(0, 4096);
            }
        }
        assert_eq!(dropped, 6);
        assert_eq!(in_flight.overloaded().next(), Some((0, [4, 4, 10, 6, 0])));
        in_flight.finish(0, 4096);
        assert!(!in_flight.arrive(0, 4096), "a completion makes room");
    }

    #[test]
    fn the_run_byte_limit_holds_across_jobs_but_lets_one_through() {
        let mut in_flight = InFlight::new(limits(), &[32 << 10, 32 << 10, 128 << 10], 3);
        in_flight.start(0, 32 << 10);
        in_flight.start(1, 32 << 10);
        assert!(!in_flight.has_room(0, 32 << 10), "64 KiB in flight already");
        in_flight.finish(0, 32 << 10);
        in_flight.finish(1, 32 << 10);
        assert!(in_flight.has_room(2, 128 << 10), "alone, a large one goes");
    }

    #[test]
    fn a_held_back_closed_loop_request_counts_from_its_release() {
        let mut in_flight = InFlight::new(limits(), &[4096], 1);
        in_flight.owe(0, 0, 6, 10, false);
        for _ in 0..4 {
            assert_eq!(in_flight.take_owed(0, 4096, 11), Some((0, 10)));
            in_flight.start(0, 4096);
        }
        assert_eq!(in_flight.take_owed(0, 4096, 12), None);
        in_flight.finish(0, 4096);
        assert_eq!(in_flight.take_owed(0, 4096, 50), Some((0, 50)));
        assert_eq!(in_flight.overloaded().next(), Some((0, [4, 4, 0, 0, 2])));
    }

    #[test]
    fn owed_requests_go_in_turns_and_keep_a_burst_start() {
        let mut in_flight = InFlight::new(limits(), &[4096], 2);
        in_flight.owe(0, 0, 3, 10, true);
        in_flight.owe(0, 1, 3, 10, true);
        let mut taken = Vec::new();
        while let Some(request) = in_flight.take_owed(0, 4096, 99) {
            in_flight.start(0, 4096);
            taken.push(request);
        }
        assert_eq!(taken, vec![(0, 10), (1, 10), (0, 10), (1, 10)]);
        assert_eq!(in_flight.overloaded().next(), Some((0, [4, 4, 0, 0, 2])));
        in_flight.finish(0, 4096);
        assert_eq!(
            in_flight.take_owed(0, 4096, 120),
            Some((0, 10)),
            "a burst keeps its start"
        );
        assert_eq!(in_flight.overloaded().count(), 1);
    }
}
