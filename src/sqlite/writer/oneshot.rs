//! The reply slot of a caller blocked on one answer ([`OneShot`]).

use crate::core::sync::{lock, wait};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::driver::reply::Sink;

/// A one-answer slot for a caller blocked in [`super::Writer::run`]. Its
/// wait goes straight to the futex: a channel's receive spins and yields
/// first, and with many producers waiting for one fsync those yields take
/// the cores from the writer and the syncer (docs/performance-notes.md has
/// the figures).
pub(super) struct OneShot<T> {
    slot: Mutex<Option<T>>,
    ready: Condvar,
    /// Live [`OneShotTx`]s; at 0 with no answer, the operation was dropped
    /// unanswered (the writer stopped).
    senders: AtomicUsize,
}

/// The sending side of a [`OneShot`].
pub(super) struct OneShotTx<T>(Arc<OneShot<T>>);

impl<T> OneShot<T> {
    pub(super) fn new() -> (Arc<OneShot<T>>, OneShotTx<T>) {
        let shot = Arc::new(OneShot {
            slot: Mutex::new(None),
            ready: Condvar::new(),
            senders: AtomicUsize::new(1),
        });
        (shot.clone(), OneShotTx(shot))
    }

    /// The answer, or `None` when every sender was dropped without one.
    pub(super) fn recv(&self) -> Option<T> {
        let mut slot = lock(&self.slot);
        loop {
            if let Some(v) = slot.take() {
                return Some(v);
            }
            if self.senders.load(Ordering::Acquire) == 0 {
                return None;
            }
            slot = wait(&self.ready, slot);
        }
    }
}

impl<T> Clone for OneShotTx<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::AcqRel);
        OneShotTx(self.0.clone())
    }
}

impl<T> Drop for OneShotTx<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Taken under the lock, so a receiver between its check and its
            // wait cannot miss this wake-up.
            let _slot = lock(&self.0.slot);
            self.0.ready.notify_all();
        }
    }
}

impl<T: Send + 'static> Sink<T> for OneShotTx<T> {
    fn put(&self, v: T) {
        let mut slot = lock(&self.0.slot);
        if slot.is_none() {
            *slot = Some(v);
        }
        drop(slot);
        self.0.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_blocked_caller_gets_its_answer_or_an_error_never_a_hang() {
        // Answered from another thread, after the caller began to wait.
        let (rx, tx) = OneShot::new();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.put(7)
        });
        assert_eq!(rx.recv(), Some(7));
        t.join().unwrap();
        // Every sender (the run and the reject of an operation) dropped
        // unanswered, as when the writer stops with the operation queued:
        // the caller learns it instead of waiting forever.
        let (rx, tx) = OneShot::<i32>::new();
        let reject = tx.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
            drop(reject);
        });
        assert_eq!(rx.recv(), None);
        t.join().unwrap();
        assert!(matches!(
            super::super::answer::<()>(None),
            Err(crate::error::Error::Internal(_))
        ));
    }
}
