//! What a copy of a queue between two databases moved ([`CopyReport`]).
//! The copied tables themselves are described in `driver::copy`. Writes no
//! table.

use serde::Serialize;

/// What a copy moved: rows per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CopyReport {
    /// Rows of `jobs`.
    pub jobs: u64,
    /// Rows of `processed_jobs` (the ledger).
    pub processed_jobs: u64,
    /// Rows of `outbox`.
    pub outbox: u64,
    /// Rows of `attempts`.
    pub attempts: u64,
    /// Rows of `schedules`.
    pub schedules: u64,
    /// Rows of `queues` (the queue controls).
    pub queues: u64,
    /// Rows of `queue_starts` (the starts inside each rate's window).
    pub queue_starts: u64,
    /// Rows of `job_dependencies` (the edges of workflows, between the
    /// copied jobs' ids).
    pub job_dependencies: u64,
    /// Rows of `job_steps` (the recorded results of durable steps).
    pub job_steps: u64,
}
