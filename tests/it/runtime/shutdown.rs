//! Graceful stop: a short job finishes within the grace period; a job still
//! running after it, and the jobs claimed with it, are released uncharged,
//! the late handler is fenced off and a new runtime runs them once.

use crate::backends::Runtimes;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{check_no_open_transaction, enqueue, outcomes};
use crate::backends::{handler, handler_with_prepare, Engine};
use crate::both;
use crate::support::{wait_state, wait_until, LONG};

both! {
    /// The stop waits for the running job, which commits.
    fn stop_lets_a_short_job_finish_within_the_grace_period(q) {
        q.create_app_table();
        let queue = q.open();
        let entered = Arc::new(AtomicBool::new(false));
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
        let e = entered.clone();
        let rt = handler_with_prepare(
            queue.runtime(),
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                tx.record("done")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "k", "grace:1");
        wait_until("running", LONG, || entered.load(Ordering::SeqCst));
        let stopper = std::thread::spawn(move || {
            let mut rt = rt;
            rt.stop_with_grace(LONG)
        });
        go_tx.send(()).unwrap();
        let report = stopper.join().unwrap();
        assert_eq!(report.released_jobs, 0, "{report:?}");
        assert_eq!(report.detached_threads, 0);
        assert_eq!(queue.job(id).unwrap().unwrap().state, JobState::Succeeded);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1);
    }
}

both! {
    /// One worker runs the first of three jobs and holds the other two: on
    /// a file claimed ahead (not started: no attempt at all), on PostgreSQL
    /// claimed and started with it in one batch (`claim_ahead` jobs).
    /// The stop releases all three uncharged; the stuck handler, finishing
    /// late, is fenced off.
    fn stop_releases_running_and_claimed_ahead_jobs_without_charging_them(q) {
        q.create_app_table();
        let queue = q.open();
        let entered = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
        let e = entered.clone();
        let ids: Vec<i64> = (0..3)
            .map(|i| {
                queue
                    .enqueue(NewJob::new("k", format!("rel:{i}"), &json!({})).with_priority(i))
                    .unwrap()
                    .id()
            })
            .collect();
        let claim_ahead = match q.engine {
            Engine::Sqlite => 2,
            Engine::Postgres => 3,
        };
        let mut rt = handler_with_prepare(
            queue.runtime().workers(1).claim_ahead(claim_ahead),
            "k",
            move |_ctx, _: Value| {
                e.fetch_add(1, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                tx.record("late")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        wait_until("one running, two claimed with it", LONG, || {
            entered.load(Ordering::SeqCst) == 1
                && q.count("SELECT count(*) FROM jobs WHERE state = 'running'") == 3
        });
        let report = rt.stop_with_grace(Duration::from_millis(200));
        assert_eq!(report.released_jobs, 3, "{report:?}");
        assert_eq!(report.detached_threads, 1, "{report:?}");
        for id in &ids {
            let j = queue.job(*id).unwrap().unwrap();
            assert_eq!(j.state, JobState::Queued, "{j:?}");
            assert_eq!((j.attempts, j.abandoned), (0, 0), "{j:?}");
            assert!(j.lease_owner.is_none() && j.current_attempt.is_none());
        }
        // The running one is recorded `released`; on a file the claimed-ahead
        // ones never started and have no attempt at all, on PostgreSQL they
        // started with it and are released too.
        assert_eq!(outcomes(&queue, ids[0]), vec![AttemptOutcome::Released]);
        for id in &ids[1..] {
            match q.engine {
                Engine::Sqlite => assert!(queue.attempts(*id).unwrap().is_empty()),
                Engine::Postgres => {
                    assert_eq!(outcomes(&queue, *id), vec![AttemptOutcome::Released])
                }
            }
        }
        // The stuck handler finishes late (every prepare step it still
        // holds): fenced off, nothing applied.
        for _ in &ids {
            go_tx.send(()).unwrap();
        }
        // Then a new runtime runs all three, each charged once.
        let mut rt = handler(queue.runtime(), "k", |tx, _: Value| {
            tx.record("second life")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        for id in &ids {
            wait_state(&queue, *id, JobState::Succeeded);
            assert_eq!(queue.job(*id).unwrap().unwrap().attempts, 1);
        }
        rt.stop();
        check_no_open_transaction(q, &queue);
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE note = 'late'"),
            0
        );
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 3);
        let a = queue.attempts(ids[0]).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].attempt, 1);
    }
}
