//! The outbox: side effects recorded inside a job's transaction and performed
//! after it committed, each with its own attempts, lease and backoff. Writes
//! `outbox` (and `attempts` through the history module).

use rusqlite::{Connection, OptionalExtension, Row};

use crate::core::attempt::AttemptOutcome;
use crate::core::lifecycle::{ABANDONED_EFFECT, EFFECT_RELEASED_AT_SHUTDOWN, RELEASED_AT_SHUTDOWN};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::time::Millis;
use crate::error::{Action, Error, Result, RowId};
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
    if kind.trim().is_empty() || key.trim().is_empty() {
        return Err(Error::invalid("outbox kind and key must not be empty"));
    }
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
pub(crate) fn claim_one(
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
pub(crate) fn heartbeat(
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
pub(crate) fn reap_expired(conn: &Connection, now: Millis) -> Result<usize> {
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

/// Requeues a dead row with a fresh attempt budget, due at `now`: the one
/// implementation behind [`Admin::retry_outbox`](crate::admin::Admin::retry_outbox). `NotFound` when
/// there is no such row, `WrongState` when it is not dead.
pub(crate) fn retry_dead(conn: &Connection, outbox_id: i64, now: Millis) -> Result<()> {
    const SQL: &str = "UPDATE outbox SET state = 'pending', attempts = 0, next_attempt_at = ?2                        WHERE id = ?1 AND state = 'dead'";
    if conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![outbox_id, now])?
        == 1
    {
        return Ok(());
    }
    let state: Option<String> = conn
        .prepare_cached("SELECT state FROM outbox WHERE id = ?1")?
        .query_row([outbox_id], |r| r.get(0))
        .optional()?;
    Err(match state {
        None => Error::NotFound(RowId::OutboxRow(outbox_id)),
        Some(state) => Error::WrongState {
            action: Action::RetryOutbox(outbox_id),
            state,
        },
    })
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
mod tests {
    //! An effect's lease, its fencing, reaping and retry times with the
    //! clock as a parameter: every `now` is a number the test picks.

    use super::*;
    use crate::core::job::{Enqueued, NewJob};

    /// Reads one row.
    fn get(conn: &Connection, id: i64) -> Result<Option<OutboxRow>> {
        let sql = format!("SELECT {COLUMNS} FROM outbox WHERE id = ?1");
        Ok(conn
            .prepare_cached(&sql)?
            .query_row([id], from_row)
            .optional()?)
    }

    const T0: Millis = 1_000_000;
    const LEASE: Millis = 30_000;
    const KINDS: &str = r#"["mail"]"#;

    /// A fresh migrated file holding one job and its outbox row `mail:1`
    /// (kind `mail`, two attempts) written at T0.
    fn fresh() -> (tempfile::TempDir, Connection, i64) {
        let (dir, conn) = crate::sql_check::fresh_file();
        let job = crate::core::validate::into_valid(NewJob::new("k", "evt", &0), T0, 2);
        let Enqueued::New(job_id) = crate::sqlite::enqueue::insert(&conn, &job, T0).unwrap() else {
            panic!("not new")
        };
        let (id, new) = add(&conn, job_id, "mail", "mail:1", "{}", 2, T0).unwrap();
        assert!(new);
        (dir, conn, id)
    }

    fn claim(conn: &Connection, now: Millis) -> Option<ClaimedEffect> {
        claim_one(conn, KINDS, "1/test", "1/effects", now + LEASE, now).unwrap()
    }

    /// `(state, attempts, next_attempt_at, lease_expires_at)`.
    fn row(conn: &Connection, id: i64) -> (String, i64, i64, Option<i64>) {
        conn.query_row(
            "SELECT state, attempts, next_attempt_at, lease_expires_at FROM outbox WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
    }

    fn outcomes(conn: &Connection, id: i64) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT outcome FROM attempts WHERE outbox_id = ?1 ORDER BY id")
            .unwrap();
        let rows = st.query_map([id], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn a_claim_takes_a_due_row_of_its_kinds_and_counts_the_attempt_first() {
        let (_dir, conn, id) = fresh();
        assert!(
            claim(&conn, T0 - 1).is_none(),
            "not due before it was written"
        );
        assert!(
            claim_one(&conn, r#"["sms"]"#, "1/test", "w", T0 + LEASE, T0)
                .unwrap()
                .is_none()
        );
        let c = claim(&conn, T0).unwrap();
        assert_eq!(c.row.id, id);
        assert_eq!(c.row.attempts, 1);
        assert_eq!(row(&conn, id), ("sending".into(), 1, T0, Some(T0 + LEASE)));
        assert_eq!(outcomes(&conn, id), ["running"]);
        assert!(claim(&conn, T0).is_none(), "one sender at a time");
    }

    #[test]
    fn an_expired_lease_is_abandoned_and_counted_then_dead_when_out_of_attempts() {
        let (_dir, conn, id) = fresh();
        claim(&conn, T0).unwrap();
        let ids = format!("[{id}]");
        assert_eq!(heartbeat(&conn, "1/test", &ids, T0 + 2 * LEASE).unwrap(), 1);
        assert_eq!(
            heartbeat(&conn, "2/other", &ids, T0 + 9 * LEASE).unwrap(),
            0
        );
        let expiry = T0 + 2 * LEASE;
        assert_eq!(row(&conn, id).3, Some(expiry));
        assert_eq!(
            reap_expired(&conn, expiry).unwrap(),
            0,
            "valid at its expiry"
        );
        assert_eq!(reap_expired(&conn, expiry + 1).unwrap(), 1);
        // The effect may have reached the world: the attempt counts.
        assert_eq!(row(&conn, id), ("pending".into(), 1, expiry + 1, None));
        assert_eq!(outcomes(&conn, id), ["abandoned"]);
        let now = expiry + 1;
        claim(&conn, now).unwrap();
        assert_eq!(reap_expired(&conn, now + LEASE + 1).unwrap(), 1);
        assert_eq!(row(&conn, id).0, "dead");
        assert_eq!(outcomes(&conn, id), ["abandoned", "abandoned"]);
        assert!(claim(&conn, now + 10 * LEASE).is_none());
    }

    #[test]
    fn an_ack_is_fenced_on_its_attempt_and_a_failure_of_the_last_attempt_is_dead() {
        let (_dir, conn, id) = fresh();
        let first = claim(&conn, T0).unwrap();
        reap_expired(&conn, T0 + LEASE + 1).unwrap();
        // The reaped sender acknowledges late: nothing changes.
        assert_eq!(
            ack(
                &conn,
                id,
                first.attempt_id,
                &EffectResult::Sent,
                T0 + LEASE + 2
            )
            .unwrap(),
            None
        );
        assert_eq!(row(&conn, id).0, "pending");
        // A second sender fails its last attempt.
        let now = T0 + LEASE + 3;
        let second = claim(&conn, now).unwrap();
        let failed = EffectResult::Failed {
            error: "smtp 451".into(),
            panicked: false,
            retry_at: now + 5_000,
        };
        let state = ack(&conn, id, second.attempt_id, &failed, now).unwrap();
        // Its second attempt of two: dead, not retried.
        assert_eq!(state, Some(OutboxState::Dead));
        assert_eq!(outcomes(&conn, id), ["abandoned", "failed"]);
    }

    #[test]
    fn a_failed_attempt_is_retried_at_its_retry_time_and_a_sent_row_is_done() {
        let (_dir, conn, id) = fresh();
        let first = claim(&conn, T0).unwrap();
        let failed = EffectResult::Failed {
            error: "smtp 451".into(),
            panicked: true,
            retry_at: T0 + 5_000,
        };
        assert_eq!(
            ack(&conn, id, first.attempt_id, &failed, T0 + 10).unwrap(),
            Some(OutboxState::Pending)
        );
        assert_eq!(row(&conn, id), ("pending".into(), 1, T0 + 5_000, None));
        assert!(claim(&conn, T0 + 4_999).is_none());
        let second = claim(&conn, T0 + 5_000).unwrap();
        assert_eq!(
            ack(
                &conn,
                id,
                second.attempt_id,
                &EffectResult::Sent,
                T0 + 5_001
            )
            .unwrap(),
            Some(OutboxState::Sent)
        );
        assert_eq!(get(&conn, id).unwrap().unwrap().sent_at, Some(T0 + 5_001));
        assert_eq!(outcomes(&conn, id), ["panicked", "succeeded"]);
        assert!(claim(&conn, T0 + 10 * LEASE).is_none());
    }

    #[test]
    fn a_release_at_shutdown_gives_the_row_back_with_its_attempt_counted() {
        let (_dir, conn, id) = fresh();
        let c = claim(&conn, T0).unwrap();
        assert!(release(&conn, id, c.attempt_id, T0 + 7).unwrap());
        assert!(!release(&conn, id, c.attempt_id, T0 + 8).unwrap());
        assert_eq!(row(&conn, id), ("pending".into(), 1, T0 + 7, None));
        assert_eq!(outcomes(&conn, id), ["released"]);
    }
}
