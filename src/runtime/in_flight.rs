//! The jobs and effects this process holds a lease on: counted when claimed
//! or started, renewed by the heartbeat, let go of when their run ends, given
//! back at shutdown; and giving back a claim that never started.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::sqlite::claim::Claimed;

use super::Shared;
use crate::sqlite::pipeline::pending::Pending;

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
}

impl InFlight {
    /// Counts what a claim took: the jobs to start, and the runs it started
    /// under their attempts.
    pub(crate) fn claimed(&self, claimed: &[Claimed], runs: &[Pending]) {
        let mut f = self.0.lock().unwrap();
        for c in claimed {
            f.jobs.insert(c.id, None);
        }
        for p in runs {
            if let Pending::Running(r) = p {
                f.jobs.insert(r.ctx.id, Some(r.attempt_id));
            }
        }
    }

    /// A run's start committed: the job is held under its attempt.
    pub(crate) fn started(&self, id: i64, attempt_id: i64) {
        self.0.lock().unwrap().jobs.insert(id, Some(attempt_id));
    }

    /// Lets go of a job whatever its entry (it never started, or its start
    /// failed).
    pub(crate) fn forget_job(&self, id: i64) {
        self.0.lock().unwrap().jobs.remove(&id);
    }

    /// Lets go of a job whose run ended, only if the entry is still this
    /// run's (or its claim's): a run whose start was undone with its
    /// transaction may end after a newer claim of the same job took its
    /// place.
    pub(crate) fn run_ended(&self, id: i64, attempt_id: i64) {
        let mut f = self.0.lock().unwrap();
        if matches!(f.jobs.get(&id), Some(None)) || f.jobs.get(&id) == Some(&Some(attempt_id)) {
            f.jobs.remove(&id);
        }
    }

    /// An effect attempt is under way.
    pub(crate) fn effect_started(&self, outbox_id: i64, attempt_id: i64) {
        self.0.lock().unwrap().effects.insert(outbox_id, attempt_id);
    }

    /// An effect attempt was acknowledged (or could not be).
    pub(crate) fn effect_ended(&self, outbox_id: i64) {
        self.0.lock().unwrap().effects.remove(&outbox_id);
    }

    /// How many jobs are held (claimed or running).
    pub(crate) fn jobs(&self) -> usize {
        self.0.lock().unwrap().jobs.len()
    }

    /// The jobs' and the effects' ids, whose leases the heartbeat renews.
    pub(crate) fn leased(&self) -> (Vec<i64>, Vec<i64>) {
        let f = self.0.lock().unwrap();
        (
            f.jobs.keys().copied().collect::<Vec<_>>(),
            f.effects.keys().copied().collect::<Vec<_>>(),
        )
    }

    /// Everything still held, for a stop to give back: jobs (id → attempt)
    /// and effects (id → attempt).
    pub(crate) fn take_all(&self) -> (HashMap<i64, Option<i64>>, HashMap<i64, i64>) {
        let mut f = self.0.lock().unwrap();
        (std::mem::take(&mut f.jobs), std::mem::take(&mut f.effects))
    }
}

impl Shared {
    /// Gives a job this runtime claimed and never started back to `queued`,
    /// uncharged. Fenced on the lease: false when it was no longer ours.
    pub(crate) fn release_unstarted(&self, id: i64) -> Result<bool> {
        let b = self.queue.backend();
        b.release_job(id, &self.owner, None, "", b.now())
    }

    /// Lets go of a claimed job that will not start (the runtime is
    /// stopping) and gives it back. Returns whether it went back.
    pub(crate) fn give_back(&self, id: i64) -> bool {
        self.in_flight.forget_job(id);
        matches!(self.release_unstarted(id), Ok(true))
    }

    /// A claimed job's start was not committed, through no fault of the job:
    /// nothing ran, so the claim goes back if it is still ours.
    pub(crate) fn start_failed(&self, id: i64, e: &Error) {
        log::warn!(target: "litejob", job_id = id; "could not start job {id}: {e}");
        let _ = self.release_unstarted(id);
    }
}
