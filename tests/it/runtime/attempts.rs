//! The attempt history: one row per run with its job, number, key, worker
//! thread, outcome and times, and an error capped at the stored limit.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, Outcome};
use serde_json::Value;

use super::enqueue;
use crate::backends::{handler, Engine};
use crate::both;
use crate::support::{now_ms, tiny_backoff, wait_state};

both! {
    /// The thread a row names is where the run's handler ran: on a file an
    /// apply-only run is started by a claim and runs on the writer thread;
    /// on PostgreSQL on the worker that claimed it.
    fn the_attempt_history_records_each_run_and_caps_huge_errors(q) {
        let queue = q.open();
        let huge = enqueue(&queue, "k", "huge:1");
        let fine = enqueue(&queue, "k", "fine:1");
        let t0 = now_ms() - q.clock_slack_ms();
        let b = queue
            .runtime()
            .backoff(tiny_backoff())
            .poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "k", |tx, _: Value| {
            if tx.job().key == "huge:1" {
                return Err("é".repeat(100_000).into());
            }
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_state(&queue, huge, JobState::Dead);
        wait_state(&queue, fine, JobState::Succeeded);
        rt.stop();
        let t1 = now_ms() + q.clock_slack_ms();
        let pid = std::process::id().to_string();
        let a = queue.attempts(huge).unwrap();
        assert_eq!(a.len(), 2);
        for (i, a) in a.iter().enumerate() {
            assert_eq!(a.job_id, Some(huge));
            assert_eq!(a.outbox_id, None);
            assert_eq!(a.attempt, i as i64 + 1);
            assert_eq!(a.key, "huge:1");
            assert!(a.worker.contains(&pid), "{}", a.worker);
            match q.engine {
                Engine::Sqlite => assert!(a.worker.ends_with("/litejob-writer"), "{}", a.worker),
                Engine::Postgres => assert!(a.worker.contains("/litejob-worker-"), "{}", a.worker),
            }
            assert_eq!(a.outcome, AttemptOutcome::Failed);
            let f = a.finished_at.unwrap();
            assert!(t0 <= a.started_at && a.started_at <= f && f <= t1);
            let e = a.error.as_deref().unwrap();
            assert!(e.len() <= litejob::admin::MAX_ERROR_BYTES, "{}", e.len());
            assert!(e.starts_with("ééé"));
        }
        let j = queue.job(huge).unwrap().unwrap();
        assert!(j.last_error.unwrap().len() <= litejob::admin::MAX_ERROR_BYTES);
        let a = queue.attempts(fine).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].outcome, AttemptOutcome::Succeeded);
        assert_eq!(a[0].error, None);
    }
}
