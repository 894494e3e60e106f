//! A runtime's own prune ([`Retention`]): the `litejob-retention` thread
//! runs a pass at the start and then one every `every`, each an
//! [`Admin::prune`] in small batches, until the runtime stops (between two
//! batches at the latest). Every runtime on a queue runs its own, no
//! leader: a row two passes pick at once is deleted once (the file's
//! writes are serialized; PostgreSQL's passes skip the rows another
//! holds). A failed pass (a busy lock, a full disk, a lost connection) is
//! logged and the next one tries again. Writes `jobs`, `attempts`,
//! `outbox` and `processed_jobs` through [`Admin::prune`] only.

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use crate::core::reports::prune::Retention;
use crate::queue::admin::Admin;

/// Runs passes until the runtime stops (`stop` disconnects).
pub(crate) fn retention_loop(admin: Admin, keep: Retention, stop: Receiver<()>) {
    let opts = keep.prune_options();
    let going = || matches!(stop.try_recv(), Err(TryRecvError::Empty));
    loop {
        match admin.prune_while(&opts, &going) {
            Ok(r) if r.jobs + r.outbox + r.ledger > 0 => log::info!(
                target: "litejob",
                "retention: deleted {} jobs ({} attempts), {} outbox rows, {} ledger rows in {} transactions",
                r.jobs, r.job_attempts, r.outbox, r.ledger, r.transactions
            ),
            Ok(_) => {}
            Err(e) => {
                log::warn!(target: "litejob", "retention: a pass failed, the next one tries again: {e}")
            }
        }
        match stop.recv_timeout(keep.every) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}
