//! The sending side of a copy out of PostgreSQL into a file: every queue
//! table read in one read-only REPEATABLE READ snapshot, a batch at a time
//! through a portal, and streamed into the destination's sink, ids and
//! keys kept (jobs with their outputs, and the workflows' edges and the
//! steps' results after every job); then the highest id each table's
//! sequence ever gave out. Writes no table.

use postgres::types::FromSql;
use postgres::{Row, Transaction};

use crate::core::copy::{
    AttemptRows, CopyReport, DependencyRows, JobRows, LastIds, LedgerRows, OutboxRows, QueueRows,
    QueueStartRows, ScheduleRows, StepRows, READ_ATTEMPTS, READ_DEPENDENCIES, READ_JOBS,
    READ_LEDGER, READ_OUTBOX, READ_QUEUES, READ_QUEUE_STARTS, READ_SCHEDULES, READ_STEPS,
};
use crate::driver::copy::CopySink;
use crate::error::{Error, Result};
use crate::postgres::conn::read_err;
use crate::postgres::store::PgStore;

/// Rows fetched per round trip.
const BATCH: i32 = 5000;

/// The highest id each table's sequence gave out: a sequence moves on
/// outside any transaction (a rolled-back insert, a pruned row still used
/// its id), so it may be past every row, and the file must never give
/// those ids out again.
const LAST_IDS: &str = "SELECT \
     greatest((SELECT coalesce(max(id), 0) FROM jobs), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('jobs', 'id')::regclass), 0)), \
     greatest((SELECT coalesce(max(id), 0) FROM outbox), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox', 'id')::regclass), 0)), \
     greatest((SELECT coalesce(max(id), 0) FROM attempts), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('attempts', 'id')::regclass), 0))";

/// Column `i` of `r`, or an error naming it (the database's column has
/// another type than the schema this litejob wrote).
fn col<'a, T: FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| {
        Error::Internal(format!(
            "copy: column {} cannot be read: {e}",
            r.columns().get(i).map_or("?", |c| c.name())
        ))
    })
}

/// Reads `sql`'s rows a batch at a time into a `T` (via `push`), handing
/// each batch to `flush`; returns the number of rows.
fn stream<T: Default>(
    tx: &mut Transaction<'_>,
    sql: &str,
    mut push: impl FnMut(&mut T, &Row) -> Result<()>,
    mut flush: impl FnMut(&T) -> Result<()>,
) -> Result<u64> {
    let portal = tx.bind(sql, &[]).map_err(read_err)?;
    let mut total = 0u64;
    loop {
        let rows = tx.query_portal(&portal, BATCH).map_err(read_err)?;
        if rows.is_empty() {
            return Ok(total);
        }
        let mut batch = T::default();
        for r in &rows {
            push(&mut batch, r)?;
        }
        flush(&batch)?;
        total += rows.len() as u64;
        if rows.len() < BATCH as usize {
            return Ok(total);
        }
    }
}

fn jobs(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_JOBS,
        |b: &mut JobRows, r| {
            b.id.push(col(r, 0)?);
            b.queue.push(col(r, 1)?);
            b.kind.push(col(r, 2)?);
            b.key.push(col(r, 3)?);
            b.payload.push(col(r, 4)?);
            b.state.push(col(r, 5)?);
            b.priority.push(col(r, 6)?);
            b.run_at.push(col(r, 7)?);
            b.attempts.push(col(r, 8)?);
            b.max_attempts.push(col(r, 9)?);
            b.abandoned.push(col(r, 10)?);
            b.deliveries.push(col(r, 11)?);
            b.last_error.push(col(r, 12)?);
            b.created_at.push(col(r, 13)?);
            b.finished_at.push(col(r, 14)?);
            b.lease_owner.push(col(r, 15)?);
            b.lease_expires_at.push(col(r, 16)?);
            b.current_attempt.push(col(r, 17)?);
            b.output.push(col(r, 18)?);
            b.partition_key.push(col(r, 19)?);
            b.timeout_ms.push(col(r, 20)?);
            Ok(())
        },
        |b| sink.jobs(b),
    )
}

fn ledger(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_LEDGER,
        |b: &mut LedgerRows, r| {
            b.key.push(col(r, 0)?);
            b.completed_at.push(col(r, 1)?);
            b.job_id.push(col(r, 2)?);
            Ok(())
        },
        |b| sink.ledger(b),
    )
}

fn outbox(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_OUTBOX,
        |b: &mut OutboxRows, r| {
            b.id.push(col(r, 0)?);
            b.key.push(col(r, 1)?);
            b.kind.push(col(r, 2)?);
            b.payload.push(col(r, 3)?);
            b.state.push(col(r, 4)?);
            b.attempts.push(col(r, 5)?);
            b.max_attempts.push(col(r, 6)?);
            b.job_id.push(col(r, 7)?);
            b.next_attempt_at.push(col(r, 8)?);
            b.last_error.push(col(r, 9)?);
            b.created_at.push(col(r, 10)?);
            b.sent_at.push(col(r, 11)?);
            b.lease_owner.push(col(r, 12)?);
            b.lease_expires_at.push(col(r, 13)?);
            b.current_attempt.push(col(r, 14)?);
            Ok(())
        },
        |b| sink.outbox(b),
    )
}

fn attempts(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_ATTEMPTS,
        |b: &mut AttemptRows, r| {
            b.id.push(col(r, 0)?);
            b.job_id.push(col(r, 1)?);
            b.outbox_id.push(col(r, 2)?);
            b.attempt.push(col(r, 3)?);
            b.key.push(col(r, 4)?);
            b.worker.push(col(r, 5)?);
            b.started_at.push(col(r, 6)?);
            b.finished_at.push(col(r, 7)?);
            b.outcome.push(col(r, 8)?);
            b.error.push(col(r, 9)?);
            Ok(())
        },
        |b| sink.attempts(b),
    )
}

fn schedules(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_SCHEDULES,
        |b: &mut ScheduleRows, r| {
            b.name.push(col(r, 0)?);
            b.cron.push(col(r, 1)?);
            b.tz.push(col(r, 2)?);
            b.kind.push(col(r, 3)?);
            b.payload.push(col(r, 4)?);
            b.queue.push(col(r, 5)?);
            b.priority.push(col(r, 6)?);
            b.max_retries.push(col(r, 7)?);
            b.catch_up.push(col(r, 8)?);
            b.catch_up_window_ms.push(col(r, 9)?);
            b.last_slot_at.push(col(r, 10)?);
            b.next_slot_at.push(col(r, 11)?);
            b.created_at.push(col(r, 12)?);
            b.updated_at.push(col(r, 13)?);
            Ok(())
        },
        |b| sink.schedules(b),
    )
}

fn queues(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_QUEUES,
        |b: &mut QueueRows, r| {
            b.name.push(col(r, 0)?);
            b.paused.push(col(r, 1)?);
            b.concurrency.push(col(r, 2)?);
            b.rate_limit.push(col(r, 3)?);
            b.rate_window_ms.push(col(r, 4)?);
            b.updated_at.push(col(r, 5)?);
            b.partition_concurrency.push(col(r, 6)?);
            b.partition_rate_limit.push(col(r, 7)?);
            b.partition_rate_window_ms.push(col(r, 8)?);
            Ok(())
        },
        |b| sink.queues(b),
    )
}

fn queue_starts(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_QUEUE_STARTS,
        |b: &mut QueueStartRows, r| {
            b.queue.push(col(r, 0)?);
            b.started_at.push(col(r, 1)?);
            b.partition_key.push(col(r, 2)?);
            Ok(())
        },
        |b| sink.queue_starts(b),
    )
}

fn dependencies(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_DEPENDENCIES,
        |b: &mut DependencyRows, r| {
            b.job_id.push(col(r, 0)?);
            b.depends_on.push(col(r, 1)?);
            Ok(())
        },
        |b| sink.dependencies(b),
    )
}

fn steps(tx: &mut Transaction<'_>, sink: &mut dyn CopySink) -> Result<u64> {
    stream(
        tx,
        READ_STEPS,
        |b: &mut StepRows, r| {
            b.job_id.push(col(r, 0)?);
            b.name.push(col(r, 1)?);
            b.attempt.push(col(r, 2)?);
            b.output.push(col(r, 3)?);
            b.started_at.push(col(r, 4)?);
            b.finished_at.push(col(r, 5)?);
            b.reused_in.push(col(r, 6)?);
            Ok(())
        },
        |b| sink.steps(b),
    )
}

impl PgStore {
    /// Streams every queue table into `sink`, read in one snapshot on a
    /// connection of its own; returns what was moved and the database's
    /// last ids.
    pub(crate) fn export(&self, sink: &mut dyn CopySink) -> Result<(CopyReport, LastIds)> {
        let mut conn = self.session.connect()?;
        let mut tx = conn.begin_snapshot().map_err(read_err)?;
        let report = CopyReport {
            jobs: jobs(&mut tx, sink)?,
            processed_jobs: ledger(&mut tx, sink)?,
            outbox: outbox(&mut tx, sink)?,
            attempts: attempts(&mut tx, sink)?,
            schedules: schedules(&mut tx, sink)?,
            queues: queues(&mut tx, sink)?,
            queue_starts: queue_starts(&mut tx, sink)?,
            // After the jobs: an edge's two jobs are in the destination first.
            job_dependencies: dependencies(&mut tx, sink)?,
            job_steps: steps(&mut tx, sink)?,
        };
        let r = tx.query_one(LAST_IDS, &[]).map_err(read_err)?;
        let last = LastIds {
            jobs: col(&r, 0)?,
            outbox: col(&r, 1)?,
            attempts: col(&r, 2)?,
        };
        tx.commit().map_err(read_err)?;
        Ok((report, last))
    }
}
