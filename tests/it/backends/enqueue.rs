//! Dedup at the door on both backends: a key enqueued again creates
//! nothing and counts a delivery; a key whose work committed (its job row
//! pruned) is still a duplicate; a batch is all or nothing; bad input is
//! refused with nothing written.

use std::sync::{Arc, Barrier};

use litejob::{Enqueued, JobState, NewJob};
use serde_json::json;

use crate::both;

both! {
    /// The second enqueue of a key is a duplicate of the first job.
    fn a_key_enqueued_twice_is_one_job_delivered_twice(q) {
        let queue = q.open();
        let a = queue.enqueue(NewJob::new("mail", "evt_1", &json!({"n": 1}))).unwrap();
        let b = queue.enqueue(NewJob::new("mail", "evt_1", &json!({"n": 2}))).unwrap();
        assert!(matches!(a, Enqueued::New(_)), "{a:?}");
        assert_eq!(b, Enqueued::Duplicate(a.id()));
        let job = queue.job(a.id()).unwrap().unwrap();
        assert_eq!((job.deliveries, job.state), (2, JobState::Queued));
        assert_eq!(job.payload, r#"{"n":1}"#, "the first delivery's payload is kept");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
    }
}

both! {
    /// Options are stored as given: queue, priority, delay, retries.
    fn options_are_stored_on_the_job(q) {
        let queue = q.open();
        let before = crate::support::now_ms();
        let id = queue
            .enqueue(
                NewJob::new("mail", "k", &json!({}))
                    .with_queue("slow")
                    .with_priority(-3)
                    .with_delay(std::time::Duration::from_secs(60))
                    .with_max_retries(4),
            )
            .unwrap()
            .id();
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.queue.as_str(), j.priority, j.max_attempts), ("slow", -3, 5));
        assert!(j.run_at >= before + 59_000 && j.run_at <= crate::support::now_ms() + 61_000, "{}", j.run_at);
    }
}

both! {
    /// A key in the ledger whose job row was pruned is still a duplicate,
    /// answered with the job id the ledger recorded.
    fn a_pruned_key_in_the_ledger_is_still_a_duplicate(q) {
        let queue = q.open();
        q.exec("INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('gone', 1, 77)");
        assert_eq!(
            queue.enqueue(NewJob::new("mail", "gone", &json!({}))).unwrap(),
            Enqueued::Duplicate(77)
        );
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
    }
}

both! {
    /// A batch writes every job or none; a key twice in it counts as a
    /// delivery of its first.
    fn a_batch_is_all_or_nothing_and_counts_its_own_duplicates(q) {
        let queue = q.open();
        let mut jobs: Vec<NewJob> = (0..150)
            .map(|i| NewJob::new("mail", format!("b{i}"), &json!({ "i": i })))
            .collect();
        let out = queue.enqueue_many(jobs.clone()).unwrap();
        assert_eq!(out.len(), 150);
        assert!(out.iter().all(|e| !e.is_duplicate()));
        // Again with one new key and one key twice: duplicates counted.
        jobs.push(NewJob::new("mail", "new", &json!({})));
        jobs.push(NewJob::new("mail", "new", &json!({})));
        let again = queue.enqueue_many(jobs).unwrap();
        assert_eq!(again.iter().filter(|e| !e.is_duplicate()).count(), 1);
        assert_eq!(again[150], Enqueued::New(again[150].id()));
        assert_eq!(again[151], Enqueued::Duplicate(again[150].id()));
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 151);
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"), 150 * 2 + 2);
        // One invalid job refuses the whole batch: nothing written.
        let bad = vec![
            NewJob::new("mail", "ok-1", &json!({})),
            NewJob::from_json("mail", "bad", "{not json"),
        ];
        let e = queue.enqueue_many(bad).unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE idempotency_key = 'ok-1'"), 0);
    }
}

both! {
    /// Bad input is refused before anything is written.
    fn bad_input_is_refused_with_nothing_written(q) {
        let queue = q.open_with(litejob::QueueOptions::default().with_max_payload_bytes(100));
        for job in [
            NewJob::new("", "k", &json!({})),
            NewJob::new("mail", " ", &json!({})),
            NewJob::from_json("mail", "k", "{nope"),
            NewJob::new("mail", "k", &json!({ "pad": "x".repeat(200) })),
        ] {
            let e = queue.enqueue(job).unwrap_err();
            assert!(e.is_invalid_input(), "{e}");
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
    }
}

both! {
    /// Eight threads enqueueing the same keys at once create each job once
    /// and count every delivery.
    fn concurrent_producers_of_the_same_keys_create_each_job_once(q) {
        let queue = q.open();
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (queue, barrier) = (queue.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..50)
                        .map(|i| queue.enqueue(NewJob::new("mail", format!("k{i}"), &i)).unwrap())
                        .filter(|e| !e.is_duplicate())
                        .count()
                })
            })
            .collect();
        let new: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(new, 50);
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 50);
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"), 400);
    }
}
