//! Attempts as data: one run of a job or of an effect ([`Attempt`]), how it
//! ended ([`AttemptOutcome`]), and the cap on a recorded error's length.
//! Writes no table.

use serde::Serialize;

use crate::core::time::Millis;

/// How a run ended. The same words as `attempts.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    /// Started, not finished (or the process died and nobody reaped it yet).
    Running,
    /// The work committed (job) or the effect returned Ok (outbox).
    Succeeded,
    /// The handler returned an error, retry or discard.
    Failed,
    /// The handler panicked.
    Panicked,
    /// The ledger already had the key: the work was done before.
    Duplicate,
    /// Cut short: the lease expired or the process died.
    Abandoned,
    /// Given back at shutdown without being charged.
    Released,
    /// The handler asked to run again later (`Outcome::Snooze`): rolled
    /// back, not charged.
    Snoozed,
    /// An operator cancelled the job while this run was under way
    /// ([`Admin::cancel_job`](crate::admin::Admin::cancel_job)): its work
    /// never commits.
    Cancelled,
}

impl AttemptOutcome {
    /// The word stored in `attempts.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Running => "running",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Panicked => "panicked",
            AttemptOutcome::Duplicate => "duplicate",
            AttemptOutcome::Abandoned => "abandoned",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Snoozed => "snoozed",
            AttemptOutcome::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<AttemptOutcome> {
        use AttemptOutcome::*;
        [
            Running, Succeeded, Failed, Panicked, Duplicate, Abandoned, Released, Snoozed,
            Cancelled,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `attempts`.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// Unique, increasing.
    pub id: i64,
    /// The job run, if this is a job's attempt.
    pub job_id: Option<i64>,
    /// The outbox row, if this is an effect's attempt.
    pub outbox_id: Option<i64>,
    /// Charged attempt number (N of max_attempts).
    pub attempt: i64,
    /// The job's idempotency key or the outbox row's key.
    pub key: String,
    /// `pid/thread` of the worker.
    pub worker: String,
    /// ms since epoch.
    pub started_at: Millis,
    /// ms since epoch.
    pub finished_at: Option<Millis>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error, if any (capped in length).
    pub error: Option<String>,
}

/// The longest error text stored: a huge message must not break completion.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Cuts `s` to at most `MAX_ERROR_BYTES`, on a character boundary.
pub(crate) fn cap_error(s: &str) -> String {
    if s.len() <= MAX_ERROR_BYTES {
        return s.to_string();
    }
    let mut end = MAX_ERROR_BYTES - 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &s[..end], s.len() - end)
}
