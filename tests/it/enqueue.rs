//! The producer, a file per behaviour it pins, on both backends unless the
//! behaviour is the file's own: dedup at the door (threads, queues and
//! processes), options stored right, batches and transactional enqueue
//! all-or-nothing, bad input refused with nothing written, an enqueue not
//! starved by back-to-back writes on the file, and enqueues from async code
//! that never block their executor.
//!
//! Shared here: counting the queue's jobs.

mod batches;
mod dedup;
mod fairness;
mod from_async;
mod input;
mod options;
mod transactions;

use crate::backends::TestQueue;

/// How many job rows the queue holds.
fn jobs(q: &TestQueue) -> i64 {
    q.count("SELECT count(*) FROM jobs")
}
