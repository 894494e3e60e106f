//! The queue handle: opens the file, owns the writer and the reader pool,
//! and is the producer's API (enqueue, batch, transactional; their async
//! forms in [`async_ops`]) and the reader's (jobs, attempts, outbox rows). Writes `jobs` through enqueue. The
//! operator's methods live beside it: repairs in the admin module, reports
//! in the inspect module.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use crate::backend::sqlite::SqliteStore;
use crate::backend::{Backend, BackendKind};
use crate::db::{self, Synchronous};
use crate::enqueue::{self, EnqueueRules, ValidJob};
use crate::error::{Error, Result};
use crate::history::Attempt;
use crate::job::{Enqueued, Job, JobFilter, NewJob};
use crate::outbox::{OutboxRow, OutboxState};
use crate::runtime::RuntimeBuilder;
use crate::time::{now_ms, Millis};
use crate::writer::Writer;

mod async_ops;

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
    /// The database behind the queue, through the backend boundary.
    pub backend: Arc<dyn Backend>,
    /// The same store when it is a SQLite file: the writer, the reader
    /// pool, and the APIs that hand out a SQLite connection.
    pub sqlite: Option<Arc<SqliteStore>>,
    /// The same store when it is a PostgreSQL database.
    #[cfg(feature = "postgres")]
    pub pg: Option<Arc<crate::postgres::PgStore>>,
    /// The file's path, or the PostgreSQL URL without its password.
    pub location: PathBuf,
    pub opts: QueueOptions,
    /// Shared with the writes sent from async code, which must not hold the
    /// queue itself: the last handle dropped on the writer thread would
    /// join that thread from itself.
    pub rules: Arc<EnqueueRules>,
    /// Wakes this process's job claimers after an in-process enqueue (from
    /// the thread that answers an async enqueue, too).
    pub job_wake: Arc<Wakers>,
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

/// Whether `location` is a PostgreSQL URL rather than a file's path.
pub fn is_postgres_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("backend", &self.inner.backend.kind())
            .field("location", &self.location())
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

/// Runs `f`, a [`Queue::write`] body, in a [`WriteTx`] on the writer's
/// connection; its result, and whether it enqueued a new job.
fn in_write_tx<R>(
    conn: &Connection,
    rules: &EnqueueRules,
    now: Millis,
    f: impl FnOnce(&WriteTx<'_>) -> Result<R>,
) -> Result<(R, bool)> {
    let tx = WriteTx {
        conn,
        rules,
        now,
        enqueued: Cell::new(false),
    };
    let r = f(&tx)?;
    Ok((r, tx.enqueued.get()))
}

/// How often a write answered `Aborted` (rolled back with a neighbour in its
/// group, nothing of it written) is sent again before the caller gets the
/// error.
pub(crate) const ABORTED_RETRIES: u32 = 5;

impl Queue {
    /// Opens (creating and migrating if needed) the queue at `path` with the
    /// default options: WAL, `synchronous=FULL`, 30 s busy timeout.
    pub fn open(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_with(path, QueueOptions::default())
    }

    /// Opens the queue at `path` with `opts`.
    pub fn open_with(path: impl AsRef<Path>, opts: QueueOptions) -> Result<Queue> {
        let store = Arc::new(SqliteStore::open(path.as_ref(), &opts)?);
        let location = store.path.clone();
        Ok(Queue::with_backend(
            store.clone(),
            Some(store),
            #[cfg(feature = "postgres")]
            None,
            location,
            opts,
        ))
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
    /// It creates no file beside it either, so it works on a file in a
    /// directory it may only read: while another process has the file
    /// open, it reads through that process's `-wal` and `-shm` files (which
    /// it must be able to read); while none has, it reads the file itself
    /// as an immutable snapshot, and each connection read that way is
    /// replaced by an ordinary one at its first use after a writer opened
    /// the file (a read under way at that very moment is not protected by
    /// any lock from the writer's first checkpoint).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Queue> {
        Queue::open_read_only_with(path, QueueOptions::default())
    }

    /// [`Queue::open_read_only`] with `opts` (the busy timeout and the
    /// reader pool's size apply; the write settings do not).
    pub fn open_read_only_with(path: impl AsRef<Path>, opts: QueueOptions) -> Result<Queue> {
        let store = Arc::new(SqliteStore::open_read_only(path.as_ref(), &opts)?);
        let location = store.path.clone();
        Ok(Queue::with_backend(
            store.clone(),
            Some(store),
            #[cfg(feature = "postgres")]
            None,
            location,
            opts,
        ))
    }

    /// True when the queue was opened read-only.
    pub fn is_read_only(&self) -> bool {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.postgres() {
            return pg.is_read_only();
        }
        self.inner.sqlite.as_ref().is_some_and(|s| s.is_read_only())
    }

    /// Opens the queue in the PostgreSQL database at `url`
    /// (`postgres://user:password@host:port/database`, in the schema its
    /// `search_path` names), creating its tables if they are missing and
    /// migrating older ones; a newer schema is refused untouched. Several
    /// processes on several machines may share it.
    #[cfg(feature = "postgres")]
    pub fn open_postgres(url: &str) -> Result<Queue> {
        Queue::open_postgres_with(url, QueueOptions::default())
    }

    /// [`Queue::open_postgres`] with `opts`: `synchronous` is the server's
    /// `synchronous_commit` (`Full`: on, each commit waits for its WAL
    /// flush; `Normal`: off), `busy_timeout` its `lock_timeout`, and the
    /// pool holds four connections per `pool_size`.
    #[cfg(feature = "postgres")]
    pub fn open_postgres_with(url: &str, opts: QueueOptions) -> Result<Queue> {
        let store = Arc::new(crate::postgres::PgStore::open(url, &opts)?);
        let location = PathBuf::from(&store.location);
        Ok(Queue::with_backend(
            store.clone(),
            None,
            Some(store),
            location,
            opts,
        ))
    }

    /// Opens the queue in the PostgreSQL database at `url` for reading
    /// only, with the default options: for a dashboard or a report beside
    /// the processes that work on it. Every connection's session is
    /// `default_transaction_read_only = on`, so the server refuses any
    /// write; it never creates or migrates the tables (a database without
    /// litejob's tables, or with an older or newer version of them, is
    /// refused); it starts no thread (no `LISTEN/NOTIFY`). Every write
    /// through it (an enqueue, a repair, a runtime, `pg_write`) fails with
    /// [`Error::ReadOnly`] before anything is sent.
    #[cfg(feature = "postgres")]
    pub fn open_postgres_read_only(url: &str) -> Result<Queue> {
        Queue::open_postgres_read_only_with(url, QueueOptions::default())
    }

    /// [`Queue::open_postgres_read_only`] with `opts` (the busy timeout,
    /// which bounds the wait for a connection, and the pool's size apply;
    /// the write settings do not).
    #[cfg(feature = "postgres")]
    pub fn open_postgres_read_only_with(url: &str, opts: QueueOptions) -> Result<Queue> {
        let store = Arc::new(crate::postgres::PgStore::open_read_only(url, &opts)?);
        let location = PathBuf::from(&store.location);
        Ok(Queue::with_backend(
            store.clone(),
            None,
            Some(store),
            location,
            opts,
        ))
    }

    /// Opens `location` for reading only: a PostgreSQL URL with
    /// [`Queue::open_postgres_read_only_with`], anything else as a file with
    /// [`Queue::open_read_only_with`].
    #[cfg_attr(not(feature = "postgres"), doc = "")]
    #[cfg_attr(
        not(feature = "postgres"),
        doc = "[`Queue::open_postgres_read_only_with`]: crate#features"
    )]
    pub fn open_location_read_only(location: &str, opts: QueueOptions) -> Result<Queue> {
        if is_postgres_url(location) {
            #[cfg(feature = "postgres")]
            return Queue::open_postgres_read_only_with(location, opts);
            #[cfg(not(feature = "postgres"))]
            return Err(Error::Unsupported(
                "this build of litejob has no PostgreSQL backend (the `postgres` feature)".into(),
            ));
        }
        Queue::open_read_only_with(location, opts)
    }

    /// Opens `location`: a PostgreSQL URL (`postgres://` or
    /// `postgresql://`) with [`Queue::open_postgres_with`], anything else as
    /// a file with [`Queue::open_with`].
    #[cfg_attr(not(feature = "postgres"), doc = "")]
    #[cfg_attr(
        not(feature = "postgres"),
        doc = "[`Queue::open_postgres_with`]: crate#features"
    )]
    pub fn open_location(location: &str, opts: QueueOptions) -> Result<Queue> {
        if is_postgres_url(location) {
            #[cfg(feature = "postgres")]
            return Queue::open_postgres_with(location, opts);
            #[cfg(not(feature = "postgres"))]
            return Err(Error::Unsupported(
                "this build of litejob has no PostgreSQL backend (the `postgres` feature)".into(),
            ));
        }
        Queue::open_with(location, opts)
    }

    pub(crate) fn with_backend(
        backend: Arc<dyn Backend>,
        sqlite: Option<Arc<SqliteStore>>,
        #[cfg(feature = "postgres")] pg: Option<Arc<crate::postgres::PgStore>>,
        location: PathBuf,
        opts: QueueOptions,
    ) -> Queue {
        let rules = Arc::new(opts.rules());
        Queue {
            inner: Arc::new(Inner {
                backend,
                sqlite,
                #[cfg(feature = "postgres")]
                pg,
                location,
                opts,
                rules,
                job_wake: Arc::default(),
                outbox_wake: Wakers::default(),
            }),
        }
    }

    /// The backend boundary.
    pub(crate) fn backend(&self) -> &dyn Backend {
        self.inner.backend.as_ref()
    }

    /// The SQLite store, or the error that names what a PostgreSQL queue
    /// offers instead of `what`.
    pub(crate) fn sqlite(&self, what: &str) -> Result<&SqliteStore> {
        self.inner.sqlite.as_deref().ok_or_else(|| {
            Error::Unsupported(format!(
                "{what} hands out a SQLite connection; this queue is on PostgreSQL \
                 (see Queue::pg_write and Queue::pg_enqueue_in)"
            ))
        })
    }

    /// The PostgreSQL store, when the queue is in a database.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(&self) -> Option<&Arc<crate::postgres::PgStore>> {
        self.inner.pg.as_ref()
    }

    /// Which engine holds the queue.
    pub fn backend_kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// Where the queue lives: the file's path, or the PostgreSQL URL
    /// without its password.
    pub fn location(&self) -> String {
        self.inner.location.display().to_string()
    }

    /// The file's path (for a PostgreSQL queue: its URL without the
    /// password, as a path).
    pub fn path(&self) -> &Path {
        &self.inner.location
    }

    /// The options it was opened with.
    pub fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    /// The schema version the database holds (`PRAGMA user_version` in a
    /// file).
    pub fn schema_version(&self) -> Result<i64> {
        self.backend().schema_version()
    }

    /// Enqueues one job. Returns once its commit is durable (with
    /// `synchronous=FULL`): `New(id)`, or `Duplicate(id)` when the key was
    /// seen before (its `deliveries` count grows, nothing else changes).
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let now = self.backend().now();
        let valid = enqueue::validate_owned(job, &self.inner.rules, now)?;
        let r = self.backend().enqueue(valid, now)?;
        if !r.is_duplicate() {
            self.notify();
        }
        Ok(r)
    }

    /// Enqueues many jobs in one transaction: all are written or none. Any
    /// invalid job refuses the whole batch before anything is written.
    pub fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let now = self.backend().now();
        let valid = self.validate_batch(jobs, now)?;
        let r = self.backend().enqueue_many(valid, now)?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notify();
        }
        Ok(r)
    }

    /// Checks every job of a batch before any is written: one bad job
    /// refuses the batch, and the message names it.
    fn validate_batch(&self, jobs: Vec<NewJob>, now: Millis) -> Result<Vec<ValidJob>> {
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
        Ok(jobs
            .into_iter()
            .zip(checked)
            .map(|(j, (run_at, max_attempts))| enqueue::into_valid(j, run_at, max_attempts))
            .collect())
    }

    /// Enqueues inside a transaction the application opened itself on its own
    /// connection to the same file (see [`Queue::connect`]). The job exists if
    /// and only if that transaction commits. Call [`Queue::notify`] after the
    /// commit to wake workers at once; otherwise they see it at their next poll.
    pub fn enqueue_in(&self, conn: &Connection, job: &NewJob) -> Result<Enqueued> {
        self.sqlite("enqueue_in")?.writer()?;
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
        let store = self.sqlite("Queue::write")?;
        let rules = self.inner.rules.clone();
        let now = now_ms();
        let (r, enqueued) = store
            .writer()?
            .run(move |conn| in_write_tx(conn, &rules, now, f))?;
        if enqueued {
            self.notify();
        }
        Ok(r)
    }

    /// [`Queue::write`] for a queue on PostgreSQL: runs `f` in a transaction
    /// on a pooled connection; what it writes and enqueues through
    /// [`crate::PgWriteTx::enqueue`] commits together, or not at all when
    /// `f` returns an error.
    #[cfg(feature = "postgres")]
    pub fn pg_write<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut crate::PgWriteTx<'_, '_>) -> Result<R>,
    {
        let store = self.postgres().ok_or_else(|| {
            Error::Unsupported(
                "Queue::pg_write hands out a PostgreSQL transaction; this queue is a SQLite file: \
                 use Queue::write"
                    .into(),
            )
        })?;
        store.writable()?;
        let now = self.backend().now();
        let (r, enqueued) = store.handle().write(&self.inner.rules, now, f)?;
        if enqueued {
            self.notify();
        }
        Ok(r)
    }

    /// [`Queue::read`] for a queue on PostgreSQL: runs `f` on a pooled
    /// connection, for the application's own reads of the queue's tables
    /// (`SELECT … FROM jobs`) or of its own.
    #[cfg(feature = "postgres")]
    pub fn pg_read<R>(&self, f: impl FnOnce(&mut postgres::Client) -> Result<R>) -> Result<R> {
        let store = self.postgres().ok_or_else(|| {
            Error::Unsupported(
                "Queue::pg_read hands out a PostgreSQL connection; this queue is a SQLite file: \
                 use Queue::read"
                    .into(),
            )
        })?;
        let mut conn = store
            .pool
            .get()
            .map_err(|e| crate::postgres::conn::pool_err(e, store.pool.connection_timeout()))?;
        f(&mut conn.client)
    }

    /// [`Queue::enqueue_in`] for a queue on PostgreSQL: enqueues inside a
    /// transaction the application opened itself (with the `postgres`
    /// crate) on the same database. The job exists if and only if that
    /// transaction commits; call [`Queue::notify`] after the commit to wake
    /// this process's workers at once (other processes poll, or hear the
    /// next notification).
    #[cfg(feature = "postgres")]
    pub fn pg_enqueue_in(
        &self,
        client: &mut impl postgres::GenericClient,
        job: &NewJob,
    ) -> Result<Enqueued> {
        let Some(store) = self.postgres() else {
            return Err(Error::Unsupported(
                "Queue::pg_enqueue_in takes a PostgreSQL transaction; this queue is a SQLite \
                 file: use Queue::enqueue_in"
                    .into(),
            ));
        };
        // The application's own transaction is not read-only: only this
        // check keeps a read-only queue from writing through it.
        store.writable()?;
        let now = self.backend().now();
        let valid = enqueue::validate(job, &self.inner.rules, now)?;
        let st = client
            .prepare(crate::postgres::enqueue::INSERT_ONE)
            .map_err(crate::postgres::conn::read_err)?;
        crate::postgres::enqueue::insert(client, &st, &valid, now)
    }

    /// Test hook: sets `PRAGMA max_page_count` on the writer connection (the
    /// only one that writes), so tests can simulate a full disk and then
    /// give the space back. Returns the limit SQLite applied (never below
    /// the file's current size). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_max_page_count(&self, pages: u64) -> Result<u64> {
        self.writer().run(move |c| {
            Ok(
                c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get::<_, i64>(0)
                })? as u64,
            )
        })
    }

    /// The SQLite writer. Only the SQLite engine's code calls it, and only
    /// on a queue it was started for (a file).
    pub(crate) fn writer(&self) -> &Writer {
        self.inner
            .sqlite
            .as_ref()
            .and_then(|s| s.writer().ok())
            .expect("the SQLite engine runs only on a file opened for writing")
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
        let store = self.sqlite("Queue::connect")?;
        store.writer()?;
        db::connect(&store.path, &store.conn_cfg)
    }

    /// Runs `f` on a pooled reader connection. It is read-only (`PRAGMA
    /// query_only`): a write fails with an error and changes nothing; write
    /// through [`Queue::write`].
    pub fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        self.sqlite("Queue::read")?.read(f)
    }

    /// One job by id.
    pub fn job(&self, id: i64) -> Result<Option<Job>> {
        self.backend().job(id)
    }

    /// One job by idempotency key.
    pub fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.backend().job_by_key(key)
    }

    /// Jobs matching `filter`, newest first.
    pub fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.backend().jobs(filter)
    }

    /// Every run of a job, oldest first.
    pub fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.backend().attempts(job_id)
    }

    /// Every attempt of an outbox row, oldest first.
    pub fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.backend().outbox_attempts(outbox_id)
    }

    /// The outbox rows a job wrote.
    pub fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.backend().outbox_for_job(job_id)
    }

    /// Outbox rows, newest first.
    pub fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.backend().outbox(state, limit)
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
        self.backend().outbox_page(state, before, after, limit)
    }

    /// Starts building a runtime (workers and effect dispatchers) on this queue.
    pub fn runtime(&self) -> RuntimeBuilder {
        RuntimeBuilder::new(self.clone())
    }
}
