//! The queue handle: opens the file, owns the writer and the reader pool,
//! and is the producer's API (enqueue, batch, transactional) and the reader's
//! (jobs, attempts, outbox rows). Writes `jobs` through enqueue. The
//! operator's methods live beside it: repairs in the admin module, reports
//! in the inspect module.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use crate::db::{self, ConnConfig, Pool, Synchronous};
use crate::enqueue::{self, EnqueueRules};
use crate::error::{Error, Result};
use crate::history::{self, Attempt};
use crate::job::{self, Enqueued, Job, JobFilter, NewJob};
use crate::outbox::{self, OutboxRow, OutboxState};
use crate::runtime::RuntimeBuilder;
use crate::schema;
use crate::time::{now_ms, Millis};
use crate::writer::{Writer, WriterConfig};

/// How a queue opens its file. Builder-lite:
///
/// ```
/// # use litejob::{QueueOptions, Synchronous};
/// let opts = QueueOptions::default()
///     .with_synchronous(Synchronous::Normal)
///     .with_kind_max_retries("send_digest", 3);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueOptions {
    /// `PRAGMA synchronous`; `Full` by default (durable on power loss).
    pub synchronous: Synchronous,
    /// How long a write waits for another connection's lock (default 30 s).
    pub busy_timeout: Duration,
    /// Largest payload accepted, in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// `max_retries` for jobs that set none and whose kind has no default (1).
    pub default_max_retries: u32,
    /// `max_retries` per kind.
    pub kind_max_retries: HashMap<String, u32>,
    /// Reader connections (default 4).
    pub pool_size: u32,
    /// Most writes applied in one group commit (default 512).
    pub max_group: usize,
    /// A single write (a handler's apply step included) running longer than
    /// this is interrupted and rolled back (default 30 s; None: no limit).
    pub transaction_budget: Option<Duration>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(30),
            max_payload_bytes: 1024 * 1024,
            default_max_retries: 1,
            kind_max_retries: HashMap::new(),
            pool_size: 4,
            max_group: 512,
            transaction_budget: Some(Duration::from_secs(30)),
        }
    }
}

impl QueueOptions {
    /// Sets `PRAGMA synchronous`.
    pub fn with_synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }
    /// Sets the busy timeout.
    pub fn with_busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }
    /// Sets the payload limit in bytes.
    pub fn with_max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }
    /// Sets the default `max_retries`.
    pub fn with_default_max_retries(mut self, n: u32) -> Self {
        self.default_max_retries = n;
        self
    }
    /// Sets the default `max_retries` of one kind.
    pub fn with_kind_max_retries(mut self, kind: impl Into<String>, n: u32) -> Self {
        self.kind_max_retries.insert(kind.into(), n);
        self
    }
    /// Sets the number of reader connections.
    pub fn with_pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }
    /// Sets the most writes applied in one group commit.
    pub fn with_max_group(mut self, n: usize) -> Self {
        self.max_group = n;
        self
    }
    /// Sets the time budget of one write transaction step.
    pub fn with_transaction_budget(mut self, d: Option<Duration>) -> Self {
        self.transaction_budget = d;
        self
    }

    /// Checks `job` against these options exactly as an enqueue would
    /// (names, JSON, payload size, retries), without opening any file: a
    /// caller can refuse bad input before it creates a queue file.
    pub fn check(&self, job: &NewJob) -> Result<()> {
        enqueue::validate_parts(job, &self.rules(), now_ms()).map(|_| ())
    }

    fn rules(&self) -> EnqueueRules {
        EnqueueRules {
            max_payload_bytes: self.max_payload_bytes,
            default_max_retries: self.default_max_retries,
            kind_max_retries: self.kind_max_retries.clone(),
        }
    }
}

/// A queue on one SQLite file. Cheap to clone; all clones share one writer
/// thread and one reader pool. The writer stops when the last clone is
/// dropped (after finishing what was sent to it).
#[derive(Clone)]
pub struct Queue {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub path: PathBuf,
    pub opts: QueueOptions,
    pub conn_cfg: ConnConfig,
    pub rules: EnqueueRules,
    pub pool: Pool,
    /// `None` for a queue opened read-only: no write connection, no thread.
    pub writer: Option<Writer>,
    /// Wakes this process's job claimers after an in-process enqueue.
    pub job_wake: Wakers,
    /// Wakes effect dispatchers after a run wrote outbox rows.
    pub outbox_wake: Wakers,
}

/// The wake-up channels of a queue's runtimes. Each runtime subscribes its
/// own channel (capacity one: a pending wake-up is enough) and a wake-up
/// goes to all of them: with one shared channel, two runtimes on one queue
/// (say, one per kind) swallowed each other's wake-ups and waited for the
/// next poll. A runtime drops its receiver when it stops; its sender is
/// pruned at the next wake-up.
#[derive(Default)]
pub(crate) struct Wakers(std::sync::Mutex<Vec<Sender<()>>>);

impl Wakers {
    /// A new channel that every later [`Wakers::wake`] reaches.
    pub(crate) fn subscribe(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        rx
    }

    /// Wakes every subscriber.
    pub(crate) fn wake(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|tx| {
                !matches!(
                    tx.try_send(()),
                    Err(crossbeam_channel::TrySendError::Disconnected(_))
                )
            });
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// A write transaction on the writer thread, for application SQL and
/// enqueues that must commit together ("row written + job enqueued, or
/// neither"). Derefs to the connection; do not COMMIT or ROLLBACK yourself.
pub struct WriteTx<'a> {
    conn: &'a Connection,
    rules: &'a EnqueueRules,
    now: Millis,
    enqueued: Cell<bool>,
}

impl WriteTx<'_> {
    /// Enqueues inside this transaction.
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let valid = enqueue::validate_owned(job, self.rules, self.now)?;
        let r = enqueue::insert(self.conn, &valid, self.now)?;
        if !r.is_duplicate() {
            self.enqueued.set(true);
        }
        Ok(r)
    }

    /// The connection, inside the transaction.
    pub fn conn(&self) -> &Connection {
        self.conn
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Queue {
    /// Opens (creating and migrating if needed) the queue at `path` with the
    /// default options: WAL, `synchronous=FULL`, 30 s busy timeout.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_with(path, QueueOptions::default())
    }

    /// Opens the queue at `path` with `opts`.
    pub fn open_with(path: impl AsRef<Path>, opts: QueueOptions) -> Result<Queue> {
        let path = path.as_ref().to_path_buf();
        let conn_cfg = ConnConfig {
            synchronous: opts.synchronous,
            busy_timeout: opts.busy_timeout,
        };
        let conn = db::open_file(&path, &conn_cfg)?;
        let pool = db::pool(&path, &conn_cfg, opts.pool_size.max(1))?;
        let writer = Writer::spawn(
            conn,
            WriterConfig {
                max_batch: opts.max_group,
                full_sync: opts.synchronous == Synchronous::Full,
                op_budget: opts.transaction_budget,
            },
        )?;
        let rules = opts.rules();
        Ok(Queue {
            inner: Arc::new(Inner {
                path,
                opts,
                conn_cfg,
                rules,
                pool,
                writer: Some(writer),
                job_wake: Wakers::default(),
                outbox_wake: Wakers::default(),
            }),
        })
    }

    /// Opens an existing queue file for reading only, with the default
    /// options: for a dashboard or a report beside the processes that work
    /// on the file. It never creates, migrates or writes the file (its
    /// connections are opened `SQLITE_OPEN_READONLY`, and no writer thread
    /// starts), and its reads never take the write lock. It refuses a
    /// missing file, one that is not a litejob file, and one whose schema is
    /// older or newer than this library's. Every write through it (an
    /// enqueue, a repair, a runtime) fails with [`Error::ReadOnly`].
    ///
    /// A WAL file's reader needs the `-shm` and `-wal` files beside it:
    /// SQLite creates them when they are missing, so the directory must be
    /// writable unless another process has the file open.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_read_only_with(path, QueueOptions::default())
    }

    /// [`Queue::open_read_only`] with `opts` (the busy timeout and the
    /// reader pool's size apply; the write settings do not).
    pub fn open_read_only_with(path: impl AsRef<Path>, opts: QueueOptions) -> Result<Queue> {
        let path = path.as_ref().to_path_buf();
        let conn_cfg = ConnConfig {
            synchronous: opts.synchronous,
            busy_timeout: opts.busy_timeout,
        };
        // One connection first, so a missing or foreign file is refused
        // here and not at the first read.
        drop(db::open_read_only(&path, &conn_cfg)?);
        let pool = db::read_only_pool(&path, &conn_cfg, opts.pool_size.max(1))?;
        let rules = opts.rules();
        Ok(Queue {
            inner: Arc::new(Inner {
                path,
                opts,
                conn_cfg,
                rules,
                pool,
                writer: None,
                job_wake: Wakers::default(),
                outbox_wake: Wakers::default(),
            }),
        })
    }

    /// True when the queue was opened with [`Queue::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.writer.is_none()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    /// The file's schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64> {
        self.read(schema::read_version)
    }

    /// Enqueues one job. Returns once its commit is durable (with
    /// `synchronous=FULL`): `New(id)`, or `Duplicate(id)` when the key was
    /// seen before (its `deliveries` count grows, nothing else changes).
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let now = now_ms();
        let valid = enqueue::validate_owned(job, &self.inner.rules, now)?;
        let r = self.write_retrying(move |conn| enqueue::insert(conn, &valid, now))?;
        if !r.is_duplicate() {
            self.notify();
        }
        Ok(r)
    }

    /// Enqueues many jobs in one transaction: all are written or none. Any
    /// invalid job refuses the whole batch before anything is written.
    pub fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let now = now_ms();
        // Check every job before writing any: one bad job refuses the batch.
        let checked = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                enqueue::validate_parts(j, &self.inner.rules, now).map_err(|e| match e {
                    Error::InvalidInput(m) => {
                        Error::InvalidInput(format!("job {i} ({}): {m}", j.key))
                    }
                    other => other,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let valid: Vec<_> = jobs
            .into_iter()
            .zip(checked)
            .map(|(j, (run_at, max_attempts))| enqueue::into_valid(j, run_at, max_attempts))
            .collect();
        let valid = Arc::new(valid);
        let r = self.write_retrying(move |conn| enqueue::insert_many(conn, &valid, now))?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notify();
        }
        Ok(r)
    }

    /// Enqueues inside a transaction the application opened itself on its own
    /// connection to the same file (see [`Queue::connect`]). The job exists if
    /// and only if that transaction commits. Call [`Queue::notify`] after the
    /// commit to wake workers at once; otherwise they see it at their next poll.
    pub fn enqueue_in(&self, conn: &Connection, job: &NewJob) -> Result<Enqueued> {
        self.writable()?;
        let now = now_ms();
        let valid = enqueue::validate(job, &self.inner.rules, now)?;
        enqueue::insert(conn, &valid, now)
    }

    /// Runs `f` in a write transaction on the writer thread, where it commits
    /// together with other writes (group commit). What `f` writes and enqueues
    /// through [`WriteTx::enqueue`] commits together, or not at all when `f`
    /// returns an error.
    pub fn write<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> Result<R> + Send + 'static,
    {
        let inner = self.inner.clone();
        let now = now_ms();
        let (r, enqueued) = self.writable()?.run(move |conn| {
            let tx = WriteTx {
                conn,
                rules: &inner.rules,
                now,
                enqueued: Cell::new(false),
            };
            let r = f(&tx)?;
            Ok((r, tx.enqueued.get()))
        })?;
        if enqueued {
            self.notify();
        }
        Ok(r)
    }

    /// Runs `f` on the writer; an `Aborted` (another write in the group
    /// rolled the transaction back) is retried, since nothing was written.
    fn write_retrying<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: Fn(&Connection) -> Result<R> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let mut tries = 0;
        loop {
            let g = f.clone();
            match self.writable()?.run(move |c| g(c)) {
                Err(Error::Aborted(_)) if tries < 5 => tries += 1,
                other => return other,
            }
        }
    }

    /// Test hook: sets `PRAGMA max_page_count` on the writer connection (the
    /// only one that writes), so tests can simulate a full disk and then
    /// give the space back. Returns the limit SQLite applied (never below
    /// the file's current size). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_max_page_count(&self, pages: u64) -> Result<u64> {
        self.writable()?.run(move |c| {
            Ok(
                c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get::<_, i64>(0)
                })? as u64,
            )
        })
    }

    /// The writer, or [`Error::ReadOnly`] for a queue opened read-only:
    /// every write entry point asks this first, so nothing is sent anywhere.
    pub(crate) fn writable(&self) -> Result<&Writer> {
        self.inner.writer.as_ref().ok_or_else(|| {
            Error::ReadOnly(format!(
                "{} was opened read-only: nothing was written",
                self.inner.path.display()
            ))
        })
    }

    /// The writer of a runtime. A runtime refuses to start on a read-only
    /// queue ([`RuntimeBuilder::start`]), so its threads always find one.
    pub(crate) fn writer(&self) -> &Writer {
        self.writable()
            .expect("a runtime starts only on a queue opened for writing")
    }

    /// Wakes this process's idle workers (after an [`Queue::enqueue_in`] commit).
    pub fn notify(&self) {
        self.inner.job_wake.wake();
    }

    pub(crate) fn notify_outbox(&self) {
        self.inner.outbox_wake.wake();
    }

    /// A new connection to the file with litejob's pragmas (busy timeout,
    /// synchronous, foreign keys), for the application's own transactions.
    /// Open write transactions with `BEGIN IMMEDIATE`
    /// ([`crate::immediate`]).
    pub fn connect(&self) -> Result<Connection> {
        self.writable()?;
        db::connect(&self.inner.path, &self.inner.conn_cfg)
    }

    /// Runs `f` on a pooled reader connection. It is read-only (`PRAGMA
    /// query_only`): a write fails with an error and changes nothing; write
    /// through [`Queue::write`].
    pub fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let conn = self.inner.pool.get()?;
        f(&conn)
    }

    /// One job by id.
    pub fn job(&self, id: i64) -> Result<Option<Job>> {
        self.read(|c| job::get_job(c, id))
    }

    /// One job by idempotency key.
    pub fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.read(|c| job::get_job_by_key(c, key))
    }

    /// Jobs matching `filter`, newest first.
    pub fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.read(|c| job::list_jobs(c, filter))
    }

    /// Every run of a job, oldest first.
    pub fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.read(|c| history::for_job(c, job_id))
    }

    /// Every attempt of an outbox row, oldest first.
    pub fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.read(|c| history::for_outbox(c, outbox_id))
    }

    /// The outbox rows a job wrote.
    pub fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::for_job(c, job_id))
    }

    /// Outbox rows, newest first.
    pub fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::list(c, state, limit))
    }

    /// A page of outbox rows, newest first, optionally in one state: ids
    /// below `before` (the next, older page), or the `limit` ids just above
    /// `after` (the page before); the newest without either.
    pub fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::list_page(c, state, before, after, limit))
    }

    /// Starts building a runtime (workers and effect dispatchers) on this queue.
    pub fn runtime(&self) -> RuntimeBuilder {
        RuntimeBuilder::new(self.clone())
    }
}
