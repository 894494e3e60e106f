//! A run on both backends: the handler's SQL, the ledger row and the job's
//! completion commit together, once per key; a key already in the ledger
//! runs as a duplicate; failures roll the work back and retry, capped;
//! panics are caught; a lost lease cannot complete; an expired lease is
//! abandoned uncharged, and the third makes a poison pill dead; a stop
//! releases what did not finish.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::json;

use super::{app_handler, done};
use crate::both;
use crate::support::{tiny_backoff, wait_state, wait_until, LONG};

fn outcomes(q: &litejob::Queue, id: i64) -> Vec<AttemptOutcome> {
    q.attempts(id).unwrap().iter().map(|a| a.outcome).collect()
}

both! {
    /// The handler's row, the ledger row and the completion commit together.
    fn a_run_commits_its_sql_with_the_ledger_row_and_the_completion(q) {
        q.create_app_table();
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("work", "evt_1", &json!({}))).unwrap().id();
        let mut rt = app_handler(q.engine, queue.runtime(), "work", done).start().unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows WHERE key = 'evt_1'"), 1);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs WHERE key = 'evt_1'"), 1);
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Succeeded]);
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.attempts, j.lease_owner, j.current_attempt), (1, None, None));
        assert!(j.finished_at.is_some());
    }
}

both! {
    /// A key whose work committed before runs as a duplicate: the handler
    /// does not run, its row is not written again.
    fn a_key_already_in_the_ledger_runs_as_a_duplicate(q) {
        q.create_app_table();
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("work", "evt_2", &json!({}))).unwrap().id();
        q.exec(&format!(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('evt_2', 1, {id})"
        ));
        let mut rt = app_handler(q.engine, queue.runtime(), "work", done).start().unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 0);
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Duplicate]);
    }
}

both! {
    /// A failing run's writes (and its ledger row) are rolled back; it is
    /// retried until its budget is spent, then dead.
    fn failures_roll_back_and_retry_until_the_budget_is_spent(q) {
        q.create_app_table();
        let queue = q.open();
        let id = queue
            .enqueue(NewJob::new("work", "fails", &json!({})).with_max_retries(2))
            .unwrap()
            .id();
        let mut rt = app_handler(q.engine, queue.runtime().backoff(tiny_backoff()), "work", |_, _| {
            Err("smtp 451".into())
        })
        .start()
        .unwrap();
        wait_state(&queue, id, JobState::Dead);
        rt.stop();
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Failed; 3]);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 0);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 0);
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.attempts, j.max_attempts), (3, 3));
        assert_eq!(j.last_error.as_deref(), Some("smtp 451"));
    }
}

both! {
    /// Every outcome a handler can return, and a panic, are recorded as the
    /// closed set says; a panic does not kill the worker.
    fn outcomes_retry_retry_after_discard_and_panic(q) {
        q.create_app_table();
        let queue = q.open();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let retry = queue.enqueue(NewJob::new("retry", "r", &json!({}))).unwrap().id();
        let after = queue.enqueue(NewJob::new("after", "a", &json!({})).with_max_retries(0)).unwrap().id();
        let discard = queue.enqueue(NewJob::new("discard", "d", &json!({}))).unwrap().id();
        let panics = queue.enqueue(NewJob::new("panics", "p", &json!({}))).unwrap().id();
        let b = queue.runtime().backoff(tiny_backoff());
        let b = app_handler(q.engine, b, "retry", move |job, _| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(if job.attempt == 1 { Outcome::Retry("later".into()) } else { Outcome::Done })
        });
        let b = app_handler(q.engine, b, "after", |_, _| {
            Ok(Outcome::RetryAfter(Duration::from_secs(3600), "tomorrow".into()))
        });
        let b = app_handler(q.engine, b, "discard", |_, _| Ok(Outcome::Discard("no such user".into())));
        let b = app_handler(q.engine, b, "panics", |job, _| {
            if job.attempt == 1 {
                panic!("boom");
            }
            Ok(Outcome::Done)
        });
        let mut rt = b.start().unwrap();
        wait_state(&queue, retry, JobState::Succeeded);
        wait_state(&queue, panics, JobState::Succeeded);
        wait_state(&queue, discard, JobState::Dead);
        wait_state(&queue, after, JobState::Dead);
        rt.stop();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(outcomes(&queue, retry), [AttemptOutcome::Failed, AttemptOutcome::Succeeded]);
        assert_eq!(outcomes(&queue, panics), [AttemptOutcome::Panicked, AttemptOutcome::Succeeded]);
        let d = queue.job(discard).unwrap().unwrap();
        assert_eq!(d.last_error.as_deref(), Some("discarded: no such user"));
        assert_eq!(d.attempts, 1, "discarded at once, whatever the budget");
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 2, "only the committed runs' rows");
    }
}

both! {
    /// A run whose lease ran out and was reaped is abandoned, not charged;
    /// the job runs again and its work commits once.
    fn an_expired_lease_is_abandoned_uncharged_and_the_job_runs_again(q) {
        q.create_app_table();
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("work", "slow", &json!({}))).unwrap().id();
        // A run started by a process that died: its lease lapses.
        let now = crate::support::now_ms();
        q.exec(&format!(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
             VALUES ({id}, 1, 'slow', 'gone/1', {now})"
        ));
        q.exec(&format!(
            "UPDATE jobs SET state = 'running', lease_owner = 'dead-process', lease_expires_at = 1, \
             attempts = 1, current_attempt = (SELECT max(id) FROM attempts) WHERE id = {id}"
        ));
        let mut rt = app_handler(q.engine, queue.runtime().poll_interval(Duration::from_millis(50)), "work", done)
            .start()
            .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.attempts, j.abandoned), (1, 1), "the abandoned run was not charged");
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1);
    }
}

both! {
    /// The third abandoned run makes the job dead as a poison pill.
    fn the_third_abandoned_run_makes_a_poison_pill_dead(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("work", "pill", &json!({}))).unwrap().id();
        let now = crate::support::now_ms();
        for _ in 0..3 {
            // A run started and cut short (its process died): expired.
            q.exec(&format!(
                "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
                 VALUES ({id}, 1, 'pill', 'gone/1', {now})"
            ));
            q.exec(&format!(
                "UPDATE jobs SET state = 'running', lease_owner = 'gone', lease_expires_at = 1, \
                 attempts = 1, current_attempt = (SELECT max(id) FROM attempts) WHERE id = {id}"
            ));
            let b = queue.runtime().poll_interval(Duration::from_millis(20));
            let mut rt = b.effect("none", |_, _: serde_json::Value| Ok(())).start().unwrap();
            wait_until("reaped", LONG, || queue.job(id).unwrap().unwrap().state != JobState::Running);
            rt.stop();
        }
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.state, j.abandoned, j.attempts), (JobState::Dead, 3, 0));
        assert!(j.last_error.unwrap().contains("poison pill"));
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Abandoned; 3]);
    }
}

both! {
    /// A stop lets a short run finish and releases a stuck one uncharged.
    fn a_stop_releases_what_did_not_finish_uncharged(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("stuck", "s", &json!({}))).unwrap().id();
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        let b = queue.runtime().grace_period(Duration::from_millis(200));
        let b = match q.engine {
            crate::backends::Engine::Sqlite => b.handler_with_prepare(
                "stuck",
                move |_, _: serde_json::Value| {
                    st.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_secs(2));
                    Ok(())
                },
                |_, ()| Ok(Outcome::Done),
            ),
            crate::backends::Engine::Postgres => b.pg_handler_with_prepare(
                "stuck",
                move |_, _: serde_json::Value| {
                    st.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_secs(2));
                    Ok(())
                },
                |_, ()| Ok(Outcome::Done),
            ),
        };
        let mut rt = b.start().unwrap();
        wait_until("started", LONG, || started.load(Ordering::SeqCst) == 1);
        let report = rt.stop();
        assert_eq!(report.released_jobs, 1, "{report:?}");
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.state, j.attempts), (JobState::Queued, 0));
        assert_eq!(outcomes(&queue, id), [AttemptOutcome::Released]);
    }
}

/// On PostgreSQL a batch's runs hold their jobs by lease, not by row lock:
/// a run whose job was taken over while it ran (its lease lapsed, another
/// process reaped it) cannot complete — the batch's end finds the job no
/// longer its own, and the transaction, handler writes and ledger row with
/// it, rolls back; the job's next run does the work, once.
#[test]
fn a_run_whose_job_was_taken_over_cannot_complete_on_postgres() {
    let Some(q) = crate::backends::TestQueue::new(crate::backends::Engine::Postgres) else {
        return;
    };
    q.create_app_table();
    let queue = q.open();
    let id = queue
        .enqueue(NewJob::new("work", "taken", &json!({})))
        .unwrap()
        .id();
    let loc = q.location.clone();
    let once = Arc::new(std::sync::atomic::AtomicBool::new(true));
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
