//! A simulator device model run in real time.
//!
//! The model (`tailguard_sim::device`, the same code the simulator runs in
//! virtual time) sees the device clock as nanoseconds since the device
//! started. A request thread submits its command at the current time and
//! blocks until the model reports it finished; a clock thread sleeps until the
//! model's next event and advances it then, marking the commands it finished.
//! Commands from many request threads (the FUSE daemon's workers) are queued
//! in the model together, so its queueing, seeks and write cache behave as in
//! the simulator. One mutex holds the model; the clock thread sleeps on a
//! condition variable (with a 1 ns timer slack, so it wakes on time at
//! media-rate intervals of tens of microseconds), and each request thread
//! parks until the clock thread unparks it alone, so that a completion
//! wakes one thread, not every worker.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};
use tailguard_core::{Direction, Nanos};
use tailguard_sim::device::{DeviceCompletion, DeviceModel, DeviceRequest};

struct ClockState {
    model: Box<dyn DeviceModel>,
    finished: HashSet<u64>,
    waiters: HashMap<u64, Thread>,
    next_token: u64,
    /// The most commands the model held at once.
    depth_max: usize,
    stop: bool,
    completions: Vec<DeviceCompletion>,
}

struct Clock {
    state: Mutex<ClockState>,
    changed: Condvar,
    epoch: Instant,
}

impl Clock {
    fn lock(&self) -> MutexGuard<'_, ClockState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ns(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }
}

/// A device model served in real time; see the module docs.
pub(crate) struct RealTimeModel {
    clock: Arc<Clock>,
    thread: Option<JoinHandle<()>>,
}

impl RealTimeModel {
    pub(crate) fn start(model: Box<dyn DeviceModel>) -> std::io::Result<Self> {
        let clock = Arc::new(Clock {
            state: Mutex::new(ClockState {
                model,
                finished: HashSet::new(),
                waiters: HashMap::new(),
                next_token: 0,
                depth_max: 0,
                stop: false,
                completions: Vec::new(),
            }),
            changed: Condvar::new(),
            epoch: Instant::now(),
        });
        let running = clock.clone();
        let thread = std::thread::Builder::new()
            .name("faultdev-clock".into())
            .spawn(move || run_clock(&running))?;
        Ok(Self {
            clock,
            thread: Some(thread),
        })
    }

    /// Runs one command through the model: returns when the model says it
    /// finished. A write of zero bytes is a cache flush.
    pub(crate) fn serve(&self, direction: Direction, offset_bytes: u64, length_bytes: u64) {
        let mut state = self.clock.lock();
        let token = state.next_token;
        state.next_token += 1;
        let now = self.clock.now_ns();
        state.model.submit(
            now,
            DeviceRequest {
                token,
                direction,
                offset_bytes,
                length_bytes,
            },
        );
        state.depth_max = state.depth_max.max(state.model.outstanding());
        state.waiters.insert(token, std::thread::current());
        self.clock.changed.notify_all();
        while !state.finished.remove(&token) && !state.stop {
            drop(state);
            std::thread::park();
            state = self.clock.lock();
        }
        state.waiters.remove(&token);
    }

    /// The most commands the model held at once so far.
    pub(crate) fn depth_max(&self) -> usize {
        self.clock.lock().depth_max
    }
}

fn run_clock(clock: &Clock) {
    // A timer slack of 1 ns makes this thread's sleeps end on time; a failure
    // leaves the default slack (late wake-ups, no harm).
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let mut state = clock.lock();
    loop {
        if state.stop {
            return;
        }
        let now = clock.now_ns();
        let next = state.model.next_event_at();
        match next {
            Some(at) if at <= now => {
                let mut completions = std::mem::take(&mut state.completions);
                state.model.advance(now, &mut completions);
                for completion in completions.drain(..) {
                    state.finished.insert(completion.token);
                    if let Some(waiter) = state.waiters.get(&completion.token) {
                        waiter.unpark();
                    }
                }
                state.completions = completions;
            }
            Some(at) => {
                let wait = Duration::from_nanos(at - now);
                state = clock
                    .changed
                    .wait_timeout(state, wait)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            None => {
                state = clock
                    .changed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
    }
}

impl Drop for RealTimeModel {
    fn drop(&mut self) {
        let mut state = self.clock.lock();
        state.stop = true;
        for waiter in state.waiters.values() {
            waiter.unpark();
        }
        drop(state);
        self.clock.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
