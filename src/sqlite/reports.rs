//! The operator's reports on a file: counts, one job with its history,
//! everything known about one key, a workflow, the failures grouped; each
//! in one read transaction, so its numbers agree with each other while
//! workers write. Writes no table.

use std::path::Path;

use rusqlite::Connection;

use crate::core::reports::failures::FailureGroup;
use crate::core::reports::failures::Failures;
use crate::core::reports::stats::empty_stats;
use crate::core::reports::stats::explanation_of;
use crate::core::reports::stats::fill_job_counts;
use crate::core::reports::stats::job_detail_of;
use crate::core::reports::stats::Explanation;
use crate::core::reports::stats::JobDetail;
use crate::core::reports::stats::LedgerEntry;
use crate::core::reports::stats::OutboxEntry;
use crate::core::reports::stats::Stats;
use crate::core::reports::workflow::Workflow;
use crate::core::time::Millis;
use crate::error::Result;
use crate::sqlite::controls::{self};
use crate::sqlite::history::{self};
use crate::sqlite::ledger;
use crate::sqlite::outbox::{self};
use crate::sqlite::schema;

/// Runs `f` in one read transaction (unless the caller already opened one),
/// so several queries see the same state of the file while workers write.
pub(crate) fn in_snapshot<R>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<R>,
) -> Result<R> {
    if !conn.is_autocommit() {
        return f(conn);
    }
    conn.execute_batch("BEGIN DEFERRED")?;
    let r = f(conn);
    if conn.execute_batch("COMMIT").is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    r
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The sizes in bytes of the database file and of its write-ahead log
/// (`<file>-wal`; 0 when there is none).
pub(crate) fn file_sizes(path: &Path) -> (u64, u64) {
    let mut wal = path.to_path_buf().into_os_string();
    wal.push("-wal");
    (file_len(path), file_len(Path::new(&wal)))
}

/// The counts of [`Admin::stats`](crate::admin::Admin::stats), from a file (without its sizes).
pub(crate) fn stats(conn: &Connection, now: Millis) -> Result<Stats> {
    let mut s = empty_stats(schema::read_version(conn)?);
    {
        let mut st = conn.prepare_cached(
            "SELECT kind, queue, state, count(*) FROM jobs GROUP BY kind, queue, state",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (kind, queue, state, n) = row?;
            s.jobs.add(&state, n);
            s.by_kind.entry(kind).or_default().add(&state, n);
            s.by_queue.entry(queue).or_default().add(&state, n);
        }
    }
    {
        let mut st =
            conn.prepare_cached("SELECT kind, state, count(*) FROM outbox GROUP BY kind, state")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (kind, state, n) = row?;
            s.outbox.add(&state, n);
            s.outbox_by_kind.entry(kind).or_default().add(&state, n);
        }
    }
    let (oldest_created, oldest_due, due): (Option<i64>, Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT min(created_at), min(CASE WHEN run_at <= ?1 THEN run_at END), \
                    coalesce(sum(run_at <= ?1), 0) \
             FROM jobs WHERE state = 'queued'",
        )?
        .query_row([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    s.oldest_queued_age_ms = oldest_created.map(|t| (now - t).max(0));
    s.oldest_due_wait_ms = oldest_due.map(|t| (now - t).max(0));
    s.queued_due = due;
    s.ledger_rows = conn
        .prepare_cached("SELECT count(*) FROM processed_jobs")?
        .query_row([], |r| r.get(0))?;
    s.schedules = crate::sqlite::schedules::count(conn)?;
    s.queue_controls = controls::controlled(conn, now)?;
    fill_job_counts(&mut s);
    Ok(s)
}

pub(crate) fn job_detail(conn: &Connection, id: i64) -> Result<Option<JobDetail>> {
    let Some(job) = crate::sqlite::reads::job(conn, id)? else {
        return Ok(None);
    };
    let attempts = history::for_job(conn, id)?;
    let outbox = outbox_entries(conn, id)?;
    let ledger = ledger_entry(conn, &job.idempotency_key)?;
    let links = crate::sqlite::workflow::links(conn, id)?;
    let mut detail = job_detail_of(job, attempts, outbox, ledger, links);
    detail.steps = crate::sqlite::steps::of_job(conn, id)?;
    Ok(Some(detail))
}

fn ledger_entry(conn: &Connection, key: &str) -> Result<Option<LedgerEntry>> {
    Ok(
        ledger::lookup(conn, key)?.map(|(completed_at, job_id)| LedgerEntry {
            key: key.to_string(),
            completed_at,
            job_id,
        }),
    )
}

fn outbox_entries(conn: &Connection, job_id: i64) -> Result<Vec<OutboxEntry>> {
    outbox::for_job(conn, job_id)?
        .into_iter()
        .map(|row| {
            Ok(OutboxEntry {
                attempts: history::for_outbox(conn, row.id)?,
                row,
            })
        })
        .collect()
}

pub(crate) fn explain(conn: &Connection, key: &str) -> Result<Explanation> {
    let job = crate::sqlite::reads::job_by_key(conn, key)?;
    let ledger = ledger_entry(conn, key)?;
    let (attempts, outbox, links) = match &job {
        Some(j) => (
            history::for_job(conn, j.id)?,
            outbox_entries(conn, j.id)?,
            crate::sqlite::workflow::links(conn, j.id)?,
        ),
        None => (Vec::new(), Vec::new(), (Vec::new(), Vec::new())),
    };
    let steps = match &job {
        Some(j) => crate::sqlite::steps::of_job(conn, j.id)?,
        None => Vec::new(),
    };
    let mut e = explanation_of(key, job, attempts, ledger, outbox, links);
    e.steps = steps;
    Ok(e)
}

/// The workflow around the job of `key` (the caller holds one read
/// transaction).
pub(crate) fn workflow(conn: &Connection, key: &str, limit: usize) -> Result<Option<Workflow>> {
    match crate::sqlite::reads::job_by_key(conn, key)? {
        Some(j) => crate::sqlite::workflow::graph(conn, j.id, limit).map(Some),
        None => Ok(None),
    }
}

// Failures: dead jobs and dead outbox rows by last error and kind.

/// Dead jobs by last error and kind. `+state`: a table scan, which a
/// million finished jobs cost less than an index walk with a lookup each.
const DEAD_JOBS: &str =
    "SELECT last_error, kind, count(*), max(id), min(finished_at), max(finished_at) \
     FROM jobs WHERE +state = 'dead' GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT ?1";

/// Dead outbox rows by last error and kind.
const DEAD_OUTBOX: &str =
    "SELECT last_error, kind, count(*), max(id), min(created_at), max(created_at) \
     FROM outbox WHERE +state = 'dead' GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT ?1";

/// The groups of a file (the caller holds one read transaction).
pub(crate) fn failures(conn: &Connection, limit: u32) -> Result<Failures> {
    Ok(Failures {
        jobs: groups(conn, DEAD_JOBS, limit)?,
        outbox: groups(conn, DEAD_OUTBOX, limit)?,
    })
}

fn groups(conn: &Connection, sql: &str, limit: u32) -> Result<Vec<FailureGroup>> {
    let mut st = conn.prepare_cached(sql)?;
    let rows = st.query_map([limit], |r| {
        Ok(FailureGroup {
            error: r.get(0)?,
            kind: r.get(1)?,
            count: r.get(2)?,
            newest_id: r.get(3)?,
            first_at: r.get(4)?,
            last_at: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
