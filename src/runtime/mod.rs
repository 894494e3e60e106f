//! The runtime: threads that claim jobs, run them and perform outbox effects,
//! renew leases, reap expired ones and stop gracefully. It owns and joins
//! every thread it starts. Writes `jobs`, `attempts` and `outbox` only through
//! the claim, execute and outbox modules, on the queue's writer.
//!
//! Threads (all named):
//! - `litejob-supervisor`: claims batches (woken by in-process enqueues
//!   through a channel, or by polling for other processes' work), renews
//!   leases, reaps expired ones. A claim starts the apply-only jobs it
//!   takes (handlers without a prepare step) itself and has the writer
//!   apply them in the same cycle; the rest go to the workers;
//! - `litejob-worker-N`: start → prepare (outside any transaction) → apply
//!   (on the writer, inside the group transaction); for the runs a claim
//!   started, only their end (the log line, letting go of the job);
//! - `litejob-effect-N`: claim one outbox row → call the effect outside any
//!   transaction → acknowledge;
//! - `litejob-scheduler` (only with schedules): sleeps until the next slot
//!   of a declared schedule, then enqueues its job.
//!
//! [`Runtime`] (start, stop) and the state the threads share live here;
//! each thread's loop and each step of a run has its own file:
//! `builder` (settings, handlers), `supervisor` (its loop), `claims` (the
//! claim it sends to the writer), `leases` (heartbeat, reaping), `worker`
//! (its loop), `begin` (a run's start, prepare and apply), `pending` (a run
//! waiting for its commit), `finish` (a run's end), `effects` (the effect
//! loop and acknowledgements), `in_flight` (what this process holds a lease
//! on), `scheduler` (declaring schedules at the start, firing their slots).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::core::backoff::Rng;
use crate::core::time::Millis;
use crate::driver::handler::{ErasedEffect, ErasedHandler};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::sqlite::claim::Claimed;

mod builder;
pub(crate) mod effects;
pub(crate) mod in_flight;
pub(crate) mod leases;
mod scheduler;

use crate::sqlite::pipeline::finish::finish_job;
use crate::sqlite::pipeline::pending::Pending;
use crate::sqlite::pipeline::supervisor::supervisor_loop;
use crate::sqlite::pipeline::worker::{worker_loop, MAX_PIPELINE};
pub use builder::RuntimeBuilder;
use builder::RuntimeConfig;
use effects::effect_loop;
use in_flight::InFlight;
use scheduler::scheduler_loop;

/// What every thread of a runtime shares: the queue, the handlers and
/// effects, the settings, and the bookkeeping between the threads.
pub(crate) struct Shared {
    pub(crate) queue: Queue,
    /// The lease owner this runtime writes into the rows it claims.
    pub(crate) owner: String,
    pub(crate) handlers: HashMap<String, Arc<dyn ErasedHandler<crate::sqlite::Sqlite>>>,
    /// The handlers of a queue on PostgreSQL.
    #[cfg(feature = "postgres")]
    pub(crate) pg_handlers: HashMap<String, Arc<dyn ErasedHandler<crate::postgres::Postgres>>>,
    pub(crate) effects: HashMap<String, Arc<dyn ErasedEffect>>,
    /// The handlers' and the effects' kinds (sorted), and the queues
    /// claimed from as JSON for the claim's SQL.
    pub(crate) kinds: Vec<String>,
    pub(crate) effect_kinds: Vec<String>,
    pub(crate) queues_json: Option<String>,
    pub(crate) cfg: RuntimeConfig,
    /// Set first by a stop: no thread starts new work after it.
    pub(crate) stopping: AtomicBool,
    /// The jobs and effects this process holds a lease on.
    pub(crate) in_flight: InFlight,
    /// The runs a claim started, for whichever worker is free to see their
    /// end (none is tied to one: a worker busy in a long prepare step would
    /// hold up the runs handed to it, and the claims behind them).
    pub(crate) runs_tx: Sender<Pending>,
    /// How many claimed jobs may be unfinished at once (see
    /// [`supervisor_loop`]); 0 without workers.
    pub(crate) max_in_flight: usize,
    /// The name a claim's runs record in their attempt rows: their handler
    /// runs on the writer thread.
    pub(crate) writer_name: String,
    /// Jobs split claims left to their light follow-ups, not yet counted
    /// in flight by them (see [`claims::submit_claim`]).
    pub(crate) later_reserved: std::sync::atomic::AtomicI64,
    /// The supervisor skipped a claim: every worker's pipeline was full. A
    /// worker that finishes a run then tells it (`space`).
    pub(crate) room_wanted: AtomicBool,
    /// A claim left jobs queued because their queue's cap or rate was
    /// full: the next run to end here wakes the claimers, since it may
    /// have freed the slot (other processes' runs are seen at the poll).
    pub(crate) slot_wanted: AtomicBool,
    /// Workers inside a prepare step: not free to start another job.
    pub(crate) preparing: std::sync::atomic::AtomicUsize,
    /// This runtime's own wake-up channels (see `queue::Wakers`).
    pub(crate) job_wake: Receiver<()>,
    pub(crate) outbox_wake: Receiver<()>,
}

/// Running workers. [`Runtime::stop`] (or drop) stops them gracefully and
/// joins every thread; stopping twice is harmless.
#[must_use = "dropping the runtime stops it"]
pub struct Runtime {
    shared: Arc<Shared>,
    /// Dropped to tell every thread to stop (they select on its receiver).
    stop_tx: Option<Sender<()>>,
    /// A receiver of the claimed-job buffer, to release what nobody started.
    buffer_rx: Receiver<Claimed>,
    /// A receiver of the runs a claim started, to see through what the
    /// workers did not before they stopped.
    runs_rx: Receiver<Pending>,
    threads: Vec<JoinHandle<()>>,
    report: Option<StopReport>,
}

/// What a stop did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopReport {
    /// Jobs given back to `queued` (claimed ahead, or still running at the
    /// end of the grace period).
    pub released_jobs: usize,
    /// Effects still running at the end of the grace period, given back.
    pub released_effects: usize,
    /// Threads still stuck in user code after the grace period, left behind.
    pub detached_threads: usize,
}

/// The name a thread records in the rows it writes: `pid/thread-name`.
pub(crate) fn worker_name() -> String {
    format!(
        "{}/{}",
        std::process::id(),
        std::thread::current().name().unwrap_or("unnamed")
    )
}

impl Shared {
    /// The state a runtime's threads share, built from its builder, and the
    /// receiving end of the channel of the runs a claim started.
    fn new(b: RuntimeBuilder) -> Result<(Shared, Receiver<Pending>)> {
        b.check_backend()?;
        let mut kinds: Vec<&String> = b.handlers.keys().collect();
        #[cfg(feature = "postgres")]
        kinds.extend(b.pg_handlers.keys());
        kinds.sort();
        let mut effect_kinds: Vec<&String> = b.effects.keys().collect();
        effect_kinds.sort();
        let owner = format!(
            "{}-{:08x}",
            std::process::id(),
            Rng::from_entropy().next_u64() as u32
        );
        let kinds_vec: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
        let job_wake = b.queue.inner.job_wake.subscribe();
        let (runs_tx, runs_rx) = crossbeam_channel::unbounded();
        // Two full claims at least, and each worker's pipeline.
        let max_in_flight = if kinds_vec.is_empty() {
            0
        } else {
            (b.cfg.workers * MAX_PIPELINE).max(2 * (b.cfg.workers + b.cfg.claim_ahead))
        };
        let outbox_wake = b.queue.inner.outbox_wake.subscribe();
        let shared = Shared {
            kinds: kinds_vec,
            effect_kinds: effect_kinds.iter().map(|k| k.to_string()).collect(),
            queues_json: b
                .cfg
                .queues
                .as_ref()
                .map(|q| serde_json::to_string(q).unwrap_or_default()),
            queue: b.queue,
            owner,
            handlers: b.handlers,
            #[cfg(feature = "postgres")]
            pg_handlers: b.pg_handlers,
            effects: b.effects,
            cfg: b.cfg,
            stopping: AtomicBool::new(false),
            in_flight: InFlight::default(),
            runs_tx,
            max_in_flight,
            writer_name: format!("{}/litejob-writer", std::process::id()),
            later_reserved: std::sync::atomic::AtomicI64::new(0),
            room_wanted: AtomicBool::new(false),
            slot_wanted: AtomicBool::new(false),
            preparing: std::sync::atomic::AtomicUsize::new(0),
            job_wake,
            outbox_wake,
        };
        Ok((shared, runs_rx))
    }
}

impl Shared {
    /// A run of this process ended: if a claim left jobs queued for a full
    /// cap or rate, claim again now rather than at the next poll.
    pub(crate) fn slot_freed(&self) {
        if self.slot_wanted.swap(false, Ordering::SeqCst) {
            self.queue.notify();
        }
    }
}

/// Starts a named thread.
pub(crate) fn spawn(name: String, f: Box<dyn FnOnce() + Send>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(Error::Io)
}

impl Runtime {
    /// Builds the shared state and the channels between the threads, then
    /// starts the workers, the effect threads and the supervisor.
    fn start(mut b: RuntimeBuilder) -> Result<Runtime> {
        let now = b.queue.backend().now();
        let schedules = std::mem::take(&mut b.schedules);
        #[allow(unused_mut)]
        let mut kinds: std::collections::HashSet<&str> =
            b.handlers.keys().map(String::as_str).collect();
        #[cfg(feature = "postgres")]
        kinds.extend(b.pg_handlers.keys().map(String::as_str));
        let declared = scheduler::check(
            &schedules,
            &kinds,
            b.cfg.queues.as_deref(),
            &b.queue.inner.rules,
            now,
        )?;
        let armed = if declared.is_empty() {
            Vec::new()
        } else {
            scheduler::declare(&b.queue, declared, now)?
        };
        let (shared, runs_rx) = Shared::new(b)?;
        let shared = Arc::new(shared);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::new();
        if !armed.is_empty() {
            let (queue, stop) = (shared.queue.clone(), stop_rx.clone());
            threads.push(spawn(
                "litejob-scheduler".into(),
                Box::new(move || scheduler_loop(queue, armed, stop)),
            )?);
        }
        #[cfg(feature = "postgres")]
        if let Some(store) = shared.queue.postgres() {
            threads.extend(crate::postgres::pipeline::start(&shared, store, &stop_rx)?);
            // Never used on PostgreSQL (its workers claim for themselves):
            // empty, and closed.
            let (_, buffer_rx) = crossbeam_channel::bounded::<Claimed>(0);
            return Ok(Runtime::started(
                shared, stop_tx, buffer_rx, runs_rx, threads,
            ));
        }
        let capacity = shared.cfg.workers + shared.cfg.claim_ahead;
        let (buffer_tx, buffer_rx) = crossbeam_channel::bounded::<Claimed>(capacity);
        let (space_tx, space_rx) = crossbeam_channel::bounded::<()>(1);
        if !shared.handlers.is_empty() {
            for i in 0..shared.cfg.workers {
                let (s, rx, runs, stop, space) = (
                    shared.clone(),
                    buffer_rx.clone(),
                    runs_rx.clone(),
                    stop_rx.clone(),
                    space_tx.clone(),
                );
                threads.push(spawn(
                    format!("litejob-worker-{}", i + 1),
                    Box::new(move || worker_loop(s, rx, runs, stop, space)),
                )?);
            }
        }
        if !shared.effects.is_empty() {
            for i in 1..=shared.cfg.effect_workers {
                let (s, stop) = (shared.clone(), stop_rx.clone());
                threads.push(spawn(
                    format!("litejob-effect-{i}"),
                    Box::new(move || effect_loop(s, stop)),
                )?);
            }
        }
        {
            let (s, stop) = (shared.clone(), stop_rx.clone());
            // Held by the supervisor too: without workers, a `space` whose
            // every sender was dropped would always be ready, and the
            // supervisor's wait would spin.
            let space = (space_tx.clone(), space_rx);
            threads.push(spawn(
                "litejob-supervisor".into(),
                Box::new(move || supervisor_loop(s, buffer_tx, space, stop, capacity)),
            )?);
        }
        Ok(Runtime::started(
            shared, stop_tx, buffer_rx, runs_rx, threads,
        ))
    }

    /// The handle of a runtime whose threads run.
    fn started(
        shared: Arc<Shared>,
        stop_tx: Sender<()>,
        buffer_rx: Receiver<Claimed>,
        runs_rx: Receiver<Pending>,
        threads: Vec<JoinHandle<()>>,
    ) -> Runtime {
        log::info!(target: "litejob", "runtime started on {}: {} workers for kinds {}, {} effect threads for {}, owner {}",
            shared.queue.backend_kind().as_str(),
            if shared.kinds.is_empty() { 0 } else { shared.cfg.workers }, shared.kinds.join(","),
            if shared.effects.is_empty() { 0 } else { shared.cfg.effect_workers }, shared.effect_kinds.join(","), shared.owner);
        Runtime {
            shared,
            stop_tx: Some(stop_tx),
            buffer_rx,
            runs_rx,
            threads,
            report: None,
        }
    }

    /// The lease owner name this runtime writes into `jobs.lease_owner`.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Stops with the configured grace period; see [`Runtime::stop_with_grace`].
    pub fn stop(&mut self) -> StopReport {
        let grace = self.shared.cfg.grace;
        self.stop_with_grace(grace)
    }

    /// Stops claiming, lets running jobs and effects finish within `grace`,
    /// releases what did not finish back to `queued`/`pending` without
    /// charging a job's attempt (outcome `released`), and joins the threads.
    /// A thread stuck in user code past the grace period is left behind
    /// (counted in the report); its late result is fenced off. Calling it
    /// again returns the first report.
    pub fn stop_with_grace(&mut self, grace: Duration) -> StopReport {
        if let Some(r) = &self.report {
            return r.clone();
        }
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.stop_tx.take();
        self.wait_for_threads(grace);
        let mut report = StopReport::default();
        self.see_through_started_runs();
        let now = self.shared.queue.backend().now();
        report.released_jobs += self.release_claimed_ahead();
        let (jobs, effects) = self.shared.in_flight.take_all();
        report.released_jobs += self.release_running_jobs(jobs, now);
        report.released_effects += self.release_running_effects(effects, now);
        report.detached_threads += self.join_threads();
        log::info!(target: "litejob", "runtime stopped: {report:?}");
        self.report = Some(report.clone());
        report
    }

    /// Waits up to `grace` for every thread to finish what it is doing.
    fn wait_for_threads(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.threads.iter().any(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs a claim started that no worker took before it stopped: their
    /// apply steps were on the writer already; see them through, after the
    /// cycle under way (a split claim's follow-up may still be handing some
    /// over).
    fn see_through_started_runs(&self) {
        if self.shared.queue.sqlite("").is_err() {
            return;
        }
        let _ = self.shared.queue.writer().run_light(|_| Ok(()));
        while let Ok(p) = self.runs_rx.try_recv() {
            finish_job(&self.shared, p);
        }
    }

    /// Claimed ahead, never started: back to queued, uncharged. Returns
    /// how many went back.
    fn release_claimed_ahead(&self) -> usize {
        let mut released = 0;
        while let Ok(c) = self.buffer_rx.try_recv() {
            if self.shared.give_back(c.id) {
                released += 1;
            }
        }
        released
    }

    /// Jobs still running after the grace period: back to queued, their
    /// runs recorded `released` and uncharged. Returns how many went back.
    fn release_running_jobs(&self, jobs: HashMap<i64, Option<i64>>, now: Millis) -> usize {
        let mut released = 0;
        for (id, attempt) in jobs {
            if let Ok(true) = self.shared.queue.backend().release_job(
                id,
                &self.shared.owner,
                attempt,
                "released at shutdown",
                now,
            ) {
                released += 1;
                log::info!(target: "litejob", job_id = id; "released at shutdown");
            }
        }
        released
    }

    /// Effects still running after the grace period: back to pending.
    /// Returns how many went back.
    fn release_running_effects(&self, effects: HashMap<i64, i64>, now: Millis) -> usize {
        let mut released = 0;
        for (id, attempt) in effects {
            if let Ok(true) = self.shared.queue.backend().release_effect(id, attempt, now) {
                released += 1;
            }
        }
        released
    }

    /// Joins the threads that finished and leaves behind those still stuck
    /// in user code. Returns how many were left behind.
    fn join_threads(&mut self) -> usize {
        let mut detached = 0;
        for t in self.threads.drain(..) {
            if t.is_finished() {
                let _ = t.join();
            } else {
                detached += 1;
                log::warn!(target: "litejob", "thread {:?} still busy after the grace period; left behind", t.thread().name());
            }
        }
        detached
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pauses for `d`, or less if the runtime stops meanwhile.
pub(crate) fn sleep_or_stop(stop: &Receiver<()>, d: Duration) {
    let _ = stop.recv_timeout(d);
}
