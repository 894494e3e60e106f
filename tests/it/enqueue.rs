//! The producer, a file per behaviour it pins: dedup at the door (threads
//! and processes), options stored right, batches and transactional enqueue
//! all-or-nothing, bad input refused with nothing written, an enqueue
//! not starved by back-to-back writes, and enqueues from async code that
//! never block their executor.
//!
//! Shared here: counting the file's jobs.

mod batches;
mod dedup;
mod fairness;
mod from_async;
mod input;
mod options;
mod transactions;

use crate::support::TestDb;

/// How many job rows the file holds.
fn jobs(db: &TestDb) -> i64 {
    db.count("SELECT count(*) FROM jobs")
}
