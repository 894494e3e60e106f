//! Operator repairs on a file: requeue dead jobs, cancel a job (a running
//! one too), requeue a dead outbox row, prune finished history in bounded
//! batches. Writes `jobs` (retry, cancel, prune), `attempts` (a cancelled
//! run, through the history module; prune of finished rows) and `outbox`
//! (retry, prune) and `processed_jobs` (prune, through the ledger module,
//! only when asked).
//! Each runs on the file's one writer, so it works while another process
//! runs workers on the same file.

use rusqlite::{Connection, OptionalExtension};

use crate::core::attempt::AttemptOutcome;
use crate::core::job::JobState;
use crate::core::lifecycle::CANCELLED_WHILE_RUNNING;
use crate::core::time::Millis;
use crate::error::{Action, Error, Result, RowId};
use crate::sqlite::history;

// The SQLite statements behind the repairs, each run in one write
// transaction of the writer.

/// Requeuing a dead job renews its budget: the attempts it used are history
/// (kept in `attempts`), not a debt. `last_error` is kept so the operator
/// still sees why it died until the next run.
const RETRY_JOB: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
     run_at = ?2, finished_at = NULL WHERE id = ?1 AND state = 'dead'";

/// Requeues job `id` if it is dead.
pub(crate) fn retry_job(conn: &Connection, id: i64, now: Millis) -> Result<()> {
    if conn.prepare_cached(RETRY_JOB)?.execute((id, now))? == 1 {
        return Ok(());
    }
    Err(refusal(conn, id, Action::RetryJob(id))?)
}

/// Requeues up to `limit` dead jobs (of `kind`) with ids above `after`.
pub(crate) fn retry_dead_batch(
    conn: &Connection,
    kind: Option<&str>,
    after: i64,
    limit: i64,
    now: Millis,
) -> Result<Vec<i64>> {
    const SQL: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
         run_at = ?3, finished_at = NULL \
         WHERE id IN (SELECT id FROM jobs WHERE state = 'dead' AND (?1 IS NULL OR kind = ?1) \
                      AND id > ?2 ORDER BY id LIMIT ?4) \
         RETURNING id";
    let mut st = conn.prepare_cached(SQL)?;
    let rows = st.query_map(rusqlite::params![kind, after, now, limit], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<i64>>>()?)
}

/// Cancels job `id` if it is queued, waiting or running, and every
/// waiting job that depends on it, directly or through others; returns
/// the state it was in. A running job's lease is let go of and its run's
/// attempt ended `cancelled`: that run's end, fenced on its attempt, can
/// no longer commit (its process learns of the cancel at its watcher's
/// next look). On the writer, so no run of the job commits between the
/// read and the update.
pub(crate) fn cancel_job(conn: &Connection, id: i64, now: Millis) -> Result<JobState> {
    const READ: &str = "SELECT state, current_attempt FROM jobs WHERE id = ?1";
    const SQL: &str = "UPDATE jobs SET state = 'cancelled', finished_at = ?2, \
         last_error = CASE WHEN state = 'running' THEN ?3 ELSE last_error END, \
         lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
         WHERE id = ?1 AND (state = 'queued' OR state = 'waiting' OR state = 'running')";
    let found: Option<(String, Option<i64>)> = conn
        .prepare_cached(READ)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((state, attempt)) = found else {
        return Err(Error::NotFound(RowId::Job(id)));
    };
    let state: JobState = state.parse()?;
    if conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![id, now, CANCELLED_WHILE_RUNNING])?
        != 1
    {
        return Err(Error::WrongState {
            action: Action::CancelJob(id),
            state: state.as_str().into(),
        });
    }
    if let Some(attempt) = attempt {
        history::finish(
            conn,
            attempt,
            AttemptOutcome::Cancelled,
            Some(CANCELLED_WHILE_RUNNING),
            now,
        )?;
    }
    crate::sqlite::workflow::cancel_dependents(conn, id, JobState::Cancelled, now)?;
    Ok(state)
}

/// Deletes up to `limit` jobs finished before `before` (dead and cancelled
/// ones before `failed_before`) whose outbox rows are all sent and no
/// unfinished job depends on, with their attempts (a waiting or running
/// dependent still reads a dependency's state and output). Returns `(jobs,
/// attempts)`.
pub(crate) fn prune_jobs(
    conn: &Connection,
    before: Millis,
    failed_before: Millis,
    limit: i64,
) -> Result<(usize, usize)> {
    // The first bound keeps the walk on the finished_at index; the second
    // is each state's own.
    const PICK_JOBS: &str =
        "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= max(?1, ?3) \
         AND finished_at <= CASE WHEN state = 'succeeded' THEN ?1 ELSE ?3 END \
         AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = jobs.id AND o.state <> 'sent') \
         AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs w ON w.id = d.job_id \
                         WHERE d.depends_on = jobs.id AND w.finished_at IS NULL) \
         ORDER BY finished_at LIMIT ?2";
    const JOB_ATTEMPTS: &str =
        "DELETE FROM attempts WHERE job_id IN (SELECT value FROM json_each(?1))";
    const JOBS: &str = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))";
    delete_picked(
        conn,
        PICK_JOBS,
        [JOB_ATTEMPTS, JOBS],
        (before, limit, failed_before),
    )
}

/// Deletes up to `limit` outbox rows sent before `before`, with their
/// attempts. Returns `(rows, attempts)`.
pub(crate) fn prune_outbox(
    conn: &Connection,
    before: Millis,
    limit: i64,
) -> Result<(usize, usize)> {
    const PICK_OUTBOX: &str = "SELECT id FROM outbox WHERE state = 'sent' AND sent_at <= ?1 \
         ORDER BY sent_at LIMIT ?2";
    const OUTBOX_ATTEMPTS: &str =
        "DELETE FROM attempts WHERE outbox_id IN (SELECT value FROM json_each(?1))";
    const OUTBOX: &str = "DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?1))";
    delete_picked(
        conn,
        PICK_OUTBOX,
        [OUTBOX_ATTEMPTS, OUTBOX],
        (before, limit),
    )
}

/// Why a job action changed nothing: the job is missing, or in a state
/// `action` does not apply to.
fn refusal(conn: &Connection, id: i64, action: Action) -> Result<Error> {
    let state: Option<String> = conn
        .prepare_cached("SELECT state FROM jobs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(match state {
        None => Error::NotFound(RowId::Job(id)),
        Some(state) => Error::WrongState { action, state },
    })
}

/// Picks at most `limit` ids with `pick` (a `SELECT id ... ?1 ... LIMIT ?2`)
/// and runs `[attempts, rows]`, two deletes of those ids, in that order.
/// Returns `(rows deleted, attempts deleted)`.
fn delete_picked(
    conn: &Connection,
    pick: &str,
    [attempts, rows]: [&str; 2],
    params: impl rusqlite::Params,
) -> Result<(usize, usize)> {
    let ids = conn
        .prepare_cached(pick)?
        .query_map(params, |r| r.get::<_, i64>(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    if ids.is_empty() {
        return Ok((0, 0));
    }
    let ids = serde_json::to_string(&ids)?;
    let a = conn.prepare_cached(attempts)?.execute([&ids])?;
    let r = conn.prepare_cached(rows)?.execute([&ids])?;
    Ok((r, a))
}

/// Requeues a dead outbox row with a fresh attempt budget, due at `now`:
/// the one implementation behind
/// [`Admin::retry_outbox`](crate::admin::Admin::retry_outbox). `NotFound`
/// when there is no such row, `WrongState` when it is not dead.
pub(crate) fn retry_outbox(conn: &Connection, outbox_id: i64, now: Millis) -> Result<()> {
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
