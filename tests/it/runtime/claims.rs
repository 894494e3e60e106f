//! What a runtime claims and where it runs it: only the kinds it has
//! handlers for, only the queues it was given; its worker threads are named,
//! the attempt history names them, and stopping twice (or only dropping) is
//! harmless.

use crate::backends::Runtimes;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::enqueue;
use crate::backends::{handler, handler_with_prepare};
use crate::both;
use crate::support::wait_state;

both! {
    /// The foreign kind comes first in priority order: a claim that
    /// ignored kinds would take it.
    fn claims_only_kinds_it_has_handlers_for(q) {
        let queue = q.open();
        let theirs = queue
            .enqueue(NewJob::new("theirs", "t:1", &json!({})).with_priority(-10))
            .unwrap()
            .id();
        let mine: Vec<i64> = (0..5)
            .map(|i| enqueue(&queue, "mine", &format!("m:{i}")))
            .collect();
        let b = queue.runtime().poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "mine", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        for id in &mine {
            wait_state(&queue, *id, JobState::Succeeded);
        }
        rt.stop();
        let j = queue.job(theirs).unwrap().unwrap();
        assert_eq!(j.state, JobState::Queued);
        assert_eq!((j.attempts, j.abandoned), (0, 0));
        assert!(j.lease_owner.is_none());
        assert!(queue.attempts(theirs).unwrap().is_empty());
    }
}

both! {
    /// The other queue's job comes first in priority order.
    fn a_runtime_limited_to_some_queues_claims_only_their_jobs(q) {
        let queue = q.open();
        let other = queue
            .enqueue(NewJob::new("k", "other", &json!({})).with_priority(-10))
            .unwrap()
            .id();
        let mine: Vec<i64> = ["mail", "sms"]
            .iter()
            .map(|name| {
                queue
                    .enqueue(NewJob::new("k", *name, &json!({})).with_queue(*name))
                    .unwrap()
                    .id()
            })
            .collect();
        let b = queue
            .runtime()
            .queues(["mail", "sms"])
            .poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "k", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        for id in &mine {
            wait_state(&queue, *id, JobState::Succeeded);
        }
        rt.stop();
        let j = queue.job(other).unwrap().unwrap();
        assert_eq!(j.state, JobState::Queued);
        assert!(queue.attempts(other).unwrap().is_empty());
    }
}

both! {
    /// Prepare steps run on the named worker threads, which the attempt
    /// history names with the process; a runtime stopped twice reports the
    /// same, and one stopped before doing anything, or only dropped, is fine.
    fn worker_threads_are_named_and_stopping_twice_is_harmless(q) {
        let queue = q.open();
        let names = Arc::new(Mutex::new(HashSet::new()));
        let n = names.clone();
        let mut rt = handler_with_prepare(
            queue.runtime().workers(3),
            "k",
            move |_ctx, _: Value| {
                n.lock()
                    .unwrap()
                    .insert(std::thread::current().name().unwrap_or("").to_string());
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let ids: Vec<i64> = (0..30)
            .map(|i| enqueue(&queue, "k", &format!("n:{i}")))
            .collect();
        for id in &ids {
            wait_state(&queue, *id, JobState::Succeeded);
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
        let pid = std::process::id().to_string();
        for id in ids {
            for a in queue.attempts(id).unwrap() {
                assert!(a.worker.contains(&pid), "{}", a.worker);
                assert!(a.worker.contains("litejob-worker-"), "{}", a.worker);
            }
        }
        let mut idle = handler(queue.runtime(), "k", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        idle.stop();
        idle.stop();
        let dropped = handler(queue.runtime(), "k", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        drop(dropped);
    }
}
