//! The operator's reads of one queue: counts ([`Stats`]), one job with its
//! history ([`JobDetail`]), everything known about one key
//! ([`Explanation`]), and how an engine assembles them. Writes no table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::core::attempt::Attempt;
use crate::core::controls::QueueControl;
use crate::core::job::{Job, JobState};
use crate::core::outbox::{OutboxRow, OutboxState};
use crate::core::reports::workflow::Linked;
use crate::core::steps::JobStep;
use crate::core::time::Millis;

/// Job counts per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JobCounts {
    /// All jobs.
    pub total: i64,
    /// `waiting` for dependencies.
    pub waiting: i64,
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
            "waiting" => self.waiting += n,
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
            JobState::Waiting => self.waiting,
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

/// A picture of the queue file ([`Admin::stats`](crate::admin::Admin::stats)).
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

/// One job with its runs and the outbox rows it wrote ([`Admin::job_detail`](crate::admin::Admin::job_detail)).
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
    /// The jobs it depends on, with their states (a waiting job waits for
    /// those not `succeeded`).
    pub dependencies: Vec<Linked>,
    /// The jobs that depend on it (the first thousand).
    pub dependents: Vec<Linked>,
    /// Its durable steps, in the order they ran.
    pub steps: Vec<JobStep>,
}

/// A [`JobDetail`] from its parts, as any backend reads them.
pub(crate) fn job_detail_of(
    job: Job,
    attempts: Vec<Attempt>,
    outbox: Vec<OutboxEntry>,
    ledger: Option<LedgerEntry>,
    links: (Vec<Linked>, Vec<Linked>),
) -> JobDetail {
    JobDetail {
        job,
        attempts,
        outbox,
        ledger,
        dependencies: links.0,
        dependents: links.1,
        steps: Vec::new(),
    }
}

/// An [`Explanation`] from its parts, as any backend reads them.
pub(crate) fn explanation_of(
    key: &str,
    job: Option<Job>,
    attempts: Vec<Attempt>,
    ledger: Option<LedgerEntry>,
    outbox: Vec<OutboxEntry>,
    links: (Vec<Linked>, Vec<Linked>),
) -> Explanation {
    Explanation {
        key: key.to_string(),
        deliveries: job.as_ref().map_or(0, |j| j.deliveries),
        job,
        attempts,
        ledger,
        outbox,
        queue_control: None,
        dependencies: links.0,
        dependents: links.1,
        steps: Vec::new(),
    }
}

/// Everything known about one idempotency key ([`Admin::explain`](crate::admin::Admin::explain)).
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
    /// The jobs it depends on, with their states (a waiting job waits for
    /// those not `succeeded`).
    pub dependencies: Vec<Linked>,
    /// The jobs that depend on it (the first thousand).
    pub dependents: Vec<Linked>,
    /// The job's durable steps, in the order they ran.
    pub steps: Vec<JobStep>,
}
