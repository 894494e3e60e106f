//! Wake-ups inside a process: an in-process enqueue (or a run that wrote
//! outbox rows) wakes the idle claimers of every runtime on the queue at
//! once, instead of their next poll. Writes no table.

use crate::core::sync::lock;
use crossbeam_channel::{Receiver, Sender};

/// The wake-up channels of a queue's runtimes. Each runtime subscribes its
/// own channel (capacity one: a pending wake-up is enough) and a wake-up
/// goes to all of them: with one shared channel, two runtimes on one queue
/// (say, one per kind) swallowed each other's wake-ups and waited for the
/// next poll. A runtime drops its receiver when it stops; its sender is
/// pruned at the next wake-up.
#[derive(Default)]
pub(crate) struct Wakers(std::sync::Mutex<Vec<Sender<()>>>);

impl Wakers {
    /// A new channel that every later [`Wakers::wake`] reaches.
    pub(crate) fn subscribe(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        lock(&self.0).push(tx);
        rx
    }

    /// Wakes every subscriber.
    pub(crate) fn wake(&self) {
        lock(&self.0).retain(|tx| {
            !matches!(
                tx.try_send(()),
                Err(crossbeam_channel::TrySendError::Disconnected(_))
            )
        });
    }
}

/// The callers of [`Queue::wait`](crate::Queue::wait) in this process, told
/// when a run of a runtime on the queue (or a repair) ended jobs: each
/// looks again at once, instead of at its next poll. A waiter leaves the
/// list when its [`Waiting`] is dropped, so a process that waits often
/// and never runs a job keeps no dead entries.
#[derive(Default)]
pub(crate) struct Waiters {
    next: std::sync::atomic::AtomicU64,
    list: std::sync::Mutex<Vec<(u64, Sender<()>)>>,
}

/// One waiter's place in [`Waiters`]: its wake-ups, until dropped.
pub(crate) struct Waiting<'w> {
    waiters: &'w Waiters,
    id: u64,
    pub(crate) rx: Receiver<()>,
}

impl Waiters {
    /// A place in the list.
    pub(crate) fn join(&self) -> Waiting<'_> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.lock().push((id, tx));
        Waiting {
            waiters: self,
            id,
            rx,
        }
    }

    /// Wakes every waiter; costs a lock and nothing else when none waits.
    pub(crate) fn wake(&self) {
        for (_, tx) in self.lock().iter() {
            let _ = tx.try_send(());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Sender<()>)>> {
        lock(&self.list)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waiters.lock().retain(|(id, _)| *id != self.id);
    }
}
