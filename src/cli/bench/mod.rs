//! `litejob bench`: measures this machine's disk through the full path a
//! real job takes — enqueue (one per call, from 8 producers, from many
//! async tasks on one thread, batched), then
//! processing no-op jobs (claim, ledger row, handler, completion, attempt
//! record) and the latency from an in-process enqueue to the handler's
//! start. Writes a temporary queue file (or `--db`, kept).
//!
//! `--preload N` first fills the file with N extra jobs (half finished, half
//! queued for a kind nobody handles) with plain SQL, so the same figures can
//! be compared at scale; `--prune-check` then prunes the finished half while
//! a producer enqueues, and reports the longest single enqueue;
//! `--backup-check` does the same while the file is backed up. Last, it
//! times the machine itself: a 4 KiB overwrite plus `fdatasync` of a
//! scratch file beside the queue file (`<db>-fsync-probe`, removed), and a
//! thread wake round trip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Error, QueueOptions, Schedule, Synchronous};
use serde::{Deserialize, Serialize};

mod backup_check;
mod executor;
mod machine;
mod phases;
mod scale;

use machine::{cpu_ns, fsync_probe, peak_rss_kb, wake_probe};
use scale::{preload, prune_check};

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
    /// Tasks enqueueing at once in the async phase, all on one executor
    /// thread (`Queue::enqueue_async`).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub async_tasks: usize,
    /// `PRAGMA synchronous`: full (durable, the default) or normal.
    #[arg(long, default_value = "full")]
    pub sync: String,
    /// Before measuring, fill the file with N extra jobs written with plain
    /// SQL: half `succeeded` (with their ledger and attempt rows, finished two
    /// days ago), half `queued` for the kind `bench.idle`, which the bench
    /// does not handle. On a fresh file, `SELECT count(*) FROM jobs WHERE
    /// state='succeeded'` then equals --jobs + N/2 (N/2 rounded down).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub preload: usize,
    /// After measuring, prune the preloaded finished jobs (`Queue::prune`,
    /// older than one hour, batches of 1000) while another thread enqueues
    /// one `bench.idle` job per call, and report the longest single enqueue
    /// and the prune's duration. The preloaded finished jobs are gone
    /// afterwards: the succeeded count is then --jobs.
    #[arg(long)]
    pub prune_check: bool,
    /// After measuring, back the file up (`Queue::backup_to`), then copy it
    /// with SQLite's `VACUUM INTO`, each while another thread enqueues one
    /// `bench.idle` job per call, and report the longest single enqueue
    /// during each copy, and during 3 s without one (the copy goes beside
    /// the file and is removed).
    #[arg(long)]
    pub backup_check: bool,
    /// Jobs one claim takes beyond one per worker (`RuntimeBuilder::claim_ahead`, default 64); on
    /// PostgreSQL a worker's batch (default 100, at most 100). Fewer shorten the writer's cycles
    /// or the batches, and with them the enqueue -> handler start latency at full rate, at some
    /// cost in throughput
    #[arg(long, value_name = "N")]
    pub claim_ahead: Option<usize>,
    /// Also declare a schedule on the measuring runtime, firing a no-op
    /// job (kind `bench.tick`) at every slot of CRON, e.g. '* * * * * *':
    /// compare the processing rate with and without it to see what the
    /// scheduler costs.
    #[arg(long, value_name = "CRON")]
    pub schedule: Option<String>,
}

/// The figures, as printed with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// One enqueue per call, one thread.
    pub enqueue_per_sec: f64,
    /// One enqueue per call, `producers` threads at once.
    pub enqueue_concurrent_per_sec: f64,
    /// One `enqueue_async` per call, `async_tasks` tasks at once on one
    /// executor thread.
    pub enqueue_async_per_sec: f64,
    /// `enqueue_many` in batches of 100.
    pub enqueue_batch_per_sec: f64,
    /// No-op jobs through the full path.
    pub process_per_sec: f64,
    /// CPU time of all the process's threads during the processing phase,
    /// per processed job, in microseconds (0 where /proc is not available):
    /// a cost figure that, unlike the rates, does not move with the disk.
    pub process_cpu_us_per_job: f64,
    /// In-process enqueue → handler start, median.
    pub latency_p50_us: u64,
    /// In-process enqueue → handler start, 99th percentile.
    pub latency_p99_us: u64,
    /// Probes whose handler started while the backlog was processed: the
    /// two percentiles are theirs. 0 when none did (a tiny `--jobs`): the
    /// percentiles are then those of every probe, handled at idle.
    pub latency_samples: usize,
    /// Settings.
    pub jobs: usize,
    /// Settings.
    pub workers: usize,
    /// Settings.
    pub producers: usize,
    /// Settings.
    pub async_tasks: usize,
    /// Settings.
    pub sync: String,
    /// `--schedule`: the cron expression of the schedule declared, or null.
    pub schedule: Option<String>,
    /// Extra jobs written before measuring (`--preload`).
    pub preload: usize,
    /// Seconds the preload took.
    pub preload_secs: f64,
    /// Peak resident memory of the process (VmHWM), in KiB.
    pub max_rss_kb: u64,
    /// The machine, measured after the phases: one 4 KiB overwrite and
    /// `fdatasync` of a file beside the queue file, median, in µs. A group
    /// commit cannot answer faster than this.
    pub machine_fsync_us: f64,
    /// The machine: one thread waking another and being woken back
    /// (mutex and condvar), mean, in µs. Each hand-off between threads (a
    /// producer to the writer, the writer to the syncer, the syncer back to
    /// the producer) costs about half of it.
    pub machine_wake_round_trip_us: f64,
    /// `--prune-check`: jobs the prune deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune_jobs: Option<usize>,
    /// `--prune-check`: seconds the prune took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune_secs: Option<f64>,
    /// `--prune-check`: the longest single enqueue during the prune, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune_max_enqueue_block_ms: Option<f64>,
    /// `--prune-check`: enqueues made during the prune.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune_enqueues: Option<usize>,
    /// `--backup-check`: each copy's duration and the enqueues meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_check: Option<Vec<backup_check::BackupCheck>>,
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

/// The probes' latencies the percentiles are taken from, sorted, and how
/// many of them were handled under load. `all`: each probe's latency, and
/// whether its handler started while the backlog was processed. Only those
/// count (the latency at full rate); if none did, every probe does, and
/// the count says 0.
fn latencies_to_report(all: &[(u64, bool)]) -> (Vec<u64>, usize) {
    let busy: Vec<u64> = all.iter().filter(|(_, b)| *b).map(|(l, _)| *l).collect();
    let under_load = busy.len();
    let mut lat = if busy.is_empty() {
        all.iter().map(|(l, _)| *l).collect()
    } else {
        busy
    };
    lat.sort_unstable();
    (lat, under_load)
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn since_epoch_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

const KIND: &str = "bench.noop";

/// The latency probes' interval: one enqueue every 4 ms, and only the
/// probes handled while the backlog runs count (the rate at full load).
/// Light on purpose: they measure the processing, not a load of their own.
/// At one a millisecond, urgent jobs handled in among the backlog, they
/// slowed the processing they measure; at one every 4 ms it is within the
/// noise (docs/performance-notes.md).
const PROBE_EVERY: Duration = Duration::from_millis(4);

/// Threads enqueueing the probes, so that a probe leaves on time while
/// earlier ones still wait for their commit (a writer cycle or two, a few
/// ms, at full load).
const PROBE_THREADS: usize = 4;

/// Runs the benchmark; `db` is `--db` if given. Returns the exit status.
pub fn run(db: Option<&Path>, args: &BenchArgs, json: bool) -> Result<i32, Error> {
    let sync: Synchronous = args.sync.parse()?;
    if args.jobs < 100 {
        return Err(Error::InvalidInput("--jobs must be at least 100".into()));
    }
    if args.workers == 0 || args.producers == 0 || args.async_tasks == 0 {
        return Err(Error::InvalidInput(
            "--workers, --producers and --async-tasks must be at least 1".into(),
        ));
    }
    if let Some(cron) = &args.schedule {
        Schedule::new("bench.tick", cron, "bench.tick", &()).check()?;
    }
    if super::is_url(db.unwrap_or(Path::new("")))
        && (args.preload > 0 || args.prune_check || args.backup_check)
    {
        return Err(Error::InvalidInput(
            "--preload, --prune-check and --backup-check measure a file, not a PostgreSQL \
             database"
                .into(),
        ));
    }
    let (path, kept): (PathBuf, bool) = match db {
        Some(p) => (p.to_path_buf(), true),
        None => (
            std::env::temp_dir().join(format!(
                "litejob-bench-{}-{:x}.db",
                std::process::id(),
                super::rng::Rng::from_entropy().next_u64() as u32
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
        writeln!(out, "{}", text(&report, kept))
    };
    Ok(0)
}

/// The report for people.
fn text(report: &BenchReport, kept: bool) -> String {
    let mut text = format!(
        "litejob bench: {} jobs, {} workers, synchronous={}\n",
        report.jobs, report.workers, report.sync
    );
    if report.preload > 0 {
        text += &format!(
            "preloaded {} jobs (half succeeded, half queued for bench.idle) in {:.1} s\n",
            report.preload, report.preload_secs
        );
    }
    text += &format!(
        "enqueue, one per call, 1 thread   {:>10.0} jobs/s\n\
         enqueue, one per call, {} threads {:>10.0} jobs/s\n\
         {:<34}{:>10.0} jobs/s\n\
         enqueue, batches of 100           {:>10.0} jobs/s\n\
         process (claim, ledger, handler,\n\
         \x20        completion, attempt row)  {:>10.0} jobs/s\n\
         \x20 CPU per processed job (all threads) {:>6.1} us\n\
         enqueue -> handler start          p50 {} us, p99 {} us (probes under load: {})\n",
        report.enqueue_per_sec,
        report.producers,
        report.enqueue_concurrent_per_sec,
        format!("enqueue_async, {} tasks, 1 thread", report.async_tasks),
        report.enqueue_async_per_sec,
        report.enqueue_batch_per_sec,
        report.process_per_sec,
        report.process_cpu_us_per_job,
        report.latency_p50_us,
        report.latency_p99_us,
        report.latency_samples,
    );
    if let (Some(jobs), Some(secs), Some(block), Some(n)) = (
        report.prune_jobs,
        report.prune_secs,
        report.prune_max_enqueue_block_ms,
        report.prune_enqueues,
    ) {
        text += &format!(
            "prune of {jobs} finished jobs: {secs:.1} s; {n} enqueues meanwhile, \
             the longest {block:.1} ms\n"
        );
    }
    for c in report.backup_check.iter().flatten() {
        text += &format!(
            "{:<11} of the file ({:.0} MB): {:.1} s; {} enqueues meanwhile, p99 {:.1} ms, \
             the longest {:.1} ms\n",
            c.method,
            c.bytes as f64 / 1e6,
            c.secs,
            c.enqueues,
            c.p99_enqueue_ms,
            c.max_enqueue_ms
        );
    }
    text += &format!(
        "machine: 4 KiB write + fdatasync  {:>10.0} us\n\
         machine: thread wake round trip   {:>10.0} us\n",
        report.machine_fsync_us, report.machine_wake_round_trip_us
    );
    text += &format!(
        "peak resident memory              {:>10.1} MB\n\
         file: {}{}",
        report.max_rss_kb as f64 / 1024.0,
        report.db,
        if kept { " (kept)" } else { " (removed)" }
    );
    text
}

// Long: the bench's phases in the order they run, then the report, one
// field per line.
fn measure(
    path: &Path,
    kept: bool,
    sync: Synchronous,
    args: &BenchArgs,
) -> Result<BenchReport, Error> {
    let _ = epoch();
    let queue =
        super::open(path, QueueOptions::default().with_synchronous(sync)).map_err(|e| match e {
            super::CliError::Lib(e) => e,
            other => Error::Internal(format!("{other:?}")),
        })?;
    let run_id = format!("{:x}", super::rng::Rng::from_entropy().next_u64());
    let keys = phases::Keys(run_id.clone());

    let t0 = Instant::now();
    if args.preload > 0 {
        let AnyQueue::Sqlite(file) = &queue else {
            return Err(Error::InvalidInput(
                "--preload fills a file; on PostgreSQL, load the rows with SQL".into(),
            ));
        };
        preload(file, &run_id, args.preload)?;
    }
    let preload_secs = t0.elapsed().as_secs_f64();
    // The measured jobs come after every row already in the file: counting
    // them reads only their id range, not a million preloaded rows.
    let base_id: i64 = phases::count(&queue, "SELECT coalesce(max(id), 0) FROM jobs", 0)?;

    // As many as fit in ~1 s at PROBE_EVERY, and a tenth of the jobs at most.
    let probes = (args.jobs / 10).min(250);
    let backlog = args.jobs - probes;
    let single = backlog / 4;
    let concurrent = backlog / 4;
    let from_async = backlog / 4;
    let batched = backlog - single - concurrent - from_async;

    let enqueue_per_sec = phases::enqueue_single(&queue, &keys, single)?;
    let enqueue_concurrent_per_sec =
        phases::enqueue_concurrent(&queue, &keys, concurrent, args.producers)?;
    let enqueue_async_per_sec = phases::enqueue_async(&queue, &keys, from_async, args.async_tasks)?;
    let enqueue_batch_per_sec = phases::enqueue_batched(&queue, &keys, batched)?;
    let backlog = phases::Backlog {
        base_id,
        jobs: backlog,
        probes,
    };
    let processed = phases::process(&queue, &keys, &backlog, args)?;
    let (lat, under_load) = latencies_to_report(&processed.latencies);
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };

    let prune = if args.prune_check {
        Some(prune_check(&queue, &run_id)?)
    } else {
        None
    };
    let backups = if args.backup_check {
        Some(backup_check::backup_check(&queue, &run_id)?)
    } else {
        None
    };

    Ok(BenchReport {
        enqueue_per_sec,
        enqueue_concurrent_per_sec,
        enqueue_async_per_sec,
        enqueue_batch_per_sec,
        process_per_sec: processed.per_sec,
        process_cpu_us_per_job: processed.cpu_us_per_job,
        latency_p50_us: pct(0.50),
        latency_p99_us: pct(0.99),
        latency_samples: under_load,
        jobs: args.jobs,
        workers: args.workers,
        producers: args.producers,
        async_tasks: args.async_tasks,
        sync: sync.as_str().to_ascii_lowercase(),
        schedule: args.schedule.clone(),
        preload: args.preload,
        preload_secs,
        max_rss_kb: peak_rss_kb(),
        // A PostgreSQL server's disk is its own: the probe measures this
        // machine's temporary directory instead.
        machine_fsync_us: if super::is_url(path) {
            fsync_probe(
                &std::env::temp_dir().join(format!("litejob-bench-{}", std::process::id())),
            )?
        } else {
            fsync_probe(path)?
        },
        machine_wake_round_trip_us: wake_probe(),
        prune_jobs: prune.as_ref().map(|p| p.jobs),
        prune_secs: prune.as_ref().map(|p| p.secs),
        prune_max_enqueue_block_ms: prune.as_ref().map(|p| p.max_enqueue_ms),
        prune_enqueues: prune.as_ref().map(|p| p.enqueues),
        backup_check: backups,
        db: queue.location().to_string(),
        kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_probes_handled_under_load_make_the_percentiles() {
        // Two probes ran while the backlog did, two after it at idle.
        let all = [(900, false), (2_000, true), (100, false), (1_500, true)];
        assert_eq!(latencies_to_report(&all), (vec![1_500, 2_000], 2));
    }

    #[test]
    fn with_none_under_load_every_probe_counts_and_the_count_says_so() {
        let all = [(300, false), (100, false)];
        assert_eq!(latencies_to_report(&all), (vec![100, 300], 0));
    }
}
