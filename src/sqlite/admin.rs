//! Operator repairs, as [`Queue`] methods: requeue dead jobs, cancel a
//! queued job, requeue a dead outbox row, prune finished history. Writes
//! `jobs` (retry, cancel, prune), `attempts` and `outbox` (prune of finished
//! rows; an outbox retry through the outbox module) and `processed_jobs`
//! (prune, through the ledger module, only when asked).
//!
//! Every write goes through the queue's writer, so it shares the process's
//! one writer and its `BEGIN IMMEDIATE` rule, and works while another
//! process runs workers on the same file. Bulk actions take the write lock
//! one bounded batch at a time, so other writes interleave.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::core::time::Millis;
use crate::driver::PruneWhat;
use crate::error::{Action, Error, Result, RowId};
use crate::queue::Queue;

/// Rows per write transaction for bulk repairs: small enough that workers
/// in another process wait only briefly for the write lock.
const BATCH: usize = 1000;

/// What [`Queue::prune`] removes.
///
/// ```
/// # use std::time::Duration;
/// let week = litejob::PruneOptions::new(Duration::from_secs(7 * 86_400))
///     .with_ledger_older_than(Some(Duration::from_secs(90 * 86_400)));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PruneOptions {
    /// Finished jobs (succeeded, dead, cancelled) that finished at least
    /// this long ago go, with their attempts; so do outbox rows sent at
    /// least this long ago.
    pub older_than: Duration,
    /// Ledger rows completed longer ago than this go too. `None` (the
    /// default) keeps the ledger, so a re-delivered key stays a duplicate
    /// after its job row is gone.
    pub ledger_older_than: Option<Duration>,
    /// Rows per write transaction (default 1000).
    pub batch: usize,
}

impl PruneOptions {
    /// Prune the history finished at least `older_than` ago; keep the ledger.
    pub fn new(older_than: Duration) -> PruneOptions {
        PruneOptions {
            older_than,
            ledger_older_than: None,
            batch: BATCH,
        }
    }

    /// Sets the age of the finished history to delete.
    pub fn with_older_than(mut self, d: Duration) -> Self {
        self.older_than = d;
        self
    }

    /// Sets the age of the ledger rows to delete (`None`: keep the ledger).
    pub fn with_ledger_older_than(mut self, d: Option<Duration>) -> Self {
        self.ledger_older_than = d;
        self
    }

    /// Sets the rows per write transaction.
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }
}

/// What [`Queue::prune`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Job rows deleted.
    pub jobs: usize,
    /// Attempt rows of those jobs deleted.
    pub job_attempts: usize,
    /// Sent outbox rows deleted.
    pub outbox: usize,
    /// Attempt rows of those outbox rows deleted.
    pub outbox_attempts: usize,
    /// Ledger rows deleted (0 unless asked).
    pub ledger: usize,
    /// Write transactions used.
    pub transactions: usize,
}

impl Queue {
    /// Requeues one dead job with a renewed attempt budget, runnable now.
    /// [`Error::NotFound`] when there is no such job; [`Error::WrongState`]
    /// when it is not dead (nothing changes).
    pub fn retry_job(&self, id: i64) -> Result<()> {
        let now = self.backend().now();
        self.backend().retry_job(id, now)?;
        self.notify();
        Ok(())
    }

    /// Requeues every dead job (of `kind`, if given) with a renewed attempt
    /// budget, a bounded batch per write transaction so the write lock is
    /// never held long. Only jobs dead when a batch runs are touched; the
    /// walk goes by id, so a job that dies again meanwhile is not retried
    /// twice. Returns how many were requeued.
    pub fn retry_dead_jobs(&self, kind: Option<&str>) -> Result<usize> {
        let (now, batch) = (self.backend().now(), BATCH as i64);
        let mut after = 0i64;
        let mut total = 0usize;
        loop {
            let ids = self.backend().retry_dead_batch(kind, after, batch, now)?;
            total += ids.len();
            if let Some(max) = ids.iter().max() {
                after = *max;
                self.notify();
            }
            if (ids.len() as i64) < batch {
                return Ok(total);
            }
        }
    }

    /// Cancels a queued job: it will not run. [`Error::NotFound`] when there
    /// is no such job; [`Error::WrongState`] when it is not queued (a running
    /// job's transaction is already under way; a finished one has nothing
    /// left to cancel).
    pub fn cancel_job(&self, id: i64) -> Result<()> {
        let now = self.backend().now();
        self.backend().cancel_job(id, now)
    }

    /// Requeues a dead outbox row with a fresh attempt budget, due now.
    /// [`Error::NotFound`] when there is no such row; [`Error::WrongState`]
    /// when it is not dead (nothing changes).
    pub fn retry_outbox(&self, outbox_id: i64) -> Result<()> {
        let now = self.backend().now();
        self.backend().retry_outbox(outbox_id, now)?;
        // Effect threads of this process pick it up now, not at their next poll.
        self.notify_outbox();
        Ok(())
    }

    /// Deletes finished history in bounded batches (one write transaction
    /// per batch), so even a prune of millions of rows holds the write lock
    /// only briefly at a time and workers keep going in between. A finished
    /// job whose outbox rows are not all sent yet is kept, so
    /// [`Queue::explain`] can still link the pending effect to its job.
    pub fn prune(&self, opts: &PruneOptions) -> Result<PruneReport> {
        let now = self.backend().now();
        let before = |d: Duration| now.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64);
        let batch = opts.batch.max(1) as i64;
        let finished_before = before(opts.older_than);
        let mut report = PruneReport::default();
        // Jobs first: their outbox rows outlive them (job_id becomes NULL),
        // and their attempts go in the same transaction.
        let mut steps = vec![
            (PruneWhat::Jobs, finished_before),
            (PruneWhat::Outbox, finished_before),
        ];
        if let Some(d) = opts.ledger_older_than {
            steps.push((PruneWhat::Ledger, before(d)));
        }
        for (what, before) in steps {
            loop {
                let (rows, attempts) = self.backend().prune_batch(what, before, batch)?;
                report.transactions += 1;
                match what {
                    PruneWhat::Jobs => {
                        report.jobs += rows;
                        report.job_attempts += attempts;
                    }
                    PruneWhat::Outbox => {
                        report.outbox += rows;
                        report.outbox_attempts += attempts;
                    }
                    PruneWhat::Ledger => report.ledger += rows,
                }
                if (rows as i64) < batch {
                    break;
                }
            }
        }
        Ok(report)
    }
}

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

/// Cancels job `id` if it is queued.
pub(crate) fn cancel_job(conn: &Connection, id: i64, now: Millis) -> Result<()> {
    const SQL: &str = "UPDATE jobs SET state = 'cancelled', finished_at = ?2 \
                       WHERE id = ?1 AND state = 'queued'";
    if conn.prepare_cached(SQL)?.execute((id, now))? == 1 {
        return Ok(());
    }
    Err(refusal(conn, id, Action::CancelJob(id))?)
}

/// Deletes up to `limit` jobs finished before `before` whose outbox rows
/// are all sent, with their attempts. Returns `(jobs, attempts)`.
pub(crate) fn prune_jobs(conn: &Connection, before: Millis, limit: i64) -> Result<(usize, usize)> {
    const PICK_JOBS: &str =
        "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= ?1 \
         AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = jobs.id AND o.state <> 'sent') \
         ORDER BY finished_at LIMIT ?2";
    const JOB_ATTEMPTS: &str =
        "DELETE FROM attempts WHERE job_id IN (SELECT value FROM json_each(?1))";
    const JOBS: &str = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))";
    delete_picked(conn, PICK_JOBS, [JOB_ATTEMPTS, JOBS], before, limit)
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
    delete_picked(conn, PICK_OUTBOX, [OUTBOX_ATTEMPTS, OUTBOX], before, limit)
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
    before: Millis,
    limit: i64,
) -> Result<(usize, usize)> {
    let ids = conn
        .prepare_cached(pick)?
        .query_map((before, limit), |r| r.get::<_, i64>(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    if ids.is_empty() {
        return Ok((0, 0));
    }
    let ids = serde_json::to_string(&ids)?;
    let a = conn.prepare_cached(attempts)?.execute([&ids])?;
    let r = conn.prepare_cached(rows)?.execute([&ids])?;
    Ok((r, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_options_default_to_keeping_the_ledger() {
        let o = PruneOptions::new(Duration::from_secs(60));
        assert_eq!((o.ledger_older_than, o.batch), (None, BATCH));
        let o = o.with_batch(5).with_older_than(Duration::ZERO);
        assert_eq!((o.older_than, o.batch), (Duration::ZERO, 5));
    }
}
