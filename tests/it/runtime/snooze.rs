//! A handler that snoozes (`Outcome::Snooze`): its work is rolled back, the
//! job runs again after the snooze without using an attempt, the run is
//! recorded `snoozed` and `explain` counts it; past the cap a snooze is
//! charged as a failed attempt. On a clock the test moves.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use litejob::testing::ManualClock;
use litejob::{AttemptOutcome, JobState, NewJob, Outcome, QueueOptions};
use serde_json::{json, Value};

use super::outcomes;
use crate::backends::Runtimes;
use crate::both;
use crate::support::litejob_ok;

both! {
    /// With no retry allowed, a job snoozes twice and still succeeds: each
    /// snooze gave its attempt back, its writes were rolled back, and it
    /// ran again only once the clock passed the snooze.
    fn a_snooze_runs_the_job_again_later_without_using_an_attempt(q) {
        q.create_app_table();
        let c = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_893_493_800));
        let queue = q.open_with(QueueOptions::default().with_clock(c.clone()));
        let id = queue
            .enqueue(NewJob::new("report", "report:1", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let runs = Arc::new(AtomicUsize::new(0));
        let drain = || {
            let runs = runs.clone();
            queue
                .runtime()
                .handler("report", move |tx, _: Value| {
                    tx.record("ran")?;
                    Ok(if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                        Outcome::Snooze(Duration::from_secs(600))
                    } else {
                        Outcome::Done
                    })
                })
                .drain()
                .unwrap()
        };
        let first = drain();
        assert_eq!((first.snoozed, first.retried, first.dead), (1, 0, 0));
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.attempts, 0, "the snooze gave its attempt back");
        assert_eq!(job.run_at, c.now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64 + 600_000);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 0, "a snoozed run's writes roll back");
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 0);

        let text = litejob_ok(Path::new(&q.location), &["explain", "report:1"], 0);
        assert!(text.contains("run once (1 snoozed), snoozed: runs again in"), "{text}");

        c.advance(Duration::from_secs(599));
        assert_eq!(drain().total(), 0, "not before the snooze is over");
        c.advance(Duration::from_secs(1));
        assert_eq!(drain().snoozed, 1);
        c.advance(Duration::from_secs(600));
        assert_eq!(drain().succeeded, 1);

        use AttemptOutcome::*;
        assert_eq!(outcomes(&queue, id), vec![Snoozed, Snoozed, Succeeded]);
        let attempts = queue.attempts(id).unwrap();
        assert!(attempts.iter().all(|a| a.attempt == 1), "{attempts:?}");
        assert_eq!(attempts[0].error.as_deref(), Some("snoozed for 10m"));
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.attempts, job.max_attempts), (JobState::Succeeded, 1, 1));
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1);
        let text = litejob_ok(Path::new(&q.location), &["explain", "report:1"], 0);
        assert!(text.contains("run 3 times (2 snoozed, 1 succeeded)"), "{text}");
        let v: Value = serde_json::from_str(&litejob_ok(
            Path::new(&q.location),
            &["explain", "report:1", "--json"],
            0,
        ))
        .unwrap();
        assert_eq!(v["attempts"][0]["outcome"], "snoozed", "{v}");
    }
}

both! {
    /// A job that is never ready snoozes as often as a job may, then the
    /// next snooze is charged: with no retry left it is dead, saying why.
    fn a_job_that_snoozes_past_the_cap_is_charged_and_ends_by_its_retry_rules(q) {
        let c = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_893_493_800));
        let queue = q.open_with(QueueOptions::default().with_clock(c.clone()));
        let id = queue
            .enqueue(NewJob::new("poll", "poll:1", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let mut snoozed = 0;
        for _ in 0..=Outcome::MAX_SNOOZES {
            let d = queue
                .runtime()
                .handler("poll", |_, _: Value| Ok(Outcome::Snooze(Duration::from_secs(1))))
                .drain()
                .unwrap();
            snoozed += d.snoozed;
            c.advance(Duration::from_secs(1));
        }
        assert_eq!(snoozed as i64, Outcome::MAX_SNOOZES);
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Dead, 1));
        let error = job.last_error.unwrap();
        assert!(error.contains("snoozed 100 times, the most a job may"), "{error}");
        let all = outcomes(&queue, id);
        assert_eq!(all.len() as i64, Outcome::MAX_SNOOZES + 1);
        assert_eq!(all.last(), Some(&AttemptOutcome::Failed));
    }
}
