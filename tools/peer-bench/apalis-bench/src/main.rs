//! Mirrors `litejob bench` for apalis + apalis-sqlite: fresh file, 20,000 no-op
//! jobs pushed one per call from one task, batches of 100 into a second fresh
//! file, then all jobs processed by one apalis worker limited to 4 in flight.
use apalis::prelude::*;
use apalis_sqlite::{SqliteStorage, Config};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::{path::PathBuf, str::FromStr, time::{Duration, Instant}};

async fn noop(_job: u32) -> Result<(), BoxDynError> {
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

/// `default`: what apalis-sqlite's README does (sqlx pool with default options,
/// then `SqliteStorage::setup`, which runs `PRAGMA synchronous = OFF` on one of
/// the pool's connections only; sqlx opens the others with SQLite's default, FULL).
/// `full` / `normal` / `off`: setup on a throwaway pool, then a pool whose every
/// connection is opened with that `synchronous` setting.
async fn open(path: &PathBuf, sync: &str) -> SqlitePool {
    let base = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
        .unwrap()
        .create_if_missing(true);
    if sync == "default" {
        let pool = SqlitePool::connect_with(base).await.unwrap();
        SqliteStorage::setup(&pool).await.unwrap();
        return pool;
    }
    {
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(base.clone()).await.unwrap();
        SqliteStorage::setup(&pool).await.unwrap();
        pool.close().await;
    }
    let s = match sync {
        "full" => SqliteSynchronous::Full,
        "normal" => SqliteSynchronous::Normal,
        "off" => SqliteSynchronous::Off,
        _ => panic!("--sync default|full|normal|off"),
    };
    SqlitePool::connect_with(base.synchronous(s)).await.unwrap()
}

async fn count(pool: &SqlitePool, sql: &'static str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await.unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let jobs: usize = arg("--jobs", "20000").parse().unwrap();
    let workers: usize = arg("--workers", "4").parse().unwrap();
    let batch: usize = arg("--batch", "100").parse().unwrap();
    let fetch: usize = arg("--fetch-batch", "10").parse().unwrap(); // apalis-sqlite default 10
    let poll_ms: u64 = arg("--poll-ms", "0").parse().unwrap();
    let sync = arg("--sync", "default");
    let dir = PathBuf::from(arg("--dir", "/tmp"));
    let pid = std::process::id();

    // --- enqueue, one per call ---
    let path = dir.join(format!("apalis-bench-{pid}.db"));
    fresh(&path);
    let pool = open(&path, &sync).await;
    let config = Config::default().queue("noop").batch_size(fetch);
    let mut storage: SqliteStorage<u32> = SqliteStorage::new(&pool).with_config(config.clone());
    let t = Instant::now();
    for i in 0..jobs {
        storage.push(i as u32).await.unwrap();
    }
    let enq = jobs as f64 / t.elapsed().as_secs_f64();

    // --- enqueue in batches (separate fresh file, then discarded) ---
    let enq_batch = if batch > 0 {
        let bpath = dir.join(format!("apalis-bench-batch-{pid}.db"));
        fresh(&bpath);
        let bpool = open(&bpath, &sync).await;
        let mut bs: SqliteStorage<u32> = SqliteStorage::new(&bpool).with_config(config.clone());
        let t = Instant::now();
        let mut left = jobs;
        while left > 0 {
            let n = left.min(batch);
            bs.push_bulk((0..n as u32).collect()).await.unwrap();
            left -= n;
        }
        let r = jobs as f64 / t.elapsed().as_secs_f64();
        let got = count(&bpool, "SELECT count(*) FROM Jobs").await;
        assert_eq!(got as usize, jobs);
        bpool.close().await;
        fresh(&bpath);
        Some(r)
    } else {
        None
    };

    // --- process ---
    let queued = count(&pool, "SELECT count(*) FROM Jobs WHERE status = 'Pending'").await;
    assert_eq!(queued as usize, jobs);
    let t = Instant::now();
    let handle = if poll_ms > 0 {
        let w = WorkerBuilder::new("bench-worker")
            .backend(storage.poll_with_interval(Duration::from_millis(poll_ms)))
            .concurrency(workers)
            .build(noop);
        tokio::spawn(async move { let _ = w.run().await; })
    } else {
        let w = WorkerBuilder::new("bench-worker")
            .backend(storage)
            .concurrency(workers)
            .build(noop);
        tokio::spawn(async move { let _ = w.run().await; })
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut done;
    loop {
        done = count(&pool, "SELECT count(*) FROM Jobs WHERE status = 'Done'").await;
        if done as usize >= jobs || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let proc_secs = t.elapsed().as_secs_f64();
    let proc = done as f64 / proc_secs;
    handle.abort();
    let jm: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&pool).await.unwrap();
    println!(
        "{}",
        serde_json::json!({
            "peer": "apalis 1.0.0 + apalis-sqlite 1.0.0 (sqlx 0.9.0)",
            "jobs": jobs, "workers": workers, "sync": sync, "fetch_batch": fetch, "poll_ms": poll_ms,
            "enqueue_per_sec": enq.round(),
            "enqueue_batch_per_sec": enq_batch.map(|x| x.round()),
            "batch_size": batch,
            "process_per_sec": proc.round(),
            "process_secs": proc_secs,
            "done": done,
            "journal_mode": jm
        })
    );
    pool.close().await;
    if arg("--keep", "no") == "no" { fresh(&path); }
    std::process::exit(if done as usize >= jobs { 0 } else { 1 });
}
