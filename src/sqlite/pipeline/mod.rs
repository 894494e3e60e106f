//! The file's job pipeline on its one writer: the supervisor claims (and
//! starts the apply-only runs of a claim in the writer's same cycle), the
//! workers start the rest and run their prepare steps, and every run's
//! apply step runs on the writer inside a group transaction, after its
//! start's light commit (`start`). Writes `jobs`, `attempts`,
//! `processed_jobs` and `outbox` through the file's modules, on the
//! writer.
//!
//! Threads (all named): `litejob-supervisor` claims batches (woken by
//! in-process enqueues, or polling for other processes' work), renews
//! leases and reaps expired ones; `litejob-worker-N` starts a claimed job,
//! runs its prepare step and hands its apply step to the writer, or sees
//! a run the claim started through to its end.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::core::time::Millis;
use crate::driver::pipeline::{spawn, Launched, Pipeline, Shared};
use crate::error::Result;
use crate::sqlite::claim::Claimed;
use crate::sqlite::writer::Writer;
use crate::sqlite::Sqlite;

pub(crate) mod claims;
pub(crate) mod drain;
pub(crate) mod finish;
pub(crate) mod pending;
pub(crate) mod start;
pub(crate) mod supervisor;
pub(crate) mod worker;

use finish::finish_job;
use pending::{Pending, Run};
use supervisor::supervisor_loop;
use worker::{worker_loop, MAX_PIPELINE};

/// What the file's pipeline threads share: the runtime's state, the writer,
/// and their own bookkeeping between the supervisor and the workers.
pub(crate) struct Pipe {
    pub(crate) shared: Arc<Shared<Sqlite>>,
    /// The file's one writer, which every claim, start and apply goes to.
    pub(crate) writer: Arc<Writer>,
    /// The runs a claim started, for whichever worker is free to see their
    /// end (none is tied to one: a worker busy in a long prepare step would
    /// hold up the runs handed to it, and the claims behind them).
    pub(crate) runs_tx: Sender<Run>,
    /// How many claimed jobs may be unfinished at once (see
    /// [`supervisor_loop`]); 0 without workers.
    pub(crate) max_in_flight: usize,
    /// The workers' names, which the runs a claim starts record in their
    /// attempt rows in turn (their handlers run on the writer thread, an
    /// implementation detail; each run counts against a worker's share).
    pub(crate) worker_names: Vec<String>,
    /// The next of `worker_names` a claim's run records.
    pub(crate) next_worker: AtomicUsize,
    /// Jobs split claims left to their light follow-ups, not yet counted
    /// in flight by them (see [`claims::submit_claim`]).
    pub(crate) later_reserved: AtomicI64,
    /// The supervisor skipped a claim: every worker's pipeline was full. A
    /// worker that finishes a run then tells it (`space`).
    pub(crate) room_wanted: AtomicBool,
    /// Workers inside a prepare step: not free to start another job.
    pub(crate) preparing: AtomicUsize,
}

impl Pipe {
    /// The worker the next run a claim starts is recorded under.
    pub(crate) fn logical_worker(&self) -> String {
        let n = self
            .next_worker
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.worker_names[n % self.worker_names.len()].clone()
    }

    /// Now, on the queue's clock (the system's, or a test's).
    pub(crate) fn now(&self) -> Millis {
        self.store.clock.now()
    }
}

impl Deref for Pipe {
    type Target = Shared<Sqlite>;
    fn deref(&self) -> &Shared<Sqlite> {
        &self.shared
    }
}

/// The file's pipeline as the runtime holds it: what it must see through
/// or give back at the stop.
struct FilePipeline {
    pipe: Arc<Pipe>,
    /// A receiver of the claimed-job buffer, to release what nobody started.
    buffer_rx: Receiver<Claimed>,
    /// A receiver of the runs a claim started, to see through what the
    /// workers did not before they stopped.
    runs_rx: Receiver<Run>,
}

/// Starts the workers and the supervisor.
pub(crate) fn start(shared: Arc<Shared<Sqlite>>) -> Result<Launched> {
    let writer = shared.store.writer()?.clone();
    let (runs_tx, runs_rx) = crossbeam_channel::unbounded();
    let cfg = &shared.cfg;
    // Two full claims at least, and each worker's pipeline.
    let max_in_flight = if shared.kinds.is_empty() {
        0
    } else {
        (cfg.workers * MAX_PIPELINE).max(2 * (cfg.workers + cfg.claim_ahead))
    };
    let capacity = cfg.workers + cfg.claim_ahead;
    let pipe = Arc::new(Pipe {
        writer,
        runs_tx,
        max_in_flight,
        worker_names: (1..=cfg.workers.max(1))
            .map(|i| format!("{}/litejob-worker-{i}", std::process::id()))
            .collect(),
        next_worker: AtomicUsize::new(0),
        later_reserved: AtomicI64::new(0),
        room_wanted: AtomicBool::new(false),
        preparing: AtomicUsize::new(0),
        shared,
    });
    let (buffer_tx, buffer_rx) = crossbeam_channel::bounded::<Claimed>(capacity);
    let (space_tx, space_rx) = crossbeam_channel::bounded::<()>(1);
    let mut threads = Vec::new();
    if !pipe.handlers.is_empty() {
        for i in 0..pipe.cfg.workers {
            let (p, rx, runs, space) = (
                pipe.clone(),
                buffer_rx.clone(),
                runs_rx.clone(),
                space_tx.clone(),
            );
            threads.push(spawn(format!("litejob-worker-{}", i + 1), move || {
                worker_loop(p, rx, runs, space)
            })?);
        }
    }
    {
        let p = pipe.clone();
        // Held by the supervisor too: without workers, a `space` whose
        // every sender was dropped would always be ready, and the
        // supervisor's wait would spin.
        let space = (space_tx.clone(), space_rx);
        threads.push(spawn("litejob-supervisor".into(), move || {
            supervisor_loop(p, buffer_tx, space, capacity)
        })?);
    }
    Ok(Launched {
        pipeline: Box::new(FilePipeline {
            pipe,
            buffer_rx,
            runs_rx,
        }),
        threads,
    })
}

impl Pipeline for FilePipeline {
    fn wind_down(&mut self) -> usize {
        // The runs a claim started that no worker took before it stopped:
        // their apply steps were on the writer already; see them through,
        // after the cycle under way (a split claim's follow-up may still be
        // handing some over).
        let _ = self.pipe.writer.run_light(|_| Ok(()));
        while let Ok(run) = self.runs_rx.try_recv() {
            let _ = finish_job(&self.pipe, Pending::Run(run));
        }
        // Claimed ahead, never started: back to queued, uncharged.
        let mut released = 0;
        while let Ok(c) = self.buffer_rx.try_recv() {
            if self.pipe.give_back(c.id) {
                released += 1;
            }
        }
        released
    }
}
