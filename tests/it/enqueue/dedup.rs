//! Dedup at the door: a second enqueue of a key is a duplicate of the same
//! id and counts a delivery, a key in the ledger stays a duplicate after its
//! job is pruned, and racing threads, queues and processes creating the
//! queue together make one job (processes racing on an existing queue:
//! `backends::processes`).

use crate::backends::Runtimes;
use std::sync::Barrier;

use litejob::admin::AnyQueue;
use litejob::{Enqueued, JobState, NewJob, Outcome};
use serde_json::json;

use super::jobs;
use crate::backends::{handler, Engine, TestQueue};
use crate::both;
use crate::support::{bin, wait_state};

/// Runs `f(0)` … `f(n - 1)` on `n` threads released at the same moment;
/// their results in that order.
fn at_once<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|t| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    f(t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

both! {
    /// Even with another payload and options: the key decides, and the
    /// first delivery's job is kept as it was.
    fn a_second_enqueue_is_a_duplicate_of_the_same_id_and_counts_a_delivery(q) {
        let queue = q.open();
        let first = queue
            .enqueue(NewJob::new("mail", "evt_1", &json!({"to": "a"})))
            .unwrap();
        assert!(matches!(first, Enqueued::New(_)), "{first:?}");
        for n in 2..=4 {
            let again = queue
                .enqueue(
                    NewJob::new("mail", "evt_1", &json!({"to": "b"}))
                        .with_priority(-5)
                        .with_queue("other"),
                )
                .unwrap();
            assert_eq!(again, Enqueued::Duplicate(first.id()));
            let job = queue.job(first.id()).unwrap().unwrap();
            assert_eq!((job.deliveries, job.state), (n, JobState::Queued));
            assert_eq!(job.payload, r#"{"to":"a"}"#);
            assert_eq!(job.priority, 0);
            assert_eq!(job.queue, "default");
        }
        assert_eq!(jobs(q), 1);
    }
}

both! {
    /// A job run and pruned: its key's ledger row answers the next enqueue
    /// with the job id it recorded; so does a ledger row written by plain
    /// SQL for a job this queue never had.
    fn a_key_in_the_ledger_is_a_duplicate_even_when_its_job_row_is_gone(q) {
        let queue = q.open();
        let id = queue
            .enqueue(NewJob::new("k", "done:1", &json!({})))
            .unwrap()
            .id();
        let mut rt = handler(queue.runtime(), "k", |_, _: serde_json::Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        // Pruned: the job row and its attempts go, the ledger stays.
        q.exec(&format!("DELETE FROM jobs WHERE id = {id}"));
        assert_eq!(jobs(q), 0);
        let again = queue.enqueue(NewJob::new("k", "done:1", &json!({}))).unwrap();
        assert_eq!(again, Enqueued::Duplicate(id));
        assert_eq!(jobs(q), 0, "a pruned key came back as a new job");
        q.exec("INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('other:1', 1, 4242)");
        let r = queue.enqueue(NewJob::new("k", "other:1", &json!({}))).unwrap();
        assert_eq!(r, Enqueued::Duplicate(4242));
        assert_eq!(jobs(q), 0);
    }
}

both! {
    /// Eight threads enqueue the same 50 keys in the same order at once:
    /// each key is one job, exactly one caller of each learns it is new,
    /// every caller learns its id, and every enqueue counts a delivery.
    fn eight_threads_enqueueing_the_same_keys_make_one_job_each_and_all_learn_its_id(q) {
        let queue = q.open();
        let results: Vec<(String, Enqueued)> = at_once(8, |t| {
            (0..50)
                .map(|i| {
                    let key = format!("race:{i}");
                    let e = queue.enqueue(NewJob::new("k", key.clone(), &json!({ "thread": t })));
                    (key, e.expect("no caller sees an error"))
                })
                .collect::<Vec<_>>()
        })
        .into_iter()
        .flatten()
        .collect();
        for i in 0..50 {
            let key = format!("race:{i}");
            let answers: Vec<Enqueued> =
                results.iter().filter(|(k, _)| *k == key).map(|(_, e)| *e).collect();
            assert_eq!(answers.iter().filter(|e| !e.is_duplicate()).count(), 1, "{key}: {answers:?}");
            let job = queue.job_by_key(&key).unwrap().unwrap();
            assert!(answers.iter().all(|e| e.id() == job.id), "{key}: {answers:?}");
            assert_eq!(job.deliveries, 8, "{key}");
        }
        assert_eq!(jobs(q), 50);
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"), 400);
    }
}

both! {
    /// Producers calling at once share commits (on PostgreSQL their jobs are
    /// inserted together): eight threads, each with keys of its own and
    /// keys shared with all the others, in another order each. Every caller
    /// gets its own job's answer, never a neighbour's: its own keys new with
    /// its own payload, each shared key new for exactly one of them.
    fn concurrent_producers_each_get_their_own_answer_when_their_enqueues_are_combined(q) {
        let queue = q.open();
        let results: Vec<(String, Enqueued)> = at_once(8, |t| {
            let mut out = Vec::new();
            for i in 0..60 {
                let own = format!("own:{t}:{i}");
                let e = queue.enqueue(NewJob::new("k", own.clone(), &json!({ "t": t, "i": i })));
                out.push((own, e.expect("an own key is enqueued")));
                // Shared keys, each thread from another starting point.
                let shared = format!("shared:{}", (i + t * 7) % 60);
                let e = queue.enqueue(NewJob::new("k", shared.clone(), &json!({ "t": t })));
                out.push((shared, e.expect("a shared key is enqueued")));
            }
            out
        })
        .into_iter()
        .flatten()
        .collect();
        for (key, e) in results.iter().filter(|(k, _)| k.starts_with("own:")) {
            let job = queue.job_by_key(key).unwrap().unwrap();
            assert_eq!(*e, Enqueued::New(job.id), "{key}");
            let (t, i) = key["own:".len()..].split_once(':').unwrap();
            let payload: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
            assert_eq!(payload, json!({ "t": t.parse::<i64>().unwrap(), "i": i.parse::<i64>().unwrap() }));
        }
        for i in 0..60 {
            let key = format!("shared:{i}");
            let answers: Vec<Enqueued> =
                results.iter().filter(|(k, _)| *k == key).map(|(_, e)| *e).collect();
            let job = queue.job_by_key(&key).unwrap().unwrap();
            assert_eq!(answers.len(), 8, "{key}");
            assert_eq!(answers.iter().filter(|e| !e.is_duplicate()).count(), 1, "{key}: {answers:?}");
            assert!(answers.iter().all(|e| e.id() == job.id), "{key}: {answers:?}");
            assert_eq!(job.deliveries, 8, "{key}");
        }
        assert_eq!(jobs(q), 8 * 60 + 60);
    }
}

both! {
    /// Separate Queue handles are separate writers (on a file) or pools (on
    /// PostgreSQL): the same situation as separate processes, decided by
    /// the database instead of one handle's channel.
    fn eight_queues_on_one_database_enqueueing_one_key_make_one_job(q) {
        let queues: Vec<AnyQueue> = (0..4).map(|_| q.open()).collect();
        let results: Vec<Enqueued> = at_once(8, |i| {
            queues[i % 4]
                .enqueue(NewJob::new("k", "shared", &json!({})))
                .expect("no caller sees an error")
        });
        assert_eq!(results.iter().filter(|r| !r.is_duplicate()).count(), 1);
        assert!(results.iter().all(|r| r.id() == results[0].id()));
        assert_eq!(jobs(q), 1);
        assert_eq!(q.count("SELECT deliveries FROM jobs"), 8);
    }
}

/// The real binary, `n` copies at once, enqueueing the same key into `q`;
/// returns each copy's (id, duplicate) after asserting it succeeded.
fn enqueue_in_processes(q: &TestQueue, n: usize, key: &str) -> Vec<(i64, bool)> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            std::process::Command::new(bin())
                .arg("--db")
                .arg(&q.location)
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

both! {
    /// Processes that find no queue yet create it together and enqueue the
    /// same key (`litejob enqueue --json`): none of them is refused (on a file, "database is locked": switching a new file to
    /// WAL needs a lock the others' reads can hold for a moment; on
    /// PostgreSQL, two creating the same tables), there is one schema and
    /// one job, and every process learns its id. Several rounds, each on a new queue: the race is narrow.
    fn several_processes_creating_the_queue_at_once_all_succeed(q) {
        let rounds = match q.engine {
            Engine::Sqlite => 40,
            Engine::Postgres => 10,
        };
        for round in 0..rounds {
            let fresh = TestQueue::new(q.engine);
            let runs = enqueue_in_processes(&fresh, 6, "first");
            assert_eq!(
                runs.iter().filter(|r| !r.1).count(),
                1,
                "round {round}: {runs:?}"
            );
            let ids: Vec<i64> = runs.iter().map(|r| r.0).collect();
            assert!(ids.iter().all(|&i| i == ids[0]), "round {round}: {ids:?}");
            assert_eq!(jobs(&fresh), 1, "round {round}");
            assert_eq!(fresh.count("SELECT deliveries FROM jobs"), 6, "round {round}");
            let version = match q.engine {
                Engine::Sqlite => fresh.count("PRAGMA user_version"),
                Engine::Postgres => fresh.count("SELECT max(version) FROM litejob_schema"),
            };
            assert_eq!(version, litejob::admin::SCHEMA_VERSION);
        }
    }
}
