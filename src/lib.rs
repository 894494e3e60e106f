//! litejob: a job queue in one SQLite file (or a PostgreSQL database), where
//! "safe to run twice" is the default.
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
//! The same queue across machines: `Queue<Postgres>` opens with a URL and
//! creates or migrates its tables in the database. Everything above works
//! the same; the handler's SQL gets the job's PostgreSQL transaction
//! (`litejob::postgres::PgJobTx`, which derefs to a `postgres::Transaction`), and a
//! handler written for the other engine does not compile:
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use litejob::postgres::Postgres;
//! use litejob::{NewJob, Outcome, Queue, QueueOptions};
//!
//! let url = "postgres://app:secret@db.internal:5432/app";
//! let queue = Queue::<Postgres>::open_with(url, QueueOptions::default())?;
//! queue.enqueue(NewJob::new("payment.succeeded", "evt_1", &4200_i64))?;
//! let mut runtime = queue
//!     .runtime()
//!     .handler("payment.succeeded", |tx, cents: i64| {
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
//! [`Queue::write`] and [`Queue::enqueue_in`] take the engine's own
//! transactions: a `rusqlite` connection on a file, a `postgres` one on
//! PostgreSQL. A tool that is pointed at either at run time (as the
//! `litejob` command is) opens an [`admin::AnyQueue`].
//!
//! # Layout
//!
//! ARCHITECTURE.md has the codemap and the invariants. [`Queue`] opens the
//! queue and enqueues; [`Queue::runtime`] builds the worker threads; a
//! handler returns an [`Outcome`]; library failures are [`Error`]s; the
//! operator's reads and repairs are [`Queue::admin`]'s. Inside, a core of
//! engine-free types and decisions, the driver boundary, and one folder
//! per engine (`sqlite`, `postgres`), each with its own job pipeline.
//!
//! # Features
//!
//! - `cli` (default): the `litejob` command and its dependencies (clap,
//!   env_logger, ctrlc, tiny_http); it turns on `postgres`. An application
//!   that embeds the library sets `default-features = false` and gets none
//!   of them.
//! - `postgres`: the PostgreSQL engine (the `postgres` and `r2d2_postgres`
//!   crates).
//! - `fault-injection`: named crash points (`LITEJOB_FAULT`) for crash tests.
//!   Off, the library never aborts the process and never writes to stderr.
mod core;
mod driver;
pub mod error;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
mod fault;
#[cfg(feature = "postgres")]
pub mod postgres;
mod queue;
mod runtime;
pub mod sqlite;
pub mod testing;

#[cfg(test)]
mod sql_check;

/// The PostgreSQL client litejob uses, for the types its handlers and
/// transactions hand out (`Transaction`, `types::ToSql`).
#[cfg(feature = "postgres")]
pub use ::postgres as pg;
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
pub use ::rusqlite;

pub use core::attempt::{Attempt, AttemptOutcome};
pub use core::backoff::Backoff;
pub use core::handler::{EffectContext, HandlerError, JobContext, Outcome, Output};
pub use core::job::{Enqueued, Job, JobFilter, JobState, NewJob};
pub use core::options::{QueueOptions, Synchronous};
pub use core::outbox::{OutboxRow, OutboxState};
pub use core::schedule::{CatchUp, Schedule};
pub use core::steps::JobStep;
pub use driver::reply::WriteFuture;
pub use driver::Engine;
pub use error::{Error, Result};
pub use queue::Queue;
pub use runtime::{Drained, Runtime, RuntimeBuilder, StopReport};

/// What an operator reads and repairs: the [`Admin`](admin::Admin) handle
/// ([`Queue::admin`]) and the reports it returns (counts, one job's story,
/// everything about a key, the overview, failure groups), queue controls,
/// pruning, and a queue whose engine is chosen at run time
/// ([`AnyQueue`](admin::AnyQueue)), as the `litejob` command and its
/// dashboard use them.
pub mod admin {
    pub use crate::core::attempt::MAX_ERROR_BYTES;
    pub use crate::core::controls::{
        PartitionAtLimit, QueueControl, QueueLimits, Rate, PARTITIONS_LISTED,
    };
    pub use crate::core::copy::CopyReport;
    pub use crate::core::options::EngineKind;
    pub use crate::core::reports::backup::{BackupOptions, BackupProgress, BackupReport};
    pub use crate::core::reports::failures::{FailureGroup, Failures};
    pub use crate::core::reports::overview::{Activity, Overview, QueueOverview, ACTIVITY_MINUTES};
    pub use crate::core::reports::prune::{PruneOptions, PruneReport};
    pub use crate::core::reports::stats::{
        Explanation, JobCounts, JobDetail, LedgerEntry, OutboxCounts, OutboxEntry, Stats,
    };
    pub use crate::core::reports::verify::{Broken, Invariant, VerifyReport};
    pub use crate::core::reports::workflow::{Linked, Workflow};
    pub use crate::core::schedule::ScheduleRow;
    pub use crate::core::time::{format_duration, format_millis};
    pub use crate::core::SCHEMA_VERSION;
    pub use crate::queue::admin::WORKFLOW_LIMIT;
    pub use crate::queue::any::is_postgres_url;
    pub use crate::queue::{Admin, AnyQueue};
}

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
