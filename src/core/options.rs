//! How a queue opens: [`QueueOptions`] (durability, timeouts, limits,
//! retries, pool), the same for both engines. Writes no table.

use std::collections::HashMap;
use std::time::Duration;

use crate::core::job::NewJob;
use crate::core::time::{Clock, ManualClock};
use crate::core::validate::{self, EnqueueRules};
use crate::error::{Error, Result};

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
    /// Open for reading only (default false): for a dashboard or a report
    /// beside the processes that work on the queue. Nothing is created,
    /// migrated or written (a file's connections are opened
    /// `SQLITE_OPEN_READONLY` and no writer thread starts; a PostgreSQL
    /// session is `default_transaction_read_only` and starts no thread); a
    /// queue that does not exist, or whose schema is older or newer than
    /// this library's, is refused; every write fails with
    /// [`crate::error::Error::ReadOnly`] before anything is sent.
    pub read_only: bool,
    /// PostgreSQL: a URL that reaches the server directly, for the
    /// `LISTEN` connection that wakes idle workers when the queue's URL
    /// goes through a transaction pooler (which cannot carry
    /// notifications). None (the default): behind such a pooler workers
    /// poll every `poll_interval`; on a direct URL they listen on it.
    pub listen_url: Option<String>,
    /// The clock every stored time is read from (the system's unless a test
    /// sets one: [`QueueOptions::with_clock`]).
    pub(crate) clock: Clock,
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
            read_only: false,
            listen_url: None,
            clock: Clock::System,
        }
    }
}

impl QueueOptions {
    /// PostgreSQL behind a transaction pooler: listens for wake-ups on
    /// `url`, a direct connection to the same database that bypasses the
    /// pooler (see [`QueueOptions::listen_url`]).
    pub fn with_listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

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

    /// Reads every time the queue stores from `clock`, which the test that
    /// owns it moves: run times, backoff, leases, schedules' slots, rate
    /// windows, `created_at`, `finished_at` (on PostgreSQL too, in place of
    /// the server's clock). A job due in ten minutes runs once the test has
    /// advanced the clock by ten minutes; see [`crate::testing`].
    pub fn with_clock(mut self, clock: ManualClock) -> Self {
        self.clock = clock.clock();
        self
    }

    /// Opens the queue for reading only (see [`QueueOptions::read_only`]).
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Checks `job` against these options exactly as an enqueue would
    /// (names, JSON, payload size, retries), without opening any file: a
    /// caller can refuse bad input before it creates a queue file.
    pub fn check(&self, job: &NewJob) -> Result<()> {
        validate::validate_parts(job, &self.rules(), self.clock.now()).map(|_| ())
    }

    pub(crate) fn rules(&self) -> EnqueueRules {
        EnqueueRules {
            max_payload_bytes: self.max_payload_bytes,
            default_max_retries: self.default_max_retries,
            kind_max_retries: self.kind_max_retries.clone(),
        }
    }
}

/// How hard a commit pushes data to the disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit that answers a caller (an enqueue, a completion, an
    /// acknowledgement) is fsynced before the caller is answered: a returned
    /// enqueue survives power loss. The default. (The writer does the fsync
    /// of the WAL itself, off its thread; the file's other connections read
    /// back `synchronous=2`.)
    #[default]
    Full,
    /// Commits are fsynced only at checkpoints: a process crash loses nothing,
    /// but a power loss may lose the last commits. Faster.
    Normal,
}

impl Synchronous {
    /// The pragma value, as SQLite spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }

    /// The number SQLite reads back from `PRAGMA synchronous`.
    pub fn pragma_value(self) -> i64 {
        match self {
            Synchronous::Full => 2,
            Synchronous::Normal => 1,
        }
    }
}

impl std::str::FromStr for Synchronous {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            _ => Err(Error::invalid(format!(
                "synchronous must be 'full' or 'normal', not {s:?}"
            ))),
        }
    }
}

/// Which engine holds a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// One SQLite file.
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

impl EngineKind {
    /// `"sqlite"` or `"postgres"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Sqlite => "sqlite",
            EngineKind::Postgres => "postgres",
        }
    }
}
