//! The runtime, a file per behaviour it pins, on both backends unless the
//! behaviour is the file's own: which jobs it claims and on which threads,
//! the ledger transaction, duplicates, outcomes and retries, prepare
//! outside the write lock, wake-up and polling, leases and fencing, the
//! attempt history, graceful stop, abandoned runs and poison pills.
//!
//! The helpers the files share live here: enqueueing a job, reading its
//! attempt outcomes, and the check that no transaction is left open. The
//! handlers write the application's own table through
//! [`crate::backends::AppTx::record`].

mod abandoned;
mod attempts;
mod claims;
mod drain;
mod duplicates;
mod leases;
mod ledger;
mod outcomes;
mod prepare;
mod retention;
mod shutdown;
mod snooze;
mod steps;
mod wakeup;
mod workflows;

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{AttemptOutcome, NewJob};
use serde_json::json;

use crate::backends::{Engine, TestQueue};

/// Enqueues a job of `kind` under `key`; returns its id.
fn enqueue(q: &AnyQueue, kind: &str, key: &str) -> i64 {
    q.enqueue(NewJob::new(kind, key, &json!({ "key": key })))
        .unwrap()
        .id()
}

/// The outcomes of job `id`'s attempts, oldest first.
fn outcomes(q: &AnyQueue, id: i64) -> Vec<AttemptOutcome> {
    q.attempts(id).unwrap().iter().map(|a| a.outcome).collect()
}

/// No connection of the queue is left inside a transaction, and no write
/// lock is held: another connection takes it at once. On PostgreSQL: no
/// transaction holds a lock on any of the queue's tables (a transaction
/// left open after reading one would).
fn check_no_open_transaction(q: &TestQueue, queue: &AnyQueue) {
    match q.engine {
        Engine::Sqlite => {
            for _ in 0..8 {
                assert!(queue.file().read(|c| Ok(c.is_autocommit())).unwrap());
            }
            let c = rusqlite::Connection::open(&q.location).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            c.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
        }
        Engine::Postgres => q.exec(
            "BEGIN; LOCK TABLE jobs, attempts, processed_jobs, outbox \
             IN ACCESS EXCLUSIVE MODE NOWAIT; COMMIT",
        ),
    }
}
