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
//! A run may have a timeout (`job_timeout`, `kind_timeout` on the builder,
//! `NewJob::with_timeout`; none by default). Past it the run fails "timed
//! out after …" and is retried by the job's rules; a prepare step that
//! hangs is left behind on a thread of its own and its worker takes the
//! next job. `ctx.is_cancelled()` turns true at the deadline, or when an
//! operator cancels the running job (`litejob cancel ID`), whose work then
//! never commits.
//!
//! # From async code
//!
//! `enqueue_async`, `enqueue_many_async` and `write_async` return futures that
//! the writer thread completes: the executor never waits for a commit, on any
//! runtime (the repository's `examples/axum_webhook.rs`). Dropping the
//! future does not withdraw the write: enqueue again with the same key.
//!
//! ```rust
//! # use litejob::{NewJob, Queue};
//! async fn on_event(queue: &Queue, event_id: &str) -> litejob::Result<i64> {
//!     let job = NewJob::new("payment.received", event_id, &event_id);
//!     Ok(queue.enqueue_async(job).await?.id()) // New or Duplicate: answer 200
//! }
//! ```
//!
//! # Periodic jobs
//!
//! Each slot of a cron expression enqueues an ordinary job keyed
//! `schedule:<name>:<slot in UTC>`: every process may declare it, each slot's
//! job is created once (no leader), a restart fires no slot twice.
//!
//! ```rust
//! use litejob::{CatchUp, Outcome, Queue, Schedule};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), litejob::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let queue = Queue::open(dir.path().join("app.db"))?;
//! let mut runtime = queue
//!     .runtime()
//!     .handler("send_digest", |_tx, _p: serde_json::Value| Ok(Outcome::Done))
//!     .schedule("hourly-digest", "@hourly", "send_digest", &())
//!     .schedule_with(
//!         Schedule::new("digest", "0 6 * * MON-FRI", "send_digest", &"weekday")
//!             .with_tz("Europe/Berlin") // DST: a skipped time fires nothing, a repeated one once
//!             .with_catch_up(CatchUp::Window(Duration::from_secs(24 * 3600))),
//!     )
//!     .start()?; // a bad expression, zone or unhandled kind: Error::InvalidInput
//! runtime.stop();
//! # Ok(())
//! # }
//! ```
//!
//! Cron: 5 fields, 6 with seconds first, `@hourly`, `@daily`…; of the slots
//! missed while nothing ran, a start fires the latest (default), a window's, or
//! none. **Queue controls** (pause, concurrency cap, rate limit), exact across
//! processes: `litejob queue set api --concurrency 4 --rate 100/1m`; and per
//! partition of a queue (`NewJob::with_partition("shop:42")`): `--partition-concurrency 1`
//! is one at a time per key, `--partition-rate 2/1s` two calls a second per shop,
//! the repository's `docs/queue-controls.md`.
//!
//! # Results and workflows
//!
//! A handler may finish with a value (`Outcome::done_with`, in `jobs.output`,
//! same commit); a job may wait for others (`with_depends_on`): `waiting` until
//! all succeeded, `queued` in the commit of the last. A dependency that ends
//! dead or cancelled cancels its dependents, transitively, with the reason. A
//! missing key or a cycle refuses the batch, nothing written. `litejob workflow
//! KEY` and the dashboard draw the graph; `wait_async` is `wait`'s async form.
//!
//! ```rust
//! use std::time::Duration;
//! use litejob::{NewJob, Outcome, Queue};
//!
//! # fn main() -> Result<(), litejob::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let queue = Queue::open(dir.path().join("app.db"))?;
//! queue.enqueue_many(vec![
//!     NewJob::new("count", "report-7:eu", &"eu"),
//!     NewJob::new("count", "report-7:us", &"us"),
//!     NewJob::new("merge", "report-7", &7).with_depends_on(["report-7:eu", "report-7:us"]),
//! ])?; // fan-out and fan-in in one transaction; enqueued again, each is a duplicate
//! let mut runtime = queue
//!     .runtime()
//!     .handler("count", |_tx, region: String| Outcome::done_with(&region.len()))
//!     .handler("merge", |tx, _report: u32| {
//!         let eu: Option<usize> = tx.dependency_output("report-7:eu")?;
//!         let us: Option<usize> = tx.dependency_output("report-7:us")?;
//!         Outcome::done_with(&(eu.unwrap_or(0) + us.unwrap_or(0)))
//!     })
//!     .start()?;
//! let report = queue.wait("report-7", Duration::from_secs(10))?.expect("done in time");
//! assert_eq!(report.output.as_deref(), Some("4"));
//! runtime.stop();
//! # Ok(())
//! # }
//! ```
//!
//! # Testing handlers
//!
//! `litejob::testing` gives a queue in a temporary file on a clock the test
//! moves; `drain()` runs what is due in the test's thread, through the same
//! transactions, ledger and outbox as the runtime, and never sleeps. On
//! PostgreSQL: `QueueOptions::default().with_clock(clock)`.
//!
//! ```rust
//! use litejob::testing::{assert_enqueued, temp_queue};
//! use litejob::{NewJob, Outcome};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), litejob::Error> {
//! let (queue, clock) = temp_queue()?;
//! queue.enqueue(NewJob::new("sync", "sync-7", &7))?;
//! assert_enqueued(&queue, "sync", "sync-7");
//! let busy_then_done = |first: bool| {
//!     queue.runtime().handler("sync", move |_tx, _n: u32| {
//!         Ok(if first { Outcome::RetryAfter(Duration::from_secs(600), "busy".into()) } else { Outcome::Done })
//!     })
//! };
//! assert_eq!(busy_then_done(true).drain()?.retried, 1);
//! assert_eq!(busy_then_done(false).drain()?.succeeded, 0); // not due for 10 minutes
//! clock.advance(Duration::from_secs(600));
//! assert_eq!(busy_then_done(false).drain()?.succeeded, 1);
//! # Ok(())
//! # }
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
//!   crates, and `native-tls` for the URL's `sslmode`: it links the
//!   system's OpenSSL, so building needs its headers, `libssl-dev` on
//!   Debian).
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
pub use core::reports::prune::Retention;
pub use core::schedule::{CatchUp, Schedule};
pub use core::steps::JobStep;
pub use driver::reply::WriteFuture;
pub use driver::Engine;
pub use error::{Error, Result};
pub use queue::{Queue, WaitFuture};
pub use runtime::{Drained, Runtime, RuntimeBuilder, StopReport};

/// What an operator reads and repairs: the [`Admin`](admin::Admin) handle
/// ([`Queue::admin`]) and the reports it returns (counts, one job's story,
/// everything about a key, the overview, failure groups), queue controls,
/// pruning, and a queue whose engine is chosen at run time
/// ([`AnyQueue`](admin::AnyQueue)), as the `litejob` command and its
/// dashboard use them.
pub mod admin {
    pub use crate::core::controls::{
        PartitionAtLimit, QueueControl, QueueLimits, Rate, PARTITIONS_LISTED,
    };
    pub use crate::core::copy::CopyReport;
    pub use crate::core::options::EngineKind;
    pub use crate::core::reports::backup::{BackupOptions, BackupProgress, BackupReport};
    pub use crate::core::reports::failures::{FailureGroup, Failures};
    pub use crate::core::reports::overview::{Activity, Overview, QueueOverview};
    pub use crate::core::reports::prune::{PruneOptions, PruneReport};
    pub use crate::core::reports::stats::{
        Explanation, JobCounts, JobDetail, LedgerEntry, OutboxCounts, OutboxEntry, Stats,
    };
    pub use crate::core::reports::verify::{Broken, Invariant, VerifyReport};
    pub use crate::core::reports::workflow::{Linked, Workflow};
    pub use crate::core::schedule::ScheduleRow;
    pub use crate::core::SCHEMA_VERSION;
    pub use crate::queue::{Admin, AnyQueue};
}

/// Not part of the API: what the `litejob` command (a binary of this
/// package, so it sees only public items) shares with the library. Any
/// release may change it.
#[doc(hidden)]
pub mod __command {
    pub use crate::core::attempt::MAX_ERROR_BYTES;
    pub use crate::core::backoff::Rng;
    pub use crate::core::sync::{lock, wait};
    pub use crate::core::time::{exact_duration, format_duration, format_millis};
    pub use crate::queue::any::is_postgres_url;
}

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
