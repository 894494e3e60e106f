//! Draining in the test's thread on a clock the test moves: what is due
//! runs through the runtime's own transactions and nothing else does;
//! retries, delays, effects and schedules wait for the clock, not for
//! time; the counts name each run's end; the assertions on what was
//! enqueued say what was there instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejob::admin::AnyQueue;
use litejob::testing::{assert_enqueued, refute_enqueued, temp_queue, ManualClock};
use litejob::{Backoff, HandlerError, JobState, NewJob, Outcome, QueueOptions};
use serde_json::{json, Value};

use crate::backends::{Runtimes, TestQueue};
use crate::both;

/// 2030-01-01 10:30:00 UTC: a clock far from the machine's, so a time read
/// from the wrong clock shows.
const START_S: u64 = 1_893_493_800;

fn clock() -> ManualClock {
    ManualClock::new(UNIX_EPOCH + Duration::from_secs(START_S))
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn open(q: &TestQueue, clock: &ManualClock) -> AnyQueue {
    q.open_with(QueueOptions::default().with_clock(clock.clone()))
}

fn enqueue(queue: &AnyQueue, job: NewJob) -> i64 {
    queue.enqueue(job).unwrap().id()
}

both! {
    /// A thousand jobs run in one drain, each through the ledger: every job
    /// succeeded, every key is in the ledger, each handler's row written.
    fn a_drain_runs_every_due_job_through_the_ledger(q) {
        q.create_app_table();
        let c = clock();
        let queue = open(q, &c);
        let jobs = (0..1000)
            .map(|i| NewJob::new("note", format!("n-{i}"), &json!({})))
            .collect();
        queue.enqueue_many(jobs).unwrap();
        let drained = queue
            .runtime()
            .handler("note", |tx, _: Value| {
                tx.record("ran")?;
                Ok(Outcome::Done)
            })
            .drain()
            .unwrap();
        assert_eq!(drained.succeeded, 1000);
        assert_eq!(drained.total(), 1000);
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 1000);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 1000);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1000);
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE finished_at <> created_at"),
            0,
            "the clock did not move: every time stored is the clock's"
        );
        assert_eq!(q.count("SELECT min(created_at) FROM jobs"), ms(c.now()));
    }
}

both! {
    /// A handler that asks to run again in ten minutes runs again only
    /// after the test moves the clock ten minutes, and then at once.
    fn a_retry_after_ten_minutes_runs_once_the_clock_has_moved_ten_minutes(q) {
        let c = clock();
        let queue = open(q, &c);
        let id = enqueue(&queue, NewJob::new("sync", "s-1", &json!({})));
        let runs = Arc::new(AtomicUsize::new(0));
        let drain = || {
            let runs = runs.clone();
            queue
                .runtime()
                .handler("sync", move |_, _: Value| {
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        Ok(Outcome::RetryAfter(Duration::from_secs(600), "busy".into()))
                    } else {
                        Ok(Outcome::Done)
                    }
                })
                .drain()
                .unwrap()
        };
        assert_eq!(drain().retried, 1);
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.run_at, ms(c.now()) + 600_000);
        assert_eq!(drain().total(), 0, "not due yet: nothing runs");
        c.advance(Duration::from_secs(599));
        assert_eq!(drain().total(), 0, "a second early: nothing runs");
        c.advance(Duration::from_secs(1));
        assert_eq!(drain().succeeded, 1);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(job.finished_at, Some(ms(c.now())));
    }
}

both! {
    /// A job delayed an hour runs in the drain after the clock passes the
    /// hour, and its effect is performed in the same drain.
    fn a_delayed_job_and_its_effect_run_when_the_clock_reaches_them(q) {
        let c = clock();
        let queue = open(q, &c);
        let job = NewJob::new("invoice", "inv-1", &json!({"to": "ada"}))
            .with_delay(Duration::from_secs(3600));
        let id = enqueue(&queue, job);
        let sent = Arc::new(AtomicUsize::new(0));
        let drain = || {
            let sent = sent.clone();
            queue
                .runtime()
                .handler("invoice", |tx, p: Value| {
                    tx.outbox("mail", "mail:inv-1", &p)?;
                    Ok(Outcome::Done)
                })
                .effect("mail", move |_, _: Value| {
                    sent.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .drain()
                .unwrap()
        };
        assert_eq!(drain().total(), 0);
        c.advance(Duration::from_secs(3599));
        assert_eq!(drain().total(), 0);
        assert_eq!(sent.load(Ordering::SeqCst), 0);
        c.advance(Duration::from_secs(1));
        let drained = drain();
        assert_eq!((drained.succeeded, drained.effects_sent), (1, 1));
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert_eq!(queue.job(id).unwrap().unwrap().state, JobState::Succeeded);
        assert_eq!(
            q.count("SELECT count(*) FROM outbox WHERE state = 'sent'"),
            1
        );
    }
}

both! {
    /// An hourly schedule fires no slot before the hour; once the clock
    /// passes it, the drain fires the slot and runs its job.
    fn an_hourly_schedule_fires_its_slot_in_the_drain_after_the_clock_passes_it(q) {
        let c = clock();
        let queue = open(q, &c);
        let fired = Arc::new(AtomicUsize::new(0));
        let drain = || {
            let fired = fired.clone();
            queue
                .runtime()
                .schedule("hourly", "0 * * * *", "tick", &json!({}))
                .handler("tick", move |_, _: Value| {
                    fired.fetch_add(1, Ordering::SeqCst);
                    Ok(Outcome::Done)
                })
                .drain()
                .unwrap()
        };
        assert_eq!(drain().total(), 0, "10:30: the next slot is 11:00");
        c.advance(Duration::from_secs(29 * 60));
        assert_eq!(drain().total(), 0, "10:59");
        c.advance(Duration::from_secs(60));
        assert_eq!(drain().succeeded, 1, "11:00");
        assert_eq!(drain().total(), 0, "the 11:00 slot fires once");
        assert_eq!(fired.load(Ordering::SeqCst), 1);
        assert_eq!(
            q.strings("SELECT idempotency_key FROM jobs WHERE kind = 'tick'"),
            vec!["schedule:hourly:2030-01-01T11:00:00Z".to_string()]
        );
    }
}

both! {
    /// Each run's end is counted as what it was: a failure with attempts
    /// left is retried, on its last attempt dead, a discard discarded, a
    /// key the ledger holds a duplicate; an effect that fails is counted
    /// failed.
    fn the_drain_counts_each_end_as_it_was_recorded(q) {
        let c = clock();
        let queue = open(q, &c);
        enqueue(&queue, NewJob::new("fail", "f-1", &json!({})).with_max_retries(1));
        enqueue(&queue, NewJob::new("discard", "d-1", &json!({})));
        let dup = enqueue(&queue, NewJob::new("fine", "dup-1", &json!({})));
        q.exec(&format!(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('dup-1', 1, {dup})"
        ));
        enqueue(&queue, NewJob::new("mails", "m-1", &json!({})));
        let drain = || {
            queue
                .runtime()
                .backoff(Backoff::default().with_base(Duration::from_secs(60)).with_jitter(0.0))
                .effect_backoff(Backoff::default().with_base(Duration::from_secs(60)).with_jitter(0.0))
                .handler("fail", |_, _: Value| Err(HandlerError::from("no")))
                .handler("discard", |_, _: Value| Ok(Outcome::Discard("bad input".into())))
                .handler("fine", |_, _: Value| Ok(Outcome::Done))
                .handler("mails", |tx, _: Value| {
                    tx.outbox("mail", "mail:m-1", &json!({}))?;
                    Ok(Outcome::Done)
                })
                .effect("mail", |_, _: Value| Err(HandlerError::from("smtp down")))
                .drain()
                .unwrap()
        };
        let first = drain();
        assert_eq!(
            (first.retried, first.discarded, first.duplicates, first.succeeded, first.effects_failed),
            (1, 1, 1, 1, 1),
            "{first:?}"
        );
        assert_eq!((first.dead, first.effects_sent), (0, 0));
        c.advance(Duration::from_secs(60));
        let second = drain();
        assert_eq!((second.dead, second.effects_failed, second.total()), (1, 1, 2), "{second:?}");
    }
}

both! {
    /// The assertions pass on a queued job of that kind and key, and when
    /// one fails its message lists what is queued instead.
    fn the_assertions_on_what_was_enqueued_name_what_is_there_instead(q) {
        let c = clock();
        let queue = open(q, &c);
        enqueue(&queue, NewJob::new("email", "welcome-7", &json!({})));
        let msg = |f: &dyn Fn()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            e.downcast_ref::<String>().cloned().unwrap()
        };
        let (missing, present) = match &queue {
            AnyQueue::Sqlite(f) => {
                assert_enqueued(f, "email", "welcome-7");
                refute_enqueued(f, "email", "welcome-8");
                (
                    msg(&|| assert_enqueued(f, "email", "welcome-8")),
                    msg(&|| refute_enqueued(f, "email", "welcome-7")),
                )
            }
            AnyQueue::Postgres(p) => {
                assert_enqueued(p, "email", "welcome-7");
                refute_enqueued(p, "email", "welcome-8");
                (
                    msg(&|| assert_enqueued(p, "email", "welcome-8")),
                    msg(&|| refute_enqueued(p, "email", "welcome-7")),
                )
            }
            _ => unreachable!(),
        };
        assert!(missing.contains("\"welcome-8\""), "{missing}");
        assert!(missing.contains("key \"welcome-7\""), "lists what is queued: {missing}");
        assert!(present.contains("welcome-7"), "{present}");
    }
}

it! {
    /// The helper's queue is a file of its own on a clock standing at the
    /// time it was made, gone with its last handle.
    fn temp_queue_is_a_file_of_its_own_on_a_manual_clock_removed_with_the_queue() {
        let (queue, clock) = temp_queue().unwrap();
        let path = std::path::PathBuf::from(queue.location());
        assert!(path.exists());
        let id = queue
            .enqueue(NewJob::new("k", "a", &json!({})))
            .unwrap()
            .id();
        std::thread::sleep(Duration::from_millis(5));
        let id2 = queue
            .enqueue(NewJob::new("k", "b", &json!({})))
            .unwrap()
            .id();
        let at = |id| queue.job(id).unwrap().unwrap().created_at;
        assert_eq!(at(id), ms(clock.now()));
        assert_eq!(at(id2), ms(clock.now()), "the clock stands still");
        let (other, _) = temp_queue().unwrap();
        assert_ne!(other.location(), queue.location());
        drop(queue);
        assert!(!path.exists(), "{} left behind", path.display());
    }
}
