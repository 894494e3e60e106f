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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, TryLockError};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use crate::core::attempt::{cap_error, AttemptOutcome};
use crate::core::backoff::Rng;
use crate::core::handler::{JobContext, PrepareStop, Prepared};
use crate::core::job::JobState;
use crate::core::lifecycle::RunEnd;
use crate::core::lifecycle::{judge, Next, Verdict};
use crate::core::time::Millis;
use crate::driver::handler::ErasedHandler;
use crate::driver::run::Savepoint;
use crate::driver::run::{
    backoff_at, context as run_context, log_finished, log_not_recorded, log_started, prepare,
    RunStart,
};
use crate::error::{Error, Result};
use crate::fault;
use crate::postgres::conn::{PgConn, Session};
use crate::postgres::controls as pg_controls;
use crate::postgres::run::{self, ClaimAsk, End, Started, Statements};
use crate::postgres::store::PgStore;
use crate::postgres::tx::{PgJobTx, RELEASE_RUN, ROLLBACK_RUN};
use crate::postgres::Postgres;
use crate::postgres::{leases, notify};

use crate::core::lifecycle::{
    failure, released_after_failed_write, DUPLICATE_RUN, RELEASED_AT_SHUTDOWN,
};
use crate::driver::leases::{heartbeat, reap};
use crate::driver::pipeline::{sleep_or_stop, spawn, worker_name, Launched, Pipeline, Shared};
use crate::driver::Store;

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
                }
                .run()
            })?);
        }
    }
    {
        let s = s.clone();
        threads.push(spawn("litejob-keeper".into(), move || keeper_loop(s))?);
    }
    {
        let session = store.session.clone();
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
    session.setup.push_str(&format!(
        "; SET statement_timeout = {budget}; SET synchronous_commit = off"
    ));
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
            heartbeat(&s, s.store.now() + lease_ms);
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

/// One run of a batch, from its start to its end.
struct Run {
    started: Started,
    ctx: JobContext,
    handler: Arc<dyn ErasedHandler<Postgres>>,
    prepared: Option<std::result::Result<Prepared, PrepareStop>>,
    backoff_at: Millis,
    t0: Instant,
    /// What the batch's transaction recorded.
    end: Option<RunEnd>,
}

pub(crate) struct Worker {
    s: Arc<Shared<Postgres>>,
    session: Session,
    stop: Receiver<()>,
    alone: Arc<RwLock<()>>,
    batch: usize,
    name: String,
    conn: Option<(PgConn, Statements)>,
    /// Set when a write failed: a claim of ours may have committed without
    /// its answer reaching us, or runs given back may not have gone back.
    /// Cleared by the next claim, which first gives back what we hold.
    unsure: bool,
    rng: Rng,
    /// When a full rate frees a start, as the last claim found.
    frees_at: Option<Millis>,
}

impl Worker {
    fn run(mut self) {
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
                    log::warn!(target: "litejob", "worker {}: {e}; retrying", self.name);
                    self.conn = None;
                    self.unsure = true;
                    sleep_or_stop(&self.stop, Duration::from_millis(500));
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
    fn connection(&mut self) -> Result<&mut (PgConn, Statements)> {
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
        let shared = alone.read().unwrap_or_else(|e| e.into_inner());
        let batch = self.claim(false, self.batch)?;
        let full = batch.len() == self.batch;
        if full {
            // Wake another worker: there is surely more.
            self.s.notify();
        }
        if !batch.is_empty() {
            // A batch not recorded was logged and given back.
            let _ = self.run_batch(batch);
            return Ok(true);
        }
        drop(shared);
        // Nothing ordinary due: a suspect, alone, once no other worker's
        // batch is in flight. Not waiting for them: a waiting writer holds
        // back every other worker's next claim, so one run stuck in its
        // prepare step would stop the whole process.
        let _alone = match alone.try_write() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        let suspect = self.claim(true, 1)?;
        if suspect.is_empty() {
            return Ok(false);
        }
        let _ = self.run_batch(suspect);
        Ok(true)
    }

    /// Claims and starts up to `limit` jobs. With queue controls in force,
    /// each capped or rate-limited queue is claimed first, alone, under its
    /// row's lock; the one claim statement then takes the rest, skipping
    /// the controlled queues (paused ones included).
    fn claim(&mut self, suspects: bool, limit: usize) -> Result<Vec<Started>> {
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
            let ours = s.cfg.queues.as_ref().map_or(true, |qs| qs.contains(q));
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
            let capped = limits.concurrency.is_some() && !got.started.is_empty();
            started.extend(got.started);
            if capped {
                // A capped queue's slot is held until its batch commits:
                // a batch of its own, not one behind other runs.
                capped_batch = true;
                break;
            }
        }
        if started.len() < limit && !capped_batch {
            started.extend(run::claim(
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
            s.in_flight.started(j.id, j.attempt_id);
        }
        if !started.is_empty() {
            fault::point("after-claim-commit");
        }
        Ok(started)
    }

    /// Prepares, applies and records a batch; a batch whose transaction
    /// failed is given back uncharged. Once the runtime is stopping, the
    /// runs whose user code has not started are given back, and those whose
    /// prepare step ran finish: the grace period is theirs. Returns how the
    /// recorded runs ended, or why the batch was not recorded.
    fn run_batch(&mut self, batch: Vec<Started>) -> Result<Vec<RunEnd>> {
        let mut runs = Vec::with_capacity(batch.len());
        for j in batch {
            if self.s.stopping.load(Ordering::SeqCst) {
                self.give_back_one(j.id, j.attempt_id, RELEASED_AT_SHUTDOWN);
            } else if let Some(r) = self.begin(j) {
                runs.push(r);
            }
        }
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        match self.apply(&mut runs) {
            Ok(()) => {
                fault::point("after-complete-commit");
                for r in &runs {
                    self.finish(r);
                }
                self.s.slot_freed();
                Ok(runs.into_iter().filter_map(|r| r.end).collect())
            }
            Err(e) => {
                log::warn!(target: "litejob", "a batch of {} runs was not recorded ({e}); giving it back", runs.len());
                self.conn = None;
                self.unsure = true;
                self.give_back(&runs, &released_after_failed_write(&e.to_string()));
                Err(e)
            }
        }
    }

    /// A run's start: its context, and its prepare step (or the payload's
    /// decoding) run here, outside any transaction.
    fn begin(&mut self, j: Started) -> Option<Run> {
        let Some(handler) = self.s.handlers.get(&j.kind).cloned() else {
            // Cannot happen (the claim asks only for our kinds).
            self.give_back_one(
                j.id,
                j.attempt_id,
                "no handler for its kind in this runtime",
            );
            return None;
        };
        let ctx = run_context(RunStart {
            id: j.id,
            kind: &j.kind,
            key: &j.key,
            queue: &j.queue,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
        });
        log_started(&ctx, &self.name);
        fault::point("after-start-commit");
        let backoff_at = backoff_at(
            &self.s.cfg.backoff,
            &ctx,
            self.rng.unit(),
            self.s.store.now(),
        );
        let t0 = Instant::now();
        fault::point("in-handler");
        let prepared = prepare(handler.as_ref(), &ctx, &j.payload);
        Some(Run {
            started: j,
            ctx,
            handler,
            prepared: Some(prepared),
            backoff_at,
            t0,
            end: None,
        })
    }

    /// The batch's transaction: fence and ledger, handlers, ends, commit.
    fn apply(&mut self, runs: &mut [Run]) -> Result<()> {
        let s = self.s.clone();
        let outbox_max_attempts = s.cfg.outbox_max_retries as i64 + 1;
        let now = s.store.now();
        let (c, st) = self.connection()?;
        let mut tx = c
            .client
            .transaction()
            .map_err(crate::postgres::conn::read_err)?;
        let asks: Vec<(i64, i64, bool)> = runs
            .iter()
            .map(|r| {
                let ok = matches!(r.prepared, Some(Ok(_)));
                (r.started.id, r.started.attempt_id, ok)
            })
            .collect();
        let held: std::collections::HashMap<i64, bool> =
            run::fence_and_ledger(&mut tx, st, &asks, now)?
                .into_iter()
                .collect();
        let mut ends = Vec::with_capacity(runs.len());
        let mut failed_keys = Vec::new();
        for r in runs.iter_mut() {
            let Some(&ledger_new) = held.get(&r.started.id) else {
                // The lease was lost (it expired, another process took the
                // job over): nothing of this run is recorded.
                continue;
            };
            let Some(prepared) = r.prepared.take() else {
                return Err(Error::Internal(format!(
                    "job {}: its run was applied twice in one batch",
                    r.ctx.id
                )));
            };
            let end = match prepared {
                Err(stop) => {
                    let (outcome, msg, next) = failure(stop, r.backoff_at);
                    failed(outcome, msg, next)
                }
                Ok(_) if !ledger_new => RunEnd {
                    outcome: AttemptOutcome::Duplicate,
                    state: JobState::Succeeded,
                    error: Some(DUPLICATE_RUN.into()),
                    retry_at: None,
                    outbox_added: 0,
                    discarded: false,
                },
                Ok(prepared) => {
                    let mut jtx = PgJobTx {
                        tx: &mut tx,
                        job: &r.ctx,
                        now,
                        outbox_max_attempts,
                        outbox_add: &st.outbox_add,
                        outbox_added: 0,
                        savepoint: Savepoint::NotOpened,
                    };
                    let handler = r.handler.clone();
                    let result =
                        catch_unwind(AssertUnwindSafe(|| handler.apply(&mut jtx, prepared)));
                    let (savepoint, added) = (jtx.savepoint, jtx.outbox_added);
                    if savepoint == Savepoint::Failed {
                        return Err(Error::Aborted(format!(
                            "job {}: its savepoint could not be opened; the batch was rolled back",
                            r.ctx.id
                        )));
                    }
                    let opened = savepoint == Savepoint::Open;
                    match judge(result, now, r.backoff_at) {
                        Verdict::Done if !opened || tx.batch_execute(RELEASE_RUN).is_ok() => {
                            RunEnd {
                                outcome: AttemptOutcome::Succeeded,
                                state: JobState::Succeeded,
                                error: None,
                                retry_at: None,
                                outbox_added: added,
                                discarded: false,
                            }
                        }
                        verdict => {
                            let (outcome, msg, next) = match verdict {
                                Verdict::Failed(o, m, n) => (o, m, n),
                                // Done, but its savepoint does not release:
                                // one of its statements failed and the
                                // handler went on.
                                Verdict::Done => (
                                    AttemptOutcome::Failed,
                                    "the handler's SQL failed (the transaction was aborted) \
                                     but it returned Done"
                                        .to_string(),
                                    Next::RetryAt(r.backoff_at),
                                ),
                            };
                            if opened {
                                tx.batch_execute(&format!("{ROLLBACK_RUN}; {RELEASE_RUN}"))
                                    .map_err(crate::postgres::conn::read_err)?;
                            }
                            failed_keys.push(r.ctx.key.clone());
                            failed(outcome, msg, next)
                        }
                    }
                }
            };
            ends.push(End {
                job_id: r.started.id,
                attempt_id: r.started.attempt_id,
                outcome: end.outcome.as_str(),
                error: end.error.as_deref().map(cap_error),
                retry_at: end.retry_at.unwrap_or(now),
                discard: end.state == JobState::Dead,
            });
            r.end = Some(end);
        }
        run::unledger(&mut tx, st, &failed_keys)?;
        fault::point("before-complete-commit");
        let durable = s.store.opts.synchronous == crate::core::options::Synchronous::Full;
        let states = run::end(&mut tx, st, &ends, now, durable)?;
        if states.len() != ends.len() {
            // A run lost its lease after the fence (a stall past the
            // lease): its work must not commit, and it cannot be told from
            // the others' in this transaction. All of it is undone.
            drop(tx);
            return Err(Error::LeaseLost {
                job_id: ends
                    .iter()
                    .find(|e| !states.iter().any(|(id, _)| *id == e.job_id))
                    .map_or(0, |e| e.job_id),
                detail: "its lease was lost during the batch; the batch was rolled back".into(),
            });
        }
        tx.commit().map_err(crate::postgres::conn::write_err)?;
        // The states the commit recorded; retry times only for the jobs
        // that went back to queued.
        for r in runs.iter_mut() {
            let state = states.iter().find(|(id, _)| *id == r.started.id);
            if let (Some(end), Some((_, st))) = (&mut r.end, state) {
                end.state = st.parse()?;
                if end.state != JobState::Queued {
                    end.retry_at = None;
                }
            }
        }
        Ok(())
    }

    /// Logs a run's end and lets go of its job.
    fn finish(&self, r: &Run) {
        let s = &self.s;
        let ms = r.t0.elapsed().as_millis() as u64;
        match &r.end {
            Some(end) => {
                log_finished(&r.ctx, end, ms);
                if end.outbox_added > 0 {
                    s.notify_outbox();
                    s.store.notifier.outbox();
                }
            }
            None => log_not_recorded(
                &r.ctx,
                ms,
                "lease lost: the run no longer held the job; nothing of it was recorded",
            ),
        }
        s.in_flight.run_ended(r.ctx.id, r.started.attempt_id);
    }

    /// Gives a batch's runs back uncharged (fenced on their attempts),
    /// retrying while the server is out of reach and the lease lasts.
    fn give_back(&self, runs: &[Run], why: &str) {
        // One deadline for the batch: with the server out of reach, what is
        // not given back by then comes back when its lease expires.
        let give_up = Instant::now() + self.s.cfg.lease;
        for r in runs {
            self.give_back_until(r.started.id, r.started.attempt_id, why, give_up);
        }
    }

    fn give_back_one(&self, id: i64, attempt_id: i64, why: &str) {
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

/// How a failed run ends, as far as the batch knows before its commit: a
/// discarded job is dead, any other goes back to `queued` unless the
/// commit finds it out of attempts.
fn failed(outcome: AttemptOutcome, msg: String, next: Next) -> RunEnd {
    let (state, retry_at) = match next {
        Next::RetryAt(at) => (JobState::Queued, Some(at)),
        Next::Discard => (JobState::Dead, None),
    };
    RunEnd {
        outcome,
        state,
        error: Some(msg),
        retry_at,
        outbox_added: 0,
        discarded: matches!(next, Next::Discard),
    }
}
