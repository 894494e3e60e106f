//! A queue's rows in flight between two databases, a table's batch at a
//! time, as columns ([`JobRows`], ...), and what a copy moved
//! ([`CopyReport`]). Writes no table.

/// What a copy moved: rows per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyReport {
    /// Rows of `jobs`.
    pub jobs: u64,
    /// Rows of `processed_jobs` (the ledger).
    pub processed_jobs: u64,
    /// Rows of `outbox`.
    pub outbox: u64,
    /// Rows of `attempts`.
    pub attempts: u64,
    /// Rows of `schedules`.
    pub schedules: u64,
    /// Rows of `queues` (the queue controls).
    pub queues: u64,
    /// Rows of `queue_starts` (the starts inside each rate's window).
    pub queue_starts: u64,
    /// Rows of `job_dependencies` (the edges of workflows, between the
    /// copied jobs' ids).
    pub job_dependencies: u64,
    /// Rows of `job_steps` (the recorded results of durable steps).
    pub job_steps: u64,
}

/// Rows of `jobs`, column by column.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct JobRows {
    pub id: Vec<i64>,
    pub queue: Vec<String>,
    pub kind: Vec<String>,
    pub key: Vec<String>,
    pub payload: Vec<String>,
    pub state: Vec<String>,
    pub priority: Vec<i64>,
    pub run_at: Vec<i64>,
    pub attempts: Vec<i64>,
    pub max_attempts: Vec<i64>,
    pub abandoned: Vec<i64>,
    pub deliveries: Vec<i64>,
    pub last_error: Vec<Option<String>>,
    pub created_at: Vec<i64>,
    pub finished_at: Vec<Option<i64>>,
    pub lease_owner: Vec<Option<String>>,
    pub lease_expires_at: Vec<Option<i64>>,
    pub current_attempt: Vec<Option<i64>>,
    pub output: Vec<Option<String>>,
    pub partition_key: Vec<Option<String>>,
    pub timeout_ms: Vec<Option<i64>>,
}

/// Rows of `processed_jobs`.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct LedgerRows {
    pub key: Vec<String>,
    pub completed_at: Vec<i64>,
    pub job_id: Vec<Option<i64>>,
}

/// Rows of `outbox`.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct OutboxRows {
    pub id: Vec<i64>,
    pub key: Vec<String>,
    pub kind: Vec<String>,
    pub payload: Vec<String>,
    pub state: Vec<String>,
    pub attempts: Vec<i64>,
    pub max_attempts: Vec<i64>,
    pub job_id: Vec<Option<i64>>,
    pub next_attempt_at: Vec<i64>,
    pub last_error: Vec<Option<String>>,
    pub created_at: Vec<i64>,
    pub sent_at: Vec<Option<i64>>,
    pub lease_owner: Vec<Option<String>>,
    pub lease_expires_at: Vec<Option<i64>>,
    pub current_attempt: Vec<Option<i64>>,
}

/// Rows of `attempts`.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct AttemptRows {
    pub id: Vec<i64>,
    pub job_id: Vec<Option<i64>>,
    pub outbox_id: Vec<Option<i64>>,
    pub attempt: Vec<i64>,
    pub key: Vec<String>,
    pub worker: Vec<String>,
    pub started_at: Vec<i64>,
    pub finished_at: Vec<Option<i64>>,
    pub outcome: Vec<String>,
    pub error: Vec<Option<String>>,
}

/// Rows of `schedules`.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct ScheduleRows {
    pub name: Vec<String>,
    pub cron: Vec<String>,
    pub tz: Vec<String>,
    pub kind: Vec<String>,
    pub payload: Vec<String>,
    pub queue: Vec<String>,
    pub priority: Vec<i64>,
    pub max_retries: Vec<Option<i64>>,
    pub catch_up: Vec<String>,
    pub catch_up_window_ms: Vec<Option<i64>>,
    pub last_slot_at: Vec<Option<i64>>,
    pub next_slot_at: Vec<Option<i64>>,
    pub created_at: Vec<i64>,
    pub updated_at: Vec<i64>,
}

/// Rows of `queues` (the queue controls).
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct QueueRows {
    pub name: Vec<String>,
    pub paused: Vec<bool>,
    pub concurrency: Vec<Option<i64>>,
    pub rate_limit: Vec<Option<i64>>,
    pub rate_window_ms: Vec<Option<i64>>,
    pub updated_at: Vec<i64>,
    pub partition_concurrency: Vec<Option<i64>>,
    pub partition_rate_limit: Vec<Option<i64>>,
    pub partition_rate_window_ms: Vec<Option<i64>>,
}

/// Rows of `queue_starts` (a rate's starts in its window).
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct QueueStartRows {
    pub queue: Vec<String>,
    pub started_at: Vec<i64>,
    /// `None` for a start the queue's own rate counts (a job without a
    /// partition).
    pub partition_key: Vec<Option<String>>,
}

/// Rows of `job_dependencies`: `job_id` runs only after `depends_on`
/// succeeded.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct DependencyRows {
    pub job_id: Vec<i64>,
    pub depends_on: Vec<i64>,
}

/// Rows of `job_steps`: a durable step's recorded result.
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct StepRows {
    pub job_id: Vec<i64>,
    pub name: Vec<String>,
    pub attempt: Vec<i64>,
    pub output: Vec<String>,
    pub started_at: Vec<i64>,
    pub finished_at: Vec<i64>,
    pub reused_in: Vec<Option<String>>,
}

/// The highest ids the file ever gave out, per table with an id.
#[derive(Debug, Default, Clone, Copy)]
#[cfg(feature = "postgres")]
pub(crate) struct LastIds {
    pub jobs: i64,
    pub outbox: i64,
    pub attempts: i64,
}

// The statements that read a queue's tables for a copy, in the destination's
// column order: the same text on both engines.
#[cfg(feature = "postgres")]
pub(crate) const READ_JOBS: &str =
    "SELECT id, queue, kind, idempotency_key, payload, state, priority, \
     run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at, finished_at, \
     lease_owner, lease_expires_at, current_attempt, output, partition_key, timeout_ms \
     FROM jobs ORDER BY id";
#[cfg(feature = "postgres")]
pub(crate) const READ_LEDGER: &str =
    "SELECT key, completed_at, job_id FROM processed_jobs ORDER BY key";
#[cfg(feature = "postgres")]
pub(crate) const READ_OUTBOX: &str =
    "SELECT id, key, kind, payload, state, attempts, max_attempts, job_id, \
     next_attempt_at, last_error, created_at, sent_at, lease_owner, lease_expires_at, \
     current_attempt FROM outbox ORDER BY id";
#[cfg(feature = "postgres")]
pub(crate) const READ_ATTEMPTS: &str =
    "SELECT id, job_id, outbox_id, attempt, key, worker, started_at, \
     finished_at, outcome, error FROM attempts ORDER BY id";
#[cfg(feature = "postgres")]
pub(crate) const READ_SCHEDULES: &str =
    "SELECT name, cron, tz, kind, payload, queue, priority, max_retries, \
     catch_up, catch_up_window_ms, last_slot_at, next_slot_at, created_at, updated_at \
     FROM schedules ORDER BY name";
#[cfg(feature = "postgres")]
pub(crate) const READ_QUEUES: &str =
    "SELECT name, paused, concurrency, rate_limit, rate_window_ms, \
     updated_at, partition_concurrency, partition_rate_limit, partition_rate_window_ms \
     FROM queues ORDER BY name";
#[cfg(feature = "postgres")]
pub(crate) const READ_QUEUE_STARTS: &str =
    "SELECT queue, started_at, partition_key FROM queue_starts \
     ORDER BY queue, started_at, partition_key";
#[cfg(feature = "postgres")]
pub(crate) const READ_DEPENDENCIES: &str =
    "SELECT job_id, depends_on FROM job_dependencies ORDER BY job_id, depends_on";
#[cfg(feature = "postgres")]
pub(crate) const READ_STEPS: &str =
    "SELECT job_id, name, attempt, output, started_at, finished_at, reused_in FROM job_steps \
     ORDER BY job_id, name";

/// Which of the queue's tables already hold rows: a copy goes only into a
/// file where none does.
#[cfg(feature = "postgres")]
pub(crate) const NON_EMPTY: &str =
    "SELECT EXISTS (SELECT 1 FROM jobs), EXISTS (SELECT 1 FROM processed_jobs), \
     EXISTS (SELECT 1 FROM outbox), EXISTS (SELECT 1 FROM attempts), \
     EXISTS (SELECT 1 FROM schedules), EXISTS (SELECT 1 FROM queues), \
     EXISTS (SELECT 1 FROM queue_starts), EXISTS (SELECT 1 FROM job_dependencies), \
     EXISTS (SELECT 1 FROM job_steps)";

/// The tables [`NON_EMPTY`] looks at, in its order.
#[cfg(feature = "postgres")]
pub(crate) const TABLES: [&str; 9] = [
    "jobs",
    "processed_jobs",
    "outbox",
    "attempts",
    "schedules",
    "queues",
    "queue_starts",
    "job_dependencies",
    "job_steps",
];
