//! [`RuntimeBuilder`]: the handlers, the effects, the schedules and the
//! runtime's settings.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Result;
use crate::handler::{
    EffectContext, ErasedEffect, ErasedHandler, FnEffect, FnHandler, HandlerError, JobContext,
    JobTx, Outcome,
};
use crate::queue::Queue;
use crate::retry::Backoff;
use crate::schedule::Schedule;

use super::Runtime;

/// Configures and starts a [`Runtime`]. Get one from [`Queue::runtime`].
#[must_use = "a builder does nothing until it is started"]
pub struct RuntimeBuilder {
    pub(super) queue: Queue,
    pub(super) handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    #[cfg(feature = "postgres")]
    pub(super) pg_handlers: HashMap<String, Arc<dyn crate::handler::ErasedPgHandler>>,
    pub(super) effects: HashMap<String, Arc<dyn ErasedEffect>>,
    pub(super) schedules: Vec<Schedule>,
    pub(super) cfg: RuntimeConfig,
}

/// The settings the builder's setters change (defaults in [`RuntimeBuilder::new`]).
#[derive(Debug, Clone)]
pub(super) struct RuntimeConfig {
    pub(super) workers: usize,
    pub(super) effect_workers: usize,
    pub(super) queues: Option<Vec<String>>,
    pub(super) lease: Duration,
    pub(super) poll_interval: Duration,
    pub(super) grace: Duration,
    pub(super) max_abandoned: i64,
    pub(super) backoff: Backoff,
    pub(super) effect_backoff: Backoff,
    pub(super) outbox_max_retries: u32,
    pub(super) claim_ahead: usize,
    /// `claim_ahead` was set: on PostgreSQL it is then the batch size too.
    pub(super) claim_ahead_set: bool,
}

impl RuntimeBuilder {
    pub(crate) fn new(queue: Queue) -> Self {
        RuntimeBuilder {
            queue,
            handlers: HashMap::new(),
            #[cfg(feature = "postgres")]
            pg_handlers: HashMap::new(),
            effects: HashMap::new(),
            schedules: Vec::new(),
            cfg: RuntimeConfig {
                workers: 4,
                effect_workers: 2,
                queues: None,
                lease: Duration::from_secs(30),
                poll_interval: Duration::from_millis(500),
                grace: Duration::from_secs(10),
                max_abandoned: 3,
                backoff: Backoff::default(),
                effect_backoff: Backoff::default(),
                outbox_max_retries: 1,
                claim_ahead: 64,
                claim_ahead_set: false,
            },
        }
    }

    /// Registers the handler of `kind`: it receives the decoded payload and
    /// the job's transaction, and returns an [`Outcome`]. Everything it
    /// writes through the transaction commits with the ledger row and the
    /// job's completion, exactly once per key.
    pub fn handler<T, F>(self, kind: impl Into<String>, apply: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(&JobTx<'_>, T) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.insert_handler(kind, |_: &JobContext, t: T| Ok(t), apply, false)
    }

    /// Registers a two-step handler: `prepare` runs on the worker thread,
    /// outside any transaction (slow parsing, computing, reading files — in
    /// parallel across workers); `apply` runs inside the job's transaction
    /// with what `prepare` returned, and should be short: it holds the write
    /// lock.
    pub fn handler_with_prepare<T, P, Prep, App>(
        self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App:
            Fn(&JobTx<'_>, P) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.insert_handler(kind, prepare, apply, true)
    }

    fn insert_handler<T, P, Prep, App>(
        mut self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
        user_prepare: bool,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App:
            Fn(&JobTx<'_>, P) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.handlers.insert(
            kind.into(),
            Arc::new(FnHandler {
                prepare,
                apply,
                user_prepare,
                _types: PhantomData::<fn(T) -> P>,
            }),
        );
        self
    }

    /// Registers the handler of `kind` for a queue on PostgreSQL
    /// ([`Queue::open_postgres`]): as [`RuntimeBuilder::handler`], with the
    /// job's PostgreSQL transaction ([`crate::PgJobTx`], which derefs to
    /// [`postgres::Transaction`]) in place of the SQLite one. Everything it
    /// writes through it commits with the ledger row and the job's
    /// completion, exactly once per key.
    #[cfg(feature = "postgres")]
    pub fn pg_handler<T, F>(self, kind: impl Into<String>, apply: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(&mut crate::PgJobTx<'_, '_>, T) -> std::result::Result<Outcome, HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.insert_pg_handler(kind, |_: &JobContext, t: T| Ok(t), apply, false)
    }

    /// [`RuntimeBuilder::handler_with_prepare`] for a queue on PostgreSQL:
    /// `prepare` runs outside any transaction, `apply` in the job's
    /// PostgreSQL transaction.
    #[cfg(feature = "postgres")]
    pub fn pg_handler_with_prepare<T, P, Prep, App>(
        self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App: Fn(&mut crate::PgJobTx<'_, '_>, P) -> std::result::Result<Outcome, HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.insert_pg_handler(kind, prepare, apply, true)
    }

    #[cfg(feature = "postgres")]
    fn insert_pg_handler<T, P, Prep, App>(
        mut self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
        user_prepare: bool,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App: Fn(&mut crate::PgJobTx<'_, '_>, P) -> std::result::Result<Outcome, HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.pg_handlers.insert(
            kind.into(),
            Arc::new(crate::handler::FnPgHandler {
                prepare,
                apply,
                user_prepare,
                _types: PhantomData::<fn(T) -> P>,
            }),
        );
        self
    }

    /// Registers the effect of outbox `kind`, run outside any transaction
    /// after the job that wrote the row committed. At least once; it receives
    /// the row's stable key in the context to pass on to a provider that
    /// deduplicates.
    pub fn effect<T, F>(mut self, kind: impl Into<String>, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(&EffectContext, T) -> std::result::Result<(), HandlerError> + Send + Sync + 'static,
    {
        self.effects.insert(
            kind.into(),
            Arc::new(FnEffect {
                f,
                _types: PhantomData::<fn(T)>,
            }),
        );
        self
    }

    /// Declares a periodic job: at every slot of `cron` (5 fields, 6 with
    /// seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`; UTC)
    /// the runtime enqueues a job of `kind` with `payload` under the key
    /// `schedule:<name>:<slot>`, the slot in UTC (RFC 3339). Every process
    /// that declares the same schedule may fire a slot; its job is created
    /// once, the others' enqueues are counted duplicates. Options (time
    /// zone, queue, priority, retries, catch-up): [`Self::schedule_with`].
    ///
    /// Nothing is checked here, so the chain stays a chain:
    /// [`Self::start`] refuses a bad expression or name, a kind this runtime
    /// has no handler for, or a name declared twice, with
    /// [`crate::Error::InvalidInput`], before it writes anything.
    pub fn schedule(
        self,
        name: impl Into<String>,
        cron: impl Into<String>,
        kind: impl Into<String>,
        payload: &impl Serialize,
    ) -> Self {
        self.schedule_with(Schedule::new(name, cron, kind, payload))
    }

    /// Declares a periodic job with options (see [`Schedule`]); checked at
    /// [`Self::start`] like [`Self::schedule`].
    pub fn schedule_with(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Which backend the queue it runs on has: [`RuntimeBuilder::handler`]
    /// for a file, [`RuntimeBuilder::pg_handler`] for PostgreSQL.
    #[cfg_attr(not(feature = "postgres"), doc = "")]
    #[cfg_attr(
        not(feature = "postgres"),
        doc = "[`RuntimeBuilder::pg_handler`]: crate#features"
    )]
    pub fn queue_kind(&self) -> crate::BackendKind {
        self.queue.backend_kind()
    }

    /// Number of job worker threads (default 4).
    pub fn workers(mut self, n: usize) -> Self {
        self.cfg.workers = n.max(1);
        self
    }

    /// Number of effect threads (default 2).
    pub fn effect_workers(mut self, n: usize) -> Self {
        self.cfg.effect_workers = n.max(1);
        self
    }

    /// Only claim jobs from these queues (default: all).
    pub fn queues<I: IntoIterator<Item = S>, S: Into<String>>(mut self, queues: I) -> Self {
        self.cfg.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How long a claim lasts without renewal (default 30 s). The runtime
    /// renews it every third of this while the job runs; when the process
    /// dies, another one takes the job back after this long.
    pub fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d.max(Duration::from_millis(100));
        self
    }

    /// How often to look for work written by other processes (default 500 ms).
    /// In-process enqueues wake workers at once.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.cfg.poll_interval = d.max(Duration::from_millis(1));
        self
    }

    /// How long [`Runtime::stop`] lets running jobs finish (default 10 s).
    pub fn grace_period(mut self, d: Duration) -> Self {
        self.cfg.grace = d;
        self
    }

    /// The abandoned run that makes a job a poison pill (default 3).
    pub fn max_abandoned(mut self, n: u32) -> Self {
        self.cfg.max_abandoned = n.max(1) as i64;
        self
    }

    /// Backoff between a job's failed runs.
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.cfg.backoff = b;
        self
    }

    /// Backoff between an effect's failed attempts.
    pub fn effect_backoff(mut self, b: Backoff) -> Self {
        self.cfg.effect_backoff = b;
        self
    }

    /// `max_retries` of outbox rows written by jobs (default 1).
    pub fn outbox_max_retries(mut self, n: u32) -> Self {
        self.cfg.outbox_max_retries = n;
        self
    }

    /// Jobs one claim takes beyond one per worker (default 64), so claims
    /// come in batches and the writer sees large groups. A claim starts the
    /// apply-only jobs it takes (handlers without a prepare step) and the
    /// writer applies them in the same cycle, so this also sets the size of
    /// a writer cycle, and with it how long a job enqueued while a backlog
    /// runs waits (about one cycle). Jobs of a handler with a prepare step
    /// wait for a worker meanwhile, holding a lease but no attempt: if the
    /// process dies they go back to `queued` uncharged once the lease
    /// expires; at shutdown they are released at once.
    ///
    /// On PostgreSQL it is the most jobs one worker claims at once (its
    /// batch: one transaction, one commit), at most 100. The default is 100
    /// when no handler has a prepare step, else 32: a batch's prepare steps
    /// run one after another before its commit. Smaller batches start a job
    /// enqueued behind a backlog sooner, larger ones process more per
    /// second (on a 2-core machine 100 processed about 1.5× as many as 32).
    pub fn claim_ahead(mut self, n: usize) -> Self {
        self.cfg.claim_ahead = n;
        self.cfg.claim_ahead_set = true;
        self
    }

    /// Starts the threads. With schedules, first checks them and writes
    /// their rows, and enqueues what their catch-up policies fire for the
    /// slots missed while no process ran: those jobs exist when it returns.
    /// A queue opened read-only has no writer to run jobs with:
    /// [`crate::Error::ReadOnly`], and no thread starts.
    pub fn start(self) -> Result<Runtime> {
        if let Ok(store) = self.queue.sqlite("") {
            store.writer()?;
        }
        #[cfg(feature = "postgres")]
        if let Some(store) = self.queue.postgres() {
            store.writable()?;
        }
        Runtime::start(self)
    }

    /// Refuses handlers written for the other backend's transaction.
    pub(super) fn check_backend(&self) -> Result<()> {
        let pg = self.queue.backend_kind() == crate::BackendKind::Postgres;
        if pg {
            if let Some(kind) = self.handlers.keys().next() {
                return Err(crate::Error::Unsupported(format!(
                    "the handler of {kind:?} takes a SQLite transaction, and this queue is on \
                     PostgreSQL: register it with pg_handler"
                )));
            }
        }
        #[cfg(feature = "postgres")]
        if !pg {
            if let Some(kind) = self.pg_handlers.keys().next() {
                return Err(crate::Error::Unsupported(format!(
                    "the handler of {kind:?} takes a PostgreSQL transaction, and this queue is a \
                     SQLite file: register it with handler"
                )));
            }
        }
        Ok(())
    }
}
