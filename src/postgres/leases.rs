//! Leases on jobs on PostgreSQL: renewing this process's, taking back
//! expired ones as the core decides, and giving a job back uncharged (an
//! effect's lease is the outbox's, in `outbox.rs`). Every lease time is on
//! the server's clock. Writes `jobs` (state and lease columns) and
//! `attempts`.

use super::conn::{one, read_err, write_err, Col, PgConn};
use crate::core::job::JobState;
use crate::core::lifecycle::{self, Expiry, ABANDONED_RUN};
use crate::core::time::Millis;
use crate::error::Result;

/// Rows a run's transaction holds locked are skipped (`SKIP LOCKED`): the
/// renewal never waits behind a run, and a locked row cannot be taken over
/// anyway — the reaper skips it too. A lease owner is set only while a job
/// runs: every statement that ends a run clears it with `lease_expires_at`,
/// which a CHECK of the table ties to `running` (and `current_attempt` is
/// NULL outside `running` by another CHECK). The statements below fence on
/// them rather than on `state = 'running'`, which would let the planner
/// walk the partial index `jobs_lease` and its dead entries instead of
/// probing the primary key.
const RENEW_JOBS: &str = "UPDATE jobs SET lease_expires_at = $3 WHERE id IN \
     (SELECT id FROM jobs WHERE id = ANY($2) AND lease_owner = $1 \
      FOR UPDATE SKIP LOCKED)";
const ANY_EXPIRED: &str =
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires_at < $1) \
     OR EXISTS (SELECT 1 FROM outbox WHERE state = 'sending' AND lease_expires_at < $1)";
/// The jobs whose lease expired, locked for the reaper's transaction
/// (another process's reaper skips them), the oldest first.
const EXPIRED_JOBS: &str = "SELECT id, current_attempt, abandoned, attempts FROM jobs \
     WHERE state = 'running' AND lease_expires_at < $1 \
     ORDER BY lease_expires_at LIMIT 500 FOR UPDATE SKIP LOCKED";
const END_ABANDONED: &str = "UPDATE attempts SET outcome = 'abandoned', finished_at = $2, \
     error = $3 WHERE id = $1 AND outcome = 'running'";
const UNCLAIM: &str = "UPDATE jobs SET state = 'queued', lease_owner = NULL, \
     lease_expires_at = NULL WHERE id = $1";
/// A run cut short: the job's row as the core decided ([`Expiry::job_end`]);
/// a `run_at` of NULL keeps the row's.
const ABANDON: &str = "UPDATE jobs SET state = $2, abandoned = $3, attempts = $4, \
     run_at = coalesce($5, run_at), last_error = $6, finished_at = $7, \
     lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL WHERE id = $1";
const RELEASE_CLAIM: &str = "UPDATE jobs SET state = 'queued', lease_owner = NULL, \
     lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2 AND current_attempt IS NULL";
const RELEASE_RUN: &str = "\
WITH back AS (
    UPDATE jobs SET state = 'queued', attempts = greatest(attempts - 1, 0), lease_owner = NULL,
        lease_expires_at = NULL, current_attempt = NULL
    WHERE id = $1 AND current_attempt = $2
    RETURNING id
),
ended AS (
    UPDATE attempts SET outcome = 'released', error = $3, finished_at = $4
    WHERE id = $2 AND outcome = 'running' AND EXISTS (SELECT 1 FROM back)
)
SELECT count(*) FROM back";

/// Gives back, uncharged, the jobs a claim of this worker (`$2`, of the
/// runtime `$1`) took whose answer never arrived: the connection broke
/// after the server committed the claim. The worker runs one batch at a
/// time, so at its next claim any run still recorded under its name is
/// not being run by anyone; without this it would wait for its lease to
/// run out and be counted abandoned.
const RELEASE_LOST_CLAIMS: &str = "\
WITH lost AS (
    SELECT j.id, j.current_attempt FROM jobs j JOIN attempts a ON a.id = j.current_attempt
    WHERE j.state = 'running' AND j.lease_owner = $1 AND a.worker = $2 AND a.outcome = 'running'
    FOR UPDATE OF j SKIP LOCKED
),
back AS (
    UPDATE jobs SET state = 'queued', attempts = greatest(jobs.attempts - 1, 0), lease_owner = NULL,
        lease_expires_at = NULL, current_attempt = NULL
    FROM lost WHERE jobs.id = lost.id AND jobs.current_attempt = lost.current_attempt
    RETURNING jobs.id, lost.current_attempt
),
ended AS (
    UPDATE attempts SET outcome = 'released', error = $3, finished_at = $4
    WHERE id IN (SELECT current_attempt FROM back) AND outcome = 'running'
)
SELECT count(*) FROM back";

/// Why [`RELEASE_LOST_CLAIMS`] gave a run back, in its attempt row.
const LOST_CLAIM: &str = "released uncharged: the connection broke before the claim's answer \
     arrived; the run never started";

/// Whether any job or outbox row's lease expired before `now`: a look
/// before reaping.
pub(crate) fn any_expired(c: &mut PgConn, now: Millis) -> Result<bool> {
    c.query_one(ANY_EXPIRED, &[&now])?.col(0)
}

/// Extends the leases `owner` holds on the jobs `ids`.
pub(crate) fn renew_leases(c: &mut PgConn, owner: &str, ids: &[i64], until: Millis) -> Result<()> {
    c.execute(RENEW_JOBS, &[&owner, &ids, &until])?;
    Ok(())
}

/// Takes back the jobs whose lease expired, in one transaction, as
/// [`lifecycle::on_expiry`] decides for each. Rare (a process died, or a
/// run hung past its lease), so a statement per job. Returns how many jobs
/// were taken back.
pub(crate) fn reap(c: &mut PgConn, now: Millis, max_abandoned: i64) -> Result<usize> {
    let mut tx = c.begin().map_err(read_err)?;
    let expired = tx.query(EXPIRED_JOBS, &[&now]).map_err(read_err)?;
    for row in &expired {
        let id: i64 = row.col(0)?;
        let attempt: Option<i64> = row.col(1)?;
        let abandoned: i64 = row.col(2)?;
        let attempts: i64 = row.col(3)?;
        if let Some(a) = attempt {
            tx.execute(END_ABANDONED, &[&a, &now, &ABANDONED_RUN])
                .map_err(read_err)?;
        }
        let expiry = lifecycle::on_expiry(attempt.is_some(), abandoned, max_abandoned);
        let Some((abandoned, end)) = expiry.job_end(attempts, now) else {
            tx.execute(UNCLAIM, &[&id]).map_err(read_err)?;
            continue;
        };
        if let Expiry::Poisoned { error, .. } = &expiry {
            log::warn!(target: "litejob", job_id = id, abandoned = abandoned; "job is dead: {error}");
        }
        tx.execute(
            ABANDON,
            &[
                &id,
                &end.state.as_str(),
                &abandoned,
                &end.attempts,
                &end.run_at,
                &end.last_error,
                &end.finished_at,
            ],
        )
        .map_err(read_err)?;
        if end.state == JobState::Dead {
            let key: String = tx
                .query_one("SELECT idempotency_key FROM jobs WHERE id = $1", &[&id])
                .map_err(read_err)?
                .col(0)?;
            super::workflow::ended(&mut tx, &[(id, &key, JobState::Dead)], now)?;
        }
    }
    let taken = expired.len();
    // Its statement, prepared by its text, is closed before the commit,
    // on the server session it was made on (behind a transaction pooler
    // the next one may be another client's).
    drop(expired);
    tx.commit().map_err(write_err)?;
    Ok(taken)
}

/// [`RELEASE_LOST_CLAIMS`]: how many jobs went back.
pub(crate) fn release_lost_claims(
    c: &mut PgConn,
    owner: &str,
    worker: &str,
    now: Millis,
) -> Result<i64> {
    one(c.write(RELEASE_LOST_CLAIMS, &[&owner, &worker, &LOST_CLAIM, &now])?)?.col(0)
}

pub(crate) fn release(
    c: &mut PgConn,
    id: i64,
    owner: &str,
    attempt: Option<i64>,
    why: &str,
    now: Millis,
) -> Result<bool> {
    Ok(match attempt {
        None => c.execute(RELEASE_CLAIM, &[&id, &owner])? == 1,
        Some(a) => one(c.write(RELEASE_RUN, &[&id, &a, &why, &now])?)?.col::<i64>(0)? == 1,
    })
}
