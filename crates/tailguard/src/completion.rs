//! One-shot completion slots: the engine fills them, a future or a thread waits.
//!
//! Every request carries an `Arc<Slot<T>>`. The engine calls [`Slot::complete`]
//! exactly once; the submitter either polls an [`IoFuture`] from any async runtime
//! (the slot keeps the last `Waker`) or blocks in [`IoFuture::wait`] on a condition
//! variable, so the same request works from tokio, from another executor, or from
//! a plain thread.
//!
//! Dropping an `IoFuture` before completion *abandons* the slot: the engine still
//! finishes the I/O (the kernel may be writing into the request's buffer, which the
//! engine owns until then) and drops the result instead of delivering it. Nothing
//! is freed while the kernel can still touch it.
//!
//! The engine side holds a [`Responder`]. Answering consumes it; dropping it
//! unanswered, on whatever path (a request refused at shutdown, messages dropped
//! while a panicking engine unwinds), answers with its fallback error instead, so
//! no waiter can block forever.
//!
//! # Waiters that run the engine
//!
//! A future made by a [`crate::Scheduler`] carries the engine's [`Driver`].
//! [`IoFuture::wait`] (and `Scheduler::block_on`, its general form) does not
//! just sleep: while the result is pending and nobody else runs the engine, the
//! waiting thread runs the engine's loop itself (submit, sleep in the backend,
//! reap) until its [`Parker`] is notified. A request waited on this way costs no
//! thread hop at all: at queue depth 1 one `io_uring_enter` submits it and
//! sleeps until it completes, as a program driving its own ring does. Where the
//! engine is busy (run by the engine thread or another waiter), the waiter
//! blocks on its parker as before.
//!
//! A request pushed while the engine thread is parked owes a *kick* (see
//! [`crate::handoff`]): the future pays it when it is polled by some other
//! executor and is pending, or dropped; a `block_on` of the same engine takes
//! the debt over and settles it on exit. So a thread that submits and then waits
//! never wakes the engine thread only to do the work itself.
//!
//! Completing is cheap: the condition variable is signalled only when a thread is
//! actually blocked in [`IoFuture::wait`] (a flag under the slot's mutex), so an
//! `.await`ing caller costs the engine no system call. Signalling unconditionally
//! cost a `futex` call per request, half the engine's time in the NOP benchmark.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};

// The parker takes its primitives from here (`sync::Mutex`, ...): loom's under
// `cfg(tailguard_loom)`, so its protocol can be model-checked, `std`'s
// otherwise. The slots stay on `std`'s.
use crate::sync;

/// Runs the engine on behalf of a thread that would otherwise block.
pub(crate) trait Driver: Send + Sync {
    /// Returns once `parker` is notified (or spuriously: callers re-check): runs
    /// the engine on this thread meanwhile if nobody else does, else pays any
    /// deferred kick and blocks on the parker. `session` (false at first) says
    /// whether this `block_on` holds a helping session (see
    /// [`crate::handoff`]); it is kept across calls while the thread only
    /// leaves the engine to poll its future.
    fn drive_until_notified(&self, parker: &Parker, session: &mut bool);

    /// Ends a helping session that `drive_until_notified` left open.
    fn end_session(&self);

    /// Pays deferred pushes: makes sure the engine thread looks at the queue.
    fn kick(&self);

    /// Wakes whoever runs the engine if it sleeps in the backend.
    fn interrupt(&self);
}

thread_local! {
    /// The driver whose `block_on` runs on this thread (0: none).
    static DRIVING: Cell<usize> = const { Cell::new(0) };
    /// Its address identifies the thread.
    #[cfg(not(tailguard_loom))]
    static THREAD_TOKEN: u8 = const { 0 };
}

fn driver_id(driver: &Arc<dyn Driver>) -> usize {
    Arc::as_ptr(driver).cast::<()>() as usize
}

/// Identifies the current thread (a parker's owner).
#[cfg(not(tailguard_loom))]
type ThreadToken = usize;

#[cfg(not(tailguard_loom))]
fn thread_token() -> ThreadToken {
    THREAD_TOKEN.with(|token| std::ptr::from_ref(token) as usize)
}

/// Loom runs every model thread on one OS thread, so a thread-local's address
/// would name them all alike: loom's thread id tells them apart.
#[cfg(tailguard_loom)]
type ThreadToken = loom::thread::ThreadId;

#[cfg(tailguard_loom)]
fn thread_token() -> ThreadToken {
    loom::thread::current().id()
}

/// Polls `future` to completion on this thread, running the engine of `driver`
/// while it is pending (see the module docs).
pub(crate) fn block_on<F: Future>(driver: &Arc<dyn Driver>, future: F) -> F::Output {
    struct Restore {
        previous: usize,
        driver: Arc<dyn Driver>,
        session: bool,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            DRIVING.set(self.previous);
            if self.session {
                self.driver.end_session();
            }
            // Pushes deferred in here and not taken by this thread.
            self.driver.kick();
        }
    }
    let parker = Arc::new(Parker::new(driver.clone()));
    let waker = Waker::from(parker.clone());
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let mut restore = Restore {
        previous: DRIVING.replace(driver_id(driver)),
        driver: driver.clone(),
        session: false,
    };
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        driver.drive_until_notified(&parker, &mut restore.session);
    }
}

/// A thread's wake-up flag for [`block_on`]: the waker of the future it polls.
pub(crate) struct Parker {
    /// Whether a wake-up came. Set only under `state`'s lock (so `park` cannot
    /// miss it), cleared only by the owner; read without the lock, since the
    /// engine loop asks once or twice a turn (see `is_notified`).
    notified: sync::AtomicBool,
    /// The owner runs the engine (and may sleep in the backend): a wake from
    /// another thread must interrupt that sleep. Written by the owner alone.
    running_engine: sync::AtomicBool,
    /// `blocked` alone, the owner's sleep on `ready`.
    state: sync::Mutex<ParkerState>,
    ready: sync::Condvar,
    /// The thread that waits ([`thread_token`]).
    owner: ThreadToken,
    driver: Arc<dyn Driver>,
}

#[derive(Default)]
struct ParkerState {
    /// The owner sleeps on `ready`.
    blocked: bool,
}

impl Parker {
    /// A parker owned by the calling thread, whose wakes interrupt `driver`'s
    /// engine while the owner runs it.
    fn new(driver: Arc<dyn Driver>) -> Self {
        Self {
            notified: sync::AtomicBool::new(false),
            running_engine: sync::AtomicBool::new(false),
            state: sync::Mutex::new(ParkerState::default()),
            ready: sync::Condvar::new(),
            owner: thread_token(),
            driver,
        }
    }

    /// Whether a wake-up came; consumes it.
    pub(crate) fn take_notified(&self) -> bool {
        // Only the owner clears the flag and only wakers set it: a swap that
        // races a wake either takes it or leaves it for the next look, as the
        // lock did.
        self.notified.load(Ordering::SeqCst) && self.notified.swap(false, Ordering::SeqCst)
    }

    /// Whether a wake-up came, without consuming it.
    ///
    /// No lock, yet no wake is missed by a runner about to sleep in the
    /// backend. The two flags form Dekker's pattern, every access `SeqCst`:
    /// the owner stores `running_engine` and later loads `notified` (here);
    /// a waker stores `notified` and then loads `running_engine`. In the
    /// single total order of `SeqCst` operations one of the two stores comes
    /// first, so either this load sees the wake, or the waker sees the owner
    /// running the engine and interrupts its sleep (and `crate::handoff`'s
    /// `sleeping` flag, set before this look, makes that interrupt land).
    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Ordering::SeqCst)
    }

    /// The owner starts or stops running the engine: a wake from another thread
    /// meanwhile must interrupt its sleep in the backend.
    pub(crate) fn set_running_engine(&self, running: bool) {
        self.running_engine.store(running, Ordering::SeqCst);
    }

    /// Blocks until notified; consumes the wake-up.
    pub(crate) fn park(&self) {
        let mut state = self.state.lock().expect("parker lock poisoned");
        while !self.notified.load(Ordering::SeqCst) {
            state.blocked = true;
            state = self.ready.wait(state).expect("parker lock poisoned");
        }
        state.blocked = false;
        self.notified.store(false, Ordering::SeqCst);
    }
}

impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let blocked = {
            let state = self.state.lock().expect("parker lock poisoned");
            self.notified.store(true, Ordering::SeqCst);
            state.blocked
        };
        // After the store above: see `is_notified` for why this order matters.
        let running_engine = self.running_engine.load(Ordering::SeqCst);
        if blocked {
            self.ready.notify_one();
        }
        if running_engine && thread_token() != self.owner {
            self.driver.interrupt();
        }
    }
}

enum State<T> {
    Pending(Option<Waker>),
    Ready(T),
    Taken,
    Abandoned,
}

/// A one-shot slot; see the module docs.
pub(crate) struct Slot<T> {
    state: Mutex<Guarded<T>>,
    ready: Condvar,
}

struct Guarded<T> {
    state: State<T>,
    /// A thread is blocked on `ready`.
    blocked: bool,
}

impl<T> Slot<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Guarded {
                state: State::Pending(None),
                blocked: false,
            }),
            ready: Condvar::new(),
        })
    }

    /// Delivers the value. Returns `false` (and drops it) if the waiter is gone.
    fn complete(&self, value: T) -> bool {
        let mut guarded = self.state.lock().expect("slot lock poisoned");
        match std::mem::replace(&mut guarded.state, State::Taken) {
            State::Pending(waker) => {
                guarded.state = State::Ready(value);
                let blocked = guarded.blocked;
                drop(guarded);
                if blocked {
                    self.ready.notify_one();
                }
                if let Some(waker) = waker {
                    waker.wake();
                }
                true
            }
            State::Abandoned => {
                guarded.state = State::Abandoned;
                false
            }
            State::Ready(_) | State::Taken => {
                unreachable!("a request completed twice")
            }
        }
    }

    fn poll(&self, context: &mut Context<'_>) -> Poll<T> {
        let mut guarded = self.state.lock().expect("slot lock poisoned");
        match std::mem::replace(&mut guarded.state, State::Taken) {
            State::Ready(value) => Poll::Ready(value),
            State::Pending(_) => {
                guarded.state = State::Pending(Some(context.waker().clone()));
                Poll::Pending
            }
            State::Taken | State::Abandoned => panic!("IoFuture polled after completion"),
        }
    }

    fn wait(&self) -> T {
        let mut guarded = self.state.lock().expect("slot lock poisoned");
        loop {
            match std::mem::replace(&mut guarded.state, State::Taken) {
                State::Ready(value) => return value,
                pending @ State::Pending(_) => {
                    guarded.state = pending;
                    guarded.blocked = true;
                    guarded = self.ready.wait(guarded).expect("slot lock poisoned");
                }
                State::Taken | State::Abandoned => panic!("IoFuture waited after completion"),
            }
        }
    }

    fn abandon(&self) {
        let mut guarded = self.state.lock().expect("slot lock poisoned");
        if matches!(guarded.state, State::Pending(_)) {
            guarded.state = State::Abandoned;
        }
    }
}

/// The engine's end of a slot: answer it with [`Responder::send`]; dropping it
/// unanswered answers with the fallback given at creation.
pub(crate) struct Responder<T> {
    slot: Option<Arc<Slot<T>>>,
    fallback: fn() -> T,
}

impl<T> Responder<T> {
    /// A responder and the future its answer reaches.
    pub(crate) fn new(fallback: fn() -> T) -> (Self, IoFuture<T>) {
        let slot = Slot::new();
        let future = IoFuture::pending(slot.clone());
        (
            Self {
                slot: Some(slot),
                fallback,
            },
            future,
        )
    }

    /// Answers; returns `false` (dropping the value) if the waiter is gone.
    pub(crate) fn send(mut self, value: T) -> bool {
        self.slot.take().expect("answered once").complete(value)
    }
}

impl<T> Drop for Responder<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.complete((self.fallback)());
        }
    }
}

/// The result of a request, as a future (`.await` it from any runtime) or a
/// blocking call ([`IoFuture::wait`]).
#[must_use = "an IoFuture does nothing unless awaited or waited on; dropping it abandons the result"]
pub struct IoFuture<T> {
    inner: Inner<T>,
    /// The engine this request went to (`None`: answered at once).
    driver: Option<Arc<dyn Driver>>,
    /// The push was deferred and nobody has kicked the engine thread yet.
    kick_owed: bool,
}

enum Inner<T> {
    /// Refused before submission (bad alignment, shut down): ready at once.
    Immediate(Option<T>),
    Slot(Arc<Slot<T>>, bool),
}

impl<T> IoFuture<T> {
    fn pending(slot: Arc<Slot<T>>) -> Self {
        Self {
            inner: Inner::Slot(slot, false),
            driver: None,
            kick_owed: false,
        }
    }

    pub(crate) fn ready(value: T) -> Self {
        Self {
            inner: Inner::Immediate(Some(value)),
            driver: None,
            kick_owed: false,
        }
    }

    /// Ties the future to the engine its request went to; `kick_owed`: the push
    /// was deferred (see the module docs).
    pub(crate) fn attach(&mut self, driver: Arc<dyn Driver>, kick_owed: bool) {
        self.driver = Some(driver);
        self.kick_owed = kick_owed;
    }

    /// Blocks the current thread until the request completes, running the engine
    /// meanwhile when nobody else does (see the module docs). For plain threads;
    /// in async code, `.await` the future instead.
    pub fn wait(mut self) -> T {
        if let (Inner::Slot(..), Some(driver)) = (&self.inner, self.driver.clone()) {
            return block_on(&driver, &mut self);
        }
        match &mut self.inner {
            Inner::Immediate(value) => value.take().expect("IoFuture used after completion"),
            Inner::Slot(slot, done) => {
                *done = true;
                slot.wait()
            }
        }
    }

    /// Pays the deferred kick, unless this thread runs a `block_on` of the same
    /// engine, which takes the debt over.
    fn settle_kick(&mut self) {
        if !std::mem::take(&mut self.kick_owed) {
            return;
        }
        if let Some(driver) = &self.driver {
            if DRIVING.get() != driver_id(driver) {
                driver.kick();
            }
        }
    }
}

// The future never relies on being pinned: its value sits behind an `Arc` or in
// an `Option` it moves out of.
impl<T> Unpin for IoFuture<T> {}

impl<T> Future for IoFuture<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Immediate(value) => {
                return Poll::Ready(value.take().expect("IoFuture polled after completion"));
            }
            Inner::Slot(slot, done) => {
                let poll = slot.poll(context);
                *done = poll.is_ready();
                if poll.is_ready() {
                    return poll;
                }
            }
        }
        this.settle_kick();
        Poll::Pending
    }
}

impl<T> Drop for IoFuture<T> {
    fn drop(&mut self) {
        self.settle_kick();
        if let Inner::Slot(slot, false) = &self.inner {
            slot.abandon();
        }
    }
}

impl<T> std::fmt::Debug for IoFuture<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("IoFuture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_waiter_gets_the_value_from_another_thread() {
        let (responder, future) = Responder::new(|| 0);
        let engine = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            responder.send(7)
        });
        assert_eq!(future.wait(), 7);
        assert!(engine.join().unwrap());
    }

    #[test]
    fn an_abandoned_slot_drops_the_value() {
        let (responder, future) = Responder::new(Vec::new);
        drop(future);
        assert!(!responder.send(vec![1, 2, 3]));
    }

    #[test]
    fn a_responder_dropped_unanswered_answers_with_its_fallback() {
        let (responder, future) = Responder::new(|| -1);
        drop(responder);
        assert_eq!(future.wait(), -1);
    }

    #[test]
    fn immediate_futures_are_ready() {
        assert_eq!(IoFuture::ready(3).wait(), 3);
    }
}
