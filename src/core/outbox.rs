//! Outbox rows as data: a side effect recorded inside a job's transaction
//! ([`OutboxRow`], its [`OutboxState`]), an attempt at it, and how that
//! attempt ended. Writes no table.

use serde::Serialize;

use crate::core::time::Millis;
use crate::error::{Error, Result};

/// Where an outbox row is. The same words as `outbox.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutboxState {
    /// Waiting for its (next) attempt.
    Pending,
    /// An effect is running under a lease.
    Sending,
    /// The effect returned Ok.
    Sent,
    /// Out of attempts.
    Dead,
}

impl OutboxState {
    /// The word stored in `outbox.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Sending => "sending",
            OutboxState::Sent => "sent",
            OutboxState::Dead => "dead",
        }
    }

    /// All states.
    pub const ALL: [OutboxState; 4] = [
        OutboxState::Pending,
        OutboxState::Sending,
        OutboxState::Sent,
        OutboxState::Dead,
    ];
}

impl std::str::FromStr for OutboxState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        OutboxState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown outbox state {s:?}: one of pending, sending, sent, dead"
                ))
            })
    }
}

impl std::fmt::Display for OutboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `outbox`.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxRow {
    /// Row id.
    pub id: i64,
    /// Stable, unique key.
    pub key: String,
    /// Effect kind.
    pub kind: String,
    /// JSON text.
    pub payload: String,
    /// State.
    pub state: OutboxState,
    /// Attempts made (counted before each call).
    pub attempts: i64,
    /// Attempt budget.
    pub max_attempts: i64,
    /// The job that wrote it.
    pub job_id: Option<i64>,
    /// Not attempted before this time.
    pub next_attempt_at: Millis,
    /// Last failure.
    pub last_error: Option<String>,
    /// ms since epoch.
    pub created_at: Millis,
    /// ms since epoch, once sent.
    pub sent_at: Option<Millis>,
}

/// Refuses an effect without a kind or a key (blank counts as none): the
/// kind names the effect's handler, the key the effect itself, once for
/// all its runs.
pub(crate) fn check_effect(kind: &str, key: &str) -> Result<()> {
    if kind.trim().is_empty() || key.trim().is_empty() {
        return Err(Error::invalid("outbox kind and key must not be empty"));
    }
    Ok(())
}

/// An outbox row claimed for one attempt.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedEffect {
    pub row: OutboxRow,
    pub attempt_id: i64,
}

/// How an effect attempt ended.
#[derive(Debug, Clone)]
pub(crate) enum EffectResult {
    Sent,
    Failed {
        error: String,
        panicked: bool,
        retry_at: Millis,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_effect_needs_a_kind_and_a_key() {
        assert!(check_effect("mail", "welcome:7").is_ok());
        for (kind, key) in [("", "k"), ("mail", ""), (" ", "k"), ("mail", "\t\n")] {
            let e = check_effect(kind, key).unwrap_err();
            assert!(
                matches!(e, Error::InvalidInput(_)),
                "{kind:?} {key:?}: {e:?}"
            );
            assert!(e.to_string().contains("must not be empty"), "{e}");
        }
    }
}
