//! The runtime, a file per behaviour it pins: which jobs it claims and on
//! which threads, the ledger transaction, duplicates, outcomes and retries,
//! prepare outside the write lock, wake-up and polling, leases and fencing,
//! the attempt history, graceful stop, abandoned runs and poison pills.
//!
//! The helpers the files share live here: enqueueing a job, reading its
//! attempt outcomes, the application's own `effects` table and the check
//! that no transaction is left open.

mod abandoned;
mod attempts;
mod claims;
mod duplicates;
mod leases;
mod ledger;
mod outcomes;
mod prepare;
mod shutdown;
mod wakeup;

use std::time::Duration;

use litejob::{AttemptOutcome, NewJob, Queue};
use serde_json::json;

use crate::support::TestDb;

/// Enqueues a job of `kind` under `key`; returns its id.
fn enqueue(q: &Queue, kind: &str, key: &str) -> i64 {
    q.enqueue(NewJob::new(kind, key, &json!({ "key": key })))
        .unwrap()
        .id()
}

/// The outcomes of job `id`'s attempts, oldest first.
fn outcomes(q: &Queue, id: i64) -> Vec<AttemptOutcome> {
    q.attempts(id).unwrap().iter().map(|a| a.outcome).collect()
}

/// The application's own table, which [`record`] writes.
fn app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS effects (key TEXT, note TEXT)")?;
        Ok(())
    })
    .unwrap();
}

/// The handler's own SQL: one row per applied run.
fn record(tx: &litejob::JobTx<'_>, note: &str) -> Result<(), litejob::HandlerError> {
    tx.execute(
        "INSERT INTO effects (key, note) VALUES (?1, ?2)",
        (&tx.job().key, note),
    )?;
    Ok(())
}

/// No connection of the queue is left inside a transaction, and no write
/// lock is held: another connection can take it at once.
fn check_no_open_transaction(db: &TestDb, q: &Queue) {
    for _ in 0..8 {
        assert!(q.read(|c| Ok(c.is_autocommit())).unwrap());
    }
    let c = db.sql();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    c.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
}
