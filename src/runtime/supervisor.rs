//! The supervisor thread: claims, hands what it took to the workers, and
//! keeps the leases' timers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::claim::{self, Claimed};
use crate::error::{Error, Result};
use crate::fault;
use crate::retry::Rng;
use crate::time::now_ms;
use crate::writer;

use super::claims::{any_to_claim, count_in_flight, submit_claim, Taken};
use super::finish::finish_job;
use super::leases::{heartbeat, reap};
use super::{sleep_or_stop, Shared};

pub(super) fn supervisor_loop(
    s: Arc<Shared>,
    buffer: Sender<Claimed>,
    (_space_tx, space): (Sender<()>, Receiver<()>),
    stop: Receiver<()>,
    capacity: usize,
) {
    let wake = s.job_wake.clone();
    let lease_ms = s.cfg.lease.as_millis() as i64;
    let heartbeat_every = s.cfg.lease / 3;
    let mut next_heartbeat = Instant::now() + heartbeat_every;
    let mut next_reap = Instant::now();
    let mut next_poll = Instant::now();
    let mut want_claim = true;
    // The last claim filled its batch: more work is surely waiting, so the
    // next claim skips the read-only look first.
    let mut more_known = false;
    let has_handlers = !s.handlers.is_empty();
    let mut rng = Rng::from_entropy();
    // The claim on the writer (at most one), and how many jobs it asked for.
    let mut outstanding: Option<(Receiver<Result<Taken>>, usize)> = None;
    // A wake-up or a poll came after the outstanding claim was sent: it may
    // not have seen that job, so claim again whatever it took.
    let mut woken = false;
    // How many jobs the next claim may take: the buffer's space, and the
    // claimed jobs not finished yet are bounded (`max_in_flight`).
    let free = |buffer: &Sender<Claimed>| {
        // Set before looking, so a worker that finishes a run meanwhile
        // sees it and wakes us.
        s.room_wanted.store(true, Ordering::SeqCst);
        let reserved = s.later_reserved.load(Ordering::SeqCst).max(0) as usize;
        let room = s
            .max_in_flight
            .saturating_sub(s.in_flight.lock().unwrap().jobs.len() + reserved);
        let free = capacity.saturating_sub(buffer.len()).min(room);
        if free > 0 {
            s.room_wanted.store(false, Ordering::SeqCst);
        }
        free
    };
    loop {
        if s.stopping.load(Ordering::SeqCst) {
            break;
        }
        let now_i = Instant::now();
        if now_i >= next_heartbeat {
            heartbeat(&s, now_ms() + lease_ms);
            next_heartbeat = now_i + heartbeat_every;
        }
        if now_i >= next_reap {
            reap(&s);
            next_reap = now_i
                + s.cfg
                    .poll_interval
                    .max(Duration::from_millis(200))
                    .min(s.cfg.lease / 2);
        }
        if now_i >= next_poll {
            want_claim = true;
            woken = true;
            next_poll = now_i + s.cfg.poll_interval;
        }
        let answer = outstanding
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
            });
        if let Some((answer, asked)) = answer {
            outstanding = None;
            match answer {
                Ok(taken) => {
                    let n = taken.claimed.len() + taken.runs.len() + taken.later.unwrap_or(0);
                    count_in_flight(&s, &taken);
                    // A full batch means more may be waiting: claim again
                    // at once. The next claim goes to the writer before
                    // this one's runs go to the workers: the writer, the
                    // bottleneck, then finds it waiting when it is done
                    // with this batch (handing runs to four workers first,
                    // with their wake-ups, took ~1 ms and left the writer
                    // idle a fifth of the time).
                    more_known = n == asked && n > 0;
                    want_claim = n == asked || std::mem::take(&mut woken);
                    if want_claim && taken.claimed.is_empty() {
                        let free = free(&buffer);
                        if free > 0 {
                            outstanding = Some((submit_claim(&s, free, lease_ms, &mut rng), free));
                        }
                    }
                    dispatch(&s, &buffer, taken);
                    if n > 0 {
                        fault::point("after-claim-commit");
                    }
                }
                Err(e) => {
                    log::warn!(target: "litejob", "claim failed: {e}");
                    want_claim = true;
                    more_known = false;
                    sleep_or_stop(&stop, Duration::from_millis(200));
                    continue;
                }
            }
        }
        // Claim in whole batches, once the workers took every claimed job
        // (they hold up to MAX_PIPELINE runs each in flight meanwhile): the
        // claim and the runs it feeds then fill writer cycles of ~capacity
        // runs. Re-claiming at half empty made cycles of half that, and
        // processing ~10 % slower (6 alternating runs, same minutes).
        if outstanding.is_none() && has_handlers && want_claim && buffer.is_empty() {
            let free = free(&buffer);
            if free > 0 {
                match any_to_claim(&s, more_known) {
                    Ok(true) => {
                        woken = false;
                        outstanding = Some((submit_claim(&s, free, lease_ms, &mut rng), free));
                    }
                    Ok(false) => want_claim = false,
                    Err(e) => {
                        log::warn!(target: "litejob", "claim failed: {e}");
                        sleep_or_stop(&stop, Duration::from_millis(200));
                        continue;
                    }
                }
            }
        }
        let timeout = next_heartbeat
            .min(next_reap)
            .min(next_poll)
            .saturating_duration_since(Instant::now());
        // Woken by the claim's answer too, which is left in its channel
        // for the top of the loop.
        let mut sel = crossbeam_channel::Select::new();
        let i_stop = sel.recv(&stop);
        let i_wake = sel.recv(&wake);
        let i_space = sel.recv(&space);
        if let Some((rx, _)) = &outstanding {
            sel.recv(rx);
        }
        match sel.ready_timeout(timeout) {
            Ok(i) if i == i_stop => break,
            Ok(i) if i == i_wake => {
                let _ = wake.try_recv();
                want_claim = true;
                woken = true;
            }
            Ok(i) if i == i_space => {
                let _ = space.try_recv();
            }
            _ => {}
        }
    }
    // Stopping: what the last claim took still goes to the workers (or to
    // the buffer, which the stop gives back).
    if let Some((rx, _)) = outstanding {
        if let Ok(taken) = writer::wait(rx) {
            count_in_flight(&s, &taken);
            let later = taken.later.is_some();
            dispatch(&s, &buffer, taken);
            if later {
                // Its light follow-up hands over the rest of its runs when
                // it runs, in the same cycle: let that cycle end first, so
                // the stop sees them through.
                let _ = s.queue.writer().run_light(|_| Ok(()));
            }
        }
    }
}

/// Hands what a claim took to the workers: each run to the worker that
/// finishes it, each job to start to the buffer.
pub(super) fn dispatch(s: &Arc<Shared>, buffer: &Sender<Claimed>, taken: Taken) {
    for run in taken.runs {
        if let Err(e) = s.runs_tx.send(run) {
            // Nobody to receive it (never while the runtime runs).
            finish_job(s, e.0);
        }
    }
    for c in taken.claimed {
        if buffer.try_send(c.clone()).is_err() {
            // Cannot happen (the claim asked for at most the space), but
            // never lose a claim.
            let o = s.owner.clone();
            let _ = s
                .queue
                .writer()
                .run(move |conn| claim::release(conn, c.id, &o, None, "", now_ms()));
        }
    }
}
