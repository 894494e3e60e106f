//! What a runtime hands an engine's pipeline: the state every thread of a
//! runtime shares ([`Shared`]: the store, the handlers and effects, the
//! settings, the leases held, the wake-ups), and what the runtime asks of
//! a pipeline at its stop. Each engine starts its own pipeline threads
//! from it (`sqlite/pipeline/`, `postgres/pipeline/`); the runtime starts
//! the threads both share (effects, the scheduler). Writes no table
//! itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::core::backoff::Backoff;
use crate::core::lifecycle::RunEnd;
use crate::driver::handler::{ErasedEffect, ErasedHandler};
use crate::driver::in_flight::InFlight;
use crate::driver::wake::Wakers;
use crate::driver::{Engine, Store};
use crate::error::{Error, Result};

/// The settings the builder's setters change (their defaults are the builder's).
#[derive(Debug, Clone)]
pub(crate) struct RuntimeConfig {
    pub(crate) workers: usize,
    pub(crate) effect_workers: usize,
    pub(crate) queues: Option<Vec<String>>,
    pub(crate) lease: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) grace: Duration,
    pub(crate) max_abandoned: i64,
    pub(crate) backoff: Backoff,
    pub(crate) effect_backoff: Backoff,
    pub(crate) outbox_max_retries: u32,
    pub(crate) claim_ahead: usize,
    /// `claim_ahead` was set: on PostgreSQL it is then the batch size too.
    pub(crate) claim_ahead_set: bool,
    /// How long a run may take when neither its job nor its kind says
    /// (none by default).
    pub(crate) job_timeout: Option<Duration>,
    /// How long a run of a kind may take when its job does not say.
    pub(crate) kind_timeouts: HashMap<String, Duration>,
}

impl RuntimeConfig {
    /// How long a run of `kind` may take: its job's own timeout
    /// (`jobs.timeout_ms`), else its kind's, else the runtime's; none when
    /// none is set.
    pub(crate) fn timeout_for(&self, kind: &str, job_ms: Option<i64>) -> Option<Duration> {
        crate::core::cancel::run_timeout(
            job_ms,
            self.kind_timeouts.get(kind).copied(),
            self.job_timeout,
        )
    }
}

/// What every thread of a runtime shares.
pub(crate) struct Shared<E: Engine> {
    /// The queue's store.
    pub(crate) store: Arc<E::Store>,
    /// The lease owner this runtime writes into the rows it claims.
    pub(crate) owner: String,
    pub(crate) handlers: HashMap<String, Arc<dyn ErasedHandler<E>>>,
    pub(crate) effects: HashMap<String, Arc<dyn ErasedEffect>>,
    /// The handlers' and the effects' kinds (sorted), and the queues
    /// claimed from as JSON for the claim's SQL.
    pub(crate) kinds: Vec<String>,
    pub(crate) effect_kinds: Vec<String>,
    pub(crate) queues_json: Option<String>,
    pub(crate) cfg: RuntimeConfig,
    /// The largest output a job may finish with (the queue's payload
    /// limit), and a step's result too.
    pub(crate) max_output: usize,
    /// Where the runs' steps are recorded: the store.
    pub(crate) steps: Arc<dyn crate::core::steps::StepLog>,
    /// The runner threads the workers' prepare steps with a timeout run
    /// on, and those left behind.
    pub(crate) runners: Arc<crate::driver::runner::Runners>,
    /// Set first by a stop: no thread starts new work after it.
    pub(crate) stopping: AtomicBool,
    /// Ready (disconnected) once the runtime stops: every thread selects on
    /// it while it waits.
    pub(crate) stop: Receiver<()>,
    /// The jobs and effects this process holds a lease on.
    pub(crate) in_flight: InFlight,
    /// A claim left jobs queued because their queue's cap or rate was
    /// full: the next run to end here wakes the claimers, since it may
    /// have freed the slot (other processes' runs are seen at the poll).
    pub(crate) slot_wanted: AtomicBool,
    /// The queue's wake-ups, to wake every runtime on it.
    pub(crate) job_wakers: Arc<Wakers>,
    pub(crate) outbox_wakers: Arc<Wakers>,
    /// Told when runs ended jobs ([`crate::Queue::wait`]).
    pub(crate) done_wakers: Arc<crate::driver::wake::Waiters>,
    /// This runtime's own wake-up channels (see [`Wakers`]).
    pub(crate) job_wake: Receiver<()>,
    pub(crate) outbox_wake: Receiver<()>,
}

impl<E: Engine> Shared<E> {
    /// Wakes the idle claimers of every runtime on the queue.
    pub(crate) fn notify(&self) {
        self.job_wakers.wake();
    }

    /// Wakes the idle effect threads of every runtime on the queue.
    pub(crate) fn notify_outbox(&self) {
        self.outbox_wakers.wake();
    }

    /// A run of this process ended: if a claim left jobs queued for a full
    /// cap or rate, claim again now rather than at the next poll.
    pub(crate) fn slot_freed(&self) {
        if self.slot_wanted.swap(false, Ordering::SeqCst) {
            self.notify();
        }
    }

    /// Gives back a claimed job that never started, uncharged. Returns
    /// whether it went back.
    pub(crate) fn release_unstarted(&self, id: i64) -> Result<bool> {
        let b = self.store.as_ref();
        b.release_job(id, &self.owner, None, "", b.now())
    }

    /// Lets go of a claimed job that will not start (the runtime is
    /// stopping) and gives it back. Returns whether it went back.
    pub(crate) fn give_back(&self, id: i64) -> bool {
        self.in_flight.forget_job(id);
        matches!(self.release_unstarted(id), Ok(true))
    }

    /// A claimed job's start was not committed, through no fault of the job:
    /// nothing ran, so the claim goes back if it is still ours.
    pub(crate) fn start_failed(&self, id: i64, e: &Error) {
        log::warn!(target: "litejob", job_id = id; "could not start job {id}: {e}");
        let _ = self.release_unstarted(id);
    }
}

/// An engine's pipeline as its runtime holds it.
/// An engine's jobs run in the calling thread, for
/// [`RuntimeBuilder::drain`](crate::RuntimeBuilder::drain): no thread of its
/// own, no sleep, the runtime's transactions.
pub(crate) trait DrainJobs {
    /// Runs every job due at the clock's now (and those the runs make due),
    /// until none is; returns how each run ended, in order. An error is a
    /// run whose end could not be recorded (its job went back, uncharged).
    fn run_due(&mut self) -> Result<Vec<RunEnd>>;
}

pub(crate) trait Pipeline: Send {
    /// Once the runtime stopped and its threads had their grace period:
    /// sees through the runs it started that no thread finished, and gives
    /// back, uncharged, what it claimed and did not start. Returns how many
    /// jobs went back.
    fn wind_down(&mut self) -> usize;
}

/// A pipeline just started: what the runtime keeps of it.
pub(crate) struct Launched {
    pub(crate) pipeline: Box<dyn Pipeline>,
    pub(crate) threads: Vec<JoinHandle<()>>,
}

/// Starts a named thread.
pub(crate) fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(Error::Io)
}

/// The name a thread records in the rows it writes: `pid/thread-name`.
pub(crate) fn worker_name() -> String {
    format!(
        "{}/{}",
        std::process::id(),
        std::thread::current().name().unwrap_or("unnamed")
    )
}

/// Logs a background thread's failed call: a warning, except while the
/// database server is out of reach, which the store says once per outage
/// (every thread's retry saying it again would flood the log).
pub(crate) fn log_failure(what: &str, e: &crate::error::Error) {
    if matches!(e, crate::error::Error::Connection(_)) {
        log::debug!(target: "litejob", "{what} failed: {e}");
    } else {
        log::warn!(target: "litejob", "{what} failed: {e}");
    }
}

/// Pauses for `d`, or less if the runtime stops meanwhile.
pub(crate) fn sleep_or_stop(stop: &Receiver<()>, d: Duration) {
    let _ = stop.recv_timeout(d);
}
