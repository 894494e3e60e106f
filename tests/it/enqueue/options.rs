//! A job's options: stored as given (delay, run-at, queue, priority,
//! retries, a kind's default retries), and the smaller priority runs first
//! while future jobs wait.

use crate::backends::Runtimes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejob::{JobState, NewJob, Outcome, QueueOptions};
use serde_json::json;

use crate::backends::handler;
use crate::both;
use crate::support::{now_ms, wait_until};

both! {
    /// Each option lands in its column; the times are read around the
    /// enqueues (on PostgreSQL they are the server's: see `clock_slack_ms`).
    fn options_are_stored_as_given(q) {
        let queue = q.open_with(QueueOptions::default().with_kind_max_retries("fragile", 5));
        let t0 = now_ms() - q.clock_slack_ms();
        let plain = queue
            .enqueue(NewJob::new("k", "opt:plain", &json!({"a": 1})))
            .unwrap()
            .id();
        let delayed = queue
            .enqueue(NewJob::new("k", "opt:delay", &json!({})).with_delay(Duration::from_secs(3600)))
            .unwrap()
            .id();
        let at = SystemTime::now() + Duration::from_secs(86_400);
        let at_ms = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let scheduled = queue
            .enqueue(NewJob::new("k", "opt:at", &json!({})).with_run_at(at))
            .unwrap()
            .id();
        let custom = queue
            .enqueue(
                NewJob::new("k", "opt:custom", &json!({}))
                    .with_queue("mail")
                    .with_priority(-3)
                    .with_max_retries(3),
            )
            .unwrap()
            .id();
        let kind_default = queue
            .enqueue(NewJob::new("fragile", "opt:kind", &json!({})))
            .unwrap()
            .id();
        let kind_overridden = queue
            .enqueue(NewJob::new("fragile", "opt:kind2", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let t1 = now_ms() + q.clock_slack_ms();

        let j = queue.job(plain).unwrap().unwrap();
        assert_eq!(
            (
                j.kind.as_str(),
                j.queue.as_str(),
                j.priority,
                j.max_attempts,
                j.attempts,
                j.deliveries
            ),
            ("k", "default", 0, 2, 0, 1)
        );
        assert_eq!(j.state, JobState::Queued);
        assert_eq!(j.payload, r#"{"a":1}"#);
        assert!(
            j.run_at >= t0 && j.run_at <= t1,
            "{} not in {t0}..{t1}",
            j.run_at
        );
        assert!(j.created_at >= t0 && j.created_at <= t1);

        let j = queue.job(delayed).unwrap().unwrap();
        assert!(j.run_at >= t0 + 3_600_000 && j.run_at <= t1 + 3_600_000);
        let j = queue.job(scheduled).unwrap().unwrap();
        assert_eq!(j.run_at, at_ms);
        let j = queue.job(custom).unwrap().unwrap();
        assert_eq!(
            (j.queue.as_str(), j.priority, j.max_attempts),
            ("mail", -3, 4)
        );
        assert_eq!(queue.job(kind_default).unwrap().unwrap().max_attempts, 6);
        assert_eq!(queue.job(kind_overridden).unwrap().unwrap().max_attempts, 1);
    }
}

both! {
    /// One worker runs the due jobs in priority order (ties by age); a job
    /// due in an hour waits, uncharged.
    fn smaller_priority_runs_first_and_future_jobs_wait(q) {
        let queue = q.open();
        for (key, p) in [
            ("p:5", 5),
            ("p:-1", -1),
            ("p:0a", 0),
            ("p:0b", 0),
            ("p:2", 2),
        ] {
            queue
                .enqueue(NewJob::new("k", key, &json!({})).with_priority(p))
                .unwrap();
        }
        queue
            .enqueue(NewJob::new("k", "later", &json!({})).with_delay(Duration::from_secs(3600)))
            .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let o = order.clone();
        let mut rt = handler(queue.runtime().workers(1), "k", move |tx, _: serde_json::Value| {
            o.lock().unwrap().push(tx.job().key.clone());
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_until("five jobs ran", Duration::from_secs(20), || {
            order.lock().unwrap().len() == 5
        });
        rt.stop();
        assert_eq!(
            *order.lock().unwrap(),
            vec!["p:-1", "p:0a", "p:0b", "p:2", "p:5"]
        );
        let later = queue.job_by_key("later").unwrap().unwrap();
        assert_eq!(later.state, JobState::Queued);
        assert_eq!(later.attempts, 0);
    }
}
