//! Runs of a process that died: abandoned, not charged, and run again; the
//! third abandoned run (or the configured number) makes a poison pill dead.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, Outcome};
use serde_json::Value;

use super::{enqueue, outcomes};
use crate::backends::{handler, TestQueue};
use crate::both;
use crate::support::{now_ms, wait_state, wait_until, LONG};

/// Makes a job look like a dead process was running it: state running, a
/// lease that ran out, an attempt row still `running`.
fn simulate_dead_process_run(q: &TestQueue, id: i64, key: &str) {
    let now = now_ms();
    q.exec(&format!(
        "BEGIN; \
         INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
         SELECT id, attempts + 1, '{key}', '999999/litejob-worker-1', {started} \
         FROM jobs WHERE id = {id}; \
         UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = 'dead-proc', \
         lease_expires_at = {expired}, \
         current_attempt = (SELECT max(id) FROM attempts WHERE job_id = {id}) \
         WHERE id = {id} AND state = 'queued'; \
         COMMIT",
        started = now - 10_000,
        expired = now - 1_000,
    ));
}

both! {
    /// The reaper records the dead process's run abandoned, gives the job
    /// back uncharged, and its next run does the work once.
    fn a_dead_processs_run_is_abandoned_uncharged_and_the_job_runs_again(q) {
        q.create_app_table();
        let queue = q.open();
        let id = enqueue(&queue, "k", "crash:1");
        simulate_dead_process_run(q, id, "crash:1");
        let mut rt = handler(queue.runtime().poll_interval(Duration::from_millis(20)), "k", |tx, _: Value| {
            tx.record("run")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.attempts, j.abandoned), (1, 1), "the abandoned run was not charged");
        let a = queue.attempts(id).unwrap();
        assert_eq!(
            a.iter().map(|a| a.outcome).collect::<Vec<_>>(),
            vec![AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]
        );
        assert!(a[0].finished_at.is_some());
        assert!(a[0].error.as_deref().unwrap().contains("abandoned"));
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1, "the work committed once");
    }
}

/// Reaps `expected` abandoned runs of one job, then checks it is dead.
fn poison(q: &TestQueue, max_abandoned: Option<u32>, expected: i64) {
    let queue = q.open();
    let key = format!("pill:{expected}");
    let id = enqueue(&queue, "pill", &key);
    // A runtime that reaps but has no handler for the pill: every run of it
    // is a "crash" written by the test.
    let mut b = handler(
        queue.runtime().poll_interval(Duration::from_millis(20)),
        "other",
        |_, _: Value| Ok(Outcome::Done),
    );
    if let Some(n) = max_abandoned {
        b = b.max_abandoned(n);
    }
    let mut rt = b.start().unwrap();
    for n in 1..=expected {
        simulate_dead_process_run(q, id, &key);
        wait_until(&format!("abandoned run {n} reaped"), LONG, || {
            let j = queue.job(id).unwrap().unwrap();
            j.abandoned == n && j.state != JobState::Running
        });
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!(j.attempts, 0, "an abandoned run was charged: {j:?}");
        if n < expected {
            assert_eq!(j.state, JobState::Queued, "{j:?}");
        }
    }
    rt.stop();
    let j = queue.job(id).unwrap().unwrap();
    assert_eq!(j.state, JobState::Dead, "{j:?}");
    assert_eq!(j.attempts, 0);
    let msg = j.last_error.unwrap();
    assert!(
        msg.contains(&format!("abandoned {expected} times")) && msg.contains("poison pill"),
        "{msg}"
    );
    assert!(j.finished_at.is_some() && j.lease_owner.is_none());
    assert_eq!(
        outcomes(&queue, id),
        vec![AttemptOutcome::Abandoned; expected as usize]
    );
}

both! {
    fn the_third_abandoned_run_makes_a_poison_pill_dead(q) {
        poison(q, None, 3);
    }
}

both! {
    fn max_abandoned_is_configurable(q) {
        poison(q, Some(1), 1);
        poison(q, Some(5), 5);
    }
}
