//! What both engines' pipelines do around a run, written once: the
//! context a handler gets (its timeout resolved), when a failed run is
//! tried again, the prepare step run guarded against panics (decoding the
//! payload runs user code too) and held to its deadline (on a runner
//! thread, see [`crate::driver::runner`]), and the run's log lines.
//! Writes no table.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crate::core::cancel::{RunSignal, Stop};
use crate::driver::runner::{Ran, Runner};

use crate::core::backoff::Backoff;
use crate::core::handler::{panic_message, JobContext, PrepareStop, Prepared};
use crate::core::lifecycle::RunEnd;
use crate::core::steps::{JobStep, StepLog, StepRecord, Steps};
use crate::core::time::{format_millis, Millis};
use crate::driver::handler::ErasedHandler;
use crate::driver::{Engine, Store};
use crate::error::Result;
use crate::fault;

/// A started run as an engine read it: enough for its context.
pub(crate) struct RunStart<'a> {
    pub id: i64,
    pub kind: &'a str,
    pub key: &'a str,
    pub queue: &'a str,
    pub attempt: i64,
    pub max_attempts: i64,
    /// The run's `attempts.id`, which its steps' records are fenced on.
    pub run_id: i64,
    /// How long its code may run, resolved ([`RuntimeConfig::timeout_for`]).
    ///
    /// [`RuntimeConfig::timeout_for`]: crate::driver::pipeline::RuntimeConfig::timeout_for
    pub timeout: Option<Duration>,
}

/// The context a handler receives; its steps go to `steps`, each result
/// at most `max_step` bytes. Its deadline starts now.
pub(crate) fn context(s: RunStart<'_>, steps: &Arc<dyn StepLog>, max_step: usize) -> JobContext {
    JobContext {
        id: s.id,
        kind: s.kind.to_string(),
        key: s.key.to_string(),
        queue: s.queue.to_string(),
        attempt: s.attempt,
        max_attempts: s.max_attempts,
        steps: Steps::new(steps.clone(), s.run_id, max_step),
        signal: Arc::new(RunSignal::new(s.timeout)),
    }
}

/// A store as the place a run's steps are recorded. The fault points
/// around a record let crash tests stop a run between a step's call and
/// its record, and between its record and its use.
pub(crate) struct StoreSteps<S: Store>(pub Arc<S>);

impl<S: Store> StepLog for StoreSteps<S> {
    fn now(&self) -> crate::core::time::Millis {
        self.0.now()
    }

    fn recorded(&self, job_id: i64) -> Result<Vec<JobStep>> {
        self.0.steps(job_id)
    }

    fn record(&self, step: &StepRecord<'_>) -> Result<bool> {
        fault::point("before-step-record");
        let recorded = self.0.record_step(step)?;
        fault::point("after-step-record");
        Ok(recorded)
    }

    fn mark_reused(&self, job_id: i64, attempt: i64, names: &[String]) -> Result<()> {
        self.0.mark_steps_reused(job_id, attempt, names)
    }
}

/// When a failed run of `ctx`'s attempt runs again: the backoff after
/// `now`, with `unit` the random draw of its jitter.
pub(crate) fn backoff_at(backoff: &Backoff, ctx: &JobContext, unit: f64, now: Millis) -> Millis {
    let delay = backoff.delay(ctx.attempt as u32, unit);
    now.saturating_add(delay.as_millis().min(i64::MAX as u128 / 2) as i64)
}

/// Decodes the payload and runs the prepare step, a panic in either caught
/// and said as a [`PrepareStop::Panicked`], in this thread. Steps may be
/// called only while it runs. A run stopped meanwhile (its job
/// cancelled, its lease lost) or past its deadline when it returns is
/// said so, whatever it returned; otherwise its deadline pauses until its
/// apply step starts.
pub(crate) fn prepare<E: Engine>(
    handler: &dyn ErasedHandler<E>,
    ctx: &JobContext,
    payload: &str,
) -> Result<Prepared, PrepareStop> {
    ctx.steps.open();
    let prepared = catch_unwind(AssertUnwindSafe(|| handler.prepare(ctx, payload)))
        .unwrap_or_else(|p| Err(PrepareStop::Panicked(panic_message(p.as_ref()))));
    ctx.steps.close(ctx.id, ctx.attempt);
    if let Some(stop) = stopped(ctx) {
        return Err(stop);
    }
    ctx.signal.pause();
    prepared
}

/// Why a run must stop here, if it must: stopped from outside, or past its
/// deadline (said "timed out after …").
pub(crate) fn stopped(ctx: &JobContext) -> Option<PrepareStop> {
    match ctx.signal.stopped() {
        Some(why @ (Stop::Cancelled | Stop::Lost)) => Some(PrepareStop::Stopped {
            why,
            job_id: ctx.id,
        }),
        Some(Stop::TimedOut) => Some(timed_out(ctx)),
        None if ctx.signal.overran() => Some(timed_out(ctx)),
        None => None,
    }
}

/// The stop of a run whose timeout ran out.
fn timed_out(ctx: &JobContext) -> PrepareStop {
    PrepareStop::TimedOut(ctx.signal.timed_out())
}

/// [`prepare`] as a worker runs it: a run with a timeout and a prepare
/// step of the user's runs it on the worker's runner thread, and the
/// worker waits for its answer until the deadline or the run's stop; then
/// it abandons the thread (see [`Runner`]) and the run is said timed out
/// or stopped, its step log closed. Any other run prepares in this
/// thread, as [`prepare`] does, at no cost.
pub(crate) fn prepare_on<E: Engine>(
    runner: &mut Runner,
    handler: &Arc<dyn ErasedHandler<E>>,
    ctx: &JobContext,
    payload: &str,
) -> Result<Prepared, PrepareStop> {
    if ctx.signal.timeout().is_none() || !handler.has_prepare() || !runner.threaded() {
        return prepare(handler.as_ref(), ctx, payload);
    }
    let (h, c, p) = (handler.clone(), ctx.clone(), payload.to_string());
    match runner.run(ctx, Box::new(move || prepare(h.as_ref(), &c, &p))) {
        Ran::Answered(prepared) => prepared,
        Ran::Abandoned => {
            // Its later steps must not be recorded: the log closes here
            // (their records are fenced on the run's attempt too).
            ctx.steps.close(ctx.id, ctx.attempt);
            Err(stopped(ctx).unwrap_or_else(|| timed_out(ctx)))
        }
    }
}

/// `N/M`: the run's attempt of its budget, as the log lines show it.
pub(crate) fn attempt_of(ctx: &JobContext) -> String {
    format!("{}/{}", ctx.attempt, ctx.max_attempts)
}

/// Whether the run's info lines are logged: their fields are formatted
/// only then (a start runs on the file's writer thread, where formatting
/// an attempt nobody reads costs every job).
fn info_enabled() -> bool {
    log::log_enabled!(target: "litejob", log::Level::Info)
}

/// The line a run's start logs, once its start committed.
pub(crate) fn log_started(ctx: &JobContext, worker: &str) {
    if !info_enabled() {
        return;
    }
    let attempt = attempt_of(ctx);
    log::info!(target: "litejob", job_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt.as_str(), worker = worker; "job started");
}

/// The line a run's end logs, once its end committed.
pub(crate) fn log_finished(ctx: &JobContext, end: &RunEnd, ms: u64) {
    if !info_enabled() {
        return;
    }
    let attempt = attempt_of(ctx);
    let err = end.error.clone().unwrap_or_default();
    let next = end.retry_at.map(format_millis).unwrap_or_default();
    log::info!(target: "litejob", job_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt.as_str(), outcome = end.outcome.as_str(), state = end.state.as_str(),
        duration_ms = ms, retry_at = next.as_str(), error = err.as_str(); "job finished");
}

/// The line of a run whose end could not be recorded (`why`).
pub(crate) fn log_not_recorded(ctx: &JobContext, ms: u64, why: &str) {
    let attempt = attempt_of(ctx);
    log::warn!(target: "litejob", job_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt.as_str(), outcome = "not recorded", duration_ms = ms,
        error = why; "job run not recorded");
}

/// Where a run's savepoint is: the savepoint a handler's writes go
/// inside, opened the first time the handler reaches its transaction (a
/// handler that writes nothing costs none), so that a failed run's writes
/// are undone alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Savepoint {
    /// The handler has not reached the transaction: it wrote nothing.
    NotOpened,
    /// Open: everything the handler wrote is after it.
    Open,
    /// Opening it failed: the handler's writes cannot be undone alone, and
    /// the transaction is aborted with them.
    Failed,
}
