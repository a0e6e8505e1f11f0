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

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

enum State<T> {
    Pending(Option<Waker>),
    Ready(T),
    Taken,
    Abandoned,
}

/// A one-shot slot; see the module docs.
pub(crate) struct Slot<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

impl<T> Slot<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::Pending(None)),
            ready: Condvar::new(),
        })
    }

    /// Delivers the value. Returns `false` (and drops it) if the waiter is gone.
    pub(crate) fn complete(&self, value: T) -> bool {
        let mut state = self.state.lock().expect("slot lock poisoned");
        match std::mem::replace(&mut *state, State::Taken) {
            State::Pending(waker) => {
                *state = State::Ready(value);
                drop(state);
                self.ready.notify_all();
                if let Some(waker) = waker {
                    waker.wake();
                }
                true
            }
            State::Abandoned => {
                *state = State::Abandoned;
                false
            }
            State::Ready(_) | State::Taken => {
                unreachable!("a request completed twice")
            }
        }
    }

    fn poll(&self, context: &mut Context<'_>) -> Poll<T> {
        let mut state = self.state.lock().expect("slot lock poisoned");
        match std::mem::replace(&mut *state, State::Taken) {
            State::Ready(value) => Poll::Ready(value),
            State::Pending(_) => {
                *state = State::Pending(Some(context.waker().clone()));
                Poll::Pending
            }
            State::Taken | State::Abandoned => panic!("IoFuture polled after completion"),
        }
    }

    fn wait(&self) -> T {
        let mut state = self.state.lock().expect("slot lock poisoned");
        loop {
            match std::mem::replace(&mut *state, State::Taken) {
                State::Ready(value) => return value,
                pending @ State::Pending(_) => {
                    *state = pending;
                    state = self.ready.wait(state).expect("slot lock poisoned");
                }
                State::Taken | State::Abandoned => panic!("IoFuture waited after completion"),
            }
        }
    }

    fn abandon(&self) {
        let mut state = self.state.lock().expect("slot lock poisoned");
        if matches!(*state, State::Pending(_)) {
            *state = State::Abandoned;
        }
    }
}

/// The result of a request, as a future (`.await` it from any runtime) or a
/// blocking call ([`IoFuture::wait`]).
#[must_use = "an IoFuture does nothing unless awaited or waited on; dropping it abandons the result"]
pub struct IoFuture<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    /// Refused before submission (bad alignment, shut down): ready at once.
    Immediate(Option<T>),
    Slot(Arc<Slot<T>>, bool),
}

impl<T> IoFuture<T> {
    pub(crate) fn pending(slot: Arc<Slot<T>>) -> Self {
        Self {
            inner: Inner::Slot(slot, false),
        }
    }

    pub(crate) fn ready(value: T) -> Self {
        Self {
            inner: Inner::Immediate(Some(value)),
        }
    }

    /// Blocks the current thread until the request completes. For plain threads;
    /// in async code, `.await` the future instead.
    pub fn wait(mut self) -> T {
        match &mut self.inner {
            Inner::Immediate(value) => value.take().expect("IoFuture used after completion"),
            Inner::Slot(slot, done) => {
                *done = true;
                slot.wait()
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
                Poll::Ready(value.take().expect("IoFuture polled after completion"))
            }
            Inner::Slot(slot, done) => {
                let poll = slot.poll(context);
                *done = poll.is_ready();
                poll
            }
        }
    }
}

impl<T> Drop for IoFuture<T> {
    fn drop(&mut self) {
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
        let slot = Slot::new();
        let future = IoFuture::pending(slot.clone());
        let engine = std::thread::spawn(move || slot.complete(7));
        assert_eq!(future.wait(), 7);
        assert!(engine.join().unwrap());
    }

    #[test]
    fn an_abandoned_slot_drops_the_value() {
        let slot: Arc<Slot<Vec<u8>>> = Slot::new();
        drop(IoFuture::pending(slot.clone()));
        assert!(!slot.complete(vec![1, 2, 3]));
    }

    #[test]
    fn immediate_futures_are_ready() {
        assert_eq!(IoFuture::ready(3).wait(), 3);
    }
}
