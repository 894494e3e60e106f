//! The worker threads: start claimed jobs and see runs through to their end,
//! keeping several runs' commits in flight.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{select, Receiver, Sender};

use crate::claim::{self, Claimed};
use crate::retry::Rng;
use crate::time::now_ms;

use super::begin::begin_job;
use super::finish::finish_job;
use super::pending::Pending;
use super::{worker_name, Shared};

/// Most runs one worker keeps waiting for their commit while it goes on
/// with the next job. Bounded so a stalled disk stops the worker instead of
/// growing memory.
pub(super) const MAX_PIPELINE: usize = 64;

pub(super) fn worker_loop(
    s: Arc<Shared>,
    jobs: Receiver<Claimed>,
    runs: Receiver<Pending>,
    stop: Receiver<()>,
    space: Sender<()>,
) {
    let worker = worker_name();
    let mut rng = Rng::from_entropy();
    // Runs whose apply step was handed to the writer and whose commit this
    // worker has not seen yet, oldest first. The worker does not wait for
    // a completion's fsync before starting its next job: the next job's start
    // is a light commit of its own, so completions of many jobs share one
    // fsync (group commit) even with few workers.
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let finish = |p: Pending| {
        finish_job(&s, p);
        if s.room_wanted.swap(false, Ordering::SeqCst) {
            let _ = space.try_send(());
        }
    };
    loop {
        while pending.front().is_some_and(Pending::is_ready) {
            finish(pending.pop_front().expect("front exists"));
        }
        // Runs a claim started for this worker: only their end to see.
        pending.extend(runs.try_iter());
        let claimed = if pending.is_empty() {
            select! {
                recv(jobs) -> c => match c { Ok(c) => c, Err(_) => break },
                recv(runs) -> p => {
                    if let Ok(p) = p {
                        pending.push_back(p);
                    }
                    continue;
                }
                recv(stop) -> _ => break,
            }
        } else {
            match jobs.try_recv() {
                Ok(c) => c,
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    // Nothing to start now: wait for the oldest run's answer
                    // or for a new job, whichever comes first. Blocking on
                    // the answer alone (an fsync away) left newly claimed
                    // jobs unstarted meanwhile and the writer idle.
                    let oldest = pending.front().expect("not empty");
                    let mut sel = crossbeam_channel::Select::new();
                    let answered = sel.recv(oldest.answer());
                    sel.recv(&jobs);
                    sel.recv(&runs);
                    if sel.ready() == answered {
                        finish(pending.pop_front().expect("not empty"));
                    }
                    continue;
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => break,
            }
        };
        if jobs.is_empty() {
            let _ = space.try_send(());
        }
        if s.stopping.load(Ordering::SeqCst) {
            // Never started: give it back uncharged.
            s.in_flight.lock().unwrap().jobs.remove(&claimed.id);
            let o = s.owner.clone();
            let _ = s
                .queue
                .writer()
                .run(move |conn| claim::release(conn, claimed.id, &o, None, "", now_ms()));
            continue;
        }
        // A suspect (a run of it was cut short by a crash) may be a poison
        // pill: run it alone on this worker, with every earlier run
        // committed first and its own seen through before the next job.
        // Otherwise, when it aborts the process again, the neighbours whose
        // apply steps were still in the pipeline are abandoned with it,
        // crash after crash, until a healthy job dies as a poison pill
        // (reliability::crash::poison_pill_dies_after_three_abandoned_runs).
        let suspect = claimed.abandoned > 0;
        while pending.len() >= MAX_PIPELINE || (suspect && !pending.is_empty()) {
            finish(pending.pop_front().expect("not empty"));
        }
        match begin_job(&s, &claimed, &worker, &mut rng) {
            Some(p) if suspect => finish(p),
            Some(p) => pending.push_back(p),
            None => {
                s.in_flight.lock().unwrap().jobs.remove(&claimed.id);
            }
        }
    }
    pending.extend(runs.try_iter());
    for p in pending.drain(..) {
        finish(p);
    }
}
