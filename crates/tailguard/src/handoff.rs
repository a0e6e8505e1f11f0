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
//! ## Sleeping without losing a wake-up
//!
//! When the engine has nothing to do it sleeps in the backend (io_uring's
//! `submit_and_wait`, or a condition variable for the thread pool). The protocol:
//!
//! 1. engine, under the lock: if the queue is empty, set `sleeping` (and go to
//!    sleep); otherwise take the messages first;
//! 2. submitter, under the same lock: push, and take the `sleeping` flag (clear
//!    it, remembering whether it was set); after unlocking, wake the engine
//!    through the backend's waker if it was;
//! 3. engine: sleeps; on return, clears the flag under the lock.
//!
//! Because the flag lives under the queue's mutex, the check-then-sleep and the
//! push-then-wake cannot interleave: either the engine's check sees the message,
//! or the submitter sees the flag and wakes it. A wake that arrives before the
//! engine actually blocks is not lost: the waker is level-triggered (an eventfd's
//! counter, a condition flag). Wakes go only to a sleeping engine, so a busy
//! engine costs a submitter one short critical section and no system call. (A
//! first version kept the flag in a separate atomic and relied on sequential
//! consistency between the flag and the mutex; the loom test below found a lost
//! wake-up in loom's memory model, and this version needs no such argument.)
//!
//! After [`Handoff::close`] pushes are refused, so nothing is accepted that the
//! engine would never see.

use crate::sync::Mutex;

/// Wakes a sleeping consumer (the backend's waker in production).
pub trait Wake: Send + Sync {
    /// Makes the consumer's current or next sleep return.
    fn wake(&self);
}

/// The handoff queue; see the module docs.
pub struct Handoff<T> {
    queue: Mutex<Queue<T>>,
}

struct Queue<T> {
    messages: Vec<T>,
    closed: bool,
    sleeping: bool,
}

/// A push was refused because the engine is shutting down.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed<T>(pub T);

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
                sleeping: false,
            }),
        }
    }

    /// Appends a message and wakes the consumer if it sleeps.
    pub fn push(&self, message: T, waker: &dyn Wake) -> Result<(), Closed<T>> {
        let was_sleeping = {
            let mut queue = self.queue.lock().expect("handoff lock poisoned");
            if queue.closed {
                return Err(Closed(message));
            }
            queue.messages.push(message);
            std::mem::replace(&mut queue.sleeping, false)
        };
        if was_sleeping {
            waker.wake();
        }
        Ok(())
    }

    /// Takes every queued message at once, leaving `spare` (emptied) in its place.
    pub fn take_all(&self, spare: &mut Vec<T>) {
        spare.clear();
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        std::mem::swap(&mut queue.messages, spare);
    }

    /// Step 1 of going to sleep: announces the intent and returns whether the
    /// consumer may sleep (`false`: messages arrived, take them first).
    pub fn prepare_to_sleep(&self) -> bool {
        let mut queue = self.queue.lock().expect("handoff lock poisoned");
        queue.sleeping = queue.messages.is_empty();
        queue.sleeping
    }

    /// Step 3: the consumer is awake again.
    pub fn awake(&self) {
        self.queue.lock().expect("handoff lock poisoned").sleeping = false;
    }

    /// Refuses every later push; messages already queued stay for `take_all`.
    pub fn close(&self) {
        self.queue.lock().expect("handoff lock poisoned").closed = true;
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
        handoff.push(1, &waker).unwrap();
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
        handoff.push(2, &waker).unwrap();
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
}

#[cfg(all(test, tailguard_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::{Arc, Condvar};

    /// A level-triggered event like an eventfd: a wake before the wait is kept.
    struct Event {
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
        fn wait(&self) {
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
            let event = Arc::new(Event {
                signalled: Mutex::new(false),
                condvar: Condvar::new(),
            });
            let submitters: Vec<_> = (0..2)
                .map(|value| {
                    let (handoff, event) = (handoff.clone(), event.clone());
                    loom::thread::spawn(move || handoff.push(value, &*event).unwrap())
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
}
