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
//! Completing is cheap: the condition variable is signalled only when a thread is
//! actually blocked in [`IoFuture::wait`] (a flag under the slot's mutex), so an
//! `.await`ing caller costs the engine no system call. Signalling unconditionally
//! cost a `futex` call per request, half the engine's time in the NOP benchmark.

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
