//! The async API on both backends: on one executor thread, many concurrent
//! `enqueue_async` calls get the right New/Duplicate answers while a task
//! on that thread keeps ticking; a dropped future still leaves its job; the
//! async transactional write commits the app's row and its job together or
//! neither.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use litejob::{Enqueued, NewJob};
use serde_json::json;

use super::Engine;
use crate::both;
use crate::support::{wait_until, LONG};

fn one_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

both! {
    /// 400 calls over 100 keys: one New per key, the rest its Duplicates,
    /// and the executor's other task never starved.
    fn concurrent_async_enqueues_answer_right_without_starving_the_executor(q) {
        let queue = q.open();
        let (answers, max_gap) = one_thread().block_on(async {
            let ticking = tokio::spawn(async {
                let (mut last, mut max) = (Instant::now(), Duration::ZERO);
                for _ in 0..200 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    max = max.max(last.elapsed());
                    last = Instant::now();
                }
                max
            });
            let calls: Vec<_> = (0..400)
                .map(|i| {
                    let key = format!("k{}", i % 100);
                    let f = queue.enqueue_async(NewJob::new("mail", key.clone(), &i));
                    async move { (key, f.await.unwrap()) }
                })
                .collect();
            let mut answers = Vec::new();
            for c in calls {
                answers.push(c.await);
            }
            (answers, ticking.await.unwrap())
        });
        assert!(max_gap < Duration::from_millis(200), "the executor was blocked for {max_gap:?}");
        let mut by_key: HashMap<String, Vec<Enqueued>> = HashMap::new();
        for (k, e) in answers {
            by_key.entry(k).or_default().push(e);
        }
        assert_eq!(by_key.len(), 100);
        for (k, es) in &by_key {
            let new: Vec<_> = es.iter().filter(|e| !e.is_duplicate()).collect();
            assert_eq!(new.len(), 1, "{k}: {es:?}");
            assert!(es.iter().all(|e| e.id() == new[0].id()), "{k}: {es:?}");
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 100);
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"), 400);
    }
}

both! {
    /// A future dropped before it completes still leaves exactly one job.
    fn a_dropped_future_still_leaves_its_job(q) {
        let queue = q.open();
        drop(queue.enqueue_async(NewJob::new("mail", "dropped", &json!({}))));
        wait_until("the job", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE idempotency_key = 'dropped'") == 1
        });
        let again = queue.enqueue(NewJob::new("mail", "dropped", &json!({}))).unwrap();
        assert!(again.is_duplicate());
    }
}

both! {
    /// The app's row and its job commit together, or neither.
    fn an_async_write_commits_the_row_and_the_job_together_or_neither(q) {
        q.create_app_table();
        let queue = q.open();
        let rt = one_thread();
        for (key, fail) in [("order-1", false), ("order-2", true)] {
            let r = match q.engine {
                Engine::Sqlite => rt.block_on(queue.write_async(move |tx| {
                    tx.execute("INSERT INTO app_rows (key) VALUES (?1)", [key])?;
                    tx.enqueue(NewJob::new("ship", key, &json!({})))?;
                    if fail {
                        return Err(litejob::Error::InvalidInput("no stock".into()));
                    }
                    Ok(())
                })),
                Engine::Postgres => rt.block_on(queue.pg_write_async(move |tx| {
                    tx.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&key])
                        .map_err(|e| litejob::Error::InvalidInput(e.to_string()))?;
                    tx.enqueue(NewJob::new("ship", key, &json!({})))?;
                    if fail {
                        return Err(litejob::Error::InvalidInput("no stock".into()));
                    }
                    Ok(())
                })),
            };
            assert_eq!(r.is_err(), fail, "{r:?}");
        }
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["order-1"]);
        assert_eq!(q.strings("SELECT idempotency_key FROM jobs"), ["order-1"]);
    }
}
