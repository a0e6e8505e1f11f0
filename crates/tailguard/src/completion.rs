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
//! The parker's lock-free flags follow a Dekker pattern (see
//! `Parker::is_notified`); loom checks it, with a model of the engine's sleep
//! in the backend, under every interleaving (`loom_tests` below, run by
//! `.ci/run`).
//!
//! # Submitting under a hold
//!
//! A thread that holds the engine ([`EngineHold`], with its session open)
//! runs one turn of the engine right after it pushes a request, if the
//! engine is free and submits eagerly ([`Driver::submit_held`]): the
//! request goes to the kernel at once, as a program driving its own ring
//! submits, instead of at the thread's next wait. A loop that looks at a
//! batch of results and submits a request after each (a closed loop) then
//! overlaps each request's device time with the rest of its look, instead
//! of submitting the whole batch together after it. The turn runs inside
//! the session, so the protocol is that of a helping waiter's run: the
//! engine thread stays parked, and what the turn leaves in flight is reaped
//! by the thread's next wait. Without eager submission the request waits
//! for that wait, so that a turn submits a batch.
//!
//! # Batched wakes
//!
//! The engine answers a batch of completions (one reap) before it calls any
//! of their futures' wakers: each answer puts its waker aside
//! ([`Responder::send_batched`]), and the batch goes to the engine's
//! [`PendingWakes`], which the runner then empties, calling one waker at a
//! time. Any thread polling a pending future of the same engine (and any
//! thread submitting to it) empties it too. Where the awaiting task's thread
//! shares a CPU with the engine thread, its first wake-up preempts the engine
//! thread; the woken thread then calls the rest of the batch's wakers itself,
//! its own among them, at the cost of a lock each, and finds all of the
//! batch's results at its next poll, instead of being woken once per
//! completion, each time preempting the engine thread again. Every waker is
//! called once, by whoever takes it from the queue, and the runner that
//! published a batch takes whatever is left before it goes on, so none is
//! left behind (loom model `every_published_waker_is_called_once`).
//!
//! # The first wake goes at once
//!
//! The engine thread awaits none of the results it answers, so it does not
//! hold back a reap's first waker: it publishes and calls it as soon as
//! that request is answered, then answers the rest of the reap and
//! publishes their wakers together. The awaiting thread's wake-up (on a
//! virtual machine an idle vCPU takes microseconds to answer one) then
//! runs beside the engine thread's answering of the rest instead of after
//! it, and that thread's next request reaches the kernel that much sooner.
//! Where the awaiting thread shares a CPU with the engine thread, the first
//! wake-up may preempt the engine thread with one result ready instead of
//! all of them, and the rest cost it a second wake-up: one more per reap,
//! not one per completion. A thread that runs the engine while it waits
//! for its own results (a helping waiter, a submitter beside the ring wait)
//! keeps the whole batch together: it polls once it leaves the engine.
//!
//! Completing is cheap: the condition variable is signalled only when a thread is
//! actually blocked in [`IoFuture::wait`] (a flag under the slot's mutex), so an
//! `.await`ing caller costs the engine no system call. Signalling unconditionally
//! cost a `futex` call per request, half the engine's time in the NOP benchmark.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};

// The parker takes its primitives from here (`sync::Mutex`, ...): loom's under
// `cfg(tailguard_loom)`, so its protocol is model-checked (see `loom_tests`
// below), `std`'s otherwise. The slots stay on `std`'s.
use crate::handoff::Handoff;
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

    /// Opens a helping session outside `drive_until_notified`: an
    /// [`EngineHold`] keeps one open between the waits of its thread.
    fn begin_session(&self);

    /// Pays deferred pushes: makes sure the engine thread looks at the queue.
    fn kick(&self);

    /// Wakes whoever runs the engine if it sleeps in the backend.
    fn interrupt(&self);

    /// Calls the wakers of answered requests that the engine's runner has
    /// not called yet ([`PendingWakes::wake_pending`]).
    fn wake_pending(&self);

    /// Runs one turn of the engine on this thread without waiting (take
    /// the queue, dispatch, submit, reap), if the engine is free and submits
    /// eagerly: for a thread that holds the engine's helping session (see
    /// "Submitting under a hold"), which runs the engine again at its next
    /// wait.
    fn submit_held(&self);
}

/// Whether this thread holds `driver`'s engine with its session open: a
/// request it submits may go to the backend at once, on this thread.
pub(crate) fn holds_open(driver: &Arc<dyn Driver>) -> bool {
    HOLD_OPEN.get() && holding() == driver_id(driver)
}

/// The body of [`Driver::drive_until_notified`] for a driver whose waiters may
/// run its engine: the real one (`engine::Shared`) and the loom model of it
/// (`loom_tests`) share it, so the model checks this very loop. `help` runs
/// the engine on this thread if nobody else does (opening the helping
/// session), and says whether it did.
pub(crate) fn drive_until_notified_helping<T>(
    handoff: &Handoff<T>,
    parker: &Parker,
    session: &mut bool,
    help: impl FnOnce(&Parker, &mut bool) -> bool,
) {
    if parker.take_notified() {
        return;
    }
    if help(parker, session) && parker.take_notified() {
        // Back to poll the future; the session stays open.
        return;
    }
    // About to block: end the session (the engine thread takes over any
    // work left), make sure the engine looks at the queue, and keep the
    // engine thread from counting on other sessions meanwhile (step 4 in
    // `crate::handoff`).
    if std::mem::take(session) {
        handoff.end_helping();
    }
    handoff.begin_blocked_wait();
    if !parker.take_notified() {
        parker.park();
    }
    handoff.end_blocked_wait();
}

thread_local! {
    /// The driver whose `block_on` runs innermost on this thread ([`driving`]
    /// gives its id), kept whole so that a nested `block_on` of another
    /// driver can end its session and pay its kick (see
    /// [`release_outer_block`]).
    static DRIVING_DRIVER: RefCell<Option<Arc<dyn Driver>>> = const { RefCell::new(None) };
    /// Whether the innermost `block_on`'s own helping session is open (a
    /// hold's session is `HOLD_OPEN`).
    static BLOCK_SESSION: Cell<bool> = const { Cell::new(false) };
    /// The engines this thread holds ([`EngineHold`]), the latest last, each
    /// with its hold's number; [`holding`] gives the latest's driver id.
    /// Only the latest can have its session open: a hold made or a
    /// `block_on` entered for another driver ends it (see
    /// [`release_other_hold`]).
    static HELD: RefCell<Vec<(u64, Arc<dyn Driver>)>> = const { RefCell::new(Vec::new()) };
    /// Numbers the holds of this thread.
    static HOLD_COUNT: Cell<u64> = const { Cell::new(0) };
    /// Whether the helping session of the latest hold is open (counted by
    /// the held driver). One flag for the thread, not one per `block_on`:
    /// a wait in any `block_on` may end the session, and the hold may be
    /// dropped inside one, so they all read and write this.
    static HOLD_OPEN: Cell<bool> = const { Cell::new(false) };
    /// Its address identifies the thread.
    #[cfg(not(tailguard_loom))]
    static THREAD_TOKEN: u8 = const { 0 };
}

fn driver_id(driver: &Arc<dyn Driver>) -> usize {
    Arc::as_ptr(driver).cast::<()>() as usize
}

/// The id of the driver whose `block_on` runs innermost here (0: none, also
/// while the thread's locals are torn down: a future dropped by another
/// thread-local's destructor pays its kick instead of panicking there).
fn driving() -> usize {
    DRIVING_DRIVER
        .try_with(|driving| driving.borrow().as_ref().map_or(0, driver_id))
        .unwrap_or(0)
}

/// The id of the driver this thread holds the engine of (0: none).
fn holding() -> usize {
    HELD.with_borrow(|held| held.last().map_or(0, |(_, driver)| driver_id(driver)))
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
/// while it is pending (see the module docs). While this thread holds the
/// engine ([`EngineHold`]), its waits keep the hold's session; otherwise this
/// call opens one of its own when it helps, and ends it on return.
pub(crate) fn block_on<F: Future>(driver: &Arc<dyn Driver>, future: F) -> F::Output {
    /// The enclosing `block_on`'s driver and session, put back on return.
    struct Restore {
        previous: (Option<Arc<dyn Driver>>, bool),
        driver: Arc<dyn Driver>,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if BLOCK_SESSION.replace(self.previous.1) {
                self.driver.end_session();
            }
            DRIVING_DRIVER.set(self.previous.0.take());
            // A wait that found the engine busy ended the hold's session (so
            // the engine thread took over); the hold reopens it.
            if holding() == driver_id(&self.driver) && !HOLD_OPEN.get() {
                self.driver.begin_session();
                HOLD_OPEN.set(true);
            }
            // Pushes deferred in here and not taken by this thread.
            self.driver.kick();
        }
    }
    let id = driver_id(driver);
    release_other_hold(id);
    release_outer_block(id);
    let parker = Arc::new(Parker::new(driver.clone()));
    let waker = Waker::from(parker.clone());
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let _restore = Restore {
        previous: (
            DRIVING_DRIVER.replace(Some(driver.clone())),
            BLOCK_SESSION.replace(false),
        ),
        driver: driver.clone(),
    };
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        // The future may have made or dropped a hold: look each time. A
        // hold of another engine made in there must not keep its session
        // while this thread waits here.
        if holding() == id {
            let mut open = HOLD_OPEN.get();
            driver.drive_until_notified(&parker, &mut open);
            HOLD_OPEN.set(open);
        } else {
            release_other_hold(id);
            let mut open = BLOCK_SESSION.get();
            driver.drive_until_notified(&parker, &mut open);
            BLOCK_SESSION.set(open);
        }
    }
}

/// Before a `block_on` of the driver `id` inside the future of a `block_on`
/// of another driver: ends the outer call's helping session, if open, and
/// pays its deferred kicks, handing the outer engine's work to its engine
/// thread. This thread waits in the inner engine meanwhile, and the inner
/// future may wait for the outer engine's requests (a hang otherwise). The
/// outer call's next wait reopens the session.
fn release_outer_block(id: usize) {
    let outer = driving();
    if outer == 0 || outer == id {
        return;
    }
    let open = BLOCK_SESSION.replace(false);
    DRIVING_DRIVER.with_borrow(|driver| {
        if let Some(driver) = driver {
            if open {
                driver.end_session();
            }
            driver.kick();
        }
    });
}

/// Before a `block_on` of the driver `id`: if this thread holds another
/// driver's engine with its session open, ends that session and hands the
/// held engine's work to its engine thread. This thread is about to wait in
/// another engine, so it will not run the held one meanwhile, and the future
/// may wait for the held engine's requests (which would otherwise wait for
/// this thread: a hang). The hold's next wait reopens the session.
fn release_other_hold(id: usize) {
    let held = holding();
    if held == 0 || held == id || !HOLD_OPEN.get() {
        return;
    }
    HELD.with_borrow(|held| {
        if let Some((_, held)) = held.last() {
            held.end_session();
            held.kick();
        }
    });
    HOLD_OPEN.set(false);
}

/// Keeps a driver's engine with the thread that made it, between that
/// thread's waits (see [`crate::Scheduler::hold_engine`]).
///
/// It is one helping session (see [`crate::handoff`]) spanning every
/// [`crate::Scheduler::block_on`] of the thread: while it is open, a `block_on` returning does
/// not hand work left in flight to the engine thread, so the next wait of
/// this thread finds the engine free and runs it, instead of blocking while
/// the engine thread reaps its completions and wakes it (a thread hop per
/// completion). Dropping it ends the session: the engine thread takes over
/// whatever is left.
pub struct EngineHold {
    /// The hold's number and driver; `None`: waiters may not run this
    /// engine, so there is nothing to hold, or this thread held it already
    /// (an inner hold changes nothing).
    held: Option<(u64, Arc<dyn Driver>)>,
    /// The session belongs to this thread: the guard is not `Send`.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl EngineHold {
    /// Opens the session on `driver`, whose waiters may run its engine.
    /// A second hold of the same engine on this thread is [`EngineHold::inert`].
    pub(crate) fn new(driver: Arc<dyn Driver>) -> Self {
        if holding() == driver_id(&driver) {
            return Self::inert();
        }
        // A hold of another engine lets go of its session, as a wait in
        // this engine would: this thread now serves this one.
        release_other_hold(driver_id(&driver));
        driver.begin_session();
        HOLD_OPEN.set(true);
        let number = HOLD_COUNT.get();
        HOLD_COUNT.set(number + 1);
        HELD.with_borrow_mut(|held| held.push((number, driver.clone())));
        Self {
            held: Some((number, driver)),
            _thread_bound: std::marker::PhantomData,
        }
    }

    /// A hold that changes nothing: of an engine that only its own thread
    /// runs, or of one this thread holds already.
    pub(crate) fn inert() -> Self {
        Self {
            held: None,
            _thread_bound: std::marker::PhantomData,
        }
    }
}

impl std::fmt::Debug for EngineHold {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("EngineHold").finish_non_exhaustive()
    }
}

impl Drop for EngineHold {
    /// Ends the hold's session if a wait did not end it already (whether
    /// dropped between waits or inside a `block_on`'s future). A hold
    /// dropped before a later one of another engine has no open session
    /// (the later one ended it): it only leaves the list.
    fn drop(&mut self) {
        let Some((number, driver)) = &self.held else {
            return;
        };
        let latest = HELD.with_borrow_mut(|held| {
            let index = held
                .iter()
                .rposition(|(each, _)| each == number)
                .expect("a live hold is in its thread's list");
            held.remove(index);
            index == held.len()
        });
        if latest && HOLD_OPEN.replace(false) {
            driver.end_session();
        }
        driver.kick();
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
    /// backend. The two flags form Dekker's pattern, each side a store, a
    /// `SeqCst` fence, then a load of the other side's flag: the owner stores
    /// `running_engine` ([`Parker::set_running_engine`]) and later loads
    /// `notified` (here); a waker stores `notified` and then loads
    /// `running_engine` (`wake_by_ref`). One of the two fences comes first in
    /// the single total order of `SeqCst` operations, and the load after the
    /// later fence sees the store before the earlier one. So either this load
    /// sees the wake, or the waker sees the owner running the engine and
    /// interrupts its sleep (and `crate::handoff`'s `sleeping` flag, set
    /// before this look, makes that interrupt land).
    ///
    /// The fences carry the argument, not `SeqCst` on the accesses: loom
    /// treats `SeqCst` accesses as acquire/release and found a lost wake-up
    /// in a version without the fences, while it models `SeqCst` fences
    /// exactly (see `loom_tests`). On x86-64 each side pays a plain store and
    /// the fence's `lock or` to the stack where its `SeqCst` store was an
    /// `xchg`: one locked instruction either way.
    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Ordering::SeqCst)
    }

    /// The owner starts or stops running the engine: a wake from another thread
    /// meanwhile must interrupt its sleep in the backend.
    pub(crate) fn set_running_engine(&self, running: bool) {
        self.running_engine.store(running, Ordering::Relaxed);
        if running {
            // Between this store and the owner's next `is_notified`: Dekker's
            // pattern (see `is_notified`). Stopping needs no fence: a waker
            // that still sees `true` only interrupts a sleep that is not there.
            sync::fence(Ordering::SeqCst);
        }
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
            // Release: what the waker did before waking happens before the
            // owner's next poll, which acquires this flag.
            self.notified.store(true, Ordering::Release);
            state.blocked
        };
        // Between the store above and the load below: Dekker's pattern (see
        // `is_notified`).
        sync::fence(Ordering::SeqCst);
        let running_engine = self.running_engine.load(Ordering::SeqCst);
        if blocked {
            self.ready.notify_one();
        }
        if running_engine && thread_token() != self.owner {
            self.driver.interrupt();
        }
    }
}

/// Wakers of answered requests that nobody has called yet; see "Batched
/// wakes" in the module docs.
#[derive(Default)]
pub(crate) struct PendingWakes {
    wakers: sync::Mutex<VecDeque<Waker>>,
    /// Whether `wakers` may hold any: set under the lock when wakers are
    /// published, cleared under it when the last is taken. Read without the
    /// lock, as a hint: a thread that misses a waker leaves it to the
    /// publisher, which calls every waker nobody else took.
    any: sync::AtomicBool,
}

impl PendingWakes {
    /// Makes `batch` (emptied) callable by any thread; the publisher then
    /// calls [`PendingWakes::wake_pending`] itself.
    pub(crate) fn publish(&self, batch: &mut Vec<Waker>) {
        if batch.is_empty() {
            return;
        }
        let mut wakers = self.wakers.lock().expect("pending wakes lock poisoned");
        wakers.extend(batch.drain(..));
        self.any.store(true, Ordering::Relaxed);
    }

    /// Calls the pending wakers, oldest first, one at a time, until none is
    /// left: another thread calling this meanwhile takes the rest over.
    pub(crate) fn wake_pending(&self) {
        while self.any.load(Ordering::Relaxed) {
            let waker = {
                let mut wakers = self.wakers.lock().expect("pending wakes lock poisoned");
                let waker = wakers.pop_front();
                if wakers.is_empty() {
                    self.any.store(false, Ordering::Relaxed);
                }
                waker
            };
            match waker {
                Some(waker) => wake_caught(waker),
                None => return,
            }
        }
    }
}

/// Calls a future's waker, which is the caller's code (an executor's): a
/// panic in it is logged and goes no further, since it would otherwise
/// unwind through the engine, which calls wakers with its own state half
/// updated, and crash it, failing every request of every thread.
fn wake_caught(waker: Waker) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake())).is_err() {
        tracing::error!("a future's waker panicked; the panic is contained, the engine goes on");
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
    /// The future's waker is called here, or, with `wakes`, appended to it
    /// for the caller to call (see [`Responder::send_batched`]).
    fn complete(&self, value: T, wakes: Option<&mut Vec<Waker>>) -> bool {
        let mut guarded = self.state.lock().expect("slot lock poisoned");
        match std::mem::replace(&mut guarded.state, State::Taken) {
            State::Pending(waker) => {
                guarded.state = State::Ready(value);
                let blocked = guarded.blocked;
                drop(guarded);
                if blocked {
                    self.ready.notify_one();
                }
                match (waker, wakes) {
                    (Some(waker), Some(wakes)) => wakes.push(waker),
                    (Some(waker), None) => wake_caught(waker),
                    (None, _) => {}
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
        self.slot
            .take()
            .expect("answered once")
            .complete(value, None)
    }

    /// Answers without waking the future: its waker joins `wakes`, which the
    /// caller hands to [`PendingWakes::publish`] once the batch is answered.
    pub(crate) fn send_batched(mut self, value: T, wakes: &mut Vec<Waker>) -> bool {
        self.slot
            .take()
            .expect("answered once")
            .complete(value, Some(wakes))
    }
}

impl<T> Drop for Responder<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.complete((self.fallback)(), None);
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

    /// Whether this request's push found the engine thread parked and
    /// nobody has kicked it since.
    #[cfg(test)]
    pub(crate) fn owes_kick(&self) -> bool {
        self.kick_owed
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
            if driving() != driver_id(driver) {
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
        if let Some(driver) = &this.driver {
            // This thread is running anyway: it calls the wakers the engine's
            // runner has yet to call, its own tasks' among them, sparing a
            // wake-up of this thread per completion (see "Batched wakes").
            driver.wake_pending();
        }
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

    struct CountingWake(std::sync::atomic::AtomicUsize);

    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_batched_answer_wakes_its_future_once_its_batch_is_called() {
        let count = Arc::new(CountingWake(Default::default()));
        let waker = Waker::from(count.clone());
        let (responder, mut future) = Responder::new(|| 0);
        let mut context = Context::from_waker(&waker);
        assert!(Pin::new(&mut future).poll(&mut context).is_pending());
        let mut batch = Vec::new();
        assert!(responder.send_batched(7, &mut batch));
        assert_eq!(batch.len(), 1, "the waker is put aside");
        let pending = PendingWakes::default();
        pending.publish(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "not called yet");
        pending.wake_pending();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        pending.wake_pending();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "called once");
        assert_eq!(Pin::new(&mut future).poll(&mut context), Poll::Ready(7));
    }
}

#[cfg(all(test, tailguard_loom))]
mod loom_tests {
    //! Each model has one waker and one wake. With two wakes, loom 0.7.3
    //! reports a deadlock that the C++/Rust memory model forbids: it lets a
    //! waker's plain store of `notified` fall between the read and the write
    //! of the owner's `take_notified` swap, so the owner, woken through the
    //! backend after that store, still reads its own `false`
    //! (tokio-rs/loom#254; a fix is proposed in tokio-rs/loom#391).

    use super::*;
    use crate::handoff::{self, Handoff};

    /// The backend's sleep: level-triggered, as the eventfd that ends
    /// io_uring's `submit_and_wait` is, so a wake that comes before the sleep
    /// is kept. No I/O ever completes in the model, so only a wake ends it.
    type Backend = handoff::loom_tests::Event;

    /// The engine behind `engine::Shared`'s [`Driver`], reduced to what the
    /// parker's protocol touches: the real [`Handoff`] (its `sleeping` flag
    /// under its lock) and a [`Backend`] with one operation in flight that
    /// never completes, so a runner that is not notified sleeps in it.
    struct ModelEngine {
        handoff: Handoff<()>,
        backend: Backend,
    }

    impl ModelEngine {
        fn new() -> Self {
            Self {
                handoff: Handoff::new(),
                backend: Backend::new(),
            }
        }

        /// `Shared::help` when the engine's lock is free: opens the session,
        /// marks the owner as running the engine, and turns the loop until
        /// `done` (the operation in flight keeps the engine from draining).
        fn help(&self, parker: &Parker, session: &mut bool) {
            if !std::mem::replace(session, true) {
                self.handoff.begin_helping();
            }
            parker.set_running_engine(true);
            let done = || parker.is_notified();
            loop {
                self.turn(&done);
                if done() {
                    break;
                }
            }
            parker.set_running_engine(false);
            self.handoff.leave_engine(true);
        }

        /// `Engine::turn` with nothing queued and an operation in flight:
        /// take the (empty) queue, announce the sleep (`prepare_to_sleep` sets
        /// `sleeping`), take the last look at `done`, sleep in the backend if
        /// it is still false, and clear `sleeping` (`awake`).
        fn turn(&self, done: &dyn Fn() -> bool) {
            let mut inbox = Vec::new();
            self.handoff.take_all(&mut inbox);
            assert!(inbox.is_empty(), "nothing is submitted in the model");
            let announced = self.handoff.prepare_to_sleep();
            if announced && !done() {
                self.backend.wait();
            }
            if announced {
                self.handoff.awake();
            }
        }
    }

    impl Driver for ModelEngine {
        /// `Shared::drive_until_notified` with helpers allowed: the same
        /// loop, with the model's `help`.
        fn drive_until_notified(&self, parker: &Parker, session: &mut bool) {
            drive_until_notified_helping(&self.handoff, parker, session, |parker, session| {
                self.help(parker, session);
                true
            });
        }

        fn end_session(&self) {
            self.handoff.end_helping();
        }

        fn begin_session(&self) {
            self.handoff.begin_helping();
        }

        fn kick(&self) {
            self.handoff.kick();
        }

        /// `Shared::interrupt`: wakes the backend only if the runner
        /// announced its sleep.
        fn interrupt(&self) {
            self.handoff.interrupt(&self.backend);
        }

        fn wake_pending(&self) {}

        fn submit_held(&self) {}
    }

    /// A parker owned by the calling thread, on a fresh model engine.
    fn parker() -> (Arc<ModelEngine>, Arc<Parker>) {
        let engine = Arc::new(ModelEngine::new());
        let parker = Arc::new(Parker::new(engine.clone()));
        (engine, parker)
    }

    fn wake_from_another_thread(parker: &Arc<Parker>) -> loom::thread::JoinHandle<()> {
        let parker = parker.clone();
        loom::thread::spawn(move || parker.wake_by_ref())
    }

    /// (a) The engine is busy (run by another thread), so the owner blocks on
    /// its parker as the end of `Shared::drive_until_notified` does, while a
    /// completion on another thread wakes it (`Slot::complete` calling the
    /// future's waker). The owner must return under every interleaving (a lost
    /// wake-up leaves it blocked, which loom reports as a deadlock) having
    /// consumed the wake.
    #[test]
    fn loom_a_wake_from_another_thread_ends_park() {
        loom::model(|| {
            let (_engine, parker) = parker();
            let waker = wake_from_another_thread(&parker);
            if !parker.take_notified() {
                parker.park();
            }
            waker.join().unwrap();
            assert!(!parker.take_notified(), "park consumed the one wake");
        });
    }

    /// (b) The owner runs the engine itself while a completion on another
    /// thread wakes it. Each step and the real code it stands for:
    ///
    /// - owner, `ModelEngine::help`: `Shared::help` with the engine's lock
    ///   free: `set_running_engine(true)`, then `Engine::turn` until
    ///   `is_notified`, then `set_running_engine(false)`;
    /// - owner, `ModelEngine::turn`: `Engine::turn` with an operation in
    ///   flight: `Handoff::prepare_to_sleep` sets `sleeping`, the last look at
    ///   `done` is `is_notified`, `backend.submit(true)` is `Backend::wait`,
    ///   which only a wake ends (the model's I/O never completes), then
    ///   `Handoff::awake`;
    /// - waker: `Slot::complete` calling the future's waker, `wake_by_ref`,
    ///   whose `Driver::interrupt` is `Shared::interrupt`: `Handoff::interrupt`
    ///   takes `sleeping` and, if set, wakes the backend (the eventfd write);
    /// - owner, `take_notified` after `help`: as `Shared::drive_until_notified`
    ///   does before returning to poll the future.
    ///
    /// The owner must never sleep forever (loom reports a deadlock), and the
    /// wake must be taken exactly once: by that `take_notified`, not again.
    #[test]
    fn loom_a_wake_interrupts_the_owner_sleeping_in_the_engine() {
        loom::model(|| {
            let (engine, parker) = parker();
            let waker = wake_from_another_thread(&parker);
            let mut session = false;
            engine.help(&parker, &mut session);
            assert!(parker.take_notified(), "help returned without the wake");
            waker.join().unwrap();
            assert!(!parker.take_notified(), "one wake, taken twice");
            engine.end_session();
        });
    }

    /// (c) One turn of `block_on`'s loop: [`drive_until_notified_helping`],
    /// the loop `Shared::drive_until_notified` runs, with the model engine's
    /// `help`, while another thread wakes the parker. The
    /// wake may come before the first `take_notified` (the engine is not run
    /// at all) or at any point while the owner runs the engine; either way
    /// the call returns with the wake taken, and the helping session it
    /// opened (if any) is ended, as `block_on`'s `Restore` does.
    #[test]
    fn loom_drive_until_notified_returns_with_the_wake_taken() {
        loom::model(|| {
            let (engine, parker) = parker();
            let waker = wake_from_another_thread(&parker);
            let mut session = false;
            engine.drive_until_notified(&parker, &mut session);
            waker.join().unwrap();
            assert!(!parker.take_notified(), "the wake was left behind");
            if session {
                engine.end_session();
            }
        });
    }

    /// Counts its wake-ups.
    struct CountingWake(loom::sync::atomic::AtomicUsize);

    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A runner publishes a batch of two wakers and empties the queue, while
    /// another thread (a future polled elsewhere) empties it too. Under every
    /// interleaving each waker is called exactly once: none left behind
    /// (a runner that stops while one is still queued, as it would if `any`
    /// were cleared at each take instead of at the last), none twice.
    #[test]
    fn loom_every_published_waker_is_called_once() {
        loom::model(|| {
            let pending = loom::sync::Arc::new(PendingWakes::default());
            let counts: Vec<_> = (0..2)
                .map(|_| Arc::new(CountingWake(loom::sync::atomic::AtomicUsize::new(0))))
                .collect();
            let stealer = {
                let pending = pending.clone();
                loom::thread::spawn(move || pending.wake_pending())
            };
            let mut batch: Vec<Waker> = counts.iter().cloned().map(Waker::from).collect();
            pending.publish(&mut batch);
            assert!(batch.is_empty());
            pending.wake_pending();
            stealer.join().unwrap();
            for count in &counts {
                let calls = count.0.load(Ordering::SeqCst);
                assert_eq!(calls, 1, "a waker called {calls} times");
            }
        });
    }
}
