//! The attempt history: one row per run with its job, number, key, worker
//! thread, outcome and times, and an error capped at the stored limit.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, Outcome};
use serde_json::Value;

use super::enqueue;
use crate::backends::handler;
use crate::both;
use crate::support::{now_ms, tiny_backoff, wait_state};

both! {
    /// Each row names the worker the run counted against.
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
            assert!(a.worker.contains("/litejob-worker-"), "{}", a.worker);
            assert_eq!(a.outcome, AttemptOutcome::Failed);
            let f = a.finished_at.unwrap();
            assert!(t0 <= a.started_at && a.started_at <= f && f <= t1);
            let e = a.error.as_deref().unwrap();
            assert!(e.len() <= litejob::__command::MAX_ERROR_BYTES, "{}", e.len());
            assert!(e.starts_with("ééé"));
        }
        let j = queue.job(huge).unwrap().unwrap();
        assert!(j.last_error.unwrap().len() <= litejob::__command::MAX_ERROR_BYTES);
        let a = queue.attempts(fine).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].outcome, AttemptOutcome::Succeeded);
        assert_eq!(a[0].error, None);
    }
}

both! {
    /// With four workers the runs are spread over them, and each attempt
    /// names one: none names an internal thread.
    fn the_attempts_of_a_four_worker_runtime_name_its_workers(q) {
        let queue = q.open();
        let ids: Vec<i64> = (0..40).map(|i| enqueue(&queue, "k", &format!("w:{i}"))).collect();
        let b = queue.runtime().workers(4).claim_ahead(1);
        let mut rt = handler(b, "k", |_, _: Value| {
            std::thread::sleep(Duration::from_millis(2));
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        for id in &ids {
            wait_state(&queue, *id, JobState::Succeeded);
        }
        rt.stop();
        let mut workers = std::collections::BTreeSet::new();
        for id in ids {
            for a in queue.attempts(id).unwrap() {
                assert!(a.worker.contains("/litejob-worker-"), "{}", a.worker);
                workers.insert(a.worker);
            }
        }
        assert!(workers.len() >= 2, "{workers:?}");
    }
}
