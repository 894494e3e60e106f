//! The `processed_jobs` ledger: a key whose work committed. Writes
//! `processed_jobs` only.

use rusqlite::{Connection, OptionalExtension};

use crate::core::time::Millis;
use crate::error::Result;

/// Inserts `key` into the ledger for job `job_id`, whose run the caller
/// has just fenced in the same transaction. False when the key is already
/// there: the work for this key committed before, this run is a duplicate.
///
/// A one-row `INSERT … VALUES`, not one `INSERT … SELECT … WHERE EXISTS`
/// that would fence too: SQLite opens a statement journal for an `INSERT …
/// SELECT` and copies every page it writes into it, which a one-row VALUES
/// insert does not need (its conflict is checked before anything is
/// written). With no savepoint around a run's apply step, that copy was a
/// cost of its own on every job.
pub(crate) fn record(conn: &Connection, key: &str, job_id: i64, now: Millis) -> Result<bool> {
    const SQL: &str = "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES (?1, ?2, ?3) \
         ON CONFLICT (key) DO NOTHING";
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![key, now, job_id])?
        == 1)
}

/// Takes back the row [`record`] just wrote for `key`, in the same
/// transaction: the run failed, so its work did not commit after all.
pub(crate) fn unrecord(conn: &Connection, key: &str) -> Result<()> {
    const SQL: &str = "DELETE FROM processed_jobs WHERE key = ?1";
    conn.prepare_cached(SQL)?.execute([key])?;
    Ok(())
}

/// The ledger row for `key`, if its work committed: `(completed_at, job_id)`.
pub(crate) fn lookup(conn: &Connection, key: &str) -> Result<Option<(Millis, Option<i64>)>> {
    const SQL: &str = "SELECT completed_at, job_id FROM processed_jobs WHERE key = ?1";
    Ok(conn
        .prepare_cached(SQL)?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Deletes ledger rows completed before `before`, at most `limit` of them.
/// Returns how many went.
pub(crate) fn prune(conn: &Connection, before: Millis, limit: i64) -> Result<usize> {
    const SQL: &str = "DELETE FROM processed_jobs WHERE rowid IN \
        (SELECT rowid FROM processed_jobs WHERE completed_at < ?1 ORDER BY completed_at LIMIT ?2)";
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![before, limit])?)
}
