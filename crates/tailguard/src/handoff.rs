//! The submission handoff: many submitting threads, one engine thread.
//!
//! Submitters append messages to one `Vec` under a mutex held only for the push.
//! The engine takes the *whole* vector at once ([`Handoff::take_all`] swaps it
//! with an empty one it recycles), then works on its private copy without the
//! lock. This is seed 003's fix: the consumer drains everything queued in one
//! step instead of contending on the queue per request, so submitters never wait
//! behind the engine's per-request work and the engine takes the lock once per
//! loop iteration, whatever the load.
//!
//! ## Who runs the engine, and sleeping without losing a wake-up
//!
//! The engine (dispatchers and backend) is run by one thread at a time: the
//! engine thread, or a *helping* waiter, a thread that would otherwise block on
//! a result and runs the engine itself instead (see [`crate::engine`]). The
//! handoff's mutex also guards who is where:
//!
//! - `sleeping`: the runner sleeps in the backend (io_uring's `submit_and_wait`,
//!   the thread pool's condition variable), woken by the backend's waker;
//! - `parked`: the engine thread has nothing in flight and waits on the
//!   handoff's condition variable, outside the engine;
//! - `helpers`: waiters in a helping *session* (a `block_on` that has run the
//!   engine and will run it again before it returns, or looks at the queue and
//!   unparks the engine thread when it returns): while there is one, nobody
//!   needs to wake the engine thread;
//! - `work_left`: whether the last runner to leave the engine left operations
//!   in flight (or a shutdown to finish);
//! - `blocked_waiters`: waiters that found the engine busy and block on their
//!   parker without running it.
//!
//! The protocol, every step under the queue's mutex:
//!
//! 1. a runner about to sleep in the backend sets `sleeping` only if the queue
//!    is empty (otherwise it takes the messages first); the engine thread parks
//!    only if the queue is empty;
//! 2. a submitter pushes and takes the `sleeping` flag; after unlocking, it wakes
//!    the runner through the backend's waker if the flag was set. If instead
//!    the engine thread is parked and nobody helps, the push is
//!    [`Pushed::Deferred`]: the submitter owes a [`Handoff::kick`], which it pays
//!    when it is about to wait without running the engine itself (a future polled
//!    by another executor, a dropped future, a waiter that found the engine busy).
//!    A thread that is going to run the engine itself saves the kick and the
//!    thread hop: that is the point of deferring it;
//! 3. the last helper to end its session unparks the engine thread if work is
//!    left (messages queued, operations in flight). A session spans the polls
//!    of the waiter's future between two runs of the engine, so a thread that
//!    drives many requests keeps the engine to itself instead of handing it to
//!    the engine thread and back each time it looks at a result.
//!
//! Because the flags live under the queue's mutex, the check-then-sleep and the
//! push-then-wake cannot interleave: either the runner's check sees the message,
//! or the submitter sees the flag and wakes it (or owes the kick). A wake that
//! arrives before the runner actually blocks is not lost: the waker is
//! level-triggered (an eventfd's counter, a condition flag), and so is `parked`.
//! Wakes go only to a sleeper, so a busy engine costs a submitter one short
//! critical section and no system call. (A first version kept the flag in a
//! separate atomic and relied on sequential consistency between the flag and
//! the mutex; the loom test below found a lost wake-up in loom's memory model,
//! and this version needs no such argument.)
//!
//! ## Waiting in the ring
//!
//! Where the backend can wait for a completion without being borrowed
//! ([`crate::backend::CompletionWait`]: io_uring on a ring any thread may
//! enter), the engine thread with operations in flight and nothing else to do
//! does not sleep in the backend holding the engine: it leaves the engine and
//! waits in the ring (`in_ring`), so that a submitter finding the engine free
//! takes it, pushes its message without waking anyone
//! ([`Handoff::try_push_beside_ring_wait`]), runs the engine until it has
//! nothing left to do or for a few turns at most (submitting, and reaping
//! whatever completed, its own results included), and leaves. The engine
//! thread wakes at the next completion, whoever reaps it. The rules:
//!
//! 1. the engine thread sets `in_ring` (and clears `ring_woken`) only if the
//!    queue is empty, after re-arming the backend's wake, and clears `in_ring`
//!    when its wait ends, before it takes the engine again;
//! 2. a plain push to a thread `in_ring` wakes it once (`ring_woken`); later
//!    pushes need not, since it will take the engine and look;
//! 3. any other thread leaving the engine re-arms the backend's wake, then
//!    ([`Handoff::leave_engine_beside_ring_wait`]) wakes the engine thread
//!    again if `ring_woken`: its reaps may have taken that wake, whose
//!    message it may not have taken; and also when the engine thread's timed
//!    wait may now be too long (work held by a rate limit), or when it leaves
//!    with work undone (its turns are capped, so that a submit call returns
//!    promptly under any load).
//!
//! A message pushed beside the wait is taken by the runner that pushed it; a
//! message pushed plainly wakes the engine thread, or finds `ring_woken` set,
//! and then either that wake reaches the engine thread, or the thread whose
//! reap took it sends another when it leaves (the loom model
//! `a_runner_beside_the_ring_wait_never_strands_the_engine_thread`).
//!
//! After [`Handoff::close`] pushes are refused, and the engine, which closes
//! it while handling a shutdown, then takes what was pushed before the close:
//! nothing is accepted that the engine would never see.

use crate::sync::{Condvar, Mutex};

/// Wakes a sleeping consumer (the backend's waker in production).
pub trait Wake: Send + Sync {
    /// Makes the consumer's current or next sleep return.
    fn wake(&self);
}

/// The handoff queue; see the module docs.
pub struct Handoff<T> {
    queue: Mutex<Queue<T>>,
    /// The parked engine thread waits here.
    unparked: Condvar,
}

struct Queue<T> {
    messages: Vec<T>,
    closed: bool,
    /// Closed because the engine panicked, not by a shutdown.
    crashed: bool,
    sleeping: bool,
    parked: bool,
    helpers: usize,
    work_left: bool,
    in_ring: bool,
    ring_woken: bool,
    blocked_waiters: usize,
}

/// A push was refused because the engine is shutting down.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed<T>(pub T);

/// What a successful push leaves to the submitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a deferred push owes a kick unless the caller runs the engine itself"]
pub enum Pushed {
    /// The engine's runner will see the message (it was woken if it slept).
    Seen,
    /// The engine thread is parked and nobody runs the engine: call
    /// [`Handoff::kick`] before waiting, unless this thread runs the engine.
    Deferred,
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Handoff<T> {
    /// An empty, open handoff.
    pub fn new() -> Self {
        Self {
            queue: Mutex::new(Queue {
                messages: Vec::new(),
                closed: false,
                crashed: false,
                sleeping: false,
                parked: false,
                helpers: 0,
                work_left: false,
                in_ring: false,
                ring_woken: false,
                blocked_waiters: 0,
            }),
            unparked: Condvar::new(),
        }
    }

    /// Appends a message and wakes the runner if it sleeps in the backend.
    pub fn push(&self, message: T, waker: &dyn Wake) -> Result<Pushed, Closed<T>> {
        let (was_sleeping, pushed) = {
            let mut queue = self.queue.lock().expect("handoff lock poisoned");
            if queue.closed {
                return Err(Closed(message));
            }
            queue.messages.push(message);
            let pushed = if queue.parked && queue.helpers == 0 {
                Pushed::Deferred
            } else {
                Pushed::Seen
            };
            let wake_ring = queue.in_ring && !std::mem::replace(&mut queue.ring_woken, true);
            (
                std::mem::replace(&mut queue.sleeping, false) | wake_ring,
                pushed,
            )
        };
        if was_sleeping {
            waker.wake();
        }
        Ok(pushed)
    }

    /// Appends a message only the engine thread may finish (a shutdown):
    /// wakes the runner if it sleeps in the backend, and unparks the engine
    /// thread even while a helping session is open, since a thread holding
    /// the engine ([`crate::Scheduler::hold_engine`]) need not wait again.
    pub fn push_to_engine_thread(&self, message: T, waker: &dyn Wake) -> Result<(), Closed<T>> {
        // Deferred or not, the unpark below makes the engine thread look.
        let _ = self.push(message, waker)?;
        let queue = self.queue.lock().expect("handoff lock poisoned");
        if queue.parked {
            self.unpark(queue);
        }
        Ok(())
    }

    /// Pays a deferred push: unparks the engine thread if messages wait and
    /// nobody runs the engine. Cheap (one uncontended lock) when there is
    /// nothing to do.
    pub fn kick(&self) {
        let queue = self.queue.lock().expect("handoff lock poisoned");
        if queue.parked && queue.helpers == 0 && !queue.messages.is_empty() {
            self.unpark(queue);
        }
    }

    /// Wakes the runner if it sleeps in the backend (for a helper whose wait
    /// ended for a reason other than a completion).
    pub fn interrupt(&self, waker: &dyn Wake) {
        let was_sleeping = std::mem::replace(
            &mut self.queue.lock().expect("handoff lock poisoned").sleeping,
            false,
        );
        if was_sleeping {
            waker.wake();
        }
    }

    /// Whether messages may be queued, for a runner that spins: a lock held
    /// by someone else (a submitter pushing, most likely) counts as yes. A
    /// cheap hint, never a decision: sleeping and parking look again under
    /// the lock.
    pub fn maybe_queued(&self) -> bool {
        self.queue
            .try_lock()
            .map_or(true, |queue| !queue.messages.is_empty())
    }

    /// Takes every queued message at once, leaving `spare` (emptied) in its place.
    pub fn take_all(&self, spare: &mut Vec<T>) {
        spare.clear();
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        std::mem::swap(&mut queue.messages, spare);
    }

    /// Step 1 of sleeping in the backend: announces the intent and returns
    /// whether the runner may sleep (`false`: messages arrived, take them first).
    pub fn prepare_to_sleep(&self) -> bool {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.sleeping = queue.messages.is_empty();
        queue.sleeping
    }

    /// The runner is awake again (after sleeping in the backend, or after
    /// deciding not to).
    pub fn awake(&self) {
        self.queue.lock().expect("handoff lock poisoned").sleeping = false;
    }

    /// The engine thread, idle, marks itself parked if nothing is queued;
    /// returns whether it did. It then leaves the engine and calls
    /// [`Handoff::wait_unparked`].
    pub fn try_park(&self) -> bool {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.parked = queue.messages.is_empty();
        if queue.parked {
            queue.work_left = false;
        }
        queue.parked
    }

    /// The engine thread, with operations in flight, parks anyway because a
    /// helping session is open (a waiter between two runs of the engine, or a
    /// thread holding the engine: [`crate::Scheduler::hold_engine`]): that
    /// helper runs the engine again in its next wait, and the last one to end
    /// its session unparks this thread, since `work_left` is set. Returns
    /// whether it parked: not with messages queued (it takes them first), nor
    /// once closed (the engine thread alone finishes a shutdown).
    pub fn try_yield_to_helpers(&self) -> bool {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        if queue.helpers == 0
            || queue.blocked_waiters > 0
            || queue.closed
            || !queue.messages.is_empty()
        {
            return false;
        }
        queue.parked = true;
        queue.work_left = true;
        true
    }

    /// The engine thread, with operations in flight and nothing else to do,
    /// is about to leave the engine and wait in the ring beside whoever runs
    /// it next (see "Waiting in the ring" in the module docs). Returns whether
    /// it may: not with messages queued (it takes them first).
    pub fn prepare_ring_wait(&self) -> bool {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        if !queue.messages.is_empty() {
            return false;
        }
        queue.in_ring = true;
        queue.ring_woken = false;
        true
    }

    /// The engine thread's wait in the ring is over; it takes the engine next.
    pub fn end_ring_wait(&self) {
        self.queue.lock().expect("handoff lock poisoned").in_ring = false;
    }

    /// Appends a message that the caller, which holds the engine's lock, takes
    /// itself, without waking anyone: only while the engine thread waits in
    /// the ring and the handoff is open. Otherwise hands the message back, for
    /// [`Handoff::push`].
    pub fn try_push_beside_ring_wait(&self, message: T) -> Result<(), T> {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        if !queue.in_ring || queue.closed {
            return Err(message);
        }
        queue.messages.push(message);
        Ok(())
    }

    /// A thread other than the engine thread releases the engine's lock (with
    /// the backend's wake re-armed): wakes the engine thread waiting in the
    /// ring if a wake was sent to it meanwhile, which this thread's reaps may
    /// have taken, or if `must_look` (its timed wait may be too long now).
    pub fn leave_engine_beside_ring_wait(&self, must_look: bool, waker: &dyn Wake) {
        let wake = {
            let mut queue = self.queue.lock().expect("handoff lock poisoned");
            let wake = queue.in_ring && (queue.ring_woken || must_look);
            queue.ring_woken |= wake;
            wake
        };
        if wake {
            waker.wake();
        }
    }

    /// Blocks the parked engine thread until a kick, a push it must see, or a
    /// helper leaving work behind unparks it.
    pub fn wait_unparked(&self) {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        while queue.parked {
            queue = self.unparked.wait(queue).expect("handoff lock poisoned");
        }
    }

    /// A waiter starts a helping session (it holds the engine's lock).
    pub fn begin_helping(&self) {
        self.queue.lock().expect("handoff lock poisoned").helpers += 1;
    }

    /// A helper releases the engine's lock, leaving `work_left` (operations in
    /// flight, or a shutdown to finish) or not.
    pub fn leave_engine(&self, work_left: bool) {
        self.queue.lock().expect("handoff lock poisoned").work_left = work_left;
    }

    /// A helping session ends; the last one unparks the engine thread if work
    /// is left or messages are queued.
    pub fn end_helping(&self) {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.helpers -= 1;
        if queue.helpers == 0 && queue.parked && (queue.work_left || !queue.messages.is_empty()) {
            self.unpark(queue);
        }
    }

    /// A waiter that found the engine busy is about to block on its parker
    /// without running the engine (step 4 in the module docs): pays deferred
    /// pushes as [`Handoff::kick`] does, and unparks the engine thread if a
    /// helping session keeps it parked, since that session's thread may not
    /// run the engine again before this waiter's request completes. Pair with
    /// [`Handoff::end_blocked_wait`].
    pub fn begin_blocked_wait(&self) {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.blocked_waiters += 1;
        if queue.parked && (queue.helpers > 0 || !queue.messages.is_empty()) {
            self.unpark(queue);
        }
    }

    /// The waiter's block on its parker is over.
    pub fn end_blocked_wait(&self) {
        self.queue
            .lock()
            .expect("handoff lock poisoned")
            .blocked_waiters -= 1;
    }

    /// Whether the engine thread is parked (or about to park).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        self.queue.lock().expect("handoff lock poisoned").parked
    }

    /// Whether a message waits with the engine thread parked and nobody helping:
    /// never true once every submitter has finished its push protocol.
    #[cfg(test)]
    pub(crate) fn stranded(&self) -> bool {
        let queue = self.queue.lock().expect("handoff lock poisoned");
        queue.parked && queue.helpers == 0 && !queue.messages.is_empty()
    }

    /// Refuses every later push; messages already queued stay for `take_all`.
    /// Also unparks the engine thread, which must see that it is closed.
    pub fn close(&self) {
        self.close_because(false);
    }

    /// [`Handoff::close`], after the engine panicked: refusals then say so
    /// ([`Handoff::crashed`]) rather than blame a shutdown.
    pub fn close_after_crash(&self) {
        self.close_because(true);
    }

    /// Whether the engine's panic closed it.
    pub fn crashed(&self) -> bool {
        self.queue.lock().expect("handoff lock poisoned").crashed
    }

    fn close_because(&self, crashed: bool) {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.crashed |= crashed;
        queue.closed = true;
        self.unpark(queue);
    }

    /// Unparks the engine thread: clears `parked` under the lock `queue`
    /// holds, and notifies once it is released.
    fn unpark(&self, mut queue: impl std::ops::DerefMut<Target = Queue<T>>) {
        queue.parked = false;
        drop(queue);
        self.unparked.notify_one();
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

    struct Counter(std::sync::atomic::AtomicUsize);

    impl Wake for Counter {
        fn wake(&self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn wakes_only_a_sleeping_consumer_and_refuses_after_close() {
        let handoff = Handoff::new();
        let waker = Counter(Default::default());
        assert_eq!(handoff.push(1, &waker), Ok(Pushed::Seen));
        assert_eq!(
            waker.0.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "busy: no wake"
        );
        assert!(!handoff.prepare_to_sleep(), "a message is queued");
        let mut taken = Vec::new();
        handoff.take_all(&mut taken);
        assert_eq!(taken, vec![1]);
        assert!(handoff.prepare_to_sleep());
        assert_eq!(handoff.push(2, &waker), Ok(Pushed::Seen));
        assert_eq!(
            waker.0.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "sleeping: woken"
        );
        handoff.close();
        assert_eq!(handoff.push(3, &waker), Err(Closed(3)));
        handoff.take_all(&mut taken);
        assert_eq!(taken, vec![2], "queued before close, still delivered");
    }

    #[test]
    fn a_push_to_a_parked_engine_is_deferred_unless_someone_helps() {
        let handoff = Handoff::new();
        let waker = Counter(Default::default());
        assert!(handoff.try_park(), "empty: the engine thread may park");
        assert_eq!(handoff.push(1, &waker), Ok(Pushed::Deferred));
        handoff.begin_helping();
        assert_eq!(handoff.push(2, &waker), Ok(Pushed::Seen), "a helper looks");
        handoff.leave_engine(false);
        handoff.end_helping();
        let mut taken = Vec::new();
        assert!(!handoff.try_park(), "messages queued: no parking");
        handoff.take_all(&mut taken);
        assert!(handoff.try_park());
        handoff.begin_helping();
        handoff.leave_engine(true);
        handoff.end_helping();
        handoff.wait_unparked(); // returns at once: work left behind unparked it
        assert!(handoff.try_park());
        assert_eq!(handoff.push(3, &waker), Ok(Pushed::Deferred));
        assert!(handoff.stranded(), "until the kick");
        handoff.kick();
        assert!(!handoff.stranded());
        handoff.wait_unparked(); // returns at once: kicked
        assert_eq!(waker.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn the_engine_thread_yields_to_an_open_session_and_gets_the_work_back() {
        let handoff = Handoff::new();
        let waker = Counter(Default::default());
        assert!(
            !handoff.try_yield_to_helpers(),
            "nobody helps: keep running"
        );
        handoff.begin_helping();
        assert_eq!(handoff.push(1, &waker), Ok(Pushed::Seen));
        assert!(
            !handoff.try_yield_to_helpers(),
            "messages queued: take them first"
        );
        let mut taken = Vec::new();
        handoff.take_all(&mut taken);
        assert!(
            handoff.try_yield_to_helpers(),
            "a session is open: the helper runs it"
        );
        assert_eq!(
            handoff.push(2, &waker),
            Ok(Pushed::Seen),
            "the helper will look"
        );
        handoff.take_all(&mut taken);
        handoff.end_helping();
        // Returns at once: the work in flight it left unparked it.
        handoff.wait_unparked();
        handoff.begin_helping();
        handoff.close();
        assert!(
            !handoff.try_yield_to_helpers(),
            "closed: the engine thread drains"
        );
    }
}

#[cfg(all(test, tailguard_loom))]
pub(crate) mod loom_tests {
    use super::*;
    use loom::sync::{Arc, Condvar};

    /// A level-triggered event like an eventfd (the one that ends io_uring's
    /// `submit_and_wait`, or the thread pool's condition flag): a wake before
    /// the wait is kept. The parker's loom model sleeps in one too.
    pub(crate) struct Event {
        signalled: Mutex<bool>,
        condvar: Condvar,
    }

    impl Wake for Event {
        fn wake(&self) {
            *self.signalled.lock().unwrap() = true;
            self.condvar.notify_one();
        }
    }

    impl Event {
        pub(crate) fn new() -> Self {
            Self {
                signalled: Mutex::new(false),
                condvar: Condvar::new(),
            }
        }

        /// Blocks until woken; consumes the wake.
        pub(crate) fn wait(&self) {
            let mut signalled = self.signalled.lock().unwrap();
            while !*signalled {
                signalled = self.condvar.wait(signalled).unwrap();
            }
            *signalled = false;
        }
    }

    /// Two submitters push one message each while the engine loops: take all,
    /// and sleep when empty. Expect the engine to receive both messages under
    /// every interleaving; a lost wake-up would leave it asleep forever, which
    /// loom reports as a deadlock.
    #[test]
    fn no_message_is_lost_and_the_engine_never_sleeps_through_one() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::new());
            let event = Arc::new(Event::new());
            let submitters: Vec<_> = (0..2)
                .map(|value| {
                    let (handoff, event) = (handoff.clone(), event.clone());
                    loom::thread::spawn(move || {
                        assert_eq!(handoff.push(value, &*event), Ok(Pushed::Seen))
                    })
                })
                .collect();
            let mut received = Vec::new();
            let mut batch = Vec::new();
            while received.len() < 2 {
                handoff.take_all(&mut batch);
                received.append(&mut batch);
                if received.len() < 2 && handoff.prepare_to_sleep() {
                    event.wait();
                    handoff.awake();
                }
            }
            for submitter in submitters {
                submitter.join().unwrap();
            }
            received.sort_unstable();
            assert_eq!(received, vec![0, 1]);
        });
    }

    /// The engine thread parks when idle. Two submitters push one message each
    /// to a possibly parked engine: one (spawned) runs the engine itself when
    /// its push was deferred and the engine's lock is free, else kicks; the
    /// other (the model's main thread) always kicks, as a future polled on
    /// another executor does. Every message must reach the engine under every
    /// interleaving: a message left queued while the engine thread parks for
    /// good is caught by `stranded` once both submitters are done (the final
    /// `close`, which ends the model, would otherwise hand it over).
    #[test]
    fn a_deferred_push_is_taken_by_its_submitter_or_kicked_to_the_engine_thread() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::new());
            let engine = Arc::new(Mutex::new(Vec::new()));
            let event = Arc::new(Event::new());
            let engine_thread = {
                let (handoff, engine) = (handoff.clone(), engine.clone());
                loom::thread::spawn(move || loop {
                    {
                        let mut received = engine.lock().unwrap();
                        let mut batch = Vec::new();
                        handoff.take_all(&mut batch);
                        received.append(&mut batch);
                        if received.len() == 2 {
                            return;
                        }
                        if !handoff.try_park() {
                            continue;
                        }
                    }
                    handoff.wait_unparked();
                })
            };
            let helper = {
                let (handoff, engine, event) = (handoff.clone(), engine.clone(), event.clone());
                loom::thread::spawn(move || {
                    if handoff.push(0, &*event).unwrap() == Pushed::Seen {
                        return;
                    }
                    match engine.try_lock() {
                        Ok(mut received) => {
                            handoff.begin_helping();
                            let mut batch = Vec::new();
                            handoff.take_all(&mut batch);
                            received.append(&mut batch);
                            handoff.leave_engine(false);
                            handoff.end_helping();
                        }
                        Err(_) => handoff.kick(),
                    }
                })
            };
            if handoff.push(1, &*event).unwrap() == Pushed::Deferred {
                handoff.kick();
            }
            helper.join().unwrap();
            assert!(!handoff.stranded(), "a message waits for a parked engine");
            // Unparks an idle engine thread for good: it exits once it holds both.
            handoff.close();
            engine_thread.join().unwrap();
            let mut received = engine.lock().unwrap().clone();
            received.sort_unstable();
            assert_eq!(received, vec![0, 1]);
        });
    }

    /// A completion queue's readiness as the engine thread's wait in the ring
    /// sees it: signalled by a wake (the eventfd read's completion), ended at
    /// once while signalled, and cleared only by a reap, which whoever holds
    /// the engine's lock does (so a runner beside the wait can take the wake
    /// meant for the engine thread).
    struct Ring {
        posted: Mutex<bool>,
        condvar: Condvar,
    }

    impl Wake for Ring {
        fn wake(&self) {
            *self.posted.lock().unwrap() = true;
            self.condvar.notify_all();
        }
    }

    impl Ring {
        fn wait(&self) {
            let mut posted = self.posted.lock().unwrap();
            while !*posted {
                posted = self.condvar.wait(posted).unwrap();
            }
        }

        fn reap(&self) {
            *self.posted.lock().unwrap() = false;
        }
    }

    /// The engine thread waits in the ring without the engine's lock while a
    /// submitter that finds the lock free pushes beside the wait and runs the
    /// engine itself (taking every queued message and reaping, the wake
    /// included), and another submitter pushes plainly. Then a last plain
    /// push (a stop) must reach the engine thread under every interleaving:
    /// a wake taken by the runner and not sent again would leave it waiting
    /// in the ring for good, which loom reports as a deadlock. Every message
    /// is taken exactly once. Three threads and four locks: explored with
    /// at most two preemptions per interleaving (loom's usual bound), which
    /// keeps the run to seconds.
    #[test]
    fn a_runner_beside_the_ring_wait_never_strands_the_engine_thread() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let handoff = Arc::new(Handoff::new());
            let ring = Arc::new(Ring {
                posted: Mutex::new(false),
                condvar: Condvar::new(),
            });
            let engine = Arc::new(Mutex::new(Vec::new()));
            let engine_thread = {
                let (handoff, ring, engine) = (handoff.clone(), ring.clone(), engine.clone());
                loom::thread::spawn(move || loop {
                    {
                        let mut received = engine.lock().unwrap();
                        let mut batch = Vec::new();
                        handoff.take_all(&mut batch);
                        ring.reap();
                        received.append(&mut batch);
                        if received.contains(&9) {
                            return;
                        }
                        if !handoff.prepare_ring_wait() {
                            continue;
                        }
                    }
                    ring.wait();
                    handoff.end_ring_wait();
                })
            };
            let runner = {
                let (handoff, ring, engine) = (handoff.clone(), ring.clone(), engine.clone());
                loom::thread::spawn(move || {
                    let message = match engine.try_lock() {
                        Ok(mut received) => match handoff.try_push_beside_ring_wait(0) {
                            Ok(()) => {
                                let mut batch = Vec::new();
                                handoff.take_all(&mut batch);
                                ring.reap();
                                received.append(&mut batch);
                                drop(received);
                                handoff.leave_engine_beside_ring_wait(false, &*ring);
                                return;
                            }
                            Err(message) => message,
                        },
                        Err(_) => 0,
                    };
                    assert_eq!(handoff.push(message, &*ring), Ok(Pushed::Seen));
                })
            };
            assert_eq!(handoff.push(1, &*ring), Ok(Pushed::Seen));
            runner.join().unwrap();
            assert_eq!(handoff.push(9, &*ring), Ok(Pushed::Seen));
            engine_thread.join().unwrap();
            let mut received = engine.lock().unwrap().clone();
            received.sort_unstable();
            assert_eq!(received, vec![0, 1, 9]);
        });
    }

    /// A thread holds the engine (a session open from the start) while the
    /// engine thread runs with one operation in flight: the engine thread
    /// either reaps it or yields to the session; the holder runs the engine
    /// if it is free, then ends its session. Under every interleaving the
    /// operation is reaped, and never left in flight with the engine thread
    /// parked once the session is over.
    #[test]
    fn an_engine_thread_that_yields_to_a_session_gets_the_work_back() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::new());
            let event = Arc::new(Event::new());
            // The engine's lock, guarding its operations in flight.
            let engine = Arc::new(Mutex::new(1_u32));
            handoff.begin_helping();
            let engine_thread = {
                let (handoff, engine) = (handoff.clone(), engine.clone());
                loom::thread::spawn(move || loop {
                    {
                        let mut in_flight = engine.lock().unwrap();
                        let mut stop = Vec::new();
                        handoff.take_all(&mut stop);
                        if !stop.is_empty() {
                            assert_eq!(*in_flight, 0, "the model stops once all is reaped");
                            return;
                        }
                        if *in_flight == 0 {
                            if !handoff.try_park() {
                                continue;
                            }
                        } else if !handoff.try_yield_to_helpers() {
                            *in_flight = 0;
                            continue;
                        }
                    }
                    handoff.wait_unparked();
                })
            };
            if let Ok(mut in_flight) = engine.try_lock() {
                *in_flight = 0;
                drop(in_flight);
                handoff.leave_engine(false);
            }
            handoff.end_helping();
            {
                let in_flight = *engine.lock().unwrap();
                let parked = handoff.queue.lock().unwrap().parked;
                assert!(
                    in_flight == 0 || !parked,
                    "work in flight, engine thread parked"
                );
            }
            // Waits for the reap, then stops the engine thread with a message.
            while *engine.lock().unwrap() != 0 {
                loom::thread::yield_now();
            }
            if handoff.push((), &*event).unwrap() == Pushed::Deferred {
                handoff.kick();
            }
            engine_thread.join().unwrap();
        });
    }
    /// A session is open and its thread does not run the engine again until
    /// a waiter's request is reaped (a thread holding the engine that then
    /// waits for the waiter); the engine thread has that request in flight
    /// and may yield to the session; the waiter found the engine busy and
    /// blocks (step 4 in the module docs). Under every interleaving the
    /// engine thread reaps the request: a waiter left blocked with the
    /// engine thread parked is a deadlock, which loom reports.
    #[test]
    fn a_blocked_waiter_is_served_whatever_session_is_open() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::<()>::new());
            let event = Arc::new(Event::new());
            // The engine's lock, guarding the waiter's operation in flight.
            let engine = Arc::new(Mutex::new(1_u32));
            // The waiter's parker: set, and notified, once its request is reaped.
            let reaped = Arc::new((Mutex::new(false), Condvar::new()));
            handoff.begin_helping();
            let engine_thread = {
                let (handoff, engine, reaped) = (handoff.clone(), engine.clone(), reaped.clone());
                loom::thread::spawn(move || loop {
                    {
                        let mut in_flight = engine.lock().unwrap();
                        let mut stop = Vec::new();
                        handoff.take_all(&mut stop);
                        if !stop.is_empty() {
                            return;
                        }
                        if *in_flight == 0 {
                            if !handoff.try_park() {
                                continue;
                            }
                        } else if !handoff.try_yield_to_helpers() {
                            *in_flight = 0;
                            *reaped.0.lock().unwrap() = true;
                            reaped.1.notify_one();
                            continue;
                        }
                    }
                    handoff.wait_unparked();
                })
            };
            let waiter = {
                let (handoff, reaped) = (handoff.clone(), reaped.clone());
                loom::thread::spawn(move || {
                    handoff.begin_blocked_wait();
                    let mut done = reaped.0.lock().unwrap();
                    while !*done {
                        done = reaped.1.wait(done).unwrap();
                    }
                    drop(done);
                    handoff.end_blocked_wait();
                })
            };
            // The session's thread waits for the waiter before it ends.
            waiter.join().unwrap();
            handoff.end_helping();
            assert_eq!(*engine.lock().unwrap(), 0);
            if handoff.push((), &*event).unwrap() == Pushed::Deferred {
                handoff.kick();
            }
            engine_thread.join().unwrap();
        });
    }
}
