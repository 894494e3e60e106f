//! The watcher (`litejob-watcher`, one thread per runtime with a prepare
//! step among its handlers, on either engine): while runs of this process
//! are in their prepare step, it reads every poll interval which of their
//! jobs no longer run on their attempt, and stops those runs: cancelled
//! by an operator (`litejob cancel`, [`crate::admin::Admin::cancel_job`]),
//! or lost (their lease expired and the job was taken back). The handler
//! sees `ctx.is_cancelled()`; a worker waiting on the run's runner thread
//! is woken and lets it go. A run's end is fenced in SQL whatever the
//! watcher saw. Writes no table.

use std::collections::HashMap;
use std::sync::Arc;

use crossbeam_channel::select;

use crate::core::cancel::Stop;
use crate::core::job::JobState;
use crate::driver::pipeline::{log_failure, Shared};
use crate::driver::{Engine, Store};

/// The watcher's body: a look every poll interval until the runtime stops.
pub(crate) fn watch_loop<E: Engine>(s: Arc<Shared<E>>) {
    loop {
        select! {
            recv(s.stop) -> _ => return,
            default(s.cfg.poll_interval) => {}
        }
        watch_once(&s);
    }
}

/// One look: stops the watched runs whose job ended or moved on. Reads
/// nothing when none is watched.
pub(crate) fn watch_once<E: Engine>(s: &Shared<E>) {
    let mut runs = s.in_flight.watched();
    // Past its prepare step a run's end is fenced: nothing to stop.
    runs.retain(|(_, _, signal)| !signal.past_prepare() && signal.stopped().is_none());
    if runs.is_empty() {
        return;
    }
    let ids: Vec<i64> = runs.iter().map(|(id, _, _)| *id).collect();
    let states: HashMap<i64, (JobState, Option<i64>)> = match s.store.run_states(&ids) {
        Ok(rows) => rows.into_iter().map(|(id, st, a)| (id, (st, a))).collect(),
        Err(e) => {
            log_failure("the watcher's read of running jobs", &e);
            return;
        }
    };
    for (id, attempt, signal) in runs {
        let why = match states.get(&id) {
            Some((JobState::Running, Some(a))) if *a == attempt => continue,
            Some((JobState::Cancelled, _)) => Stop::Cancelled,
            _ => Stop::Lost,
        };
        if signal.stop(why) {
            log::info!(target: "litejob", job_id = id;
            "job {id}: {}; its run stops", match why {
                Stop::Cancelled => "cancelled while running",
                _ => "no longer held by its run",
            });
        }
    }
}
