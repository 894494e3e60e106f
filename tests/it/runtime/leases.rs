//! Leases and fencing: a run that lost its lease cannot complete, nothing of
//! it is applied, another process finishes the job and the lost run is
//! recorded abandoned and not charged. On PostgreSQL a run's job can also
//! be taken over while its transaction is open; that run cannot complete
//! either.

use crate::backends::Runtimes;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{check_no_open_transaction, enqueue};
use crate::backends::{app_handler, handler, handler_with_prepare, Engine, TestQueue};
use crate::both;
use crate::support::{now_ms, wait_state, wait_until, LONG};

both! {
    /// One scenario: a run frozen in its prepare step loses its lease,
    /// another process takes the job over and finishes it, and the frozen
    /// run's completion is refused with nothing of it applied.
    fn a_run_that_lost_its_lease_cannot_complete_and_another_process_finishes_it(q) {
        q.create_app_table();
        let qa = q.open();
        let id = enqueue(&qa, "k", "fence:1");
        let entered = Arc::new(AtomicBool::new(false));
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
        let applied_a = Arc::new(AtomicUsize::new(0));
        let (e, ap) = (entered.clone(), applied_a.clone());
        let b = qa
            .runtime()
            .workers(1)
            .lease(Duration::from_millis(300))
            .poll_interval(Duration::from_millis(20));
        let mut rt_a = handler_with_prepare(
            b,
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
                tx.record("run A")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        wait_until("A is in prepare", LONG, || entered.load(Ordering::SeqCst));
        // On a file, fill A's claim buffer, so that A cannot take the job
        // back itself once its lease is gone: the take-over must come from
        // B. (On PostgreSQL A's one worker is the one stuck.)
        let blocker = (q.engine == Engine::Sqlite).then(|| {
            let blocker = qa
                .enqueue(NewJob::new("k", "blocker", &json!({})).with_priority(-100))
                .unwrap()
                .id();
            wait_until("A claimed the blocker", LONG, || {
                qa.job(blocker).unwrap().unwrap().state == JobState::Running
            });
            blocker
        });
        let first = qa.job(id).unwrap().unwrap();
        let attempt_a = first.current_attempt.expect("A started the run");
        // A's heartbeat renews its lease while it is alive; a process that
        // hangs as a whole (stopped, swapped out) stops renewing. Simulate
        // that: the lease runs out and is no longer A's to renew.
        q.exec(&format!(
            "UPDATE jobs SET lease_expires_at = {}, lease_owner = 'frozen-a' WHERE id = {id}",
            now_ms() - 1
        ));
        // B: another Queue on the same database, as another process would be.
        let qb = q.open();
        let b = qb
            .runtime()
            .lease(Duration::from_millis(300))
            .poll_interval(Duration::from_millis(20));
        let mut rt_b = handler(b, "k", |tx, _: Value| {
            tx.record("run B")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_state(&qb, id, JobState::Succeeded);
        rt_b.stop();
        // A wakes up and tries to complete: refused, nothing of it applied.
        release_tx.send(()).unwrap();
        if let Some(blocker) = blocker {
            wait_state(&qa, blocker, JobState::Succeeded);
        }
        assert_eq!(rt_a.stop_with_grace(LONG).detached_threads, 0);
        assert_eq!(applied_a.load(Ordering::SeqCst), 0);
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE key = 'fence:1'"),
            1
        );
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE key = 'fence:1' AND note = 'run B'"),
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
        check_no_open_transaction(q, &qa);
    }
}

it! {
    /// On PostgreSQL a batch's runs hold their jobs by lease, not by row lock:
    /// a run whose job was taken over while it ran (its lease lapsed, another
    /// process reaped it) cannot complete — the batch's end finds the job no
    /// longer its own, and the transaction, handler writes and ledger row with
    /// it, rolls back; the job's next run does the work, once.
    #[needs(Postgres)]
    fn a_run_whose_job_was_taken_over_cannot_complete_on_postgres() {
        let q = TestQueue::new(Engine::Postgres);
        q.create_app_table();
        let queue = q.open();
        let id = queue
            .enqueue(NewJob::new("work", "taken", &json!({})))
            .unwrap()
            .id();
        let loc = q.location.clone();
        let once = Arc::new(AtomicBool::new(true));
        let mut rt = app_handler(
            q.engine,
            queue.runtime().poll_interval(Duration::from_millis(50)),
            "work",
            move |job, _| {
                if once.swap(false, Ordering::SeqCst) {
                    // The run stalls past its lease, and the reaper takes the job
                    // back meanwhile: the row is no longer fenced on this attempt.
                    let mut c = litejob::pg::Client::connect(&loc, litejob::pg::NoTls).unwrap();
                    let sql = format!("UPDATE jobs SET lease_expires_at = 1 WHERE id = {}", job.id);
                    c.batch_execute(&sql).unwrap();
                    let state = format!("SELECT state FROM jobs WHERE id = {}", job.id);
                    wait_until("reaped", LONG, || {
                        c.query_one(&state, &[]).unwrap().get::<_, String>(0) != "running"
                    });
                    // Renewal must not have saved it: the lease was truly lost.
                }
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows"),
            1,
            "only the second run's work committed"
        );
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 1);
        assert_eq!(
            q.count("SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"),
            1
        );
        assert_eq!(
            q.count("SELECT count(*) FROM attempts WHERE outcome = 'abandoned'"),
            1
        );
    }
}
