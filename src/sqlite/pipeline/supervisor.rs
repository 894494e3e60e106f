//! The supervisor thread: claims, hands what it took to the workers, and
//! keeps the leases' timers. Writes through the claims module and the
//! driver's lease keeping (renewals, reaping), on the writer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::core::backoff::Rng;
use crate::error::{Error, Result};
use crate::fault;
use crate::sqlite::claim::Claimed;
use crate::sqlite::writer;

use super::claims::{any_to_claim, count_in_flight, submit_claim, Taken};
use super::finish::finish_job;
use super::pending::Pending;
use super::Pipe;
use crate::driver::leases::{reap, renew_leases};
use crate::driver::pipeline::sleep_or_stop;

/// The supervisor thread's body.
pub(crate) fn supervisor_loop(
    s: Arc<Pipe>,
    buffer: Sender<Claimed>,
    space: (Sender<()>, Receiver<()>),
    capacity: usize,
) {
    let stop = s.stop.clone();
    Supervisor::new(s, buffer, space, stop, capacity).run();
}

/// The supervisor's state between two turns of its loop.
struct Supervisor {
    s: Arc<Pipe>,
    /// The claimed jobs the workers start (`capacity` of them at most).
    buffer: Sender<Claimed>,
    capacity: usize,
    /// Held so `space` never disconnects (see [`super::Runtime`]'s start).
    _space_tx: Sender<()>,
    /// A worker finished a run while every pipeline was full.
    space: Receiver<()>,
    stop: Receiver<()>,
    /// In-process enqueues.
    wake: Receiver<()>,
    lease_ms: i64,
    heartbeat_every: Duration,
    next_heartbeat: Instant,
    next_reap: Instant,
    next_poll: Instant,
    want_claim: bool,
    /// The last claim filled its batch: more work is surely waiting, so the
    /// next claim skips the read-only look first.
    more_known: bool,
    has_handlers: bool,
    rng: Rng,
    /// The claim on the writer (at most one), and how many jobs it asked for.
    outstanding: Option<(Receiver<Result<Taken>>, usize)>,
    /// A wake-up or a poll came after the outstanding claim was sent: it may
    /// not have seen that job, so claim again whatever it took.
    woken: bool,
}

/// What the loop does after one of its steps.
#[derive(PartialEq, Eq)]
enum Step {
    /// Go on with the next step.
    Next,
    /// A claim failed and the supervisor paused: start the turn over.
    Again,
    /// The runtime is stopping.
    Stop,
}

impl Supervisor {
    fn new(
        s: Arc<Pipe>,
        buffer: Sender<Claimed>,
        (space_tx, space): (Sender<()>, Receiver<()>),
        stop: Receiver<()>,
        capacity: usize,
    ) -> Supervisor {
        let heartbeat_every = s.cfg.lease / 3;
        Supervisor {
            wake: s.job_wake.clone(),
            lease_ms: s.cfg.lease.as_millis() as i64,
            heartbeat_every,
            next_heartbeat: Instant::now() + heartbeat_every,
            next_reap: Instant::now(),
            next_poll: Instant::now(),
            want_claim: true,
            more_known: false,
            has_handlers: !s.handlers.is_empty(),
            rng: Rng::from_entropy(),
            outstanding: None,
            woken: false,
            s,
            buffer,
            capacity,
            _space_tx: space_tx,
            space,
            stop,
        }
    }

    /// Each turn: keep the leases, take the claim's answer, claim again if
    /// work may be waiting, then wait for news. Stopping, it hands over what
    /// the last claim took.
    fn run(mut self) {
        loop {
            if self.s.stopping.load(Ordering::SeqCst) {
                break;
            }
            self.tend_timers();
            if self.take_answer() == Step::Again {
                continue;
            }
            if self.claim_if_wanted() == Step::Again {
                continue;
            }
            if self.wait() == Step::Stop {
                break;
            }
        }
        self.hand_over_last_claim();
    }

    /// Renews leases, reaps expired ones and polls for other processes'
    /// work, each when its time comes.
    fn tend_timers(&mut self) {
        let now_i = Instant::now();
        if now_i >= self.next_heartbeat {
            renew_leases(&self.s, self.s.now() + self.lease_ms);
            self.next_heartbeat = now_i + self.heartbeat_every;
        }
        if now_i >= self.next_reap {
            reap(&self.s);
            self.next_reap = now_i
                + self
                    .s
                    .cfg
                    .poll_interval
                    .max(Duration::from_millis(200))
                    .min(self.s.cfg.lease / 2);
        }
        if now_i >= self.next_poll {
            self.want_claim = true;
            self.woken = true;
            self.next_poll = now_i + self.s.cfg.poll_interval;
        }
    }

    /// How many jobs the next claim may take: the buffer's space, and the
    /// claimed jobs not finished yet are bounded (`max_in_flight`).
    fn free(&self) -> usize {
        let s = &self.s;
        // Set before looking, so a worker that finishes a run meanwhile
        // sees it and wakes us.
        s.room_wanted.store(true, Ordering::SeqCst);
        let reserved = s.later_reserved.load(Ordering::SeqCst).max(0) as usize;
        let room = s
            .max_in_flight
            .saturating_sub(s.in_flight.jobs() + reserved);
        let free = self.capacity.saturating_sub(self.buffer.len()).min(room);
        if free > 0 {
            s.room_wanted.store(false, Ordering::SeqCst);
        }
        free
    }

    /// Sends a claim of up to `n` jobs to the writer.
    fn send_claim(&mut self, n: usize) {
        let busy = self.s.preparing.load(Ordering::SeqCst) + self.buffer.len();
        let idle = self.s.cfg.workers.saturating_sub(busy);
        self.outstanding = Some((
            submit_claim(&self.s, n, idle, self.lease_ms, &mut self.rng),
            n,
        ));
    }

    /// The outstanding claim's answer, if it came.
    fn answer(&self) -> Option<(Result<Taken>, usize)> {
        self.outstanding
            .as_ref()
            .and_then(|(rx, asked)| match rx.try_recv() {
                Ok(a) => Some((a, *asked)),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some((
                    Err(Error::Internal(
                        "the writer dropped a claim unanswered".into(),
                    )),
                    *asked,
                )),
            })
    }

    /// Takes the outstanding claim's answer if it came; a failed claim
    /// pauses the supervisor.
    fn take_answer(&mut self) -> Step {
        let Some((answer, asked)) = self.answer() else {
            return Step::Next;
        };
        self.outstanding = None;
        match answer {
            Ok(taken) => {
                self.took(taken, asked);
                Step::Next
            }
            Err(e) => {
                log::warn!(target: "litejob", "claim failed: {e}");
                self.want_claim = true;
                self.more_known = false;
                sleep_or_stop(&self.stop, Duration::from_millis(200));
                Step::Again
            }
        }
    }

    /// What a claim took: counts it in flight, sends the next claim at once
    /// if more may be waiting, and hands it to the workers.
    fn took(&mut self, taken: Taken, asked: usize) {
        let n = taken.claimed.len() + taken.runs.len() + taken.later.unwrap_or(0);
        count_in_flight(&self.s, &taken);
        if let Some(at) = taken.frees_at {
            // A full rate frees a start then: look again at that moment
            // rather than at the next poll.
            let wait = Duration::from_millis((at - self.s.now()).max(0) as u64);
            self.next_poll = self.next_poll.min(Instant::now() + wait);
        }
        // A full batch means more may be waiting: claim again at once. The
        // next claim goes to the writer before this one's runs go to the
        // workers: the writer, the bottleneck, then finds it waiting when it
        // is done with this batch (handing runs to the workers first, with
        // their wake-ups, left the writer idle meanwhile).
        self.more_known = n == asked && n > 0;
        self.want_claim = n == asked || std::mem::take(&mut self.woken);
        if self.want_claim && taken.claimed.is_empty() {
            let free = self.free();
            if free > 0 {
                self.send_claim(free);
            }
        }
        dispatch(&self.s, &self.buffer, taken);
        if n > 0 {
            fault::point("after-claim-commit");
        }
    }

    /// Claims in whole batches, once the workers took every claimed job
    /// (they hold up to `MAX_PIPELINE` runs each in flight meanwhile): the
    /// claim and the runs it feeds then fill writer cycles of about
    /// `capacity` runs; re-claiming at half empty made cycles of half that,
    /// and processing slower.
    fn claim_if_wanted(&mut self) -> Step {
        if self.outstanding.is_some()
            || !self.has_handlers
            || !self.want_claim
            || !self.buffer.is_empty()
        {
            return Step::Next;
        }
        let free = self.free();
        if free == 0 {
            return Step::Next;
        }
        match any_to_claim(&self.s, self.more_known) {
            Ok(true) => {
                self.woken = false;
                self.send_claim(free);
            }
            Ok(false) => self.want_claim = false,
            Err(e) => {
                log::warn!(target: "litejob", "claim failed: {e}");
                sleep_or_stop(&self.stop, Duration::from_millis(200));
                return Step::Again;
            }
        }
        Step::Next
    }

    /// Waits for the next timer, a stop, an enqueue, room in the pipelines
    /// or the claim's answer (which is left in its channel for the next
    /// turn).
    fn wait(&mut self) -> Step {
        let timeout = self
            .next_heartbeat
            .min(self.next_reap)
            .min(self.next_poll)
            .saturating_duration_since(Instant::now());
        let mut sel = crossbeam_channel::Select::new();
        let i_stop = sel.recv(&self.stop);
        let i_wake = sel.recv(&self.wake);
        let i_space = sel.recv(&self.space);
        if let Some((rx, _)) = &self.outstanding {
            sel.recv(rx);
        }
        match sel.ready_timeout(timeout) {
            Ok(i) if i == i_stop => return Step::Stop,
            Ok(i) if i == i_wake => {
                let _ = self.wake.try_recv();
                self.want_claim = true;
                self.woken = true;
            }
            Ok(i) if i == i_space => {
                let _ = self.space.try_recv();
            }
            _ => {}
        }
        Step::Next
    }

    /// Stopping: what the last claim took still goes to the workers (or to
    /// the buffer, which the stop gives back).
    fn hand_over_last_claim(self) {
        let Some((rx, _)) = self.outstanding else {
            return;
        };
        let s = &self.s;
        if let Ok(taken) = writer::wait(rx) {
            count_in_flight(s, &taken);
            let later = taken.later.is_some();
            dispatch(s, &self.buffer, taken);
            if later {
                // Its light follow-up hands over the rest of its runs when
                // it runs, in the same cycle: let that cycle end first, so
                // the stop sees them through.
                let _ = s.writer.run_light(|_| Ok(()));
            }
        }
    }
}

/// Hands what a claim took to the workers: each run to the worker that
/// finishes it, each job to start to the buffer.
fn dispatch(s: &Arc<Pipe>, buffer: &Sender<Claimed>, taken: Taken) {
    for run in taken.runs {
        if let Err(e) = s.runs_tx.send(run) {
            // Nobody to receive it (never while the runtime runs).
            let _ = finish_job(s, Pending::Run(e.0));
        }
    }
    for c in taken.claimed {
        if buffer.try_send(c.clone()).is_err() {
            // Cannot happen (the claim asked for at most the space), but
            // never lose a claim.
            let _ = s.release_unstarted(c.id);
        }
    }
}
