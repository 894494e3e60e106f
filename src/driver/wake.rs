//! Wake-ups inside a process: an in-process enqueue (or a run that wrote
//! outbox rows) wakes the idle claimers of every runtime on the queue at
//! once, instead of their next poll. Writes no table.

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
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        rx
    }

    /// Wakes every subscriber.
    pub(crate) fn wake(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|tx| {
                !matches!(
                    tx.try_send(()),
                    Err(crossbeam_channel::TrySendError::Disconnected(_))
                )
            });
    }
}
