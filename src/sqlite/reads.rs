//! Reads of rows on a file: jobs as the library's types, one by id or by
//! key, and pages of them (attempts are read in `history.rs`, outbox rows
//! in `outbox.rs`, the operator's reports in `reports.rs`). Writes no
//! table.

use rusqlite::{Connection, Row};

use crate::core::job::{Job, JobFilter};
use crate::error::Result;

/// The column list every `Job` read uses, in `Job::from_row` order.
pub(crate) const JOB_COLUMNS: &str = "id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms";

/// A `Job` from a row read with [`JOB_COLUMNS`].
pub(crate) fn job_from_row(r: &Row<'_>) -> rusqlite::Result<Job> {
    let state: String = r.get(5)?;
    Ok(Job {
        id: r.get(0)?,
        queue: r.get(1)?,
        kind: r.get(2)?,
        idempotency_key: r.get(3)?,
        payload: r.get(4)?,
        state: state.parse().map_err(|_| {
            rusqlite::Error::FromSqlConversionFailure(
                5,
                rusqlite::types::Type::Text,
                format!("bad job state {state:?}").into(),
            )
        })?,
        priority: r.get(6)?,
        run_at: r.get(7)?,
        attempts: r.get(8)?,
        max_attempts: r.get(9)?,
        abandoned: r.get(10)?,
        deliveries: r.get(11)?,
        last_error: r.get(12)?,
        created_at: r.get(13)?,
        finished_at: r.get(14)?,
        lease_owner: r.get(15)?,
        lease_expires_at: r.get(16)?,
        current_attempt: r.get(17)?,
        output: r.get(18)?,
        partition: r.get(19)?,
        timeout_ms: r.get(20)?,
    })
}

/// Reads one job by id.
pub(crate) fn job(conn: &Connection, id: i64) -> Result<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    let mut st = conn.prepare_cached(&sql)?;
    let mut rows = st.query_map([id], job_from_row)?;
    Ok(rows.next().transpose()?)
}

/// Reads one job by idempotency key.
pub(crate) fn job_by_key(conn: &Connection, key: &str) -> Result<Option<Job>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = ?1");
    let mut st = conn.prepare_cached(&sql)?;
    let mut rows = st.query_map([key], job_from_row)?;
    Ok(rows.next().transpose()?)
}

/// The filters of a job list. `+state`, `+kind`, `+queue`: never an
/// index, so every list walks the table by id from its cursor and stops at
/// its limit. A page then costs at most one scan of the table (the worst
/// case: a filter that matches almost nothing), and is never a sort of
/// every match, which an index on the filtered column would need to give
/// them in id order (a million queued jobs through `jobs_claim`).
const LIST_FILTER: &str = "(?1 IS NULL OR +state = ?1) AND (?2 IS NULL OR +kind = ?2) \
     AND (?3 IS NULL OR +queue = ?3) \
     AND (?5 IS NULL OR substr(idempotency_key, 1, length(?5)) = ?5)";

/// Lists jobs, newest first, from a cursor (see [`JobFilter`]).
pub(crate) fn jobs(conn: &Connection, f: &JobFilter) -> Result<Vec<Job>> {
    let (sql, cursor) = match (f.before, f.after) {
        (None, Some(after)) => (
            format!(
                "SELECT * FROM (SELECT {JOB_COLUMNS} FROM jobs WHERE {LIST_FILTER} AND id > ?6 \
                 ORDER BY id LIMIT ?4) ORDER BY id DESC"
            ),
            after,
        ),
        (before, _) => (
            format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE {LIST_FILTER} AND id < ?6 \
                 ORDER BY id DESC LIMIT ?4"
            ),
            before.unwrap_or(i64::MAX),
        ),
    };
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map(
        rusqlite::params![
            f.state.map(|s| s.as_str()),
            f.kind,
            f.queue,
            f.limit.unwrap_or(100),
            f.key_prefix,
            cursor
        ],
        job_from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Each job of `ids_json` (a JSON list) that still exists: its state and
/// the attempt it runs.
pub(crate) fn run_states(
    conn: &Connection,
    ids_json: &str,
) -> Result<Vec<(i64, crate::core::job::JobState, Option<i64>)>> {
    const SQL: &str = "SELECT id, state, current_attempt FROM jobs \
         WHERE id IN (SELECT value FROM json_each(?1))";
    let mut st = conn.prepare_cached(SQL)?;
    let rows = st.query_map([ids_json], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get(2)?))
    })?;
    rows.map(|r| {
        let (id, state, attempt) = r?;
        Ok((id, state.parse()?, attempt))
    })
    .collect()
}
