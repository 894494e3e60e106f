//! The attempt history: one row per run of a job or an effect, written when
//! the run starts and finished when it ends. Writes `attempts` only.

use rusqlite::{CachedStatement, Connection, Row};
use serde::Serialize;

use crate::core::time::Millis;
use crate::error::{Error, Result};

/// How a run ended. The same words as `attempts.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    /// Started, not finished (or the process died and nobody reaped it yet).
    Running,
    /// The work committed (job) or the effect returned Ok (outbox).
    Succeeded,
    /// The handler returned an error, retry or discard.
    Failed,
    /// The handler panicked.
    Panicked,
    /// The ledger already had the key: the work was done before.
    Duplicate,
    /// Cut short: the lease expired or the process died.
    Abandoned,
    /// Given back at shutdown without being charged.
    Released,
}

impl AttemptOutcome {
    /// The word stored in `attempts.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Running => "running",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Panicked => "panicked",
            AttemptOutcome::Duplicate => "duplicate",
            AttemptOutcome::Abandoned => "abandoned",
            AttemptOutcome::Released => "released",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<AttemptOutcome> {
        use AttemptOutcome::*;
        [
            Running, Succeeded, Failed, Panicked, Duplicate, Abandoned, Released,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `attempts`.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// Unique, increasing.
    pub id: i64,
    /// The job run, if this is a job's attempt.
    pub job_id: Option<i64>,
    /// The outbox row, if this is an effect's attempt.
    pub outbox_id: Option<i64>,
    /// Charged attempt number (N of max_attempts).
    pub attempt: i64,
    /// The job's idempotency key or the outbox row's key.
    pub key: String,
    /// `pid/thread` of the worker.
    pub worker: String,
    /// ms since epoch.
    pub started_at: Millis,
    /// ms since epoch.
    pub finished_at: Option<Millis>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error, if any (capped in length).
    pub error: Option<String>,
}

/// The longest error text stored: a huge message must not break completion.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Cuts `s` to at most `MAX_ERROR_BYTES`, on a character boundary.
pub(crate) fn cap_error(s: &str) -> String {
    if s.len() <= MAX_ERROR_BYTES {
        return s.to_string();
    }
    let mut end = MAX_ERROR_BYTES - 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &s[..end], s.len() - end)
}

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

    #[test]
    fn huge_errors_are_capped_on_a_char_boundary() {
        let s = "é".repeat(10_000);
        let c = cap_error(&s);
        assert!(c.len() <= MAX_ERROR_BYTES);
        assert!(c.ends_with("bytes cut]"));
        assert_eq!(cap_error("short"), "short");
    }
}
