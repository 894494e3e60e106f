//! A worker's batch: each run's prepare step outside any transaction,
//! then one transaction for the batch (fence and ledger rows first, each
//! handler's writes in a savepoint, every run's end in one statement),
//! one durable commit. Writes `jobs`, `attempts`, `processed_jobs` and
//! `outbox`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::core::attempt::{cap_error, AttemptOutcome};
use crate::core::handler::{JobContext, PrepareStop, Prepared};
use crate::core::job::JobState;
use crate::core::lifecycle::{self, judge, Next, Verdict};
use crate::core::lifecycle::{Charged, JobEnd, RunEnd};
use crate::core::time::Millis;
use crate::driver::handler::ErasedHandler;
use crate::driver::run::Savepoint;
use crate::driver::run::{
    backoff_at, context as run_context, log_finished, log_not_recorded, log_started, prepare_on,
    RunStart,
};
use crate::error::{Error, Result};
use crate::fault;
use crate::postgres::claim::Started;
use crate::postgres::ledger;
use crate::postgres::run::{self, End, Statements};
use crate::postgres::tx::{PgJobTx, RELEASE_RUN, ROLLBACK_RUN};
use crate::postgres::Postgres;
use postgres::types::Type;

use crate::core::lifecycle::{
    failure, released_after_failed_write, Failure, DUPLICATE_RUN, RELEASED_AT_SHUTDOWN,
};
use crate::driver::Store;

use super::worker::Worker;

/// One run of a batch, from its start to its end.
pub(super) struct Run {
    pub(super) started: Started,
    pub(super) ctx: JobContext,
    pub(super) handler: Arc<dyn ErasedHandler<Postgres>>,
    pub(super) prepared: Option<std::result::Result<Prepared, PrepareStop>>,
    pub(super) backoff_at: Millis,
    pub(super) t0: Instant,
    /// What the batch's transaction recorded.
    pub(super) end: Option<RunEnd>,
}

impl Worker {
    /// Prepares, applies and records a batch; a batch whose transaction
    /// failed is given back uncharged. Once the runtime is stopping, the
    /// runs whose user code has not started are given back, and those whose
    /// prepare step ran finish: the grace period is theirs. Returns how the
    /// recorded runs ended, or why the batch was not recorded.
    pub(super) fn run_batch(&mut self, batch: Vec<Started>) -> Result<Vec<RunEnd>> {
        let mut runs = Vec::with_capacity(batch.len());
        for j in batch {
            if self.s.stopping.load(Ordering::SeqCst) {
                self.give_back_one(j.id, j.attempt_id, RELEASED_AT_SHUTDOWN);
            } else if let Some(r) = self.begin(j) {
                runs.push(r);
            }
        }
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        match self.apply(&mut runs) {
            Ok(()) => {
                fault::point("after-complete-commit");
                for r in &runs {
                    self.finish(r);
                }
                self.s.done_wakers.wake();
                self.s.slot_freed();
                Ok(runs.into_iter().filter_map(|r| r.end).collect())
            }
            Err(e) => {
                log::warn!(target: "litejob", "a batch of {} runs was not recorded ({e}); giving it back", runs.len());
                self.conn = None;
                self.unsure = true;
                self.give_back(&runs, &released_after_failed_write(&e.to_string()));
                Err(e)
            }
        }
    }

    /// A run's start: its context, and its prepare step (or the payload's
    /// decoding) run here, outside any transaction.
    pub(super) fn begin(&mut self, j: Started) -> Option<Run> {
        let Some(handler) = self.s.handlers.get(&j.kind).cloned() else {
            // Cannot happen (the claim asks only for our kinds).
            self.give_back_one(
                j.id,
                j.attempt_id,
                "no handler for its kind in this runtime",
            );
            return None;
        };
        let ctx = run_context(
            RunStart {
                id: j.id,
                kind: &j.kind,
                key: &j.key,
                queue: &j.queue,
                attempt: j.attempt,
                max_attempts: j.max_attempts,
                run_id: j.attempt_id,
                timeout: self.s.cfg.timeout_for(&j.kind, j.timeout_ms),
            },
            &self.s.steps,
            self.s.max_output,
        );
        if handler.has_prepare() {
            // Its user code runs outside any transaction: the watcher
            // stops it if its job is cancelled meanwhile.
            self.s.in_flight.watch(j.id, j.attempt_id, &ctx.signal);
        }
        log_started(&ctx, &self.name);
        fault::point("after-start-commit");
        let backoff_at = backoff_at(
            &self.s.cfg.backoff,
            &ctx,
            self.rng.unit(),
            self.s.store.now(),
        );
        let t0 = Instant::now();
        fault::point("in-handler");
        let prepared = prepare_on(&mut self.runner, &handler, &ctx, &j.payload);
        Some(Run {
            started: j,
            ctx,
            handler,
            prepared: Some(prepared),
            backoff_at,
            t0,
            end: None,
        })
    }

    /// The batch's transaction: fence and ledger, handlers, ends, commit.
    pub(super) fn apply(&mut self, runs: &mut [Run]) -> Result<()> {
        let s = self.s.clone();
        let limits = Limits {
            outbox_max_attempts: s.cfg.outbox_max_retries as i64 + 1,
            max_output: s.max_output,
        };
        let now = s.store.now();
        let (c, st) = self.connection()?;
        let mut tx = c.begin().map_err(crate::postgres::conn::read_err)?;
        let asks: Vec<(i64, i64, bool)> = runs
            .iter()
            .map(|r| {
                let ok = matches!(r.prepared, Some(Ok(_)));
                (r.started.id, r.started.attempt_id, ok)
            })
            .collect();
        let held: std::collections::HashMap<i64, bool> =
            run::fence_and_ledger(&mut tx, st, &asks, now)?
                .into_iter()
                .collect();
        let (ends, failed_keys) = run_handlers(&mut tx, st, runs, &held, now, limits)?;
        ledger::unrecord(&mut tx, &st.unrecord, &failed_keys)?;
        fault::point("before-complete-commit");
        let durable = s.store.opts.synchronous == crate::core::options::Synchronous::Full;
        let states = run::end(&mut tx, st, &ends, now, durable)?;
        if states.len() != ends.len() {
            // A run lost its lease after the fence (a stall past the
            // lease): its work must not commit, and it cannot be told from
            // the others' in this transaction. All of it is undone.
            drop(tx);
            return Err(Error::LeaseLost {
                job_id: ends
                    .iter()
                    .find(|e| !states.iter().any(|(id, _, _)| *id == e.job_id))
                    .map_or(0, |e| e.job_id),
                detail: "its lease was lost during the batch; the batch was rolled back".into(),
            });
        }
        // Their dependents, in the same commit: of the jobs that have any
        // (a queue without workflows has none, and runs no statement here).
        let with_dependents = |id: i64| states.iter().any(|(j, _, has)| *j == id && *has);
        let ended: Vec<(i64, &str, JobState)> = runs
            .iter()
            .filter(|r| with_dependents(r.ctx.id))
            .filter_map(|r| Some((r.ctx.id, r.ctx.key.as_str(), r.end.as_ref()?.state)))
            .collect();
        let unblocked = crate::postgres::workflow::ended(&mut tx, &ended, now)?;
        tx.commit().map_err(crate::postgres::conn::write_err)?;
        if unblocked > 0 {
            s.notify();
            s.store.notifier.jobs();
        }
        Ok(())
    }

    /// Logs a run's end and lets go of its job.
    pub(super) fn finish(&self, r: &Run) {
        let s = &self.s;
        let ms = r.t0.elapsed().as_millis() as u64;
        match &r.end {
            Some(end) => {
                log_finished(&r.ctx, end, ms);
                if end.outbox_added > 0 {
                    s.notify_outbox();
                    s.store.notifier.outbox();
                }
            }
            None => log_not_recorded(
                &r.ctx,
                ms,
                "lease lost: the run no longer held the job; nothing of it was recorded",
            ),
        }
        s.in_flight.run_ended(r.ctx.id, r.started.attempt_id);
    }
}

/// Runs each held run's handler in its savepoint (or records why it did
/// not run: its prepare step failed, or its key was done before), in the
/// batch's transaction: each run's end, and the keys whose ledger rows
/// must go again (their runs failed).
fn run_handlers(
    tx: &mut crate::pg::Transaction<'_>,
    st: &Statements,
    runs: &mut [Run],
    held: &std::collections::HashMap<i64, bool>,
    now: Millis,
    limits: Limits,
) -> Result<(Vec<End>, Vec<String>)> {
    let mut ends = Vec::with_capacity(runs.len());
    let mut failed_keys = Vec::new();
    for r in runs.iter_mut() {
        if let Some(Err(PrepareStop::Stopped { why, job_id })) = &r.prepared {
            // Stopped from outside (its job cancelled, or taken back):
            // this run records nothing, and the fence left it out.
            r.end = lifecycle::stopped_end(*why, *job_id).ok();
            r.prepared = None;
            continue;
        }
        let Some(&ledger_new) = held.get(&r.started.id) else {
            // The lease was lost (it expired, another process took the
            // job over): nothing of this run is recorded.
            continue;
        };
        let Some(prepared) = r.prepared.take() else {
            return Err(Error::Internal(format!(
                "job {}: its run was applied twice in one batch",
                r.ctx.id
            )));
        };
        let mut output = None;
        let run = Charged::of(&r.ctx);
        let (end, job) = match prepared {
            Err(stop) => match failure(stop, r.backoff_at) {
                Failure::Record(outcome, msg, next) => failed(outcome, msg, next, run, now),
                // Taken care of above.
                Failure::Stopped(end) => {
                    r.end = end.ok();
                    continue;
                }
            },
            Ok(_) if !ledger_new => {
                let end = RunEnd {
                    outcome: AttemptOutcome::Duplicate,
                    state: JobState::Succeeded,
                    error: Some(DUPLICATE_RUN.into()),
                    retry_at: None,
                    outbox_added: 0,
                    discarded: false,
                    unblocked: 0,
                };
                (end, JobEnd::succeeded(run, now))
            }
            Ok(prepared) => {
                let (end, job, out) = apply_one(tx, st, r, prepared, now, limits)?;
                if end.outcome != AttemptOutcome::Succeeded {
                    failed_keys.push(r.ctx.key.clone());
                }
                output = out;
                (end, job)
            }
        };
        ends.push(End {
            job_id: r.started.id,
            attempt_id: r.started.attempt_id,
            outcome: end.outcome.as_str(),
            error: end.error.as_deref().map(cap_error),
            job,
            output,
        });
        r.end = Some(end);
    }
    Ok((ends, failed_keys))
}

/// Runs one handler in its savepoint inside the batch's transaction, and
/// judges its result: its writes kept (released) when it said `Done`,
/// rolled back to its savepoint otherwise. An error ends the whole batch.
fn apply_one(
    tx: &mut crate::pg::Transaction<'_>,
    st: &Statements,
    r: &Run,
    prepared: Prepared,
    now: Millis,
    limits: Limits,
) -> Result<(RunEnd, JobEnd, Option<String>)> {
    if !r.ctx.signal.resume() {
        // Its timeout ran out before its apply step could start: the step
        // does not run (it could not be abandoned once started).
        let error = r.ctx.signal.timed_out();
        let next = Next::RetryAt(r.backoff_at);
        let (end, job) = failed(
            AttemptOutcome::Failed,
            error,
            next,
            Charged::of(&r.ctx),
            now,
        );
        return Ok((end, job, None));
    }
    let mut jtx = PgJobTx {
        tx,
        job: &r.ctx,
        now,
        outbox_max_attempts: limits.outbox_max_attempts,
        outbox_add: &st.outbox_add,
        outbox_added: 0,
        savepoint: Savepoint::NotOpened,
    };
    let handler = r.handler.clone();
    let result = catch_unwind(AssertUnwindSafe(|| handler.apply(&mut jtx, prepared)));
    let (savepoint, added) = (jtx.savepoint, jtx.outbox_added);
    if savepoint == Savepoint::Failed {
        return Err(Error::Aborted(format!(
            "job {}: its savepoint could not be opened; the batch was rolled back",
            r.ctx.id
        )));
    }
    let opened = savepoint == Savepoint::Open;
    // An apply step that returned past its deadline is rolled back,
    // whatever it said: a run never completes after its timeout.
    let verdict = if r.ctx.signal.overran() {
        let error = r.ctx.signal.timed_out();
        Verdict::Failed(AttemptOutcome::Failed, error, Next::RetryAt(r.backoff_at))
    } else {
        judge(result, now, r.backoff_at, limits.max_output)
    };
    if let Verdict::Done(output) = &verdict {
        if !opened || tx.batch_execute(RELEASE_RUN).is_ok() {
            let end = RunEnd {
                outcome: AttemptOutcome::Succeeded,
                state: JobState::Succeeded,
                error: None,
                retry_at: None,
                outbox_added: added,
                discarded: false,
                unblocked: 0,
            };
            let job = JobEnd::succeeded(Charged::of(&r.ctx), now);
            return Ok((end, job, output.clone()));
        }
    }
    let (outcome, msg, next) = match verdict {
        Verdict::Failed(o, m, n) => (o, m, n),
        // Done, but its savepoint does not release: one of its statements
        // failed and the handler went on.
        Verdict::Done(_) => (
            AttemptOutcome::Failed,
            "the handler's SQL failed (the transaction was aborted) but it returned Done"
                .to_string(),
            Next::RetryAt(r.backoff_at),
        ),
    };
    if opened {
        tx.batch_execute(&format!("{ROLLBACK_RUN}; {RELEASE_RUN}"))
            .map_err(crate::postgres::conn::read_err)?;
    }
    let (outcome, msg, next) = match next {
        Next::Snooze { .. } => {
            let snoozed: i64 = tx
                .query_typed_one(SNOOZES, &[(&r.ctx.id, Type::INT8)])
                .map_err(crate::postgres::conn::read_err)?
                .get(0);
            lifecycle::snooze(snoozed, msg, next)
        }
        _ => (outcome, msg, next),
    };
    let (end, job) = failed(outcome, msg, next, Charged::of(&r.ctx), now);
    Ok((end, job, None))
}

/// How many runs of a job snoozed so far (asked only when one snoozes).
const SNOOZES: &str = "SELECT count(*) FROM attempts WHERE job_id = $1 AND outcome = 'snoozed'";

/// The queue's limits a handler's run is held to.
#[derive(Clone, Copy)]
struct Limits {
    outbox_max_attempts: i64,
    max_output: usize,
}

/// How a failed run of `run`'s charge ends, as the core decides: the run's
/// end, and what its job's row takes.
fn failed(
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
    run: Charged,
    now: Millis,
) -> (RunEnd, JobEnd) {
    let job = JobEnd::failed(run, next, &msg, now);
    let end = RunEnd::failed(outcome, &job, matches!(next, Next::Discard), msg);
    (end, job)
}
