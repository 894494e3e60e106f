//! The PostgreSQL side of a copy from a queue file: one transaction on a
//! connection of its own that locks the queue's tables, refuses a
//! database already holding any litejob row, inserts the file's rows in
//! batches (one statement per batch, the columns passed as arrays), sets
//! the id sequences past every id the file ever gave out, and commits —
//! all of it or nothing. Writes `jobs` (outputs and partitions included),
//! `processed_jobs`, `outbox`, `attempts`, `schedules`, `queues`,
//! `queue_starts`, `job_dependencies` and `job_steps` (rows as the file holds them, ids
//! kept). The sending side of a copy into a file is
//! `export` ([`PgStore::export`]).

use postgres::Transaction;

use super::conn::{read_err, write_err, Col, PgConn};
use super::store::PgStore;
use crate::core::copy::{
    AttemptRows, DependencyRows, JobRows, LastIds, LedgerRows, OutboxRows, QueueRows,
    QueueStartRows, ScheduleRows, StepRows, NON_EMPTY, TABLES,
};
use crate::driver::copy::CopySink;
use crate::error::{Error, Result};

mod export;

/// Taken first: concurrent copies (or a producer) into the same database
/// wait for this one instead of interleaving with it; readers go on.
const LOCK_TABLES: &str = "LOCK TABLE jobs, processed_jobs, outbox, attempts, schedules, \
     queues, queue_starts, job_dependencies, job_steps IN EXCLUSIVE MODE";

const INSERT_JOBS: &str = "\
INSERT INTO jobs (id, queue, kind, idempotency_key, payload, state, priority, run_at, attempts,
    max_attempts, abandoned, deliveries, last_error, created_at, finished_at, lease_owner,
    lease_expires_at, current_attempt, output, partition_key, timeout_ms)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
    $13::text[], $14::bigint[], $15::bigint[], $16::text[], $17::bigint[], $18::bigint[],
    $19::text[], $20::text[], $21::bigint[])";

const INSERT_LEDGER: &str = "\
INSERT INTO processed_jobs (key, completed_at, job_id)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])";

const INSERT_OUTBOX: &str = "\
INSERT INTO outbox (id, key, kind, payload, state, attempts, max_attempts, job_id, next_attempt_at,
    last_error, created_at, sent_at, lease_owner, lease_expires_at, current_attempt)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
    $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::bigint[],
    $13::text[], $14::bigint[], $15::bigint[])";

const INSERT_ATTEMPTS: &str = "\
INSERT INTO attempts (id, job_id, outbox_id, attempt, key, worker, started_at, finished_at,
    outcome, error)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
    $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[])";

const INSERT_SCHEDULES: &str = "\
INSERT INTO schedules (name, cron, tz, kind, payload, queue, priority, max_retries, catch_up,
    catch_up_window_ms, last_slot_at, next_slot_at, created_at, updated_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
    $7::bigint[], $8::bigint[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[],
    $13::bigint[], $14::bigint[])";

const INSERT_QUEUES: &str = "\
INSERT INTO queues (name, paused, concurrency, rate_limit, rate_window_ms, updated_at,
    partition_concurrency, partition_rate_limit, partition_rate_window_ms)
SELECT * FROM unnest($1::text[], $2::boolean[], $3::bigint[], $4::bigint[], $5::bigint[],
    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])";

const INSERT_QUEUE_STARTS: &str = "\
INSERT INTO queue_starts (queue, started_at, partition_key)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])";

const INSERT_DEPENDENCIES: &str = "\
WITH e AS (
    INSERT INTO job_dependencies (job_id, depends_on)
    SELECT * FROM unnest($1::bigint[], $2::bigint[])
    RETURNING depends_on
)
UPDATE jobs SET has_dependents = true WHERE id IN (SELECT depends_on FROM e)";

const INSERT_STEPS: &str = "\
INSERT INTO job_steps (job_id, name, attempt, output, started_at, finished_at, reused_in)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::bigint[],
    $6::bigint[], $7::text[])";

/// Moves the identity sequence of table `$1` to `$2` (the highest id the
/// file ever gave out), unless it is already past it: a new row never
/// takes an id the file used, even one of a row pruned since.
const SET_SEQUENCE: &str = "\
SELECT setval(s, v) FROM (
    SELECT s, greatest($2::bigint, coalesce(pg_sequence_last_value(s), 0)) AS v
    FROM (SELECT pg_get_serial_sequence($1, 'id')::regclass AS s) a
) b WHERE v > 0";

/// A copy in progress: the transaction [`PgStore::copy_in`] opened.
pub(crate) struct CopyTx<'a, 't> {
    tx: &'a mut Transaction<'t>,
    location: &'a str,
}

impl CopyTx<'_, '_> {
    fn insert(
        &mut self,
        table: &str,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<()> {
        let at = |e: postgres::Error| match write_err(e) {
            Error::InvalidInput(m) => Error::InvalidInput(format!(
                "a row of {table} cannot be stored in {}: {m}",
                self.location
            )),
            other => other,
        };
        self.tx.execute(sql, params).map_err(at)?;
        Ok(())
    }
}

impl CopySink for CopyTx<'_, '_> {
    /// Inserts a batch of jobs.
    fn jobs(&mut self, r: &JobRows) -> Result<()> {
        self.insert(
            "jobs",
            INSERT_JOBS,
            &[
                &r.id,
                &r.queue,
                &r.kind,
                &r.key,
                &r.payload,
                &r.state,
                &r.priority,
                &r.run_at,
                &r.attempts,
                &r.max_attempts,
                &r.abandoned,
                &r.deliveries,
                &r.last_error,
                &r.created_at,
                &r.finished_at,
                &r.lease_owner,
                &r.lease_expires_at,
                &r.current_attempt,
                &r.output,
                &r.partition_key,
                &r.timeout_ms,
            ],
        )
    }

    /// Inserts a batch of ledger rows.
    fn ledger(&mut self, r: &LedgerRows) -> Result<()> {
        self.insert(
            "processed_jobs",
            INSERT_LEDGER,
            &[&r.key, &r.completed_at, &r.job_id],
        )
    }

    /// Inserts a batch of outbox rows.
    fn outbox(&mut self, r: &OutboxRows) -> Result<()> {
        self.insert(
            "outbox",
            INSERT_OUTBOX,
            &[
                &r.id,
                &r.key,
                &r.kind,
                &r.payload,
                &r.state,
                &r.attempts,
                &r.max_attempts,
                &r.job_id,
                &r.next_attempt_at,
                &r.last_error,
                &r.created_at,
                &r.sent_at,
                &r.lease_owner,
                &r.lease_expires_at,
                &r.current_attempt,
            ],
        )
    }

    /// Inserts a batch of attempts.
    fn attempts(&mut self, r: &AttemptRows) -> Result<()> {
        self.insert(
            "attempts",
            INSERT_ATTEMPTS,
            &[
                &r.id,
                &r.job_id,
                &r.outbox_id,
                &r.attempt,
                &r.key,
                &r.worker,
                &r.started_at,
                &r.finished_at,
                &r.outcome,
                &r.error,
            ],
        )
    }

    /// Inserts a batch of schedules.
    fn schedules(&mut self, r: &ScheduleRows) -> Result<()> {
        self.insert(
            "schedules",
            INSERT_SCHEDULES,
            &[
                &r.name,
                &r.cron,
                &r.tz,
                &r.kind,
                &r.payload,
                &r.queue,
                &r.priority,
                &r.max_retries,
                &r.catch_up,
                &r.catch_up_window_ms,
                &r.last_slot_at,
                &r.next_slot_at,
                &r.created_at,
                &r.updated_at,
            ],
        )
    }

    /// Inserts a batch of queue controls.
    fn queues(&mut self, r: &QueueRows) -> Result<()> {
        self.insert(
            "queues",
            INSERT_QUEUES,
            &[
                &r.name,
                &r.paused,
                &r.concurrency,
                &r.rate_limit,
                &r.rate_window_ms,
                &r.updated_at,
                &r.partition_concurrency,
                &r.partition_rate_limit,
                &r.partition_rate_window_ms,
            ],
        )
    }

    /// Inserts a batch of a rate's starts.
    fn queue_starts(&mut self, r: &QueueStartRows) -> Result<()> {
        self.insert(
            "queue_starts",
            INSERT_QUEUE_STARTS,
            &[&r.queue, &r.started_at, &r.partition_key],
        )
    }

    /// Inserts a batch of workflow edges.
    fn dependencies(&mut self, r: &DependencyRows) -> Result<()> {
        self.insert(
            "job_dependencies",
            INSERT_DEPENDENCIES,
            &[&r.job_id, &r.depends_on],
        )
    }

    /// Inserts a batch of steps' results.
    fn steps(&mut self, r: &StepRows) -> Result<()> {
        self.insert(
            "job_steps",
            INSERT_STEPS,
            &[
                &r.job_id,
                &r.name,
                &r.attempt,
                &r.output,
                &r.started_at,
                &r.finished_at,
                &r.reused_in,
            ],
        )
    }
}

impl PgStore {
    /// Runs a copy into this database: `fill` inserts the rows through the
    /// sink it is given and returns the file's last ids; then the
    /// sequences are set and the transaction commits. Refused, with
    /// nothing written, when any litejob table holds a row already.
    pub(crate) fn copy_in<R>(
        &self,
        fill: impl FnOnce(&mut dyn CopySink) -> Result<(R, LastIds)>,
    ) -> Result<R> {
        let mut conn: PgConn = self.session.connect()?;
        let mut tx = conn.begin().map_err(read_err)?;
        tx.batch_execute(LOCK_TABLES).map_err(read_err)?;
        let row = tx.query_one(NON_EMPTY, &[]).map_err(read_err)?;
        let mut full: Vec<&str> = Vec::new();
        for (i, t) in TABLES.iter().enumerate() {
            if row.col::<bool>(i)? {
                full.push(t);
            }
        }
        if !full.is_empty() {
            return Err(Error::NotEmpty(format!(
                "{} already holds litejob rows (in {}): a queue is copied only into a \
                 database without any; nothing was written",
                self.location,
                full.join(", ")
            )));
        }
        let mut c = CopyTx {
            tx: &mut tx,
            location: &self.location,
        };
        let (r, last) = fill(&mut c)?;
        for (table, id) in [
            ("jobs", last.jobs),
            ("outbox", last.outbox),
            ("attempts", last.attempts),
        ] {
            tx.query(SET_SEQUENCE, &[&table, &id]).map_err(read_err)?;
        }
        tx.commit().map_err(write_err)?;
        Ok(r)
    }
}
