//! Starting a run: the start's light commit, the prepare step on the worker
//! and the apply step handed to the writer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::Receiver;

use crate::core::backoff::Rng;
use crate::core::handler::{JobContext, Prepared};
use crate::core::lifecycle::RunEnd;
use crate::core::time::Millis;
use crate::driver::handler::ErasedHandler;
use crate::error::{Error, Result};
use crate::fault;
use crate::sqlite::claim::{self, Claimed};
use crate::sqlite::run::{self, ApplyInput, Within};
use crate::sqlite::Sqlite;

use super::finish::submit_fail;
use super::pending::{context, Pending, Running};
use super::Pipe;
use crate::core::lifecycle::{failure, Failure};
use crate::driver::run as lifecycle_run;
use crate::driver::runner::Runner;

/// Once a run's start committed, before any of its user code: counts it in
/// flight under its attempt (its lease is renewed, a stop gives it back;
/// `watched`: the watcher stops it if its job is cancelled) and logs "job
/// started". Returns its context.
fn announce_start(
    s: &Arc<Pipe>,
    id: i64,
    kind: &str,
    st: &claim::Started,
    worker: &str,
    watched: bool,
) -> JobContext {
    fault::point("after-start-commit");
    let ctx = context(s, id, kind, st);
    s.in_flight
        .started(id, st.attempt_id, watched.then_some(&ctx.signal));
    lifecycle_run::log_started(&ctx, worker);
    ctx
}

/// The simple case, a handler with no prepare step: no user code runs on
/// the worker, so the worker hands both the start (a light commit) and the
/// apply step to the writer without waiting, and goes on with its next job.
/// The writer commits the start before it runs the apply (light operations
/// first, and this thread sent the start first), so a crash inside the
/// handler is still seen afterwards as an abandoned run.
fn begin_apply_only(
    s: &Arc<Pipe>,
    claimed: &Claimed,
    worker: &str,
    rng: &mut Rng,
    handler: Arc<dyn ErasedHandler<Sqlite>>,
) -> Pending {
    let slot: Arc<Mutex<Option<claim::Started>>> = Arc::new(Mutex::new(None));
    let (id, owner, w, rated) = (
        claimed.id,
        s.owner.clone(),
        worker.to_string(),
        claimed.rated,
    );
    let slot_w = slot.clone();
    let clock = s.store.clock.clone();
    let start = move |conn: &rusqlite::Connection| {
        let now = clock.now();
        let st = claim::start(conn, id, &owner, &w, rated, now)?;
        crate::driver::lock(&slot_w).clone_from(&st);
        Ok(st)
    };
    let backoff_unit = rng.unit();
    let (sh, kind, w) = (s.clone(), claimed.kind.clone(), worker.to_string());
    let apply = move |conn: &rusqlite::Connection| {
        let Some(st) = crate::driver::lock(&slot).take() else {
            return Err(Error::LeaseLost {
                job_id: id,
                detail: "not started".into(),
            });
        };
        apply_started(conn, &sh, handler.as_ref(), id, &kind, &w, st, backoff_unit)
    };
    // A suspect (a run of it was cut short by a crash: perhaps a poison
    // pill) runs in a writer cycle of its own, so that if it kills the
    // process again no healthy job's run is started and unfinished with it.
    let (start_rx, apply_rx) = s.writer.submit_pair(claimed.abandoned > 0, start, apply);
    Pending::Starting {
        id,
        kind: claimed.kind.clone(),
        start_rx,
        apply_rx,
        backoff_unit,
        t0: Instant::now(),
    }
}

/// The apply step of an apply-only run whose start committed (on the
/// writer, after that commit): decode the payload, run the handler inside
/// the job's transaction, record completion or failure.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_started(
    conn: &rusqlite::Connection,
    sh: &Arc<Pipe>,
    handler: &dyn ErasedHandler<Sqlite>,
    id: i64,
    kind: &str,
    worker: &str,
    st: claim::Started,
    backoff_unit: f64,
) -> Result<RunEnd> {
    let ctx = announce_start(sh, id, kind, &st, worker, false);
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

/// Starts a claimed job (a light commit, before any user code runs, so a
/// crash inside the handler is seen afterwards), runs its prepare step here
/// and hands its apply step (or its failure) to the writer.
pub(crate) fn begin_job(
    s: &Arc<Pipe>,
    claimed: &Claimed,
    worker: &str,
    rng: &mut Rng,
    runner: &mut Runner,
) -> Option<Pending> {
    let handler = s.handlers.get(&claimed.kind).cloned()?;
    if !handler.has_prepare() {
        return Some(begin_apply_only(s, claimed, worker, rng, handler));
    }
    let id = claimed.id;
    let started = start_run(s, id, worker, claimed.rated)?;
    let ctx = announce_start(s, id, &claimed.kind, &started, worker, true);
    let t0 = Instant::now();
    fault::point("in-handler");
    s.preparing.fetch_add(1, Ordering::SeqCst);
    let prepared = lifecycle_run::prepare_on(runner, &handler, &ctx, &started.payload);
    s.preparing.fetch_sub(1, Ordering::SeqCst);
    let attempt_id = started.attempt_id;
    let backoff_at = lifecycle_run::backoff_at(&s.cfg.backoff, &ctx, rng.unit(), s.now());
    let rx = match prepared {
        Ok(prepared) => submit_apply(s, handler, ctx.clone(), attempt_id, prepared, backoff_at),
        Err(stop) => match failure(stop, backoff_at) {
            Failure::Record(outcome, msg, next) => {
                submit_fail(s, id, attempt_id, outcome, msg, next)
            }
            Failure::Stopped(end) => answered(end),
        },
    };
    Some(Pending::Running(Running {
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

/// The run's start, a light commit of its own. None when the job is no
/// longer ours, or the start failed (then the claim goes back, uncharged).
fn start_run(s: &Arc<Pipe>, id: i64, worker: &str, rated: bool) -> Option<claim::Started> {
    let (owner, w) = (s.owner.clone(), worker.to_string());
    let clock = s.store.clock.clone();
    match s.writer.run_light(move |conn| {
        let now = clock.now();
        claim::start(conn, id, &owner, &w, rated, now)
    }) {
        Ok(started) => started,
        Err(e) => {
            s.start_failed(id, &e);
            None
        }
    }
}

/// Hands a prepared run's apply step to the writer, to run inside the
/// group transaction.
fn submit_apply(
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
