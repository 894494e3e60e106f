//! The runtime's threads on PostgreSQL. Each worker owns a connection and
//! claims for itself: a batch of jobs claimed and started in one statement
//! (`FOR UPDATE SKIP LOCKED`), their prepare steps on the worker, then one
//! transaction for the batch — fence and ledger rows first, each handler's
//! writes in a savepoint, every run's end in one statement, one durable
//! commit (group commit: one WAL flush for the batch). A suspect (a run of
//! it was cut short by a crash, perhaps a poison pill) runs alone: no other
//! run of this process is in flight while it does, so a crash it causes
//! abandons nobody else. The keeper renews leases and reaps expired ones;
//! the listener turns other processes' notifications into wake-ups.
//! Writes `jobs`, `attempts`, `processed_jobs` and `outbox` through the
//! PostgreSQL backend's modules.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::core::backoff::Rng;
use crate::core::lifecycle::RunEnd;
use crate::error::Result;
use crate::postgres::conn::Session;
use crate::postgres::notify;
use crate::postgres::store::PgStore;
use crate::postgres::Postgres;

use crate::driver::leases::{reap, renew_leases};
use crate::driver::pipeline::{spawn, worker_name, Launched, Pipeline, Shared};
use crate::driver::runner::Runner;
use crate::driver::Store;

mod batch;
mod worker;

use batch::Run;
pub(crate) use worker::Worker;

/// Most jobs one worker's claim takes, and its default: a batch shares one
/// transaction and one commit, whose fixed costs a larger batch spreads.
const MAX_BATCH: usize = 100;

/// A worker's batch by default when a handler has a prepare step.
const PREPARE_BATCH: usize = 32;

/// Starts the workers, the keeper and the listener.
pub(crate) fn start(s: Arc<Shared<Postgres>>) -> Result<Launched> {
    let store = s.store.clone();
    let mut threads = Vec::new();
    // Held for reading from a claim to its batch's commit; for writing
    // while a suspect runs.
    let alone = Arc::new(RwLock::new(()));
    if !s.handlers.is_empty() {
        let batch = if s.cfg.claim_ahead_set {
            s.cfg.claim_ahead.clamp(1, MAX_BATCH)
        } else if s.handlers.values().any(|h| h.has_prepare()) {
            // A batch's prepare steps run one after another, each holding
            // the whole batch's commit back.
            PREPARE_BATCH
        } else {
            MAX_BATCH
        };
        for i in 0..s.cfg.workers {
            let (s, alone) = (s.clone(), alone.clone());
            let session = worker_session(&store, &s);
            threads.push(spawn(format!("litejob-worker-{}", i + 1), move || {
                let runner = Runner::new(s.runners.clone());
                Worker {
                    name: worker_name(),
                    stop: s.stop.clone(),
                    s,
                    session,
                    alone,
                    batch,
                    conn: None,
                    unsure: false,
                    rng: Rng::from_entropy(),
                    frees_at: None,
                    runner,
                }
                .run()
            })?);
        }
    }
    {
        let s = s.clone();
        threads.push(spawn("litejob-keeper".into(), move || keeper_loop(s))?);
    }
    // Behind a transaction pooler notifications cannot reach a listener
    // (its LISTEN would hold on one server session the pooler lends to
    // others): there workers poll, unless a direct URL was named for it.
    if let Some(session) = store.listen.clone() {
        threads.push(spawn("litejob-listener".into(), move || {
            notify::listen_loop(
                &session,
                &s.stop,
                s.cfg.poll_interval,
                || s.notify(),
                || s.notify_outbox(),
            )
        })?);
    }
    Ok(Launched {
        pipeline: Box::new(DatabasePipeline),
        threads,
    })
}

/// A worker with no thread, for a drain: claims, runs and records batches
/// in the caller's thread until no job is due.
pub(crate) fn drain(s: Arc<Shared<Postgres>>) -> Worker {
    let session = worker_session(&s.store, &s);
    Worker {
        name: worker_name(),
        stop: s.stop.clone(),
        session,
        alone: Arc::new(RwLock::new(())),
        batch: MAX_BATCH,
        conn: None,
        unsure: false,
        rng: Rng::from_entropy(),
        frees_at: None,
        runner: Runner::inline(),
        s,
    }
}

impl crate::driver::pipeline::DrainJobs for Worker {
    fn run_due(&mut self) -> Result<Vec<RunEnd>> {
        let mut ends = Vec::new();
        loop {
            let mut batch = self.claim(false, self.batch)?;
            if batch.is_empty() {
                // Alone by construction: the drain is the only worker.
                batch = self.claim(true, 1)?;
            }
            if batch.is_empty() {
                return Ok(ends);
            }
            ends.extend(self.run_batch(batch)?);
        }
    }
}

/// PostgreSQL's pipeline as the runtime holds it. Its workers claim for
/// themselves and give back what they hold before they stop: nothing is
/// left for the stop but the runs still in flight, which the runtime gives
/// back from its lease bookkeeping.
struct DatabasePipeline;

impl Pipeline for DatabasePipeline {
    fn wind_down(&mut self) -> usize {
        0
    }
}

/// A worker's session: the store's, with the transaction budget as the
/// statement timeout, and claims that do not wait for their WAL flush
/// (the batch's commit sets it back on: see [`run`]).
fn worker_session(store: &PgStore, s: &Shared<Postgres>) -> Session {
    let mut session = store.session.clone();
    let budget = s
        .store
        .opts
        .transaction_budget
        .map_or(0, |d| d.as_millis().max(1));
    session.set("statement_timeout", budget.to_string());
    session.set("synchronous_commit", "off");
    session
}

/// The keeper: renews this process's leases every third of a lease and
/// reaps expired ones (any process's) every poll interval.
fn keeper_loop(s: Arc<Shared<Postgres>>) {
    let stop = s.stop.clone();
    let lease_ms = s.cfg.lease.as_millis() as i64;
    let every_beat = s.cfg.lease / 3;
    let every_reap = s
        .cfg
        .poll_interval
        .max(Duration::from_millis(200))
        .min(s.cfg.lease / 2);
    let (mut next_beat, mut next_reap) = (Instant::now() + every_beat, Instant::now());
    loop {
        if s.stopping.load(Ordering::SeqCst) {
            return;
        }
        let now_i = Instant::now();
        if now_i >= next_beat {
            renew_leases(&s, s.store.now() + lease_ms);
            next_beat = now_i + every_beat;
        }
        if now_i >= next_reap {
            reap(&s);
            next_reap = now_i + every_reap;
        }
        let wait = next_beat
            .min(next_reap)
            .saturating_duration_since(Instant::now());
        if stop.recv_timeout(wait).is_ok() || s.stopping.load(Ordering::SeqCst) {
            return;
        }
    }
}
