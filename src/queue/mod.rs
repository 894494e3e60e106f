//! The facade: [`Queue`], an application's handle on a queue of either
//! engine. Opening, the producer's API (enqueue, batch; their async forms
//! in `async_ops`), the reads an application makes of its jobs, and the
//! door to the operator's API ([`Queue::admin`]). What differs between the
//! engines (the transactions handed out) lives in `sqlite.rs` and
//! `postgres.rs`. Writes `jobs` through the store's enqueue.

use std::path::Path;
use std::sync::Arc;

use crate::core::attempt::Attempt;
use crate::core::job::{Enqueued, Job, JobFilter, NewJob};
use crate::core::options::{EngineKind, QueueOptions};
use crate::core::outbox::{OutboxRow, OutboxState};
use crate::core::time::Millis;
use crate::core::validate::{self, EnqueueRules, ValidJob};
use crate::driver::wake::{Waiters, Wakers};
use crate::driver::{Engine, Store};
use crate::error::{Error, Result};
use crate::sqlite::Sqlite;

pub(crate) mod admin;
pub(crate) mod any;
mod async_ops;
mod backup;
#[cfg(feature = "postgres")]
mod copy;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
mod wait;

pub use admin::Admin;
pub use any::AnyQueue;
pub use wait::WaitFuture;

/// A queue: on one SQLite file (`Queue`, the default engine) or in a
/// PostgreSQL database (`Queue<Postgres>`). Cheap to clone; all clones
/// share one store (on a file: one writer thread and one reader pool,
/// which stop when the last clone is dropped, after finishing what was
/// sent to them).
pub struct Queue<E: Engine = Sqlite> {
    pub(crate) inner: Arc<Inner<E>>,
}

impl<E: Engine> Clone for Queue<E> {
    fn clone(&self) -> Self {
        Queue {
            inner: self.inner.clone(),
        }
    }
}

pub(crate) struct Inner<E: Engine> {
    /// The database behind the queue.
    pub(crate) store: Arc<E::Store>,
    pub(crate) opts: QueueOptions,
    /// Shared with the writes sent from async code, which must not hold the
    /// queue itself: the last handle dropped on the writer thread would
    /// join that thread from itself.
    pub(crate) rules: Arc<EnqueueRules>,
    /// Wakes this process's job claimers after an in-process enqueue (from
    /// the thread that answers an async enqueue, too).
    pub(crate) job_wake: Arc<Wakers>,
    /// Wakes effect threads after a run wrote outbox rows.
    pub(crate) outbox_wake: Arc<Wakers>,
    /// Wakes [`Queue::wait`] callers after runs (or a repair) ended jobs.
    pub(crate) done_wake: Arc<Waiters>,
}

impl<E: Engine> std::fmt::Debug for Queue<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("engine", &E::KIND)
            .field("location", &self.location())
            .finish()
    }
}

impl Queue<Sqlite> {
    /// Opens (creating and migrating if needed) the queue file at `path`
    /// with the default options: WAL, `synchronous=FULL`, 30 s busy
    /// timeout. [`Queue::open_with`] takes options, and opens a queue on
    /// PostgreSQL too.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_with(path, QueueOptions::default())
    }
}

impl<E: Engine> Queue<E> {
    /// Opens the queue at `location` with `opts`: a file's path for
    /// `Queue` (created and migrated if needed), a URL for
    /// `Queue<Postgres>` (`postgres://user:password@host:port/database`;
    /// its tables are created or migrated in the schema its `search_path`
    /// names). A schema newer than this library is refused untouched. With
    /// [`QueueOptions::with_read_only`] nothing is created, migrated or
    /// written, and every write fails with [`Error::ReadOnly`].
    ///
    /// The engine is the queue's type: name it where nothing else does
    /// (`Queue` is a file's, `Queue<Postgres>` a database's).
    ///
    /// ```
    /// # use litejob::{Queue, QueueOptions, Synchronous};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let opts = QueueOptions::default().with_synchronous(Synchronous::Normal);
    /// let queue: Queue = Queue::open_with(dir.path().join("app.db"), opts)?;
    /// # Ok::<(), litejob::Error>(())
    /// ```
    pub fn open_with(location: impl AsRef<E::Location>, opts: QueueOptions) -> Result<Queue<E>> {
        let store = E::open(location.as_ref(), &opts)?;
        Ok(Queue::from_store(Arc::new(store), opts))
    }

    pub(crate) fn from_store(store: Arc<E::Store>, opts: QueueOptions) -> Queue<E> {
        let rules = Arc::new(opts.rules());
        Queue {
            inner: Arc::new(Inner {
                store,
                opts,
                rules,
                job_wake: Arc::default(),
                outbox_wake: Arc::default(),
                done_wake: Arc::default(),
            }),
        }
    }

    /// The store behind the queue.
    pub(crate) fn store(&self) -> &E::Store {
        &self.inner.store
    }

    /// The store's clock, which every time the queue stores is read from.
    pub(crate) fn now(&self) -> Millis {
        self.store().now()
    }

    /// Which engine holds the queue.
    pub fn engine(&self) -> EngineKind {
        E::KIND
    }

    /// Where the queue is: the file's path, or the URL without its password.
    pub fn location(&self) -> &str {
        self.store().location()
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    /// True when the queue was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.store().is_read_only()
    }

    /// The schema version the database holds (`PRAGMA user_version` in a
    /// file).
    pub fn schema_version(&self) -> Result<i64> {
        self.store().schema_version()
    }

    /// Enqueues one job. Returns once its commit is durable (with
    /// `synchronous=FULL`): `New(id)`, or `Duplicate(id)` when the key was
    /// seen before (its `deliveries` count grows, nothing else changes).
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let now = self.now();
        let valid = validate::validate_owned(job, &self.inner.rules, now)?;
        let r = self.store().enqueue(valid, now)?;
        if !r.is_duplicate() {
            self.notify();
        }
        Ok(r)
    }

    /// Enqueues many jobs in one transaction: all are written or none. Any
    /// invalid job refuses the whole batch before anything is written.
    pub fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let now = self.now();
        let valid = self.validate_batch(jobs, now)?;
        let r = self.store().enqueue_many(valid, now)?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notify();
        }
        Ok(r)
    }

    /// Checks every job of a batch before any is written: one bad job
    /// refuses the batch, and the message names it.
    pub(crate) fn validate_batch(&self, jobs: Vec<NewJob>, now: Millis) -> Result<Vec<ValidJob>> {
        let checked = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                validate::validate_parts(j, &self.inner.rules, now).map_err(|e| match e {
                    Error::InvalidInput(m) => {
                        Error::InvalidInput(format!("job {i} ({}): {m}", j.key))
                    }
                    other => other,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(jobs
            .into_iter()
            .zip(checked)
            .map(|(j, (run_at, max_attempts))| validate::into_valid(j, run_at, max_attempts))
            .collect())
    }

    /// Wakes this process's idle workers at once (after a commit of
    /// [`Queue::enqueue_in`]; other processes see the job at their next
    /// poll).
    pub fn notify(&self) {
        self.inner.job_wake.wake();
    }

    /// One job by id.
    pub fn job(&self, id: i64) -> Result<Option<Job>> {
        self.store().job(id)
    }

    /// One job by idempotency key.
    pub fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.store().job_by_key(key)
    }

    /// Jobs matching `filter`, newest first.
    pub fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.store().jobs(filter)
    }

    /// Every run of a job, oldest first.
    pub fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.store().attempts(job_id)
    }

    /// A job's durable steps ([`JobContext::step`](crate::JobContext::step)),
    /// in the order they ran: what each returned, in which attempt, and
    /// the attempts that got it back without calling it again.
    pub fn steps(&self, job_id: i64) -> Result<Vec<crate::JobStep>> {
        self.store().steps(job_id)
    }

    /// The outbox rows a job wrote.
    pub fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.store().outbox_for_job(job_id)
    }

    /// Outbox rows, newest first, optionally in one state.
    pub fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.store().outbox(state, limit)
    }

    /// The operator's side of the queue: reports (stats, one job's story,
    /// everything about a key, the overview, failures, metrics) and repairs
    /// (retry, cancel, prune, queue controls). See [`crate::admin`].
    pub fn admin(&self) -> Admin {
        Admin::new(
            self.inner.store.clone(),
            self.inner.job_wake.clone(),
            self.inner.outbox_wake.clone(),
            self.inner.done_wake.clone(),
        )
    }
}
