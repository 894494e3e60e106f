//! Criterion benches for the producer and consumer paths on a real file:
//! one enqueue per call, a batch of 100, and processing no-op jobs through
//! the full path (claim, ledger, handler, completion, attempt record), and
//! the run that finishes a job with 1,000 dependents (all queued in its
//! commit, by one statement) beside the run of a job with none.
//! `cargo bench` runs them; `litejob bench` reports the same figures as
//! jobs/s.

// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use litejob::{NewJob, Outcome, Queue};

fn open() -> (tempfile::TempDir, Queue) {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = Queue::open(dir.path().join("bench.db")).expect("open");
    (dir, q)
}

fn enqueue(c: &mut Criterion) {
    let (_dir, q) = open();
    let mut g = c.benchmark_group("enqueue");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    let mut i = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("one_per_call", |b| {
        b.iter(|| {
            i += 1;
            q.enqueue(NewJob::new("bench", format!("one:{i}"), &i))
                .unwrap()
        })
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("batch_of_100", |b| {
        b.iter(|| {
            let jobs = (0..100)
                .map(|_| {
                    i += 1;
                    NewJob::new("bench", format!("batch:{i}"), &i)
                })
                .collect();
            q.enqueue_many(jobs).unwrap()
        })
    });
    g.finish();
}

fn process(c: &mut Criterion) {
    let mut g = c.benchmark_group("process");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    const N: usize = 2000;
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("noop_jobs_4_workers", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (_dir, q) = open();
                let jobs = (0..N)
                    .map(|i| NewJob::new("noop", format!("k{i}"), &i))
                    .collect();
                q.enqueue_many(jobs).unwrap();
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
                while done.load(Ordering::Relaxed) < N {
                    std::thread::sleep(Duration::from_micros(200));
                }
                rt.stop();
                total += t0.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// The run of `root` alone, drained: its dependents (when there are) are
/// queued in its commit, and no handler runs them.
fn finish_root(dependents: usize) -> Duration {
    let (_dir, q) = open();
    let mut jobs = vec![NewJob::new("root", "root", &0)];
    jobs.extend(
        (0..dependents)
            .map(|i| NewJob::new("leaf", format!("leaf:{i}"), &i).with_depends_on(["root"])),
    );
    q.enqueue_many(jobs).unwrap();
    let t0 = Instant::now();
    let drained = q
        .runtime()
        .handler("root", |_tx, _p: serde_json::Value| Ok(Outcome::Done))
        .drain()
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(drained.succeeded, 1);
    took
}

fn workflow(c: &mut Criterion) {
    let mut g = c.benchmark_group("workflow");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for dependents in [0, 1000] {
        g.bench_function(format!("finish_a_job_with_{dependents}_dependents"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| finish_root(dependents)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, enqueue, process, workflow);
criterion_main!(benches);
