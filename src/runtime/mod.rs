//! The runtime: the threads that claim jobs, run them and perform outbox
//! effects, renew leases, reap expired ones and stop gracefully. It owns
//! and joins every thread it starts. Each engine's job pipeline is its own
//! (`sqlite/pipeline/`, `postgres/pipeline/`), started through the driver
//! boundary; the runtime starts what both share: the effect threads
//! (`litejob-effect-N`: claim one outbox row, call its effect outside any
//! transaction, acknowledge), with schedules `litejob-scheduler`, with
//! a retention `litejob-retention`, and with a handler that has a prepare
//! step `litejob-watcher` (which stops the runs whose job was cancelled:
//! see [`crate::driver::watch`]). The workers' runner threads
//! (`litejob-runner-N`, see [`crate::driver::runner`]) are theirs to join;
//! one left behind by a timeout or a cancel is counted at the stop. Writes `jobs`, `attempts`, `outbox`,
//! `schedules` and (retention) `processed_jobs` only through the engine's
//! store.
//!
//! Files: `builder` (settings, handlers), `effects` (the effect loop),
//! `scheduler` (declaring schedules at the start, firing their slots),
//! `retention` (the runtime's own prune).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::core::backoff::Rng;
use crate::core::lifecycle::RELEASED_AT_SHUTDOWN;
use crate::core::time::Millis;
use crate::driver::in_flight::InFlight;
use crate::driver::pipeline::{spawn, Pipeline, Shared};
use crate::driver::{Engine, Store};
use crate::error::Result;

mod builder;
mod drain;
mod effects;
mod retention;
mod scheduler;

pub use builder::RuntimeBuilder;
pub use drain::Drained;
use effects::effect_loop;
use retention::retention_loop;
use scheduler::scheduler_loop;

/// Running workers. [`Runtime::stop`] (or drop) stops them gracefully and
/// joins every thread; stopping twice is harmless.
#[must_use = "dropping the runtime stops it"]
pub struct Runtime {
    running: Box<dyn Stoppable>,
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

/// A runtime of one engine, as [`Runtime`] holds it.
trait Stoppable: Send {
    fn owner(&self) -> &str;
    fn grace(&self) -> Duration;
    fn stop_with_grace(&mut self, grace: Duration) -> StopReport;
}

/// The threads of a runtime on engine `E`, and how to stop them.
struct Running<E: Engine> {
    shared: Arc<Shared<E>>,
    /// Dropped to tell every thread to stop (they select on its receiver).
    stop_tx: Option<Sender<()>>,
    pipeline: Box<dyn Pipeline>,
    threads: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Checks and declares the schedules, builds the state the threads
    /// share, then starts the engine's pipeline, the effect threads and the
    /// scheduler.
    fn start<E: Engine>(mut b: RuntimeBuilder<E>) -> Result<Runtime> {
        let armed = arm(&mut b)?;
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let queue = b.queue.clone();
        let retention = b.retention.take();
        let shared = Arc::new(shared(b, stop_rx.clone()));
        let mut threads = Vec::new();
        if let Some(keep) = retention {
            let (admin, stop) = (queue.admin(), stop_rx.clone());
            threads.push(spawn("litejob-retention".into(), move || {
                retention_loop(admin, keep, stop)
            })?);
        }
        if !armed.is_empty() {
            threads.push(spawn("litejob-scheduler".into(), move || {
                scheduler_loop(queue, armed, stop_rx)
            })?);
        }
        if !shared.effects.is_empty() {
            for i in 1..=shared.cfg.effect_workers {
                let s = shared.clone();
                threads.push(spawn(format!("litejob-effect-{i}"), move || {
                    effect_loop(s)
                })?);
            }
        }
        if shared.handlers.values().any(|h| h.has_prepare()) {
            let s = shared.clone();
            threads.push(spawn("litejob-watcher".into(), move || {
                crate::driver::watch::watch_loop(s)
            })?);
        }
        let started = E::start(shared.clone())?;
        threads.extend(started.threads);
        log::info!(target: "litejob", "runtime started on {}: {} workers for kinds {}, {} effect threads for {}, owner {}",
            E::KIND.as_str(),
            if shared.kinds.is_empty() { 0 } else { shared.cfg.workers }, shared.kinds.join(","),
            if shared.effects.is_empty() { 0 } else { shared.cfg.effect_workers }, shared.effect_kinds.join(","), shared.owner);
        Ok(Runtime {
            running: Box::new(Running {
                shared,
                stop_tx: Some(stop_tx),
                pipeline: started.pipeline,
                threads,
            }),
            report: None,
        })
    }

    /// The lease owner name this runtime writes into `jobs.lease_owner`.
    pub fn owner(&self) -> &str {
        self.running.owner()
    }

    /// Stops with the configured grace period; see [`Runtime::stop_with_grace`].
    pub fn stop(&mut self) -> StopReport {
        let grace = self.running.grace();
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
        let report = self.running.stop_with_grace(grace);
        log::info!(target: "litejob", "runtime stopped: {report:?}");
        self.report = Some(report.clone());
        report
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checks and declares the builder's schedules (catching up the slots
/// missed since the last start): the armed schedules to fire from now.
fn arm<E: Engine>(b: &mut RuntimeBuilder<E>) -> Result<Vec<scheduler::Armed>> {
    let now = b.queue.now();
    let schedules = std::mem::take(&mut b.schedules);
    let kinds: HashSet<&str> = b.handlers.keys().map(String::as_str).collect();
    let declared = scheduler::check(
        &schedules,
        &kinds,
        b.cfg.queues.as_deref(),
        &b.queue.inner.rules,
        now,
    )?;
    if declared.is_empty() {
        return Ok(Vec::new());
    }
    scheduler::declare(&b.queue, declared, now)
}

/// The state a runtime's threads share, from its builder.
fn shared<E: Engine>(b: RuntimeBuilder<E>, stop: crossbeam_channel::Receiver<()>) -> Shared<E> {
    let mut kinds: Vec<String> = b.handlers.keys().cloned().collect();
    kinds.sort();
    let mut effect_kinds: Vec<String> = b.effects.keys().cloned().collect();
    effect_kinds.sort();
    let owner = format!(
        "{}-{:08x}",
        std::process::id(),
        Rng::from_entropy().next_u64() as u32
    );
    let inner = &b.queue.inner;
    let workers = b.cfg.workers;
    Shared {
        store: inner.store.clone(),
        owner,
        handlers: b.handlers,
        effects: b.effects,
        kinds,
        effect_kinds,
        queues_json: b
            .cfg
            .queues
            .as_ref()
            .map(|q| serde_json::to_string(q).unwrap_or_default()),
        cfg: b.cfg,
        max_output: inner.rules.max_payload_bytes,
        steps: Arc::new(crate::driver::run::StoreSteps(inner.store.clone())),
        runners: Arc::new(crate::driver::runner::Runners::new(workers)),
        stopping: AtomicBool::new(false),
        stop,
        in_flight: InFlight::default(),
        slot_wanted: AtomicBool::new(false),
        job_wakers: inner.job_wake.clone(),
        outbox_wakers: inner.outbox_wake.clone(),
        done_wakers: inner.done_wake.clone(),
        job_wake: inner.job_wake.subscribe(),
        outbox_wake: inner.outbox_wake.subscribe(),
    }
}

impl<E: Engine> Stoppable for Running<E> {
    fn owner(&self) -> &str {
        &self.shared.owner
    }

    fn grace(&self) -> Duration {
        self.shared.cfg.grace
    }

    fn stop_with_grace(&mut self, grace: Duration) -> StopReport {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.stop_tx.take();
        self.wait_for_threads(grace);
        let mut report = StopReport::default();
        report.released_jobs += self.pipeline.wind_down();
        let now = self.shared.store.now();
        let (jobs, effects) = self.shared.in_flight.take_all();
        report.released_jobs += self.release_running_jobs(jobs, now);
        report.released_effects += self.release_running_effects(effects, now);
        report.detached_threads += self.join_threads();
        // Runner threads a timeout or a cancel left behind, their code
        // still running: not joined (they cannot be), their results fenced.
        report.detached_threads += self.shared.runners.left_behind();
        report
    }
}

impl<E: Engine> Running<E> {
    /// Waits up to `grace` for every thread to finish what it is doing.
    fn wait_for_threads(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.threads.iter().any(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Jobs still running after the grace period: back to queued, their
    /// runs recorded `released` and uncharged. Returns how many went back.
    fn release_running_jobs(&self, jobs: HashMap<i64, Option<i64>>, now: Millis) -> usize {
        let mut released = 0;
        for (id, attempt) in jobs {
            if let Ok(true) = self.shared.store.release_job(
                id,
                &self.shared.owner,
                attempt,
                RELEASED_AT_SHUTDOWN,
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
            if let Ok(true) = self.shared.store.release_effect(id, attempt, now) {
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
