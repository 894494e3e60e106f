//! A run's decisions, the same on both engines: what a handler's result
//! means for its job (done, or failed with an outcome, an error and what
//! comes next), what a run that stopped before its apply step records, and
//! the messages those runs leave. Writes no table.

use crate::core::attempt::AttemptOutcome;
use crate::core::handler::{panic_message, Outcome, PrepareStop};
use crate::core::time::Millis;

/// What to do with a failed run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Next {
    /// Requeue at this time if attempts remain, else dead.
    RetryAt(Millis),
    /// Dead now, whatever the attempts.
    Discard,
}

/// What the handler returned (or how it panicked), run to completion.
pub(crate) type HandlerResult =
    std::thread::Result<std::result::Result<Outcome, crate::core::handler::HandlerError>>;

/// How a run that ran to its end (or panicked) turned out.
pub(crate) enum Verdict {
    /// The handler said `Done`.
    Done,
    /// Anything else: the attempt's outcome, its error text and what comes
    /// next for the job.
    Failed(AttemptOutcome, String, Next),
}

/// What a handler's result means for its run: done, or failed with an
/// outcome, an error and what comes next for the job.
pub(crate) fn judge(result: HandlerResult, now: Millis, backoff_at: Millis) -> Verdict {
    let (outcome, error, next) = match result {
        Ok(Ok(Outcome::Done)) => return Verdict::Done,
        Ok(Ok(Outcome::Retry(msg))) => (
            AttemptOutcome::Failed,
            format!("retry: {msg}"),
            Next::RetryAt(backoff_at),
        ),
        Ok(Ok(Outcome::RetryAfter(d, msg))) => (
            AttemptOutcome::Failed,
            format!(
                "retry after {}: {msg}",
                crate::core::time::format_duration(d)
            ),
            Next::RetryAt(now.saturating_add(d.as_millis().min(i64::MAX as u128 / 2) as i64)),
        ),
        Ok(Ok(Outcome::Discard(msg))) => (
            AttemptOutcome::Failed,
            format!("discarded: {msg}"),
            Next::Discard,
        ),
        Ok(Err(e)) => (
            AttemptOutcome::Failed,
            e.to_string(),
            Next::RetryAt(backoff_at),
        ),
        Err(p) => (
            AttemptOutcome::Panicked,
            panic_message(p.as_ref()),
            Next::RetryAt(backoff_at),
        ),
    };
    Verdict::Failed(outcome, error, next)
}

/// What a run that stopped before its apply step records: a payload that
/// does not decode is discarded at once; a failed or panicking prepare
/// step retries after the backoff.
pub(crate) fn failure(stop: PrepareStop, backoff_at: Millis) -> (AttemptOutcome, String, Next) {
    match stop {
        PrepareStop::BadPayload(msg) => (AttemptOutcome::Failed, msg, Next::Discard),
        PrepareStop::Failed(msg) => (AttemptOutcome::Failed, msg, Next::RetryAt(backoff_at)),
        PrepareStop::Panicked(msg) => (AttemptOutcome::Panicked, msg, Next::RetryAt(backoff_at)),
    }
}
