//! Jobs as data: `NewJob` (what a producer hands in), `Job` (a row of the
//! `jobs` table), `JobState`, and the named read queries on `jobs`. Writes
//! no table (enqueue, claim and run own the writes).

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::core::time::Millis;
use crate::error::{Error, Result};

/// Where a job is in its life. The same words as the `state` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Enqueued with dependencies ([`NewJob::with_depends_on`]) not all
    /// succeeded yet: it becomes `queued` in the commit that records the
    /// last one's success, or `cancelled` if one ends dead or cancelled.
    Waiting,
    /// Waiting to run (scheduled, or waiting for a retry: see `run_at`).
    Queued,
    /// Claimed by a worker holding its lease.
    Running,
    /// Finished: its work committed (or a duplicate found it already done).
    Succeeded,
    /// Finished without success: out of attempts, discarded, or a poison pill.
    Dead,
    /// Cancelled before it ran: by an operator, or because a job it
    /// depends on ended dead or cancelled (`last_error` names which).
    Cancelled,
}

impl JobState {
    /// The word stored in `jobs.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// All states, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Waiting,
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Dead,
        JobState::Cancelled,
    ];
}

impl std::str::FromStr for JobState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown job state {s:?}: one of waiting, queued, running, succeeded, dead, cancelled"
                ))
            })
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job to enqueue: kind, idempotency key, JSON payload and options.
///
/// ```
/// # use litejob::NewJob;
/// let job = NewJob::new("send_digest", "digest:2026-11-29", &serde_json::json!({"user": 7}))
///     .with_queue("mail")
///     .with_priority(-1)
///     .with_max_retries(3);
/// ```
#[derive(Debug, Clone)]
pub struct NewJob {
    pub(crate) kind: String,
    pub(crate) key: String,
    /// The payload as JSON text, or why it could not be serialized.
    pub(crate) payload: std::result::Result<String, String>,
    /// True when serde_json wrote the payload: valid JSON by construction,
    /// so enqueue need not parse it again. False for `from_json` text.
    pub(crate) payload_is_serde_output: bool,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) run_at: Option<Millis>,
    pub(crate) delay: Option<Duration>,
    pub(crate) max_retries: Option<u32>,
    /// Keys of the jobs that must succeed before this one runs.
    pub(crate) depends_on: Vec<String>,
    /// The partition of its queue it is limited in, if any.
    pub(crate) partition: Option<String>,
    /// How long one run may take, if the job says.
    pub(crate) timeout: Option<Duration>,
}

impl NewJob {
    /// A job of `kind` with the producer's idempotency `key` and a payload
    /// serialized to JSON. Errors (empty kind, bad payload) surface at enqueue.
    pub fn new(
        kind: impl Into<String>,
        key: impl Into<String>,
        payload: &impl Serialize,
    ) -> NewJob {
        let payload = serde_json::to_string(payload).map_err(|e| e.to_string());
        NewJob {
            payload_is_serde_output: true,
            ..NewJob::with_payload(kind.into(), key.into(), payload)
        }
    }

    /// A job whose payload is JSON text (checked at enqueue).
    pub fn from_json(
        kind: impl Into<String>,
        key: impl Into<String>,
        json: impl Into<String>,
    ) -> NewJob {
        NewJob::with_payload(kind.into(), key.into(), Ok(json.into()))
    }

    fn with_payload(
        kind: String,
        key: String,
        payload: std::result::Result<String, String>,
    ) -> NewJob {
        NewJob {
            kind,
            key,
            payload,
            payload_is_serde_output: false,
            queue: "default".into(),
            priority: 0,
            run_at: None,
            delay: None,
            max_retries: None,
            depends_on: Vec::new(),
            partition: None,
            timeout: None,
        }
    }

    /// The queue it goes to (default `"default"`).
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Priority: smaller runs first (default 0; negative is allowed).
    pub fn with_priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// Puts the job in a partition of its queue, e.g. `"shop:42"`: a
    /// queue's partition limits ([`QueueLimits::partition_concurrency`],
    /// [`QueueLimits::partition_rate`]) hold for each partition apart, so
    /// one shop's jobs never take another's turn. A key of 1 to 200 bytes;
    /// a job without one is limited by the queue-wide limits only.
    ///
    /// [`QueueLimits::partition_concurrency`]: crate::admin::QueueLimits::partition_concurrency
    /// [`QueueLimits::partition_rate`]: crate::admin::QueueLimits::partition_rate
    ///
    /// ```
    /// # use litejob::NewJob;
    /// let sync = NewJob::new("sync_shop", "sync:42:2026-12-03", &42).with_partition("shop:42");
    /// ```
    pub fn with_partition(mut self, key: impl Into<String>) -> Self {
        self.partition = Some(key.into());
        self
    }

    /// How long one run of this job may take (stored in `jobs.timeout_ms`,
    /// whole milliseconds, at least 1): it beats the runtime's timeout for
    /// its kind ([`RuntimeBuilder::kind_timeout`]) and its default
    /// ([`RuntimeBuilder::job_timeout`]). A run past it fails "timed out
    /// after …" (a charged attempt, retried by the job's rules), its work
    /// rolled back; `ctx.is_cancelled()` turns true at the deadline. Zero is
    /// refused at enqueue.
    ///
    /// [`RuntimeBuilder::kind_timeout`]: crate::RuntimeBuilder::kind_timeout
    /// [`RuntimeBuilder::job_timeout`]: crate::RuntimeBuilder::job_timeout
    ///
    /// ```
    /// # use litejob::NewJob;
    /// # use std::time::Duration;
    /// let job = NewJob::new("fetch_feed", "feed:42", &42).with_timeout(Duration::from_secs(30));
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Do not run before `delay` from the enqueue.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self.run_at = None;
        self
    }

    /// Do not run before `at`.
    pub fn with_run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(crate::core::time::to_millis(at));
        self.delay = None;
        self
    }

    /// How many times a failed run is retried (default 1: two runs in all).
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = Some(max_retries);
        self
    }

    /// Runs only after every job of these idempotency keys succeeded: until
    /// then the job is [`JobState::Waiting`], and it becomes `queued` in
    /// the commit that records the last one's success. A dependency that
    /// ends dead or cancelled cancels this job (and what depends on it).
    /// Each key must be a job's already, or be enqueued in the same
    /// [`enqueue_many`](crate::Queue::enqueue_many) batch (a fan-out and
    /// its fan-in go in one batch); a missing key or a cycle is refused
    /// with nothing written. The handler reads its dependencies' results
    /// with `tx.dependency_output(key)`. An empty list is no dependency.
    ///
    /// ```
    /// # use litejob::NewJob;
    /// let merge = NewJob::new("merge", "report-7:merge", &7)
    ///     .with_depends_on(["report-7:part-1", "report-7:part-2"]);
    /// ```
    pub fn with_depends_on<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.depends_on = keys.into_iter().map(Into::into).collect();
        self
    }

    /// The keys it depends on, as given.
    pub fn depends_on(&self) -> &[String] {
        &self.depends_on
    }

    /// The kind, as given.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The idempotency key, as given.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Enqueued {
    /// A new job was created with this id.
    New(i64),
    /// The key was seen before: nothing was created. The id is the existing
    /// job's (for a key whose job row was pruned, the id the ledger recorded).
    Duplicate(i64),
}

impl Enqueued {
    /// The job id, new or existing.
    pub fn id(self) -> i64 {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// True when nothing was created.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate(_))
    }
}

/// One row of `jobs`.
#[derive(Debug, Clone, Serialize)]
pub struct Job {
    /// Never reused.
    pub id: i64,
    /// Queue name.
    pub queue: String,
    /// Kind: which handler runs it.
    pub kind: String,
    /// The producer's idempotency key.
    pub idempotency_key: String,
    /// JSON text.
    pub payload: String,
    /// Lifecycle state.
    pub state: JobState,
    /// Smaller runs first.
    pub priority: i64,
    /// Not claimed before this time (ms since epoch).
    pub run_at: Millis,
    /// Runs charged against `max_attempts`.
    pub attempts: i64,
    /// `max_retries + 1`.
    pub max_attempts: i64,
    /// Runs cut short by a crash (not charged).
    pub abandoned: i64,
    /// Enqueues seen for this key.
    pub deliveries: i64,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// ms since epoch.
    pub created_at: Millis,
    /// ms since epoch, once finished.
    pub finished_at: Option<Millis>,
    /// Who holds the lease while running.
    pub lease_owner: Option<String>,
    /// When the lease runs out.
    pub lease_expires_at: Option<Millis>,
    /// The attempt in progress.
    pub current_attempt: Option<i64>,
    /// What the handler finished with ([`Outcome::done_with`](crate::Outcome::done_with)),
    /// as JSON text; `None` otherwise.
    pub output: Option<String>,
    /// Its partition of the queue ([`NewJob::with_partition`]); `None`
    /// for a job without one.
    pub partition: Option<String>,
    /// How long one run may take, in ms ([`NewJob::with_timeout`]);
    /// `None`: the runtime's timeout for its kind, if any.
    pub timeout_ms: Option<i64>,
}

/// Which jobs [`crate::queue::Queue::jobs`] lists.
///
/// ```
/// # use litejob::{JobFilter, JobState};
/// let dead_mail = JobFilter::default()
///     .with_state(JobState::Dead)
///     .with_queue("mail")
///     .with_limit(20);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobFilter {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only keys that start with this.
    pub key_prefix: Option<String>,
    /// Only ids below this one: the next page (older jobs) after a page
    /// whose last id it is.
    pub before: Option<i64>,
    /// Only ids above this one: the page before (newer jobs) a page whose
    /// first id it is, still listed newest first. Ignored with `before`.
    pub after: Option<i64>,
    /// At most this many (newest first); default 100.
    pub limit: Option<u32>,
}

impl JobFilter {
    /// Only jobs in this state (`None`: any).
    pub fn with_state(mut self, state: impl Into<Option<JobState>>) -> Self {
        self.state = state.into();
        self
    }

    /// Only jobs of this kind.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs in this queue.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only jobs whose idempotency key starts with `prefix`.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Only jobs older than job `id` (keyset paging: pass the last id of
    /// the page shown). Each page costs the same however deep it is.
    pub fn with_before(mut self, id: i64) -> Self {
        self.before = Some(id);
        self
    }

    /// Only jobs newer than job `id` (the page before the one whose first
    /// id it is).
    pub fn with_after(mut self, id: i64) -> Self {
        self.after = Some(id);
        self
    }

    /// At most this many, newest first.
    pub fn with_limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
}
