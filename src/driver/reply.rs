//! The answer of a write sent from async code: [`WriteFuture`], the future
//! the caller awaits, and [`ReplyTx`], the slot's sending side that the
//! thread answering the write (the writer or the syncer) fills. Built on std
//! alone (a mutex, the answer and the task's `Waker`), so it works on any
//! executor and knows nothing of the backend that answers it. Writes no
//! table.

use crate::core::sync::lock;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crossbeam_channel::Sender;

use crate::error::{Error, Result};

/// The shared slot: the answer once given, and the waker of the task that
/// polled last.
struct Slot<T> {
    state: Mutex<State<T>>,
    /// Live [`ReplyTx`]s; when the last goes without an answer, the write
    /// was dropped unanswered (the writer stopped, or it panicked).
    senders: AtomicUsize,
}

struct State<T> {
    value: Option<T>,
    closed: bool,
    waker: Option<Waker>,
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // Held only to move a value or a waker in or out: a panic cannot
        // leave it half-changed.
        lock(&self.state)
    }
}

/// The sending side of a [`WriteFuture`]: whoever answers the write puts
/// the answer here, which wakes the awaiting task. Clones share the slot;
/// the first answer wins.
pub(crate) struct ReplyTx<T>(Arc<Slot<T>>);

impl<T> ReplyTx<T> {
    /// Delivers the answer and wakes the task awaiting it, if any (outside
    /// the slot's lock: a waker may run executor code). Nobody awaiting (the
    /// future was dropped) is no matter: the answer is dropped with the slot.
    pub(crate) fn put(&self, v: T) {
        let waker = {
            let mut s = self.0.lock();
            // Answered already (and perhaps taken by the future).
            if s.value.is_some() || s.closed {
                return;
            }
            s.value = Some(v);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Clone for ReplyTx<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::AcqRel);
        ReplyTx(self.0.clone())
    }
}

impl<T> Drop for ReplyTx<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            let waker = {
                let mut s = self.0.lock();
                s.closed = true;
                s.waker.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

/// A write sent to the queue from async code, as a future: it resolves to
/// the write's answer once the thread that applies it has answered (for an
/// enqueue with `synchronous=FULL`: once its commit is durable). Returned by
/// [`crate::queue::Queue::enqueue_async`], [`crate::queue::Queue::enqueue_many_async`] and
/// [`crate::queue::Queue::write_async`].
///
/// Polling it never blocks the executor's thread: it looks at the answer
/// and, if there is none yet, leaves its task's waker for the answering
/// thread. It is `Send + 'static`, so it can be spawned, and needs no
/// particular runtime.
///
/// The write is sent when the method returns, not when the future is first
/// polled. **Dropping the future does not withdraw the write**: it is
/// applied all the same and may commit. To learn the id of a job whose
/// future was dropped, enqueue it again with the same key: the answer is
/// `Duplicate(id)` if it committed, and it is always safe.
#[must_use = "the write is sent already; await the future to learn its answer"]
pub struct WriteFuture<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    /// Answered before anything was sent (input refused), until polled.
    Ready(Option<Result<T>>),
    /// Waiting for the answering thread.
    Waiting(Arc<Slot<Result<T>>>),
}

impl<T> WriteFuture<T> {
    /// A future and the sending side that answers it.
    pub(crate) fn channel() -> (WriteFuture<T>, ReplyTx<Result<T>>) {
        let slot = Arc::new(Slot {
            state: Mutex::new(State {
                value: None,
                closed: false,
                waker: None,
            }),
            senders: AtomicUsize::new(1),
        });
        (
            WriteFuture {
                inner: Inner::Waiting(slot.clone()),
            },
            ReplyTx(slot),
        )
    }

    /// A future that resolves to `r` at its first poll (nothing was sent).
    pub(crate) fn ready(r: Result<T>) -> WriteFuture<T> {
        WriteFuture {
            inner: Inner::Ready(Some(r)),
        }
    }
}

// The answer is never pinned: it is moved out whole.
impl<T> Unpin for WriteFuture<T> {}

impl<T> Future for WriteFuture<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match &mut self.get_mut().inner {
            Inner::Ready(r) => Poll::Ready(r.take().unwrap_or_else(|| Err(polled_again()))),
            Inner::Waiting(slot) => {
                let mut s = slot.lock();
                if let Some(v) = s.value.take() {
                    // Marks it taken: a poll after completion errs, not hangs.
                    s.closed = true;
                    return Poll::Ready(v);
                }
                if s.closed {
                    return Poll::Ready(Err(unanswered()));
                }
                match &mut s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    w => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl<T> std::fmt::Debug for WriteFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.inner {
            Inner::Ready(_) => "ready",
            Inner::Waiting(slot) if slot.lock().value.is_some() => "answered",
            Inner::Waiting(_) => "waiting",
        };
        f.debug_struct("WriteFuture")
            .field("state", &state)
            .finish()
    }
}

/// Every sender went without an answer: the operation was dropped (the
/// writer stopped, or the operation panicked before it could be answered).
fn unanswered() -> Error {
    Error::Internal("the write operation panicked or the writer stopped".into())
}

fn polled_again() -> Error {
    Error::Internal("a WriteFuture was polled after it completed".into())
}

/// Where an operation's answer goes: a channel (pipelined callers select
/// over several), a one-shot slot (a caller blocked on
/// this one answer) or a [`ReplyTx`] (an async caller's future).
pub(crate) trait Sink<T>: Clone + Send + 'static {
    /// Delivers the answer (each operation is answered once).
    fn put(&self, v: T);
}

impl<T: Send + 'static> Sink<T> for Sender<T> {
    fn put(&self, v: T) {
        let _ = self.send(v);
    }
}

impl<T: Send + 'static> Sink<T> for ReplyTx<T> {
    fn put(&self, v: T) {
        ReplyTx::put(self, v)
    }
}

/// Where an async write's answer goes: the caller's future, after waking
/// this process's workers if the write created a job — on the thread that
/// answers, so the workers do not wait for the caller's executor to poll.
pub(crate) struct Deliver<R> {
    pub(crate) tx: ReplyTx<Result<R>>,
    pub(crate) wake: Arc<crate::driver::wake::Wakers>,
}

impl<R> Clone for Deliver<R> {
    fn clone(&self) -> Self {
        Deliver {
            tx: self.tx.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<R: Send + 'static> Sink<Result<(R, bool)>> for Deliver<R> {
    fn put(&self, answer: Result<(R, bool)>) {
        let answer = answer.map(|(r, created)| {
            if created {
                self.wake.wake();
            }
            r
        });
        self.tx.put(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Wake;
    use std::time::Duration;

    /// A waker that records being woken.
    #[derive(Default)]
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn poll<T>(f: &mut WriteFuture<T>, flag: &Arc<Flag>) -> Poll<Result<T>> {
        let waker = Waker::from(flag.clone());
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn an_answer_from_another_thread_wakes_the_task_and_resolves_the_future() {
        let (mut fut, tx) = WriteFuture::<i32>::channel();
        let flag = Arc::new(Flag::default());
        assert!(poll(&mut fut, &flag).is_pending());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.put(Ok(7));
        });
        t.join().unwrap();
        assert!(flag.0.load(Ordering::SeqCst), "the answer woke no task");
        assert!(matches!(poll(&mut fut, &flag), Poll::Ready(Ok(7))));
        // Polled again after completion: an error, never a hang.
        assert!(matches!(
            poll(&mut fut, &flag),
            Poll::Ready(Err(Error::Internal(_)))
        ));
    }

    #[test]
    fn a_write_dropped_unanswered_resolves_to_an_error_not_a_hang() {
        let (mut fut, tx) = WriteFuture::<i32>::channel();
        let reject = tx.clone();
        let flag = Arc::new(Flag::default());
        assert!(poll(&mut fut, &flag).is_pending());
        drop(tx);
        assert!(poll(&mut fut, &flag).is_pending(), "one sender is left");
        drop(reject);
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(matches!(
            poll(&mut fut, &flag),
            Poll::Ready(Err(Error::Internal(_)))
        ));
    }

    #[test]
    fn the_first_answer_wins_and_a_dropped_future_lets_the_answer_go() {
        let (mut fut, tx) = WriteFuture::<i32>::channel();
        tx.put(Ok(1));
        tx.clone().put(Ok(2));
        let flag = Arc::new(Flag::default());
        assert!(matches!(poll(&mut fut, &flag), Poll::Ready(Ok(1))));
        let (fut, tx) = WriteFuture::<i32>::channel();
        drop(fut);
        tx.put(Ok(3));
    }

    #[test]
    fn the_future_is_send_and_static() {
        fn spawnable<F: Future + Send + 'static>(_: &F) {}
        let (fut, _tx) = WriteFuture::<crate::core::job::Enqueued>::channel();
        spawnable(&fut);
        spawnable(&WriteFuture::<Vec<crate::core::job::Enqueued>>::ready(Ok(
            vec![],
        )));
    }
}
