//! A small closed-loop load generator on a raw backend (io_uring, O_DIRECT).
//!
//! [`Prober::run`] keeps exactly `queue_depth` requests of one pattern in flight
//! for a fixed time: at each completion it records the latency (from the push to
//! the reap that saw it) in a histogram and pushes the next request in the same
//! slot, until the deadline. Completions after the deadline are drained, not
//! counted, so the rate is the requests completed in the window divided by the
//! window. With `interval`, it also records the rate of each interval (the
//! timeline that shows a disk throttling).
//!
//! Each slot owns one aligned buffer (written once with pseudo-random bytes so
//! writes are incompressible); while a request is in flight the kernel owns the
//! buffer, so the prober never returns, and is never dropped, with requests in
//! flight: [`Prober::run`] drains before it returns, also on errors, and `Drop`
//! drains whatever is left (or leaks the buffers when it cannot wait).
//!
//! Random offsets are uniform and aligned to the request size in
//! `[0, size_bytes - request_bytes]`; sequential ones advance through the file
//! and wrap, one shared cursor for all slots (as fio does with `iodepth`).
//!
//! Each request is handed to the kernel on its own, as fio does: a push first
//! submits the one before it, and the last of a wake-up's resubmissions goes
//! with the wait for the next completion. Submitting a wake-up's requests
//! together is cheaper in system calls, but on virtio disks requests submitted
//! together complete together, so the rate measured that way would fall below
//! what fio (and the library, submitting eagerly) gets from the same disk.
//!
//! The wait for a completion is timed (50 ms at most, less near the deadline),
//! so a request that hangs keeps neither the step past its deadline nor `tick`
//! (Ctrl-C) from being seen; only the drain that follows waits for it, since
//! its buffer is the kernel's until it completes. Where the backend's timed
//! wait polls instead ([`Backend::timed_wait_is_precise`]: io_uring without
//! `IORING_FEAT_EXT_ARG`, before Linux 5.11), the wait is untimed, as the
//! polling would add to every latency measured.

use hdrhistogram::Histogram;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use tailguard::backend::{self, Backend, BackendChoice, BackendConfig, BackendKind, Op, OpKind};
use tailguard::AlignedBuffer;

/// The slowest request a step's histogram tells apart: ten minutes, in
/// nanoseconds (slower ones count as this).
const LATENCY_NS_MAX: u64 = 600_000_000_000;

/// How often a step calls its `tick`, and the longest it waits for a
/// completion before it looks at the clock again.
const TICK_INTERVAL: Duration = Duration::from_millis(50);

/// Ring entries: the deepest step (256) plus room.
const RING_DEPTH: u32 = 512;

/// What one step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Writes instead of reads.
    pub write: bool,
    /// Sequential offsets instead of random ones.
    pub sequential: bool,
    /// Bytes per request.
    pub request_bytes: u64,
    /// Requests kept in flight.
    pub queue_depth: u32,
}

/// What one step measured.
#[derive(Debug)]
pub struct StepResult {
    /// Requests completed within the window.
    pub completed: u64,
    /// The window, seconds.
    pub elapsed_s: f64,
    /// Latency of the completed requests, nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Requests per second in each interval, when asked for.
    pub timeline_iops: Vec<f64>,
    /// Whether `tick` stopped the step before its deadline.
    pub stopped: bool,
}

impl StepResult {
    /// Requests per second.
    pub fn iops(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.completed as f64 / self.elapsed_s
        } else {
            0.0
        }
    }

    /// A latency percentile in µs.
    pub fn latency_us(&self, percentile: f64) -> f64 {
        self.latency_ns.value_at_quantile(percentile / 100.0) as f64 / 1000.0
    }
}

/// The file under test and the ring driving it.
pub struct Prober {
    backend: Box<dyn Backend>,
    file: File,
    size_bytes: u64,
    alignment_bytes: usize,
    /// Buffers of requests in flight, by slot (the kernel's until reaped).
    slots: Vec<Option<AlignedBuffer>>,
    random_state: u64,
    cursor: u64,
    /// A request is pushed but not yet submitted.
    unsubmitted: bool,
    /// Whether a wait for a completion can be timed without losing
    /// precision ([`Backend::timed_wait_is_precise`]).
    timed_waits: bool,
}

impl Prober {
    /// A prober on `file` (opened with O_DIRECT), using its first `size_bytes`.
    pub fn new(file: File, size_bytes: u64, alignment_bytes: usize) -> io::Result<Self> {
        let backend = backend::open_backend(BackendConfig {
            choice: BackendChoice::Auto,
            ring_depth: RING_DEPTH,
            threads: 16,
            shared_ring: false,
        })?;
        let timed_waits = backend.timed_wait_is_precise();
        let mut prober = Self::with_backend(backend, file, size_bytes, alignment_bytes);
        prober.timed_waits = timed_waits;
        Ok(prober)
    }

    /// A prober on `file` driven by `backend`.
    fn with_backend(
        backend: Box<dyn Backend>,
        file: File,
        size_bytes: u64,
        alignment_bytes: usize,
    ) -> Self {
        Self {
            backend,
            file,
            size_bytes,
            alignment_bytes: alignment_bytes.max(4096),
            slots: Vec::new(),
            random_state: 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id()),
            cursor: 0,
            unsubmitted: false,
            timed_waits: true,
        }
    }

    /// io_uring, or the thread pool where io_uring is refused.
    pub fn backend_kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// Runs `pattern` for `duration`; `tick` is called about every 50 ms, also
    /// while a request hangs, and stops the step early when it returns false.
    pub fn run(
        &mut self,
        pattern: Pattern,
        duration: Duration,
        interval: Option<Duration>,
        tick: &mut dyn FnMut() -> bool,
    ) -> io::Result<StepResult> {
        self.prepare_slots(pattern)?;
        let outcome = self.drive(pattern, duration, interval, tick);
        let drained = self.drain();
        let result = outcome?;
        drained?;
        Ok(result)
    }

    fn prepare_slots(&mut self, pattern: Pattern) -> io::Result<()> {
        if self.backend.in_flight() > 0 {
            return Err(io::Error::other(format!(
                "{} requests are still in flight; their buffers stay until they complete, so a \
                 new step cannot start (drain the prober first)",
                self.backend.in_flight()
            )));
        }
        if pattern.request_bytes > self.size_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the test file holds {} bytes, less than one {}-byte request; give a larger --size",
                    self.size_bytes, pattern.request_bytes
                ),
            ));
        }
        self.slots.clear();
        for _ in 0..pattern.queue_depth {
            let mut buffer =
                AlignedBuffer::new(pattern.request_bytes as usize, self.alignment_bytes).map_err(
                    |error| io::Error::other(format!("cannot allocate an I/O buffer: {error}")),
                )?;
            for chunk in buffer.chunks_mut(8) {
                let bytes = self.next_random().to_le_bytes();
                chunk.copy_from_slice(&bytes[..chunk.len()]);
            }
            self.slots.push(Some(buffer));
        }
        Ok(())
    }

    fn drive(
        &mut self,
        pattern: Pattern,
        duration: Duration,
        interval: Option<Duration>,
        tick: &mut dyn FnMut() -> bool,
    ) -> io::Result<StepResult> {
        // Auto-resizing: the counts grow to the slowest request measured,
        // not to the 10 minutes a histogram sized up front would cover.
        let mut latency_ns = Histogram::<u64>::new(3).expect("3 significant digits are valid");
        let mut submitted_at = vec![Instant::now(); self.slots.len()];
        let start = Instant::now();
        let deadline = start + duration;
        self.fill_slots(pattern, &mut submitted_at)?;
        let mut completed = 0u64;
        let mut timeline = Timeline::new(interval, start);
        let mut last_tick = start;
        let mut results = Vec::new();
        let mut stop = false;
        let mut stopped = false;
        while !stop {
            // A timed wait: a request that hangs must not keep the loop from
            // its deadline or from `tick` (Ctrl-C).
            let until_deadline = deadline.saturating_duration_since(Instant::now());
            self.submit_and_wait(until_deadline.min(TICK_INTERVAL))?;
            results.clear();
            self.backend.reap(&mut results);
            let now = Instant::now();
            if now >= deadline {
                stop = true;
            }
            // Close the intervals that ended before this reap first: after a
            // stall its completions belong to the interval of `now`, not to
            // the one the stall began in.
            timeline.advance(now, deadline);
            for result in &results {
                let slot = result.user_data as usize;
                check_result(result.result, pattern)?;
                if now <= deadline {
                    let nanos = now.duration_since(submitted_at[slot]).as_nanos() as u64;
                    latency_ns.saturating_record(nanos.clamp(1, LATENCY_NS_MAX));
                    completed += 1;
                    timeline.count();
                }
                if !stop {
                    submitted_at[slot] = now;
                    self.push(slot, pattern)?;
                }
            }
            if now.duration_since(last_tick) >= TICK_INTERVAL {
                last_tick = now;
                if !tick() {
                    stop = true;
                    stopped = true;
                }
            }
        }
        let elapsed_s = Instant::now()
            .min(deadline)
            .duration_since(start)
            .as_secs_f64();
        Ok(StepResult {
            completed,
            elapsed_s,
            latency_ns,
            timeline_iops: timeline.iops,
            stopped,
        })
    }

    /// Sends one request from every slot, noting when each was sent.
    fn fill_slots(&mut self, pattern: Pattern, submitted_at: &mut [Instant]) -> io::Result<()> {
        for (slot, submitted) in submitted_at.iter_mut().enumerate() {
            *submitted = Instant::now();
            self.push(slot, pattern)?;
        }
        self.submit()
    }

    /// Submits what is pushed, without waiting.
    fn submit(&mut self) -> io::Result<()> {
        self.unsubmitted = false;
        self.backend.submit(false)
    }

    /// Submits what is pushed and waits for a completion, at most `timeout`
    /// where the wait can be timed precisely (without a timeout elsewhere).
    fn submit_and_wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.unsubmitted = false;
        if self.timed_waits {
            self.backend.submit_wait_timeout(timeout)
        } else {
            self.backend.submit(true)
        }
    }

    /// Hands slot `slot`'s buffer to the kernel for the next request, after
    /// submitting the request pushed before it (see the module docs).
    fn push(&mut self, slot: usize, pattern: Pattern) -> io::Result<()> {
        if self.unsubmitted {
            self.submit()?;
        }
        let offset = self.next_offset(pattern);
        let buffer = self.slots[slot]
            .as_mut()
            .expect("every slot keeps its buffer");
        let op = Op {
            user_data: slot as u64,
            fd: self.file.as_raw_fd(),
            kind: if pattern.write {
                OpKind::Write
            } else {
                OpKind::Read
            },
            buffer: buffer.as_mut_ptr(),
            length: pattern.request_bytes as u32,
            offset,
        };
        // SAFETY: the buffer stays in `self.slots` until the op's completion is
        // reaped (`drain` waits for every op before the slots are cleared or
        // dropped), and nothing reads or writes it meanwhile.
        if let Err(op) = unsafe { self.backend.push(op) } {
            self.submit()?;
            // SAFETY: as above.
            if unsafe { self.backend.push(op) }.is_err() {
                return Err(io::Error::other("the io_uring submission queue stays full"));
            }
        }
        self.unsubmitted = true;
        Ok(())
    }

    fn next_offset(&mut self, pattern: Pattern) -> u64 {
        let request = pattern.request_bytes;
        let positions = (self.size_bytes / request).max(1);
        if pattern.sequential {
            if self.cursor + request > self.size_bytes {
                self.cursor = 0;
            }
            let offset = self.cursor;
            self.cursor += request;
            offset
        } else {
            (self.next_random() % positions) * request
        }
    }

    /// splitmix64: fast, and good enough to spread offsets.
    fn next_random(&mut self) -> u64 {
        self.random_state = self.random_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.random_state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    /// Waits for every request in flight.
    fn drain(&mut self) -> io::Result<()> {
        let mut results = Vec::new();
        while self.backend.in_flight() > 0 {
            self.submit_and_wait(TICK_INTERVAL)?;
            self.backend.reap(&mut results);
        }
        Ok(())
    }
}

/// Completions per interval of a step: one IOPS figure per whole interval
/// that ends by the deadline.
struct Timeline {
    /// The interval; without one, no figures are kept.
    interval: Option<Duration>,
    /// When the open interval began.
    interval_start: Instant,
    /// Completions in the open interval.
    interval_completed: u64,
    /// IOPS of each closed interval, in order.
    iops: Vec<f64>,
}

impl Timeline {
    fn new(interval: Option<Duration>, start: Instant) -> Self {
        Self {
            interval,
            interval_start: start,
            interval_completed: 0,
            iops: Vec::new(),
        }
    }

    /// Counts one completion in the open interval.
    fn count(&mut self) {
        self.interval_completed += 1;
    }

    /// Closes every interval that ended by `now` and by `deadline`: the one
    /// the deadline cuts short is left out, as dividing its completions by a
    /// whole interval would understate its rate.
    fn advance(&mut self, now: Instant, deadline: Instant) {
        let Some(interval) = self.interval else {
            return;
        };
        while now.duration_since(self.interval_start) >= interval
            && self.interval_start + interval <= deadline
        {
            self.iops
                .push(self.interval_completed as f64 / interval.as_secs_f64());
            self.interval_completed = 0;
            self.interval_start += interval;
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        if self.drain().is_err() {
            // Cannot wait for the kernel: leak the buffers rather than free
            // memory it may still write.
            for slot in self.slots.drain(..) {
                std::mem::forget(slot);
            }
        }
    }
}

fn check_result(result: i32, pattern: Pattern) -> io::Result<()> {
    if result < 0 {
        let error = io::Error::from_raw_os_error(-result);
        let what = if pattern.write { "write" } else { "read" };
        return Err(io::Error::new(
            error.kind(),
            format!("a {}-byte {what} failed: {error}", pattern.request_bytes),
        ));
    }
    if result as u64 != pattern.request_bytes {
        return Err(io::Error::other(format!(
            "a {}-byte request transferred {result} bytes; the test file is shorter than \
             expected (was it truncated while tune ran?)",
            pattern.request_bytes
        )));
    }
    Ok(())
}

/// A backend whose requests all hang until a set instant, then complete in
/// full: for the tests of what waits and what stops.
#[cfg(test)]
pub(crate) mod hanging {
    use std::io;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tailguard::backend::{Backend, BackendKind, EngineWaker, Op, OpResult};

    /// See the module docs.
    pub struct HangingBackend {
        /// `(user_data, length)` of each request pushed and not yet reaped.
        pub pending: Vec<(u64, u32)>,
        /// When the requests complete.
        pub release_at: Instant,
        /// Set once they have.
        pub released: Arc<AtomicBool>,
    }

    impl HangingBackend {
        /// Requests hang for `hang`; none hang with a zero `hang`.
        pub fn new(hang: Duration) -> Self {
            Self {
                pending: Vec::new(),
                release_at: Instant::now() + hang,
                released: Arc::new(AtomicBool::new(false)),
            }
        }
    }

    struct NoWaker;

    impl EngineWaker for NoWaker {
        fn wake(&self) {}
    }

    impl Backend for HangingBackend {
        fn kind(&self) -> BackendKind {
            BackendKind::Threads
        }

        unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
            // The buffer is never touched: only the op's identity is kept.
            self.pending.push((op.user_data, op.length));
            Ok(())
        }

        fn submit(&mut self, wait: bool) -> io::Result<()> {
            assert!(
                !wait,
                "an untimed wait: a hung request would block it for good"
            );
            Ok(())
        }

        fn submit_wait_timeout(&mut self, timeout: Duration) -> io::Result<()> {
            let left = self.release_at.saturating_duration_since(Instant::now());
            std::thread::sleep(timeout.min(left));
            Ok(())
        }

        fn reap(&mut self, out: &mut Vec<OpResult>) {
            if Instant::now() < self.release_at {
                return;
            }
            self.released.store(true, Ordering::SeqCst);
            out.extend(self.pending.drain(..).map(|(user_data, length)| OpResult {
                user_data,
                result: length as i32,
            }));
        }

        fn waker(&self) -> Arc<dyn EngineWaker> {
            Arc::new(NoWaker)
        }

        fn in_flight(&self) -> usize {
            self.pending.len()
        }
    }

    /// A prober on `/dev/null` (never read: the backend does no I/O).
    pub fn prober(backend: HangingBackend) -> super::Prober {
        let file = std::fs::File::open("/dev/null").expect("/dev/null opens");
        super::Prober::with_backend(Box::new(backend), file, 64 << 20, 4096)
    }
}

#[cfg(test)]
mod tests {
    use super::hanging::{prober, HangingBackend};
    use super::{Pattern, Timeline};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    const RANDOM_READS: Pattern = Pattern {
        write: false,
        sequential: false,
        request_bytes: 4096,
        queue_depth: 4,
    };

    /// Ctrl-C during a request that hangs: the step sees the stop while the
    /// request still hangs (its wait is timed), then drains it.
    #[test]
    fn a_hung_request_does_not_hide_a_stop() {
        let backend = HangingBackend::new(Duration::from_millis(500));
        let released = backend.released.clone();
        let mut prober = prober(backend);
        let mut ticked_while_hung = false;
        let mut tick = || {
            ticked_while_hung |= !released.load(Ordering::SeqCst);
            false
        };
        let result = prober
            .run(RANDOM_READS, Duration::from_secs(600), None, &mut tick)
            .unwrap();
        assert!(ticked_while_hung, "tick waited for the hung request");
        assert!(result.stopped);
        assert_eq!(result.completed, 0);
    }

    /// The slots hold the buffers of requests in flight: a step does not
    /// replace them before those complete.
    #[test]
    fn a_step_does_not_start_over_requests_in_flight() {
        let mut backend = HangingBackend::new(Duration::from_millis(100));
        backend.pending.push((0, 4096));
        let mut prober = prober(backend);
        let error = prober
            .run(RANDOM_READS, Duration::from_millis(10), None, &mut || true)
            .unwrap_err();
        assert!(error.to_string().contains("in flight"), "{error}");
    }

    /// A reap after a stall of several intervals: the intervals that ended
    /// meanwhile close empty, and its completions count in the interval of
    /// the reap (the measuring loop advances before it counts).
    #[test]
    fn completions_after_a_stall_count_in_the_interval_of_their_reap() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let deadline = start + 10 * second;
        let mut timeline = Timeline::new(Some(second), start);
        for _ in 0..5 {
            timeline.count();
        }
        let reap = start + Duration::from_millis(3_500);
        timeline.advance(reap, deadline);
        for _ in 0..7 {
            timeline.count();
        }
        timeline.advance(start + 4 * second, deadline);
        assert_eq!(timeline.iops, [5.0, 0.0, 0.0, 7.0]);
    }

    /// The interval the deadline falls in is cut short: it is not closed, as
    /// its completions over a whole interval's length would understate it.
    #[test]
    fn an_interval_straddling_the_deadline_is_left_out() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let mut timeline = Timeline::new(Some(second), start);
        timeline.advance(start + 3 * second, start + Duration::from_millis(2_500));
        assert_eq!(timeline.iops.len(), 2, "{:?}", timeline.iops);
    }
}
