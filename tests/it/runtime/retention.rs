//! A runtime's own prune (`RuntimeBuilder::retention`): succeeded jobs go
//! once their age is reached while dead and cancelled ones are kept for
//! theirs, a job a dependent still reads stays, the ledger stays unless
//! given an age, and a key delivered again after its job went is still a
//! duplicate.

use std::time::Duration;

use litejob::{HandlerError, JobState, NewJob, Outcome, Retention};
use serde_json::Value;

use crate::backends::{handler, Runtimes, TestBuilder};
use crate::both;
use crate::support::{wait_state, wait_until, LONG};

/// `ok` succeeds, `bad` fails (and dies: no retries); `child` has no
/// handler, so a child stays queued and its dependency is still read.
fn handlers(b: TestBuilder) -> TestBuilder {
    let b = handler(
        b.poll_interval(Duration::from_millis(20)),
        "ok",
        |_, _: Value| Ok(Outcome::Done),
    );
    handler(b, "bad", |_, _: Value| -> Result<Outcome, HandlerError> {
        Err("the provider said no".into())
    })
}

both! {
    fn a_runtime_with_retention_deletes_each_finished_job_at_its_age_and_keeps_the_ledger(q) {
        let queue = q.open();
        let job = |kind: &str, key: &str| NewJob::new(kind, key, &serde_json::json!({}));
        let ids: Vec<i64> = ["ok-1", "ok-2"]
            .iter()
            .map(|k| queue.enqueue(job("ok", k)).unwrap().id())
            .collect();
        let bad = queue.enqueue(job("bad", "bad-1").with_max_retries(0)).unwrap().id();
        let later = queue
            .enqueue(job("ok", "later-1").with_delay(Duration::from_secs(3_600)))
            .unwrap()
            .id();
        queue.admin().cancel_job(later).unwrap();
        let parent = queue.enqueue(job("ok", "parent-1")).unwrap().id();
        queue.enqueue(job("child", "child-1").with_depends_on(["parent-1"])).unwrap();

        let keep = Retention::default()
            .with_succeeded(Duration::from_millis(200))
            .with_every(Duration::from_millis(50));
        let mut rt = handlers(queue.runtime()).retention(keep.clone()).start().unwrap();
        wait_until("the succeeded jobs were deleted", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE idempotency_key IN ('ok-1', 'ok-2')") == 0
        });
        wait_state(&queue, bad, JobState::Dead);
        assert_eq!(rt.stop().detached_threads, 0, "the retention thread stops with the runtime");
        assert_eq!(
            q.count(&format!("SELECT count(*) FROM attempts WHERE job_id IN ({}, {})", ids[0], ids[1])),
            0,
            "their attempts went with them"
        );
        let state = |id: i64| queue.job(id).unwrap().map(|j| j.state);
        assert_eq!(state(bad), Some(JobState::Dead), "a dead job is kept a week");
        assert_eq!(state(later), Some(JobState::Cancelled), "so is a cancelled one");
        assert_eq!(
            state(parent),
            Some(JobState::Succeeded),
            "a succeeded job its queued dependent still reads is kept"
        );
        assert_eq!(
            q.count("SELECT count(*) FROM processed_jobs WHERE key IN ('ok-1', 'ok-2')"),
            2,
            "the ledger is kept"
        );
        assert!(queue.enqueue(job("ok", "ok-1")).unwrap().is_duplicate());

        // Ages of zero for the failed jobs and the ledger: they go too, the
        // parent still stays.
        let keep = keep.with_failed(Duration::ZERO).with_ledger(Some(Duration::ZERO));
        let mut rt = handlers(queue.runtime()).retention(keep).start().unwrap();
        wait_until("the dead and cancelled jobs and the ledger were deleted", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state IN ('dead', 'cancelled')") == 0
                && q.count("SELECT count(*) FROM processed_jobs WHERE key LIKE 'ok-%'") == 0
        });
        rt.stop();
        assert_eq!(state(parent), Some(JobState::Succeeded));
        assert_eq!(
            q.strings("SELECT idempotency_key FROM jobs ORDER BY id"),
            ["parent-1", "child-1"]
        );
    }
}
