//! What a handler's answer does: retry, retry after a delay, discard, an
//! error and a panic, in apply or in prepare, each recorded in the attempt
//! history and retried or made dead as its retries allow; only successful
//! runs commit their SQL, and the workers survive the panics.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{AttemptOutcome, JobState, NewJob, Outcome, Runtime};
use serde_json::{json, Value};

use super::{check_no_open_transaction, enqueue, outcomes};
use crate::backends::{handler, handler_with_prepare};
use crate::both;
use crate::support::{tiny_backoff, wait_state};

/// A runtime whose handler behaves per key prefix.
fn behaving_runtime(q: &AnyQueue, workers: usize) -> Runtime {
    let b = q
        .runtime()
        .workers(workers)
        .poll_interval(Duration::from_millis(20))
        .backoff(tiny_backoff());
    handler(b, "k", |tx, _: Value| {
        let key = tx.job().key.clone();
        let attempt = tx.job().attempt;
        // Written before the outcome: must roll back unless Done.
        tx.record(&format!("attempt {attempt}"))?;
        match key.split(':').next().unwrap() {
            "retry" if attempt == 1 => Ok(Outcome::Retry("not yet".into())),
            "after" if attempt == 1 => Ok(Outcome::RetryAfter(
                Duration::from_millis(30),
                "come back later".into(),
            )),
            "discard" => Ok(Outcome::Discard("never mind".into())),
            "err" => Err("the handler failed".into()),
            "panic" => panic!("the handler panicked on {key}"),
            _ => Ok(Outcome::Done),
        }
    })
    .start()
    .unwrap()
}

both! {
    /// One scenario: every outcome on one runtime, whose workers then go on.
    fn outcomes_retry_retry_after_discard_error_and_panic(q) {
        q.create_app_table();
        let queue = q.open();
        let retry = enqueue(&queue, "k", "retry:1");
        let after = enqueue(&queue, "k", "after:1");
        let after_last = queue
            .enqueue(NewJob::new("k", "after:last", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let discard = queue
            .enqueue(NewJob::new("k", "discard:1", &json!({})).with_max_retries(5))
            .unwrap()
            .id();
        let err = enqueue(&queue, "k", "err:1");
        let panic = enqueue(&queue, "k", "panic:1");
        let more = queue
            .enqueue(NewJob::new("k", "err:more", &json!({})).with_max_retries(3))
            .unwrap()
            .id();
        let mut rt = behaving_runtime(&queue, 2);
        wait_state(&queue, retry, JobState::Succeeded);
        wait_state(&queue, after, JobState::Succeeded);
        wait_state(&queue, after_last, JobState::Dead);
        wait_state(&queue, discard, JobState::Dead);
        wait_state(&queue, err, JobState::Dead);
        wait_state(&queue, panic, JobState::Dead);
        wait_state(&queue, more, JobState::Dead);

        use AttemptOutcome::*;
        assert_eq!(outcomes(&queue, retry), vec![Failed, Succeeded]);
        let a = queue.attempts(retry).unwrap();
        assert_eq!(a[0].error.as_deref(), Some("retry: not yet"));
        assert_eq!((a[0].attempt, a[1].attempt), (1, 2));
        assert_eq!(queue.job(retry).unwrap().unwrap().attempts, 2);
        assert_eq!(outcomes(&queue, after), vec![Failed, Succeeded]);
        assert!(queue.attempts(after).unwrap()[0]
            .error
            .as_deref()
            .unwrap()
            .contains("come back later"));
        // A retry asked for with no retries left: dead, like an error.
        assert_eq!(outcomes(&queue, after_last), vec![Failed]);
        assert_eq!(queue.job(after_last).unwrap().unwrap().attempts, 1);

        let j = queue.job(discard).unwrap().unwrap();
        assert_eq!((j.attempts, j.max_attempts), (1, 6), "discarded at once, whatever the budget");
        assert_eq!(j.last_error.as_deref(), Some("discarded: never mind"));
        assert_eq!(outcomes(&queue, discard), vec![Failed]);

        // max_retries defaults to 1: two attempts, then dead with the error.
        let j = queue.job(err).unwrap().unwrap();
        assert_eq!((j.attempts, j.max_attempts), (2, 2));
        assert_eq!(j.last_error.as_deref(), Some("the handler failed"));
        assert!(j.finished_at.is_some());
        assert_eq!(outcomes(&queue, err), vec![Failed, Failed]);
        assert_eq!(queue.job(more).unwrap().unwrap().attempts, 4);
        assert_eq!(outcomes(&queue, more), vec![Failed; 4]);

        let j = queue.job(panic).unwrap().unwrap();
        assert_eq!(j.attempts, 2);
        assert!(
            j.last_error
                .as_deref()
                .unwrap()
                .contains("the handler panicked on panic:1"),
            "{:?}",
            j.last_error
        );
        assert_eq!(outcomes(&queue, panic), vec![Panicked, Panicked]);

        // Only the successful runs' SQL committed.
        assert_eq!(
            q.strings("SELECT key || ' ' || note FROM app_rows ORDER BY key"),
            ["after:1 attempt 2", "retry:1 attempt 2"]
        );
        // No ledger row for work that did not commit.
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 2);

        // The workers survived the panics: later jobs succeed on the same runtime.
        let later: Vec<i64> = (0..10)
            .map(|i| enqueue(&queue, "k", &format!("ok:{i}")))
            .collect();
        for id in later {
            wait_state(&queue, id, JobState::Succeeded);
        }
        assert_eq!(rt.stop().detached_threads, 0);
        check_no_open_transaction(q, &queue);
    }
}

both! {
    /// A prepare step's panic or error is charged and retried like one in
    /// apply; a payload that does not decode is not retried.
    fn a_panic_or_error_in_prepare_is_recorded_and_retried_like_one_in_apply(q) {
        let queue = q.open();
        let p = enqueue(&queue, "k", "prep:panic");
        let e = enqueue(&queue, "k", "prep:err");
        let bad = queue
            .enqueue(NewJob::new("k", "prep:badpayload", &json!("not an object")))
            .unwrap()
            .id();
        #[derive(serde::Deserialize)]
        struct P {
            key: String,
        }
        let b = queue
            .runtime()
            .workers(1)
            .backoff(tiny_backoff())
            .poll_interval(Duration::from_millis(20));
        let mut rt = handler_with_prepare(
            b,
            "k",
            |_ctx, p: P| {
                if p.key == "prep:panic" {
                    panic!("prepare blew up");
                }
                if p.key == "prep:err" {
                    return Err("prepare failed".into());
                }
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        wait_state(&queue, p, JobState::Dead);
        wait_state(&queue, e, JobState::Dead);
        wait_state(&queue, bad, JobState::Dead);
        use AttemptOutcome::*;
        assert_eq!(outcomes(&queue, p), vec![Panicked, Panicked]);
        assert_eq!(outcomes(&queue, e), vec![Failed, Failed]);
        assert_eq!(outcomes(&queue, bad), vec![Failed]);
        assert!(queue
            .job(bad)
            .unwrap()
            .unwrap()
            .last_error
            .unwrap()
            .contains("decode"));
        let ok = enqueue(&queue, "k", "prep:fine");
        wait_state(&queue, ok, JobState::Succeeded);
        rt.stop();
        check_no_open_transaction(q, &queue);
    }
}
