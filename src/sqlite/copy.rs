//! The sending side of a copy out of a file: every queue table read in
//! the caller's one read snapshot and streamed, in batches, into the
//! destination's sink, ids and keys kept (jobs with their outputs, and the
//! workflows' edges and the steps' results after every job); then the highest id each table ever
//! gave out. Writes no table. The receiving side of a copy into a
//! file is `import` ([`copy_in`]).

use rusqlite::{Connection, Row};

use crate::core::copy::{
    AttemptRows, CopyReport, DependencyRows, JobRows, LastIds, LedgerRows, OutboxRows, QueueRows,
    QueueStartRows, ScheduleRows, StepRows, READ_ATTEMPTS, READ_DEPENDENCIES, READ_JOBS,
    READ_LEDGER, READ_OUTBOX, READ_QUEUES, READ_QUEUE_STARTS, READ_SCHEDULES, READ_STEPS,
};
use crate::driver::copy::CopySink;
use crate::error::Result;

mod import;
pub(crate) use import::copy_in;

/// Rows per insert statement: large enough that a round trip is spent on
/// thousands of rows, small enough that a batch's arrays stay a few MB.
const BATCH: usize = 5000;

/// The highest id each table ever gave out: `AUTOINCREMENT` remembers the
/// ids of rows deleted since (pruned jobs, whose keys the ledger still
/// names), and the destination must never give them out again.
const LAST_IDS: &str = "SELECT \
     max((SELECT coalesce(max(id), 0) FROM jobs), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0)), \
     max((SELECT coalesce(max(id), 0) FROM outbox), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)), \
     max((SELECT coalesce(max(id), 0) FROM attempts), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'attempts'), 0))";

/// Reads `sql`'s rows into batches of `T` (via `push`), handing each full
/// batch and the last to `flush`; returns the number of rows.
fn stream<T: Default>(
    conn: &Connection,
    sql: &str,
    mut push: impl FnMut(&mut T, &Row<'_>) -> rusqlite::Result<()>,
    mut flush: impl FnMut(&T) -> Result<()>,
) -> Result<u64> {
    let mut st = conn.prepare(sql)?;
    let mut rows = st.query([])?;
    let (mut batch, mut in_batch, mut total) = (T::default(), 0usize, 0u64);
    while let Some(row) = rows.next()? {
        push(&mut batch, row)?;
        in_batch += 1;
        total += 1;
        if in_batch == BATCH {
            flush(&batch)?;
            batch = T::default();
            in_batch = 0;
        }
    }
    if in_batch > 0 {
        flush(&batch)?;
    }
    Ok(total)
}

fn copy_jobs(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_JOBS,
        |b: &mut JobRows, r| {
            b.id.push(r.get(0)?);
            b.queue.push(r.get(1)?);
            b.kind.push(r.get(2)?);
            b.key.push(r.get(3)?);
            b.payload.push(r.get(4)?);
            b.state.push(r.get(5)?);
            b.priority.push(r.get(6)?);
            b.run_at.push(r.get(7)?);
            b.attempts.push(r.get(8)?);
            b.max_attempts.push(r.get(9)?);
            b.abandoned.push(r.get(10)?);
            b.deliveries.push(r.get(11)?);
            b.last_error.push(r.get(12)?);
            b.created_at.push(r.get(13)?);
            b.finished_at.push(r.get(14)?);
            b.lease_owner.push(r.get(15)?);
            b.lease_expires_at.push(r.get(16)?);
            b.current_attempt.push(r.get(17)?);
            b.output.push(r.get(18)?);
            b.partition_key.push(r.get(19)?);
            b.timeout_ms.push(r.get(20)?);
            Ok(())
        },
        |b| tx.jobs(b),
    )
}

fn copy_ledger(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_LEDGER,
        |b: &mut LedgerRows, r| {
            b.key.push(r.get(0)?);
            b.completed_at.push(r.get(1)?);
            b.job_id.push(r.get(2)?);
            Ok(())
        },
        |b| tx.ledger(b),
    )
}

fn copy_outbox(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_OUTBOX,
        |b: &mut OutboxRows, r| {
            b.id.push(r.get(0)?);
            b.key.push(r.get(1)?);
            b.kind.push(r.get(2)?);
            b.payload.push(r.get(3)?);
            b.state.push(r.get(4)?);
            b.attempts.push(r.get(5)?);
            b.max_attempts.push(r.get(6)?);
            b.job_id.push(r.get(7)?);
            b.next_attempt_at.push(r.get(8)?);
            b.last_error.push(r.get(9)?);
            b.created_at.push(r.get(10)?);
            b.sent_at.push(r.get(11)?);
            b.lease_owner.push(r.get(12)?);
            b.lease_expires_at.push(r.get(13)?);
            b.current_attempt.push(r.get(14)?);
            Ok(())
        },
        |b| tx.outbox(b),
    )
}

fn copy_attempts(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_ATTEMPTS,
        |b: &mut AttemptRows, r| {
            b.id.push(r.get(0)?);
            b.job_id.push(r.get(1)?);
            b.outbox_id.push(r.get(2)?);
            b.attempt.push(r.get(3)?);
            b.key.push(r.get(4)?);
            b.worker.push(r.get(5)?);
            b.started_at.push(r.get(6)?);
            b.finished_at.push(r.get(7)?);
            b.outcome.push(r.get(8)?);
            b.error.push(r.get(9)?);
            Ok(())
        },
        |b| tx.attempts(b),
    )
}

fn copy_schedules(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_SCHEDULES,
        |b: &mut ScheduleRows, r| {
            b.name.push(r.get(0)?);
            b.cron.push(r.get(1)?);
            b.tz.push(r.get(2)?);
            b.kind.push(r.get(3)?);
            b.payload.push(r.get(4)?);
            b.queue.push(r.get(5)?);
            b.priority.push(r.get(6)?);
            b.max_retries.push(r.get(7)?);
            b.catch_up.push(r.get(8)?);
            b.catch_up_window_ms.push(r.get(9)?);
            b.last_slot_at.push(r.get(10)?);
            b.next_slot_at.push(r.get(11)?);
            b.created_at.push(r.get(12)?);
            b.updated_at.push(r.get(13)?);
            Ok(())
        },
        |b| tx.schedules(b),
    )
}

fn copy_queues(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_QUEUES,
        |b: &mut QueueRows, r| {
            b.name.push(r.get(0)?);
            b.paused.push(r.get::<_, i64>(1)? != 0);
            b.concurrency.push(r.get(2)?);
            b.rate_limit.push(r.get(3)?);
            b.rate_window_ms.push(r.get(4)?);
            b.updated_at.push(r.get(5)?);
            b.partition_concurrency.push(r.get(6)?);
            b.partition_rate_limit.push(r.get(7)?);
            b.partition_rate_window_ms.push(r.get(8)?);
            Ok(())
        },
        |b| tx.queues(b),
    )
}

fn copy_queue_starts(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_QUEUE_STARTS,
        |b: &mut QueueStartRows, r| {
            b.queue.push(r.get(0)?);
            b.started_at.push(r.get(1)?);
            b.partition_key.push(r.get(2)?);
            Ok(())
        },
        |b| tx.queue_starts(b),
    )
}

fn copy_dependencies(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_DEPENDENCIES,
        |b: &mut DependencyRows, r| {
            b.job_id.push(r.get(0)?);
            b.depends_on.push(r.get(1)?);
            Ok(())
        },
        |b| tx.dependencies(b),
    )
}

fn copy_steps(conn: &Connection, tx: &mut dyn CopySink) -> Result<u64> {
    stream(
        conn,
        READ_STEPS,
        |b: &mut StepRows, r| {
            b.job_id.push(r.get(0)?);
            b.name.push(r.get(1)?);
            b.attempt.push(r.get(2)?);
            b.output.push(r.get(3)?);
            b.started_at.push(r.get(4)?);
            b.finished_at.push(r.get(5)?);
            b.reused_in.push(r.get(6)?);
            Ok(())
        },
        |b| tx.steps(b),
    )
}

/// Streams every queue table of the file into `sink` (the caller holds
/// one read snapshot); returns what was moved and the file's last ids.
pub(crate) fn export(conn: &Connection, sink: &mut dyn CopySink) -> Result<(CopyReport, LastIds)> {
    let report = CopyReport {
        jobs: copy_jobs(conn, sink)?,
        processed_jobs: copy_ledger(conn, sink)?,
        outbox: copy_outbox(conn, sink)?,
        attempts: copy_attempts(conn, sink)?,
        schedules: copy_schedules(conn, sink)?,
        queues: copy_queues(conn, sink)?,
        queue_starts: copy_queue_starts(conn, sink)?,
        // After the jobs: an edge's two jobs are in the destination first.
        job_dependencies: copy_dependencies(conn, sink)?,
        job_steps: copy_steps(conn, sink)?,
    };
    let last = conn.query_row(LAST_IDS, [], |r| {
        Ok(LastIds {
            jobs: r.get(0)?,
            outbox: r.get(1)?,
            attempts: r.get(2)?,
        })
    })?;
    Ok((report, last))
}
