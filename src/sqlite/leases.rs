//! Leases on jobs in a file: renewing this process's, taking back expired
//! ones as the core decides, and giving a job back uncharged. Writes
//! `jobs` (state and lease columns) and `attempts` (through the history
//! module).

use rusqlite::Connection;

use crate::core::attempt::AttemptOutcome;
use crate::core::job::JobState;
use crate::core::lifecycle::{self, Expiry, ABANDONED_RUN};
use crate::core::time::Millis;
use crate::error::Result;
use crate::sqlite::history;

/// Whether any job or outbox row's lease expired before `now`: a reader's
/// look before reaping.
pub(crate) fn any_expired(conn: &Connection, now: Millis) -> Result<bool> {
    const SQL: &str =
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires_at < ?1) \
         OR EXISTS (SELECT 1 FROM outbox WHERE state = 'sending' AND lease_expires_at < ?1)";
    Ok(conn.prepare_cached(SQL)?.query_row([now], |r| r.get(0))?)
}

/// Extends the leases `owner` holds on the given jobs.
pub(crate) fn renew_leases(
    conn: &Connection,
    owner: &str,
    ids_json: &str,
    until: Millis,
) -> Result<usize> {
    const SQL: &str =
        "UPDATE jobs SET lease_expires_at = ?3 WHERE state = 'running' AND lease_owner = ?1 \
                       AND id IN (SELECT value FROM json_each(?2))";
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![owner, ids_json, until])?)
}

/// Takes back jobs whose lease ran out (the process died, or the run hung
/// past its lease), as [`lifecycle::on_expiry`] decides for each: a
/// claimed-but-unstarted job goes back to `queued` uncharged; a started run
/// is recorded `abandoned` and the job goes back uncharged, or dies as a
/// poison pill, its row as [`Expiry::job_end`] says. Returns how many jobs
/// were taken back.
pub(crate) fn reap(conn: &Connection, now: Millis, max_abandoned: i64) -> Result<usize> {
    const EXPIRED: &str = "SELECT id, current_attempt, abandoned, attempts FROM jobs \
         WHERE state = 'running' AND lease_expires_at < ?1 LIMIT 500";
    const UNCLAIM: &str =
        "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1";
    const ABANDON: &str = "UPDATE jobs SET state = ?2, abandoned = ?3, attempts = ?4, \
         run_at = coalesce(?5, run_at), last_error = ?6, finished_at = ?7, lease_owner = NULL, \
         lease_expires_at = NULL, current_attempt = NULL WHERE id = ?1";
    let expired: Vec<(i64, Option<i64>, i64, i64)> = conn
        .prepare_cached(EXPIRED)?
        .query_map([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for &(id, attempt, abandoned, attempts) in &expired {
        if let Some(a) = attempt {
            history::finish(conn, a, AttemptOutcome::Abandoned, Some(ABANDONED_RUN), now)?;
        }
        let expiry = lifecycle::on_expiry(attempt.is_some(), abandoned, max_abandoned);
        let Some((abandoned, end)) = expiry.job_end(attempts, now) else {
            conn.prepare_cached(UNCLAIM)?.execute([id])?;
            continue;
        };
        conn.prepare_cached(ABANDON)?.execute(rusqlite::params![
            id,
            end.state.as_str(),
            abandoned,
            end.attempts,
            end.run_at,
            end.last_error,
            end.finished_at
        ])?;
        if let Expiry::Poisoned { error, .. } = &expiry {
            crate::sqlite::workflow::cancel_dependents(conn, id, JobState::Dead, now)?;
            log::warn!(target: "litejob", job_id = id, abandoned = abandoned; "job is dead: {error}");
        }
    }
    Ok(expired.len())
}

/// Gives a job back to `queued` without charging it: a claimed job never
/// started (`attempt` None) or a run cut short by shutdown (recorded
/// `released`). Fenced on the lease. Returns false when the job was no
/// longer ours.
pub(crate) fn release(
    conn: &Connection,
    job_id: i64,
    owner: &str,
    attempt: Option<i64>,
    reason: &str,
    now: Millis,
) -> Result<bool> {
    match attempt {
        None => Ok(conn
            .prepare_cached(
                "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = ?1 AND state = 'running' AND lease_owner = ?2 AND current_attempt IS NULL",
            )?
            .execute(rusqlite::params![job_id, owner])?
            == 1),
        Some(a) => {
            let n = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'queued', attempts = max(attempts - 1, 0), lease_owner = NULL, \
                     lease_expires_at = NULL, current_attempt = NULL \
                     WHERE id = ?1 AND state = 'running' AND current_attempt = ?2",
                )?
                .execute(rusqlite::params![job_id, a])?;
            if n == 1 {
                history::finish(conn, a, AttemptOutcome::Released, Some(reason), now)?;
            }
            Ok(n == 1)
        }
    }
}
