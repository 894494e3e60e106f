//! A run's end: waiting for its commit, recording what the writer could
//! not, logging it, letting go of the job. Writes `jobs` and `attempts`
//! (a failed run's record, a release) through the run and leases modules,
//! on the writer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::core::attempt::AttemptOutcome;
use crate::core::job::JobState;
use crate::core::lifecycle::{released_after_failed_write, Charged, Next, RunEnd};
use crate::core::time::Clock;
use crate::driver::run as lifecycle_run;
use crate::error::{Error, Result};
use crate::fault;
use crate::sqlite::leases;
use crate::sqlite::run::{self, Within};
use crate::sqlite::writer;

use super::pending::{Pending, Run, Start};
use super::Pipe;

/// Waits for a run's commit, handles what the writer could not record, logs
/// the run's end line and lets go of the job.
/// Returns how the run ended as recorded; `None` when it never started
/// (its claim was lost), an error when its start or its end could not be
/// recorded (the job went back, uncharged).
pub(crate) fn finish_job(s: &Arc<Pipe>, p: Pending) -> Option<Result<RunEnd>> {
    let run = match p {
        Pending::Run(r) => r,
        Pending::Start(Start {
            id,
            kind,
            started,
            applied,
            backoff_unit,
            t0,
        }) => match writer::wait(started) {
            Ok(Some(st)) => {
                let ctx = Run::context(s, id, &kind, &st);
                let backoff = (backoff_unit, s.now());
                Run::new(s, applied, ctx, st.attempt_id, backoff, t0)
            }
            other => {
                // Not started (the claim was lost, or the start was not
                // committed): nothing ran. Give the claim back if it is
                // still ours.
                let _ = writer::wait(applied);
                let failed = other.err().inspect(|e| s.start_failed(id, e));
                s.in_flight.forget_job(id);
                s.slot_freed();
                return failed.map(Err);
            }
        },
    };
    let end = finish_run(s, run);
    s.slot_freed();
    Some(end)
}

/// Waits for a started run's commit; an interrupted write is recorded as a
/// failed run, a transient one gives the job back uncharged.
fn finish_run(s: &Arc<Pipe>, r: Run) -> Result<RunEnd> {
    let Run {
        rx,
        ctx,
        attempt_id,
        backoff_at,
        t0,
    } = r;
    let id = ctx.id;
    let result = writer::wait(rx);
    if result.is_ok() {
        fault::point("after-complete-commit");
    }
    let result = match result {
        Err(Error::Interrupted(msg)) => fail_run(
            s,
            id,
            attempt_id,
            Charged::of(&ctx),
            AttemptOutcome::Failed,
            msg,
            Next::RetryAt(backoff_at),
        ),
        Err(e) if e.is_transient() => release_after_transient(s, id, attempt_id, e),
        other => other,
    };
    let ms = t0.elapsed().as_millis() as u64;
    match &result {
        Ok(end) => {
            lifecycle_run::log_finished(&ctx, end, ms);
            if end.outbox_added > 0 {
                s.notify_outbox();
            }
            if end.unblocked > 0 {
                s.notify();
            }
            if end.state != JobState::Queued {
                s.done_wakers.wake();
            }
        }
        Err(e) => lifecycle_run::log_not_recorded(&ctx, ms, &e.to_string()),
    }
    s.in_flight.run_ended(id, attempt_id);
    result
}

/// The write that records a failed run, as its own durable operation.
fn fail_op(
    clock: Clock,
    id: i64,
    attempt_id: i64,
    run: Charged,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> impl FnOnce(&rusqlite::Connection) -> Result<RunEnd> + Send + 'static {
    move |conn| {
        let (now, within) = (clock.now(), Within::WritersSavepoint);
        run::fail(conn, id, attempt_id, run, outcome, &msg, next, now, within)
    }
}

/// Hands the record of a failed run to the writer.
pub(crate) fn submit_fail(
    s: &Arc<Pipe>,
    id: i64,
    attempt_id: i64,
    run: Charged,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> Receiver<Result<RunEnd>> {
    s.writer.submit(fail_op(
        s.store.clock.clone(),
        id,
        attempt_id,
        run,
        outcome,
        msg,
        next,
    ))
}

/// Records a failed run on the writer and waits for its commit.
fn fail_run(
    s: &Arc<Pipe>,
    id: i64,
    attempt_id: i64,
    run: Charged,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> Result<RunEnd> {
    s.writer.run(fail_op(
        s.store.clock.clone(),
        id,
        attempt_id,
        run,
        outcome,
        msg,
        next,
    ))
}

/// The write failed for a reason that is not the job's fault (disk full,
/// busy past the timeout, a neighbour's rollback): give the job back
/// uncharged, retrying until the write goes through or the lease is gone.
fn release_after_transient(s: &Arc<Pipe>, id: i64, attempt_id: i64, e: Error) -> Result<RunEnd> {
    log::warn!(target: "litejob", job_id = id; "run of job {id} not recorded ({e}); releasing it");
    let mut delay = Duration::from_millis(50);
    let give_up = Instant::now() + s.cfg.lease;
    loop {
        let o = s.owner.clone();
        let why = e.to_string();
        let clock = s.store.clock.clone();
        match s.writer.run(move |conn| {
            leases::release(
                conn,
                id,
                &o,
                Some(attempt_id),
                &released_after_failed_write(&why),
                clock.now(),
            )
        }) {
            Ok(_) => return Err(e),
            Err(e2)
                if e2.is_transient()
                    && Instant::now() < give_up
                    && !s.stopping.load(Ordering::SeqCst) =>
            {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(_) => return Err(e),
        }
    }
}
