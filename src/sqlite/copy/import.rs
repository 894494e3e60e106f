//! The receiving side of a copy from PostgreSQL into a file: one write
//! transaction (`BEGIN IMMEDIATE`) on a connection of its own to the file,
//! which must hold no queue row yet; the rows inserted as the database
//! holds them, ids and keys kept; `sqlite_sequence` set past every id the
//! database gave out; one commit — all of it or nothing. Writes `jobs`
//! (outputs and partitions included), `processed_jobs`, `outbox`, `attempts`,
//! `schedules`, `queues`, `queue_starts`, `job_dependencies`, `job_steps`
//! and `sqlite_sequence`.

use rusqlite::{params, Connection};

use crate::core::copy::{
    AttemptRows, DependencyRows, JobRows, LastIds, LedgerRows, OutboxRows, QueueRows,
    QueueStartRows, ScheduleRows, StepRows, NON_EMPTY, TABLES,
};
use crate::driver::copy::CopySink;
use crate::error::{Error, Result};
use crate::sqlite::db::{from_sqlite, immediate};

const INSERT_JOBS: &str = "INSERT INTO jobs (id, queue, kind, idempotency_key, payload, state, \
     priority, run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, \
     finished_at, lease_owner, lease_expires_at, current_attempt, output, partition_key, \
     timeout_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, \
     ?20, ?21)";
const INSERT_LEDGER: &str =
    "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES (?1, ?2, ?3)";
const INSERT_OUTBOX: &str = "INSERT INTO outbox (id, key, kind, payload, state, attempts, \
     max_attempts, job_id, next_attempt_at, last_error, created_at, sent_at, lease_owner, \
     lease_expires_at, current_attempt) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
const INSERT_ATTEMPTS: &str = "INSERT INTO attempts (id, job_id, outbox_id, attempt, key, \
     worker, started_at, finished_at, outcome, error) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
const INSERT_SCHEDULES: &str = "INSERT INTO schedules (name, cron, tz, kind, payload, queue, \
     priority, max_retries, catch_up, catch_up_window_ms, last_slot_at, next_slot_at, \
     created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
const INSERT_QUEUES: &str = "INSERT INTO queues (name, paused, concurrency, rate_limit, \
     rate_window_ms, updated_at, partition_concurrency, partition_rate_limit, \
     partition_rate_window_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
const INSERT_QUEUE_STARTS: &str =
    "INSERT INTO queue_starts (queue, started_at, partition_key) VALUES (?1, ?2, ?3)";
const INSERT_DEPENDENCIES: &str =
    "INSERT INTO job_dependencies (job_id, depends_on) VALUES (?1, ?2)";
const INSERT_STEPS: &str = "INSERT INTO job_steps (job_id, name, attempt, output, started_at, \
     finished_at, reused_in) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Moves `table`'s AUTOINCREMENT counter to `?2` unless it is past it
/// already (an insert with an explicit id moves it to that id only).
const RAISE_SEQUENCE: &str = "UPDATE sqlite_sequence SET seq = max(seq, ?2) WHERE name = ?1";
const ADD_SEQUENCE: &str = "INSERT INTO sqlite_sequence (name, seq) \
     SELECT ?1, ?2 WHERE ?2 > 0 AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)";

/// A copy in progress: the transaction [`copy_in`] opened.
struct FileSink<'c> {
    conn: &'c Connection,
    location: &'c str,
}

impl FileSink<'_> {
    /// Runs `sql` once per row `0..n` with the parameters `row(i)` gives.
    fn insert<'r, const N: usize>(
        &self,
        table: &str,
        sql: &str,
        n: usize,
        row: impl Fn(usize) -> [&'r dyn rusqlite::ToSql; N],
    ) -> Result<()> {
        let mut st = self.conn.prepare_cached(sql)?;
        for i in 0..n {
            st.execute(&row(i)[..])
                .map_err(|e| self.refused(table, e))?;
        }
        Ok(())
    }

    /// A row the file's schema refuses is the database's content, not a
    /// fault of the copy: bad input, named.
    fn refused(&self, table: &str, e: rusqlite::Error) -> Error {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
            return Error::InvalidInput(format!(
                "a row of {table} cannot be stored in {}: {e}; nothing was written",
                self.location
            ));
        }
        from_sqlite(e)
    }
}

impl CopySink for FileSink<'_> {
    fn jobs(&mut self, r: &JobRows) -> Result<()> {
        self.insert("jobs", INSERT_JOBS, r.id.len(), |i| {
            [
                &r.id[i],
                &r.queue[i],
                &r.kind[i],
                &r.key[i],
                &r.payload[i],
                &r.state[i],
                &r.priority[i],
                &r.run_at[i],
                &r.attempts[i],
                &r.max_attempts[i],
                &r.abandoned[i],
                &r.deliveries[i],
                &r.last_error[i],
                &r.created_at[i],
                &r.finished_at[i],
                &r.lease_owner[i],
                &r.lease_expires_at[i],
                &r.current_attempt[i],
                &r.output[i],
                &r.partition_key[i],
                &r.timeout_ms[i],
            ]
        })
    }

    fn ledger(&mut self, r: &LedgerRows) -> Result<()> {
        self.insert("processed_jobs", INSERT_LEDGER, r.key.len(), |i| {
            [&r.key[i], &r.completed_at[i], &r.job_id[i]]
        })
    }

    fn outbox(&mut self, r: &OutboxRows) -> Result<()> {
        self.insert("outbox", INSERT_OUTBOX, r.id.len(), |i| {
            [
                &r.id[i],
                &r.key[i],
                &r.kind[i],
                &r.payload[i],
                &r.state[i],
                &r.attempts[i],
                &r.max_attempts[i],
                &r.job_id[i],
                &r.next_attempt_at[i],
                &r.last_error[i],
                &r.created_at[i],
                &r.sent_at[i],
                &r.lease_owner[i],
                &r.lease_expires_at[i],
                &r.current_attempt[i],
            ]
        })
    }

    fn attempts(&mut self, r: &AttemptRows) -> Result<()> {
        self.insert("attempts", INSERT_ATTEMPTS, r.id.len(), |i| {
            [
                &r.id[i],
                &r.job_id[i],
                &r.outbox_id[i],
                &r.attempt[i],
                &r.key[i],
                &r.worker[i],
                &r.started_at[i],
                &r.finished_at[i],
                &r.outcome[i],
                &r.error[i],
            ]
        })
    }

    fn schedules(&mut self, r: &ScheduleRows) -> Result<()> {
        self.insert("schedules", INSERT_SCHEDULES, r.name.len(), |i| {
            [
                &r.name[i],
                &r.cron[i],
                &r.tz[i],
                &r.kind[i],
                &r.payload[i],
                &r.queue[i],
                &r.priority[i],
                &r.max_retries[i],
                &r.catch_up[i],
                &r.catch_up_window_ms[i],
                &r.last_slot_at[i],
                &r.next_slot_at[i],
                &r.created_at[i],
                &r.updated_at[i],
            ]
        })
    }

    fn queues(&mut self, r: &QueueRows) -> Result<()> {
        self.insert("queues", INSERT_QUEUES, r.name.len(), |i| {
            [
                &r.name[i],
                &r.paused[i],
                &r.concurrency[i],
                &r.rate_limit[i],
                &r.rate_window_ms[i],
                &r.updated_at[i],
                &r.partition_concurrency[i],
                &r.partition_rate_limit[i],
                &r.partition_rate_window_ms[i],
            ]
        })
    }

    fn queue_starts(&mut self, r: &QueueStartRows) -> Result<()> {
        self.insert("queue_starts", INSERT_QUEUE_STARTS, r.queue.len(), |i| {
            [&r.queue[i], &r.started_at[i], &r.partition_key[i]]
        })
    }

    fn dependencies(&mut self, r: &DependencyRows) -> Result<()> {
        self.insert(
            "job_dependencies",
            INSERT_DEPENDENCIES,
            r.job_id.len(),
            |i| [&r.job_id[i], &r.depends_on[i]],
        )
    }

    fn steps(&mut self, r: &StepRows) -> Result<()> {
        self.insert("job_steps", INSERT_STEPS, r.job_id.len(), |i| {
            [
                &r.job_id[i],
                &r.name[i],
                &r.attempt[i],
                &r.output[i],
                &r.started_at[i],
                &r.finished_at[i],
                &r.reused_in[i],
            ]
        })
    }
}

/// Runs a copy into the file `conn` writes: `fill` inserts the rows
/// through the sink it is given and returns the source's last ids; then
/// the AUTOINCREMENT counters are set and the transaction commits.
/// Refused with [`Error::NotEmpty`], nothing written, when any queue
/// table of the file holds a row already.
pub(crate) fn copy_in<R>(
    conn: &mut Connection,
    location: &str,
    fill: impl FnOnce(&mut dyn CopySink) -> Result<(R, LastIds)>,
) -> Result<R> {
    let tx = immediate(conn)?;
    let any: Vec<bool> = tx.query_row(NON_EMPTY, [], |r| {
        (0..TABLES.len()).map(|i| r.get(i)).collect()
    })?;
    let full: Vec<&str> = TABLES
        .iter()
        .zip(any)
        .filter(|(_, any)| *any)
        .map(|(t, _)| *t)
        .collect();
    if !full.is_empty() {
        return Err(Error::NotEmpty(format!(
            "{location} already holds litejob rows (in {}): a queue is copied only into a \
             file without any; nothing was written",
            full.join(", ")
        )));
    }
    let (r, last) = fill(&mut FileSink {
        conn: &tx,
        location,
    })?;
    for (table, id) in [
        ("jobs", last.jobs),
        ("outbox", last.outbox),
        ("attempts", last.attempts),
    ] {
        tx.execute(RAISE_SEQUENCE, params![table, id])?;
        tx.execute(ADD_SEQUENCE, params![table, id])?;
    }
    tx.commit()?;
    Ok(r)
}
