//! The ledger transaction: the handler's SQL, the key's ledger row and the
//! completion commit together; a run that fails, with or without writing,
//! and even with its own savepoints left open, leaves neither its SQL nor a
//! ledger row, while the runs committed beside it keep theirs.

use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{app_table, check_no_open_transaction, enqueue, outcomes, record};
use crate::support::{wait_state, TestDb};

#[test]
fn the_handlers_sql_the_ledger_row_and_the_completion_commit_together() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = enqueue(&q, "k", "ledger:1");
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
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'ledger:1'"),
        1
    );
    assert_eq!(
        db.count("SELECT job_id FROM processed_jobs WHERE key = 'ledger:1'"),
        id
    );
    let job = q.job(id).unwrap().unwrap();
    assert_eq!(job.attempts, 1);
    assert!(job.finished_at.is_some() && job.lease_owner.is_none());
    assert_eq!(outcomes(&q, id), vec![AttemptOutcome::Succeeded]);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_run_that_fails_without_writing_leaves_no_ledger_row_and_its_neighbours_commit() {
    // A handler that touches no SQL runs without a savepoint (see
    // execute::apply): a failed run must still take its ledger row back, so
    // the key's work counts as not done, while the runs committed in the
    // same group keep theirs.
    let db = TestDb::new();
    let q = db.open();
    let ids: Vec<(String, i64)> = (0..40)
        .map(|i| {
            let key = match i % 4 {
                0 => format!("fail:{i}"),
                1 => format!("panic:{i}"),
                _ => format!("ok:{i}"),
            };
            let id = q
                .enqueue(NewJob::new("quiet", &key, &json!({})).with_max_retries(0))
                .unwrap()
                .id();
            (key, id)
        })
        .collect();
    let mut rt = q
        .runtime()
        .workers(2)
        .poll_interval(Duration::from_millis(20))
        .handler("quiet", |tx, _: Value| {
            match tx.job().key.split(':').next().unwrap() {
                "fail" => Err("failed before writing anything".into()),
                "panic" => panic!("panicked before writing anything"),
                _ => Ok(Outcome::Done),
            }
        })
        .start()
        .unwrap();
    for (key, id) in &ids {
        let want = if key.starts_with("ok:") {
            JobState::Succeeded
        } else {
            JobState::Dead
        };
        wait_state(&q, *id, want);
    }
    rt.stop();
    let ledger: Vec<String> = db
        .sql()
        .prepare("SELECT key FROM processed_jobs ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut ok: Vec<String> = ids
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| k.starts_with("ok:"))
        .collect();
    ok.sort();
    assert_eq!(ledger, ok);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_failed_runs_writes_are_undone_even_when_the_handler_left_its_own_savepoint_open() {
    // The run's savepoint has a reserved name: a handler's own savepoint,
    // whatever its name, is nested inside it and undone with it.
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let bad = q
        .enqueue(NewJob::new("nested", "nested:fail", &json!({})).with_max_retries(0))
        .unwrap()
        .id();
    let good = enqueue(&q, "nested", "nested:ok");
    let mut rt = q
        .runtime()
        .workers(1)
        .poll_interval(Duration::from_millis(20))
        .handler("nested", |tx, _: Value| {
            record(tx, "before its savepoint")?;
            tx.execute_batch("SAVEPOINT run; SAVEPOINT mine;")?;
            record(tx, "inside its savepoints")?;
            if tx.job().key.ends_with("fail") {
                Err("failed with its savepoints open".into())
            } else {
                Ok(Outcome::Done)
            }
        })
        .start()
        .unwrap();
    wait_state(&q, bad, JobState::Dead);
    wait_state(&q, good, JobState::Succeeded);
    rt.stop();
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'nested:fail'"),
        0
    );
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'nested:ok'"),
        2
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_jobs WHERE key = 'nested:fail'"),
        0
    );
    check_no_open_transaction(&db, &q);
}
