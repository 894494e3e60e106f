//! Partitioned limits' cost, on a file and (with `LITEJOB_BENCH_PG` set to
//! a database URL) on PostgreSQL: 1,000 partitions of 20 no-op jobs each
//! under `partition_concurrency(1)` with 4 workers, against the same jobs
//! without partitions; and how long a lone job of one partition waits
//! behind 10,000 of another at its cap (time to its start). Prints jobs/s
//! and milliseconds; `cargo bench --bench partitions` runs it.

#![allow(missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::admin::QueueLimits;
use litejob::{NewJob, Outcome, Queue, QueueOptions};

const PARTITIONS: usize = 1000;
const PER: usize = 20;

/// The jobs: `grouped` puts each partition's 20 together (the claim's scan
/// must pass a running partition's waiting jobs), otherwise the partitions
/// take turns as they would arrive.
fn jobs(partitioned: bool, grouped: bool) -> Vec<NewJob> {
    let at = |p: usize, i: usize| {
        let job = NewJob::new("noop", format!("p{p}-{i}"), &i);
        if partitioned {
            job.with_partition(format!("shop:{p}"))
        } else {
            job
        }
    };
    if grouped {
        (0..PARTITIONS)
            .flat_map(|p| (0..PER).map(move |i| at(p, i)))
            .collect()
    } else {
        (0..PER)
            .flat_map(|i| (0..PARTITIONS).map(move |p| at(p, i)))
            .collect()
    }
}

macro_rules! measure {
    ($open:expr) => {{
        // Jobs per second through 4 workers.
        let rate = |partitioned: bool, grouped: bool| -> f64 {
            let (_keep, q) = $open;
            if partitioned {
                q.admin()
                    .set_queue_limits("default", QueueLimits::new().partition_concurrency(1))
                    .unwrap();
            }
            let all = jobs(partitioned, grouped);
            let n = all.len();
            for chunk in all.chunks(1000) {
                q.enqueue_many(chunk.to_vec()).unwrap();
            }
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let t0 = Instant::now();
            let mut rt = q
                .runtime()
                .workers(4)
                .handler("noop", move |_tx, _p: serde_json::Value| {
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok(Outcome::Done)
                })
                .start()
                .unwrap();
            while done.load(Ordering::Relaxed) < n {
                std::thread::sleep(Duration::from_micros(500));
            }
            let took = t0.elapsed();
            rt.stop();
            n as f64 / took.as_secs_f64()
        };
        // Milliseconds from the runtime's start to the lone job's start.
        let lone = || -> f64 {
            let (_keep, q) = $open;
            q.admin()
                .set_queue_limits("default", QueueLimits::new().partition_concurrency(1))
                .unwrap();
            for c in 0..10 {
                let jobs = (0..1000)
                    .map(|i| NewJob::new("noop", format!("big-{c}-{i}"), &i).with_partition("big"))
                    .collect();
                q.enqueue_many(jobs).unwrap();
            }
            q.enqueue(NewJob::new("noop", "lone", &-1).with_partition("lone"))
                .unwrap();
            let seen: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
            let s = seen.clone();
            let t0 = Instant::now();
            let mut rt = q
                .runtime()
                .workers(4)
                .handler("noop", move |_tx, p: serde_json::Value| {
                    if p == serde_json::json!(-1) {
                        *s.lock().unwrap() = Some(Instant::now());
                    }
                    Ok(Outcome::Done)
                })
                .start()
                .unwrap();
            let at = loop {
                if let Some(at) = *seen.lock().unwrap() {
                    break at;
                }
                std::thread::sleep(Duration::from_micros(200));
            };
            rt.stop();
            (at - t0).as_secs_f64() * 1000.0
        };
        for round in 1..=3 {
            let plain = rate(false, false);
            let mixed = rate(true, false);
            let grouped = rate(true, true);
            let plain_grouped = rate(false, true);
            println!(
                "  round {round}: no partitions {plain:.0}/s, partitioned (arrival order) {mixed:.0}/s \
                 = {:.2}x; no partitions {plain_grouped:.0}/s, partitioned (grouped) {grouped:.0}/s = {:.2}x; \
                 lone job behind 10,000 started after {:.1} ms",
                mixed / plain,
                grouped / plain_grouped,
                lone()
            );
        }
    }};
}

fn main() {
    // `cargo test` runs benches with --bench only when asked; a plain
    // `cargo bench` passes it.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    println!("file:");
    measure!({
        let dir = tempfile::tempdir().expect("tempdir");
        let q = Queue::open(dir.path().join("bench.db")).expect("open");
        (dir, q)
    });
    let Ok(url) = std::env::var("LITEJOB_BENCH_PG") else {
        println!("PostgreSQL: set LITEJOB_BENCH_PG to a database URL to measure it");
        return;
    };
    println!("PostgreSQL:");
    measure!({
        let schema = format!("lj_part_{}", std::process::id());
        let mut c = litejob::pg::Client::connect(&url, litejob::pg::NoTls).expect("connect");
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .expect("schema");
        let sep = if url.contains('?') { '&' } else { '?' };
        let at = format!("{url}{sep}options=-csearch_path%3D{schema}");
        let q = litejob::Queue::<litejob::postgres::Postgres>::open_with(
            at.as_str(),
            QueueOptions::default(),
        )
        .expect("open");
        (c, q)
    });
}
