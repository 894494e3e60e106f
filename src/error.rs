//! The library's error type: what can go wrong in litejob itself (as opposed
//! to what a handler says about its job, which is [`crate::core::handler::Outcome`]).

use std::fmt;

/// Everything litejob can fail with. Each variant says what happened and,
/// where a user can act, what to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Input refused before anything was written (empty kind or key, invalid
    /// JSON, oversized payload, bad option).
    InvalidInput(String),
    /// The file's schema is newer than this binary understands; the file was
    /// not touched.
    SchemaTooNew {
        /// `PRAGMA user_version` found in the file.
        found: i64,
        /// The newest version this binary knows.
        supported: i64,
    },
    /// The file is not a litejob database (or not a SQLite database at all).
    NotADatabase(String),
    /// Another connection held the write lock longer than the busy timeout.
    Busy(String),
    /// The disk (or `max_page_count`) is full; the transaction was rolled back
    /// and nothing was written.
    StorageFull(String),
    /// The commit failed with an I/O error, or the connection to the
    /// database server broke during the write: the write may or may not
    /// have been committed. Retrying with the same idempotency key is
    /// always safe.
    OutcomeUnknown(String),
    /// No such row.
    NotFound(RowId),
    /// An operator action named a row whose state it does not apply to
    /// (retrying a job that is not dead, cancelling one that is not queued);
    /// nothing changed.
    WrongState {
        /// What was asked, of which row.
        action: Action,
        /// The state the row is in (the word stored in its `state` column).
        state: String,
    },
    /// The run lost its lease (it took too long or another worker took the
    /// job over); its transaction was rolled back.
    LeaseLost {
        /// The job whose run lost its lease.
        job_id: i64,
        /// What was refused.
        detail: String,
    },
    /// The write was rolled back through no fault of its own (another
    /// operation in the same group commit was interrupted); retry it.
    Aborted(String),
    /// A run's transaction ran past its time budget and was interrupted (or
    /// its handler panicked after SQLite had rolled it back); the attempt
    /// counts as failed.
    Interrupted(String),
    /// Any other SQLite error.
    Sqlite(rusqlite::Error),
    /// The connection pool could not hand out a connection.
    Pool(String),
    /// Reading or writing a file other than the database failed.
    Io(std::io::Error),
    /// The database file could not be opened (missing directory, read-only
    /// file or directory, permissions); the message names the path.
    Open(String),
    /// A write was asked of a queue opened read-only
    /// ([`QueueOptions::with_read_only`](crate::QueueOptions::with_read_only)); nothing was written.
    ReadOnly(String),
    /// An internal failure (a thread died, a channel closed unexpectedly).
    Internal(String),
    /// The database server could not be reached, or the connection to it
    /// broke before the call's write was sent; nothing was written. Retry
    /// later.
    Connection(String),
    /// The destination of a copy already holds queue rows (a copy goes
    /// only into an empty database, so it never mixes two queues' ids);
    /// nothing was written.
    NotEmpty(String),
    /// Any other error from the PostgreSQL server or its client.
    #[cfg(feature = "postgres")]
    Postgres(postgres::Error),
    /// A write failed half-way and its transaction could not be rolled
    /// back: the writer must end the whole transaction. Never returned to
    /// a caller, who is answered [`Error::Aborted`].
    #[doc(hidden)]
    HalfWritten(String),
    /// The call does not apply to this queue's backend (a SQLite connection
    /// asked of a PostgreSQL queue, or the reverse); nothing was done.
    Unsupported(String),
}

/// The row an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowId {
    /// A job, by id.
    Job(i64),
    /// An outbox row, by id.
    OutboxRow(i64),
}

/// An operator action that a row's state can refuse, with the row's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Requeue a dead job ([`Admin::retry_job`](crate::admin::Admin::retry_job)).
    RetryJob(i64),
    /// Cancel a job that has not finished ([`Admin::cancel_job`](crate::admin::Admin::cancel_job)).
    CancelJob(i64),
    /// Requeue a dead outbox row ([`Admin::retry_outbox`](crate::admin::Admin::retry_outbox)).
    RetryOutbox(i64),
}

/// Shorthand for `Result<T, litejob::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The SQLSTATE code the PostgreSQL server answered with (`"23505"`
    /// for a unique violation, `"40001"` for a serialization failure), when
    /// this error is the server's answer (`Error::Postgres`); `None`
    /// otherwise, and always on a file.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "postgres")]
            Error::Postgres(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// True when the database was locked by another connection for longer
    /// than the busy timeout.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy(_))
    }

    /// True when the disk or the database's page limit is full.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, Error::StorageFull(_))
    }

    /// True when the outcome of a write is unknown (I/O error at commit).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Error::OutcomeUnknown(_))
    }

    /// True when the input was refused (invalid, or an operator action the
    /// row's state does not allow); nothing was written.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Error::InvalidInput(_) | Error::WrongState { .. })
    }

    /// True when the row asked about does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    /// True when retrying the same call later may succeed (busy, storage full,
    /// aborted group, unknown outcome, the database server out of reach).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Busy(_)
                | Error::StorageFull(_)
                | Error::Aborted(_)
                | Error::OutcomeUnknown(_)
                | Error::Connection(_)
        )
    }

    /// The SQLite extended error code, if this is a SQLite error.
    pub fn sqlite_error_code(&self) -> Option<rusqlite::ErrorCode> {
        match self {
            Error::Sqlite(e) => e.sqlite_error_code(),
            _ => None,
        }
    }

    /// A copy for handing one failure to several waiters (a group commit's
    /// callers all learn the same commit error).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::InvalidInput(m) => Error::InvalidInput(m.clone()),
            Error::SchemaTooNew { found, supported } => Error::SchemaTooNew {
                found: *found,
                supported: *supported,
            },
            Error::NotADatabase(m) => Error::NotADatabase(m.clone()),
            Error::Busy(m) => Error::Busy(m.clone()),
            Error::StorageFull(m) => Error::StorageFull(m.clone()),
            Error::OutcomeUnknown(m) => Error::OutcomeUnknown(m.clone()),
            Error::NotFound(row) => Error::NotFound(*row),
            Error::WrongState { action, state } => Error::WrongState {
                action: *action,
                state: state.clone(),
            },
            Error::LeaseLost { job_id, detail } => Error::LeaseLost {
                job_id: *job_id,
                detail: detail.clone(),
            },
            Error::Aborted(m) => Error::Aborted(m.clone()),
            Error::Interrupted(m) => Error::Interrupted(m.clone()),
            Error::Sqlite(rusqlite::Error::SqliteFailure(code, msg)) => {
                Error::Sqlite(rusqlite::Error::SqliteFailure(*code, msg.clone()))
            }
            Error::Sqlite(e) => Error::Internal(format!("sqlite: {e}")),
            Error::Pool(m) => Error::Pool(m.clone()),
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Open(m) => Error::Open(m.clone()),
            Error::ReadOnly(m) => Error::ReadOnly(m.clone()),
            Error::Internal(m) => Error::Internal(m.clone()),
            Error::Unsupported(m) => Error::Unsupported(m.clone()),
            Error::Connection(m) => Error::Connection(m.clone()),
            Error::NotEmpty(m) => Error::NotEmpty(m.clone()),
            Error::HalfWritten(m) => Error::HalfWritten(m.clone()),
            #[cfg(feature = "postgres")]
            Error::Postgres(e) => Error::Internal(format!("postgres: {e}")),
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidInput(m) => write!(f, "invalid input: {m}"),
            Error::SchemaTooNew { found, supported } => write!(
                f,
                "database schema version {found} is newer than this litejob supports \
                 (version {supported}); upgrade litejob. The file was not changed."
            ),
            Error::NotADatabase(m) => write!(f, "{m}"),
            Error::Busy(m) => write!(f, "{m}"),
            Error::StorageFull(m) => write!(f, "{m}"),
            Error::OutcomeUnknown(m) => write!(
                f,
                "outcome unknown: the commit failed (an I/O error, or the connection to the \
                 database server broke), the write may or may not have been committed; retrying \
                 with the same key is safe: {m}"
            ),
            Error::NotFound(RowId::Job(id)) => write!(f, "not found: no job with id {id}"),
            Error::NotFound(RowId::OutboxRow(id)) => {
                write!(f, "not found: no outbox row with id {id}")
            }
            Error::WrongState { action, state } => match action {
                Action::RetryJob(id) => write!(
                    f,
                    "job {id} is {state}, not dead: only a dead job can be retried"
                ),
                Action::CancelJob(id) => write!(
                    f,
                    "job {id} is {state}: only a job that has not finished (waiting, queued or running) can be cancelled"
                ),
                Action::RetryOutbox(id) => write!(
                    f,
                    "outbox row {id} is {state}, not dead: only a dead row can be retried"
                ),
            },
            Error::LeaseLost { job_id, detail } => write!(f, "lease lost: job {job_id}: {detail}"),
            Error::Aborted(m) => write!(f, "aborted, retry: {m}"),
            Error::Interrupted(m) => write!(f, "interrupted: {m}"),
            Error::Sqlite(e) => write!(f, "sqlite: {e}"),
            Error::Pool(m) => write!(f, "connection pool: {m}"),
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Open(m) => write!(f, "{m}"),
            Error::ReadOnly(m) => write!(f, "read-only: {m}"),
            Error::Internal(m) => write!(f, "internal error: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Connection(m) => write!(f, "{m}"),
            Error::NotEmpty(m) => write!(f, "{m}"),
            Error::HalfWritten(m) => write!(f, "aborted, retry: {m}"),
            #[cfg(feature = "postgres")]
            Error::Postgres(e) => match e.as_db_error() {
                Some(d) => write!(f, "postgres: {}: {}", d.code().code(), d.message()),
                None => write!(f, "postgres: {e}"),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sqlite(e) => Some(e),
            Error::Io(e) => Some(e),
            #[cfg(feature = "postgres")]
            Error::Postgres(e) => Some(e),
            _ => None,
        }
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::InvalidInput(format!("JSON: {e}"))
    }
}
