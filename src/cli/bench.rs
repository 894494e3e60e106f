//! `litejob bench`: measures this machine's disk through the full path a
//! real job takes — enqueue (one per call, from 8 producers, batched), then
//! processing no-op jobs (claim, ledger row, handler, completion, attempt
//! record) and the latency from an in-process enqueue to the handler's
//! start. Writes a temporary queue file (or `--db`, kept).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use litejob::{Error, NewJob, Outcome, Queue, QueueOptions, Synchronous};
use serde::{Deserialize, Serialize};

/// Flags of `litejob bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Jobs in all (every one of them ends `succeeded`).
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Worker threads processing the jobs.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Producer threads in the concurrent-enqueue phase.
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    /// `PRAGMA synchronous`: full (durable, the default) or normal.
    #[arg(long, default_value = "full")]
    pub sync: String,
}

/// The figures, as printed with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// One enqueue per call, one thread.
    pub enqueue_per_sec: f64,
    /// One enqueue per call, `producers` threads at once.
    pub enqueue_concurrent_per_sec: f64,
    /// `enqueue_many` in batches of 100.
    pub enqueue_batch_per_sec: f64,
    /// No-op jobs through the full path.
    pub process_per_sec: f64,
    /// In-process enqueue → handler start, median.
    pub latency_p50_us: u64,
    /// In-process enqueue → handler start, 99th percentile.
    pub latency_p99_us: u64,
    /// Settings.
    pub jobs: usize,
    /// Settings.
    pub workers: usize,
    /// Settings.
    pub producers: usize,
    /// Settings.
    pub sync: String,
    /// The file used.
    pub db: String,
    /// Whether the file was kept.
    pub kept: bool,
}

#[derive(Serialize, Deserialize)]
struct Probe {
    /// Nanoseconds since `epoch()` at enqueue; absent for backlog jobs.
    t: Option<u64>,
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn since_epoch_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

const KIND: &str = "bench.noop";

/// Runs the benchmark; `db` is `--db` if given. Returns the exit status.
pub fn run(db: Option<&Path>, args: &BenchArgs, json: bool) -> Result<i32, Error> {
    let sync: Synchronous = args.sync.parse()?;
    if args.jobs < 100 {
        return Err(Error::InvalidInput("--jobs must be at least 100".into()));
    }
    if args.workers == 0 || args.producers == 0 {
        return Err(Error::InvalidInput(
            "--workers and --producers must be at least 1".into(),
        ));
    }
    let (path, kept): (PathBuf, bool) = match db {
        Some(p) => (p.to_path_buf(), true),
        None => (
            std::env::temp_dir().join(format!(
                "litejob-bench-{}-{:x}.db",
                std::process::id(),
                litejob::retry::Rng::from_entropy().next_u64() as u32
            )),
            false,
        ),
    };
    let result = measure(&path, kept, sync, args);
    if !kept {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    let report = result?;
    let mut out = std::io::stdout().lock();
    let _ = if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&report).unwrap_or_default()
        )
    } else {
        writeln!(
            out,
            "litejob bench: {} jobs, {} workers, synchronous={}\n\
             enqueue, one per call, 1 thread   {:>10.0} jobs/s\n\
             enqueue, one per call, {} threads {:>10.0} jobs/s\n\
             enqueue, batches of 100           {:>10.0} jobs/s\n\
             process (claim, ledger, handler,\n\
             \x20        completion, attempt row)  {:>10.0} jobs/s\n\
             enqueue -> handler start          p50 {} us, p99 {} us\n\
             file: {}{}",
            report.jobs,
            report.workers,
            report.sync,
            report.enqueue_per_sec,
            report.producers,
            report.enqueue_concurrent_per_sec,
            report.enqueue_batch_per_sec,
            report.process_per_sec,
            report.latency_p50_us,
            report.latency_p99_us,
            report.db,
            if kept { " (kept)" } else { " (removed)" }
        )
    };
    Ok(0)
}

fn measure(
    path: &Path,
    kept: bool,
    sync: Synchronous,
    args: &BenchArgs,
) -> Result<BenchReport, Error> {
    let _ = epoch();
    let queue = Queue::open_with(path, QueueOptions::default().with_synchronous(sync))?;
    let run_id = format!("{:x}", litejob::retry::Rng::from_entropy().next_u64());
    let key = |phase: &str, i: usize| format!("bench:{run_id}:{phase}:{i}");
    let payload = Probe { t: None };

    let probes = (args.jobs / 10).min(1000);
    let backlog = args.jobs - probes;
    let single = backlog / 4;
    let concurrent = backlog / 4;
    let batched = backlog - single - concurrent;

    // 1. One enqueue per call, one thread.
    let t0 = Instant::now();
    for i in 0..single {
        queue.enqueue(NewJob::new(KIND, key("single", i), &payload))?;
    }
    let enqueue_per_sec = single as f64 / t0.elapsed().as_secs_f64();

    // 2. One enqueue per call from several producers: they share commits.
    let t0 = Instant::now();
    let per = concurrent.div_ceil(args.producers);
    let errors: Vec<Error> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.producers)
            .map(|p| {
                let queue = queue.clone();
                let key = &key;
                let payload = &payload;
                s.spawn(move || {
                    for i in (p * per)..((p + 1) * per).min(concurrent) {
                        queue.enqueue(NewJob::new(KIND, key("concurrent", i), payload))?;
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
    let enqueue_concurrent_per_sec = concurrent as f64 / t0.elapsed().as_secs_f64();

    // 3. Batches of 100 per transaction.
    let t0 = Instant::now();
    let mut i = 0;
    while i < batched {
        let n = (batched - i).min(100);
        queue.enqueue_many(
            (i..i + n)
                .map(|j| NewJob::new(KIND, key("batch", j), &payload))
                .collect(),
        )?;
        i += n;
    }
    let enqueue_batch_per_sec = batched as f64 / t0.elapsed().as_secs_f64();

    // 4. Process everything, while a producer enqueues latency probes ahead
    //    of the backlog (priority -1).
    let done = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(probes)));
    let (d, l) = (done.clone(), latencies.clone());
    let t0 = Instant::now();
    let mut runtime = queue
        .runtime()
        .workers(args.workers)
        // Apply-only, like most handlers: the latency is to the start of
        // the handler inside its transaction.
        .handler(KIND, move |_tx, p: Probe| {
            match p.t {
                Some(t) => {
                    let lat = since_epoch_ns().saturating_sub(t) / 1000;
                    l.lock().unwrap().push(lat);
                }
                None => {
                    d.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Outcome::Done)
        })
        .start()?;
    let producer = {
        let queue = queue.clone();
        let keys: Vec<String> = (0..probes).map(|i| key("probe", i)).collect();
        std::thread::spawn(move || -> Result<(), Error> {
            for k in keys {
                let job = NewJob::new(
                    KIND,
                    k,
                    &Probe {
                        t: Some(since_epoch_ns()),
                    },
                )
                .with_priority(-1);
                queue.enqueue(job)?;
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    // The processing rate is the backlog's (priority 0); the probes
    // (priority -1) measure latency meanwhile and finish afterwards.
    while done.load(Ordering::Relaxed) < backlog {
        if Instant::now() > deadline {
            return Err(Error::Internal(
                "bench: processing did not finish in 10 minutes".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let succeeded = |filter: &str| -> Result<i64, Error> {
        let sql = format!("SELECT count(*) FROM jobs WHERE state = 'succeeded' {filter}");
        queue.read(|c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
    };
    // Counted in the apply step, before the commit: confirm the commits.
    while succeeded("AND priority = 0")? < backlog as i64 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let process_per_sec = backlog as f64 / t0.elapsed().as_secs_f64();
    while succeeded("")? < args.jobs as i64 {
        if Instant::now() > deadline {
            return Err(Error::Internal(
                "bench: processing did not finish in 10 minutes".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    producer
        .join()
        .map_err(|_| Error::Internal("probe producer panicked".into()))??;
    runtime.stop();
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };

    let report = BenchReport {
        enqueue_per_sec,
        enqueue_concurrent_per_sec,
        enqueue_batch_per_sec,
        process_per_sec,
        latency_p50_us: pct(0.50),
        latency_p99_us: pct(0.99),
        jobs: args.jobs,
        workers: args.workers,
        producers: args.producers,
        sync: sync.as_str().to_ascii_lowercase(),
        db: path.display().to_string(),
        kept,
    };
    Ok(report)
}
