//! The backend boundary: the queue operations litejob needs from the
//! database that holds a queue, one implementation per engine — SQLite
//! (`sqlite.rs`, the file and its one writer) and PostgreSQL
//! (`crate::postgres`). [`crate::queue::Queue`] and the runtime's shared threads
//! (effects, lease renewal, reaping) call only these; each engine runs its
//! own job pipeline (claims, starts, the run's transaction), which lives
//! beside its store. Writes nothing itself.
//!
//! Every operation takes the time it runs at (`now`, ms since the epoch)
//! from [`Store::now`], the store's clock: the local clock for a file,
//! the database server's for PostgreSQL, whose leases machines with
//! different clocks must agree on.

#[cfg(feature = "postgres")]
pub(crate) mod copy;
pub(crate) mod handler;
pub(crate) mod in_flight;
pub(crate) mod leases;
pub(crate) mod pipeline;
pub(crate) mod reply;
pub(crate) mod run;
pub(crate) mod runner;
pub(crate) mod schedules;
pub(crate) mod wake;
pub(crate) mod watch;

use crate::core::attempt::Attempt;
use crate::core::controls::{QueueControl, QueueLimits};
use crate::core::job::{Enqueued, Job, JobFilter, JobState};
use crate::core::options::{EngineKind, QueueOptions};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::reports::failures::Failures;
use crate::core::reports::overview::Overview;
use crate::core::reports::stats::{Explanation, JobDetail, Stats};
use crate::core::reports::tally::Tally;
use crate::core::reports::verify::VerifyReport;
use crate::core::reports::workflow::Workflow;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;
use crate::core::validate::{EnqueueRules, ValidJob};
use crate::error::Result;

/// The engines a queue can live on: [`crate::sqlite::Sqlite`], a file, and
/// `litejob::postgres::Postgres`, a PostgreSQL database (feature
/// `postgres`). What differs between them for an application is where the
/// queue is and the type of the transactions its code gets; a handler
/// written for one does not compile for the other. Sealed: litejob's
/// engines are the only ones.
// The hidden items name the crate's own store and pipeline types: an
// application never implements an engine (sealed) nor sees those items.
#[allow(private_bounds, private_interfaces)]
pub trait Engine: sealed::Sealed + Send + Sync + Sized + 'static {
    /// The transaction a job handler's apply step runs in.
    type JobTx<'a, 't>
    where
        't: 'a;
    /// Where a queue of this engine is: a file's path, or a URL.
    type Location: ?Sized;
    /// Which engine this is, at run time.
    const KIND: EngineKind;
    #[doc(hidden)]
    type Store: Store;
    #[doc(hidden)]
    fn open(location: &Self::Location, opts: &QueueOptions) -> Result<Self::Store>;
    #[doc(hidden)]
    fn start(shared: std::sync::Arc<pipeline::Shared<Self>>) -> Result<pipeline::Launched>;
    #[doc(hidden)]
    fn drain(
        shared: std::sync::Arc<pipeline::Shared<Self>>,
    ) -> Result<Box<dyn pipeline::DrainJobs>>;
    #[doc(hidden)]
    fn in_slot_tx<R, F>(
        store: &Self::Store,
        rules: std::sync::Arc<EnqueueRules>,
        now: Millis,
        f: F,
    ) -> Result<(R, bool)>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn schedules::SlotTx) -> Result<R> + Send + 'static;
}

/// Locks a mutex of the crate's (see [`crate::core::sync`]).
pub(crate) use crate::core::sync::lock;

pub(crate) mod sealed {
    /// Keeps [`super::Engine`] litejob's own.
    pub trait Sealed {}
}

/// How often a write answered `Aborted` (rolled back with a neighbour in its
/// group, nothing of it written) is sent again before the caller gets the
/// error.
pub(crate) const ABORTED_RETRIES: u32 = 5;

/// What a prune batch deletes (see [`Admin::prune`](crate::admin::Admin::prune)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PruneWhat {
    /// Finished jobs (whose outbox rows are all sent) and their attempts;
    /// dead and cancelled ones only when they finished before
    /// `failed_before`.
    Jobs { failed_before: Millis },
    /// Sent outbox rows and their attempts.
    Outbox,
    /// Ledger rows.
    Ledger,
}

/// The queue operations, as one engine implements them: what the facade,
/// the operator's reports and repairs, and the runtime's shared threads
/// ask of the database.
pub(crate) trait Store: Send + Sync + 'static {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;
    /// Where the queue is: the file's path, or the URL without its password.
    fn location(&self) -> &str;
    /// True when the queue was opened read-only.
    fn is_read_only(&self) -> bool;
    /// [`Error::ReadOnly`](crate::error::Error::ReadOnly) for a queue opened
    /// read-only: every write asks this first, so nothing is sent anywhere.
    fn writable(&self) -> Result<()>;
    /// The clock every time this backend stores is measured with.
    fn now(&self) -> Millis;
    /// The schema version the database holds.
    fn schema_version(&self) -> Result<i64>;
    /// The storage's own check and litejob's invariants, in one read
    /// snapshot; writes nothing.
    fn verify(&self) -> Result<VerifyReport>;

    // The producer's side.

    /// Inserts a validated job, or counts a delivery of a key seen before.
    fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued>;
    /// Inserts a batch in one transaction: all or nothing.
    fn enqueue_many(&self, jobs: Vec<ValidJob>, now: Millis) -> Result<Vec<Enqueued>>;
    /// [`Store::enqueue`] on a thread of the store's, answered through
    /// `reply`; the caller does not wait.
    fn enqueue_async(&self, job: ValidJob, now: Millis, reply: reply::Deliver<Enqueued>);
    /// [`Store::enqueue_many`] on a thread of the store's.
    fn enqueue_many_async(
        &self,
        jobs: Vec<ValidJob>,
        now: Millis,
        reply: reply::Deliver<Vec<Enqueued>>,
    );

    // Reads.

    /// One job by id.
    fn job(&self, id: i64) -> Result<Option<Job>>;
    /// One job by idempotency key.
    fn job_by_key(&self, key: &str) -> Result<Option<Job>>;
    /// Jobs matching a filter, newest first.
    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>>;
    /// Every run of a job, oldest first.
    fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>>;
    /// A job's recorded steps, by name.
    fn steps(&self, job_id: i64) -> Result<Vec<crate::core::steps::JobStep>>;
    /// Records a step's result and commits it durably, fenced on its run;
    /// false when the run no longer holds its job (nothing was written).
    fn record_step(&self, step: &crate::core::steps::StepRecord<'_>) -> Result<bool>;
    /// Appends `attempt` to the `reused_in` of the job's named steps.
    fn mark_steps_reused(&self, job_id: i64, attempt: i64, names: &[String]) -> Result<()>;
    /// Every attempt of an outbox row, oldest first.
    fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>>;
    /// The outbox rows a job wrote.
    fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>>;
    /// Outbox rows, newest first.
    fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>>;
    /// A page of outbox rows, newest first, from a keyset cursor.
    fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>>;
    /// Counts, in one snapshot.
    fn stats(&self, now: Millis) -> Result<Stats>;
    /// One job with its runs and outbox rows, in one snapshot.
    fn job_detail(&self, id: i64) -> Result<Option<JobDetail>>;
    /// Everything known about a key, in one snapshot.
    fn explain(&self, key: &str) -> Result<Explanation>;
    /// The workflow around the job of `key` (at most `limit` jobs), in one
    /// snapshot; `None` when no job has the key.
    fn workflow(&self, key: &str, limit: usize) -> Result<Option<Workflow>>;
    /// Every schedule's row, by name.
    fn schedules(&self) -> Result<Vec<ScheduleRow>>;

    // Queue controls.

    /// Every queue with jobs or controls, by name, with its load at `now`.
    fn queue_controls(&self, now: Millis) -> Result<Vec<QueueControl>>;
    /// One queue's controls (its `queued` count left at 0); None when it
    /// has none.
    fn queue_control(&self, queue: &str, now: Millis) -> Result<Option<QueueControl>>;
    /// The operator's change to a queue's controls (`paused`: Some to set
    /// it), validated; a queue left with nothing in force loses its row.
    fn change_queue(
        &self,
        queue: &str,
        paused: Option<bool>,
        limits: &QueueLimits,
        now: Millis,
    ) -> Result<()>;
    // The dashboard's and the metrics' reads, each in one snapshot.

    /// The metrics' figures: jobs per queue, kind and state, outbox rows per
    /// kind and state, runs per kind and outcome, the ledger's rows and the
    /// storage's size. `now` decides which queued jobs are due.
    fn tally(&self, now: Millis) -> Result<Tally>;
    /// The overview: the same counts without the runs per kind, the last
    /// hour's runs per minute, and the schedules.
    fn overview(&self, now: Millis) -> Result<Overview>;
    /// Dead jobs and dead outbox rows grouped by last error and kind, the
    /// largest groups first, at most `limit` of each.
    fn failures(&self, limit: u32) -> Result<Failures>;

    // The operator's repairs.

    /// Requeues one dead job with a renewed budget.
    fn retry_job(&self, id: i64, now: Millis) -> Result<()>;
    /// Requeues up to `limit` dead jobs (of `kind`) with ids above `after`;
    /// returns their ids.
    fn retry_dead_batch(
        &self,
        kind: Option<&str>,
        after: i64,
        limit: i64,
        now: Millis,
    ) -> Result<Vec<i64>>;
    /// Cancels a waiting, queued or running job (a running one's run is
    /// ended `cancelled`), and its waiting dependents; returns the state
    /// it was in.
    fn cancel_job(&self, id: i64, now: Millis) -> Result<JobState>;
    /// Requeues a dead outbox row with a fresh budget.
    fn retry_outbox(&self, outbox_id: i64, now: Millis) -> Result<()>;
    /// Deletes one batch of `what` finished before `before`, in one
    /// transaction; returns `(rows, their attempts)`.
    fn prune_batch(&self, what: PruneWhat, before: Millis, limit: i64) -> Result<(usize, usize)>;

    // What the runtime's shared threads need.

    /// Whether any job of `kinds` (in `queues`, if given) is due.
    fn any_to_claim(
        &self,
        kinds: &[String],
        queues: Option<&[String]>,
        now: Millis,
    ) -> Result<bool>;
    /// Each of these jobs that still exists: its state and the attempt it
    /// runs (the watcher's read: which runs were cancelled or lost).
    fn run_states(&self, ids: &[i64]) -> Result<Vec<(i64, JobState, Option<i64>)>>;
    /// Extends the leases `owner` holds on these jobs and outbox rows.
    fn renew_leases(&self, owner: &str, jobs: &[i64], effects: &[i64], until: Millis)
        -> Result<()>;
    /// Takes back jobs and outbox rows whose lease expired; returns how
    /// many of each. Looks first without writing: an idle check must not
    /// write.
    fn reap(&self, now: Millis, max_abandoned: i64) -> Result<(usize, usize)>;
    /// Gives a job back to `queued` uncharged, fenced on the lease (a claim
    /// never started, or a run cut short by shutdown).
    fn release_job(
        &self,
        id: i64,
        owner: &str,
        attempt: Option<i64>,
        why: &str,
        now: Millis,
    ) -> Result<bool>;
    /// Claims the next due outbox row of `kinds` and records its attempt;
    /// durable before it returns, so the effect runs only after its claim
    /// (and the job's commit before it) is on disk.
    fn claim_effect(
        &self,
        kinds: &[String],
        owner: &str,
        worker: &str,
        lease_until: Millis,
        now: Millis,
    ) -> Result<Option<ClaimedEffect>>;
    /// Records an effect attempt's end, fenced on the attempt.
    fn ack_effect(
        &self,
        outbox_id: i64,
        attempt_id: i64,
        result: &EffectResult,
        now: Millis,
    ) -> Result<Option<OutboxState>>;
    /// Gives an outbox row back at shutdown.
    fn release_effect(&self, outbox_id: i64, attempt_id: i64, now: Millis) -> Result<bool>;
    /// Gives back, uncharged, the outbox rows claimed for the effect
    /// thread `worker` of `owner` and not being performed, except the
    /// attempts `performed` (whose effect ran, unacknowledged): a claim
    /// whose answer was lost (the connection broke after the server
    /// committed it). Called by that thread before its next claim after a
    /// failed one; returns how many went back. A file's claims never lose
    /// their answer: nothing to do.
    fn release_lost_effect_claims(
        &self,
        _owner: &str,
        _worker: &str,
        _performed: &[i64],
        _now: Millis,
    ) -> Result<usize> {
        Ok(0)
    }
}
