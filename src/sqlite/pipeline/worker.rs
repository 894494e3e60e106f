//! The worker threads: start claimed jobs and see runs through to their end,
//! keeping several runs' commits in flight. Writes through the start and
//! finish modules, on the writer.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};

use crate::core::backoff::Rng;
use crate::sqlite::claim::Claimed;

use super::finish::finish_job;
use super::pending::{Pending, Run};
use super::start::start_job;
use super::Pipe;
use crate::driver::pipeline::worker_name;
use crate::driver::runner::Runner;

/// Most runs one worker keeps waiting for their commit while it goes on
/// with the next job. Bounded so a stalled disk stops the worker instead of
/// growing memory.
pub(crate) const MAX_PIPELINE: usize = 64;

/// A worker thread's body.
pub(crate) fn worker_loop(
    s: Arc<Pipe>,
    jobs: Receiver<Claimed>,
    runs: Receiver<Run>,
    space: Sender<()>,
) {
    let stop = s.stop.clone();
    let runner = Runner::new(s.runners.clone());
    Worker {
        runner,
        s,
        jobs,
        runs,
        stop,
        space,
        name: worker_name(),
        rng: Rng::from_entropy(),
        pending: VecDeque::new(),
    }
    .run();
}

struct Worker {
    s: Arc<Pipe>,
    /// Claimed jobs to start.
    jobs: Receiver<Claimed>,
    /// Runs a claim started: only their end to see.
    runs: Receiver<Run>,
    stop: Receiver<()>,
    /// Tells the supervisor there is room for its next claim.
    space: Sender<()>,
    /// The name its attempt rows record.
    name: String,
    rng: Rng,
    /// Runs whose apply step was handed to the writer and whose commit this
    /// worker has not seen yet, oldest first. The worker does not wait for
    /// a completion's fsync before starting its next job: the next job's
    /// start is a light commit of its own, so completions of many jobs share
    /// one fsync (group commit) even with few workers.
    pending: VecDeque<Pending>,
    /// Where its runs' prepare steps with a timeout run (see
    /// [`Runner`]).
    runner: Runner,
}

/// What a turn of the worker's loop found to do.
enum Turn {
    Start(Claimed),
    /// Nothing to start this turn (a run's end was seen, or one came in).
    Again,
    Stop,
}

impl Worker {
    /// Each turn: see through the runs whose commit came, then start the
    /// next claimed job. Stopping, it sees every run it holds through.
    fn run(mut self) {
        loop {
            self.finish_ready();
            let turn = if self.pending.is_empty() {
                self.wait_idle()
            } else {
                self.next_job_busy()
            };
            match turn {
                Turn::Start(claimed) => self.start(claimed),
                Turn::Again => {}
                Turn::Stop => break,
            }
        }
        self.pending.extend(self.runs.try_iter().map(Pending::Run));
        for p in std::mem::take(&mut self.pending) {
            self.finish(p);
        }
    }

    /// Sees a run through and, if the supervisor waits for room, tells it.
    fn finish(&self, p: Pending) {
        let _ = finish_job(&self.s, p);
        if self.s.room_wanted.swap(false, Ordering::SeqCst) {
            let _ = self.space.try_send(());
        }
    }

    /// Finishes the runs whose commit came, oldest first, and picks up the
    /// runs a claim started.
    fn finish_ready(&mut self) {
        while self.pending.front().is_some_and(Pending::is_ready) {
            let p = self.pending.pop_front().expect("front exists");
            self.finish(p);
        }
        self.pending.extend(self.runs.try_iter().map(Pending::Run));
    }

    /// No run in flight: waits for a job to start, a run to see through or
    /// the stop.
    fn wait_idle(&mut self) -> Turn {
        let (jobs, runs, stop) = (&self.jobs, &self.runs, &self.stop);
        select! {
            recv(jobs) -> c => match c { Ok(c) => Turn::Start(c), Err(_) => Turn::Stop },
            recv(runs) -> p => {
                if let Ok(run) = p {
                    self.pending.push_back(Pending::Run(run));
                }
                Turn::Again
            }
            recv(stop) -> _ => Turn::Stop,
        }
    }

    /// Runs in flight: takes a job to start if one waits; otherwise waits
    /// for the oldest run's answer or for a new job, whichever comes first.
    /// Blocking on the answer alone (an fsync away) left newly claimed jobs
    /// unstarted meanwhile and the writer idle.
    fn next_job_busy(&mut self) -> Turn {
        match self.jobs.try_recv() {
            Ok(c) => Turn::Start(c),
            Err(TryRecvError::Empty) => {
                let oldest = self.pending.front().expect("not empty");
                let mut sel = crossbeam_channel::Select::new();
                let answered = sel.recv(oldest.answer());
                sel.recv(&self.jobs);
                sel.recv(&self.runs);
                if sel.ready() == answered {
                    let p = self.pending.pop_front().expect("not empty");
                    self.finish(p);
                }
                Turn::Again
            }
            Err(TryRecvError::Disconnected) => Turn::Stop,
        }
    }

    /// Starts a claimed job, unless the runtime is stopping.
    fn start(&mut self, claimed: Claimed) {
        if self.jobs.is_empty() {
            let _ = self.space.try_send(());
        }
        let s = &self.s;
        if s.stopping.load(Ordering::SeqCst) {
            // Never started: give it back uncharged.
            s.give_back(claimed.id);
            return;
        }
        // A suspect (a run of it was cut short by a crash) may be a poison
        // pill: run it alone on this worker, with every earlier run
        // committed first and its own seen through before the next job.
        // Otherwise, when it aborts the process again, the neighbours whose
        // apply steps were still in the pipeline are abandoned with it,
        // crash after crash, until a healthy job dies as a poison pill
        // (reliability::crash::poison_pill_dies_after_three_abandoned_runs).
        let suspect = claimed.abandoned > 0;
        while self.pending.len() >= MAX_PIPELINE || (suspect && !self.pending.is_empty()) {
            let p = self.pending.pop_front().expect("not empty");
            self.finish(p);
        }
        // Past the cap of runner threads left behind, a run given up on
        // holds its worker until its code returns.
        self.runner.settle();
        match start_job(
            &self.s,
            &claimed,
            &self.name,
            &mut self.rng,
            &mut self.runner,
        ) {
            Some(p) if suspect => self.finish(p),
            Some(p) => self.pending.push_back(p),
            None => self.s.in_flight.forget_job(claimed.id),
        }
    }
}
