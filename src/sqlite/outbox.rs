//! The outbox: side effects recorded inside a job's transaction and performed
//! after it committed, each with its own attempts, lease and backoff. Writes
//! `outbox` (and `attempts` through the history module).

use rusqlite::{Connection, OptionalExtension, Row};

use crate::core::attempt::AttemptOutcome;
use crate::core::lifecycle::{ABANDONED_EFFECT, EFFECT_RELEASED_AT_SHUTDOWN, RELEASED_AT_SHUTDOWN};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::time::Millis;
use crate::error::Result;
use crate::sqlite::history;

const COLUMNS: &str = "id, key, kind, payload, state, attempts, max_attempts, job_id, \
                       next_attempt_at, last_error, created_at, sent_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<OutboxRow> {
    let state: String = r.get(4)?;
    Ok(OutboxRow {
        id: r.get(0)?,
        key: r.get(1)?,
        kind: r.get(2)?,
        payload: r.get(3)?,
        state: state.parse().map_err(|_| {
            rusqlite::Error::FromSqlConversionFailure(
                4,
                rusqlite::types::Type::Text,
                format!("bad outbox state {state:?}").into(),
            )
        })?,
        attempts: r.get(5)?,
        max_attempts: r.get(6)?,
        job_id: r.get(7)?,
        next_attempt_at: r.get(8)?,
        last_error: r.get(9)?,
        created_at: r.get(10)?,
        sent_at: r.get(11)?,
    })
}

/// Adds a row inside the caller's (the job's) transaction. A key that exists
/// already is left alone. Returns `(id, is_new)`.
pub(crate) fn add(
    conn: &Connection,
    job_id: i64,
    kind: &str,
    key: &str,
    payload: &str,
    max_attempts: i64,
    now: Millis,
) -> Result<(i64, bool)> {
    crate::core::outbox::check_effect(kind, key)?;
    const INSERT: &str = "INSERT INTO outbox (key, kind, payload, max_attempts, job_id, next_attempt_at, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT (key) DO NOTHING";
    let n = conn.prepare_cached(INSERT)?.execute(rusqlite::params![
        key,
        kind,
        payload,
        max_attempts,
        job_id,
        now
    ])?;
    if n == 1 {
        return Ok((conn.last_insert_rowid(), true));
    }
    let id = conn
        .prepare_cached("SELECT id FROM outbox WHERE key = ?1")?
        .query_row([key], |r| r.get(0))?;
    Ok((id, false))
}

/// Claims the next due row of one of `kinds` and records its attempt
/// (counted before the effect is called).
pub(crate) fn claim(
    conn: &Connection,
    kinds_json: &str,
    owner: &str,
    worker: &str,
    lease_until: Millis,
    now: Millis,
) -> Result<Option<ClaimedEffect>> {
    let sql = format!(
        "UPDATE outbox SET state = 'sending', attempts = attempts + 1, lease_owner = ?1, lease_expires_at = ?2 \
         WHERE id = (SELECT id FROM outbox WHERE state = 'pending' AND next_attempt_at <= ?3 \
                     AND kind IN (SELECT value FROM json_each(?4)) ORDER BY next_attempt_at, id LIMIT 1) \
         RETURNING {COLUMNS}"
    );
    let row = conn
        .prepare_cached(&sql)?
        .query_row(
            rusqlite::params![owner, lease_until, now, kinds_json],
            from_row,
        )
        .optional()?;
    let Some(row) = row else { return Ok(None) };
    let attempt_id = history::start(
        &mut history::start_statement(conn)?,
        conn,
        history::RunOf::Effect(row.id),
        row.attempts,
        &row.key,
        worker,
        now,
    )?;
    conn.prepare_cached("UPDATE outbox SET current_attempt = ?2 WHERE id = ?1")?
        .execute(rusqlite::params![row.id, attempt_id])?;
    Ok(Some(ClaimedEffect { row, attempt_id }))
}

/// Records an effect attempt's end. Fenced on the attempt: an attempt whose
/// lease was reaped changes nothing. Returns the row's new state, or None
/// when fenced off.
pub(crate) fn ack(
    conn: &Connection,
    outbox_id: i64,
    attempt_id: i64,
    result: &EffectResult,
    now: Millis,
) -> Result<Option<OutboxState>> {
    let state = match result {
        EffectResult::Sent => {
            const SQL: &str = "UPDATE outbox SET state = 'sent', sent_at = ?3, last_error = NULL, \
                 lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
                 WHERE id = ?1 AND current_attempt = ?2 AND state = 'sending'";
            if conn
                .prepare_cached(SQL)?
                .execute(rusqlite::params![outbox_id, attempt_id, now])?
                == 0
            {
                return Ok(None);
            }
            history::finish(conn, attempt_id, AttemptOutcome::Succeeded, None, now)?;
            OutboxState::Sent
        }
        EffectResult::Failed {
            error,
            panicked,
            retry_at,
        } => {
            const SQL: &str = "UPDATE outbox SET \
                 state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, \
                 next_attempt_at = ?4, last_error = ?3, \
                 lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
                 WHERE id = ?1 AND current_attempt = ?2 AND state = 'sending' RETURNING state";
            let err = crate::core::attempt::cap_error(error);
            let st: Option<String> = conn
                .prepare_cached(SQL)?
                .query_row(
                    rusqlite::params![outbox_id, attempt_id, err, retry_at],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(st) = st else { return Ok(None) };
            let outcome = if *panicked {
                AttemptOutcome::Panicked
            } else {
                AttemptOutcome::Failed
            };
            history::finish(conn, attempt_id, outcome, Some(error), now)?;
            st.parse()?
        }
    };
    Ok(Some(state))
}

/// Extends the leases this process holds on rows being sent.
pub(crate) fn renew_leases(
    conn: &Connection,
    owner: &str,
    ids_json: &str,
    until: Millis,
) -> Result<usize> {
    const SQL: &str =
        "UPDATE outbox SET lease_expires_at = ?3 WHERE state = 'sending' AND lease_owner = ?1 \
                       AND id IN (SELECT value FROM json_each(?2))";
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![owner, ids_json, until])?)
}

/// Rows whose sender died (lease expired): the attempt is `abandoned` and
/// counts (the effect may have reached the world); the row goes back to
/// `pending`, or `dead` when out of attempts. Returns how many were reaped.
pub(crate) fn reap(conn: &Connection, now: Millis) -> Result<usize> {
    let expired: Vec<(i64, Option<i64>)> = conn
        .prepare_cached(
            "SELECT id, current_attempt FROM outbox WHERE state = 'sending' AND lease_expires_at < ?1 LIMIT 500",
        )?
        .query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, attempt) in &expired {
        if let Some(a) = attempt {
            history::finish(
                conn,
                *a,
                AttemptOutcome::Abandoned,
                Some(ABANDONED_EFFECT),
                now,
            )?;
        }
        conn.prepare_cached(
            "UPDATE outbox SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, \
             next_attempt_at = ?2, last_error = ?3, lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
             WHERE id = ?1",
        )?
        .execute(rusqlite::params![id, now, ABANDONED_EFFECT])?;
    }
    Ok(expired.len())
}

/// Gives a row back at shutdown: the attempt (already counted) is
/// `released` and the row is `pending` again.
pub(crate) fn release(
    conn: &Connection,
    outbox_id: i64,
    attempt_id: i64,
    now: Millis,
) -> Result<bool> {
    const SQL: &str = "UPDATE outbox SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, \
         next_attempt_at = ?3, last_error = ?4, \
         lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
         WHERE id = ?1 AND current_attempt = ?2 AND state = 'sending'";
    let n = conn.prepare_cached(SQL)?.execute(rusqlite::params![
        outbox_id,
        attempt_id,
        now,
        EFFECT_RELEASED_AT_SHUTDOWN
    ])?;
    if n == 1 {
        history::finish(
            conn,
            attempt_id,
            AttemptOutcome::Released,
            Some(RELEASED_AT_SHUTDOWN),
            now,
        )?;
    }
    Ok(n == 1)
}

/// The rows a job wrote, oldest first.
pub(crate) fn for_job(conn: &Connection, job_id: i64) -> Result<Vec<OutboxRow>> {
    let sql = format!("SELECT {COLUMNS} FROM outbox WHERE job_id = ?1 ORDER BY id");
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map([job_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Lists rows, newest first, optionally in one state.
pub(crate) fn list(
    conn: &Connection,
    state: Option<OutboxState>,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM outbox WHERE (?1 IS NULL OR state = ?1) ORDER BY id DESC LIMIT ?2"
    );
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map(
        rusqlite::params![state.map(|s| s.as_str()), limit],
        from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Lists rows newest first from a keyset cursor: ids below `before`, or
/// (without it) the `limit` ids just above `after`; optionally in one state.
/// `+state`: a walk by id that stops at the limit, never a sort of every
/// row in the state.
pub(crate) fn list_page(
    conn: &Connection,
    state: Option<OutboxState>,
    before: Option<i64>,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let (sql, cursor) = match (before, after) {
        (None, Some(after)) => (
            format!(
                "SELECT * FROM (SELECT {COLUMNS} FROM outbox WHERE (?1 IS NULL OR +state = ?1) \
                 AND id > ?3 ORDER BY id LIMIT ?2) ORDER BY id DESC"
            ),
            after,
        ),
        (before, _) => (
            format!(
                "SELECT {COLUMNS} FROM outbox WHERE (?1 IS NULL OR +state = ?1) AND id < ?3 \
                 ORDER BY id DESC LIMIT ?2"
            ),
            before.unwrap_or(i64::MAX),
        ),
    };
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map(
        rusqlite::params![state.map(|s| s.as_str()), limit, cursor],
        from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

#[cfg(test)]
mod tests;
