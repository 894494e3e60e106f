//! The jobs and effects this process holds a lease on: counted when claimed
//! or started, renewed by the heartbeat, let go of when their run ends, given
//! back at shutdown; and giving back a claim that never started. The runs
//! the watcher polls for a cancel are kept here too, with their signals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::core::cancel::RunSignal;
use crate::driver::lock;

/// Jobs and effects this process holds a lease on: renewed by the
/// supervisor, released at shutdown. One lock, taken once per change.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<Held>);

#[derive(Default)]
struct Held {
    /// job id → the running attempt (None: claimed, not started).
    jobs: HashMap<i64, Option<i64>>,
    /// outbox id → attempt id.
    effects: HashMap<i64, i64>,
    /// job id → the running attempt and its signal, for the runs whose
    /// user code runs outside any transaction (a prepare step): the
    /// watcher stops them when their job no longer runs on that attempt.
    watched: HashMap<i64, (i64, Arc<RunSignal>)>,
}

impl InFlight {
    /// Counts what a claim took: the jobs to start, and the runs it started
    /// (job id, attempt id).
    pub(crate) fn claimed(
        &self,
        claimed: impl IntoIterator<Item = i64>,
        started: impl IntoIterator<Item = (i64, i64)>,
    ) {
        let mut f = lock(&self.0);
        for id in claimed {
            f.jobs.insert(id, None);
        }
        for (id, attempt) in started {
            f.jobs.insert(id, Some(attempt));
        }
    }

    /// A run's start committed: the job is held under its attempt, and
    /// watched with `watch` if given.
    pub(crate) fn started(&self, id: i64, attempt_id: i64, watch: Option<&Arc<RunSignal>>) {
        let mut f = lock(&self.0);
        f.jobs.insert(id, Some(attempt_id));
        if let Some(signal) = watch {
            f.watched.insert(id, (attempt_id, signal.clone()));
        }
    }

    /// Watches a started run, whose user code runs outside any
    /// transaction, for a cancel (PostgreSQL's runs, counted at their
    /// claim, are watched once their context exists).
    #[cfg(feature = "postgres")]
    pub(crate) fn watch(&self, id: i64, attempt_id: i64, signal: &Arc<RunSignal>) {
        lock(&self.0)
            .watched
            .insert(id, (attempt_id, signal.clone()));
    }

    /// The watched runs: job id, attempt, signal.
    pub(crate) fn watched(&self) -> Vec<(i64, i64, Arc<RunSignal>)> {
        lock(&self.0)
            .watched
            .iter()
            .map(|(id, (attempt, s))| (*id, *attempt, s.clone()))
            .collect()
    }

    /// Lets go of a job whatever its entry (it never started, or its start
    /// failed).
    pub(crate) fn forget_job(&self, id: i64) {
        let mut f = lock(&self.0);
        f.jobs.remove(&id);
        f.watched.remove(&id);
    }

    /// Lets go of a job whose run ended, only if the entry is still this
    /// run's (or its claim's): a run whose start was undone with its
    /// transaction may end after a newer claim of the same job took its
    /// place.
    pub(crate) fn run_ended(&self, id: i64, attempt_id: i64) {
        let mut f = lock(&self.0);
        if matches!(f.jobs.get(&id), Some(None)) || f.jobs.get(&id) == Some(&Some(attempt_id)) {
            f.jobs.remove(&id);
        }
        if f.watched.get(&id).is_some_and(|(a, _)| *a == attempt_id) {
            f.watched.remove(&id);
        }
    }

    /// An effect attempt is under way.
    pub(crate) fn effect_started(&self, outbox_id: i64, attempt_id: i64) {
        lock(&self.0).effects.insert(outbox_id, attempt_id);
    }

    /// An effect attempt was acknowledged (or could not be).
    pub(crate) fn effect_ended(&self, outbox_id: i64) {
        lock(&self.0).effects.remove(&outbox_id);
    }

    /// How many jobs are held (claimed or running).
    pub(crate) fn jobs(&self) -> usize {
        lock(&self.0).jobs.len()
    }

    /// The jobs' and the effects' ids, whose leases the heartbeat renews.
    pub(crate) fn leased(&self) -> (Vec<i64>, Vec<i64>) {
        let f = lock(&self.0);
        (
            f.jobs.keys().copied().collect::<Vec<_>>(),
            f.effects.keys().copied().collect::<Vec<_>>(),
        )
    }

    /// Everything still held, for a stop to give back: jobs (id → attempt)
    /// and effects (id → attempt).
    pub(crate) fn take_all(&self) -> (HashMap<i64, Option<i64>>, HashMap<i64, i64>) {
        let mut f = lock(&self.0);
        f.watched.clear();
        (std::mem::take(&mut f.jobs), std::mem::take(&mut f.effects))
    }
}
