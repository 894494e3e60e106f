//! One run's transaction: fence check, ledger insert, the handler's apply
//! step, completion and the attempt's outcome — or, on failure, the retry or
//! death of the job. Writes `jobs` (completion, failure), `processed_jobs`
//! (via ledger), `attempts` (via history) and whatever the handler writes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::Connection;

use crate::core::attempt::AttemptOutcome;
use crate::core::handler::{panic_message, JobContext, Prepared};
use crate::core::job::JobState;
use crate::core::lifecycle::judge;
use crate::core::lifecycle::HandlerResult;
use crate::core::lifecycle::Next;
use crate::core::lifecycle::Verdict;
use crate::core::lifecycle::{Charged, JobEnd, RunEnd, DUPLICATE_RUN};
use crate::core::time::Millis;
use crate::driver::handler::ErasedHandler;
use crate::driver::run::Savepoint;
use crate::error::{Error, Result};
use crate::sqlite::history::{self};
use crate::sqlite::ledger;
use crate::sqlite::tx::JobTx;
use crate::sqlite::tx::{RELEASE_RUN, ROLLBACK_RUN};
use crate::sqlite::workflow;
use crate::sqlite::writer::exec_cached;
use crate::sqlite::Sqlite;

/// Whether this run still holds the job: running, fenced on its attempt.
fn holds(conn: &Connection, job_id: i64, attempt_id: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND current_attempt = ?2 AND state = 'running')",
        )?
        .query_row(rusqlite::params![job_id, attempt_id], |r| r.get(0))?)
}

fn lease_lost(job_id: i64, attempt_id: i64) -> Error {
    Error::LeaseLost {
        job_id,
        detail: format!(
            "attempt {attempt_id} no longer holds the job (its lease expired or it was \
             released); its transaction was rolled back"
        ),
    }
}

/// A run's end: the job's columns as the core decided them
/// ([`JobEnd`]), its output, its lease let go. Fenced on the attempt.
const END: &str = "UPDATE jobs SET state = ?3, finished_at = ?4, attempts = ?5, \
     run_at = coalesce(?6, run_at), last_error = ?7, output = ?8, \
     lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL \
     WHERE id = ?1 AND current_attempt = ?2 AND state = 'running'";

/// Writes a run's end ([`END`]); false when the run no longer held the job.
fn end(
    conn: &Connection,
    job_id: i64,
    attempt_id: i64,
    job: &JobEnd,
    output: Option<&str>,
) -> Result<bool> {
    let n = conn.prepare_cached(END)?.execute(rusqlite::params![
        job_id,
        attempt_id,
        job.state.as_str(),
        job.finished_at,
        job.attempts,
        job.run_at,
        job.last_error,
        output
    ])?;
    Ok(n == 1)
}

/// Completes the job with its output, and queues the dependents whose
/// last dependency it was (returns how many).
fn complete(
    conn: &Connection,
    job_id: i64,
    attempt_id: i64,
    run: Charged,
    output: Option<&str>,
    now: Millis,
) -> Result<usize> {
    if !end(
        conn,
        job_id,
        attempt_id,
        &JobEnd::succeeded(run, now),
        output,
    )? {
        return Err(Error::LeaseLost {
            job_id,
            detail: "completion refused".into(),
        });
    }
    workflow::promote(conn, job_id)
}

/// Where a write runs, which decides how a step failing half-way is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Within {
    /// Inside the writer's savepoint for the operation: return the error,
    /// the writer rolls back to that savepoint.
    WritersSavepoint,
    /// Inside a self-isolated operation (see [`apply`]): end the
    /// transaction.
    SelfIsolated,
}

fn failure_not_recorded(job_id: i64) -> Error {
    Error::LeaseLost {
        job_id,
        detail: "failure not recorded, the run lost its lease".into(),
    }
}

/// Records a failed run and requeues or kills the job, as the core decides
/// ([`JobEnd::failed`]). Fenced on the attempt.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fail(
    conn: &Connection,
    job_id: i64,
    attempt_id: i64,
    run: Charged,
    outcome: AttemptOutcome,
    error: &str,
    next: Next,
    now: Millis,
    within: Within,
) -> Result<RunEnd> {
    let half_done = |e: Error| match within {
        Within::WritersSavepoint => e,
        Within::SelfIsolated => abort(conn, e),
    };
    let (outcome, error, next) = match next {
        Next::Snooze { .. } => {
            let snoozed = snoozes(conn, job_id).map_err(&half_done)?;
            crate::core::lifecycle::snooze(snoozed, error.to_string(), next)
        }
        _ => (outcome, error.to_string(), next),
    };
    let job = JobEnd::failed(run, next, &error, now);
    if !end(conn, job_id, attempt_id, &job, None)? {
        return Err(failure_not_recorded(job_id));
    }
    history::finish(conn, attempt_id, outcome, Some(&error), now).map_err(&half_done)?;
    workflow::ended(conn, job_id, job.state, now).map_err(half_done)?;
    let capped = job.last_error.clone().unwrap_or_default();
    Ok(RunEnd::failed(
        outcome,
        &job,
        matches!(next, Next::Discard),
        capped,
    ))
}

/// How many runs of the job snoozed so far.
fn snoozes(conn: &Connection, job_id: i64) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM attempts WHERE job_id = ?1 AND outcome = 'snoozed'")?
        .query_row([job_id], |r| r.get(0))?)
}

/// Everything the apply step needs besides the connection.
pub(crate) struct ApplyInput<'h> {
    pub handler: &'h dyn ErasedHandler<Sqlite>,
    pub ctx: JobContext,
    pub attempt_id: i64,
    pub prepared: Prepared,
    pub outbox_max_attempts: i64,
    /// When the job runs again if the handler asks for a plain retry.
    pub backoff_at: Millis,
    /// The writer's count of operations its watchdog interrupted
    /// ([`crate::sqlite::writer::Writer::interrupts`]): read around the handler, it
    /// says whether the time budget stopped this run.
    pub interrupts: &'h AtomicU64,
    /// The largest output the job may finish with, in bytes.
    pub max_output: usize,
}

/// The run's transaction: ledger row first, fenced on the attempt, the
/// handler's SQL and outbox rows, completion. Any other outcome rolls the
/// work back (ledger row included) and records the failure instead.
///
/// It isolates itself, so it must run as a self-isolated writer operation
/// ([`crate::sqlite::writer::Writer::submit_apply`]), without the writer's
/// savepoint: the handler's writes go inside a savepoint of their own,
/// opened the first time the handler reaches the connection, and the ledger
/// row — written before it — is deleted again when the run fails. A no-op
/// handler thus costs no savepoint: SQLite copies every page first written
/// inside a savepoint into its sub-journal, a cost every run paid when the
/// writer's savepoint was around each. The rule it keeps: when
/// it returns an error, the transaction holds nothing of this run (it
/// failed before its first write: the fence, or a lost lease), or it was
/// ended with a ROLLBACK (any step failing from the ledger row on), so that
/// the writer never commits half a run.
// Long: the run's steps in the order they write, each with the rollback
// its failure needs beside it.
pub(crate) fn apply(conn: &Connection, input: ApplyInput<'_>, now: Millis) -> Result<RunEnd> {
    let ApplyInput {
        handler,
        ctx,
        attempt_id,
        prepared,
        outbox_max_attempts,
        backoff_at,
        interrupts,
        max_output,
    } = input;
    // The fence, then the ledger row: written only while this attempt still
    // holds the job (both in this transaction, nothing between them). From
    // the first write on, a failing step ends the transaction (`abort`):
    // SQLite undoes a failed statement's own writes, but not the ones
    // before it, and there is no savepoint of the writer's to go back to.
    if !holds(conn, ctx.id, attempt_id)? {
        return Err(lease_lost(ctx.id, attempt_id));
    }
    if !ctx.signal.resume() {
        // Its timeout ran out before its apply step could start: the step
        // does not run (it could not be abandoned once started).
        let error = ctx.signal.timed_out();
        let next = Next::RetryAt(backoff_at);
        let (id, outcome) = (ctx.id, AttemptOutcome::Failed);
        return fail(
            conn,
            id,
            attempt_id,
            Charged::of(&ctx),
            outcome,
            &error,
            next,
            now,
            Within::SelfIsolated,
        );
    }
    if !ledger::record(conn, &ctx.key, ctx.id, now).map_err(|e| abort(conn, e))? {
        // Someone already did this key's work: do nothing, finish the job.
        return finish_duplicate(conn, ctx.id, attempt_id, Charged::of(&ctx), now);
    }
    let tx = JobTx {
        conn,
        job: &ctx,
        now,
        outbox_max_attempts,
        outbox_added: std::cell::Cell::new(0),
        savepoint: std::cell::Cell::new(Savepoint::NotOpened),
    };
    let interrupts_before = interrupts.load(Ordering::Acquire);
    let mut tx = tx;
    let result = catch_unwind(AssertUnwindSafe(|| handler.apply(&mut tx, prepared)));
    let outbox_added = tx.outbox_added.get();
    let savepoint = tx.savepoint.get();
    if conn.is_autocommit() {
        // The handler's SQL failed in a way that rolled the whole transaction
        // back (disk full, interrupted by the time budget): nothing of this
        // group survives; the writer tells the others.
        let interrupted = interrupts.load(Ordering::Acquire) != interrupts_before;
        return Err(rolled_back(&result, interrupted));
    }
    if savepoint == Savepoint::Failed {
        // The handler wrote outside any savepoint: its writes cannot be
        // told from its neighbours'.
        return Err(abort(
            conn,
            Error::Aborted(format!(
                "job {}: its savepoint could not be opened; the transaction was rolled back",
                ctx.id
            )),
        ));
    }
    // An apply step that returned past its deadline is rolled back,
    // whatever it said: a run never completes after its timeout.
    let verdict = if ctx.signal.overran() {
        let error = ctx.signal.timed_out();
        Verdict::Failed(AttemptOutcome::Failed, error, Next::RetryAt(backoff_at))
    } else {
        judge(result, now, backoff_at, max_output)
    };
    let (outcome, error, next) = match verdict {
        Verdict::Done(output) => {
            return finish_done(
                conn,
                ctx.id,
                attempt_id,
                Charged::of(&ctx),
                savepoint,
                outbox_added,
                output,
                now,
            )
        }
        Verdict::Failed(outcome, error, next) => (outcome, error, next),
    };
    // Undo the handler's writes and the ledger row, then record the failure.
    let undone = (|| {
        if savepoint == Savepoint::Open {
            exec_cached(conn, ROLLBACK_RUN)?;
            exec_cached(conn, RELEASE_RUN)?;
        }
        ledger::unrecord(conn, &ctx.key)
    })();
    undone.map_err(|e| abort(conn, e))?;
    fail(
        conn,
        ctx.id,
        attempt_id,
        Charged::of(&ctx),
        outcome,
        &error,
        next,
        now,
        Within::SelfIsolated,
    )
}

/// A key already in the ledger: the run records `duplicate` and completes
/// the job without the handler.
fn finish_duplicate(
    conn: &Connection,
    job: i64,
    attempt_id: i64,
    run: Charged,
    now: Millis,
) -> Result<RunEnd> {
    let finished = history::finish(
        conn,
        attempt_id,
        AttemptOutcome::Duplicate,
        Some(DUPLICATE_RUN),
        now,
    )
    .and_then(|_| complete(conn, job, attempt_id, run, None, now));
    let unblocked = finished.map_err(|e| abort(conn, e))?;
    Ok(RunEnd {
        outcome: AttemptOutcome::Duplicate,
        state: JobState::Succeeded,
        error: None,
        outbox_added: 0,
        retry_at: None,
        discarded: false,
        unblocked,
    })
}

/// The handler said `Done`: keep its writes, complete the job, record the
/// attempt as succeeded.
#[allow(clippy::too_many_arguments)]
fn finish_done(
    conn: &Connection,
    job: i64,
    attempt_id: i64,
    run: Charged,
    savepoint: Savepoint,
    outbox_added: usize,
    output: Option<String>,
    now: Millis,
) -> Result<RunEnd> {
    let done = (|| {
        if savepoint == Savepoint::Open {
            exec_cached(conn, RELEASE_RUN)?;
        }
        let unblocked = complete(conn, job, attempt_id, run, output.as_deref(), now)?;
        history::finish(conn, attempt_id, AttemptOutcome::Succeeded, None, now)?;
        Ok(unblocked)
    })();
    let unblocked = done.map_err(|e| abort(conn, e))?;
    Ok(RunEnd {
        outcome: AttemptOutcome::Succeeded,
        state: JobState::Succeeded,
        error: None,
        outbox_added,
        retry_at: None,
        discarded: false,
        unblocked,
    })
}

/// Why SQLite rolled the run's whole transaction back. `interrupted`: the
/// watchdog stopped one of its statements (the time budget), which is known
/// for a fact; otherwise the code in the handler's error, if it kept one. A
/// handler that panicked (a panic carries text, no code) or lost the code
/// leaves the cause unknown: the group is aborted and the run given back
/// uncharged, as for a full disk, while an over-budget run is charged, so
/// a handler that hangs and then panics cannot run forever.
fn rolled_back(result: &HandlerResult, interrupted: bool) -> Error {
    let (why, code) = match result {
        Ok(Err(e)) => (e.to_string(), sqlite_code(e.as_ref())),
        Err(p) => (
            format!("the handler panicked: {}", panic_message(p.as_ref())),
            None,
        ),
        Ok(Ok(_)) => ("the transaction was rolled back".to_string(), None),
    };
    let code = if interrupted {
        Some(rusqlite::ErrorCode::OperationInterrupted)
    } else {
        code
    };
    classify_rollback(&why, code)
}

/// Ends the transaction: a step failed after an earlier one of this run
/// wrote, and without a savepoint of the writer's around the run, only
/// ending it keeps half a run from being committed. The writer sees the
/// transaction gone and tells the group's other callers it was not
/// written. Only a failing disk, an interrupt or a corrupted row gets here.
fn abort(conn: &Connection, e: Error) -> Error {
    log::error!(target: "litejob", "a run's transaction failed half-way ({e}); rolling its group back");
    let _ = conn.execute_batch("ROLLBACK");
    if !conn.is_autocommit() {
        // A plain error would let the writer commit half a run: this one
        // tells it to end the whole transaction instead.
        return Error::HalfWritten(format!("{e}; and the transaction could not be rolled back"));
    }
    e
}

/// What rolled a run's whole transaction back, by SQLite's error code:
/// the time budget's interrupt, a full disk, or anything else (the group is
/// aborted, its callers retry).
fn classify_rollback(why: &str, code: Option<rusqlite::ErrorCode>) -> Error {
    match code {
        Some(rusqlite::ErrorCode::OperationInterrupted) => Error::Interrupted(format!(
            "the run's transaction ran past its time budget and was interrupted: {why}"
        )),
        Some(rusqlite::ErrorCode::DiskFull) => {
            Error::StorageFull(format!("storage full during the run's transaction: {why}"))
        }
        _ => Error::Aborted(format!("the run's transaction was rolled back: {why}")),
    }
}

/// The SQLite error code behind a handler's error: a `rusqlite::Error` it
/// passed on with `?`, or a litejob [`Error`] (from `JobTx::outbox`), found
/// anywhere in the error's chain of sources.
fn sqlite_code(e: &(dyn std::error::Error + 'static)) -> Option<rusqlite::ErrorCode> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(e) = e.downcast_ref::<rusqlite::Error>() {
            return e.sqlite_error_code();
        }
        // What a wrapper's `source()` may hand on instead of rusqlite's
        // error (an `#[error(transparent)]` skips a level).
        if let Some(e) = e.downcast_ref::<rusqlite::ffi::Error>() {
            return Some(e.code);
        }
        if let Some(e) = e.downcast_ref::<Error>() {
            // Classified already: the variant is the code.
            match e {
                Error::Interrupted(_) => return Some(rusqlite::ErrorCode::OperationInterrupted),
                Error::StorageFull(_) => return Some(rusqlite::ErrorCode::DiskFull),
                Error::Sqlite(e) => return e.sqlite_error_code(),
                _ => {}
            }
        }
        next = e.source();
    }
    None
}
