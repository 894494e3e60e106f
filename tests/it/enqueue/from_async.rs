//! Enqueueing from async code: on one executor thread, a thousand
//! concurrent `enqueue_async` calls get the right New/Duplicate answers
//! while another task on that thread keeps running (even while another
//! connection holds the write lock); a dropped future still leaves its job;
//! async and blocking enqueues of the same keys mix on one queue;
//! `write_async` commits the app's row and the job together or neither; bad
//! input resolves to the blocking API's error with nothing written; a write
//! sent before the queue is dropped still commits. On both backends (on
//! PostgreSQL the transactional form is `pg_write_async`).

use crate::backends::Runtimes;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Barrier, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use litejob::{Enqueued, Error, NewJob};
use serde_json::json;

use super::jobs;
use crate::backends::{Engine, TestQueue};
use crate::both;
use crate::support::{wait_until, LONG};

/// Another program holding the write lock: a transaction on a file's
/// connection (`BEGIN IMMEDIATE`), or one on PostgreSQL holding the jobs
/// table against writes; released by [`Holder::release`].
enum Holder {
    Sqlite(rusqlite::Connection),
    Postgres(litejob::pg::Client),
}

fn hold_write_lock(q: &TestQueue) -> Holder {
    match q.engine {
        Engine::Sqlite => {
            let c = rusqlite::Connection::open(&q.location).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            Holder::Sqlite(c)
        }
        Engine::Postgres => {
            let mut c = litejob::pg::Client::connect(&q.sql_location, litejob::pg::NoTls).unwrap();
            c.batch_execute("BEGIN; LOCK TABLE jobs IN EXCLUSIVE MODE")
                .unwrap();
            Holder::Postgres(c)
        }
    }
}

impl Holder {
    fn release(self) {
        match self {
            Holder::Sqlite(c) => c.execute_batch("COMMIT").unwrap(),
            Holder::Postgres(mut c) => c.batch_execute("COMMIT").unwrap(),
        }
    }
}

/// A single-threaded executor: every task of a test shares one thread, so
/// a task that blocks it stops them all.
fn one_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The executor ticker's period, and the longest gap between two ticks the
/// tests accept: generous for a loaded machine, far below the time another
/// connection holds the write lock in the first test.
const TICK: Duration = Duration::from_millis(1);
const MAX_GAP: Duration = Duration::from_millis(200);
const LOCK_HELD: Duration = Duration::from_millis(600);

/// Every answer per key: exactly one `New`, the rest `Duplicate` of the
/// same id, and one id per key.
fn check_answers(answers: &[(String, Enqueued)]) -> HashMap<String, i64> {
    let mut by_key: HashMap<String, Vec<Enqueued>> = HashMap::new();
    for (k, e) in answers {
        by_key.entry(k.clone()).or_default().push(*e);
    }
    let mut ids = HashMap::new();
    for (k, es) in &by_key {
        let new: Vec<_> = es.iter().filter(|e| !e.is_duplicate()).collect();
        assert_eq!(new.len(), 1, "{k}: {es:?}");
        let id = new[0].id();
        assert!(es.iter().all(|e| e.id() == id), "{k}: {es:?}");
        ids.insert(k.clone(), id);
    }
    let mut distinct: Vec<i64> = ids.values().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "two keys share an id");
    ids
}

both! {
    /// Another program holds the write lock as the enqueues start: the
    /// enqueues wait for it, and the executor thread must not.
    fn a_thousand_async_enqueues_on_one_thread_answer_right_while_its_other_tasks_keep_running(q) {
        let queue = q.open();
        let holder = hold_write_lock(q);
        let release = std::thread::spawn(move || {
            std::thread::sleep(LOCK_HELD);
            holder.release();
        });
        const CALLS: usize = 1000;
        const KEYS: usize = 700;
        let (answers, marks, elapsed) = one_thread().block_on(async {
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let ticker = {
                let done = done.clone();
                tokio::spawn(async move {
                    let mut ticks = Vec::new();
                    while !done.load(std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(TICK).await;
                        ticks.push(Instant::now());
                    }
                    ticks
                })
            };
            let t0 = Instant::now();
            let tasks: Vec<_> = (0..CALLS)
                .map(|i| {
                    let key = format!("evt_{}", i % KEYS);
                    let job = NewJob::new("webhook", key.clone(), &json!({ "call": i }));
                    let fut = queue.enqueue_async(job);
                    tokio::spawn(async move { (key, fut.await) })
                })
                .collect();
            let mut answers = Vec::with_capacity(CALLS);
            for t in tasks {
                let (key, r) = t.await.unwrap();
                answers.push((key, r.unwrap()));
            }
            let t1 = Instant::now();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let ticks = ticker.await.unwrap();
            // From the first call to the last answer, edges included.
            let mut marks = vec![t0];
            marks.extend(ticks.into_iter().filter(|t| *t > t0 && *t < t1));
            marks.push(t1);
            (answers, marks, t1 - t0)
        });
        release.join().unwrap();
        // The enqueues waited for the lock, so the ticker ran all that time.
        assert!(
            elapsed >= LOCK_HELD / 2,
            "answered in {elapsed:?}, before the lock was released"
        );
        let max_gap = marks.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(
            max_gap < MAX_GAP,
            "the executor thread was blocked for {max_gap:?} ({} ticks in {elapsed:?})",
            marks.len() - 2
        );
        let ids = check_answers(&answers);
        assert_eq!(ids.len(), KEYS);
        assert_eq!(jobs(q), KEYS as i64);
        assert_eq!(
            q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"),
            CALLS as i64,
            "a delivery per call"
        );
        for (k, id) in ids.iter().take(20) {
            assert_eq!(queue.job_by_key(k).unwrap().unwrap().id, *id);
        }
    }
}

both! {
    /// Another connection holds the write lock: no answer can come before
    /// the futures are dropped, never polled, polled once (a request
    /// cancelled) or a batch's; each still leaves exactly one job.
    fn a_future_dropped_before_its_answer_still_leaves_exactly_one_job(q) {
        let queue = q.open();
        let holder = hold_write_lock(q);
        // Never polled.
        drop(queue.enqueue_async(NewJob::new("webhook", "evt_dropped", &json!({}))));
        // Polled once, then dropped while it waits (a request cancelled).
        one_thread().block_on(async {
            let mut fut = queue.enqueue_async(NewJob::new("webhook", "evt_cancelled", &json!({})));
            let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut fut).poll(cx))).await;
            assert!(first.is_pending(), "answered under the lock: {first:?}");
        });
        // A batch, dropped too.
        drop(queue.enqueue_many_async(vec![
            NewJob::new("webhook", "batch:1", &json!({})),
            NewJob::new("webhook", "batch:2", &json!({})),
        ]));
        holder.release();
        for key in ["evt_dropped", "evt_cancelled"] {
            wait_until(&format!("{key} committed"), LONG, || {
                queue.job_by_key(key).unwrap().is_some()
            });
            let id = queue.job_by_key(key).unwrap().unwrap().id;
            // Enqueueing again is how the caller learns its id.
            let again = one_thread()
                .block_on(queue.enqueue_async(NewJob::new("webhook", key, &json!({}))))
                .unwrap();
            assert_eq!(again, Enqueued::Duplicate(id), "{key}");
            assert_eq!(
                q.count(&format!(
                    "SELECT count(*) FROM jobs WHERE idempotency_key = '{key}'"
                )),
                1
            );
        }
        wait_until("the dropped batch committed", LONG, || {
            queue.job_by_key("batch:2").unwrap().is_some()
        });
        assert!(queue.job_by_key("batch:1").unwrap().is_some());
        assert_eq!(jobs(q), 4);
    }
}

both! {
    /// Threads enqueueing one by one and tasks on one executor thread
    /// (singles and batches) go through the same keys at once.
    fn async_and_blocking_enqueues_of_the_same_keys_make_one_job_per_key(q) {
        let queue = q.open();
        const KEYS: usize = 200;
        const THREADS: usize = 4;
        let key = |i: usize| format!("order:{i}");
        let answers = Arc::new(Mutex::new(Vec::new()));
        let start = Arc::new(Barrier::new(THREADS + 1));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (queue, answers, start) = (queue.clone(), answers.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    // Each thread goes through the keys from its own offset.
                    for n in 0..KEYS {
                        let k = key((n + t * 50) % KEYS);
                        let e = queue
                            .enqueue(NewJob::new("ship", k.clone(), &json!({})))
                            .unwrap();
                        answers.lock().unwrap().push((k, e));
                    }
                })
            })
            .collect();
        let from_tasks = one_thread().block_on(async {
            start.wait();
            let singles: Vec<_> = (0..KEYS)
                .map(|i| {
                    let k = key(KEYS - 1 - i);
                    let fut = queue.enqueue_async(NewJob::new("ship", k.clone(), &json!({})));
                    tokio::spawn(async move { vec![(k, fut.await.unwrap())] })
                })
                .collect();
            let batches: Vec<_> = (0..KEYS / 10)
                .map(|b| {
                    let ks: Vec<String> = (b * 10..b * 10 + 10).map(key).collect();
                    let fut = queue.enqueue_many_async(
                        ks.iter()
                            .map(|k| NewJob::new("ship", k.clone(), &json!({})))
                            .collect(),
                    );
                    tokio::spawn(async move { ks.into_iter().zip(fut.await.unwrap()).collect() })
                })
                .collect();
            let mut all = Vec::new();
            for t in singles.into_iter().chain(batches) {
                all.extend(t.await.unwrap());
            }
            all
        });
        for t in threads {
            t.join().unwrap();
        }
        let mut answers = std::mem::take(&mut *answers.lock().unwrap());
        answers.extend(from_tasks);
        assert_eq!(answers.len(), KEYS * (THREADS + 2));
        let ids = check_answers(&answers);
        assert_eq!(ids.len(), KEYS);
        assert_eq!(jobs(q), KEYS as i64);
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE deliveries = 6"),
            KEYS as i64,
            "every enqueue counted as a delivery of its key's job"
        );
    }
}

/// `write_async` on a file, `pg_write_async` on PostgreSQL: `f`'s row in
/// `app_rows` (the SQL is the engine's own) and its enqueues.
fn write_async(
    queue: &litejob::admin::AnyQueue,
    row: &'static str,
    f: impl FnOnce(&mut dyn FnMut(NewJob) -> litejob::Result<Enqueued>) -> litejob::Result<i64>
        + Send
        + 'static,
) -> litejob::WriteFuture<i64> {
    match queue.engine() {
        litejob::admin::EngineKind::Sqlite => queue.file().write_async(move |tx| {
            tx.execute("INSERT INTO app_rows (key) VALUES (?1)", [row])?;
            f(&mut |job| tx.enqueue(job))
        }),
        litejob::admin::EngineKind::Postgres => queue.pg().write_async(move |tx| {
            tx.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&row])
                .map_err(Error::Postgres)?;
            f(&mut |job| tx.enqueue(job))
        }),
    }
}

both! {
    /// Answered after the commit: the app's row and the job are both there
    /// for any reader, or neither when the closure fails (its own error, or
    /// an invalid enqueue propagated with `?`).
    fn write_async_commits_the_app_row_and_the_job_together_or_neither(q) {
        q.create_app_table();
        let queue = q.open();
        let rt = one_thread();
        let id = rt
            .block_on(write_async(&queue, "first", |enqueue| {
                Ok(enqueue(NewJob::new("ship", "order:1", &json!({"order": 1})))?.id())
            }))
            .unwrap();
        assert!(queue.job(id).unwrap().is_some());
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);

        let err = rt
            .block_on(write_async(&queue, "second", |enqueue| {
                enqueue(NewJob::new("ship", "order:2", &json!({"order": 2})))?;
                Err(Error::InvalidInput("the app changed its mind".into()))
            }))
            .unwrap_err();
        assert!(err.to_string().contains("changed its mind"), "{err}");
        assert!(queue.job_by_key("order:2").unwrap().is_none());
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);

        let err = rt
            .block_on(write_async(&queue, "third", |enqueue| {
                enqueue(NewJob::new("ship", " ", &json!({})))?;
                Ok(0)
            }))
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);
        assert_eq!(jobs(q), 1);
    }
}

both! {
    /// Bad input resolves to the blocking API's error, the batch's naming
    /// the bad job, with nothing written.
    fn bad_input_to_an_async_enqueue_is_the_blocking_error_with_nothing_written(q) {
        let queue = q.open();
        let rt = one_thread();
        let bad = || NewJob::from_json("webhook", "evt_1", "{not json");
        let async_err = rt.block_on(queue.enqueue_async(bad())).unwrap_err();
        let blocking_err = queue.enqueue(bad()).unwrap_err();
        assert!(async_err.is_invalid_input(), "{async_err:?}");
        assert_eq!(async_err.to_string(), blocking_err.to_string());
        let empty_key = rt
            .block_on(queue.enqueue_async(NewJob::new("webhook", "", &json!({}))))
            .unwrap_err();
        assert!(empty_key.is_invalid_input(), "{empty_key:?}");
        // One bad job refuses the batch, and the message names it.
        let batch = || {
            vec![
                NewJob::new("webhook", "evt_2", &json!({})),
                NewJob::from_json("webhook", "evt_3", "[1,"),
            ]
        };
        let async_err = rt.block_on(queue.enqueue_many_async(batch())).unwrap_err();
        assert!(async_err.is_invalid_input(), "{async_err:?}");
        assert_eq!(
            async_err.to_string(),
            queue.enqueue_many(batch()).unwrap_err().to_string()
        );
        assert!(async_err.to_string().contains("evt_3"), "{async_err}");
        assert_eq!(jobs(q), 0);
    }
}

both! {
    /// The queue's writer (a file's) or its async threads (PostgreSQL's)
    /// stop when its last handle goes, after finishing what was sent to
    /// them.
    fn a_write_sent_before_the_last_handle_is_dropped_still_commits_and_answers(q) {
        let queue = q.open();
        let fut = queue.enqueue_async(NewJob::new("webhook", "evt_last", &json!({})));
        drop(queue);
        let e = one_thread().block_on(fut).unwrap();
        assert!(!e.is_duplicate(), "{e:?}");
        let queue = q.open();
        assert_eq!(queue.job_by_key("evt_last").unwrap().unwrap().id, e.id());
    }
}
