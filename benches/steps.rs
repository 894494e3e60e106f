//! What a durable step costs, on a file and (with `LITEJOB_BENCH_PG` set
//! to a database URL) on PostgreSQL: jobs whose prepare step calls 3
//! no-op steps against the same jobs with a prepare step and no steps, with
//! 1 worker (a step's latency: µs per step) and 4 (throughput). Each step
//! commits its record before it returns (FULL: a durable commit). `cargo
//! bench --bench steps` runs it.

#![allow(missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::{NewJob, Outcome, Queue, QueueOptions};

const STEPS: usize = 3;

macro_rules! measure {
    ($open:expr, $jobs:expr) => {{
        // Seconds to run `n` jobs of `steps` steps each through `workers`.
        let run = |steps: usize, workers: usize| -> f64 {
            let (_keep, q) = $open;
            let n: usize = $jobs;
            let all: Vec<NewJob> = (0..n)
                .map(|i| NewJob::new("order", format!("o{i}"), &i))
                .collect();
            for chunk in all.chunks(1000) {
                q.enqueue_many(chunk.to_vec()).unwrap();
            }
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let t0 = Instant::now();
            let mut rt = q
                .runtime()
                .workers(workers)
                .handler_with_prepare(
                    "order",
                    move |ctx, i: usize| {
                        let mut sum = 0;
                        for s in 0..steps {
                            sum += ctx.step(&format!("s{s}"), |_key| Ok::<_, String>(i + s))?;
                        }
                        Ok(sum)
                    },
                    move |_tx, _sum: usize| {
                        d.fetch_add(1, Ordering::Relaxed);
                        Ok(Outcome::Done)
                    },
                )
                .start()
                .unwrap();
            while done.load(Ordering::Relaxed) < n {
                std::thread::sleep(Duration::from_micros(500));
            }
            let took = t0.elapsed();
            rt.stop();
            took.as_secs_f64()
        };
        let n: usize = $jobs;
        for round in 1..=3 {
            let (plain1, steps1) = (run(0, 1), run(STEPS, 1));
            let (plain4, steps4) = (run(0, 4), run(STEPS, 4));
            println!(
                "  round {round}: 1 worker: {:.0} µs per step ({:.0} jobs/s without steps, {:.0} with {STEPS}); \
                 4 workers: {:.0} jobs/s without steps, {:.0} with {STEPS} ({:.0} steps/s)",
                (steps1 - plain1) / (n * STEPS) as f64 * 1e6,
                n as f64 / plain1,
                n as f64 / steps1,
                n as f64 / plain4,
                n as f64 / steps4,
                (n * STEPS) as f64 / steps4,
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
    println!("file (FULL):");
    measure!(
        {
            let dir = tempfile::tempdir().expect("tempdir");
            let q = Queue::open(dir.path().join("bench.db")).expect("open");
            (dir, q)
        },
        1000
    );
    let Ok(url) = std::env::var("LITEJOB_BENCH_PG") else {
        println!("PostgreSQL: set LITEJOB_BENCH_PG to a database URL to measure it");
        return;
    };
    println!("PostgreSQL (synchronous_commit on):");
    measure!(
        {
            let schema = format!("lj_steps_{}", std::process::id());
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
        },
        500
    );
}
