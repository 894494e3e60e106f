//! The attempt history on PostgreSQL: one row per run of a job or an
//! effect. Its rows are written by the statements that start and end a
//! run, each one with the job's or the outbox row's change (`claim.rs`,
//! `run.rs`, `leases.rs`, `outbox.rs`, `admin.rs`); here are its reads.
//! Writes no table.

use postgres::Row;

use super::conn::{all, bad, in_row, Col, PgConn};
use crate::core::attempt::{Attempt, AttemptOutcome};
use crate::error::Result;

/// Every attempt of a job, oldest first.
pub(crate) const OF_JOB: &str = "SELECT id, job_id, outbox_id, attempt, key, worker, started_at, \
     finished_at, outcome, error FROM attempts WHERE job_id = $1 ORDER BY id";
/// Every attempt of an outbox row, oldest first.
pub(crate) const OF_OUTBOX: &str = "SELECT id, job_id, outbox_id, attempt, key, worker, \
     started_at, finished_at, outcome, error FROM attempts WHERE outbox_id = $1 ORDER BY id";

/// An `attempts` row, in the column order of the reads above.
pub(crate) fn from_row(r: &Row) -> Result<Attempt> {
    in_row("attempts", r, |r| {
        let outcome: String = r.col(8)?;
        Ok(Attempt {
            id: r.col(0)?,
            job_id: r.col(1)?,
            outbox_id: r.col(2)?,
            attempt: r.col(3)?,
            key: r.col(4)?,
            worker: r.col(5)?,
            started_at: r.col(6)?,
            finished_at: r.col(7)?,
            outcome: AttemptOutcome::parse(&outcome).ok_or_else(|| bad("outcome", &outcome))?,
            error: r.col(9)?,
        })
    })
}

/// Every attempt of a job, oldest first.
pub(crate) fn for_job(c: &mut PgConn, job_id: i64) -> Result<Vec<Attempt>> {
    all(c.query(OF_JOB, &[&job_id])?, from_row)
}

/// Every attempt of an outbox row, oldest first.
pub(crate) fn for_outbox(c: &mut PgConn, outbox_id: i64) -> Result<Vec<Attempt>> {
    all(c.query(OF_OUTBOX, &[&outbox_id])?, from_row)
}
