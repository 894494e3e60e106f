//! The measured phases of `litejob bench`, each timed on its own: three
//! ways to enqueue, then processing the backlog while latency probes are
//! enqueued ahead of it. Writes `jobs` through the library only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::postgres::Postgres;
use litejob::sqlite::Sqlite;
use litejob::{Error, NewJob, Outcome, RuntimeBuilder, Schedule};

use super::{since_epoch_ns, BenchArgs, Probe, KIND, PROBE_EVERY, PROBE_THREADS};

/// The kind (and name) of the schedule `--schedule` declares.
const TICK: &str = "bench.tick";

/// The bench's own keys: unique per run, so a kept file can take another.
pub(super) struct Keys(pub(super) String);

impl Keys {
    fn key(&self, phase: &str, i: usize) -> String {
        format!("bench:{}:{phase}:{i}", self.0)
    }
}

const BACKLOG: Probe = Probe { t: None };

/// One enqueue per call, one thread: jobs per second.
pub(super) fn enqueue_single(queue: &AnyQueue, keys: &Keys, n: usize) -> Result<f64, Error> {
    let t0 = Instant::now();
    for i in 0..n {
        queue.enqueue(NewJob::new(KIND, keys.key("single", i), &BACKLOG))?;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// One enqueue per call from `producers` threads at once (they share
/// commits): jobs per second.
pub(super) fn enqueue_concurrent(
    queue: &AnyQueue,
    keys: &Keys,
    n: usize,
    producers: usize,
) -> Result<f64, Error> {
    let t0 = Instant::now();
    let per = n.div_ceil(producers);
    let errors: Vec<Error> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                s.spawn(move || {
                    for i in (p * per)..((p + 1) * per).min(n) {
                        queue.enqueue(NewJob::new(KIND, keys.key("concurrent", i), &BACKLOG))?;
                    }
                    Ok::<(), Error>(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().ok().and_then(|r| r.err()))
            .collect()
    });
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// One `enqueue_async` per call from `tasks` tasks at once, all on one
/// executor thread (this one): jobs per second. Each task awaits its
/// enqueue before it sends the next, as a request handler would.
pub(super) fn enqueue_async(
    queue: &AnyQueue,
    keys: &Keys,
    n: usize,
    tasks: usize,
) -> Result<f64, Error> {
    let t0 = Instant::now();
    let per = n.div_ceil(tasks);
    let failed: Arc<Mutex<Option<Error>>> = Arc::default();
    let keys: Arc<Vec<String>> = Arc::new((0..n).map(|i| keys.key("async", i)).collect());
    super::executor::run_all((0..tasks).map(|t| {
        let (queue, keys, failed) = (queue.clone(), keys.clone(), failed.clone());
        async move {
            for k in keys.iter().skip(t * per).take(per) {
                if let Err(e) = queue
                    .enqueue_async(NewJob::new(KIND, k.clone(), &BACKLOG))
                    .await
                {
                    failed.lock().unwrap().get_or_insert(e);
                    return;
                }
            }
        }
    }));
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(e);
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// `enqueue_many` in batches of 100 per transaction: jobs per second.
pub(super) fn enqueue_batched(queue: &AnyQueue, keys: &Keys, n: usize) -> Result<f64, Error> {
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let chunk = (n - i).min(100);
        queue.enqueue_many(
            (i..i + chunk)
                .map(|j| NewJob::new(KIND, keys.key("batch", j), &BACKLOG))
                .collect(),
        )?;
        i += chunk;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

/// What the processing phase measured.
pub(super) struct Processed {
    pub(super) per_sec: f64,
    pub(super) cpu_us_per_job: f64,
    /// Each probe's latency in µs, and whether it ran under load.
    pub(super) latencies: Vec<(u64, bool)>,
}

/// Where the jobs of this run start, and how many of them there are.
pub(super) struct Backlog {
    /// Every measured job's id is above it.
    pub(super) base_id: i64,
    /// Jobs of priority 0 enqueued by the phases above.
    pub(super) jobs: usize,
    /// Latency probes (priority -1) to enqueue while they are processed.
    pub(super) probes: usize,
}

/// Processes the backlog with `args.workers` while PROBE_THREADS enqueue
/// latency probes ahead of it, for ~1 s from its start.
pub(super) fn process(
    queue: &AnyQueue,
    keys: &Keys,
    backlog: &Backlog,
    args: &BenchArgs,
) -> Result<Processed, Error> {
    let done = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(backlog.probes)));
    let cpu0 = super::cpu_ns();
    let t0 = Instant::now();
    let mut runtime = start_runtime(queue, args, backlog.jobs, &done, &latencies)?;
    let producers = spawn_probes(queue, keys, backlog.probes);
    let deadline = Instant::now() + Duration::from_secs(600);
    // The processing rate is the backlog's (priority 0); the probes
    // (priority -1) measure latency meanwhile and finish afterwards.
    wait_for(deadline, 2, || {
        Ok(done.load(Ordering::Relaxed) >= backlog.jobs)
    })?;
    let succeeded = |filter: &str| -> Result<i64, Error> {
        let sql = format!(
            "SELECT count(*) FROM jobs WHERE id > {base} AND kind = '{kind}' \
             AND state = 'succeeded' {filter}",
            base = backlog.base_id,
            kind = KIND
        );
        count(queue, &sql, 0)
    };
    // Counted in the apply step, before the commit: confirm the commits.
    wait_for(deadline, 1, || {
        Ok(succeeded("AND priority = 0")? >= backlog.jobs as i64)
    })?;
    let per_sec = backlog.jobs as f64 / t0.elapsed().as_secs_f64();
    let cpu_us_per_job = super::cpu_ns().saturating_sub(cpu0) as f64 / 1000.0 / backlog.jobs as f64;
    // Before waiting for every probe: one whose enqueue failed would never
    // succeed, and its error, not a timeout, is the answer.
    for producer in producers {
        producer
            .join()
            .map_err(|_| Error::Internal("probe producer panicked".into()))??;
    }
    let all = (backlog.jobs + backlog.probes) as i64;
    wait_for(deadline, 5, || Ok(succeeded("")? >= all))?;
    runtime.stop();
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    Ok(Processed {
        per_sec,
        cpu_us_per_job,
        latencies,
    })
}

/// One integer from `sql` (`default` for a NULL), on either backend.
pub(super) fn count(queue: &AnyQueue, sql: &str, default: i64) -> Result<i64, Error> {
    match queue {
        AnyQueue::Postgres(q) => q.read(|c| {
            let row = c
                .query_one(sql, &[])
                .map_err(|e| Error::Internal(format!("{sql}: {e}")))?;
            Ok(row
                .try_get::<_, Option<i64>>(0)
                .map_err(|e| Error::Internal(format!("{sql}: {e}")))?
                .unwrap_or(default))
        }),
        AnyQueue::Sqlite(q) => q.read(|c| {
            Ok(c.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))?
                .unwrap_or(default))
        }),
        _ => Err(Error::Unsupported(
            "an engine the bench does not know".into(),
        )),
    }
}

/// The bench's handlers on an engine: apply-only, writing nothing of their
/// own, so a run is the queue's own path and nothing else.
trait NoOp: litejob::Engine {
    /// Registers `f` as the handler of `kind`, ignoring the transaction.
    fn no_op<T, F>(b: RuntimeBuilder<Self>, kind: &str, f: F) -> RuntimeBuilder<Self>
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(T) -> Outcome + Send + Sync + 'static;
}

impl NoOp for Sqlite {
    fn no_op<T, F>(b: RuntimeBuilder<Self>, kind: &str, f: F) -> RuntimeBuilder<Self>
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(T) -> Outcome + Send + Sync + 'static,
    {
        b.handler(kind, move |_tx, p: T| Ok(f(p)))
    }
}

impl NoOp for Postgres {
    fn no_op<T, F>(b: RuntimeBuilder<Self>, kind: &str, f: F) -> RuntimeBuilder<Self>
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(T) -> Outcome + Send + Sync + 'static,
    {
        b.handler(kind, move |_tx, p: T| Ok(f(p)))
    }
}

/// The runtime with the bench's handler: apply-only, like most handlers,
/// so the latency is to the start of the handler inside its transaction.
fn start_runtime(
    queue: &AnyQueue,
    args: &BenchArgs,
    backlog: usize,
    done: &Arc<AtomicUsize>,
    latencies: &Arc<Mutex<Vec<(u64, bool)>>>,
) -> Result<litejob::Runtime, Error> {
    match queue {
        AnyQueue::Sqlite(q) => start_on(q.runtime(), args, backlog, done, latencies),
        AnyQueue::Postgres(q) => start_on(q.runtime(), args, backlog, done, latencies),
        _ => Err(Error::Unsupported(
            "an engine the bench does not know".into(),
        )),
    }
}

/// [`start_runtime`] on an engine.
fn start_on<E: NoOp>(
    builder: RuntimeBuilder<E>,
    args: &BenchArgs,
    backlog: usize,
    done: &Arc<AtomicUsize>,
    latencies: &Arc<Mutex<Vec<(u64, bool)>>>,
) -> Result<litejob::Runtime, Error> {
    let (d, l) = (done.clone(), latencies.clone());
    let mut builder = builder.workers(args.workers);
    if let Some(n) = args.claim_ahead {
        builder = builder.claim_ahead(n);
    }
    if let Some(cron) = &args.schedule {
        // Priority 1: behind the backlog and the probes, like a periodic
        // job among urgent work.
        builder = E::no_op(builder, TICK, |_p: serde_json::Value| Outcome::Done)
            .schedule_with(Schedule::new(TICK, cron, TICK, &()).with_priority(1));
    }
    E::no_op(builder, KIND, move |p: Probe| {
        match p.t {
            Some(t) => {
                let lat = since_epoch_ns().saturating_sub(t) / 1000;
                // Kept apart once the backlog is done: only the probes
                // run while the queue processes at full rate count
                // (unless there are none, with a tiny --jobs).
                let busy = d.load(Ordering::Relaxed) < backlog;
                l.lock().unwrap().push((lat, busy));
            }
            None => {
                d.fetch_add(1, Ordering::Relaxed);
            }
        }
        Outcome::Done
    })
    .start()
}

/// Open loop: probe i is enqueued at start + i × PROBE_EVERY by whichever
/// of PROBE_THREADS is free, whatever the earlier probes' enqueues take.
/// One thread enqueueing its probes in turn waits for each enqueue (a
/// writer cycle or two under full load), so its probes leave right after
/// the previous one's answer: always at the same point of the writer's
/// cycle, which differs between NORMAL (answered at once) and FULL (after
/// an fsync), and skews the two's latencies for no reason an application
/// would see.
fn spawn_probes(
    queue: &AnyQueue,
    keys: &Keys,
    probes: usize,
) -> Vec<JoinHandle<Result<(), Error>>> {
    let start = Instant::now();
    let keys: Arc<Vec<String>> = Arc::new((0..probes).map(|i| keys.key("probe", i)).collect());
    let next_probe = Arc::new(AtomicUsize::new(0));
    (0..PROBE_THREADS)
        .map(|_| {
            let (queue, keys, next) = (queue.clone(), keys.clone(), next_probe.clone());
            std::thread::spawn(move || -> Result<(), Error> {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(k) = keys.get(i) else {
                        return Ok(());
                    };
                    let due = start + PROBE_EVERY * i as u32;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let t = Some(since_epoch_ns());
                    let job = NewJob::new(KIND, k.clone(), &Probe { t }).with_priority(-1);
                    queue.enqueue(job)?;
                }
            })
        })
        .collect()
}

/// Polls `done` every `every_ms` until it is true; an error past `deadline`.
fn wait_for(
    deadline: Instant,
    every_ms: u64,
    mut done: impl FnMut() -> Result<bool, Error>,
) -> Result<(), Error> {
    while !done()? {
        if Instant::now() > deadline {
            return Err(Error::Internal(
                "bench: processing did not finish in 10 minutes".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(every_ms));
    }
    Ok(())
}
