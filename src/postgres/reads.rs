//! Reads of rows on PostgreSQL: jobs as the library's types, one by id or
//! by key, and pages of them (attempts are read in `history.rs`, outbox
//! rows in `outbox.rs`, the operator's reports in `reports.rs`). Writes
//! no table.

use postgres::Row;

use super::conn::{all, bad, in_row, Col, PgConn};
use crate::core::job::{Job, JobFilter};
use crate::error::Result;

/// One job by id.
pub(crate) const JOB_BY_ID: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs WHERE id = $1";
/// One job by idempotency key.
pub(crate) const JOB_BY_KEY: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs WHERE idempotency_key = $1";
/// A page of jobs below a cursor (ids under `$6`), newest first: a walk
/// down the primary key that stops at the limit, filtered on the way.
const JOBS_BEFORE: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs \
     WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR kind = $2) \
     AND ($3::text IS NULL OR queue = $3) \
     AND ($5::text IS NULL OR left(idempotency_key, length($5)) = $5) AND id < $6 \
     ORDER BY id DESC LIMIT $4";
/// The page of jobs above a cursor (the `$4` ids just over `$6`), newest
/// first.
const JOBS_AFTER: &str = "SELECT * FROM (SELECT id, queue, kind, idempotency_key, payload, \
     state, priority, run_at, attempts, max_attempts, abandoned, deliveries, last_error, \
     created_at, finished_at, lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs \
     WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR kind = $2) \
     AND ($3::text IS NULL OR queue = $3) \
     AND ($5::text IS NULL OR left(idempotency_key, length($5)) = $5) AND id > $6 \
     ORDER BY id LIMIT $4) p ORDER BY id DESC";
/// A `jobs` row, in the column order of the reads above.
pub(crate) fn job_from_row(r: &Row) -> Result<Job> {
    in_row("jobs", r, |r| {
        let state: String = r.col(5)?;
        Ok(Job {
            id: r.col(0)?,
            queue: r.col(1)?,
            kind: r.col(2)?,
            idempotency_key: r.col(3)?,
            payload: r.col(4)?,
            state: state.parse().map_err(|_| bad("job state", &state))?,
            priority: r.col(6)?,
            run_at: r.col(7)?,
            attempts: r.col(8)?,
            max_attempts: r.col(9)?,
            abandoned: r.col(10)?,
            deliveries: r.col(11)?,
            last_error: r.col(12)?,
            created_at: r.col(13)?,
            finished_at: r.col(14)?,
            lease_owner: r.col(15)?,
            lease_expires_at: r.col(16)?,
            current_attempt: r.col(17)?,
            output: r.col(18)?,
            partition: r.col(19)?,
            timeout_ms: r.col(20)?,
        })
    })
}

pub(crate) fn job(c: &mut PgConn, id: i64) -> Result<Option<Job>> {
    c.query_opt(JOB_BY_ID, &[&id])?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

pub(crate) fn job_by_key(c: &mut PgConn, key: &str) -> Result<Option<Job>> {
    c.query_opt(JOB_BY_KEY, &[&key])?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

pub(crate) fn jobs(c: &mut PgConn, f: &JobFilter) -> Result<Vec<Job>> {
    let limit = i64::from(f.limit.unwrap_or(100));
    let state = f.state.map(|s| s.as_str());
    let (sql, cursor) = match (f.before, f.after) {
        (None, Some(after)) => (JOBS_AFTER, after),
        (before, _) => (JOBS_BEFORE, before.unwrap_or(i64::MAX)),
    };
    all(
        c.query(
            sql,
            &[&state, &f.kind, &f.queue, &limit, &f.key_prefix, &cursor],
        )?,
        job_from_row,
    )
}

/// Each job of `ids` that still exists: its state and the attempt it runs.
pub(crate) fn run_states(
    c: &mut PgConn,
    ids: &[i64],
) -> Result<Vec<(i64, crate::core::job::JobState, Option<i64>)>> {
    const SQL: &str = "SELECT id, state, current_attempt FROM jobs WHERE id = ANY($1)";
    c.query(SQL, &[&ids])?
        .iter()
        .map(|r| {
            let state: String = r.col(1)?;
            Ok((r.col(0)?, state.parse()?, r.col(2)?))
        })
        .collect()
}
