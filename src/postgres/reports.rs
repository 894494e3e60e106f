//! The operator's reports on PostgreSQL: counts, one job with its
//! history, everything known about one key, a workflow, the failures
//! grouped; each in one snapshot (REPEATABLE READ), so its numbers agree
//! with each other while workers write. Writes no table.

use postgres::{GenericClient, Row};

use super::conn::{all, one, read_err, Col, PgConn, Stmt};
use crate::core::reports::failures::{FailureGroup, Failures};
use crate::core::reports::stats::{Explanation, JobDetail, LedgerEntry, OutboxEntry, Stats};
use crate::core::time::Millis;
use crate::error::Result;

/// Runs `f` in one read-only snapshot (REPEATABLE READ), so several
/// queries agree with each other while workers write.
pub(crate) fn in_snapshot<R>(
    c: &mut PgConn,
    f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<R>,
) -> Result<R> {
    let mut tx = c.begin_snapshot().map_err(read_err)?;
    let r = f(&mut tx)?;
    tx.commit().map_err(read_err)?;
    Ok(r)
}

fn q<C: GenericClient>(c: &mut C, sql: &str, params: super::conn::Params<'_>) -> Result<Vec<Row>> {
    c.query(sql, params).map_err(read_err)
}

pub(crate) fn stats(c: &mut PgConn, now: Millis, schema_version: i64) -> Result<Stats> {
    in_snapshot(c, |tx| {
        let mut s = crate::core::reports::stats::empty_stats(schema_version);
        for r in q(
            tx,
            "SELECT kind, queue, state, count(*) FROM jobs GROUP BY kind, queue, state",
            &[],
        )? {
            let (kind, queue, state, n): (String, String, String, i64) =
                (r.col(0)?, r.col(1)?, r.col(2)?, r.col(3)?);
            s.jobs.add(&state, n);
            s.by_kind.entry(kind).or_default().add(&state, n);
            s.by_queue.entry(queue).or_default().add(&state, n);
        }
        for r in q(
            tx,
            "SELECT kind, state, count(*) FROM outbox GROUP BY kind, state",
            &[],
        )? {
            let (kind, state, n): (String, String, i64) = (r.col(0)?, r.col(1)?, r.col(2)?);
            s.outbox.add(&state, n);
            s.outbox_by_kind.entry(kind).or_default().add(&state, n);
        }
        let r = one(q(
            tx,
            "SELECT min(created_at), min(CASE WHEN run_at <= $1 THEN run_at END), \
                    count(*) FILTER (WHERE run_at <= $1) \
             FROM jobs WHERE state = 'queued'",
            &[&now],
        )?)?;
        let (oldest_created, oldest_due, due): (Option<i64>, Option<i64>, i64) =
            (r.col(0)?, r.col(1)?, r.col(2)?);
        // Saturating: a time set by hand far in the past must not overflow.
        s.oldest_queued_age_ms = oldest_created.map(|t| now.saturating_sub(t).max(0));
        s.oldest_due_wait_ms = oldest_due.map(|t| now.saturating_sub(t).max(0));
        s.queued_due = due;
        s.ledger_rows = one(q(tx, "SELECT count(*) FROM processed_jobs", &[])?)?.col(0)?;
        s.queue_controls = super::controls::controlled(tx, now)?;
        crate::core::reports::stats::fill_job_counts(&mut s);
        // The tables' size on disk stands for the file's.
        s.file_bytes = one(q(tx, super::tally::TABLE_BYTES, &[])?)?
            .col::<i64>(0)?
            .max(0) as u64;
        Ok(s)
    })
}

fn outbox_entries<C: GenericClient>(tx: &mut C, job_id: i64) -> Result<Vec<OutboxEntry>> {
    let rows = all(
        q(tx, super::outbox::OF_JOB, &[&job_id])?,
        super::outbox::from_row,
    )?;
    rows.into_iter()
        .map(|row| {
            Ok(OutboxEntry {
                attempts: all(
                    q(tx, super::history::OF_OUTBOX, &[&row.id])?,
                    super::history::from_row,
                )?,
                row,
            })
        })
        .collect()
}

fn ledger_entry<C: GenericClient>(tx: &mut C, key: &str) -> Result<Option<LedgerEntry>> {
    Ok(
        super::ledger::lookup(tx, key)?.map(|(completed_at, job_id)| LedgerEntry {
            key: key.to_string(),
            completed_at,
            job_id,
        }),
    )
}

pub(crate) fn job_detail(c: &mut PgConn, id: i64) -> Result<Option<JobDetail>> {
    in_snapshot(c, |tx| {
        let Some(job) = q(tx, super::reads::JOB_BY_ID, &[&id])?
            .first()
            .map(super::reads::job_from_row)
            .transpose()?
        else {
            return Ok(None);
        };
        let attempts = all(
            q(tx, super::history::OF_JOB, &[&id])?,
            super::history::from_row,
        )?;
        let outbox = outbox_entries(tx, id)?;
        let ledger = ledger_entry(tx, &job.idempotency_key)?;
        let links = crate::postgres::workflow::links(tx, id)?;
        let mut detail =
            crate::core::reports::stats::job_detail_of(job, attempts, outbox, ledger, links);
        detail.steps = all(q(tx, super::steps::OF_JOB, &[&id])?, super::steps::from_row)?;
        Ok(Some(detail))
    })
}

pub(crate) fn explain(c: &mut PgConn, key: &str) -> Result<Explanation> {
    in_snapshot(c, |tx| {
        let job = q(tx, super::reads::JOB_BY_KEY, &[&key])?
            .first()
            .map(super::reads::job_from_row)
            .transpose()?;
        let ledger = ledger_entry(tx, key)?;
        let (attempts, outbox, links) = match &job {
            Some(j) => (
                all(
                    q(tx, super::history::OF_JOB, &[&j.id])?,
                    super::history::from_row,
                )?,
                outbox_entries(tx, j.id)?,
                crate::postgres::workflow::links(tx, j.id)?,
            ),
            None => (Vec::new(), Vec::new(), (Vec::new(), Vec::new())),
        };
        let steps = match &job {
            Some(j) => all(
                q(tx, super::steps::OF_JOB, &[&j.id])?,
                super::steps::from_row,
            )?,
            None => Vec::new(),
        };
        let mut e =
            crate::core::reports::stats::explanation_of(key, job, attempts, ledger, outbox, links);
        e.steps = steps;
        Ok(e)
    })
}

/// The workflow around the job of `key`, in one snapshot.
pub(crate) fn workflow(
    c: &mut PgConn,
    key: &str,
    limit: usize,
) -> Result<Option<crate::core::reports::workflow::Workflow>> {
    in_snapshot(c, |tx| {
        let Some(job) = q(tx, super::reads::JOB_BY_KEY, &[&key])?
            .first()
            .map(super::reads::job_from_row)
            .transpose()?
        else {
            return Ok(None);
        };
        crate::postgres::workflow::graph(tx, job.id, limit).map(Some)
    })
}

// Failures: dead jobs and dead outbox rows by last error and kind.

/// Dead jobs by last error and kind, the largest groups first (`$1`: how
/// many groups).
const DEAD_JOBS: &str = "SELECT last_error, kind, count(*), max(id), \
     min(finished_at), max(finished_at) FROM jobs WHERE state = 'dead' \
     GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT $1";

/// Dead outbox rows by last error and kind.
const DEAD_OUTBOX: &str = "SELECT last_error, kind, count(*), max(id), \
     min(created_at), max(created_at) FROM outbox WHERE state = 'dead' \
     GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT $1";

fn group(r: &Row) -> Result<FailureGroup> {
    Ok(FailureGroup {
        error: r.col(0)?,
        kind: r.col(1)?,
        count: r.col(2)?,
        newest_id: r.col(3)?,
        first_at: r.col(4)?,
        last_at: r.col(5)?,
    })
}

/// The failures: dead jobs and dead outbox rows by last error and kind,
/// in one snapshot.
pub(crate) fn failures(c: &mut PgConn, limit: u32) -> Result<Failures> {
    let (jobs, outbox): (Stmt, Stmt) = (c.stmt(DEAD_JOBS)?, c.stmt(DEAD_OUTBOX)?);
    let limit = i64::from(limit);
    in_snapshot(c, |tx| {
        let mut groups = |st: &Stmt| -> Result<Vec<FailureGroup>> {
            st.query(tx, &[&limit])
                .map_err(read_err)?
                .iter()
                .map(group)
                .collect()
        };
        Ok(Failures {
            jobs: groups(&jobs)?,
            outbox: groups(&outbox)?,
        })
    })
}
