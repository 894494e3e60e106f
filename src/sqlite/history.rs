//! The attempt history: one row per run of a job or an effect, written when
//! the run starts and finished when it ends. Writes `attempts` only.

use rusqlite::{CachedStatement, Connection, Row};

use crate::core::attempt::{cap_error, Attempt, AttemptOutcome};
use crate::core::time::Millis;
use crate::error::{Error, Result};

const COLUMNS: &str =
    "id, job_id, outbox_id, attempt, key, worker, started_at, finished_at, outcome, error";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Attempt> {
    let outcome: String = r.get(8)?;
    Ok(Attempt {
        id: r.get(0)?,
        job_id: r.get(1)?,
        outbox_id: r.get(2)?,
        attempt: r.get(3)?,
        key: r.get(4)?,
        worker: r.get(5)?,
        started_at: r.get(6)?,
        finished_at: r.get(7)?,
        outcome: AttemptOutcome::parse(&outcome).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                8,
                rusqlite::types::Type::Text,
                format!("bad outcome {outcome:?}").into(),
            )
        })?,
        error: r.get(9)?,
    })
}

/// What an attempt is a run of: a job, or an outbox row's effect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RunOf {
    Job(i64),
    Effect(i64),
}

/// The statement [`start`] runs: a caller that starts many runs in one
/// operation (a claim) takes it from the connection's cache once.
pub(crate) fn start_statement(conn: &Connection) -> Result<CachedStatement<'_>> {
    // One row, VALUES: an INSERT … SELECT would make SQLite keep a statement
    // journal (a copy of every page it touches) for what is one row.
    const SQL: &str = "INSERT INTO attempts (job_id, outbox_id, attempt, key, worker, started_at) \
                       VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    Ok(conn.prepare_cached(SQL)?)
}

/// Records the start of attempt number `attempt` of `of` with `st`, the
/// statement from [`start_statement`]; returns the attempt id. The caller
/// has checked, under the same write lock, that the run is its to start
/// (the job's claim, the outbox row's lease).
pub(crate) fn start(
    st: &mut CachedStatement<'_>,
    conn: &Connection,
    of: RunOf,
    attempt: i64,
    key: &str,
    worker: &str,
    now: Millis,
) -> Result<i64> {
    let (job_id, outbox_id) = match of {
        RunOf::Job(id) => (Some(id), None),
        RunOf::Effect(id) => (None, Some(id)),
    };
    st.execute(rusqlite::params![
        job_id, outbox_id, attempt, key, worker, now
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Records how a run ended. Only a run still marked `running` is changed, so
/// the reaper and a late finisher cannot both write an outcome.
pub(crate) fn finish(
    conn: &Connection,
    attempt_id: i64,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: Millis,
) -> Result<bool> {
    if outcome == AttemptOutcome::Running {
        return Err(Error::Internal("finish with outcome running".into()));
    }
    const SQL: &str = "UPDATE attempts SET outcome = ?2, error = ?3, finished_at = ?4 \
                       WHERE id = ?1 AND outcome = 'running'";
    let error = error.map(cap_error);
    Ok(conn.prepare_cached(SQL)?.execute(rusqlite::params![
        attempt_id,
        outcome.as_str(),
        error,
        now
    ])? == 1)
}

/// Every attempt of a job, oldest first.
pub(crate) fn for_job(conn: &Connection, job_id: i64) -> Result<Vec<Attempt>> {
    let sql = format!("SELECT {COLUMNS} FROM attempts WHERE job_id = ?1 ORDER BY id");
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map([job_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Every attempt of an outbox row, oldest first.
pub(crate) fn for_outbox(conn: &Connection, outbox_id: i64) -> Result<Vec<Attempt>> {
    let sql = format!("SELECT {COLUMNS} FROM attempts WHERE outbox_id = ?1 ORDER BY id");
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map([outbox_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::attempt::MAX_ERROR_BYTES;

    #[test]
    fn huge_errors_are_capped_on_a_char_boundary() {
        let s = "é".repeat(10_000);
        let c = cap_error(&s);
        assert!(c.len() <= MAX_ERROR_BYTES);
        assert!(c.ends_with("bytes cut]"));
        assert_eq!(cap_error("short"), "short");
    }
}
