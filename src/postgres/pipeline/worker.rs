//! A PostgreSQL worker: its connection, its loop (claim a batch, run it,
//! wait for news), the claim under the queue controls, and giving back
//! what it holds. Writes `jobs` and `attempts` through the engine's claim.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, TryLockError};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use crate::core::backoff::Rng;
use crate::core::sync::read;
use crate::core::time::Millis;
use crate::error::Result;
use crate::fault;
use crate::postgres::claim::{self, ClaimAsk, Started};
use crate::postgres::conn::{PgConn, Session};
use crate::postgres::controls as pg_controls;
use crate::postgres::leases;
use crate::postgres::run::Statements;
use crate::postgres::Postgres;

use crate::driver::pipeline::{sleep_or_stop, Shared};
use crate::driver::runner::Runner;
use crate::driver::Store;

use super::Run;

pub(crate) struct Worker {
    pub(super) s: Arc<Shared<Postgres>>,
    pub(super) session: Session,
    pub(super) stop: Receiver<()>,
    pub(super) alone: Arc<RwLock<()>>,
    pub(super) batch: usize,
    pub(super) name: String,
    pub(super) conn: Option<(PgConn, Statements)>,
    /// Set when a write failed: a claim of ours may have committed without
    /// its answer reaching us, or runs given back may not have gone back.
    /// Cleared by the next claim, which first gives back what we hold.
    pub(super) unsure: bool,
    pub(super) rng: Rng,
    /// When a full rate frees a start, as the last claim found.
    pub(super) frees_at: Option<Millis>,
    /// Where its runs' prepare steps with a timeout run (see [`Runner`]).
    pub(super) runner: Runner,
}

impl Worker {
    pub(super) fn run(mut self) {
        let wake = self.s.job_wake.clone();
        loop {
            if self.s.stopping.load(Ordering::SeqCst) {
                return;
            }
            match self.turn() {
                Ok(true) => continue,
                Ok(false) => {
                    select! {
                        recv(self.stop) -> _ => return,
                        recv(wake) -> _ => {},
                        default(self.idle_wait()) => {},
                    }
                }
                Err(e) => {
                    let reach = &self.session.reach;
                    // While the server is out of reach the queue says so once
                    // (see `reach`), and this worker waits for the next
                    // attempt of the process's.
                    let wait = if reach.is_down() {
                        log::debug!(target: "litejob", "worker {}: {e}; retrying", self.name);
                        reach.retry_in()
                    } else {
                        log::warn!(target: "litejob", "worker {}: {e}; retrying", self.name);
                        Duration::from_millis(500)
                    };
                    self.conn = None;
                    self.unsure = true;
                    sleep_or_stop(&self.stop, wait);
                }
            }
        }
    }

    /// How long to wait for news when idle: the poll interval, or less
    /// when a full rate frees a start sooner.
    fn idle_wait(&self) -> Duration {
        let poll = self.s.cfg.poll_interval;
        match self.frees_at {
            Some(at) => {
                let ms = (at - self.s.store.now()).max(1) as u64;
                poll.min(Duration::from_millis(ms))
            }
            None => poll,
        }
    }

    /// The worker's connection and its statements, opened if need be.
    pub(super) fn connection(&mut self) -> Result<&mut (PgConn, Statements)> {
        let open = match self.conn.take() {
            Some((c, st)) if !c.client.is_closed() => (c, st),
            _ => {
                let mut c = self.session.connect()?;
                let st = Statements::prepare(&mut c)?;
                (c, st)
            }
        };
        Ok(self.conn.insert(open))
    }

    /// One claim and its batch; true when it took a full batch (more is
    /// likely waiting).
    fn turn(&mut self) -> Result<bool> {
        let alone = self.alone.clone();
        let shared = read(&alone);
        let batch = self.claim(false, self.batch)?;
        let full = batch.len() == self.batch;
        if full {
            // Wake another worker: there is surely more.
            self.s.notify();
        }
        if !batch.is_empty() {
            // A batch not recorded was logged and given back.
            let _ = self.run_batch(batch);
            // Past the cap of runner threads left behind, a run given up
            // on holds its worker until its code returns.
            self.runner.settle();
            return Ok(true);
        }
        drop(shared);
        // Nothing ordinary due: a suspect, alone, once no other worker's
        // batch is in flight. Not waiting for them: a waiting writer holds
        // back every other worker's next claim, so one run stuck in its
        // prepare step would stop the whole process.
        let _alone = match alone.try_write() {
            Ok(g) => g,
            // Poisoned: see `crate::core::sync`.
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        let suspect = self.claim(true, 1)?;
        if suspect.is_empty() {
            return Ok(false);
        }
        let _ = self.run_batch(suspect);
        self.runner.settle();
        Ok(true)
    }

    /// Claims and starts up to `limit` jobs. With queue controls in force,
    /// each capped or rate-limited queue is claimed first, alone, under its
    /// row's lock; the one claim statement then takes the rest, skipping
    /// the controlled queues (paused ones included).
    // Long: the release of lost claims, each controlled queue's claim and
    // the claim of the rest, in the order they run, all from one ask.
    pub(super) fn claim(&mut self, suspects: bool, limit: usize) -> Result<Vec<Started>> {
        if self.s.stopping.load(Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let s = self.s.clone();
        let store = s.store.clone();
        let now = s.store.now();
        let name = self.name.clone();
        let unsure = self.unsure;
        let (c, _) = self.connection()?;
        if unsure {
            // This worker runs nothing between its batches: a run still
            // recorded under its name is one nobody runs.
            let n = leases::release_lost_claims(c, &s.owner, &name, now)?;
            if n > 0 {
                log::info!(target: "litejob", "worker {name}: gave back {n} jobs whose claim's answer was lost");
                s.notify();
            }
            self.unsure = false;
        }
        let (c, st) = self.connection()?;
        let controls = store.controls.get(c, s.cfg.poll_interval)?;
        let ask = ClaimAsk {
            kinds: &s.kinds,
            queues: s.cfg.queues.as_deref(),
            skipped: None,
            limit: limit as i64,
            suspects,
            owner: &s.owner,
            lease_until: now + s.cfg.lease.as_millis() as i64,
            worker: &name,
            now,
        };
        let mut started = Vec::new();
        let skipped: Vec<String> = controls.iter().map(|(q, _)| q.clone()).collect();
        let mut frees_at: Option<Millis> = None;
        let mut capped_batch = false;
        for (q, limits) in controls.iter() {
            let ours = s.cfg.queues.as_ref().is_none_or(|qs| qs.contains(q));
            if started.len() >= limit || limits.paused || !limits.limited() || !ours {
                continue;
            }
            let left = (limit - started.len()) as i64;
            let got = pg_controls::claim_limited(
                c,
                &st.claim,
                q,
                &ClaimAsk { limit: left, ..ask },
                &|| s.store.now(),
            )?;
            if got.held_back {
                s.slot_wanted.store(true, Ordering::SeqCst);
            }
            if got.more_room {
                // This worker takes one job of a capped queue at a time:
                // wake another for the next slot.
                s.notify();
            }
            frees_at = match (frees_at, got.frees_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let capped = (limits.concurrency.is_some() || limits.partition_concurrency.is_some())
                && !got.started.is_empty();
            started.extend(got.started);
            if capped {
                // A capped queue's slot is held until its batch commits:
                // a batch of its own, not one behind other runs.
                capped_batch = true;
                break;
            }
        }
        if started.len() < limit && !capped_batch {
            started.extend(claim::claim(
                c,
                st,
                &ClaimAsk {
                    skipped: (!skipped.is_empty()).then_some(&skipped[..]),
                    limit: (limit - started.len()) as i64,
                    ..ask
                },
            )?);
        }
        self.frees_at = frees_at;
        for j in &started {
            s.in_flight.started(j.id, j.attempt_id, None);
        }
        if !started.is_empty() {
            fault::point("after-claim-commit");
        }
        Ok(started)
    }

    /// Gives a batch's runs back uncharged (fenced on their attempts),
    /// retrying while the server is out of reach and the lease lasts.
    pub(super) fn give_back(&self, runs: &[Run], why: &str) {
        // One deadline for the batch: with the server out of reach, what is
        // not given back by then comes back when its lease expires.
        let give_up = Instant::now() + self.s.cfg.lease;
        for r in runs {
            self.give_back_until(r.started.id, r.started.attempt_id, why, give_up);
        }
    }

    pub(super) fn give_back_one(&self, id: i64, attempt_id: i64, why: &str) {
        self.give_back_until(id, attempt_id, why, Instant::now() + self.s.cfg.lease);
    }

    fn give_back_until(&self, id: i64, attempt_id: i64, why: &str, give_up: Instant) {
        let s = &self.s;
        let mut delay = Duration::from_millis(50);
        loop {
            let b = s.store.as_ref();
            match b.release_job(id, &s.owner, Some(attempt_id), why, b.now()) {
                Err(e) if e.is_transient() && Instant::now() < give_up => {
                    if sleep_until_stop(&self.stop, delay) {
                        break;
                    }
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                _ => break,
            }
        }
        s.in_flight.run_ended(id, attempt_id);
    }
}

/// Sleeps for `d`; true when the runtime stopped meanwhile.
fn sleep_until_stop(stop: &Receiver<()>, d: Duration) -> bool {
    !matches!(
        stop.recv_timeout(d),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    )
}
