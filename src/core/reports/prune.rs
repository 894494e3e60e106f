//! What a prune removes ([`PruneOptions`]), what it removed
//! ([`PruneReport`]), and what a runtime prunes by itself ([`Retention`]).
//! Writes no table.

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
    /// Dead and cancelled jobs are kept this long instead, when set: they
    /// are the ones an operator looks at, or retries. `None` (the default)
    /// prunes them at `older_than` too.
    pub failed_older_than: Option<Duration>,
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
            failed_older_than: None,
            ledger_older_than: None,
            batch: BATCH,
        }
    }

    /// Sets the age of the finished history to delete.
    pub fn with_older_than(mut self, d: Duration) -> Self {
        self.older_than = d;
        self
    }

    /// Sets the age of the dead and cancelled jobs to delete (`None`: the
    /// age of the others).
    pub fn with_failed_older_than(mut self, d: Option<Duration>) -> Self {
        self.failed_older_than = d;
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

/// What a runtime deletes by itself, as `litejob prune` would
/// ([`RuntimeBuilder::retention`](crate::RuntimeBuilder::retention)):
/// succeeded jobs kept a day, dead and cancelled ones a week, sent outbox
/// rows as long as succeeded jobs, the ledger for ever unless an age is
/// given. A pass runs at the runtime's start and then every minute, in
/// batches of 500 rows per write transaction; every runtime on a queue
/// runs it (no leader: two passes at once delete each row once). A job a
/// waiting or running dependent still reads, or whose outbox rows are not
/// all sent, is kept, as `prune` keeps it.
///
/// ```
/// # use std::time::Duration;
/// let keep = litejob::Retention::default()
///     .with_succeeded(Duration::from_secs(3_600))
///     .with_ledger(Some(Duration::from_secs(30 * 86_400)));
/// assert_eq!(keep.failed, Duration::from_secs(7 * 86_400));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// How long a succeeded job (and a sent outbox row) is kept after it
    /// finished: 24 h by default.
    pub succeeded: Duration,
    /// How long a dead or cancelled job is kept after it finished: 7 days
    /// by default.
    pub failed: Duration,
    /// How long a ledger row is kept; `None` (the default) keeps it, so a
    /// key delivered again after its job is gone is still a duplicate.
    pub ledger: Option<Duration>,
    /// The time between two passes: one minute by default.
    pub every: Duration,
    /// Rows per write transaction: 500 by default, so a pass holds the
    /// write lock only briefly at a time.
    pub batch: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            succeeded: Duration::from_secs(24 * 3_600),
            failed: Duration::from_secs(7 * 86_400),
            ledger: None,
            every: Duration::from_secs(60),
            batch: 500,
        }
    }
}

impl Retention {
    /// Sets how long succeeded jobs and sent outbox rows are kept.
    pub fn with_succeeded(mut self, d: Duration) -> Self {
        self.succeeded = d;
        self
    }

    /// Sets how long dead and cancelled jobs are kept.
    pub fn with_failed(mut self, d: Duration) -> Self {
        self.failed = d;
        self
    }

    /// Sets how long ledger rows are kept (`None`: for ever).
    pub fn with_ledger(mut self, d: Option<Duration>) -> Self {
        self.ledger = d;
        self
    }

    /// Sets the time between two passes.
    pub fn with_every(mut self, d: Duration) -> Self {
        self.every = d;
        self
    }

    /// Sets the rows per write transaction.
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    /// The prune one pass runs.
    pub(crate) fn prune_options(&self) -> PruneOptions {
        PruneOptions::new(self.succeeded)
            .with_failed_older_than(Some(self.failed))
            .with_ledger_older_than(self.ledger)
            .with_batch(self.batch)
    }
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
