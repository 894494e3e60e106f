//! What a job's row takes when a run of it ends ([`JobEnd`]): its state,
//! finish time, attempts charged, next run time and last error, decided
//! here from the run's outcome and charge ([`Charged`]), and the same for
//! a run the reaper takes back ([`Expiry::job_end`]). Both engines write
//! these values as they are, fenced on the run's attempt. Writes no table.

use super::{Expiry, Next, ABANDONED_JOB};
use crate::core::attempt::cap_error;
use crate::core::handler::JobContext;
use crate::core::job::JobState;
use crate::core::time::Millis;

/// What a run was charged: its attempt number, which is its job's
/// `attempts` while the run holds the job (every end is fenced on the
/// run's `current_attempt`, and only the run's start charges), and the
/// job's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charged {
    pub attempt: i64,
    pub max_attempts: i64,
}

impl Charged {
    /// The charge of the run `ctx` describes.
    pub(crate) fn of(ctx: &JobContext) -> Charged {
        Charged {
            attempt: ctx.attempt,
            max_attempts: ctx.max_attempts,
        }
    }
}

/// The columns of a job's row that a run's end sets, besides letting go
/// of its lease (and, for a run, its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobEnd {
    pub state: JobState,
    /// When it finished: set for `succeeded` and `dead`, else NULL.
    pub finished_at: Option<Millis>,
    /// Its attempts charged after the end.
    pub attempts: i64,
    /// Its new `run_at`; None: left as it was.
    pub run_at: Option<Millis>,
    /// Its `last_error`, capped; None: NULL.
    pub last_error: Option<String>,
}

impl JobEnd {
    /// A run that succeeded, or found its key's work done before.
    pub(crate) fn succeeded(run: Charged, now: Millis) -> JobEnd {
        JobEnd {
            state: JobState::Succeeded,
            finished_at: Some(now),
            attempts: run.attempt,
            run_at: None,
            last_error: None,
        }
    }

    /// A run that failed with `error`, `next` being what comes of it once
    /// [`snooze`](super::snooze) decided: a snooze queues the job at its
    /// time and gives its attempt back; a discard, or a failure that used
    /// the last attempt, kills it (`run_at` still says when it would have
    /// run again, now for a discard); any other failure queues it at its
    /// retry time.
    pub(crate) fn failed(run: Charged, next: Next, error: &str, now: Millis) -> JobEnd {
        let last_error = Some(cap_error(error));
        let (state, attempts, run_at) = match next {
            Next::Snooze { at, .. } => (JobState::Queued, uncharged(run.attempt), at),
            Next::Discard => (JobState::Dead, run.attempt, now),
            Next::RetryAt(at) if run.attempt >= run.max_attempts => {
                (JobState::Dead, run.attempt, at)
            }
            Next::RetryAt(at) => (JobState::Queued, run.attempt, at),
        };
        JobEnd {
            state,
            finished_at: (state == JobState::Dead).then_some(now),
            attempts,
            run_at: Some(run_at),
            last_error,
        }
    }

    /// When the job runs again: its `run_at` if it went back to `queued`.
    pub(crate) fn retry_at(&self) -> Option<Millis> {
        self.run_at.filter(|_| self.state == JobState::Queued)
    }
}

/// A job's attempts once its run's attempt is given back (a snooze, a run
/// cut short, a release): one fewer, never below 0.
pub(crate) fn uncharged(attempts: i64) -> i64 {
    (attempts - 1).max(0)
}

impl Expiry {
    /// What the row of a job whose lease expired takes, its `attempts`
    /// being the row's: its `abandoned` count, and its end (a run cut
    /// short is given its attempt back, and the job goes back to `queued`
    /// now or, a poison pill, dies). None for a claim never started: only
    /// its lease goes.
    pub(crate) fn job_end(&self, attempts: i64, now: Millis) -> Option<(i64, JobEnd)> {
        match self {
            Expiry::Unclaimed => None,
            Expiry::Requeued { abandoned } => Some((
                *abandoned,
                JobEnd {
                    state: JobState::Queued,
                    finished_at: None,
                    attempts: uncharged(attempts),
                    run_at: Some(now),
                    last_error: Some(ABANDONED_JOB.to_string()),
                },
            )),
            Expiry::Poisoned { abandoned, error } => Some((
                *abandoned,
                JobEnd {
                    state: JobState::Dead,
                    finished_at: Some(now),
                    attempts: uncharged(attempts),
                    run_at: None,
                    last_error: Some(error.clone()),
                },
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{on_expiry, poison_message};
    use super::*;
    use crate::core::attempt::MAX_ERROR_BYTES;

    const NOW: Millis = 1_000;
    const SECOND: Charged = Charged {
        attempt: 2,
        max_attempts: 3,
    };
    const LAST: Charged = Charged {
        attempt: 3,
        max_attempts: 3,
    };

    #[test]
    fn a_success_finishes_the_job_and_clears_its_error() {
        let end = JobEnd::succeeded(SECOND, NOW);
        assert_eq!(
            end,
            JobEnd {
                state: JobState::Succeeded,
                finished_at: Some(NOW),
                attempts: 2,
                run_at: None,
                last_error: None,
            }
        );
        assert_eq!(end.retry_at(), None);
    }

    #[test]
    fn a_failure_retries_until_the_last_attempt_then_the_job_dies() {
        let retried = JobEnd::failed(SECOND, Next::RetryAt(5_000), "retry: later", NOW);
        assert_eq!(
            retried,
            JobEnd {
                state: JobState::Queued,
                finished_at: None,
                attempts: 2,
                run_at: Some(5_000),
                last_error: Some("retry: later".into()),
            }
        );
        assert_eq!(retried.retry_at(), Some(5_000));
        let dead = JobEnd::failed(LAST, Next::RetryAt(5_000), "boom", NOW);
        assert_eq!(
            (dead.state, dead.finished_at, dead.attempts, dead.run_at),
            (JobState::Dead, Some(NOW), 3, Some(5_000))
        );
        assert_eq!(dead.retry_at(), None);
    }

    #[test]
    fn a_discard_kills_the_job_whatever_its_attempts_left() {
        let first = Charged {
            attempt: 1,
            max_attempts: 10,
        };
        let end = JobEnd::failed(first, Next::Discard, "discarded: bad input", NOW);
        assert_eq!(
            (end.state, end.finished_at, end.attempts, end.run_at),
            (JobState::Dead, Some(NOW), 1, Some(NOW))
        );
        assert_eq!(end.last_error.as_deref(), Some("discarded: bad input"));
    }

    #[test]
    fn a_snooze_queues_the_job_at_its_time_and_gives_the_attempt_back() {
        let snooze = Next::Snooze {
            at: 61_000,
            or_retry_at: 5_000,
        };
        // Even on its last attempt: a snooze is not a failure.
        let end = JobEnd::failed(LAST, snooze, "snoozed for 1m", NOW);
        assert_eq!(
            end,
            JobEnd {
                state: JobState::Queued,
                finished_at: None,
                attempts: 2,
                run_at: Some(61_000),
                last_error: Some("snoozed for 1m".into()),
            }
        );
        assert_eq!(end.retry_at(), Some(61_000));
        assert_eq!(uncharged(0), 0);
    }

    #[test]
    fn a_failures_error_is_capped_in_the_row() {
        let long = "x".repeat(MAX_ERROR_BYTES * 2);
        let end = JobEnd::failed(SECOND, Next::RetryAt(5_000), &long, NOW);
        let kept = end.last_error.unwrap();
        assert!(kept.len() <= MAX_ERROR_BYTES, "{}", kept.len());
        assert!(kept.ends_with("bytes cut]"), "{kept}");
    }

    #[test]
    fn a_run_cut_short_gives_its_attempt_back_and_requeues_now_or_dies_a_poison_pill() {
        assert_eq!(on_expiry(false, 0, 3).job_end(1, NOW), None);
        assert_eq!(
            on_expiry(true, 0, 3).job_end(2, NOW),
            Some((
                1,
                JobEnd {
                    state: JobState::Queued,
                    finished_at: None,
                    attempts: 1,
                    run_at: Some(NOW),
                    last_error: Some(ABANDONED_JOB.into()),
                }
            ))
        );
        assert_eq!(
            on_expiry(true, 2, 3).job_end(1, NOW),
            Some((
                3,
                JobEnd {
                    state: JobState::Dead,
                    finished_at: Some(NOW),
                    attempts: 0,
                    run_at: None,
                    last_error: Some(poison_message(3)),
                }
            ))
        );
    }
}
