//! [`RuntimeBuilder`]: the handlers, the effects, the schedules and the
//! runtime's settings.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::core::backoff::Backoff;
use crate::core::handler::{EffectContext, HandlerError, JobContext, Outcome};
use crate::core::reports::prune::Retention;
use crate::core::schedule::Schedule;
use crate::driver::handler::{ApplyFn, ErasedEffect, ErasedHandler, FnEffect, FnHandler};
use crate::driver::pipeline::RuntimeConfig;
use crate::driver::Engine;
use crate::driver::Store;
use crate::error::Result;
use crate::queue::Queue;
use crate::sqlite::tx::JobTx;
use crate::sqlite::Sqlite;

use super::Runtime;

/// Configures and starts a [`Runtime`]. Get one from [`Queue::runtime`].
#[must_use = "a builder does nothing until it is started"]
pub struct RuntimeBuilder<E: Engine = Sqlite> {
    pub(crate) queue: Queue<E>,
    pub(crate) handlers: HashMap<String, Arc<dyn ErasedHandler<E>>>,
    pub(crate) effects: HashMap<String, Arc<dyn ErasedEffect>>,
    pub(crate) schedules: Vec<Schedule>,
    pub(crate) cfg: RuntimeConfig,
    pub(crate) retention: Option<Retention>,
}

impl<E: Engine> Queue<E> {
    /// Starts building a runtime (workers and effect threads) on this queue.
    pub fn runtime(&self) -> RuntimeBuilder<E> {
        RuntimeBuilder::new(self.clone())
    }
}

impl<E: Engine> RuntimeBuilder<E> {
    pub(crate) fn new(queue: Queue<E>) -> Self {
        RuntimeBuilder {
            queue,
            handlers: HashMap::new(),
            effects: HashMap::new(),
            schedules: Vec::new(),
            retention: None,
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
                job_timeout: None,
                kind_timeouts: HashMap::new(),
            },
        }
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
        App: ApplyFn<E, P> + 'static,
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
    /// [`crate::error::Error::InvalidInput`], before it writes anything.
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

    /// Deletes finished history by itself, as `litejob prune` would:
    /// succeeded jobs a day after they finished, dead and cancelled ones a
    /// week after, by default ([`Retention`]), in a thread of its own
    /// (`litejob-retention`). Without it nothing is deleted: history stays
    /// until a prune.
    pub fn retention(mut self, keep: Retention) -> Self {
        self.retention = Some(keep);
        self
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

    /// How long one run of a job may take, for the jobs whose kind
    /// ([`Self::kind_timeout`]) and job ([`NewJob::with_timeout`]) say
    /// nothing: none by default. At the deadline `ctx.is_cancelled()`
    /// turns true and the run fails "timed out after …", a charged attempt
    /// retried by the job's rules, its work rolled back; a worker stuck in
    /// a prepare step past it is freed for its next job (the step goes on
    /// in the background, its result dropped). An apply step cannot be
    /// abandoned (it runs inside the transaction): one that returns past
    /// the deadline is rolled back. Slow work belongs in a prepare step.
    /// The time a run waits for its turn between its two steps does not
    /// count. `Duration::ZERO` is none.
    ///
    /// [`NewJob::with_timeout`]: crate::NewJob::with_timeout
    pub fn job_timeout(mut self, d: Duration) -> Self {
        self.cfg.job_timeout = (!d.is_zero()).then_some(d);
        self
    }

    /// How long one run of a job of `kind` may take, when the job does
    /// not say ([`NewJob::with_timeout`]); it beats [`Self::job_timeout`].
    /// `Duration::ZERO`: no timeout for this kind, whatever the default.
    ///
    /// [`NewJob::with_timeout`]: crate::NewJob::with_timeout
    pub fn kind_timeout(mut self, kind: impl Into<String>, d: Duration) -> Self {
        self.cfg.kind_timeouts.insert(kind.into(), d);
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
    /// second.
    pub fn claim_ahead(mut self, n: usize) -> Self {
        self.cfg.claim_ahead = n;
        self.cfg.claim_ahead_set = true;
        self
    }

    /// Starts the threads. With schedules, first checks them and writes
    /// their rows, and enqueues what their catch-up policies fire for the
    /// slots missed while no process ran: those jobs exist when it returns.
    /// A queue opened read-only has no writer to run jobs with:
    /// [`crate::error::Error::ReadOnly`], and no thread starts.
    pub fn start(self) -> Result<Runtime> {
        self.queue.store().writable()?;
        Runtime::start(self)
    }
}

/// `handler` and `handler_with_prepare` of one engine, whose transaction
/// their closures take.
macro_rules! handler_methods {
    ($engine:ty, $tx:ty, $tx_doc:literal) => {
        impl RuntimeBuilder<$engine> {
            #[doc = concat!(
                        "Registers the handler of `kind`: it receives the job's transaction (",
                        $tx_doc,
                        ") and the decoded payload, and returns an [`Outcome`]. Everything it \
                 writes through the transaction commits with the ledger row and the \
                 job's completion, exactly once per key."
                    )]
            pub fn handler<T, F>(self, kind: impl Into<String>, apply: F) -> Self
            where
                T: DeserializeOwned + Send + 'static,
                F: Fn(&mut $tx, T) -> std::result::Result<Outcome, HandlerError>
                    + Send
                    + Sync
                    + 'static,
            {
                self.insert_handler(kind, |_: &JobContext, t: T| Ok(t), apply, false)
            }

            /// Registers a two-step handler: `prepare` runs on a worker
            /// thread, outside any transaction (slow parsing, computing,
            /// reading files, calls to other services: in parallel across
            /// workers); `apply` runs inside the job's transaction with what
            /// `prepare` returned, and should be short (on a file it holds
            /// the write lock). With a timeout ([`Self::job_timeout`]),
            /// `prepare` runs on a runner thread its worker waits on, so
            /// that a step that hangs past it frees the worker.
            pub fn handler_with_prepare<T, P, Prep, App>(
                self,
                kind: impl Into<String>,
                prepare: Prep,
                apply: App,
            ) -> Self
            where
                T: DeserializeOwned + Send + 'static,
                P: Send + 'static,
                Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError>
                    + Send
                    + Sync
                    + 'static,
                App: Fn(&mut $tx, P) -> std::result::Result<Outcome, HandlerError>
                    + Send
                    + Sync
                    + 'static,
            {
                self.insert_handler(kind, prepare, apply, true)
            }
        }
    };
}

handler_methods!(
    Sqlite,
    JobTx<'_>,
    "a [`JobTx`], which derefs to a `rusqlite::Connection`"
);
#[cfg(feature = "postgres")]
handler_methods!(
    crate::postgres::Postgres,
    crate::postgres::tx::PgJobTx<'_, '_>,
    "a `PgJobTx`, which derefs to a `postgres::Transaction`"
);
