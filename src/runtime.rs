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
//!   transaction → acknowledge.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender, TryRecvError};
use serde::de::DeserializeOwned;

use crate::claim::{self, Claimed};
use crate::error::{Error, Result};
use crate::execute::{self, ApplyInput, Next, Within};
use crate::fault;
use crate::handler::{
    panic_message, EffectContext, ErasedEffect, ErasedHandler, FnEffect, FnHandler, HandlerError,
    JobContext, JobTx, Outcome, PrepareStop,
};
use crate::history::AttemptOutcome;
use crate::outbox::{self, EffectResult};
use crate::queue::Queue;
use crate::retry::{Backoff, Rng};
use crate::time::{now_ms, Millis};
use crate::writer;

/// Configures and starts a [`Runtime`]. Get one from [`Queue::runtime`].
pub struct RuntimeBuilder {
    queue: Queue,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    effects: HashMap<String, Arc<dyn ErasedEffect>>,
    cfg: RuntimeConfig,
}

#[derive(Debug, Clone)]
struct RuntimeConfig {
    workers: usize,
    effect_workers: usize,
    queues: Option<Vec<String>>,
    lease: Duration,
    poll_interval: Duration,
    grace: Duration,
    max_abandoned: i64,
    backoff: Backoff,
    effect_backoff: Backoff,
    outbox_max_retries: u32,
    claim_ahead: usize,
}

impl RuntimeBuilder {
    pub(crate) fn new(queue: Queue) -> Self {
        RuntimeBuilder {
            queue,
            handlers: HashMap::new(),
            effects: HashMap::new(),
            cfg: RuntimeConfig {
                workers: 4,
                effect_workers: 2,
                queues: None,
                lease: Duration::from_secs(30),
                poll_interval: Duration::from_millis(500),
                grace: Duration::from_secs(10),
                max_abandoned: 3,
                backoff: Backoff::default(),
                effect_backoff: Backoff::default(),
                outbox_max_retries: 1,
                claim_ahead: 64,
            },
        }
    }

    /// Registers the handler of `kind`: it receives the decoded payload and
    /// the job's transaction, and returns an [`Outcome`]. Everything it
    /// writes through the transaction commits with the ledger row and the
    /// job's completion, exactly once per key.
    pub fn handler<T, F>(self, kind: impl Into<String>, apply: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(&JobTx<'_>, T) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.insert_handler(kind, |_: &JobContext, t: T| Ok(t), apply, false)
    }

    /// Registers a two-step handler: `prepare` runs on the worker thread,
    /// outside any transaction (slow parsing, computing, reading files — in
    /// parallel across workers); `apply` runs inside the job's transaction
    /// with what `prepare` returned, and should be short: it holds the write
    /// lock.
    pub fn handler_with_prepare<T, P, Prep, App>(
        self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App:
            Fn(&JobTx<'_>, P) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.insert_handler(kind, prepare, apply, true)
    }

    fn insert_handler<T, P, Prep, App>(
        mut self,
        kind: impl Into<String>,
        prepare: Prep,
        apply: App,
        user_prepare: bool,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync + 'static,
        App:
            Fn(&JobTx<'_>, P) -> std::result::Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        self.handlers.insert(
            kind.into(),
            Arc::new(FnHandler {
                prepare,
                apply,
                user_prepare,
                _types: PhantomData::<fn(T) -> P>,
            }),
        );
        self
    }

    /// Registers the effect of outbox `kind`, run outside any transaction
    /// after the job that wrote the row committed. At least once; it receives
    /// the row's stable key in the context to pass on to a provider that
    /// deduplicates.
    pub fn effect<T, F>(mut self, kind: impl Into<String>, f: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(&EffectContext, T) -> std::result::Result<(), HandlerError> + Send + Sync + 'static,
    {
        self.effects.insert(
            kind.into(),
            Arc::new(FnEffect {
                f,
                _types: PhantomData::<fn(T)>,
            }),
        );
        self
    }

    /// Number of job worker threads (default 4).
    pub fn workers(mut self, n: usize) -> Self {
        self.cfg.workers = n.max(1);
        self
    }

    /// Number of effect threads (default 2).
    pub fn effect_workers(mut self, n: usize) -> Self {
        self.cfg.effect_workers = n.max(1);
        self
    }

    /// Only claim jobs from these queues (default: all).
    pub fn queues<I: IntoIterator<Item = S>, S: Into<String>>(mut self, queues: I) -> Self {
        self.cfg.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How long a claim lasts without renewal (default 30 s). The runtime
    /// renews it every third of this while the job runs; when the process
    /// dies, another one takes the job back after this long.
    pub fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d.max(Duration::from_millis(100));
        self
    }

    /// How often to look for work written by other processes (default 500 ms).
    /// In-process enqueues wake workers at once.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.cfg.poll_interval = d.max(Duration::from_millis(1));
        self
    }

    /// How long [`Runtime::stop`] lets running jobs finish (default 10 s).
    pub fn grace_period(mut self, d: Duration) -> Self {
        self.cfg.grace = d;
        self
    }

    /// The abandoned run that makes a job a poison pill (default 3).
    pub fn max_abandoned(mut self, n: u32) -> Self {
        self.cfg.max_abandoned = n.max(1) as i64;
        self
    }

    /// Backoff between a job's failed runs.
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.cfg.backoff = b;
        self
    }

    /// Backoff between an effect's failed attempts.
    pub fn effect_backoff(mut self, b: Backoff) -> Self {
        self.cfg.effect_backoff = b;
        self
    }

    /// `max_retries` of outbox rows written by jobs (default 1).
    pub fn outbox_max_retries(mut self, n: u32) -> Self {
        self.cfg.outbox_max_retries = n;
        self
    }

    /// Jobs one claim takes beyond one per worker (default 64), so claims
    /// come in batches and the writer sees large groups. A claim starts the
    /// apply-only jobs it takes (handlers without a prepare step) and the
    /// writer applies them in the same cycle, so this also sets the size of
    /// a writer cycle, and with it how long a job enqueued while a backlog
    /// runs waits (about one cycle). Jobs of a handler with a prepare step
    /// wait for a worker meanwhile, holding a lease but no attempt: if the
    /// process dies they go back to `queued` uncharged once the lease
    /// expires; at shutdown they are released at once.
    pub fn claim_ahead(mut self, n: usize) -> Self {
        self.cfg.claim_ahead = n;
        self
    }

    /// Starts the threads.
    pub fn start(self) -> Result<Runtime> {
        Runtime::start(self)
    }
}

/// Jobs and effects this process holds a lease on: renewed by the
/// supervisor, released at shutdown.
#[derive(Default)]
struct InFlight {
    /// job id → the running attempt (None: claimed, not started).
    jobs: HashMap<i64, Option<i64>>,
    /// outbox id → attempt id.
    effects: HashMap<i64, i64>,
}

struct Shared {
    queue: Queue,
    owner: String,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    effects: HashMap<String, Arc<dyn ErasedEffect>>,
    kinds: Vec<String>,
    kinds_json: String,
    effect_kinds_json: String,
    queues_json: Option<String>,
    cfg: RuntimeConfig,
    stopping: AtomicBool,
    in_flight: Mutex<InFlight>,
    /// The runs a claim started, for whichever worker is free to see their
    /// end (none is tied to one: a worker busy in a long prepare step would
    /// hold up the runs handed to it, and the claims behind them).
    runs_tx: Sender<Pending>,
    /// How many claimed jobs may be unfinished at once (see
    /// [`supervisor_loop`]); 0 without workers.
    max_in_flight: usize,
    /// The name a claim's runs record in their attempt rows: their handler
    /// runs on the writer thread.
    writer_name: String,
    /// Jobs split claims left to their light follow-ups, not yet counted
    /// in flight by them (see [`submit_claim`]).
    later_reserved: std::sync::atomic::AtomicI64,
    /// The supervisor skipped a claim: every worker's pipeline was full. A
    /// worker that finishes a run then tells it (`space`).
    room_wanted: AtomicBool,
    /// This runtime's own wake-up channels (see `queue::Wakers`).
    job_wake: Receiver<()>,
    outbox_wake: Receiver<()>,
}

/// Running workers. [`Runtime::stop`] (or drop) stops them gracefully and
/// joins every thread; stopping twice is harmless.
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
pub struct StopReport {
    /// Jobs given back to `queued` (claimed ahead, or still running at the
    /// end of the grace period).
    pub released_jobs: usize,
    /// Effects still running at the end of the grace period, given back.
    pub released_effects: usize,
    /// Threads still stuck in user code after the grace period, left behind.
    pub detached_threads: usize,
}

fn worker_name() -> String {
    format!(
        "{}/{}",
        std::process::id(),
        std::thread::current().name().unwrap_or("unnamed")
    )
}

impl Runtime {
    fn start(b: RuntimeBuilder) -> Result<Runtime> {
        let mut kinds: Vec<&String> = b.handlers.keys().collect();
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
        let max_in_flight = if b.handlers.is_empty() {
            0
        } else {
            (b.cfg.workers * MAX_PIPELINE).max(2 * (b.cfg.workers + b.cfg.claim_ahead))
        };
        let outbox_wake = b.queue.inner.outbox_wake.subscribe();
        let shared = Arc::new(Shared {
            kinds: kinds_vec,
            kinds_json: serde_json::to_string(&kinds)
                .map_err(|e| Error::Internal(e.to_string()))?,
            effect_kinds_json: serde_json::to_string(&effect_kinds)
                .map_err(|e| Error::Internal(e.to_string()))?,
            queues_json: b
                .cfg
                .queues
                .as_ref()
                .map(|q| serde_json::to_string(q).unwrap_or_default()),
            queue: b.queue,
            owner,
            handlers: b.handlers,
            effects: b.effects,
            cfg: b.cfg,
            stopping: AtomicBool::new(false),
            in_flight: Mutex::new(InFlight::default()),
            runs_tx,
            max_in_flight,
            writer_name: format!("{}/litejob-writer", std::process::id()),
            later_reserved: std::sync::atomic::AtomicI64::new(0),
            room_wanted: AtomicBool::new(false),
            job_wake,
            outbox_wake,
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let capacity = shared.cfg.workers + shared.cfg.claim_ahead;
        let (buffer_tx, buffer_rx) = crossbeam_channel::bounded::<Claimed>(capacity);
        let (space_tx, space_rx) = crossbeam_channel::bounded::<()>(1);
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(Error::Io)
        };
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
        log::info!(target: "litejob", "runtime started: {} workers for kinds {}, {} effect threads for {}, owner {}",
            if shared.handlers.is_empty() { 0 } else { shared.cfg.workers }, shared.kinds_json,
            if shared.effects.is_empty() { 0 } else { shared.cfg.effect_workers }, shared.effect_kinds_json, shared.owner);
        Ok(Runtime {
            shared,
            stop_tx: Some(stop_tx),
            buffer_rx,
            runs_rx,
            threads,
            report: None,
        })
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
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.threads.iter().any(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut report = StopReport::default();
        // Runs a claim started that no worker took before it stopped: their
        // apply steps were on the writer already; see them through, after
        // the cycle under way (a split claim's follow-up may still be
        // handing some over).
        let _ = self.shared.queue.writer().run_light(|_| Ok(()));
        while let Ok(p) = self.runs_rx.try_recv() {
            finish_job(&self.shared, p);
        }
        let now = now_ms();
        let owner = self.shared.owner.clone();
        // Claimed ahead, never started: back to queued, uncharged.
        while let Ok(c) = self.buffer_rx.try_recv() {
            self.shared.in_flight.lock().unwrap().jobs.remove(&c.id);
            let o = owner.clone();
            if let Ok(true) = self
                .shared
                .queue
                .writer()
                .run(move |conn| claim::release(conn, c.id, &o, None, "", now))
            {
                report.released_jobs += 1;
            }
        }
        let (jobs, effects) = {
            let mut f = self.shared.in_flight.lock().unwrap();
            (std::mem::take(&mut f.jobs), std::mem::take(&mut f.effects))
        };
        for (id, attempt) in jobs {
            let o = owner.clone();
            if let Ok(true) =
                self.shared.queue.writer().run(move |conn| {
                    claim::release(conn, id, &o, attempt, "released at shutdown", now)
                })
            {
                report.released_jobs += 1;
                log::info!(target: "litejob", job_id = id; "released at shutdown");
            }
        }
        for (id, attempt) in effects {
            if let Ok(true) = self
                .shared
                .queue
                .writer()
                .run(move |conn| outbox::release(conn, id, attempt, now))
            {
                report.released_effects += 1;
            }
        }
        for t in self.threads.drain(..) {
            if t.is_finished() {
                let _ = t.join();
            } else {
                report.detached_threads += 1;
                log::warn!(target: "litejob", "thread {:?} still busy after the grace period; left behind", t.thread().name());
            }
        }
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

fn supervisor_loop(
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

/// Starts the jobs a split claim left queued (see [`claim::Take::Later`]),
/// unless the runtime is stopping (they stay queued then), and queues their
/// apply steps.
fn start_later(
    conn: &rusqlite::Connection,
    cycle: &mut writer::Cycle,
    sh: &Arc<Shared>,
    later: Vec<(Claimed, Arc<dyn ErasedHandler>, String)>,
    lease_ms: i64,
    rng: &mut Rng,
) -> Result<Vec<Pending>> {
    if sh.stopping.load(Ordering::SeqCst) {
        return Ok(Vec::new());
    }
    let now = now_ms();
    let mut runs = Vec::with_capacity(later.len());
    let mut starter = claim::Starter::new(conn)?;
    for (c, handler, worker) in later {
        if let Some(st) = starter.take_and_start(&c, &sh.owner, now + lease_ms, &worker, now)? {
            let unit = rng.unit();
            runs.push(queue_run(cycle, sh, c, st, handler, unit, now));
        }
    }
    Ok(runs)
}

/// A run a claim started: queues its apply step for the next transaction of
/// this cycle ([`writer::Cycle::follow_up`]).
fn queue_run(
    cycle: &mut writer::Cycle,
    sh: &Arc<Shared>,
    c: Claimed,
    st: claim::Started,
    handler: Arc<dyn ErasedHandler>,
    unit: f64,
    now: Millis,
) -> Pending {
    let ctx = context(c.id, &c.kind, &st);
    let delay = sh.cfg.backoff.delay(ctx.attempt as u32, unit);
    let attempt_id = st.attempt_id;
    let sh2 = sh.clone();
    let rx = cycle.follow_up(move |conn| {
        let worker = &sh2.writer_name;
        apply_started(
            conn,
            &sh2,
            handler.as_ref(),
            c.id,
            &c.kind,
            worker,
            st,
            unit,
        )
    });
    Pending::Running(Running {
        rx,
        attempt_str: format!("{}/{}", ctx.attempt, ctx.max_attempts),
        ctx,
        attempt_id,
        backoff_at: now + delay.as_millis() as i64,
        t0: Instant::now(),
    })
}

/// Counts what a claim took in flight (its leases are renewed, and a stop
/// gives back what is left), before any worker can hear of it and finish.
fn count_in_flight(s: &Arc<Shared>, taken: &Taken) {
    let mut f = s.in_flight.lock().unwrap();
    for c in &taken.claimed {
        f.jobs.insert(c.id, None);
    }
    for p in &taken.runs {
        if let Pending::Running(r) = p {
            f.jobs.insert(r.ctx.id, Some(r.attempt_id));
        }
    }
}

/// Hands what a claim took to the workers: each run to the worker that
/// finishes it, each job to start to the buffer.
fn dispatch(s: &Arc<Shared>, buffer: &Sender<Claimed>, taken: Taken) {
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

fn sleep_or_stop(stop: &Receiver<()>, d: Duration) {
    let _ = stop.recv_timeout(d);
}

/// What a claim took.
struct Taken {
    /// Jobs for the workers to start (handlers with a prepare step, and
    /// suspects, which run alone).
    claimed: Vec<Claimed>,
    /// Apply-only runs the claim started itself: their apply steps run on
    /// the writer in the claim's own cycle; a worker sees their end (logs
    /// it, lets go of the job).
    runs: Vec<Pending>,
    /// When the claim took jobs of a better priority than the rest, it
    /// started only those: the rest (how many) are started by a light
    /// follow-up in the cycle's next transaction, which hands their runs
    /// to the workers itself.
    later: Option<usize>,
}

/// Whether a claim may find work: unless `more_known` (the last claim
/// filled its batch), looks through a reader, since an idle poll must not
/// write.
fn any_to_claim(s: &Arc<Shared>, more_known: bool) -> Result<bool> {
    if more_known {
        return Ok(true);
    }
    let (now, kinds, queues) = (now_ms(), s.kinds_json.clone(), s.queues_json.clone());
    s.queue.read(|c| {
        Ok(c.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued' AND run_at <= ?1 \
             AND kind IN (SELECT value FROM json_each(?2)) \
             AND (?3 IS NULL OR queue IN (SELECT value FROM json_each(?3))))",
        )?
        .query_row(rusqlite::params![now, kinds, queues], |r| r.get(0))?)
    })
}

/// Sends a claim of up to `n` jobs to the writer. Always through its
/// thread, never inline on the supervisor's (as a lone blocked caller's
/// write would be): inline, the supervisor would also apply the runs it
/// started and fsync them before it could claim again, while the writer
/// thread sat idle. Its answer comes at its light commit.
///
/// An apply-only job (its handler has no prepare step, the common case) is
/// started by the claim itself, in the same light transaction, and its
/// apply step queued to run right after that commit, in the same writer
/// cycle ([`writer::Cycle::follow_up`]). Enqueues are applied before claims in a
/// cycle, so a high-priority job enqueued while a backlog runs waits about
/// one writer cycle, not three (its enqueue's, its claim's and its
/// start's). Its attempt row names the writer thread, where its handler
/// runs; a worker, whichever is free, only sees its end.
fn submit_claim(
    s: &Arc<Shared>,
    n: usize,
    lease_ms: i64,
    rng: &mut Rng,
) -> Receiver<Result<Taken>> {
    let sh = s.clone();
    let seed = rng.next_u64();
    s.queue.writer().submit_light(move |conn, cycle| {
        let now = now_ms();
        // Stopping: whatever is claimed goes back through the buffer.
        let start_here = !sh.stopping.load(Ordering::SeqCst) && sh.max_in_flight > 0;
        let batch = claim::claim_batch(
            conn,
            &sh.kinds,
            sh.queues_json.as_deref(),
            n,
            &sh.owner,
            now + lease_ms,
            now,
            |c, split, ahead| {
                let Some(handler) = sh.handlers.get(&c.kind) else {
                    return claim::Take::Claim;
                };
                if !start_here || handler.has_prepare() || c.abandoned > 0 {
                    claim::Take::Claim
                } else if split && !ahead {
                    claim::Take::Later(handler.clone(), sh.writer_name.clone())
                } else {
                    claim::Take::Start(handler.clone(), sh.writer_name.clone())
                }
            },
        )?;
        let mut rng = Rng::seeded(seed);
        let mut taken = Taken {
            claimed: Vec::new(),
            runs: Vec::new(),
            later: None,
        };
        for (c, started) in batch.taken {
            match started {
                Some((st, handler)) => {
                    let unit = rng.unit();
                    taken
                        .runs
                        .push(queue_run(cycle, &sh, c, st, handler, unit, now));
                }
                None => taken.claimed.push(c),
            }
        }
        if !batch.later.is_empty() {
            let (count, sh) = (batch.later.len(), sh.clone());
            // Counted against max_in_flight until the follow-up has
            // counted its runs (it may run before the supervisor hears
            // of the claim: the balance may dip below 0 meanwhile).
            sh.later_reserved.fetch_add(count as i64, Ordering::SeqCst);
            let _ = cycle.follow_up_light(move |conn, cycle| {
                let started = start_later(conn, cycle, &sh, batch.later, lease_ms, &mut rng);
                sh.later_reserved.fetch_sub(count as i64, Ordering::SeqCst);
                let runs = started.inspect_err(|e| {
                    log::warn!(target: "litejob", "starting the rest of a claim failed: {e}");
                })?;
                // Handed over here, not by the supervisor when this
                // commits (one wake-up of it less per cycle): if this
                // transaction is undone, the runs' apply steps never run
                // and their workers hear `Aborted`.
                let taken = Taken {
                    claimed: Vec::new(),
                    runs,
                    later: None,
                };
                count_in_flight(&sh, &taken);
                for run in taken.runs {
                    // Never waited for here, on the writer thread (its
                    // answer needs this thread): with no worker left to
                    // receive it (the runtime is gone), it is dropped.
                    let _ = sh.runs_tx.send(run);
                }
                Ok(())
            });
            taken.later = Some(count);
        }
        Ok(taken)
    })
}

fn heartbeat(s: &Arc<Shared>, until: Millis) {
    let (jobs, effects) = {
        let f = s.in_flight.lock().unwrap();
        (
            f.jobs.keys().copied().collect::<Vec<_>>(),
            f.effects.keys().copied().collect::<Vec<_>>(),
        )
    };
    if jobs.is_empty() && effects.is_empty() {
        return;
    }
    let owner = s.owner.clone();
    let r = s.queue.writer().run_light(move |conn| {
        if !jobs.is_empty() {
            claim::heartbeat(
                conn,
                &owner,
                &serde_json::to_string(&jobs).unwrap_or_default(),
                until,
            )?;
        }
        if !effects.is_empty() {
            outbox::heartbeat(
                conn,
                &owner,
                &serde_json::to_string(&effects).unwrap_or_default(),
                until,
            )?;
        }
        Ok(())
    });
    if let Err(e) = r {
        log::warn!(target: "litejob", "lease renewal failed: {e}");
    }
}

fn reap(s: &Arc<Shared>) {
    let now = now_ms();
    let any: Result<bool> = s.queue.read(|c| {
        Ok(c.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires_at < ?1) \
                 OR EXISTS (SELECT 1 FROM outbox WHERE state = 'sending' AND lease_expires_at < ?1)",
        )?
        .query_row([now], |r| r.get(0))?)
    });
    match any {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            log::warn!(target: "litejob", "lease check failed: {e}");
            return;
        }
    }
    let max_abandoned = s.cfg.max_abandoned;
    match s.queue.writer().run_light(move |conn| {
        let now = now_ms();
        Ok((
            claim::reap_expired(conn, now, max_abandoned)?,
            outbox::reap_expired(conn, now)?,
        ))
    }) {
        Ok((j, o)) => {
            if j > 0 || o > 0 {
                log::info!(target: "litejob", "took back {j} jobs and {o} effects whose lease expired");
                s.queue.notify();
                s.queue.notify_outbox();
            }
        }
        Err(e) => log::warn!(target: "litejob", "reaping expired leases failed: {e}"),
    }
}

/// Most runs one worker keeps waiting for their commit while it goes on
/// with the next job. Bounded so a stalled disk stops the worker instead of
/// growing memory.
const MAX_PIPELINE: usize = 64;

fn worker_loop(
    s: Arc<Shared>,
    jobs: Receiver<Claimed>,
    runs: Receiver<Pending>,
    stop: Receiver<()>,
    space: Sender<()>,
) {
    let worker = worker_name();
    let mut rng = Rng::from_entropy();
    // Runs whose apply step was handed to the writer and whose commit this
    // worker has not seen yet, oldest first. The worker does not wait for
    // a completion's fsync before starting its next job: the next job's start
    // is a light commit of its own, so completions of many jobs share one
    // fsync (group commit) even with few workers.
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let finish = |p: Pending| {
        finish_job(&s, p);
        if s.room_wanted.swap(false, Ordering::SeqCst) {
            let _ = space.try_send(());
        }
    };
    loop {
        while pending.front().is_some_and(Pending::is_ready) {
            finish(pending.pop_front().expect("front exists"));
        }
        // Runs a claim started for this worker: only their end to see.
        pending.extend(runs.try_iter());
        let claimed = if pending.is_empty() {
            select! {
                recv(jobs) -> c => match c { Ok(c) => c, Err(_) => break },
                recv(runs) -> p => {
                    if let Ok(p) = p {
                        pending.push_back(p);
                    }
                    continue;
                }
                recv(stop) -> _ => break,
            }
        } else {
            match jobs.try_recv() {
                Ok(c) => c,
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    // Nothing to start now: wait for the oldest run's answer
                    // or for a new job, whichever comes first. Blocking on
                    // the answer alone (an fsync away) left newly claimed
                    // jobs unstarted meanwhile and the writer idle.
                    let oldest = pending.front().expect("not empty");
                    let mut sel = crossbeam_channel::Select::new();
                    let answered = sel.recv(oldest.answer());
                    sel.recv(&jobs);
                    sel.recv(&runs);
                    if sel.ready() == answered {
                        finish(pending.pop_front().expect("not empty"));
                    }
                    continue;
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => break,
            }
        };
        if jobs.is_empty() {
            let _ = space.try_send(());
        }
        if s.stopping.load(Ordering::SeqCst) {
            // Never started: give it back uncharged.
            s.in_flight.lock().unwrap().jobs.remove(&claimed.id);
            let o = s.owner.clone();
            let _ = s
                .queue
                .writer()
                .run(move |conn| claim::release(conn, claimed.id, &o, None, "", now_ms()));
            continue;
        }
        // A suspect (a run of it was cut short by a crash) may be a poison
        // pill: run it alone on this worker, with every earlier run
        // committed first and its own seen through before the next job.
        // Otherwise, when it aborts the process again, the neighbours whose
        // apply steps were still in the pipeline are abandoned with it,
        // crash after crash, until a healthy job dies as a poison pill
        // (reliability::crash::poison_pill_dies_after_three_abandoned_runs).
        let suspect = claimed.abandoned > 0;
        while pending.len() >= MAX_PIPELINE || (suspect && !pending.is_empty()) {
            finish(pending.pop_front().expect("not empty"));
        }
        match begin_job(&s, &claimed, &worker, &mut rng) {
            Some(p) if suspect => finish(p),
            Some(p) => pending.push_back(p),
            None => {
                s.in_flight.lock().unwrap().jobs.remove(&claimed.id);
            }
        }
    }
    pending.extend(runs.try_iter());
    for p in pending.drain(..) {
        finish(p);
    }
}

/// A run handed to the writer, waiting for its commit.
enum Pending {
    /// Started by the worker; its apply step (or failure) is on the writer.
    Running(Running),
    /// An apply-only job whose start and apply were both handed to the
    /// writer at once (start in a light commit, apply after it).
    Starting {
        id: i64,
        kind: String,
        start_rx: Receiver<Result<Option<claim::Started>>>,
        apply_rx: Receiver<Result<execute::RunEnd>>,
        backoff_unit: f64,
        t0: Instant,
    },
}

impl Pending {
    /// Where the run's final answer arrives.
    fn answer(&self) -> &Receiver<Result<execute::RunEnd>> {
        match self {
            Pending::Running(r) => &r.rx,
            Pending::Starting { apply_rx, .. } => apply_rx,
        }
    }

    fn is_ready(&self) -> bool {
        !self.answer().is_empty()
    }
}

struct Running {
    rx: Receiver<Result<execute::RunEnd>>,
    ctx: JobContext,
    attempt_id: i64,
    attempt_str: String,
    backoff_at: Millis,
    t0: Instant,
}

fn context(id: i64, kind: &str, st: &claim::Started) -> JobContext {
    JobContext {
        id,
        kind: kind.to_string(),
        key: st.key.clone(),
        queue: st.queue.clone(),
        attempt: st.attempt,
        max_attempts: st.max_attempts,
    }
}

/// Once a run's start committed, before any of its user code: counts it in
/// flight under its attempt (its lease is renewed, a stop gives it back)
/// and logs "job started". Returns its context and its "N/M" attempt.
fn announce_start(
    s: &Arc<Shared>,
    id: i64,
    kind: &str,
    st: &claim::Started,
    worker: &str,
) -> (JobContext, String) {
    fault::point("after-start-commit");
    s.in_flight
        .lock()
        .unwrap()
        .jobs
        .insert(id, Some(st.attempt_id));
    let ctx = context(id, kind, st);
    let attempt_str = format!("{}/{}", ctx.attempt, ctx.max_attempts);
    log::info!(target: "litejob", job_id = id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt_str.as_str(), worker = worker; "job started");
    (ctx, attempt_str)
}

/// The simple case, a handler with no prepare step: no user code runs on
/// the worker, so the worker hands both the start (a light commit) and the
/// apply step to the writer without waiting, and goes on with its next job.
/// The writer commits the start before it runs the apply (light operations
/// first, and this thread sent the start first), so a crash inside the
/// handler is still seen afterwards as an abandoned run.
fn begin_apply_only(
    s: &Arc<Shared>,
    claimed: &Claimed,
    worker: &str,
    rng: &mut Rng,
    handler: Arc<dyn ErasedHandler>,
) -> Pending {
    let slot: Arc<Mutex<Option<claim::Started>>> = Arc::new(Mutex::new(None));
    let (id, owner, w) = (claimed.id, s.owner.clone(), worker.to_string());
    let slot_w = slot.clone();
    let start = move |conn: &rusqlite::Connection| {
        let now = now_ms();
        let st = claim::start(conn, id, &owner, &w, now)?;
        slot_w.lock().unwrap().clone_from(&st);
        Ok(st)
    };
    let backoff_unit = rng.unit();
    let (sh, kind, w) = (s.clone(), claimed.kind.clone(), worker.to_string());
    let apply = move |conn: &rusqlite::Connection| {
        let Some(st) = slot.lock().unwrap().take() else {
            return Err(Error::LeaseLost(format!("job {id} was not started")));
        };
        apply_started(conn, &sh, handler.as_ref(), id, &kind, &w, st, backoff_unit)
    };
    // A suspect (a run of it was cut short by a crash: perhaps a poison
    // pill) runs in a writer cycle of its own, so that if it kills the
    // process again no healthy job's run is started and unfinished with it.
    let (start_rx, apply_rx) = s
        .queue
        .writer()
        .submit_pair(claimed.abandoned > 0, start, apply);
    Pending::Starting {
        id,
        kind: claimed.kind.clone(),
        start_rx,
        apply_rx,
        backoff_unit,
        t0: Instant::now(),
    }
}

/// The apply step of an apply-only run whose start committed (on the
/// writer, after that commit): decode the payload, run the handler inside
/// the job's transaction, record completion or failure.
#[allow(clippy::too_many_arguments)]
fn apply_started(
    conn: &rusqlite::Connection,
    sh: &Arc<Shared>,
    handler: &dyn ErasedHandler,
    id: i64,
    kind: &str,
    worker: &str,
    st: claim::Started,
    backoff_unit: f64,
) -> Result<execute::RunEnd> {
    let (ctx, _) = announce_start(sh, id, kind, &st, worker);
    let now = now_ms();
    let backoff_at = now
        + sh.cfg
            .backoff
            .delay(ctx.attempt as u32, backoff_unit)
            .as_millis() as i64;
    fault::point("in-handler");
    // Decoding runs user code too (a Deserialize impl): guard it like
    // the handler.
    let decoded = catch_unwind(AssertUnwindSafe(|| handler.prepare(&ctx, &st.payload)))
        .unwrap_or_else(|p| Err(PrepareStop::Panicked(panic_message(p.as_ref()))));
    match decoded {
        Ok(prepared) => {
            let r = execute::apply(
                conn,
                ApplyInput {
                    handler,
                    ctx,
                    attempt_id: st.attempt_id,
                    prepared,
                    outbox_max_attempts: sh.cfg.outbox_max_retries as i64 + 1,
                    backoff_at,
                },
                now,
            );
            fault::point("before-complete-commit");
            r
        }
        Err(PrepareStop::BadPayload(msg)) => execute::fail(
            conn,
            id,
            st.attempt_id,
            AttemptOutcome::Failed,
            &msg,
            Next::Discard,
            now,
            Within::SelfIsolated,
        ),
        Err(PrepareStop::Failed(msg)) => execute::fail(
            conn,
            id,
            st.attempt_id,
            AttemptOutcome::Failed,
            &msg,
            Next::RetryAt(backoff_at),
            now,
            Within::SelfIsolated,
        ),
        Err(PrepareStop::Panicked(msg)) => execute::fail(
            conn,
            id,
            st.attempt_id,
            AttemptOutcome::Panicked,
            &msg,
            Next::RetryAt(backoff_at),
            now,
            Within::SelfIsolated,
        ),
    }
}

/// Starts a claimed job (a light commit, before any user code runs, so a
/// crash inside the handler is seen afterwards), runs its prepare step here
/// and hands its apply step (or its failure) to the writer.
fn begin_job(s: &Arc<Shared>, claimed: &Claimed, worker: &str, rng: &mut Rng) -> Option<Pending> {
    let handler = s.handlers.get(&claimed.kind).cloned()?;
    if !handler.has_prepare() {
        return Some(begin_apply_only(s, claimed, worker, rng, handler));
    }
    let (id, owner, w) = (claimed.id, s.owner.clone(), worker.to_string());
    let started = match s.queue.writer().run_light(move |conn| {
        let now = now_ms();
        claim::start(conn, id, &owner, &w, now)
    }) {
        Ok(Some(st)) => st,
        Ok(None) => return None,
        Err(e) => {
            log::warn!(target: "litejob", job_id = id; "could not start job {id}: {e}");
            let o = s.owner.clone();
            let _ = s
                .queue
                .writer()
                .run(move |conn| claim::release(conn, id, &o, None, "", now_ms()));
            return None;
        }
    };
    let (ctx, attempt_str) = announce_start(s, id, &claimed.kind, &started, worker);
    let t0 = Instant::now();
    fault::point("in-handler");
    let prepared = catch_unwind(AssertUnwindSafe(|| handler.prepare(&ctx, &started.payload)));
    let attempt_id = started.attempt_id;
    let backoff_at = now_ms()
        + s.cfg
            .backoff
            .delay(ctx.attempt as u32, rng.unit())
            .as_millis() as i64;
    let rx = match prepared {
        Ok(Ok(prepared)) => {
            let outbox_max_attempts = s.cfg.outbox_max_retries as i64 + 1;
            let ctx2 = ctx.clone();
            s.queue.writer().submit_apply(move |conn| {
                let r = execute::apply(
                    conn,
                    ApplyInput {
                        handler: handler.as_ref(),
                        ctx: ctx2,
                        attempt_id,
                        prepared,
                        outbox_max_attempts,
                        backoff_at,
                    },
                    now_ms(),
                );
                fault::point("before-complete-commit");
                r
            })
        }
        Ok(Err(PrepareStop::BadPayload(msg))) => submit_fail(
            s,
            id,
            attempt_id,
            AttemptOutcome::Failed,
            msg,
            Next::Discard,
        ),
        Ok(Err(PrepareStop::Failed(msg))) => submit_fail(
            s,
            id,
            attempt_id,
            AttemptOutcome::Failed,
            msg,
            Next::RetryAt(backoff_at),
        ),
        Ok(Err(PrepareStop::Panicked(msg))) => submit_fail(
            s,
            id,
            attempt_id,
            AttemptOutcome::Panicked,
            msg,
            Next::RetryAt(backoff_at),
        ),
        Err(p) => submit_fail(
            s,
            id,
            attempt_id,
            AttemptOutcome::Panicked,
            panic_message(p.as_ref()),
            Next::RetryAt(backoff_at),
        ),
    };
    Some(Pending::Running(Running {
        rx,
        ctx,
        attempt_id,
        attempt_str,
        backoff_at,
        t0,
    }))
}

/// Waits for a run's commit, handles what the writer could not record, logs
/// the run's end line and lets go of the job.
fn finish_job(s: &Arc<Shared>, p: Pending) {
    let running = match p {
        Pending::Running(r) => r,
        Pending::Starting {
            id,
            kind,
            start_rx,
            apply_rx,
            backoff_unit,
            t0,
        } => match writer::wait(start_rx) {
            Ok(Some(st)) => {
                let ctx = context(id, &kind, &st);
                let delay = s.cfg.backoff.delay(ctx.attempt as u32, backoff_unit);
                Running {
                    rx: apply_rx,
                    attempt_str: format!("{}/{}", ctx.attempt, ctx.max_attempts),
                    ctx,
                    attempt_id: st.attempt_id,
                    backoff_at: now_ms() + delay.as_millis() as i64,
                    t0,
                }
            }
            other => {
                // Not started (the claim was lost, or the start was not
                // committed): nothing ran. Give the claim back if it is
                // still ours.
                let _ = writer::wait(apply_rx);
                if let Err(e) = other {
                    log::warn!(target: "litejob", job_id = id; "could not start job {id}: {e}");
                    let o = s.owner.clone();
                    let _ = s
                        .queue
                        .writer()
                        .run(move |conn| claim::release(conn, id, &o, None, "", now_ms()));
                }
                s.in_flight.lock().unwrap().jobs.remove(&id);
                return;
            }
        },
    };
    finish_running(s, running);
}

fn finish_running(s: &Arc<Shared>, r: Running) {
    let Running {
        rx,
        ctx,
        attempt_id,
        attempt_str,
        backoff_at,
        t0,
    } = r;
    let id = ctx.id;
    let result = writer::wait(rx);
    if result.is_ok() {
        fault::point("after-complete-commit");
    }
    let result = match result {
        Err(Error::Interrupted(msg)) => fail_run(
            s,
            id,
            attempt_id,
            AttemptOutcome::Failed,
            msg,
            Next::RetryAt(backoff_at),
        ),
        Err(e) if e.is_transient() => release_after_transient(s, id, attempt_id, e),
        other => other,
    };
    let ms = t0.elapsed().as_millis() as u64;
    match result {
        Ok(end) => {
            let err = end.error.clone().unwrap_or_default();
            let next = end
                .retry_at
                .map(crate::time::format_millis)
                .unwrap_or_default();
            log::info!(target: "litejob", job_id = id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
                attempt = attempt_str.as_str(), outcome = end.outcome.as_str(), state = end.state.as_str(),
                duration_ms = ms, retry_at = next.as_str(), error = err.as_str(); "job finished");
            if end.outbox_added > 0 {
                s.queue.notify_outbox();
            }
        }
        Err(e) => {
            let err = e.to_string();
            log::warn!(target: "litejob", job_id = id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
                attempt = attempt_str.as_str(), outcome = "not recorded", duration_ms = ms,
                error = err.as_str(); "job run not recorded");
        }
    }
    // Only if it is still this run's (or its claim's) entry: a run whose
    // start was undone with its transaction may end after a newer claim of
    // the same job took its place.
    let mut f = s.in_flight.lock().unwrap();
    if matches!(f.jobs.get(&id), Some(None)) || f.jobs.get(&id) == Some(&Some(attempt_id)) {
        f.jobs.remove(&id);
    }
}

/// The write that records a failed run, as its own durable operation.
fn fail_op(
    id: i64,
    attempt_id: i64,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> impl FnOnce(&rusqlite::Connection) -> Result<execute::RunEnd> + Send + 'static {
    move |conn| {
        let now = now_ms();
        execute::fail(
            conn,
            id,
            attempt_id,
            outcome,
            &msg,
            next,
            now,
            Within::WritersSavepoint,
        )
    }
}

fn submit_fail(
    s: &Arc<Shared>,
    id: i64,
    attempt_id: i64,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> Receiver<Result<execute::RunEnd>> {
    s.queue
        .writer()
        .submit(fail_op(id, attempt_id, outcome, msg, next))
}

fn fail_run(
    s: &Arc<Shared>,
    id: i64,
    attempt_id: i64,
    outcome: AttemptOutcome,
    msg: String,
    next: Next,
) -> Result<execute::RunEnd> {
    s.queue
        .writer()
        .run(fail_op(id, attempt_id, outcome, msg, next))
}

/// The write failed for a reason that is not the job's fault (disk full,
/// busy past the timeout, a neighbour's rollback): give the job back
/// uncharged, retrying until the write goes through or the lease is gone.
fn release_after_transient(
    s: &Arc<Shared>,
    id: i64,
    attempt_id: i64,
    e: Error,
) -> Result<execute::RunEnd> {
    log::warn!(target: "litejob", job_id = id; "run of job {id} not recorded ({e}); releasing it");
    let mut delay = Duration::from_millis(50);
    let give_up = Instant::now() + s.cfg.lease;
    loop {
        let o = s.owner.clone();
        let why = e.to_string();
        match s.queue.writer().run(move |conn| {
            claim::release(
                conn,
                id,
                &o,
                Some(attempt_id),
                &format!("released uncharged: the run's write failed ({why})"),
                now_ms(),
            )
        }) {
            Ok(_) => return Err(e),
            Err(e2)
                if e2.is_transient()
                    && Instant::now() < give_up
                    && !s.stopping.load(Ordering::SeqCst) =>
            {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(_) => return Err(e),
        }
    }
}

fn effect_loop(s: Arc<Shared>, stop: Receiver<()>) {
    let worker = worker_name();
    let mut rng = Rng::from_entropy();
    let wake = s.outbox_wake.clone();
    let lease_ms = s.cfg.lease.as_millis() as i64;
    loop {
        if s.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (kinds, owner, w) = (s.effect_kinds_json.clone(), s.owner.clone(), worker.clone());
        let claimed = s.queue.writer().run(move |conn| {
            let now = now_ms();
            outbox::claim_one(conn, &kinds, &owner, &w, now + lease_ms, now)
        });
        let c = match claimed {
            Ok(Some(c)) => c,
            Ok(None) => {
                select! {
                    recv(stop) -> _ => return,
                    recv(wake) -> _ => {},
                    default(s.cfg.poll_interval) => {},
                }
                continue;
            }
            Err(e) => {
                log::warn!(target: "litejob", "outbox claim failed: {e}");
                sleep_or_stop(&stop, Duration::from_millis(200));
                continue;
            }
        };
        let Some(effect) = s.effects.get(&c.row.kind).cloned() else {
            // Cannot happen (the claim asks only for our kinds), but never
            // leave a row `sending` under a lease nobody works on.
            let (oid, aid) = (c.row.id, c.attempt_id);
            let _ = s
                .queue
                .writer()
                .run(move |conn| outbox::release(conn, oid, aid, now_ms()));
            continue;
        };
        s.in_flight
            .lock()
            .unwrap()
            .effects
            .insert(c.row.id, c.attempt_id);
        let ctx = EffectContext {
            id: c.row.id,
            kind: c.row.kind.clone(),
            key: c.row.key.clone(),
            job_id: c.row.job_id,
            attempt: c.row.attempts,
            max_attempts: c.row.max_attempts,
        };
        let attempt_str = format!("{}/{}", ctx.attempt, ctx.max_attempts);
        log::info!(target: "litejob", outbox_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
            attempt = attempt_str.as_str(), worker = worker.as_str(); "effect started");
        let t0 = Instant::now();
        let called = catch_unwind(AssertUnwindSafe(|| effect.call(&ctx, &c.row.payload)));
        fault::point("after-effect-before-ack");
        let retry_at = now_ms()
            + s.cfg
                .effect_backoff
                .delay(ctx.attempt as u32, rng.unit())
                .as_millis() as i64;
        let result = match called {
            Ok(Ok(())) => EffectResult::Sent,
            Ok(Err(error)) => EffectResult::Failed {
                error,
                panicked: false,
                retry_at,
            },
            Err(p) => EffectResult::Failed {
                error: panic_message(p.as_ref()),
                panicked: true,
                retry_at,
            },
        };
        let (outcome, err) = match &result {
            EffectResult::Sent => ("succeeded", String::new()),
            EffectResult::Failed {
                error, panicked, ..
            } => (if *panicked { "panicked" } else { "failed" }, error.clone()),
        };
        let (oid, aid) = (c.row.id, c.attempt_id);
        let acked = ack_with_retry(&s, oid, aid, result);
        fault::point("after-ack-commit");
        s.in_flight.lock().unwrap().effects.remove(&oid);
        let ms = t0.elapsed().as_millis() as u64;
        let state = match &acked {
            Ok(Some(st)) => st.as_str().to_string(),
            Ok(None) => "lease lost".into(),
            Err(e) => format!("not recorded: {e}"),
        };
        log::info!(target: "litejob", outbox_id = oid, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
            attempt = attempt_str.as_str(), outcome = outcome, state = state.as_str(), duration_ms = ms,
            error = err.as_str(); "effect finished");
    }
}

/// Acknowledges an effect attempt, retrying transient failures while the
/// lease lasts: an effect that ran must not be run again just because the
/// disk was briefly full.
fn ack_with_retry(
    s: &Arc<Shared>,
    oid: i64,
    aid: i64,
    result: EffectResult,
) -> Result<Option<outbox::OutboxState>> {
    let result = Arc::new(result);
    let give_up = Instant::now() + s.cfg.lease;
    let mut delay = Duration::from_millis(50);
    loop {
        let r = result.clone();
        let rx = s
            .queue
            .writer()
            .submit(move |conn| outbox::ack(conn, oid, aid, &r, now_ms()));
        match writer::wait(rx) {
            Err(e) if e.is_transient() && Instant::now() < give_up => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}
