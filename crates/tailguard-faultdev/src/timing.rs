//! A simulator device model run in real time.
//!
//! The model (`tailguard_sim::device`, the same code the simulator runs in
//! virtual time) sees the device clock as nanoseconds since the device
//! started. A request thread submits its command at the current time and
//! blocks until the model reports it finished; a clock thread sleeps until the
//! model's next event and advances it then, marking the commands it finished.
//! Commands from many request threads (the FUSE daemon's workers) are queued
//! in the model together, so its queueing, seeks and write cache behave as in
//! the simulator. One mutex holds the model and one condition variable
//! carries every change (few threads, so `notify_all` is cheap).

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tailguard_core::{Direction, Nanos};
use tailguard_sim::device::{DeviceCompletion, DeviceModel, DeviceRequest};

struct ClockState {
    model: Box<dyn DeviceModel>,
    finished: HashSet<u64>,
    next_token: u64,
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
                next_token: 0,
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
        self.clock.changed.notify_all();
        while !state.finished.remove(&token) && !state.stop {
            state = self
                .clock
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

fn run_clock(clock: &Clock) {
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
                let any = !completions.is_empty();
                for completion in completions.drain(..) {
                    state.finished.insert(completion.token);
                }
                state.completions = completions;
                if any {
                    clock.changed.notify_all();
                }
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
        self.clock.lock().stop = true;
        self.clock.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
