//! The operator's repairs on PostgreSQL: requeue dead jobs, cancel a job
//! (a running one too, its run's attempt ended), requeue a dead outbox row, prune finished history in bounded
//! batches. Writes `jobs`, `outbox`, `attempts` and `processed_jobs`
//! (prune, through the ledger module, only when asked).

use super::conn::{one, write_err, Col, PgConn};
use crate::core::job::JobState;
use crate::core::lifecycle::CANCELLED_WHILE_RUNNING;
use crate::core::time::Millis;
use crate::driver::PruneWhat;
use crate::error::{Action, Error, Result, RowId};

/// Requeuing a dead job renews its budget; `last_error` is kept so the
/// operator still sees why it died until the next run.
const RETRY_JOB: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
     run_at = $2, finished_at = NULL WHERE id = $1 AND state = 'dead'";
const RETRY_DEAD: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
     run_at = $3, finished_at = NULL \
     WHERE id IN (SELECT id FROM jobs WHERE state = 'dead' AND ($1::text IS NULL OR kind = $1) \
                  AND id > $2 ORDER BY id LIMIT $4 FOR UPDATE) \
     RETURNING id";
/// The job to cancel, locked: a run's batch that ended it first makes the
/// cancel wait for its commit and then see it ended.
const CANCEL_READ: &str =
    "SELECT state, current_attempt, idempotency_key FROM jobs WHERE id = $1 FOR UPDATE";
const CANCEL: &str = "UPDATE jobs SET state = 'cancelled', finished_at = $2, \
     last_error = CASE WHEN state = 'running' THEN $3 ELSE last_error END, \
     lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
     WHERE id = $1 AND state IN ('queued', 'waiting', 'running')";
/// A cancelled job's run under way ends `cancelled`; its own end, fenced
/// on the attempt, then finds the job gone from it.
const CANCEL_RUN: &str = "UPDATE attempts SET outcome = 'cancelled', error = $3, \
     finished_at = $2 WHERE id = $1 AND outcome = 'running'";
const JOB_STATE: &str = "SELECT state FROM jobs WHERE id = $1";
const RETRY_OUTBOX: &str = "UPDATE outbox SET state = 'pending', attempts = 0, \
     next_attempt_at = $2 WHERE id = $1 AND state = 'dead'";
const OUTBOX_STATE: &str = "SELECT state FROM outbox WHERE id = $1";
/// A finished job whose outbox rows are not all sent is kept, so explain
/// can still link the pending effect to its job; so is one an unfinished
/// job depends on (it reads its state and output).
const PRUNE_JOBS: &str = "\
WITH picked AS (
    SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= greatest($1::bigint, $3::bigint)
    AND finished_at <= CASE WHEN state = 'succeeded' THEN $1::bigint ELSE $3::bigint END
    AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = jobs.id AND o.state <> 'sent')
    AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs w ON w.id = d.job_id
                    WHERE d.depends_on = jobs.id AND w.finished_at IS NULL)
    ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED
),
gone_attempts AS (DELETE FROM attempts WHERE job_id IN (SELECT id FROM picked) RETURNING 1),
gone AS (DELETE FROM jobs WHERE id IN (SELECT id FROM picked) RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_attempts)";
const PRUNE_OUTBOX: &str = "\
WITH picked AS (
    SELECT id FROM outbox WHERE state = 'sent' AND sent_at <= $1
    ORDER BY sent_at LIMIT $2 FOR UPDATE SKIP LOCKED
),
gone_attempts AS (DELETE FROM attempts WHERE outbox_id IN (SELECT id FROM picked) RETURNING 1),
gone AS (DELETE FROM outbox WHERE id IN (SELECT id FROM picked) RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_attempts)";

/// Why a job action changed nothing.
fn refusal(
    c: &mut PgConn,
    sql: &'static str,
    id: i64,
    action: Action,
    row: RowId,
) -> Result<Error> {
    Ok(match c.query_opt(sql, &[&id])? {
        None => Error::NotFound(row),
        Some(r) => Error::WrongState {
            action,
            state: r.col(0)?,
        },
    })
}

pub(crate) fn retry_job(c: &mut PgConn, id: i64, now: Millis) -> Result<()> {
    if c.execute(RETRY_JOB, &[&id, &now])? == 1 {
        return Ok(());
    }
    Err(refusal(
        c,
        JOB_STATE,
        id,
        Action::RetryJob(id),
        RowId::Job(id),
    )?)
}

pub(crate) fn retry_dead_batch(
    c: &mut PgConn,
    kind: Option<&str>,
    after: i64,
    limit: i64,
    now: Millis,
) -> Result<Vec<i64>> {
    c.write(RETRY_DEAD, &[&kind, &after, &now, &limit])?
        .iter()
        .map(|r| r.col(0))
        .collect()
}

/// Cancels job `id` if it is queued, waiting or running, and every
/// waiting job that depends on it, in one transaction; returns the state
/// it was in. A running job's lease is let go of and its run's attempt
/// ended `cancelled`: that run's end, fenced on its attempt, can no
/// longer commit (a batch holding it rolls back; its process learns of
/// the cancel at its watcher's next look).
pub(crate) fn cancel_job(c: &mut PgConn, id: i64, now: Millis) -> Result<JobState> {
    let mut tx = c.begin().map_err(write_err)?;
    // The row keeps its statement, prepared by its text: read and dropped
    // here, so that it is closed before the commit, on the server session
    // it was made on (behind a transaction pooler the next may be another's).
    let (state, attempt, key): (String, Option<i64>, String) = {
        let Some(row) = tx.query_opt(CANCEL_READ, &[&id]).map_err(write_err)? else {
            return Err(Error::NotFound(RowId::Job(id)));
        };
        (row.col(0)?, row.col(1)?, row.col(2)?)
    };
    let state: JobState = state.parse()?;
    if tx
        .execute(CANCEL, &[&id, &now, &CANCELLED_WHILE_RUNNING])
        .map_err(write_err)?
        != 1
    {
        return Err(Error::WrongState {
            action: Action::CancelJob(id),
            state: state.as_str().into(),
        });
    }
    if let Some(attempt) = attempt {
        tx.execute(CANCEL_RUN, &[&attempt, &now, &CANCELLED_WHILE_RUNNING])
            .map_err(write_err)?;
    }
    super::workflow::ended(&mut tx, &[(id, &key, JobState::Cancelled)], now)?;
    tx.commit().map_err(write_err)?;
    Ok(state)
}

pub(crate) fn retry_outbox(c: &mut PgConn, id: i64, now: Millis) -> Result<()> {
    if c.execute(RETRY_OUTBOX, &[&id, &now])? == 1 {
        return Ok(());
    }
    Err(refusal(
        c,
        OUTBOX_STATE,
        id,
        Action::RetryOutbox(id),
        RowId::OutboxRow(id),
    )?)
}

pub(crate) fn prune_batch(
    c: &mut PgConn,
    what: PruneWhat,
    before: Millis,
    limit: i64,
) -> Result<(usize, usize)> {
    let r = match what {
        PruneWhat::Jobs { failed_before } => {
            one(c.write(PRUNE_JOBS, &[&before, &limit, &failed_before])?)?
        }
        PruneWhat::Outbox => one(c.write(PRUNE_OUTBOX, &[&before, &limit])?)?,
        PruneWhat::Ledger => return Ok((super::ledger::prune(c, before, limit)?, 0)),
    };
    Ok((r.col::<i64>(0)? as usize, r.col::<i64>(1)? as usize))
}
