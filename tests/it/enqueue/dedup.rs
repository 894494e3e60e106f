//! Dedup at the door: a second enqueue of a key is a duplicate of the same
//! id and counts a delivery, a key in the ledger stays a duplicate after its
//! job is pruned, and racing threads, queues and processes (even ones
//! creating the file together) make one job.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use litejob::{Enqueued, JobState, NewJob, Outcome, Queue};
use serde_json::json;

use super::jobs;
use crate::support::{bin, wait_until, TestDb};

#[test]
fn a_second_enqueue_is_a_duplicate_of_the_same_id_and_counts_a_delivery() {
    let db = TestDb::new();
    let q = db.open();
    let first = q
        .enqueue(NewJob::new("mail", "evt_1", &json!({"to": "a"})))
        .unwrap();
    assert!(matches!(first, Enqueued::New(_)), "{first:?}");
    for n in 2..=4 {
        // Even with another payload and options: the key decides.
        let again = q
            .enqueue(
                NewJob::new("mail", "evt_1", &json!({"to": "b"}))
                    .with_priority(-5)
                    .with_queue("other"),
            )
            .unwrap();
        assert_eq!(again, Enqueued::Duplicate(first.id()));
        let job = q.job(first.id()).unwrap().unwrap();
        assert_eq!(job.deliveries, n);
        assert_eq!(job.payload, r#"{"to":"a"}"#);
        assert_eq!(job.priority, 0);
        assert_eq!(job.queue, "default");
    }
    assert_eq!(jobs(&db), 1);
}

#[test]
fn a_key_in_the_ledger_is_a_duplicate_even_when_its_job_row_is_gone() {
    let db = TestDb::new();
    let q = db.open();
    let id = q
        .enqueue(NewJob::new("k", "done:1", &json!({})))
        .unwrap()
        .id();
    let mut rt = q
        .runtime()
        .handler("k", |_tx, _: serde_json::Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    wait_until("job done", Duration::from_secs(20), || {
        q.job(id).unwrap().unwrap().state == JobState::Succeeded
    });
    rt.stop();
    // Pruned: the job row and its attempts go, the ledger stays.
    db.sql()
        .execute("DELETE FROM jobs WHERE id = ?1", [id])
        .unwrap();
    assert_eq!(jobs(&db), 0);
    let again = q.enqueue(NewJob::new("k", "done:1", &json!({}))).unwrap();
    assert_eq!(again, Enqueued::Duplicate(id));
    assert_eq!(jobs(&db), 0, "a pruned key came back as a new job");
    // A ledger row written by someone else (plain SQL), never a job here.
    db.sql()
        .execute_batch(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('other:1', 1, 4242)",
        )
        .unwrap();
    let r = q.enqueue(NewJob::new("k", "other:1", &json!({}))).unwrap();
    assert_eq!(r, Enqueued::Duplicate(4242));
    assert_eq!(jobs(&db), 0);
}

#[test]
fn eight_threads_enqueueing_one_key_make_one_job_and_all_learn_its_id() {
    let db = TestDb::new();
    let q = db.open();
    for round in 0..5 {
        let barrier = Arc::new(Barrier::new(8));
        let key = format!("race:{round}");
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (q, b, key) = (q.clone(), barrier.clone(), key.clone());
                std::thread::spawn(move || {
                    b.wait();
                    q.enqueue(NewJob::new("k", key, &json!({ "thread": i })))
                })
            })
            .collect();
        let results: Vec<Enqueued> = handles
            .into_iter()
            .map(|h| h.join().unwrap().expect("no caller sees an error"))
            .collect();
        let new = results.iter().filter(|r| !r.is_duplicate()).count();
        assert_eq!(new, 1, "{results:?}");
        let id = results[0].id();
        assert!(results.iter().all(|r| r.id() == id), "{results:?}");
        assert_eq!(q.job(id).unwrap().unwrap().deliveries, 8);
    }
    assert_eq!(jobs(&db), 5);
}

#[test]
fn eight_queues_on_one_file_enqueueing_one_key_make_one_job() {
    // Separate Queue handles are separate writers: the same situation as
    // separate processes, decided by SQLite's lock instead of our channel.
    let db = TestDb::new();
    let queues: Vec<Queue> = (0..4).map(|_| db.open()).collect();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (q, b) = (queues[i % 4].clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                q.enqueue(NewJob::new("k", "shared", &json!({})))
            })
        })
        .collect();
    let results: Vec<Enqueued> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("no caller sees an error"))
        .collect();
    assert_eq!(results.iter().filter(|r| !r.is_duplicate()).count(), 1);
    assert!(results.iter().all(|r| r.id() == results[0].id()));
    assert_eq!(jobs(&db), 1);
    assert_eq!(db.count("SELECT deliveries FROM jobs"), 8);
}

/// The real binary, `n` copies at once, enqueueing the same key; returns
/// each copy's (id, duplicate) after asserting it succeeded.
fn enqueue_in_processes(db: &TestDb, n: usize, key: &str) -> Vec<(i64, bool)> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            std::process::Command::new(bin())
                .arg("--db")
                .arg(&db.path)
                .args(["enqueue", "proc", "--key", key, "--json"])
                .env_remove("LITEJOB_DB")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn litejob")
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "status {:?}\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_str(stdout.trim())
                .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
            (
                v["id"].as_i64().expect("id"),
                v["duplicate"].as_bool().expect("duplicate"),
            )
        })
        .collect()
}

/// Several processes: the real binary enqueues the same key in parallel.
#[test]
fn several_processes_enqueueing_one_key_make_one_job() {
    let db = TestDb::new();
    drop(db.open());
    let runs = enqueue_in_processes(&db, 8, "proc:1");
    let ids: Vec<i64> = runs.iter().map(|r| r.0).collect();
    assert_eq!(runs.iter().filter(|r| !r.1).count(), 1, "{runs:?}");
    assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
    assert_eq!(jobs(&db), 1);
    assert_eq!(db.count("SELECT deliveries FROM jobs"), 8);
}

/// Processes that find no file yet create it together: none of them is
/// refused with "database is locked" (switching a new file to WAL needs a
/// lock the others' reads can hold for a moment), and there is one schema
/// and one job. Several rounds, each on a new file: the race is narrow.
#[test]
fn several_processes_creating_the_file_at_once_all_succeed() {
    for round in 0..40 {
        let db = TestDb::new();
        let runs = enqueue_in_processes(&db, 6, "first");
        assert_eq!(
            runs.iter().filter(|r| !r.1).count(),
            1,
            "round {round}: {runs:?}"
        );
        assert_eq!(jobs(&db), 1, "round {round}");
        assert_eq!(db.count("PRAGMA user_version"), litejob::SCHEMA_VERSION);
    }
}
