//! A run's decisions, the same on both engines: what a handler's result
//! means for its job (done, or failed with an outcome, an error and what
//! comes next), what a run that stopped before its apply step records,
//! what its job's row then takes (`job_end`), and the messages those runs
//! leave. Writes no table.

use std::time::Duration;

use crate::core::attempt::AttemptOutcome;
use crate::core::cancel::Stop;
use crate::core::handler::{panic_message, Outcome, PrepareStop};
use crate::core::job::JobState;
use crate::core::time::Millis;
use crate::error::{Error, Result};

mod job_end;
pub(crate) use job_end::{Charged, JobEnd};

/// How a run ended, as recorded.
#[derive(Debug, Clone)]
pub(crate) struct RunEnd {
    pub outcome: AttemptOutcome,
    pub state: JobState,
    pub error: Option<String>,
    /// New outbox rows written by the run (0 unless it succeeded).
    pub outbox_added: usize,
    /// When it runs again, if it was requeued.
    pub retry_at: Option<Millis>,
    /// The run said the job must not run again (`Outcome::Discard`, or a
    /// payload that does not decode): dead whatever its attempts left.
    pub discarded: bool,
    /// Dependents its end made `queued` (their last dependency succeeded).
    pub unblocked: usize,
}

impl RunEnd {
    /// A failed run's end, its job's row having taken `job`; `error` as
    /// the run's log line gives it.
    pub(crate) fn failed(
        outcome: AttemptOutcome,
        job: &JobEnd,
        discarded: bool,
        error: String,
    ) -> RunEnd {
        RunEnd {
            outcome,
            state: job.state,
            error: Some(error),
            outbox_added: 0,
            retry_at: job.retry_at(),
            discarded,
            unblocked: 0,
        }
    }
}

/// What to do with a failed run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Next {
    /// Requeue at this time if attempts remain, else dead.
    RetryAt(Millis),
    /// Dead now, whatever the attempts.
    Discard,
    /// Queued again at `at`, the attempt given back (the handler snoozed):
    /// the engine first asks [`snooze`] whether the job may; if not, it is
    /// a failure retried at `or_retry_at`.
    Snooze { at: Millis, or_retry_at: Millis },
}

/// What the handler returned (or how it panicked), run to completion.
pub(crate) type HandlerResult =
    std::thread::Result<std::result::Result<Outcome, crate::core::handler::HandlerError>>;

/// How a run that ran to its end (or panicked) turned out.
pub(crate) enum Verdict {
    /// The handler said `Done`, with this output (JSON) if it gave one.
    Done(Option<String>),
    /// Anything else: the attempt's outcome, its error text and what comes
    /// next for the job.
    Failed(AttemptOutcome, String, Next),
}

/// What a handler's result means for its run: done, or failed with an
/// outcome, an error and what comes next for the job.
/// An output over `max_output` bytes fails the run for good: the same
/// value would be too large again.
pub(crate) fn judge(
    result: HandlerResult,
    now: Millis,
    backoff_at: Millis,
    max_output: usize,
) -> Verdict {
    let (outcome, error, next) = match result {
        Ok(Ok(Outcome::Done)) => return Verdict::Done(None),
        Ok(Ok(Outcome::DoneWith(out))) if out.0.len() <= max_output => {
            return Verdict::Done(Some(out.0))
        }
        Ok(Ok(Outcome::DoneWith(out))) => (
            AttemptOutcome::Failed,
            format!(
                "discarded: the job's output is {} bytes, over the limit of {max_output} bytes",
                out.0.len()
            ),
            Next::Discard,
        ),
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
            Next::RetryAt(later(now, d)),
        ),
        Ok(Ok(Outcome::Snooze(d))) => (
            AttemptOutcome::Snoozed,
            format!("snoozed for {}", crate::core::time::format_duration(d)),
            Next::Snooze {
                at: later(now, d),
                or_retry_at: backoff_at,
            },
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

/// `now` plus `d`, kept far from overflow.
fn later(now: Millis, d: std::time::Duration) -> Millis {
    now.saturating_add(d.as_millis().min(i64::MAX as u128 / 2) as i64)
}

/// Whether a snoozing run may give its attempt back: `snoozed` is how many
/// runs of the job snoozed before this one. Past
/// [`Outcome::MAX_SNOOZES`] the snooze is charged as a failed attempt
/// (retried after the backoff, or dead when out of attempts), so a job
/// that is never ready cannot hold the queue for ever.
pub(crate) fn snooze(snoozed: i64, error: String, next: Next) -> (AttemptOutcome, String, Next) {
    let Next::Snooze { or_retry_at, .. } = next else {
        return (AttemptOutcome::Failed, error, next);
    };
    if snoozed < Outcome::MAX_SNOOZES {
        return (AttemptOutcome::Snoozed, error, next);
    }
    (
        AttemptOutcome::Failed,
        format!(
            "{error}, but it snoozed {snoozed} times, the most a job may: \
             counted as a failed attempt"
        ),
        Next::RetryAt(or_retry_at),
    )
}

/// What becomes of a run that stopped before its apply step.
pub(crate) enum Failure {
    /// Its run records this: the attempt's outcome, its error, what comes
    /// next for the job.
    Record(AttemptOutcome, String, Next),
    /// The run was stopped from outside and records nothing (the cancel's
    /// commit ended it, or it no longer holds its job): how it ended.
    Stopped(Result<RunEnd>),
}

/// What a run that stopped before its apply step records: a payload that
/// does not decode (or a step's result over the cap) is discarded at once;
/// a failed, panicking or timed-out prepare step retries after the
/// backoff; a run stopped from outside records nothing.
pub(crate) fn failure(stop: PrepareStop, backoff_at: Millis) -> Failure {
    let (outcome, msg, next) = match stop {
        PrepareStop::Hopeless(msg) => (AttemptOutcome::Failed, msg, Next::Discard),
        PrepareStop::Failed(msg) | PrepareStop::TimedOut(msg) => {
            (AttemptOutcome::Failed, msg, Next::RetryAt(backoff_at))
        }
        PrepareStop::Panicked(msg) => (AttemptOutcome::Panicked, msg, Next::RetryAt(backoff_at)),
        PrepareStop::Stopped { why, job_id } => return Failure::Stopped(stopped_end(why, job_id)),
    };
    Failure::Record(outcome, msg, next)
}

/// How a run stopped from outside ended, as its log line says it: its
/// job cancelled (the cancel's commit recorded it), or not recorded.
pub(crate) fn stopped_end(why: Stop, job_id: i64) -> Result<RunEnd> {
    match why {
        Stop::Cancelled => Ok(RunEnd {
            outcome: AttemptOutcome::Cancelled,
            state: JobState::Cancelled,
            error: Some(CANCELLED_WHILE_RUNNING.into()),
            outbox_added: 0,
            retry_at: None,
            discarded: false,
            unblocked: 0,
        }),
        Stop::Lost | Stop::TimedOut => Err(Error::LeaseLost {
            job_id,
            detail: "the run no longer holds its job; nothing of it was recorded".into(),
        }),
    }
}

/// The error of a run whose timeout ran out: "timed out after 30s".
pub(crate) fn timed_out(timeout: Duration) -> String {
    format!(
        "timed out after {}",
        crate::core::time::exact_duration(timeout)
    )
}

/// A job's `last_error`, and its run's error, when an operator cancelled
/// it while it ran.
pub(crate) const CANCELLED_WHILE_RUNNING: &str = "cancelled while running";

/// Why a run ended as a duplicate: its key's work committed before.
pub(crate) const DUPLICATE_RUN: &str =
    "duplicate: the ledger already holds this key, the work was done before";

/// Why a job's run was recorded `abandoned`: its lease expired.
pub(crate) const ABANDONED_RUN: &str =
    "abandoned: the lease expired (the process died or the run hung past its lease)";

/// A job's `last_error` once an abandoned run sent it back to `queued`.
pub(crate) const ABANDONED_JOB: &str = "abandoned: the lease expired";

/// Why an effect's attempt was recorded `abandoned`, and its row's
/// `last_error`: the effect may have reached the world, so it counts.
pub(crate) const ABANDONED_EFFECT: &str = "abandoned: the lease expired (the process died or \
     hung during the effect); the effect may have been performed";

/// Why a run or an effect was given back when its runtime stopped.
pub(crate) const RELEASED_AT_SHUTDOWN: &str = "released at shutdown";

/// An outbox row's `last_error` when its effect was given back at the stop.
pub(crate) const EFFECT_RELEASED_AT_SHUTDOWN: &str =
    "released at shutdown while the effect was running";

/// Why a run was given back, uncharged, when the write recording it failed
/// through no fault of the job (`cause`: the failure).
pub(crate) fn released_after_failed_write(cause: &str) -> String {
    format!("released uncharged: the run's write failed ({cause})")
}

/// What becomes of a job whose lease expired (its process died, or its run
/// hung past the lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Claimed and never started: back to `queued`, nothing recorded,
    /// nothing charged.
    Unclaimed,
    /// A run cut short: recorded `abandoned`, back to `queued` now,
    /// uncharged; `abandoned` counts the runs cut short so far.
    Requeued { abandoned: i64 },
    /// The run cut short that makes `max_abandoned`: taken for a poison pill
    /// that kills its process, the job is `dead` with `error`.
    Poisoned { abandoned: i64, error: String },
}

/// The decision for an expired lease: `started` says whether a run of the
/// job was under way (it has an attempt), `abandoned` how many runs of it
/// were cut short before this one.
pub(crate) fn on_expiry(started: bool, abandoned: i64, max_abandoned: i64) -> Expiry {
    if !started {
        return Expiry::Unclaimed;
    }
    let total = abandoned + 1;
    if total >= max_abandoned {
        Expiry::Poisoned {
            abandoned: total,
            error: poison_message(total),
        }
    } else {
        Expiry::Requeued { abandoned: total }
    }
}

/// The message a poison pill dies with.
pub(crate) fn poison_message(abandoned: i64) -> String {
    format!("abandoned {abandoned} times: the process died while running it (poison pill?)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snooze_gives_its_attempt_back_until_the_job_snoozed_the_most_it_may() {
        let snoozing: HandlerResult = Ok(Ok(Outcome::Snooze(std::time::Duration::from_secs(60))));
        let Verdict::Failed(outcome, error, next) = judge(snoozing, 1_000, 5_000, 10) else {
            panic!("a snooze is not judged a failure to commit");
        };
        assert_eq!(
            (outcome, error.as_str()),
            (AttemptOutcome::Snoozed, "snoozed for 1m")
        );
        assert!(matches!(
            next,
            Next::Snooze {
                at: 61_000,
                or_retry_at: 5_000
            }
        ));
        let (o, _, kept) = snooze(Outcome::MAX_SNOOZES - 1, error.clone(), next);
        assert_eq!(o, AttemptOutcome::Snoozed);
        assert!(matches!(kept, Next::Snooze { at: 61_000, .. }));
        let (o, msg, next) = snooze(Outcome::MAX_SNOOZES, error, next);
        assert_eq!(o, AttemptOutcome::Failed);
        assert!(matches!(next, Next::RetryAt(5_000)));
        assert!(msg.contains("snoozed 100 times"), "{msg}");
    }

    #[test]
    fn a_timeout_is_said_exactly() {
        let t = |ms| timed_out(Duration::from_millis(ms));
        assert_eq!(t(300), "timed out after 300ms");
        assert_eq!(t(1500), "timed out after 1500ms");
        assert_eq!(t(30_000), "timed out after 30s");
        assert_eq!(t(90_000), "timed out after 1m30s");
        assert_eq!(t(7_200_000), "timed out after 2h");
    }

    #[test]
    fn an_expired_lease_requeues_until_the_abandoned_runs_make_a_poison_pill() {
        assert_eq!(on_expiry(false, 2, 3), Expiry::Unclaimed);
        assert_eq!(on_expiry(true, 0, 3), Expiry::Requeued { abandoned: 1 });
        assert_eq!(on_expiry(true, 1, 3), Expiry::Requeued { abandoned: 2 });
        assert_eq!(
            on_expiry(true, 2, 3),
            Expiry::Poisoned {
                abandoned: 3,
                error: poison_message(3)
            }
        );
        assert!(matches!(
            on_expiry(true, 0, 1),
            Expiry::Poisoned { abandoned: 1, .. }
        ));
    }
}
