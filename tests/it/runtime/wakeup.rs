//! How a runtime learns of new work: an in-process enqueue (single, batch,
//! in a write or in the application's own transaction) wakes an idle worker
//! without polling, every runtime of a queue is woken, and work written by
//! another connection is found by polling.

use std::time::Duration;

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::enqueue;
use crate::support::{now_ms, wait_state, TestDb};

#[test]
fn an_in_process_enqueue_wakes_an_idle_worker_without_polling() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_secs(3600))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    // Let the runtime's first look find nothing, so only a wake-up can find
    // what comes next.
    let warmup = enqueue(&q, "k", "wake:0");
    wait_state(&q, warmup, JobState::Succeeded);
    for i in 1..=3 {
        let id = enqueue(&q, "k", &format!("wake:{i}"));
        wait_state(&q, id, JobState::Succeeded);
    }
    // Through a batch and a transactional write too.
    let batch = q
        .enqueue_many(vec![
            NewJob::new("k", "wake:b1", &json!({})),
            NewJob::new("k", "wake:b2", &json!({})),
        ])
        .unwrap();
    let tx = q
        .write(|tx| Ok(tx.enqueue(NewJob::new("k", "wake:tx", &json!({})))?.id()))
        .unwrap();
    for id in batch.iter().map(|e| e.id()).chain([tx]) {
        wait_state(&q, id, JobState::Succeeded);
    }
    // enqueue_in in the app's own transaction, then notify.
    let mut conn = q.connect().unwrap();
    let t = litejob::immediate(&mut conn).unwrap();
    let id = q
        .enqueue_in(&t, &NewJob::new("k", "wake:own", &json!({})))
        .unwrap()
        .id();
    t.commit().unwrap();
    q.notify();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
}

#[test]
fn work_written_by_another_connection_is_found_by_polling() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(30))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    // Plain SQL, as an operator or another program would.
    let now = now_ms();
    db.sql()
        .execute(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
             VALUES ('k', 'poll:sql', '{}', ?1, ?1)",
            [now],
        )
        .unwrap();
    // Another Queue on the file: another process's writer and wake channel.
    let other = db.open();
    let id = enqueue(&other, "k", "poll:other");
    wait_state(&q, id, JobState::Succeeded);
    let sql_job = q.job_by_key("poll:sql").unwrap().unwrap();
    wait_state(&q, sql_job.id, JobState::Succeeded);
    rt.stop();
}

#[test]
fn two_runtimes_on_one_queue_are_both_woken_by_an_in_process_enqueue() {
    // Regression: the wake-up channel was shared by every runtime of a
    // queue, so one runtime could swallow the wake meant for the other.
    let db = TestDb::new();
    let q = db.open();
    let start = |kind: &'static str| {
        q.runtime()
            .poll_interval(Duration::from_secs(3600))
            .handler(kind, |_tx, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap()
    };
    let mut a = start("a");
    let mut b = start("b");
    for i in 0..10 {
        let ida = enqueue(&q, "a", &format!("two:a{i}"));
        wait_state(&q, ida, JobState::Succeeded);
        let idb = enqueue(&q, "b", &format!("two:b{i}"));
        wait_state(&q, idb, JobState::Succeeded);
    }
    a.stop();
    b.stop();
}
