//! A run's start on a file: a light commit (the attempt row, the job fenced
//! on it) before any of its user code, then its apply step on the writer,
//! handed the [`Started`] run by value in the same writer cycle — one path
//! for the runs a claim starts ([`apply_in`]) and the apply-only jobs a
//! worker starts ([`start_job`], through [`Writer::start`]). A job with a
//! prepare step keeps the same three steps with its prepare step between
//! them: started (its own light commit), prepared on its worker, its apply
//! step handed over. Writes `jobs` and `attempts` (the claim module) and
//! what an apply step writes (the run module), on the writer.
//!
//! [`Writer::start`]: crate::sqlite::writer::Writer::start

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use crate::core::backoff::Rng;
use crate::core::handler::{JobContext, Prepared};
use crate::core::lifecycle::{failure, Charged, Failure, RunEnd};
use crate::core::time::Millis;
use crate::driver::handler::ErasedHandler;
use crate::driver::run as lifecycle_run;
use crate::driver::runner::Runner;
use crate::error::Result;
use crate::fault;
use crate::sqlite::claim::{self, Claimed, Started};
use crate::sqlite::run::{self, ApplyInput, Within};
use crate::sqlite::writer::Cycle;
use crate::sqlite::Sqlite;

use super::finish::submit_fail;
use super::pending::{Pending, Run, Start};
use super::Pipe;

/// Who runs a run on the writer: its handler, and the worker its attempt
/// row names.
pub(crate) type Worked = (Arc<dyn ErasedHandler<Sqlite>>, String);

/// Once a run's start committed, before any of its user code: counts it in
/// flight under its attempt (its lease is renewed, a stop gives it back;
/// `watched`: the watcher stops it if its job is cancelled) and logs "job
/// started". Returns its context.
fn on_started(
    s: &Arc<Pipe>,
    id: i64,
    kind: &str,
    st: &Started,
    worker: &str,
    watched: bool,
) -> JobContext {
    fault::point("after-start-commit");
    let ctx = Run::context(s, id, kind, st);
    s.in_flight
        .started(id, st.attempt_id, watched.then_some(&ctx.signal));
    lifecycle_run::log_started(&ctx, worker);
    ctx
}

/// The apply step of a run without a prepare step, on the writer once its
/// start committed: decode the payload, run the handler inside the job's
/// transaction, record completion or failure.
#[allow(clippy::too_many_arguments)]
fn apply(
    conn: &Connection,
    sh: &Arc<Pipe>,
    handler: &dyn ErasedHandler<Sqlite>,
    id: i64,
    kind: &str,
    worker: &str,
    st: Started,
    backoff_unit: f64,
) -> Result<RunEnd> {
    let ctx = on_started(sh, id, kind, &st, worker, false);
    let now = sh.now();
    let backoff_at = lifecycle_run::backoff_at(&sh.cfg.backoff, &ctx, backoff_unit, now);
    fault::point("in-handler");
    let decoded = lifecycle_run::prepare(handler, &ctx, &st.payload);
    match decoded {
        Ok(prepared) => {
            let r = run::apply(
                conn,
                ApplyInput {
                    handler,
                    ctx,
                    attempt_id: st.attempt_id,
                    prepared,
                    outbox_max_attempts: sh.cfg.outbox_max_retries as i64 + 1,
                    max_output: sh.max_output,
                    backoff_at,
                    interrupts: sh.writer.interrupts(),
                },
                now,
            );
            fault::point("before-complete-commit");
            r
        }
        Err(stop) => match failure(stop, backoff_at) {
            Failure::Record(outcome, msg, next) => run::fail(
                conn,
                id,
                st.attempt_id,
                Charged::of(&ctx),
                outcome,
                &msg,
                next,
                now,
                Within::SelfIsolated,
            ),
            Failure::Stopped(end) => end,
        },
    }
}

/// A run a claim just started (in its light transaction, `cycle`): hands
/// it to its apply step in the cycle's next transaction
/// ([`Cycle::apply`]). Its handler runs on the writer thread; its end is
/// seen by whichever worker receives the returned run.
pub(crate) fn apply_in(
    cycle: &mut Cycle,
    sh: &Arc<Pipe>,
    c: Claimed,
    st: Started,
    (handler, worker): Worked,
    unit: f64,
    now: Millis,
) -> Run {
    let ctx = Run::context(sh, c.id, &c.kind, &st);
    let attempt_id = st.attempt_id;
    let sh2 = sh.clone();
    let rx = cycle.apply(st, move |conn, st| {
        apply(
            conn,
            &sh2,
            handler.as_ref(),
            c.id,
            &c.kind,
            &worker,
            st,
            unit,
        )
    });
    Run::new(sh, rx, ctx, attempt_id, (unit, now), Instant::now())
}

/// Starts a claimed job. Without a prepare step no user code runs on the
/// worker: its start and its apply step go to the writer as one operation
/// ([`Writer::start`](crate::sqlite::writer::Writer::start)), which the
/// worker does not wait for, going on with its next job. With one, see
/// [`start_and_prepare`]. None when it has no handler here, or did not
/// start.
pub(crate) fn start_job(
    s: &Arc<Pipe>,
    claimed: &Claimed,
    worker: &str,
    rng: &mut Rng,
    runner: &mut Runner,
) -> Option<Pending> {
    let handler = s.handlers.get(&claimed.kind).cloned()?;
    if handler.has_prepare() {
        return start_and_prepare(s, claimed, worker, rng, runner, handler);
    }
    let (id, rated, w) = (claimed.id, claimed.rated, worker.to_string());
    let (owner, clock) = (s.owner.clone(), s.store.clock.clone());
    let start = move |conn: &Connection| claim::start(conn, id, &owner, &w, rated, clock.now());
    let backoff_unit = rng.unit();
    let (sh, kind, w) = (s.clone(), claimed.kind.clone(), worker.to_string());
    // A suspect (a run of it was cut short by a crash: perhaps a poison
    // pill) runs in a writer cycle of its own, so that if it kills the
    // process again no healthy job's run is started and unfinished with it.
    let suspect = claimed.abandoned > 0;
    let (started, applied) = s.writer.start(suspect, start, move |conn, st| {
        apply(conn, &sh, handler.as_ref(), id, &kind, &w, st, backoff_unit)
    });
    Some(Pending::Start(Start {
        id,
        kind: claimed.kind.clone(),
        started,
        applied,
        backoff_unit,
        t0: Instant::now(),
    }))
}

/// A job with a prepare step: starts it (a light commit waited for here,
/// before any user code runs, so a crash inside the prepare step is seen
/// afterwards), runs its prepare step on this thread and hands its apply
/// step (or its failure) to the writer.
fn start_and_prepare(
    s: &Arc<Pipe>,
    claimed: &Claimed,
    worker: &str,
    rng: &mut Rng,
    runner: &mut Runner,
    handler: Arc<dyn ErasedHandler<Sqlite>>,
) -> Option<Pending> {
    let id = claimed.id;
    let started = start_here(s, id, worker, claimed.rated)?;
    let ctx = on_started(s, id, &claimed.kind, &started, worker, true);
    let t0 = Instant::now();
    fault::point("in-handler");
    s.preparing.fetch_add(1, Ordering::SeqCst);
    let prepared = lifecycle_run::prepare_on(runner, &handler, &ctx, &started.payload);
    s.preparing.fetch_sub(1, Ordering::SeqCst);
    let attempt_id = started.attempt_id;
    let backoff_at = lifecycle_run::backoff_at(&s.cfg.backoff, &ctx, rng.unit(), s.now());
    let rx = match prepared {
        Ok(prepared) => apply_prepared(s, handler, ctx.clone(), attempt_id, prepared, backoff_at),
        Err(stop) => match failure(stop, backoff_at) {
            Failure::Record(outcome, msg, next) => {
                submit_fail(s, id, attempt_id, Charged::of(&ctx), outcome, msg, next)
            }
            Failure::Stopped(end) => answered(end),
        },
    };
    Some(Pending::Run(Run {
        rx,
        ctx,
        attempt_id,
        backoff_at,
        t0,
    }))
}

/// The answer of a run that records nothing, already there.
fn answered(end: Result<RunEnd>) -> Receiver<Result<RunEnd>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = tx.send(end);
    rx
}

/// The start of a job with a prepare step, a light commit waited for on
/// this thread. None when the job is no longer ours, or the start failed
/// (then the claim goes back, uncharged).
fn start_here(s: &Arc<Pipe>, id: i64, worker: &str, rated: bool) -> Option<Started> {
    let (owner, w) = (s.owner.clone(), worker.to_string());
    let clock = s.store.clock.clone();
    match s
        .writer
        .run_light(move |conn| claim::start(conn, id, &owner, &w, rated, clock.now()))
    {
        Ok(started) => started,
        Err(e) => {
            s.start_failed(id, &e);
            None
        }
    }
}

/// Hands a prepared run's apply step to the writer, to run inside the
/// group transaction.
fn apply_prepared(
    s: &Arc<Pipe>,
    handler: Arc<dyn ErasedHandler<Sqlite>>,
    ctx: JobContext,
    attempt_id: i64,
    prepared: Prepared,
    backoff_at: Millis,
) -> Receiver<Result<RunEnd>> {
    let outbox_max_attempts = s.cfg.outbox_max_retries as i64 + 1;
    let interrupts = s.writer.interrupts().clone();
    let clock = s.store.clock.clone();
    let max_output = s.max_output;
    s.writer.submit_apply(move |conn| {
        let r = run::apply(
            conn,
            ApplyInput {
                handler: handler.as_ref(),
                ctx,
                attempt_id,
                prepared,
                outbox_max_attempts,
                backoff_at,
                interrupts: &interrupts,
                max_output,
            },
            clock.now(),
        );
        fault::point("before-complete-commit");
        r
    })
}
