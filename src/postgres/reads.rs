//! Reads on PostgreSQL: jobs as the library's types (attempts are read in
//! `history.rs`, outbox rows in `outbox.rs`), and the operator's reports
//! (stats, one job, one key), each of those in one snapshot. Writes no
//! table.

use postgres::{GenericClient, Row};

use super::conn::{all, bad, in_row, one, read_err, Col, PgConn};
use crate::core::job::{Job, JobFilter};
use crate::core::reports::stats::{Explanation, JobDetail, LedgerEntry, OutboxEntry, Stats};
use crate::core::time::Millis;
use crate::error::Result;

const JOB_BY_ID: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs WHERE id = $1";
const JOB_BY_KEY: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs WHERE idempotency_key = $1";
/// A page of jobs below a cursor (ids under `$6`), newest first: a walk
/// down the primary key that stops at the limit, filtered on the way.
const JOBS_BEFORE: &str = "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs \
     WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR kind = $2) \
     AND ($3::text IS NULL OR queue = $3) \
     AND ($5::text IS NULL OR left(idempotency_key, length($5)) = $5) AND id < $6 \
     ORDER BY id DESC LIMIT $4";
/// The page of jobs above a cursor (the `$4` ids just over `$6`), newest
/// first.
const JOBS_AFTER: &str = "SELECT * FROM (SELECT id, queue, kind, idempotency_key, payload, \
     state, priority, run_at, attempts, max_attempts, abandoned, deliveries, last_error, \
     created_at, finished_at, lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms FROM jobs \
     WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR kind = $2) \
     AND ($3::text IS NULL OR queue = $3) \
     AND ($5::text IS NULL OR left(idempotency_key, length($5)) = $5) AND id > $6 \
     ORDER BY id LIMIT $4) p ORDER BY id DESC";
/// A `jobs` row, in the column order of the reads above.
pub(crate) fn job_from_row(r: &Row) -> Result<Job> {
    in_row("jobs", r, |r| {
        let state: String = r.col(5)?;
        Ok(Job {
            id: r.col(0)?,
            queue: r.col(1)?,
            kind: r.col(2)?,
            idempotency_key: r.col(3)?,
            payload: r.col(4)?,
            state: state.parse().map_err(|_| bad("job state", &state))?,
            priority: r.col(6)?,
            run_at: r.col(7)?,
            attempts: r.col(8)?,
            max_attempts: r.col(9)?,
            abandoned: r.col(10)?,
            deliveries: r.col(11)?,
            last_error: r.col(12)?,
            created_at: r.col(13)?,
            finished_at: r.col(14)?,
            lease_owner: r.col(15)?,
            lease_expires_at: r.col(16)?,
            current_attempt: r.col(17)?,
            output: r.col(18)?,
            partition: r.col(19)?,
            timeout_ms: r.col(20)?,
        })
    })
}

pub(crate) fn job(c: &mut PgConn, id: i64) -> Result<Option<Job>> {
    c.query_opt(JOB_BY_ID, &[&id])?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

pub(crate) fn job_by_key(c: &mut PgConn, key: &str) -> Result<Option<Job>> {
    c.query_opt(JOB_BY_KEY, &[&key])?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

pub(crate) fn jobs(c: &mut PgConn, f: &JobFilter) -> Result<Vec<Job>> {
    let limit = i64::from(f.limit.unwrap_or(100));
    let state = f.state.map(|s| s.as_str());
    let (sql, cursor) = match (f.before, f.after) {
        (None, Some(after)) => (JOBS_AFTER, after),
        (before, _) => (JOBS_BEFORE, before.unwrap_or(i64::MAX)),
    };
    all(
        c.query(
            sql,
            &[&state, &f.kind, &f.queue, &limit, &f.key_prefix, &cursor],
        )?,
        job_from_row,
    )
}

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
        let Some(job) = q(tx, JOB_BY_ID, &[&id])?
            .first()
            .map(job_from_row)
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
        let job = q(tx, JOB_BY_KEY, &[&key])?
            .first()
            .map(job_from_row)
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
        let Some(job) = q(tx, JOB_BY_KEY, &[&key])?
            .first()
            .map(job_from_row)
            .transpose()?
        else {
            return Ok(None);
        };
        crate::postgres::workflow::graph(tx, job.id, limit).map(Some)
    })
}

/// Each job of `ids` that still exists: its state and the attempt it runs.
pub(crate) fn run_states(
    c: &mut PgConn,
    ids: &[i64],
) -> Result<Vec<(i64, crate::core::job::JobState, Option<i64>)>> {
    const SQL: &str = "SELECT id, state, current_attempt FROM jobs WHERE id = ANY($1)";
    c.query(SQL, &[&ids])?
        .iter()
        .map(|r| {
            let state: String = r.col(1)?;
            Ok((r.col(0)?, state.parse()?, r.col(2)?))
        })
        .collect()
}
