//! `litejob bench --preload N` and `--prune-check`: the same figures on a
//! file that already holds many jobs, and a prune running beside a
//! producer. Writes `jobs`, `attempts` and `processed_jobs` (the preload,
//! with plain SQL through `Queue::write`) and deletes finished history
//! (through `Queue::prune`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::admin::{AnyQueue, PruneOptions};
use litejob::{Error, NewJob, Queue};

use super::{Probe, KIND};

/// The kind of the preloaded queued jobs and of the prune check's enqueues:
/// no handler in the bench, so they stay queued.
pub const IDLE_KIND: &str = "bench.idle";

/// Rows per preload transaction.
const PRELOAD_BATCH: usize = 50_000;

/// Preloaded finished jobs, ids `?1..?2`, finished two days before `?5`.
const DONE: &str =
    "WITH RECURSIVE s(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM s WHERE x + 1 < ?2) \
     INSERT INTO jobs (queue, kind, idempotency_key, payload, state, run_at, attempts, \
                       created_at, finished_at) \
     SELECT 'default', ?3, ?4 || printf('%09d', x), '{\"t\":null}', 'succeeded', ?5 + x, 1, \
            ?5 + x, ?5 + x + 1 FROM s";
/// A succeeded attempt row for each job above id `?1`.
const ATTEMPTS: &str =
    "INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome) \
     SELECT id, 1, idempotency_key, 'bench-preload', finished_at - 1, finished_at, 'succeeded' \
     FROM jobs WHERE id > ?1";
/// A ledger row for each job above id `?1`.
const LEDGER: &str = "INSERT INTO processed_jobs (key, completed_at, job_id) \
     SELECT idempotency_key, finished_at, id FROM jobs WHERE id > ?1";
/// Preloaded queued jobs of [`IDLE_KIND`], ids `?1..?2`.
const IDLE: &str =
    "WITH RECURSIVE s(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM s WHERE x + 1 < ?2) \
     INSERT INTO jobs (queue, kind, idempotency_key, payload, run_at, created_at) \
     SELECT 'default', ?3, ?4 || printf('%09d', x), '{\"t\":null}', ?5, ?5 FROM s";

/// Writes `n` jobs with plain SQL, `PRELOAD_BATCH` per transaction: the first
/// half `succeeded` two days ago (each with its ledger row and a succeeded
/// attempt row, as a real run leaves them), the rest `queued` for
/// [`IDLE_KIND`]. Keys are `bench:<run>:done:<i>` and `bench:<run>:idle:<i>`.
pub fn preload(queue: &Queue, run_id: &str, n: usize) -> Result<(), Error> {
    let finished = n / 2;
    let now = crate::cli::time::now_ms();
    let finished_base = now - 2 * 86_400_000;
    let mut lo = 0;
    while lo < n {
        let hi = if lo < finished {
            (lo + PRELOAD_BATCH).min(finished)
        } else {
            (lo + PRELOAD_BATCH).min(n)
        };
        let done = lo < finished;
        let prefix = format!("bench:{run_id}:{}:", if done { "done" } else { "idle" });
        let (a, b) = (lo as i64, hi as i64);
        queue.write(move |tx| {
            if done {
                let base: i64 =
                    tx.query_row("SELECT coalesce(max(id), 0) FROM jobs", [], |r| r.get(0))?;
                tx.execute(
                    DONE,
                    litejob::rusqlite::params![a, b, KIND, prefix, finished_base],
                )?;
                tx.execute(ATTEMPTS, [base])?;
                tx.execute(LEDGER, [base])?;
            } else {
                tx.execute(
                    IDLE,
                    litejob::rusqlite::params![a, b, IDLE_KIND, prefix, now],
                )?;
            }
            Ok(())
        })?;
        lo = hi;
    }
    // Start measuring from an empty WAL, as on a file that has lived long
    // enough to be checkpointed, not one that just took 50,000-row commits.
    queue
        .connect()?
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}

/// What `--prune-check` saw.
pub struct PruneCheck {
    /// Job rows the prune deleted.
    pub jobs: usize,
    /// How long it took.
    pub secs: f64,
    /// The longest single enqueue meanwhile.
    pub max_enqueue_ms: f64,
    /// Enqueues made meanwhile.
    pub enqueues: usize,
}

/// Prunes jobs finished more than an hour ago (the preloaded ones) in one
/// thread while this one enqueues one job per call, back to back, timing
/// each enqueue.
pub fn prune_check(queue: &AnyQueue, run_id: &str) -> Result<PruneCheck, Error> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pruner = {
        let (queue, stop) = (queue.clone(), stop.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            // In batches of 1000 rows, the default of `litejob prune`.
            let r = queue
                .admin()
                .prune(&PruneOptions::new(Duration::from_secs(3600)));
            stop.store(true, Ordering::SeqCst);
            r.map(|r| (r, t0.elapsed().as_secs_f64()))
        })
    };
    let payload = Probe { t: None };
    let mut max = Duration::ZERO;
    let mut n = 0;
    let mut failed = None;
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        if let Err(e) = queue.enqueue(NewJob::new(
            IDLE_KIND,
            format!("bench:{run_id}:prune-probe:{n}"),
            &payload,
        )) {
            failed = Some(e);
            break;
        }
        max = max.max(t.elapsed());
        n += 1;
    }
    let (report, secs) = pruner
        .join()
        .map_err(|_| Error::Internal("prune thread panicked".into()))??;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(PruneCheck {
        jobs: report.jobs,
        secs,
        max_enqueue_ms: max.as_secs_f64() * 1000.0,
        enqueues: n,
    })
}
