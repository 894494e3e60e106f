//! Leases and fencing: a run that lost its lease cannot complete, nothing of
//! it is applied, another process finishes the job and the lost run is
//! recorded abandoned and not charged.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{app_table, check_no_open_transaction, enqueue, record};
use crate::support::{now_ms, wait_state, wait_until, TestDb, LONG};

// Long: one scenario (a frozen lease, a take-over, a refused completion).
#[test]
fn a_run_that_lost_its_lease_cannot_complete_and_another_process_finishes_it() {
    let db = TestDb::new();
    let qa = db.open();
    app_table(&qa);
    let id = enqueue(&qa, "k", "fence:1");
    let entered = Arc::new(AtomicBool::new(false));
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let applied_a = Arc::new(AtomicUsize::new(0));
    let (e, ap) = (entered.clone(), applied_a.clone());
    let mut rt_a = qa
        .runtime()
        .workers(1)
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20))
        .handler_with_prepare(
            "k",
            move |ctx, _: Value| {
                if ctx.key == "fence:1" {
                    e.store(true, Ordering::SeqCst);
                    // Hangs until the test lets it go.
                    let _ = release_rx.recv_timeout(LONG);
                }
                Ok(())
            },
            move |tx, ()| {
                if tx.job().key == "fence:1" {
                    ap.fetch_add(1, Ordering::SeqCst);
                }
                record(tx, "run A")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    wait_until("A is in prepare", LONG, || entered.load(Ordering::SeqCst));
    // Fill A's claim buffer, so that A cannot take the job back itself once
    // its lease is gone: the take-over must come from B.
    let blocker = qa
        .enqueue(NewJob::new("k", "blocker", &json!({})).with_priority(-100))
        .unwrap()
        .id();
    wait_until("A claimed the blocker", LONG, || {
        qa.job(blocker).unwrap().unwrap().state == JobState::Running
    });
    let first = qa.job(id).unwrap().unwrap();
    let attempt_a = first.current_attempt.expect("A started the run");
    // A's heartbeat renews its lease while it is alive; a process that hangs
    // as a whole (stopped, swapped out) stops renewing. Simulate that: the
    // lease runs out and is no longer A's to renew.
    db.sql()
        .execute(
            "UPDATE jobs SET lease_expires_at = ?2, lease_owner = 'frozen-a' WHERE id = ?1",
            (id, now_ms() - 1),
        )
        .unwrap();
    // B: another Queue on the file, as another process would be.
    let qb = db.open();
    let mut rt_b = qb
        .runtime()
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20))
        .handler("k", |tx, _: Value| {
            record(tx, "run B")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&qb, id, JobState::Succeeded);
    rt_b.stop();
    // A wakes up and tries to complete: refused, nothing of it applied.
    release_tx.send(()).unwrap();
    wait_state(&qa, blocker, JobState::Succeeded);
    assert_eq!(rt_a.stop_with_grace(LONG).detached_threads, 0);
    assert_eq!(applied_a.load(Ordering::SeqCst), 0);
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'fence:1'"),
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'fence:1' AND note = 'run B'"),
        1
    );
    let attempts = qa.attempts(id).unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].id, attempt_a);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Abandoned);
    assert!(attempts[0].finished_at.is_some());
    assert_eq!(attempts[1].outcome, AttemptOutcome::Succeeded);
    let j = qa.job(id).unwrap().unwrap();
    assert_eq!(j.state, JobState::Succeeded);
    // The abandoned run was not charged.
    assert_eq!((j.attempts, j.abandoned), (1, 1));
    assert_eq!(attempts[1].attempt, 1);
    check_no_open_transaction(&db, &qa);
}
