//! Mirrors `litejob bench`: fresh file, 20,000 no-op jobs enqueued one per call
//! from one task, then (optionally) batches of 100 into a second fresh file,
//! then all jobs processed by a worker with 4 concurrent job slots.
use effectum::{Error, Job, JobRunner, Queue, RunningJob, Worker};
use std::{path::PathBuf, sync::Arc, time::{Duration, Instant}};

#[derive(Debug, Clone)]
struct Ctx;

async fn noop(_job: RunningJob, _ctx: Arc<Ctx>) -> Result<(), Error> {
    Ok(())
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()).unwrap_or(default.to_string())
}

fn fresh(path: &PathBuf) {
    for suf in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.clone().into_os_string();
        p.push(suf);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

fn pragmas(path: &PathBuf) -> (String, i64) {
    let c = rusqlite::Connection::open(path).unwrap();
    let jm: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    // synchronous is per connection; effectum's own write connection sets it, so we report
    // what the crate sets (see README), this is only the default of a new connection.
    let s: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
    (jm, s)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let jobs: usize = arg("--jobs", "20000").parse().unwrap();
    let workers: u16 = arg("--workers", "4").parse().unwrap();
    let batch: usize = arg("--batch", "100").parse().unwrap();
    let dir = PathBuf::from(arg("--dir", "/tmp"));
    let pid = std::process::id();

    // --- enqueue, one per call, one task ---
    let path = dir.join(format!("effectum-bench-{pid}.db"));
    fresh(&path);
    // effectum 0.7.0 runs `PRAGMA journal = wal` (a typo for journal_mode, which SQLite
    // ignores), so a new file stays in rollback-journal (DELETE) mode. `--journal wal`
    // pre-creates the file in WAL mode, which persists in the file, as a user could.
    let journal = arg("--journal", "default");
    if journal == "wal" {
        let c = rusqlite::Connection::open(&path).unwrap();
        let m: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
        assert_eq!(m, "wal");
    }
    let queue = Queue::new(&path).await?;
    let t = Instant::now();
    for _ in 0..jobs {
        Job::builder("noop").add_to(&queue).await.map_err(|e| { eprintln!("enqueue phase: {e:?}"); e })?;
    }
    let enq = jobs as f64 / t.elapsed().as_secs_f64();

    // --- enqueue in batches (separate fresh file, then discarded) ---
    let enq_batch = if batch > 0 {
        let bpath = dir.join(format!("effectum-bench-batch-{pid}.db"));
        fresh(&bpath);
        if journal == "wal" {
            let c = rusqlite::Connection::open(&bpath).unwrap();
            let _: String = c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
        }
        let bq = Queue::new(&bpath).await?;
        let t = Instant::now();
        let mut left = jobs;
        while left > 0 {
            let n = left.min(batch);
            let v: Vec<Job> = (0..n).map(|_| Job::builder("noop").build()).collect();
            bq.add_jobs(v).await.map_err(|e| { eprintln!("batch phase: {e:?}"); e })?;
            left -= n;
        }
        let r = jobs as f64 / t.elapsed().as_secs_f64();
        bq.close(Duration::from_secs(5)).await?;
        drop(bq);
        fresh(&bpath);
        Some(r)
    } else {
        None
    };

    // --- process all with `workers` concurrent slots ---
    let runner = JobRunner::builder("noop", noop).build();
    let t = Instant::now();
    let worker = Worker::builder(&queue, Arc::new(Ctx))
        .max_concurrency(workers)
        .jobs([runner])
        .build()
        .await?;
    // Done = nothing left in active_jobs (effectum moves finished jobs to done_jobs).
    // `--done-check counts` (default): the worker's own count of finished jobs, which
    // effectum bumps only after the completion's write transaction has committed; no
    // database reads while processing. `--done-check db`: poll `num_active_jobs()`
    // through effectum's read pool every 1 ms (the first version of this harness; in
    // DELETE journal mode those reads can collide with the writer: "database is locked").
    let done_check = arg("--done-check", "counts");
    loop {
        if done_check == "db" {
            let n = queue.num_active_jobs().await.map_err(|e| { eprintln!("process phase (num_active_jobs): {e:?}"); e })?;
            if n.pending == 0 && n.running == 0 {
                break;
            }
        } else if worker.counts().finished as usize >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let proc_secs = t.elapsed().as_secs_f64();
    let proc = jobs as f64 / proc_secs;
    worker.unregister(Some(Duration::from_secs(5))).await?;
    queue.close(Duration::from_secs(5)).await?;
    drop(queue);

    let c = rusqlite::Connection::open(&path).unwrap();
    let done: i64 = c.query_row("SELECT count(*) FROM jobs WHERE status = 'succeeded'", [], |r| r.get(0)).unwrap_or(-1);
    let active: i64 = c.query_row("SELECT count(*) FROM active_jobs", [], |r| r.get(0)).unwrap_or(-1);
    drop(c);
    let (jm, _s) = pragmas(&path);
    println!(
        "{}",
        serde_json::json!({
            "peer": "effectum 0.7.0", "journal_opt": journal, "done_check": done_check,
            "jobs": jobs, "workers": workers,
            "enqueue_per_sec": enq.round(),
            "enqueue_batch_per_sec": enq_batch.map(|x| x.round()),
            "batch_size": batch,
            "process_per_sec": proc.round(),
            "process_secs": proc_secs,
            "done_success": done, "active_left": active,
            "journal_mode": jm,
            "synchronous_set_by_crate": "NORMAL"
        })
    );
    if arg("--keep", "no") == "no" { fresh(&path); }
    Ok(())
}
