//! Graceful stop: a short job finishes within the grace period; a job still
//! running after it, and the jobs claimed ahead, are released uncharged,
//! the late handler is fenced off and a new runtime runs them once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{app_table, check_no_open_transaction, enqueue, outcomes, record};
use crate::support::{wait_state, wait_until, TestDb, LONG};

#[test]
fn stop_lets_a_short_job_finish_within_the_grace_period() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let entered = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let e = entered.clone();
    let rt = q
        .runtime()
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                record(tx, "done")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    let id = enqueue(&q, "k", "grace:1");
    wait_until("running", LONG, || entered.load(Ordering::SeqCst));
    let stopper = std::thread::spawn(move || {
        let mut rt = rt;
        rt.stop_with_grace(LONG)
    });
    go_tx.send(()).unwrap();
    let report = stopper.join().unwrap();
    assert_eq!(report.released_jobs, 0, "{report:?}");
    assert_eq!(report.detached_threads, 0);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Succeeded);
    assert_eq!(db.count("SELECT count(*) FROM effects"), 1);
}

#[test]
fn stop_releases_running_and_claimed_ahead_jobs_without_charging_them() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let entered = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let e = entered.clone();
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            q.enqueue(NewJob::new("k", format!("rel:{i}"), &json!({})).with_priority(i))
                .unwrap()
                .id()
        })
        .collect();
    let mut rt = q
        .runtime()
        .workers(1)
        .claim_ahead(2)
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.fetch_add(1, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                record(tx, "late")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    wait_until("one running, two claimed ahead", LONG, || {
        entered.load(Ordering::SeqCst) == 1
            && db.count("SELECT count(*) FROM jobs WHERE state = 'running'") == 3
    });
    let report = rt.stop_with_grace(Duration::from_millis(200));
    assert_eq!(report.released_jobs, 3, "{report:?}");
    assert_eq!(report.detached_threads, 1, "{report:?}");
    for id in &ids {
        let j = q.job(*id).unwrap().unwrap();
        assert_eq!(j.state, JobState::Queued, "{j:?}");
        assert_eq!((j.attempts, j.abandoned), (0, 0), "{j:?}");
        assert!(j.lease_owner.is_none() && j.current_attempt.is_none());
    }
    // The running one is recorded `released`; the claimed-ahead ones never
    // started and have no attempt at all.
    assert_eq!(outcomes(&q, ids[0]), vec![AttemptOutcome::Released]);
    assert!(q.attempts(ids[1]).unwrap().is_empty());
    assert!(q.attempts(ids[2]).unwrap().is_empty());
    // The stuck handler finishes late: fenced off, nothing applied.
    go_tx.send(()).unwrap();
    // Then a new runtime runs all three, each charged once.
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            record(tx, "second life")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    for id in &ids {
        wait_state(&q, *id, JobState::Succeeded);
        assert_eq!(q.job(*id).unwrap().unwrap().attempts, 1);
    }
    rt.stop();
    check_no_open_transaction(&db, &q);
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE note = 'late'"),
        0
    );
    assert_eq!(db.count("SELECT count(*) FROM effects"), 3);
    let a = q.attempts(ids[0]).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[1].attempt, 1);
}
