//! What a handler's answer does: retry, retry after a delay, discard, an
//! error and a panic, in apply or in prepare, each recorded in the attempt
//! history and retried or made dead as its retries allow; only successful
//! runs commit their SQL, and the workers survive the panics.

use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome, Queue, Runtime};
use serde_json::{json, Value};

use super::{app_table, check_no_open_transaction, enqueue, outcomes, record};
use crate::support::{tiny_backoff, wait_state, TestDb};

/// A runtime whose handler behaves per key prefix.
fn behaving_runtime(q: &Queue, workers: usize) -> Runtime {
    q.runtime()
        .workers(workers)
        .poll_interval(Duration::from_millis(20))
        .backoff(tiny_backoff())
        .handler("k", |tx, _: Value| {
            let key = tx.job().key.clone();
            let attempt = tx.job().attempt;
            // Written before the outcome: must roll back unless Done.
            record(tx, &format!("attempt {attempt}"))?;
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

// Long: one scenario, every outcome on one runtime, whose workers then go on.
#[test]
fn outcomes_retry_retry_after_discard_error_and_panic() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let retry = enqueue(&q, "k", "retry:1");
    let after = enqueue(&q, "k", "after:1");
    let discard = q
        .enqueue(NewJob::new("k", "discard:1", &json!({})).with_max_retries(5))
        .unwrap()
        .id();
    let err = enqueue(&q, "k", "err:1");
    let panic = enqueue(&q, "k", "panic:1");
    let more = q
        .enqueue(NewJob::new("k", "err:more", &json!({})).with_max_retries(3))
        .unwrap()
        .id();
    let mut rt = behaving_runtime(&q, 2);
    wait_state(&q, retry, JobState::Succeeded);
    wait_state(&q, after, JobState::Succeeded);
    wait_state(&q, discard, JobState::Dead);
    wait_state(&q, err, JobState::Dead);
    wait_state(&q, panic, JobState::Dead);
    wait_state(&q, more, JobState::Dead);

    use AttemptOutcome::*;
    assert_eq!(outcomes(&q, retry), vec![Failed, Succeeded]);
    let a = q.attempts(retry).unwrap();
    assert_eq!(a[0].error.as_deref(), Some("retry: not yet"));
    assert_eq!((a[0].attempt, a[1].attempt), (1, 2));
    assert_eq!(q.job(retry).unwrap().unwrap().attempts, 2);
    assert_eq!(outcomes(&q, after), vec![Failed, Succeeded]);
    assert!(q.attempts(after).unwrap()[0]
        .error
        .as_deref()
        .unwrap()
        .contains("come back later"));

    let j = q.job(discard).unwrap().unwrap();
    assert_eq!((j.attempts, j.max_attempts), (1, 6));
    assert!(j.last_error.unwrap().contains("never mind"));
    assert_eq!(outcomes(&q, discard), vec![Failed]);

    // max_retries defaults to 1: two attempts, then dead with the error.
    let j = q.job(err).unwrap().unwrap();
    assert_eq!((j.attempts, j.max_attempts), (2, 2));
    assert_eq!(j.last_error.as_deref(), Some("the handler failed"));
    assert!(j.finished_at.is_some());
    assert_eq!(outcomes(&q, err), vec![Failed, Failed]);
    assert_eq!(q.job(more).unwrap().unwrap().attempts, 4);
    assert_eq!(outcomes(&q, more), vec![Failed; 4]);

    let j = q.job(panic).unwrap().unwrap();
    assert_eq!(j.attempts, 2);
    assert!(
        j.last_error
            .as_deref()
            .unwrap()
            .contains("the handler panicked on panic:1"),
        "{:?}",
        j.last_error
    );
    assert_eq!(outcomes(&q, panic), vec![Panicked, Panicked]);

    // Only the successful runs' SQL committed.
    let mut notes: Vec<(String, String)> = db
        .sql()
        .prepare("SELECT key, note FROM effects ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    notes.sort();
    assert_eq!(
        notes,
        vec![
            ("after:1".to_string(), "attempt 2".to_string()),
            ("retry:1".to_string(), "attempt 2".to_string())
        ]
    );
    // No ledger row for work that did not commit.
    assert_eq!(db.count("SELECT count(*) FROM processed_jobs"), 2);

    // The workers survived the panics: later jobs succeed on the same runtime.
    let later: Vec<i64> = (0..10)
        .map(|i| enqueue(&q, "k", &format!("ok:{i}")))
        .collect();
    for id in later {
        wait_state(&q, id, JobState::Succeeded);
    }
    assert_eq!(rt.stop().detached_threads, 0);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_panic_or_error_in_prepare_is_recorded_and_retried_like_one_in_apply() {
    let db = TestDb::new();
    let q = db.open();
    let p = enqueue(&q, "k", "prep:panic");
    let e = enqueue(&q, "k", "prep:err");
    let bad = q
        .enqueue(NewJob::new("k", "prep:badpayload", &json!("not an object")))
        .unwrap()
        .id();
    #[derive(serde::Deserialize)]
    struct P {
        key: String,
    }
    let mut rt = q
        .runtime()
        .workers(1)
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(20))
        .handler_with_prepare(
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
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    wait_state(&q, p, JobState::Dead);
    wait_state(&q, e, JobState::Dead);
    wait_state(&q, bad, JobState::Dead);
    use AttemptOutcome::*;
    assert_eq!(outcomes(&q, p), vec![Panicked, Panicked]);
    assert_eq!(outcomes(&q, e), vec![Failed, Failed]);
    // A payload that cannot decode is not retried.
    assert_eq!(outcomes(&q, bad), vec![Failed]);
    assert!(q
        .job(bad)
        .unwrap()
        .unwrap()
        .last_error
        .unwrap()
        .contains("decode"));
    let ok = enqueue(&q, "k", "prep:fine");
    wait_state(&q, ok, JobState::Succeeded);
    rt.stop();
    check_no_open_transaction(&db, &q);
}
