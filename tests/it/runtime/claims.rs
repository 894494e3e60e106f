//! What a runtime claims and where it runs it: only the kinds it has
//! handlers for, only the queues it was given; its worker threads are named,
//! the attempt history names them, and stopping twice (or only dropping) is
//! harmless.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::enqueue;
use crate::support::{wait_state, TestDb};

#[test]
fn claims_only_kinds_it_has_handlers_for() {
    let db = TestDb::new();
    let q = db.open();
    // The foreign kind comes first in priority order: a claim that ignored
    // kinds would take it.
    let theirs = q
        .enqueue(NewJob::new("theirs", "t:1", &json!({})).with_priority(-10))
        .unwrap()
        .id();
    let mine: Vec<i64> = (0..5)
        .map(|i| enqueue(&q, "mine", &format!("m:{i}")))
        .collect();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("mine", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    for id in &mine {
        wait_state(&q, *id, JobState::Succeeded);
    }
    rt.stop();
    let j = q.job(theirs).unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued);
    assert_eq!((j.attempts, j.abandoned), (0, 0));
    assert!(j.lease_owner.is_none());
    assert!(q.attempts(theirs).unwrap().is_empty());
}

#[test]
fn a_runtime_limited_to_some_queues_claims_only_their_jobs() {
    let db = TestDb::new();
    let q = db.open();
    // The other queue's job comes first in priority order.
    let other = q
        .enqueue(NewJob::new("k", "other", &json!({})).with_priority(-10))
        .unwrap()
        .id();
    let mine: Vec<i64> = ["mail", "sms"]
        .iter()
        .map(|queue| {
            q.enqueue(NewJob::new("k", *queue, &json!({})).with_queue(*queue))
                .unwrap()
                .id()
        })
        .collect();
    let mut rt = q
        .runtime()
        .queues(["mail", "sms"])
        .poll_interval(Duration::from_millis(20))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    for id in &mine {
        wait_state(&q, *id, JobState::Succeeded);
    }
    rt.stop();
    let j = q.job(other).unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued);
    assert!(q.attempts(other).unwrap().is_empty());
}

#[test]
fn worker_threads_are_named_and_stopping_twice_is_harmless() {
    let db = TestDb::new();
    let q = db.open();
    let names = Arc::new(Mutex::new(HashSet::new()));
    let n = names.clone();
    let mut rt = q
        .runtime()
        .workers(3)
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                n.lock()
                    .unwrap()
                    .insert(std::thread::current().name().unwrap_or("").to_string());
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let ids: Vec<i64> = (0..30)
        .map(|i| enqueue(&q, "k", &format!("n:{i}")))
        .collect();
    for id in &ids {
        wait_state(&q, *id, JobState::Succeeded);
    }
    let first = rt.stop();
    let second = rt.stop();
    assert_eq!(first, second);
    assert_eq!(first.detached_threads, 0);
    drop(rt);
    let names = names.lock().unwrap();
    assert!(!names.is_empty());
    for name in names.iter() {
        let n: usize = name
            .strip_prefix("litejob-worker-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("thread name {name:?}"));
        assert!((1..=3).contains(&n), "{name}");
    }
    // The attempt history names the process and the thread.
    let pid = std::process::id().to_string();
    for id in ids {
        for a in q.attempts(id).unwrap() {
            assert!(a.worker.contains(&pid), "{}", a.worker);
            assert!(a.worker.contains("litejob-worker-"), "{}", a.worker);
        }
    }
    // A runtime stopped before doing anything, and one only dropped.
    let mut idle = q
        .runtime()
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    idle.stop();
    idle.stop();
    let dropped = q
        .runtime()
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    drop(dropped);
}
