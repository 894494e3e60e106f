//! What an operator reads, as [`Queue`] methods: counts ([`Queue::stats`]),
//! one job with its history ([`Queue::job_detail`]), and everything known
//! about one key ([`Queue::explain`]: "ten events or one event ten times?").
//! Each reads in one read transaction, so its numbers agree with each other
//! while workers write. Writes no table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Serialize;

use crate::core::job::{self, Job, JobState};
use crate::core::time::Millis;
use crate::error::Result;
use crate::queue::Queue;
use crate::sqlite::controls::{self, QueueControl};
use crate::sqlite::history::{self, Attempt};
use crate::sqlite::ledger;
use crate::sqlite::outbox::{self, OutboxRow, OutboxState};
use crate::sqlite::schema;

/// Job counts per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JobCounts {
    /// All jobs.
    pub total: i64,
    /// `queued` (includes scheduled and waiting for a retry).
    pub queued: i64,
    /// `running`.
    pub running: i64,
    /// `succeeded`.
    pub succeeded: i64,
    /// `dead`.
    pub dead: i64,
    /// `cancelled`.
    pub cancelled: i64,
}

impl JobCounts {
    pub(crate) fn add(&mut self, state: &str, n: i64) {
        self.total += n;
        match state {
            "queued" => self.queued += n,
            "running" => self.running += n,
            "succeeded" => self.succeeded += n,
            "dead" => self.dead += n,
            "cancelled" => self.cancelled += n,
            _ => {}
        }
    }

    /// The count of one state.
    pub fn get(&self, state: JobState) -> i64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Succeeded => self.succeeded,
            JobState::Dead => self.dead,
            JobState::Cancelled => self.cancelled,
        }
    }
}

/// Outbox counts per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OutboxCounts {
    /// All rows.
    pub total: i64,
    /// `pending`.
    pub pending: i64,
    /// `sending`.
    pub sending: i64,
    /// `sent`.
    pub sent: i64,
    /// `dead`.
    pub dead: i64,
}

impl OutboxCounts {
    pub(crate) fn add(&mut self, state: &str, n: i64) {
        self.total += n;
        match state {
            "pending" => self.pending += n,
            "sending" => self.sending += n,
            "sent" => self.sent += n,
            "dead" => self.dead += n,
            _ => {}
        }
    }

    /// The count of one state.
    pub fn get(&self, state: OutboxState) -> i64 {
        match state {
            OutboxState::Pending => self.pending,
            OutboxState::Sending => self.sending,
            OutboxState::Sent => self.sent,
            OutboxState::Dead => self.dead,
        }
    }
}

/// A picture of the queue file ([`Queue::stats`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// The file.
    pub path: PathBuf,
    /// `PRAGMA user_version`.
    pub schema_version: i64,
    /// Jobs per state.
    pub jobs: JobCounts,
    /// Jobs per kind, per state.
    pub by_kind: BTreeMap<String, JobCounts>,
    /// Jobs per queue, per state.
    pub by_queue: BTreeMap<String, JobCounts>,
    /// Outbox rows per state.
    pub outbox: OutboxCounts,
    /// Outbox rows per kind, per state.
    pub outbox_by_kind: BTreeMap<String, OutboxCounts>,
    /// Queued jobs whose `run_at` has come (runnable now).
    pub queued_due: i64,
    /// How long ago the oldest queued job was enqueued (ms).
    pub oldest_queued_age_ms: Option<i64>,
    /// How long the longest-waiting runnable job has been due (ms): the
    /// backlog's lag.
    pub oldest_due_wait_ms: Option<i64>,
    /// Rows in the `processed_jobs` ledger.
    pub ledger_rows: i64,
    /// Schedules declared on the file (rows of `schedules`).
    pub schedules: i64,
    /// The queues with controls in force (paused, capped, rate-limited),
    /// by name, with their load.
    pub queue_controls: Vec<QueueControl>,
    /// Size of the database file in bytes.
    pub file_bytes: u64,
    /// Size of its write-ahead log (`<file>-wal`) in bytes.
    pub wal_bytes: u64,
}

impl Queue {
    /// Counts jobs and outbox rows per state, kind and queue, the backlog's
    /// age, the ledger, and the file's size.
    pub fn stats(&self) -> Result<Stats> {
        let now = self.backend().now();
        self.backend().stats(now)
    }

    /// One job with its runs and the outbox rows it wrote; `None` when there
    /// is no job with this id.
    pub fn job_detail(&self, id: i64) -> Result<Option<JobDetail>> {
        self.backend().job_detail(id)
    }

    /// Everything known about one idempotency key: its deliveries, its job
    /// (unless none was enqueued or it was pruned), every run, the ledger
    /// row, the outbox rows with their attempts, and the controls in force
    /// on the job's queue.
    pub fn explain(&self, key: &str) -> Result<Explanation> {
        let mut e = self.backend().explain(key)?;
        if let Some(job) = &e.job {
            let now = self.backend().now();
            e.queue_control = self.backend().queue_control(&job.queue, now)?;
        }
        Ok(e)
    }
}

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

/// An empty picture, for a backend to fill in.
pub(crate) fn empty_stats(schema_version: i64) -> Stats {
    Stats {
        path: PathBuf::new(),
        schema_version,
        jobs: JobCounts::default(),
        by_kind: BTreeMap::new(),
        by_queue: BTreeMap::new(),
        outbox: OutboxCounts::default(),
        outbox_by_kind: BTreeMap::new(),
        queued_due: 0,
        oldest_queued_age_ms: None,
        oldest_due_wait_ms: None,
        ledger_rows: 0,
        schedules: 0,
        queue_controls: Vec::new(),
        file_bytes: 0,
        wal_bytes: 0,
    }
}

/// The counts of [`Queue::stats`], from a file (without its sizes).
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

/// The controlled queues' job counts, from the per-queue counts.
pub(crate) fn fill_job_counts(s: &mut Stats) {
    for q in &mut s.queue_controls {
        if let Some(c) = s.by_queue.get(&q.name) {
            q.queued = c.queued;
            q.running = c.running;
        }
    }
}

/// The `processed_jobs` row of a key: its work committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    /// The key.
    pub key: String,
    /// When the work committed (ms since epoch).
    pub completed_at: Millis,
    /// The job whose run committed it.
    pub job_id: Option<i64>,
}

/// An outbox row with every attempt of its effect.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxEntry {
    /// The row.
    #[serde(flatten)]
    pub row: OutboxRow,
    /// Its attempts, oldest first.
    pub attempts: Vec<Attempt>,
}

/// One job with its runs and the outbox rows it wrote ([`Queue::job_detail`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Every run, oldest first.
    pub attempts: Vec<Attempt>,
    /// The outbox rows it wrote, with their attempts.
    pub outbox: Vec<OutboxEntry>,
    /// The ledger row of its key, if the key's work committed.
    pub ledger: Option<LedgerEntry>,
}

pub(crate) fn job_detail(conn: &Connection, id: i64) -> Result<Option<JobDetail>> {
    let Some(job) = job::get_job(conn, id)? else {
        return Ok(None);
    };
    let attempts = history::for_job(conn, id)?;
    let outbox = outbox_entries(conn, id)?;
    let ledger = ledger_entry(conn, &job.idempotency_key)?;
    Ok(Some(job_detail_of(job, attempts, outbox, ledger)))
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

/// A [`JobDetail`] from its parts, as any backend reads them.
pub(crate) fn job_detail_of(
    job: Job,
    attempts: Vec<Attempt>,
    outbox: Vec<OutboxEntry>,
    ledger: Option<LedgerEntry>,
) -> JobDetail {
    JobDetail {
        job,
        attempts,
        outbox,
        ledger,
    }
}

/// An [`Explanation`] from its parts, as any backend reads them.
pub(crate) fn explanation_of(
    key: &str,
    job: Option<Job>,
    attempts: Vec<Attempt>,
    ledger: Option<LedgerEntry>,
    outbox: Vec<OutboxEntry>,
) -> Explanation {
    Explanation {
        key: key.to_string(),
        deliveries: job.as_ref().map_or(0, |j| j.deliveries),
        job,
        attempts,
        ledger,
        outbox,
        queue_control: None,
    }
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

/// Everything known about one idempotency key ([`Queue::explain`]).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Explanation {
    /// The key asked about.
    pub key: String,
    /// Enqueues seen for this key (0 when no job row exists).
    pub deliveries: i64,
    /// The job, unless none was ever enqueued or it was pruned.
    pub job: Option<Job>,
    /// Every run of the job, oldest first.
    pub attempts: Vec<Attempt>,
    /// The ledger row, if the key's work committed.
    pub ledger: Option<LedgerEntry>,
    /// The outbox rows the job wrote, with their attempts.
    pub outbox: Vec<OutboxEntry>,
    /// The controls in force on the job's queue (paused, a cap, a rate:
    /// why a due job may still wait), with the queue's load; None when it
    /// has none.
    pub queue_control: Option<QueueControl>,
}

pub(crate) fn explain(conn: &Connection, key: &str) -> Result<Explanation> {
    let job = job::get_job_by_key(conn, key)?;
    let ledger = ledger_entry(conn, key)?;
    let (attempts, outbox) = match &job {
        Some(j) => (history::for_job(conn, j.id)?, outbox_entries(conn, j.id)?),
        None => (Vec::new(), Vec::new()),
    };
    Ok(explanation_of(key, job, attempts, ledger, outbox))
}
