//! litejob: a job queue in one SQLite file, where "safe to run twice" is the
//! default.
//!
//! - **Dedup at the door**: every job carries its producer's idempotency key;
//!   a second enqueue with the same key creates nothing and says
//!   `Duplicate(id)`.
//! - **Dedup at execution**: a run is one transaction that inserts the key
//!   into the `processed_jobs` ledger first, then runs the handler's SQL,
//!   then completes the job. What a handler does in that transaction happens
//!   exactly once per key.
//! - **Record the fact, then do the thing**: side effects go to the `outbox`
//!   in the same transaction and are performed after commit by effect
//!   handlers, at least once, with their own retries.
//! - **Capped retries** (`max_retries` defaults to 1) and an **attempt history**
//!   in the same file.
//!
//! # Example
//!
//! ```
//! use litejob::{NewJob, Outcome, Queue};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Payment { event_id: String, cents: i64 }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("app.db");
//! let queue = Queue::open(&path)?;
//! queue.write(|tx| {
//!     tx.execute_batch("CREATE TABLE IF NOT EXISTS invoices (event_id TEXT UNIQUE, cents INTEGER)")?;
//!     Ok(())
//! })?;
//!
//! // Producer: the provider's event id is the idempotency key.
//! let pay = Payment { event_id: "evt_1".into(), cents: 4200 };
//! let first = queue.enqueue(NewJob::new("payment.succeeded", "evt_1", &pay))?;
//! let again = queue.enqueue(NewJob::new("payment.succeeded", "evt_1", &pay))?;
//! assert!(again.is_duplicate() && again.id() == first.id());
//!
//! // Consumer: the handler's SQL and its outbox row commit with the ledger row.
//! let mut runtime = queue
//!     .runtime()
//!     .handler("payment.succeeded", |tx, p: Payment| {
//!         tx.execute("INSERT INTO invoices (event_id, cents) VALUES (?1, ?2)",
//!                    (&p.event_id, p.cents))?;
//!         tx.outbox("send_receipt", &format!("receipt:{}", p.event_id), &p.event_id)?;
//!         Ok(Outcome::Done)
//!     })
//!     .effect("send_receipt", |effect, event_id: String| {
//!         // Runs after commit, outside any transaction; pass effect.key to a
//!         // provider that deduplicates.
//!         println!("mail receipt for {event_id} (idempotency key {})", effect.key);
//!         Ok(())
//!     })
//!     .start()?;
//! # let t0 = std::time::Instant::now();
//! # while queue.job(first.id())?.unwrap().state != litejob::JobState::Succeeded
//! #     || queue.outbox(Some(litejob::OutboxState::Sent), 10)?.is_empty() {
//! #     assert!(t0.elapsed().as_secs() < 30);
//! #     std::thread::sleep(std::time::Duration::from_millis(10));
//! # }
//! runtime.stop();
//! # Ok(())
//! # }
//! ```
//!
//! # Slow work outside the write lock
//!
//! Only one transaction writes at a time. A handler whose work is slow but
//! not SQL does it in a `prepare` step that runs on the worker thread, in
//! parallel, before the write lock is taken; the `apply` step gets its result
//! inside the transaction and should be short:
//!
//! ```
//! # use litejob::{Outcome, Queue};
//! # let dir = tempfile::tempdir().unwrap();
//! # let queue = Queue::open(dir.path().join("q.db")).unwrap();
//! let runtime = queue.runtime().handler_with_prepare(
//!     "thumbnail",
//!     |_job, path: String| {
//!         // Outside any transaction: read and compute.
//!         Ok((path.clone(), path.len() as i64 * 7))
//!     },
//!     |tx, (path, size): (String, i64)| {
//!         // Inside the job's transaction: record the result.
//!         tx.execute("CREATE TABLE IF NOT EXISTS thumbs (path TEXT PRIMARY KEY, size INT)", [])?;
//!         tx.execute("INSERT INTO thumbs VALUES (?1, ?2)", (path, size))?;
//!         Ok(Outcome::Done)
//!     },
//! );
//! # drop(runtime);
//! ```
//!
//! # On PostgreSQL
//!
//! The same queue across machines: [`Queue::open_postgres`] (or
//! [`Queue::open_location`], which takes a path or a URL) creates or
//! migrates its tables in the database. Everything above works the same,
//! except the handler's SQL, which gets the job's PostgreSQL transaction
//! ([`PgJobTx`], which derefs to [`pg::Transaction`]):
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use litejob::{NewJob, Outcome, Queue};
//!
//! let queue = Queue::open_postgres("postgres://app:secret@db.internal:5432/app")?;
//! queue.enqueue(NewJob::new("payment.succeeded", "evt_1", &4200_i64))?;
//! let mut runtime = queue
//!     .runtime()
//!     .pg_handler("payment.succeeded", |tx, cents: i64| {
//!         tx.execute("INSERT INTO invoices (cents) VALUES ($1)", &[&cents])?;
//!         tx.outbox("send_receipt", &format!("receipt:{}", tx.job().key), &cents)?;
//!         Ok(Outcome::Done)
//!     })
//!     .start()?;
//! runtime.stop();
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "postgres"))]
//! # fn main() {}
//! ```
//!
//! [`Queue::pg_write`] and [`Queue::pg_enqueue_in`] are the forms of
//! [`Queue::write`] and [`Queue::enqueue_in`] for the application's own
//! PostgreSQL transactions.
//!
//! # Layout
//!
//! One file per concept; ARCHITECTURE.md has the codemap and invariants.
//! [`Queue`] opens the queue and enqueues; [`Queue::runtime`] builds the
//! worker threads; a handler returns an [`Outcome`]; library failures are
//! [`Error`]s. Behind them, `src/backend/` is the boundary between the
//! queue's operations and its storage: the SQLite file (`src/writer/`, the
//! one writer thread and its group commit) and PostgreSQL
//! (`src/postgres/`).
//!
//! # Features
//!
//! - `cli` (default): the `litejob` command and its dependencies (clap,
//!   env_logger, ctrlc, tiny_http); it turns on `postgres`. An application
//!   that embeds the library sets `default-features = false` and gets none
//!   of them.
//! - `postgres`: the PostgreSQL backend (the `postgres` and `r2d2_postgres`
//!   crates).
//! - `fault-injection`: named crash points (`LITEJOB_FAULT`) for crash tests.
//!   Off, the library never aborts the process and never writes to stderr.
// Without the `postgres` feature the PostgreSQL items named above do not
// exist: their links lead to the feature instead of nowhere.
#![cfg_attr(not(feature = "postgres"), doc = "")]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`Queue::open_postgres`]: crate#features"
)]
#![cfg_attr(not(feature = "postgres"), doc = "[`PgJobTx`]: crate#features")]
#![cfg_attr(not(feature = "postgres"), doc = "[`pg::Transaction`]: crate#features")]
#![cfg_attr(not(feature = "postgres"), doc = "[`Queue::pg_write`]: crate#features")]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`Queue::pg_enqueue_in`]: crate#features"
)]

mod admin;
mod backend;
mod checkpoint;
mod claim;
mod controls;
#[cfg(feature = "postgres")]
mod copy;
mod db;
mod enqueue;
mod error;
mod execute;
mod failures;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
mod fault;
mod handler;
mod history;
mod inspect;
mod job;
mod ledger;
mod metrics;
mod outbox;
mod overview;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod reply;
mod retry;
mod runtime;
mod schedule;
mod schema;
mod tally;
mod time;
mod writer;

#[cfg(test)]
mod sql_check;

/// The PostgreSQL client litejob uses, for the types its handlers and
/// transactions hand out (`Transaction`, `types::ToSql`).
#[cfg(feature = "postgres")]
pub use ::postgres as pg;
pub use admin::{PruneOptions, PruneReport};
pub use backend::BackendKind;
pub use controls::{QueueControl, QueueLimits, Rate};
#[cfg(feature = "postgres")]
pub use copy::CopyReport;
pub use db::{immediate, Synchronous};
pub use error::{Action, Error, Result, RowId};
pub use failures::{FailureGroup, Failures};
pub use handler::{EffectContext, HandlerError, JobContext, JobTx, Outcome};
pub use history::{Attempt, AttemptOutcome, MAX_ERROR_BYTES};
pub use inspect::{
    Explanation, JobCounts, JobDetail, LedgerEntry, OutboxCounts, OutboxEntry, Stats,
};
pub use job::{Enqueued, Job, JobFilter, JobState, NewJob};
pub use outbox::{OutboxRow, OutboxState};
pub use overview::{Activity, Overview, QueueOverview, ACTIVITY_MINUTES};
#[cfg(feature = "postgres")]
pub use postgres::tx::{PgJobTx, PgWriteTx};
pub use queue::{is_postgres_url, Queue, QueueOptions, WriteTx};
pub use reply::WriteFuture;
pub use retry::Backoff;
pub use runtime::{Runtime, RuntimeBuilder, StopReport};
/// The SQLite crate litejob uses, at litejob's version: the connection its
/// transactions hand out, and the macros and traits for the application's
/// own SQL, with no second copy of the crate to keep in step.
///
/// ```
/// use litejob::rusqlite::{params, OptionalExtension};
/// # let dir = tempfile::tempdir().unwrap();
/// let queue = litejob::Queue::open(dir.path().join("app.db"))?;
/// queue.write(|tx| {
///     tx.execute_batch("CREATE TABLE notes (k TEXT PRIMARY KEY, n INTEGER)")?;
///     tx.execute("INSERT INTO notes VALUES (?1, ?2)", params!["a", 1])?;
///     Ok(())
/// })?;
/// let n: Option<i64> = queue.read(|c| {
///     Ok(c.query_row("SELECT n FROM notes WHERE k = ?1", params!["b"], |r| r.get(0))
///         .optional()?)
/// })?;
/// assert_eq!(n, None);
/// # Ok::<(), litejob::Error>(())
/// ```
pub use rusqlite;
pub use schedule::{CatchUp, Schedule, ScheduleRow};
pub use schema::SCHEMA_VERSION;

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
