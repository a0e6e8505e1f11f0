//! A fault-injecting backend: wraps a real one and makes it misbehave on purpose.
//!
//! Compiled only with the `fault-injection` feature, for tests and demos: a
//! program that never names the feature has none of this code. A
//! [`FaultInjector`] holds a [`FaultPlan`] and is given to the scheduler with
//! `SchedulerBuilder::fault_injection`; the engine's backend (io_uring or
//! threads, chosen as usual) is then wrapped in a [`FaultBackend`], which
//! decides each op's fate as it is pushed:
//!
//! - **errors**: ops overlapping a byte range ([`FaultRule::ErrorRange`]), or
//!   a random fraction of them ([`FaultRule::ErrorRate`]), complete with an
//!   errno and never reach the device;
//! - **short transfers**: a fraction of reads and writes run in full but
//!   report half their bytes, rounded down to a multiple of 512 and at least
//!   512 ([`FaultRule::ShortRate`]), as a kernel may; one that moved 512 bytes
//!   or fewer is reported whole, since no shorter nonzero multiple of 512
//!   exists and a 0 would read as end of file;
//! - **stalls**: from the op numbered `at_op` (or from
//!   [`FaultInjector::stall_for`]), every op pushed is held, unsubmitted, until
//!   the stall ends; a timer thread wakes the engine then, so a stalled engine
//!   sleeps instead of spinning;
//! - **disappearance**: from the op numbered `at_op` (or from
//!   [`FaultInjector::disappear`]), every op fails with the rule's errno
//!   (ENODEV or EIO), held ones included, and so does every op still at the
//!   device when it completes;
//! - **refused submits**: from [`FaultInjector::refuse_submits`] until
//!   [`FaultInjector::heal`], every submit call fails with an errno, as a
//!   broken ring's `io_uring_enter` would, and hands nothing on: the ops
//!   pushed wait for the next submit that is let through.
//!
//! Ops are numbered from 1 in push order; nops are never faulted (they measure
//! the engine, not a device). Random choices come from a generator seeded by
//! [`FaultPlan::seed`], so one plan on one op sequence always injects the same
//! faults. Whatever their fate, every op pushed completes exactly once through
//! [`Backend::reap`]: [`FaultCounts`] counts ops pushed and completed so that
//! tests can check it.

use super::{Backend, BackendKind, EngineWaker, Op, OpKind, OpResult};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which ops a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpFilter {
    /// Reads, writes and syncs.
    Any,
    /// Reads only.
    Reads,
    /// Writes only.
    Writes,
    /// `fsync` and `fdatasync` only.
    Syncs,
}

impl OpFilter {
    fn matches(self, kind: OpKind) -> bool {
        match self {
            Self::Any => kind != OpKind::Nop,
            Self::Reads => kind == OpKind::Read,
            Self::Writes => kind == OpKind::Write,
            Self::Syncs => matches!(kind, OpKind::Fsync | OpKind::Fdatasync),
        }
    }
}

/// One kind of misbehaviour; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultRule {
    /// Reads and writes of `ops` overlapping `offsets` (bytes) fail with
    /// `errno` (syncs, which have no range, match when `offsets` holds 0).
    ErrorRange {
        /// The failing byte range.
        offsets: Range<u64>,
        /// Which ops fail.
        ops: OpFilter,
        /// The error, as a positive errno (`libc::EIO`).
        errno: i32,
    },
    /// Each op of `ops` fails with `errno` with probability
    /// `per_million / 1_000_000`.
    ErrorRate {
        /// Failures per million ops.
        per_million: u32,
        /// Which ops may fail.
        ops: OpFilter,
        /// The error, as a positive errno.
        errno: i32,
    },
    /// Each read or write longer than 512 bytes reports a short transfer with
    /// probability `per_million / 1_000_000` (of half its bytes, at least 512;
    /// see the module docs).
    ShortRate {
        /// Short transfers per million ops.
        per_million: u32,
    },
    /// Ops from number `at_op` on are held for `duration` from that op's push.
    Stall {
        /// The op that starts the stall (from 1).
        at_op: u64,
        /// How long the device stops answering.
        duration: Duration,
    },
    /// From op number `at_op` on, every op fails with `errno`.
    Disappear {
        /// The first op that finds the device gone (from 1).
        at_op: u64,
        /// `libc::ENODEV` or `libc::EIO`.
        errno: i32,
    },
}

/// What to inject; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Seeds the random choices of the rate rules.
    pub seed: u64,
    /// The rules, all applied to every op.
    pub rules: Vec<FaultRule>,
}

/// What the injector did, for tests to check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Ops pushed (nops included).
    pub ops_pushed: u64,
    /// Completions handed to the engine.
    pub ops_completed: u64,
    /// Ops failed by an error rule.
    pub errors_injected: u64,
    /// Ops failed because the device was gone.
    pub ops_failed_gone: u64,
    /// Reads and writes reported short.
    pub short_transfers: u64,
    /// Ops held by a stall (counted when held).
    pub ops_stalled: u64,
    /// Stalls started.
    pub stalls: u64,
    /// Ops held right now.
    pub ops_held_now: u64,
    /// Submit calls refused.
    pub submits_refused: u64,
}

/// The fate of one op, decided at push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Fails with this errno without reaching the device.
    Fail(i32),
    /// Goes to the device; `short` reports a short transfer.
    Pass { short: bool },
}

struct InjectorState {
    plan: FaultPlan,
    random: u64,
    ops_seen: u64,
    stall_until: Option<Instant>,
    gone: Option<i32>,
    /// The errno every submit call fails with, while set.
    refuse_submits: Option<i32>,
    counts: FaultCounts,
    /// The wrapped backend's waker, once a backend exists: wakes the engine
    /// when the injector changes the device's state.
    waker: Option<Arc<dyn EngineWaker>>,
}

/// A fault plan and its state, shared by the backend and the test that
/// steers it (`Clone`: every clone is the same injector).
#[derive(Clone)]
pub struct FaultInjector {
    state: Arc<Mutex<InjectorState>>,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("FaultInjector")
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl FaultInjector {
    /// An injector following `plan`.
    pub fn new(plan: FaultPlan) -> Self {
        let random = plan.seed ^ 0x9e37_79b9_7f4a_7c15;
        Self {
            state: Arc::new(Mutex::new(InjectorState {
                plan,
                random,
                ops_seen: 0,
                stall_until: None,
                gone: None,
                refuse_submits: None,
                counts: FaultCounts::default(),
                waker: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, InjectorState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What has been injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.lock().counts
    }

    /// Holds every op pushed from now until `duration` has passed.
    pub fn stall_for(&self, duration: Duration) {
        let mut state = self.lock();
        start_stall(&mut state, Instant::now() + duration);
    }

    /// Makes the device vanish: every op from now on, and every op held or
    /// still at the device, fails with `errno` (nops excepted: they are
    /// never faulted).
    pub fn disappear(&self, errno: i32) {
        let mut state = self.lock();
        state.gone = Some(errno);
        if let Some(waker) = &state.waker {
            waker.wake();
        }
    }

    /// Fails every submit call from now on with `errno` (ops pushed stay
    /// pushed, unsubmitted) until [`FaultInjector::heal`].
    pub fn refuse_submits(&self, errno: i32) {
        self.lock().refuse_submits = Some(errno);
    }

    /// Ends every fault: no stall, the device back, no rule left, submits
    /// let through. Ops held go to the device at the engine's next turn.
    pub fn heal(&self) {
        let mut state = self.lock();
        state.plan.rules.clear();
        state.gone = None;
        state.refuse_submits = None;
        state.stall_until = None;
        if let Some(waker) = &state.waker {
            waker.wake();
        }
    }

    /// Wraps `inner` in a backend that follows this injector.
    pub fn wrap(&self, inner: Box<dyn Backend>) -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(FaultBackend::new(inner, self.clone())?))
    }
}

fn start_stall(state: &mut InjectorState, until: Instant) {
    if state.stall_until.is_none_or(|current| current < until) {
        state.stall_until = Some(until);
        state.counts.stalls += 1;
    }
}

impl InjectorState {
    /// A uniform draw in 0..1_000_000 (splitmix64).
    fn draw_per_million(&mut self) -> u32 {
        self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.random;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^= mixed >> 31;
        (mixed % 1_000_000) as u32
    }

    /// Numbers `op` and decides its fate; starts stalls and disappearances
    /// whose op it is.
    fn decide(&mut self, op: &Op, now: Instant) -> Fate {
        self.ops_seen += 1;
        let number = self.ops_seen;
        let mut fate = Fate::Pass { short: false };
        let rules = std::mem::take(&mut self.plan.rules);
        for rule in &rules {
            self.apply(rule, op, number, now, &mut fate);
        }
        self.plan.rules = rules;
        if op.kind == OpKind::Nop {
            return Fate::Pass { short: false };
        }
        match self.gone {
            Some(errno) => Fate::Fail(errno),
            None => fate,
        }
    }
}

impl InjectorState {
    /// Applies one rule to op number `number`: an error rule may set `fate`
    /// to a failure (the first failure decided stands), the short rule may
    /// mark it short, the stall and disappearance rules change the device.
    fn apply(&mut self, rule: &FaultRule, op: &Op, number: u64, now: Instant, fate: &mut Fate) {
        let failed = matches!(fate, Fate::Fail(_));
        match *rule {
            FaultRule::Disappear { at_op, errno } => {
                if number >= at_op {
                    self.gone.get_or_insert(errno);
                }
            }
            FaultRule::Stall { at_op, duration } => {
                if number == at_op {
                    start_stall(self, now + duration);
                }
            }
            FaultRule::ErrorRange {
                ref offsets,
                ops,
                errno,
            } => {
                if !failed && ops.matches(op.kind) && overlaps(op, offsets) {
                    *fate = Fate::Fail(errno);
                }
            }
            FaultRule::ErrorRate {
                per_million,
                ops,
                errno,
            } => {
                if ops.matches(op.kind) && self.draw_per_million() < per_million && !failed {
                    *fate = Fate::Fail(errno);
                }
            }
            FaultRule::ShortRate { per_million } => {
                let data = matches!(op.kind, OpKind::Read | OpKind::Write) && op.length > 512;
                if data && self.draw_per_million() < per_million && !failed {
                    *fate = Fate::Pass { short: true };
                }
            }
        }
    }
}

/// The result a short transfer reports for an op of `length` bytes whose
/// result was `result`: half the bytes it moved, rounded down to a multiple
/// of 512 and at least 512. `None` when it failed or moved 512 bytes or
/// fewer: no shorter nonzero multiple of 512 exists, and reporting 0 would
/// turn the short transfer into end of file.
fn shortened(result: i32, length: u32) -> Option<i32> {
    let moved = u32::try_from(result).ok()?.min(length);
    let reported = (moved > 512).then(|| (moved / 2 / 512 * 512).max(512))?;
    // At most `result`, so it fits.
    i32::try_from(reported).ok()
}

/// Whether `op` touches `offsets`; a sync (no range) when `offsets` holds 0.
fn overlaps(op: &Op, offsets: &Range<u64>) -> bool {
    if op.length == 0 {
        return offsets.contains(&0);
    }
    op.offset < offsets.end && offsets.start < op.offset + u64::from(op.length)
}

/// Wakes the engine when a stall ends; see the module docs.
struct StallTimer {
    state: Arc<(Mutex<TimerState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

struct TimerState {
    deadline: Option<Instant>,
    stop: bool,
}

impl StallTimer {
    fn new(waker: Arc<dyn EngineWaker>) -> io::Result<Self> {
        let state = Arc::new((
            Mutex::new(TimerState {
                deadline: None,
                stop: false,
            }),
            Condvar::new(),
        ));
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("tailguard-fault-timer".into())
            .spawn(move || run_timer(&shared, waker.as_ref()))?;
        Ok(Self {
            state,
            thread: Some(thread),
        })
    }

    /// Wakes the engine at `deadline` (or earlier, if already asked to).
    fn arm(&self, deadline: Instant) {
        let (lock, condvar) = &*self.state;
        let mut timer = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if timer.deadline.is_none_or(|current| deadline < current) {
            timer.deadline = Some(deadline);
            condvar.notify_one();
        }
    }
}

fn run_timer(state: &(Mutex<TimerState>, Condvar), waker: &dyn EngineWaker) {
    let (lock, condvar) = state;
    let mut timer = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        if timer.stop {
            return;
        }
        timer = match timer.deadline {
            None => condvar
                .wait(timer)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    timer.deadline = None;
                    waker.wake();
                    continue;
                }
                condvar
                    .wait_timeout(timer, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            }
        };
    }
}

impl Drop for StallTimer {
    fn drop(&mut self) {
        let (lock, condvar) = &*self.state;
        lock.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stop = true;
        condvar.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What [`FaultBackend`] remembers of an op at the wrapped backend.
#[derive(Clone, Copy)]
struct AtDevice {
    /// Bytes asked for.
    length: u32,
    /// Whether to report the transfer short.
    short: bool,
    /// A nop, never faulted: it completes as the wrapped backend says even
    /// once the device is gone.
    nop: bool,
}

/// A backend that wraps another and injects faults; see the module docs.
pub struct FaultBackend {
    inner: Box<dyn Backend>,
    injector: FaultInjector,
    /// Ops held by a stall, with their fate, in push order.
    held: VecDeque<(Op, Fate)>,
    /// Completions made up here (injected errors), not yet reaped.
    injected: Vec<OpResult>,
    /// Ops at the wrapped backend, by `user_data`.
    at_device: HashMap<u64, AtDevice>,
    /// The fate of an op the wrapped backend handed back as full, decided
    /// already: the engine pushes it again.
    retry: Option<(u64, Fate)>,
    timer: StallTimer,
    scratch: Vec<OpResult>,
}

impl FaultBackend {
    /// Wraps `inner`; `injector` decides what goes wrong.
    pub fn new(inner: Box<dyn Backend>, injector: FaultInjector) -> io::Result<Self> {
        let waker = inner.waker();
        injector.lock().waker = Some(waker.clone());
        Ok(Self {
            timer: StallTimer::new(waker)?,
            inner,
            injector,
            held: VecDeque::new(),
            injected: Vec::new(),
            at_device: HashMap::new(),
            retry: None,
            scratch: Vec::new(),
        })
    }

    fn fail(&mut self, op: &Op, errno: i32) {
        self.injected.push(OpResult {
            user_data: op.user_data,
            result: -errno,
        });
    }

    /// Hands `op` to the wrapped backend, or back when it is full.
    ///
    /// # Safety
    ///
    /// As [`Backend::push`].
    unsafe fn forward(&mut self, op: Op, short: bool) -> Result<(), Op> {
        // SAFETY: the caller's guarantee for `op` is passed on unchanged.
        unsafe { self.inner.push(op) }?;
        let at_device = AtDevice {
            length: op.length,
            short,
            nop: op.kind == OpKind::Nop,
        };
        self.at_device.insert(op.user_data, at_device);
        Ok(())
    }

    /// The error of a submit call while submits are refused (counted).
    fn refusal(&self) -> io::Result<()> {
        let mut state = self.injector.lock();
        let Some(errno) = state.refuse_submits else {
            return Ok(());
        };
        state.counts.submits_refused += 1;
        Err(io::Error::from_raw_os_error(errno))
    }

    /// Moves held ops on once their stall is over (or fails them if the
    /// device is gone); returns the deadline of a stall still running.
    fn release_held(&mut self) -> Option<Instant> {
        let (stall_until, gone) = {
            let state = self.injector.lock();
            (state.stall_until, state.gone)
        };
        let now = Instant::now();
        let stalled = stall_until.filter(|until| now < *until);
        while let Some(&(op, fate)) = self.held.front() {
            if let Some(errno) = gone {
                self.held.pop_front();
                self.injector.lock().counts.ops_failed_gone += 1;
                self.fail(&op, errno);
                continue;
            }
            if stalled.is_some() {
                break;
            }
            match fate {
                Fate::Fail(errno) => {
                    self.injector.lock().counts.errors_injected += 1;
                    self.fail(&op, errno);
                }
                Fate::Pass { short } => {
                    // SAFETY: the engine's guarantee for this op, given when it
                    // was pushed here, holds until its completion is reaped.
                    if unsafe { self.forward(op, short) }.is_err() {
                        break;
                    }
                }
            }
            self.held.pop_front();
        }
        self.injector.lock().counts.ops_held_now = self.held.len() as u64;
        stalled
    }
}

impl Backend for FaultBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
        let now = Instant::now();
        let (fate, stalled, gone) = {
            let mut state = self.injector.lock();
            let fate = match self.retry.take() {
                Some((user_data, fate)) if user_data == op.user_data => fate,
                _ => {
                    state.counts.ops_pushed += 1;
                    state.decide(&op, now)
                }
            };
            let stalled = op.kind != OpKind::Nop
                && (state.stall_until.is_some_and(|until| now < until) || !self.held.is_empty());
            (fate, stalled, state.gone)
        };
        if stalled && gone.is_none() {
            let mut state = self.injector.lock();
            state.counts.ops_stalled += 1;
            state.counts.ops_held_now = self.held.len() as u64 + 1;
            drop(state);
            self.held.push_back((op, fate));
            return Ok(());
        }
        match fate {
            Fate::Fail(errno) => {
                let mut state = self.injector.lock();
                if gone == Some(errno) {
                    state.counts.ops_failed_gone += 1;
                } else {
                    state.counts.errors_injected += 1;
                }
                drop(state);
                self.fail(&op, errno);
                Ok(())
            }
            Fate::Pass { short } => {
                // SAFETY: the caller's guarantee for `op` is passed on.
                unsafe { self.forward(op, short) }.inspect_err(|op| {
                    self.retry = Some((op.user_data, fate));
                })
            }
        }
    }

    fn submit(&mut self, wait: bool) -> io::Result<()> {
        self.refusal()?;
        let stalled = self.release_held();
        if let Some(until) = stalled {
            self.timer.arm(until);
        }
        let wait = wait && self.injected.is_empty();
        self.inner.submit(wait)
    }

    fn timed_wait_is_precise(&self) -> bool {
        self.inner.timed_wait_is_precise()
    }

    fn submit_wait_timeout(&mut self, timeout: std::time::Duration) -> io::Result<()> {
        self.refusal()?;
        let stalled = self.release_held();
        if let Some(until) = stalled {
            self.timer.arm(until);
        }
        if self.injected.is_empty() {
            self.inner.submit_wait_timeout(timeout)
        } else {
            self.inner.submit(false)
        }
    }

    fn reap(&mut self, out: &mut Vec<OpResult>) {
        let before = out.len();
        let mut completions = std::mem::take(&mut self.scratch);
        self.inner.reap(&mut completions);
        let mut state = self.injector.lock();
        for mut completion in completions.drain(..) {
            let op = self
                .at_device
                .remove(&completion.user_data)
                .expect("the wrapped backend completes only ops pushed to it, once each");
            if op.nop {
                // Nops measure the engine, not the device: never faulted.
            } else if let Some(errno) = state.gone {
                completion.result = -errno;
                state.counts.ops_failed_gone += 1;
            } else if let Some(reported) =
                shortened(completion.result, op.length).filter(|_| op.short)
            {
                completion.result = reported;
                state.counts.short_transfers += 1;
            }
            out.push(completion);
        }
        state.counts.ops_completed += (out.len() - before + self.injected.len()) as u64;
        out.append(&mut self.injected);
        drop(state);
        self.scratch = completions;
    }

    fn waker(&self) -> Arc<dyn EngineWaker> {
        self.inner.waker()
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.held.len() + self.injected.len()
    }

    fn registers_files(&self) -> bool {
        self.inner.registers_files()
    }

    fn register_file(&mut self, fd: std::os::fd::RawFd) -> bool {
        self.inner.register_file(fd)
    }

    fn unregister_file(&mut self, fd: std::os::fd::RawFd) {
        self.inner.unregister_file(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped backend that touches no file and no buffer: every op pushed
    /// completes at the next submit, with the result `result_of` gives it.
    struct Scripted {
        pushed: Vec<Op>,
        done: Vec<OpResult>,
        result_of: fn(&Op) -> i32,
    }

    struct NoWaker;

    impl EngineWaker for NoWaker {
        fn wake(&self) {}
    }

    impl Backend for Scripted {
        fn kind(&self) -> BackendKind {
            BackendKind::Threads
        }

        unsafe fn push(&mut self, op: Op) -> Result<(), Op> {
            self.pushed.push(op);
            Ok(())
        }

        fn submit(&mut self, _wait: bool) -> io::Result<()> {
            let result_of = self.result_of;
            self.done.extend(self.pushed.drain(..).map(|op| OpResult {
                user_data: op.user_data,
                result: result_of(&op),
            }));
            Ok(())
        }

        fn submit_wait_timeout(&mut self, _timeout: Duration) -> io::Result<()> {
            self.submit(false)
        }

        fn reap(&mut self, out: &mut Vec<OpResult>) {
            out.append(&mut self.done);
        }

        fn waker(&self) -> Arc<dyn EngineWaker> {
            Arc::new(NoWaker)
        }

        fn in_flight(&self) -> usize {
            self.pushed.len() + self.done.len()
        }
    }

    fn backend(plan: FaultPlan, result_of: fn(&Op) -> i32) -> (FaultBackend, FaultInjector) {
        let injector = FaultInjector::new(plan);
        let inner = Scripted {
            pushed: Vec::new(),
            done: Vec::new(),
            result_of,
        };
        let backend = FaultBackend::new(Box::new(inner), injector.clone()).unwrap();
        (backend, injector)
    }

    fn op(user_data: u64, kind: OpKind, length: u32) -> Op {
        Op {
            user_data,
            fd: -1,
            kind,
            buffer: std::ptr::null_mut(),
            length,
            offset: 0,
        }
    }

    /// Pushes `ops`, submits them and returns their completions by `user_data`.
    fn run(backend: &mut FaultBackend, ops: &[Op]) -> HashMap<u64, i32> {
        for &op in ops {
            // SAFETY: the scripted backend never dereferences `op.buffer`.
            unsafe { backend.push(op) }.unwrap();
        }
        backend.submit(false).unwrap();
        let mut out = Vec::new();
        backend.reap(&mut out);
        assert_eq!(out.len(), ops.len(), "every op completes once: {out:?}");
        out.into_iter()
            .map(|result| (result.user_data, result.result))
            .collect()
    }

    #[test]
    fn a_short_transfer_reports_at_least_512_bytes_and_never_end_of_file() {
        let plan = FaultPlan {
            seed: 1,
            rules: vec![FaultRule::ShortRate {
                per_million: 1_000_000,
            }],
        };
        // Each read of 4096 bytes moves as many bytes as its `user_data` says.
        let (mut backend, injector) = backend(plan, |op| op.user_data as i32);
        let moved = [4096, 2048, 1536, 1024, 1000, 700, 513, 512, 300];
        let ops: Vec<_> = moved
            .iter()
            .map(|&moved| op(moved, OpKind::Read, 4096))
            .collect();
        let results = run(&mut backend, &ops);
        let expected = [
            (4096, 2048),
            (2048, 1024),
            (1536, 512),
            (1024, 512),
            (1000, 512),
            (700, 512),
            (513, 512),
            (512, 512),
            (300, 300),
        ];
        for (moved, reported) in expected {
            assert_eq!(results[&moved], reported, "an op that moved {moved} bytes");
        }
        assert_eq!(
            injector.counts().short_transfers,
            7,
            "only the ops reported shorter than they moved count"
        );
    }

    #[test]
    fn nops_at_the_device_complete_unfaulted_when_it_disappears() {
        let (mut backend, injector) = backend(FaultPlan::default(), |op| match op.kind {
            OpKind::Nop => 0,
            _ => op.length as i32,
        });
        let ops = [
            op(1, OpKind::Nop, 0),
            op(2, OpKind::Read, 4096),
            op(3, OpKind::Nop, 0),
        ];
        for op in ops {
            // SAFETY: the scripted backend never dereferences `op.buffer`.
            unsafe { backend.push(op) }.unwrap();
        }
        backend.submit(false).unwrap();
        // The device vanishes while the ops are at it.
        injector.disappear(libc::ENODEV);
        let mut out = Vec::new();
        backend.reap(&mut out);
        let results: HashMap<_, _> = out.iter().map(|r| (r.user_data, r.result)).collect();
        assert_eq!(results.len(), 3, "{out:?}");
        assert_eq!(results[&1], 0, "a nop completes as the device said");
        assert_eq!(results[&3], 0, "a nop completes as the device said");
        assert_eq!(results[&2], -libc::ENODEV, "a read fails with the device");
        assert_eq!(injector.counts().ops_failed_gone, 1);

        // Nops pushed after the disappearance are not faulted either.
        let results = run(
            &mut backend,
            &[op(4, OpKind::Nop, 0), op(5, OpKind::Read, 512)],
        );
        assert_eq!(results[&4], 0);
        assert_eq!(results[&5], -libc::ENODEV);
        assert_eq!(injector.counts().ops_failed_gone, 2);
    }
}
