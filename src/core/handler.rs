//! What user code sees of a run: the closed set of outcomes a job handler
//! returns ([`Outcome`]), what a run knows of its job or effect
//! ([`JobContext`], [`EffectContext`]), and how a prepare step stops
//! short. Writes no table.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::cancel::{RunSignal, Stop};

/// An error from user code. Any error type converts into it with `?`; it
/// means "this run failed", and the job is retried while attempts remain.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a job handler says about its job. A closed set, separate from
/// library errors ([`crate::error::Error`]) and from handler errors
/// ([`HandlerError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The work is done: commit it (ledger row, handler SQL, outbox rows) and
    /// mark the job `succeeded`.
    Done,
    /// [`Outcome::Done`] with a value, stored in `jobs.output` in the same
    /// commit: made by [`Outcome::done_with`].
    DoneWith(Output),
    /// Roll the work back and try again after the usual backoff (charged
    /// against `max_retries`).
    Retry(String),
    /// Roll the work back and try again after this delay (charged against
    /// `max_retries`).
    RetryAfter(Duration, String),
    /// Roll the work back and stop: the job is `dead` with this reason, no
    /// retry.
    Discard(String),
    /// Roll the work back and run the job again after this delay, without
    /// using an attempt: for work that is not ready yet (a partner's API
    /// asks to come back later, a file not yet uploaded). The run is
    /// recorded `snoozed`. A job snoozes at most [`Outcome::MAX_SNOOZES`]
    /// times: the snooze after that is charged as a failed attempt, so a
    /// job that never gets ready ends by its retry rules.
    Snooze(Duration),
}

impl Outcome {
    /// How many times one job may snooze ([`Outcome::Snooze`]) before a
    /// snooze counts as a failed attempt.
    pub const MAX_SNOOZES: i64 = 100;

    /// The work is done, and this is its result: committed with the job
    /// (`jobs.output`, as JSON), read by [`Queue::wait`](crate::Queue::wait),
    /// a dependent's `tx.dependency_output(key)`, `litejob show` and the
    /// dashboard. An error if the value cannot be serialized to JSON. A
    /// value larger than the queue's payload limit (1 MiB by default) fails
    /// the run without retry, its job `dead` with the reason.
    ///
    /// ```
    /// # use litejob::Outcome;
    /// let done = Outcome::done_with(&serde_json::json!({"rows": 42}))?;
    /// # Ok::<(), litejob::HandlerError>(())
    /// ```
    pub fn done_with(value: &impl serde::Serialize) -> Result<Outcome, HandlerError> {
        let json = serde_json::to_string(value)
            .map_err(|e| format!("the job's output cannot be serialized to JSON: {e}"))?;
        Ok(Outcome::DoneWith(Output(json)))
    }
}

/// A job's result as JSON text ([`Outcome::done_with`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output(pub(crate) String);

impl Output {
    /// The JSON text.
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

/// What a run knows about its job.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// Job id.
    pub id: i64,
    /// Kind.
    pub kind: String,
    /// The producer's idempotency key.
    pub key: String,
    /// Queue.
    pub queue: String,
    /// This run's charged attempt number (1-based).
    pub attempt: i64,
    /// The job's attempt budget (`max_retries + 1`).
    pub max_attempts: i64,
    /// Where [`JobContext::step`] records and finds the job's steps.
    pub(crate) steps: crate::core::steps::Steps,
    /// The run's timeout and stop ([`JobContext::is_cancelled`]).
    pub(crate) signal: Arc<RunSignal>,
}

impl JobContext {
    /// True once this run should stop: its timeout ran out
    /// ([`RuntimeBuilder::job_timeout`](crate::RuntimeBuilder::job_timeout),
    /// [`RuntimeBuilder::kind_timeout`](crate::RuntimeBuilder::kind_timeout),
    /// [`NewJob::with_timeout`](crate::NewJob::with_timeout)), an operator
    /// cancelled its job ([`Admin::cancel_job`](crate::admin::Admin::cancel_job)),
    /// or its lease was lost. Its work will not commit then: a handler
    /// that loops or waits checks it and returns early. A cancel by an
    /// operator is seen within the runtime's poll interval.
    pub fn is_cancelled(&self) -> bool {
        self.signal.is_cancelled()
    }

    /// When the step under way (prepare, then apply) must end, for a run
    /// with a timeout: hand it to a client that takes a deadline. The
    /// timeout is the run's own time: the wait between its prepare and
    /// apply steps does not count, so the apply step's deadline is set
    /// when it starts.
    pub fn deadline(&self) -> Option<Instant> {
        self.signal.deadline()
    }

    /// The time left before [`JobContext::deadline`] (zero once past it),
    /// for a client that takes a timeout; `None` without a timeout.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// What an effect run knows about its outbox row.
#[derive(Debug, Clone)]
pub struct EffectContext {
    /// Outbox row id.
    pub id: i64,
    /// Effect kind.
    pub kind: String,
    /// The row's stable key: pass it to a provider that deduplicates
    /// (e.g. as an `Idempotency-Key` header).
    pub key: String,
    /// The job that wrote the row.
    pub job_id: Option<i64>,
    /// This attempt's number (1-based).
    pub attempt: i64,
    /// The row's attempt budget.
    pub max_attempts: i64,
}

/// A prepared value travelling from the worker thread to the writer.
pub(crate) type Prepared = Box<dyn Any + Send>;

/// Why a prepare step did not produce a value.
pub(crate) enum PrepareStop {
    /// Retrying cannot help: the payload does not decode as the handler's
    /// type, or a step's result is over the cap.
    Hopeless(String),
    /// The prepare step returned an error.
    Failed(String),
    /// Decoding or the prepare step panicked.
    Panicked(String),
    /// The run's timeout ran out during its prepare step (the message
    /// says after how long).
    TimedOut(String),
    /// The run of job `job_id` was stopped from outside (its job
    /// cancelled, its lease lost): nothing of it may be recorded by this
    /// run.
    Stopped { why: Stop, job_id: i64 },
}

/// The message of a caught panic.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked (no message)".to_string()
    }
}
