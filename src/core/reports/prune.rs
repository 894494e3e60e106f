//! What a prune removes ([`PruneOptions`]) and what it removed
//! ([`PruneReport`]). Writes no table.

use std::time::Duration;

use serde::Serialize;

/// Rows per write transaction for bulk repairs: small enough that workers
/// in another process wait only briefly for the write lock.
pub(crate) const BATCH: usize = 1000;

/// What [`Admin::prune`](crate::admin::Admin::prune) removes.
///
/// ```
/// # use std::time::Duration;
/// let week = litejob::admin::PruneOptions::new(Duration::from_secs(7 * 86_400))
///     .with_ledger_older_than(Some(Duration::from_secs(90 * 86_400)));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PruneOptions {
    /// Finished jobs (succeeded, dead, cancelled) that finished at least
    /// this long ago go, with their attempts; so do outbox rows sent at
    /// least this long ago.
    pub older_than: Duration,
    /// Ledger rows completed longer ago than this go too. `None` (the
    /// default) keeps the ledger, so a re-delivered key stays a duplicate
    /// after its job row is gone.
    pub ledger_older_than: Option<Duration>,
    /// Rows per write transaction (default 1000).
    pub batch: usize,
}

impl PruneOptions {
    /// Prune the history finished at least `older_than` ago; keep the ledger.
    pub fn new(older_than: Duration) -> PruneOptions {
        PruneOptions {
            older_than,
            ledger_older_than: None,
            batch: BATCH,
        }
    }

    /// Sets the age of the finished history to delete.
    pub fn with_older_than(mut self, d: Duration) -> Self {
        self.older_than = d;
        self
    }

    /// Sets the age of the ledger rows to delete (`None`: keep the ledger).
    pub fn with_ledger_older_than(mut self, d: Option<Duration>) -> Self {
        self.ledger_older_than = d;
        self
    }

    /// Sets the rows per write transaction.
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }
}

/// What [`Admin::prune`](crate::admin::Admin::prune) removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Job rows deleted.
    pub jobs: usize,
    /// Attempt rows of those jobs deleted.
    pub job_attempts: usize,
    /// Sent outbox rows deleted.
    pub outbox: usize,
    /// Attempt rows of those outbox rows deleted.
    pub outbox_attempts: usize,
    /// Ledger rows deleted (0 unless asked).
    pub ledger: usize,
    /// Write transactions used.
    pub transactions: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_options_default_to_keeping_the_ledger() {
        let o = PruneOptions::new(Duration::from_secs(60));
        assert_eq!((o.ledger_older_than, o.batch), (None, BATCH));
        let o = o.with_batch(5).with_older_than(Duration::ZERO);
        assert_eq!((o.older_than, o.batch), (Duration::ZERO, 5));
    }
}
