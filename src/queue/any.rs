//! A queue whose engine is chosen at run time, from a path or a URL
//! ([`AnyQueue`]): for tools that serve whatever they are pointed at, as
//! the `litejob` command and its dashboard do. Writes `jobs` through the
//! engine's enqueue.

use crate::core::attempt::Attempt;
use crate::core::job::{Enqueued, Job, JobFilter, NewJob};
use crate::core::options::{EngineKind, QueueOptions};
use crate::core::outbox::{OutboxRow, OutboxState};
use crate::driver::reply::WriteFuture;
use crate::error::Result;
use crate::sqlite::Sqlite;

use super::{Admin, Queue, WaitFuture};

/// A queue on either engine, chosen at run time: a PostgreSQL URL
/// (`postgres://` or `postgresql://`) opens `Queue<Postgres>`, anything
/// else a file. Its methods are the engine-free part of [`Queue`]'s; an
/// application that knows its engine uses [`Queue`] itself, whose
/// handlers get the engine's transaction.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyQueue {
    /// A queue in one SQLite file.
    Sqlite(Queue<Sqlite>),
    /// A queue in a PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(Queue<crate::postgres::Postgres>),
}

/// Whether `location` is a PostgreSQL URL rather than a file's path.
pub fn is_postgres_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// Calls the same method on whichever queue it is.
macro_rules! on_either {
    ($self:expr, $q:ident => $body:expr) => {
        match $self {
            AnyQueue::Sqlite($q) => $body,
            #[cfg(feature = "postgres")]
            AnyQueue::Postgres($q) => $body,
        }
    };
}

impl AnyQueue {
    /// Opens the queue at `location` with `opts` (see [`Queue::open_with`]):
    /// on PostgreSQL for a `postgres://` URL, else in a file.
    pub fn open_with(
        location: impl AsRef<std::ffi::OsStr>,
        opts: QueueOptions,
    ) -> Result<AnyQueue> {
        let location = location.as_ref();
        if let Some(url) = location.to_str().filter(|l| is_postgres_url(l)) {
            #[cfg(feature = "postgres")]
            return Ok(AnyQueue::Postgres(Queue::open_with(url, opts)?));
            #[cfg(not(feature = "postgres"))]
            return Err(crate::error::Error::Unsupported(format!(
                "{url}: this build of litejob has no PostgreSQL engine (the `postgres` feature)"
            )));
        }
        Ok(AnyQueue::Sqlite(Queue::open_with(
            std::path::Path::new(location),
            opts,
        )?))
    }
}

/// Writes each method as the one of [`Queue`] it forwards to, on whichever
/// engine the queue is: one line per method, documented by a link to it.
macro_rules! forward {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        impl AnyQueue {
            $(
                #[doc = concat!("[`Queue::", stringify!($name), "`].")]
                pub fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                    on_either!(self, q => q.$name($($arg),*))
                }
            )*
        }
    };
}

forward! {
    fn engine(&self) -> EngineKind;
    fn location(&self) -> &str;
    fn options(&self) -> &QueueOptions;
    fn is_read_only(&self) -> bool;
    fn schema_version(&self) -> Result<i64>;
    fn enqueue(&self, job: NewJob) -> Result<Enqueued>;
    fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>>;
    fn enqueue_async(&self, job: NewJob) -> WriteFuture<Enqueued>;
    fn enqueue_many_async(&self, jobs: Vec<NewJob>) -> WriteFuture<Vec<Enqueued>>;
    fn notify(&self);
    fn job(&self, id: i64) -> Result<Option<Job>>;
    fn job_by_key(&self, key: &str) -> Result<Option<Job>>;
    fn wait(&self, key: &str, timeout: std::time::Duration) -> Result<Option<Job>>;
    fn wait_async(&self, key: &str, timeout: std::time::Duration) -> WaitFuture;
    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>>;
    fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>>;
    fn steps(&self, job_id: i64) -> Result<Vec<crate::JobStep>>;
    fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>>;
    fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>>;
    fn admin(&self) -> Admin;
}

impl From<Queue<Sqlite>> for AnyQueue {
    fn from(q: Queue<Sqlite>) -> AnyQueue {
        AnyQueue::Sqlite(q)
    }
}

#[cfg(feature = "postgres")]
impl From<Queue<crate::postgres::Postgres>> for AnyQueue {
    fn from(q: Queue<crate::postgres::Postgres>) -> AnyQueue {
        AnyQueue::Postgres(q)
    }
}
