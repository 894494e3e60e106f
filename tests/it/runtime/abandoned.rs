//! Runs of a process that died: abandoned, not charged, and run again; the
//! third abandoned run (or the configured number) makes a poison pill dead.

use std::time::Duration;

use litejob::{AttemptOutcome, JobState, Outcome};
use serde_json::Value;

use super::{enqueue, outcomes};
use crate::support::{now_ms, wait_state, wait_until, TestDb, LONG};

/// Makes a job look like a dead process was running it: state running, a
/// lease that ran out, an attempt row still `running`.
fn simulate_dead_process_run(db: &TestDb, id: i64, key: &str) {
    let c = db.sql();
    let now = now_ms();
    let tx = c.unchecked_transaction().unwrap();
    tx.execute(
        "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
         SELECT id, attempts + 1, ?2, '999999/litejob-worker-1', ?3 FROM jobs WHERE id = ?1",
        (id, key, now - 10_000),
    )
    .unwrap();
    let attempt = tx.last_insert_rowid();
    tx.execute(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = 'dead-proc', \
         lease_expires_at = ?2, current_attempt = ?3 WHERE id = ?1 AND state = 'queued'",
        (id, now - 1_000, attempt),
    )
    .unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_dead_processs_run_is_abandoned_uncharged_and_the_job_runs_again() {
    let db = TestDb::new();
    let q = db.open();
    let id = enqueue(&q, "k", "crash:1");
    simulate_dead_process_run(&db, id, "crash:1");
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!((j.attempts, j.abandoned), (1, 1));
    let a = q.attempts(id).unwrap();
    assert_eq!(
        a.iter().map(|a| a.outcome).collect::<Vec<_>>(),
        vec![AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]
    );
    assert!(a[0].finished_at.is_some());
    assert!(a[0].error.as_deref().unwrap().contains("abandoned"));
}

/// Reaps `expected` abandoned runs of one job, then checks it is dead.
fn poison(max_abandoned: Option<u32>, expected: i64) {
    let db = TestDb::new();
    let q = db.open();
    let id = enqueue(&q, "pill", "pill:1");
    // A runtime that reaps but has no handler for the pill: every run of it
    // is a "crash" written by the test.
    let mut b = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("other", |_tx, _: Value| Ok(Outcome::Done));
    if let Some(n) = max_abandoned {
        b = b.max_abandoned(n);
    }
    let mut rt = b.start().unwrap();
    for n in 1..=expected {
        simulate_dead_process_run(&db, id, "pill:1");
        wait_until(&format!("abandoned run {n} reaped"), LONG, || {
            let j = q.job(id).unwrap().unwrap();
            j.abandoned == n && j.state != JobState::Running
        });
        let j = q.job(id).unwrap().unwrap();
        assert_eq!(j.attempts, 0, "an abandoned run was charged: {j:?}");
        if n < expected {
            assert_eq!(j.state, JobState::Queued, "{j:?}");
        }
    }
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!(j.state, JobState::Dead, "{j:?}");
    assert_eq!(j.attempts, 0);
    let msg = j.last_error.unwrap();
    assert!(
        msg.contains(&format!("abandoned {expected} times")),
        "{msg}"
    );
    assert!(j.finished_at.is_some() && j.lease_owner.is_none());
    assert_eq!(
        outcomes(&q, id),
        vec![AttemptOutcome::Abandoned; expected as usize]
    );
}

#[test]
fn the_third_abandoned_run_makes_a_poison_pill_dead() {
    poison(None, 3);
}

#[test]
fn max_abandoned_is_configurable() {
    poison(Some(1), 1);
    poison(Some(5), 5);
}
