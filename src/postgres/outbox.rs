//! The outbox on PostgreSQL: rows added inside a job's transaction, claimed
//! one at a time under a lease (`FOR UPDATE SKIP LOCKED`), acknowledged
//! fenced on their attempt, their leases renewed and the expired ones
//! reaped, given back at shutdown; and its rows' reads. Writes `outbox`
//! and `attempts`.

use postgres::GenericClient;

use super::conn::{all, bad, in_row, one, write_err, Col, PgConn, Stmt};
use crate::core::attempt::cap_error;
use crate::core::lifecycle::{ABANDONED_EFFECT, EFFECT_RELEASED_AT_SHUTDOWN, RELEASED_AT_SHUTDOWN};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::time::Millis;
use crate::error::Result;
use postgres::Row;

/// A key that exists already is left alone; either way the row's id.
pub(crate) const ADD: &str = "\
WITH ins AS (
    INSERT INTO outbox (key, kind, payload, max_attempts, job_id, next_attempt_at, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (key) DO NOTHING RETURNING id
)
SELECT id, true FROM ins UNION ALL SELECT id, false FROM outbox
WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM ins)";

/// The claim, its attempt row and the fence on it, in one statement: the
/// attempt's id is drawn first so the row is updated once.
const CLAIM: &str = "\
WITH picked AS (
    SELECT id, nextval((SELECT pg_get_serial_sequence('attempts', 'id'))::regclass) AS attempt_id FROM (
        SELECT id FROM outbox WHERE state = 'pending' AND next_attempt_at <= $3 AND kind = ANY($4)
        ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
    ) p
),
taken AS (
    UPDATE outbox o SET state = 'sending', attempts = o.attempts + 1, lease_owner = $1,
        lease_expires_at = $2, current_attempt = p.attempt_id
    FROM picked p WHERE o.id = p.id
    RETURNING o.id, o.key, o.kind, o.payload, o.state, o.attempts, o.max_attempts, o.job_id,
        o.next_attempt_at, o.last_error, o.created_at, o.sent_at, p.attempt_id
),
att AS (
    INSERT INTO attempts (id, outbox_id, attempt, key, worker, started_at)
    SELECT attempt_id, id, attempts, key, $5, $3 FROM taken
)
SELECT * FROM taken";
const SENT: &str = "\
WITH done AS (
    UPDATE outbox SET state = 'sent', sent_at = $3, last_error = NULL, lease_owner = NULL,
        lease_expires_at = NULL, current_attempt = NULL
    WHERE id = $1 AND current_attempt = $2 AND state = 'sending' RETURNING id
),
ended AS (
    UPDATE attempts SET outcome = 'succeeded', finished_at = $3
    WHERE id = $2 AND outcome = 'running' AND EXISTS (SELECT 1 FROM done)
)
SELECT count(*) FROM done";
const FAILED: &str = "\
WITH done AS (
    UPDATE outbox SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
        next_attempt_at = $4, last_error = $3, lease_owner = NULL, lease_expires_at = NULL,
        current_attempt = NULL
    WHERE id = $1 AND current_attempt = $2 AND state = 'sending' RETURNING state
),
ended AS (
    UPDATE attempts SET outcome = $5::text, error = $3::text, finished_at = $6::bigint
    WHERE id = $2 AND outcome = 'running' AND EXISTS (SELECT 1 FROM done)
)
SELECT state FROM done";
const RELEASE: &str = "\
WITH back AS (
    UPDATE outbox SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
        next_attempt_at = $3, last_error = $4::text,
        lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL
    WHERE id = $1 AND current_attempt = $2 AND state = 'sending' RETURNING id
),
ended AS (
    UPDATE attempts SET outcome = 'released', error = $5::text, finished_at = $3
    WHERE id = $2 AND outcome = 'running' AND EXISTS (SELECT 1 FROM back)
)
SELECT count(*) FROM back";

/// Gives back the outbox rows a claim of this effect thread (`$2`, of the
/// runtime `$1`) took whose answer never arrived (the connection broke
/// after the server committed it): their effect was never called, so the
/// attempt is not counted. The thread claims one row at a time and only
/// when it performs none, so any row still recorded under its name is not
/// being performed; those whose effect it did perform without recording
/// the ack (`$4`) are left to their lease.
const RELEASE_LOST_CLAIMS: &str = "\
WITH lost AS (
    SELECT o.id, o.current_attempt FROM outbox o JOIN attempts a ON a.id = o.current_attempt
    WHERE o.state = 'sending' AND o.lease_owner = $1 AND a.worker = $2 AND a.outcome = 'running'
      AND NOT (a.id = ANY($4::bigint[]))
    FOR UPDATE OF o SKIP LOCKED
),
back AS (
    UPDATE outbox SET state = 'pending', attempts = greatest(outbox.attempts - 1, 0),
        next_attempt_at = $3, lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL
    FROM lost WHERE outbox.id = lost.id AND outbox.current_attempt = lost.current_attempt
    RETURNING outbox.id, lost.current_attempt
),
ended AS (
    UPDATE attempts SET outcome = 'released', finished_at = $3,
        error = 'released uncharged: the connection broke before the claim''s answer arrived; \
the effect was not called'
    WHERE id IN (SELECT current_attempt FROM back) AND outcome = 'running'
)
SELECT count(*) FROM back";

/// Renews the leases `$1` holds on rows being sent; a row a transaction
/// holds locked is skipped, as the jobs' renewal does (`leases.rs`).
const RENEW: &str = "UPDATE outbox SET lease_expires_at = $3 WHERE id IN \
     (SELECT id FROM outbox WHERE id = ANY($2) AND state = 'sending' AND lease_owner = $1 \
      FOR UPDATE SKIP LOCKED)";
/// An effect's abandoned attempt counts (the effect may have reached the
/// world): the row goes back to pending, or dead when out of attempts.
const REAP: &str = "\
WITH expired AS (
    SELECT id, current_attempt FROM outbox WHERE state = 'sending' AND lease_expires_at < $1
    ORDER BY lease_expires_at LIMIT 500 FOR UPDATE SKIP LOCKED
),
ended AS (
    UPDATE attempts SET outcome = 'abandoned', finished_at = $1::bigint, error = $2::text
    WHERE id IN (SELECT current_attempt FROM expired) AND outcome = 'running'
),
back AS (
    UPDATE outbox o SET
        state = CASE WHEN o.attempts >= o.max_attempts THEN 'dead' ELSE 'pending' END,
        next_attempt_at = $1::bigint, last_error = $2::text,
        lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL
    FROM expired e WHERE o.id = e.id
    RETURNING o.id
)
SELECT count(*) FROM back";

/// Every row of a job, oldest first.
pub(crate) const OF_JOB: &str = "SELECT id, key, kind, payload, state, attempts, max_attempts, \
     job_id, next_attempt_at, last_error, created_at, sent_at FROM outbox WHERE job_id = $1 \
     ORDER BY id";
/// The newest rows (`$2` of them), in a state if `$1`.
const LIST: &str = "SELECT id, key, kind, payload, state, attempts, max_attempts, job_id, \
     next_attempt_at, last_error, created_at, sent_at FROM outbox \
     WHERE ($1::text IS NULL OR state = $1) ORDER BY id DESC LIMIT $2";
/// A page below a cursor (ids under `$3`), newest first.
const LIST_BEFORE: &str = "SELECT id, key, kind, payload, state, attempts, max_attempts, \
     job_id, next_attempt_at, last_error, created_at, sent_at FROM outbox \
     WHERE ($1::text IS NULL OR state = $1) AND id < $3 ORDER BY id DESC LIMIT $2";
/// The page above a cursor (the `$2` ids just over `$3`), newest first.
const LIST_AFTER: &str = "SELECT * FROM (SELECT id, key, kind, payload, state, attempts, \
     max_attempts, job_id, next_attempt_at, last_error, created_at, sent_at FROM outbox \
     WHERE ($1::text IS NULL OR state = $1) AND id > $3 ORDER BY id LIMIT $2) p ORDER BY id DESC";

/// An `outbox` row, in the column order of the reads above.
pub(crate) fn from_row(r: &Row) -> Result<OutboxRow> {
    in_row("outbox", r, |r| {
        let state: String = r.col(4)?;
        Ok(OutboxRow {
            id: r.col(0)?,
            key: r.col(1)?,
            kind: r.col(2)?,
            payload: r.col(3)?,
            state: state.parse().map_err(|_| bad("outbox state", &state))?,
            attempts: r.col(5)?,
            max_attempts: r.col(6)?,
            job_id: r.col(7)?,
            next_attempt_at: r.col(8)?,
            last_error: r.col(9)?,
            created_at: r.col(10)?,
            sent_at: r.col(11)?,
        })
    })
}

/// [`RELEASE_LOST_CLAIMS`]: how many rows went back.
pub(crate) fn release_lost_claims(
    c: &mut PgConn,
    owner: &str,
    worker: &str,
    performed: &[i64],
    now: Millis,
) -> Result<i64> {
    one(c.write(RELEASE_LOST_CLAIMS, &[&owner, &worker, &now, &performed])?)?.col(0)
}

/// Adds a row inside the job's transaction; `(id, is_new)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add<C: GenericClient>(
    tx: &mut C,
    stmt: &Stmt,
    job_id: i64,
    kind: &str,
    key: &str,
    payload: &str,
    max_attempts: i64,
    now: Millis,
) -> Result<(i64, bool)> {
    crate::core::outbox::check_effect(kind, key)?;
    let r = stmt
        .query_one(tx, &[&key, &kind, &payload, &max_attempts, &job_id, &now])
        .map_err(write_err)?;
    Ok((r.col(0)?, r.col(1)?))
}

/// Claims the next due row of one of `kinds` and records its attempt
/// (counted before the effect is called).
pub(crate) fn claim(
    c: &mut PgConn,
    kinds: &[String],
    owner: &str,
    worker: &str,
    lease_until: Millis,
    now: Millis,
) -> Result<Option<ClaimedEffect>> {
    let Some(r) = c
        .write(CLAIM, &[&owner, &lease_until, &now, &kinds, &worker])?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    Ok(Some(ClaimedEffect {
        row: from_row(&r)?,
        attempt_id: r.col(12)?,
    }))
}

pub(crate) fn ack(
    c: &mut PgConn,
    outbox_id: i64,
    attempt_id: i64,
    result: &EffectResult,
    now: Millis,
) -> Result<Option<OutboxState>> {
    match result {
        EffectResult::Sent => {
            let n: i64 = one(c.write(SENT, &[&outbox_id, &attempt_id, &now])?)?.col(0)?;
            Ok((n == 1).then_some(OutboxState::Sent))
        }
        EffectResult::Failed {
            error,
            panicked,
            retry_at,
        } => {
            let outcome = if *panicked { "panicked" } else { "failed" };
            let err = cap_error(error);
            let rows = c.write(
                FAILED,
                &[&outbox_id, &attempt_id, &err, retry_at, &outcome, &now],
            )?;
            rows.first()
                .map(|r| r.col::<String>(0)?.parse())
                .transpose()
        }
    }
}

/// Extends the leases `owner` holds on the rows `ids`, being sent.
pub(crate) fn renew_leases(c: &mut PgConn, owner: &str, ids: &[i64], until: Millis) -> Result<()> {
    c.execute(RENEW, &[&owner, &ids, &until])?;
    Ok(())
}

/// Rows whose sender died (lease expired): the attempt is `abandoned` and
/// counts; the row goes back to `pending`, or `dead` when out of attempts.
/// Returns how many were reaped.
pub(crate) fn reap(c: &mut PgConn, now: Millis) -> Result<usize> {
    let n: i64 = one(c.write(REAP, &[&now, &ABANDONED_EFFECT])?)?.col(0)?;
    Ok(n as usize)
}

pub(crate) fn release(
    c: &mut PgConn,
    outbox_id: i64,
    attempt_id: i64,
    now: Millis,
) -> Result<bool> {
    let (row, run) = (EFFECT_RELEASED_AT_SHUTDOWN, RELEASED_AT_SHUTDOWN);
    Ok(one(c.write(RELEASE, &[&outbox_id, &attempt_id, &now, &row, &run])?)?.col::<i64>(0)? == 1)
}

/// Every row of a job, oldest first.
pub(crate) fn for_job(c: &mut PgConn, job_id: i64) -> Result<Vec<OutboxRow>> {
    all(c.query(OF_JOB, &[&job_id])?, from_row)
}

/// The newest rows, in `state` if given.
pub(crate) fn list(
    c: &mut PgConn,
    state: Option<OutboxState>,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let state = state.map(|s| s.as_str());
    all(c.query(LIST, &[&state, &i64::from(limit)])?, from_row)
}

/// A page of rows from a cursor, newest first.
pub(crate) fn list_page(
    c: &mut PgConn,
    state: Option<OutboxState>,
    before: Option<i64>,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<OutboxRow>> {
    let state = state.map(|s| s.as_str());
    let (sql, cursor) = match (before, after) {
        (None, Some(after)) => (LIST_AFTER, after),
        (before, _) => (LIST_BEFORE, before.unwrap_or(i64::MAX)),
    };
    all(
        c.query(sql, &[&state, &i64::from(limit), &cursor])?,
        from_row,
    )
}
