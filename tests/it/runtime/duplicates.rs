//! Work done once per key: a key already in the ledger is recorded
//! `duplicate` and its SQL is not applied; an enqueue of a running job's key
//! only counts a delivery.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use litejob::{AttemptOutcome, Enqueued, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{app_table, enqueue, outcomes, record};
use crate::support::{wait_state, wait_until, TestDb, LONG};

#[test]
fn a_key_already_in_the_ledger_is_recorded_duplicate_and_its_sql_is_not_applied() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = enqueue(&q, "k", "dup:1");
    // Someone (another process, an earlier life of this job) did the work.
    db.sql()
        .execute(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('dup:1', 1, ?1)",
            [id],
        )
        .unwrap();
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            record(tx, "applied")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    assert_eq!(db.count("SELECT count(*) FROM effects"), 0);
    assert_eq!(outcomes(&q, id), vec![AttemptOutcome::Duplicate]);
    assert_eq!(
        db.count("SELECT completed_at FROM processed_jobs WHERE key = 'dup:1'"),
        1
    );
}

#[test]
fn an_enqueue_seen_by_a_running_runtime_is_not_lost_when_it_is_a_duplicate() {
    // A duplicate enqueue while the job is running changes nothing but the
    // delivery count.
    let db = TestDb::new();
    let q = db.open();
    let entered = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let e = entered.clone();
    let mut rt = q
        .runtime()
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let id = enqueue(&q, "k", "running:1");
    wait_until("running", LONG, || entered.load(Ordering::SeqCst));
    assert_eq!(
        q.enqueue(NewJob::new("k", "running:1", &json!({})))
            .unwrap(),
        Enqueued::Duplicate(id)
    );
    go_tx.send(()).unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!((j.deliveries, j.attempts), (2, 1));
}
