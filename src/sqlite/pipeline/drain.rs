//! The file's jobs run in the caller's thread, for
//! [`RuntimeBuilder::drain`](crate::RuntimeBuilder::drain): the same claim,
//! start, apply and end as the workers', with no thread of its own and no
//! wait but for the writer's commits. Writes what the pipeline writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::core::backoff::Rng;
use crate::core::lifecycle::RunEnd;
use crate::driver::pipeline::{worker_name, DrainJobs, Shared};
use crate::driver::runner::Runner;
use crate::error::Result;
use crate::sqlite::claim::{self, Claimed};
use crate::sqlite::Sqlite;

use super::finish::finish_job;
use super::pending::{Pending, Run};
use super::start::start_job;
use super::worker::MAX_PIPELINE;
use super::Pipe;

/// Jobs one claim of a drain takes.
const BATCH: usize = 256;

/// A pipe with no thread: the drain is its only worker.
pub(crate) struct FileDrain {
    pipe: Arc<Pipe>,
    /// Kept so the pipe's run channel stays open (no claim of a drain
    /// starts runs for others to see through).
    _runs: Receiver<Run>,
    name: String,
    rng: Rng,
    /// Runs every prepare step in this thread: a run past its timeout
    /// is failed as timed out when it returns.
    runner: Runner,
}

/// The drain's pipe, on the store's writer.
pub(crate) fn drain(shared: Arc<Shared<Sqlite>>) -> Result<FileDrain> {
    let writer = shared.store.writer()?.clone();
    let (runs_tx, runs) = crossbeam_channel::unbounded();
    let pipe = Arc::new(Pipe {
        writer,
        runs_tx,
        max_in_flight: BATCH,
        worker_names: vec![worker_name()],
        next_worker: AtomicUsize::new(0),
        later_reserved: AtomicI64::new(0),
        room_wanted: AtomicBool::new(false),
        preparing: AtomicUsize::new(0),
        shared,
    });
    Ok(FileDrain {
        pipe,
        _runs: runs,
        name: worker_name(),
        rng: Rng::from_entropy(),
        runner: Runner::inline(),
    })
}

impl FileDrain {
    /// Claims up to [`BATCH`] due jobs, for this thread to start.
    fn claim(&self) -> Result<Vec<Claimed>> {
        let sh = self.pipe.clone();
        let lease_ms = sh.cfg.lease.as_millis() as i64;
        let batch = self.pipe.writer.run_light(move |conn| {
            let now = sh.now();
            let ask = claim::ClaimAsk {
                kinds: &sh.kinds,
                queues_json: sh.queues_json.as_deref(),
                limit: BATCH,
                for_workers: BATCH,
                owner: &sh.owner,
                lease_until: now + lease_ms,
                now,
            };
            claim::claim_batch(conn, &ask, |_, _, _| claim::Take::<()>::Claim)
        })?;
        let claimed: Vec<Claimed> = batch.taken.into_iter().map(|(c, _)| c).collect();
        self.pipe
            .in_flight
            .claimed(claimed.iter().map(|c| c.id), std::iter::empty());
        Ok(claimed)
    }

    /// Sees a run through; its end, if it started.
    fn finish(&self, p: Pending, ends: &mut Vec<RunEnd>) -> Result<()> {
        if let Some(end) = finish_job(&self.pipe, p) {
            ends.push(end?);
        }
        Ok(())
    }
}

impl DrainJobs for FileDrain {
    fn run_due(&mut self) -> Result<Vec<RunEnd>> {
        let mut ends = Vec::new();
        loop {
            let claimed = self.claim()?;
            if claimed.is_empty() {
                return Ok(ends);
            }
            // As a worker does: starts go on while earlier runs' commits
            // are in flight; a suspect runs alone.
            let mut pending = VecDeque::new();
            let mut failed = None;
            for c in claimed {
                let suspect = c.abandoned > 0;
                while pending.len() >= MAX_PIPELINE || (suspect && !pending.is_empty()) {
                    let p = pending.pop_front().expect("not empty");
                    if let Err(e) = self.finish(p, &mut ends) {
                        failed.get_or_insert(e);
                    }
                }
                match start_job(&self.pipe, &c, &self.name, &mut self.rng, &mut self.runner) {
                    Some(p) => pending.push_back(p),
                    None => self.pipe.in_flight.forget_job(c.id),
                }
            }
            for p in pending {
                if let Err(e) = self.finish(p, &mut ends) {
                    failed.get_or_insert(e);
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
}
