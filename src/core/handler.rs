//! What user code plugs in: job handlers (prepare outside the transaction,
//! apply inside it), effect handlers, and the closed set of outcomes a job
//! handler returns. Writes no table itself; `JobTx::outbox` writes `outbox`
//! through the outbox module.

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::time::Duration;

use rusqlite::Connection;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::core::time::Millis;
use crate::error::Result;
use crate::sqlite::outbox;

/// An error from user code. Any error type converts into it with `?`; it
/// means "this run failed", and the job is retried while attempts remain.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a job handler says about its job. A closed set, separate from
/// library errors ([`crate::Error`]) and from handler errors
/// ([`HandlerError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The work is done: commit it (ledger row, handler SQL, outbox rows) and
    /// mark the job `succeeded`.
    Done,
    /// Roll the work back and try again after the usual backoff (charged
    /// against `max_retries`).
    Retry(String),
    /// Roll the work back and try again after this delay (charged against
    /// `max_retries`).
    RetryAfter(Duration, String),
    /// Roll the work back and stop: the job is `dead` with this reason, no
    /// retry.
    Discard(String),
}

/// What a run knows about its job.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// Job id.
    pub id: i64,
    /// Kind.
    pub kind: String,
    /// The producer's idempotency key.
    pub key: String,
    /// Queue.
    pub queue: String,
    /// This run's charged attempt number (1-based).
    pub attempt: i64,
    /// The job's attempt budget (`max_retries + 1`).
    pub max_attempts: i64,
}

/// The transaction a job's apply step runs in. Derefs to the
/// [`rusqlite::Connection`] (inside the transaction: do not COMMIT or
/// ROLLBACK yourself, nor release or roll back to the savepoint
/// `litejob_run` the run's writes go into; savepoints of your own, with
/// other names, are fine). Everything written through it commits together with
/// the ledger row and the job's completion, or not at all.
pub struct JobTx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) job: &'a JobContext,
    pub(crate) now: Millis,
    pub(crate) outbox_max_attempts: i64,
    pub(crate) outbox_added: Cell<usize>,
    /// The savepoint around the handler's writes, opened the first time the
    /// handler reaches the connection (see [`crate::sqlite::run::apply`]).
    pub(crate) savepoint: Cell<Savepoint>,
}

/// The state of a run's savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Savepoint {
    /// The handler has not reached the connection: it wrote nothing.
    NotOpened,
    /// Open: everything the handler wrote is after it.
    Open,
    /// Opening it failed: the handler's writes cannot be undone alone.
    Failed,
}

/// The savepoint a run's handler writes inside: opened by [`JobTx::conn`],
/// released or rolled back to by [`crate::sqlite::run::apply`]. A reserved
/// name, so a handler's own savepoints nest inside it.
pub(crate) const RUN_SAVEPOINT: &str = "SAVEPOINT litejob_run";
pub(crate) const RELEASE_RUN: &str = "RELEASE litejob_run";
pub(crate) const ROLLBACK_RUN: &str = "ROLLBACK TO litejob_run";

impl<'a> JobTx<'a> {
    /// The connection, inside the job's transaction.
    pub fn conn(&self) -> &Connection {
        if self.savepoint.get() == Savepoint::NotOpened {
            // Opened lazily: a handler that writes nothing (or only reads)
            // then costs no savepoint, whose first write to each page
            // copies that page into the sub-journal.
            let opened = crate::sqlite::writer::exec_cached(self.conn, RUN_SAVEPOINT);
            self.savepoint.set(match opened {
                Ok(_) => Savepoint::Open,
                Err(e) => {
                    log::error!(target: "litejob", "job {}: cannot open its savepoint: {e}", self.job.id);
                    Savepoint::Failed
                }
            });
        }
        self.conn
    }

    /// The job this transaction belongs to.
    pub fn job(&self) -> &JobContext {
        self.job
    }

    /// The time this apply step started, in ms since the epoch.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Records a side effect to perform after this transaction commits. The
    /// `key` is stable and unique: adding the same key again (in this run or
    /// another) is a no-op. Returns the outbox row id and whether it is new.
    pub fn outbox(&self, kind: &str, key: &str, payload: &impl Serialize) -> Result<(i64, bool)> {
        let json = serde_json::to_string(payload)?;
        let added = outbox::add(
            self.conn(),
            self.job.id,
            kind,
            key,
            &json,
            self.outbox_max_attempts,
            self.now,
        )?;
        if added.1 {
            self.outbox_added.set(self.outbox_added.get() + 1);
        }
        Ok(added)
    }
}

impl std::ops::Deref for JobTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn()
    }
}

/// What an effect run knows about its outbox row.
#[derive(Debug, Clone)]
pub struct EffectContext {
    /// Outbox row id.
    pub id: i64,
    /// Effect kind.
    pub kind: String,
    /// The row's stable key: pass it to a provider that deduplicates
    /// (e.g. as an `Idempotency-Key` header).
    pub key: String,
    /// The job that wrote the row.
    pub job_id: Option<i64>,
    /// This attempt's number (1-based).
    pub attempt: i64,
    /// The row's attempt budget.
    pub max_attempts: i64,
}

/// A prepared value travelling from the worker thread to the writer.
pub(crate) type Prepared = Box<dyn Any + Send>;

/// Why a prepare step did not produce a value.
pub(crate) enum PrepareStop {
    /// The payload does not decode as the handler's type: retrying cannot help.
    BadPayload(String),
    /// The prepare step returned an error.
    Failed(String),
    /// Decoding or the prepare step panicked.
    Panicked(String),
}

/// A job handler with its payload type erased.
pub(crate) trait ErasedHandler: Send + Sync {
    /// False for apply-only handlers: their `prepare` only decodes the
    /// payload and runs no user code, so it may run on the writer.
    fn has_prepare(&self) -> bool;
    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop>;
    fn apply(
        &self,
        tx: &JobTx<'_>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError>;
}

pub(crate) struct FnHandler<T, P, Prep, App> {
    pub prepare: Prep,
    pub apply: App,
    pub user_prepare: bool,
    pub _types: PhantomData<fn(T) -> P>,
}

impl<T, P, Prep, App> ErasedHandler for FnHandler<T, P, Prep, App>
where
    T: DeserializeOwned + 'static,
    P: Send + 'static,
    Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync,
    App: Fn(&JobTx<'_>, P) -> std::result::Result<Outcome, HandlerError> + Send + Sync,
{
    fn has_prepare(&self) -> bool {
        self.user_prepare
    }

    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop> {
        decode_and_prepare(ctx, payload, &self.prepare)
    }

    fn apply(
        &self,
        tx: &JobTx<'_>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError> {
        (self.apply)(tx, downcast::<P>(prepared)?)
    }
}

/// A PostgreSQL job handler with its payload type erased: the same two
/// steps, the apply step on a [`crate::PgJobTx`].
#[cfg(feature = "postgres")]
pub(crate) trait ErasedPgHandler: Send + Sync {
    /// False for a handler registered without a prepare step.
    fn has_prepare(&self) -> bool;
    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop>;
    fn apply(
        &self,
        tx: &mut crate::postgres::tx::PgJobTx<'_, '_>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError>;
}

/// Decodes `payload` as `T` and runs `prepare` on it.
fn decode_and_prepare<T: DeserializeOwned, P: Send + 'static>(
    ctx: &JobContext,
    payload: &str,
    prepare: impl FnOnce(&JobContext, T) -> std::result::Result<P, HandlerError>,
) -> std::result::Result<Prepared, PrepareStop> {
    let value: T = serde_json::from_str(payload).map_err(|e| {
        PrepareStop::BadPayload(format!(
            "payload does not decode as {}: {e}",
            std::any::type_name::<T>()
        ))
    })?;
    match prepare(ctx, value) {
        Ok(p) => Ok(Box::new(p)),
        Err(e) => Err(PrepareStop::Failed(e.to_string())),
    }
}

/// The value a prepare step produced, as the apply step's type.
fn downcast<P: 'static>(prepared: Prepared) -> std::result::Result<P, HandlerError> {
    prepared
        .downcast::<P>()
        .map(|p| *p)
        .map_err(|_| HandlerError::from("internal: prepared value of the wrong type"))
}

#[cfg(feature = "postgres")]
pub(crate) struct FnPgHandler<T, P, Prep, App> {
    pub prepare: Prep,
    pub apply: App,
    /// `prepare` is the user's (not only the payload's decoding).
    pub user_prepare: bool,
    pub _types: PhantomData<fn(T) -> P>,
}

#[cfg(feature = "postgres")]
impl<T, P, Prep, App> ErasedPgHandler for FnPgHandler<T, P, Prep, App>
where
    T: DeserializeOwned + 'static,
    P: Send + 'static,
    Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync,
    App: Fn(
            &mut crate::postgres::tx::PgJobTx<'_, '_>,
            P,
        ) -> std::result::Result<Outcome, HandlerError>
        + Send
        + Sync,
{
    fn has_prepare(&self) -> bool {
        self.user_prepare
    }

    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop> {
        decode_and_prepare(ctx, payload, &self.prepare)
    }

    fn apply(
        &self,
        tx: &mut crate::postgres::tx::PgJobTx<'_, '_>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError> {
        (self.apply)(tx, downcast::<P>(prepared)?)
    }
}

/// An effect handler with its payload type erased.
pub(crate) trait ErasedEffect: Send + Sync {
    fn call(&self, ctx: &EffectContext, payload: &str) -> std::result::Result<(), String>;
}

pub(crate) struct FnEffect<T, F> {
    pub f: F,
    pub _types: PhantomData<fn(T)>,
}

impl<T, F> ErasedEffect for FnEffect<T, F>
where
    T: DeserializeOwned + 'static,
    F: Fn(&EffectContext, T) -> std::result::Result<(), HandlerError> + Send + Sync,
{
    fn call(&self, ctx: &EffectContext, payload: &str) -> std::result::Result<(), String> {
        let value: T = serde_json::from_str(payload).map_err(|e| {
            format!(
                "payload does not decode as {}: {e}",
                std::any::type_name::<T>()
            )
        })?;
        (self.f)(ctx, value).map_err(|e| e.to_string())
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked (no message)".to_string()
    }
}
