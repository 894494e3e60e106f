//! Counting a whole queue for the metrics and the dashboard's overview:
//! [`Tally`], the figures both engines fill in one snapshot (jobs per
//! queue, kind and state with their deliveries and the oldest runnable
//! job's due time, outbox rows per kind and state, runs per kind and
//! outcome, the ledger, the storage's size). Writes no table.

use std::collections::BTreeMap;

use crate::core::attempt::AttemptOutcome;
use crate::core::job::JobState;
use crate::core::outbox::OutboxState;
use crate::core::time::Millis;

/// Jobs of one queue and kind in one state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Group {
    /// Job rows.
    pub count: i64,
    /// Their `deliveries`, summed.
    pub deliveries: i64,
    /// The smallest `run_at` among them that has come (queued jobs only).
    pub oldest_due_run_at: Option<Millis>,
}

/// What a tally of the queue found, in one snapshot.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// `(queue, kind) -> state -> group`; every state of a pair is present.
    pub jobs: BTreeMap<(String, String), BTreeMap<JobState, Group>>,
    /// kind -> state -> rows; every state of a kind is present.
    pub outbox: BTreeMap<String, BTreeMap<OutboxState, i64>>,
    /// Runs per kind (a job's kind, or an effect's), by outcome in
    /// [`OUTCOMES`] order; a kind with no run is left out. Empty when the
    /// tally was not asked to count runs.
    pub runs: BTreeMap<String, [i64; 7]>,
    /// Rows in the `processed_jobs` ledger.
    pub ledger_rows: i64,
    /// The storage's size: the file's (PostgreSQL: the tables' on the
    /// server).
    pub file_bytes: u64,
    /// The file's write-ahead log (PostgreSQL: 0).
    pub wal_bytes: u64,
}

impl Tally {
    /// Adds the jobs of one queue, kind and state; the pair gets every
    /// state.
    pub(crate) fn add_jobs(&mut self, queue: &str, kind: &str, state: JobState, g: Group) {
        let states = self
            .jobs
            .entry((queue.to_string(), kind.to_string()))
            .or_insert_with(|| {
                JobState::ALL
                    .into_iter()
                    .map(|s| (s, Group::default()))
                    .collect()
            });
        let sum = states.entry(state).or_default();
        sum.count += g.count;
        sum.deliveries += g.deliveries;
        sum.oldest_due_run_at = earliest(sum.oldest_due_run_at, g.oldest_due_run_at);
    }

    /// Adds the outbox rows of one kind and state; the kind gets every
    /// state.
    pub(crate) fn add_outbox(&mut self, kind: &str, state: OutboxState, n: i64) {
        *self
            .outbox
            .entry(kind.to_string())
            .or_insert_with(|| OutboxState::ALL.into_iter().map(|s| (s, 0)).collect())
            .entry(state)
            .or_default() += n;
    }

    /// Adds runs of one kind and outcome.
    pub(crate) fn add_runs(&mut self, kind: &str, outcome: AttemptOutcome, n: i64) {
        if n == 0 {
            return;
        }
        let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) else {
            return;
        };
        self.runs.entry(kind.to_string()).or_default()[i] += n;
    }

    /// Every queue's groups, per state, summed over its kinds.
    pub(crate) fn by_queue(&self) -> BTreeMap<&str, BTreeMap<JobState, Group>> {
        let mut out: BTreeMap<&str, BTreeMap<JobState, Group>> = BTreeMap::new();
        for ((queue, _), states) in &self.jobs {
            let q = out.entry(queue.as_str()).or_default();
            for (state, g) in states {
                let sum = q.entry(*state).or_default();
                sum.count += g.count;
                sum.deliveries += g.deliveries;
                sum.oldest_due_run_at = earliest(sum.oldest_due_run_at, g.oldest_due_run_at);
            }
        }
        out
    }
}

fn earliest(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a tally counts runs per kind too (the metrics do; the overview,
/// which has no use for them, skips the scan of `attempts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runs {
    /// Count them.
    Counted,
    /// Leave [`Tally::runs`] empty.
    Skipped,
}

/// Every attempt outcome, in the order the metrics list them.
pub(crate) const OUTCOMES: [AttemptOutcome; 9] = [
    AttemptOutcome::Running,
    AttemptOutcome::Succeeded,
    AttemptOutcome::Failed,
    AttemptOutcome::Panicked,
    AttemptOutcome::Duplicate,
    AttemptOutcome::Abandoned,
    AttemptOutcome::Released,
    AttemptOutcome::Snoozed,
    AttemptOutcome::Cancelled,
];
