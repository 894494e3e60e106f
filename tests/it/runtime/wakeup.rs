//! How a runtime learns of new work: an in-process enqueue (single, batch,
//! in a write or in the application's own transaction) wakes an idle worker
//! without polling, every runtime of a queue is woken, and work written by
//! another connection is found by polling.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::enqueue;
use crate::backends::{handler, Engine, TestQueue};
use crate::both;
use crate::support::{now_ms, wait_state};

/// Enqueues `key` in a transaction of the application's own (`enqueue_in`
/// on a file, `pg_enqueue_in` on PostgreSQL), commits and notifies.
fn enqueue_in_own_transaction(q: &TestQueue, queue: &AnyQueue, key: &str) -> i64 {
    let job = NewJob::new("k", key, &json!({}));
    let id = match q.engine {
        Engine::Sqlite => {
            let mut conn = queue.file().connect().unwrap();
            let t = litejob::sqlite::immediate(&mut conn).unwrap();
            let id = queue.file().enqueue_in(&t, &job).unwrap().id();
            t.commit().unwrap();
            id
        }
        Engine::Postgres => {
            let mut c = litejob::pg::Client::connect(&q.sql_location, litejob::pg::NoTls).unwrap();
            let mut t = c.transaction().unwrap();
            let id = queue.pg().enqueue_in(&mut t, &job).unwrap().id();
            t.commit().unwrap();
            id
        }
    };
    queue.notify();
    id
}

/// A transactional write of the queue's (`write`, `pg_write`) enqueueing
/// `key`.
fn enqueue_in_write(queue: &AnyQueue, key: &'static str) -> i64 {
    let job = NewJob::new("k", key, &json!({}));
    match queue.engine() {
        litejob::admin::EngineKind::Sqlite => {
            queue.file().write(move |tx| Ok(tx.enqueue(job)?.id()))
        }
        litejob::admin::EngineKind::Postgres => {
            queue.pg().write(move |tx| Ok(tx.enqueue(job)?.id()))
        }
    }
    .unwrap()
}

both! {
    /// Polling once an hour: only a wake-up can find the jobs in time.
    fn an_in_process_enqueue_wakes_an_idle_worker_without_polling(q) {
        let queue = q.open();
        let b = queue.runtime().poll_interval(Duration::from_secs(3600));
        let mut rt = handler(b, "k", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        // Let the runtime's first look find nothing, so only a wake-up can
        // find what comes next.
        let warmup = enqueue(&queue, "k", "wake:0");
        wait_state(&queue, warmup, JobState::Succeeded);
        for i in 1..=3 {
            let id = enqueue(&queue, "k", &format!("wake:{i}"));
            wait_state(&queue, id, JobState::Succeeded);
        }
        // Through a batch and a transactional write too.
        let batch = queue
            .enqueue_many(vec![
                NewJob::new("k", "wake:b1", &json!({})),
                NewJob::new("k", "wake:b2", &json!({})),
            ])
            .unwrap();
        let tx = enqueue_in_write(&queue, "wake:tx");
        for id in batch.iter().map(|e| e.id()).chain([tx]) {
            wait_state(&queue, id, JobState::Succeeded);
        }
        // In the app's own transaction, then notify.
        let id = enqueue_in_own_transaction(q, &queue, "wake:own");
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
    }
}

both! {
    /// Plain SQL (an operator, another program) sends no wake-up; another
    /// Queue on the same database (another process's) wakes its own.
    fn work_written_by_another_connection_is_found_by_polling(q) {
        let queue = q.open();
        let b = queue.runtime().poll_interval(Duration::from_millis(30));
        let mut rt = handler(b, "k", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        let now = now_ms();
        q.exec(&format!(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
             VALUES ('k', 'poll:sql', '{{}}', {now}, {now})"
        ));
        let other = q.open();
        let id = enqueue(&other, "k", "poll:other");
        wait_state(&queue, id, JobState::Succeeded);
        let sql_job = queue.job_by_key("poll:sql").unwrap().unwrap();
        wait_state(&queue, sql_job.id, JobState::Succeeded);
        rt.stop();
    }
}

both! {
    /// Regression: the wake-up channel was shared by every runtime of a
    /// queue, so one runtime could swallow the wake meant for the other.
    fn two_runtimes_on_one_queue_are_both_woken_by_an_in_process_enqueue(q) {
        let queue = q.open();
        let start = |kind: &'static str| {
            let b = queue.runtime().poll_interval(Duration::from_secs(3600));
            handler(b, kind, |_, _: Value| Ok(Outcome::Done)).start().unwrap()
        };
        let mut a = start("a");
        let mut b = start("b");
        for i in 0..10 {
            let ida = enqueue(&queue, "a", &format!("two:a{i}"));
            wait_state(&queue, ida, JobState::Succeeded);
            let idb = enqueue(&queue, "b", &format!("two:b{i}"));
            wait_state(&queue, idb, JobState::Succeeded);
        }
        a.stop();
        b.stop();
    }
}
