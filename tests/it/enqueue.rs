//! The producer: dedup at the door (threads and processes), options
//! stored right, batches and transactional enqueue all-or-nothing, bad input
//! refused with nothing written.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejob::{Enqueued, Error, JobState, NewJob, Outcome, Queue, QueueOptions};
use proptest::prelude::*;
use serde_json::json;

use crate::support::{bin, now_ms, wait_until, TestDb};

fn jobs(db: &TestDb) -> i64 {
    db.count("SELECT count(*) FROM jobs")
}

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

#[test]
fn options_are_stored_as_given() {
    let db = TestDb::new();
    let q = db.open_with(QueueOptions::default().with_kind_max_retries("fragile", 5));
    let t0 = now_ms();
    let plain = q
        .enqueue(NewJob::new("k", "opt:plain", &json!({"a": 1})))
        .unwrap()
        .id();
    let delayed = q
        .enqueue(NewJob::new("k", "opt:delay", &json!({})).with_delay(Duration::from_secs(3600)))
        .unwrap()
        .id();
    let at = SystemTime::now() + Duration::from_secs(86_400);
    let at_ms = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let scheduled = q
        .enqueue(NewJob::new("k", "opt:at", &json!({})).with_run_at(at))
        .unwrap()
        .id();
    let custom = q
        .enqueue(
            NewJob::new("k", "opt:custom", &json!({}))
                .with_queue("mail")
                .with_priority(-3)
                .with_max_retries(3),
        )
        .unwrap()
        .id();
    let kind_default = q
        .enqueue(NewJob::new("fragile", "opt:kind", &json!({})))
        .unwrap()
        .id();
    let kind_overridden = q
        .enqueue(NewJob::new("fragile", "opt:kind2", &json!({})).with_max_retries(0))
        .unwrap()
        .id();
    let t1 = now_ms();

    let j = q.job(plain).unwrap().unwrap();
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

    let j = q.job(delayed).unwrap().unwrap();
    assert!(j.run_at >= t0 + 3_600_000 && j.run_at <= t1 + 3_600_000);
    let j = q.job(scheduled).unwrap().unwrap();
    assert_eq!(j.run_at, at_ms);
    let j = q.job(custom).unwrap().unwrap();
    assert_eq!(
        (j.queue.as_str(), j.priority, j.max_attempts),
        ("mail", -3, 4)
    );
    assert_eq!(q.job(kind_default).unwrap().unwrap().max_attempts, 6);
    assert_eq!(q.job(kind_overridden).unwrap().unwrap().max_attempts, 1);
}

#[test]
fn smaller_priority_runs_first_and_future_jobs_wait() {
    let db = TestDb::new();
    let q = db.open();
    for (key, p) in [
        ("p:5", 5),
        ("p:-1", -1),
        ("p:0a", 0),
        ("p:0b", 0),
        ("p:2", 2),
    ] {
        q.enqueue(NewJob::new("k", key, &json!({})).with_priority(p))
            .unwrap();
    }
    q.enqueue(NewJob::new("k", "later", &json!({})).with_delay(Duration::from_secs(3600)))
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let mut rt = q
        .runtime()
        .workers(1)
        .handler("k", move |tx, _: serde_json::Value| {
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
    let later = q.job_by_key("later").unwrap().unwrap();
    assert_eq!(later.state, JobState::Queued);
    assert_eq!(later.attempts, 0);
}

#[test]
fn a_batch_is_written_whole_or_not_at_all() {
    let db = TestDb::new();
    let q = db.open();
    let batch: Vec<NewJob> = (0..50)
        .map(|i| NewJob::new("k", format!("b:{i}"), &json!({ "i": i })))
        .collect();
    let r = q.enqueue_many(batch).unwrap();
    assert_eq!(r.len(), 50);
    assert!(r.iter().all(|e| !e.is_duplicate()));
    assert_eq!(jobs(&db), 50);
    // A batch with one duplicate inside and one of an existing key.
    let r = q
        .enqueue_many(vec![
            NewJob::new("k", "b:new", &json!({})),
            NewJob::new("k", "b:new", &json!({})),
            NewJob::new("k", "b:0", &json!({})),
        ])
        .unwrap();
    assert!(!r[0].is_duplicate());
    assert_eq!(r[1], Enqueued::Duplicate(r[0].id()));
    assert!(r[2].is_duplicate());
    assert_eq!(jobs(&db), 51);
    // The duplicates spent no id: the next new job takes the next one.
    let next = q
        .enqueue_many(vec![
            NewJob::new("k", "b:1", &json!({})),
            NewJob::new("k", "b:after", &json!({})),
        ])
        .unwrap();
    assert_eq!(next[1], Enqueued::New(r[0].id() + 1));
    assert_eq!(jobs(&db), 52);
    // One invalid job refuses the whole batch.
    for bad in [
        NewJob::new("", "bad:kind", &json!({})),
        NewJob::new("k", "", &json!({})),
        NewJob::from_json("k", "bad:json", "{oops"),
        NewJob::new("k", "bad:retries", &json!({})).with_max_retries(1_000_000),
    ] {
        let err = q
            .enqueue_many(vec![
                NewJob::new("k", "c:1", &json!({})),
                bad,
                NewJob::new("k", "c:2", &json!({})),
            ])
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
        assert_eq!(jobs(&db), 52, "{err}");
    }
    assert_eq!(
        db.count("SELECT deliveries FROM jobs WHERE idempotency_key = 'b:0'"),
        2
    );
}

fn app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)")?;
        Ok(())
    })
    .unwrap();
}

#[test]
fn write_commits_the_app_row_and_the_job_together_or_neither() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('first')", [])?;
            let e = tx.enqueue(NewJob::new("ship", "order:1", &json!({"order": 1})))?;
            Ok(e.id())
        })
        .unwrap();
    assert!(q.job(id).unwrap().is_some());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);

    let err = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('second')", [])?;
            tx.enqueue(NewJob::new("ship", "order:2", &json!({"order": 2})))?;
            Err::<(), _>(Error::InvalidInput("the app changed its mind".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("changed its mind"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    assert!(q.job_by_key("order:2").unwrap().is_none());

    // An invalid enqueue inside the closure, propagated with `?`, undoes the
    // app row too.
    let err = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('third')", [])?;
            tx.enqueue(NewJob::new("ship", " ", &json!({})))?;
            Ok(())
        })
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    assert_eq!(jobs(&db), 1);
}

#[test]
fn enqueue_in_commits_or_rolls_back_with_the_apps_own_transaction() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let mut conn = q.connect().unwrap();
    {
        let tx = litejob::immediate(&mut conn).unwrap();
        tx.execute("INSERT INTO orders (note) VALUES ('kept')", [])
            .unwrap();
        let e = q
            .enqueue_in(&tx, &NewJob::new("ship", "own:1", &json!({})))
            .unwrap();
        assert!(!e.is_duplicate());
        // Not visible to others before the commit.
        assert!(q.job_by_key("own:1").unwrap().is_none());
        tx.commit().unwrap();
    }
    q.notify();
    assert!(q.job_by_key("own:1").unwrap().is_some());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    {
        let tx = litejob::immediate(&mut conn).unwrap();
        tx.execute("INSERT INTO orders (note) VALUES ('dropped')", [])
            .unwrap();
        q.enqueue_in(&tx, &NewJob::new("ship", "own:2", &json!({})))
            .unwrap();
        // A duplicate inside the app's transaction counts a delivery...
        assert!(q
            .enqueue_in(&tx, &NewJob::new("ship", "own:1", &json!({})))
            .unwrap()
            .is_duplicate());
        tx.rollback().unwrap();
    }
    assert!(q.job_by_key("own:2").unwrap().is_none());
    // ...that rolls back with it.
    assert_eq!(q.job_by_key("own:1").unwrap().unwrap().deliveries, 1);
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    // Bad input inside the app's transaction: refused, the transaction is
    // still usable.
    let tx = litejob::immediate(&mut conn).unwrap();
    let err = q
        .enqueue_in(&tx, &NewJob::from_json("ship", "own:3", "nope"))
        .unwrap_err();
    assert!(err.is_invalid_input());
    tx.execute("INSERT INTO orders (note) VALUES ('after')", [])
        .unwrap();
    tx.commit().unwrap();
    assert!(q.job_by_key("own:3").unwrap().is_none());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 2);
}

fn refused(q: &Queue, db: &TestDb, job: NewJob, needle: &str) {
    let before = jobs(db);
    let err = q.enqueue(job).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(
        err.to_string().contains(needle),
        "{err} does not mention {needle:?}"
    );
    assert_eq!(jobs(db), before, "something was written for a refused job");
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let db = TestDb::new();
    let q = db.open();
    refused(&q, &db, NewJob::new("", "k1", &json!({})), "kind");
    refused(&q, &db, NewJob::new("  \t", "k1", &json!({})), "kind");
    refused(&q, &db, NewJob::new("k", "", &json!({})), "key");
    refused(&q, &db, NewJob::new("k", " \n", &json!({})), "key");
    refused(
        &q,
        &db,
        NewJob::new("k", "k1", &json!({})).with_queue(""),
        "queue",
    );
    refused(&q, &db, NewJob::from_json("k", "k1", "{\"a\":"), "JSON");
    refused(&q, &db, NewJob::from_json("k", "k1", ""), "JSON");
    refused(&q, &db, NewJob::from_json("k", "k1", "{} {}"), "JSON");
    // A payload serde cannot turn into JSON (map keys must be strings).
    let mut m: HashMap<(i32, i32), i32> = HashMap::new();
    m.insert((1, 2), 3);
    refused(&q, &db, NewJob::new("k", "k1", &m), "JSON");
    refused(
        &q,
        &db,
        NewJob::new("k", "k1", &json!({})).with_max_retries(u32::MAX),
        "max_retries",
    );
    // Over the default 1 MiB limit.
    let big = "x".repeat(1024 * 1024);
    refused(&q, &db, NewJob::new("k", "k1", &big), "limit");
    // Just under it is fine.
    let ok = "x".repeat(1024 * 1024 - 2);
    assert!(!q
        .enqueue(NewJob::new("k", "fits", &ok))
        .unwrap()
        .is_duplicate());
    assert_eq!(jobs(&db), 1);
}

#[test]
fn the_payload_limit_is_configurable() {
    let db = TestDb::new();
    let q = db.open_with(QueueOptions::default().with_max_payload_bytes(100));
    let exactly = "y".repeat(98); // 100 bytes with the quotes
    q.enqueue(NewJob::new("k", "at-limit", &exactly)).unwrap();
    refused(&q, &db, NewJob::new("k", "over", &"y".repeat(99)), "100");
    assert_eq!(jobs(&db), 1);
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
        assert_eq!(db.count("PRAGMA user_version"), 1);
    }
}

proptest! {
    #![proptest_config(crate::support::proptest_config(64))]

    /// Arbitrary strings never panic; what is refused writes nothing, what is
    /// accepted is stored as given.
    #[test]
    fn arbitrary_input_never_panics_and_refusals_write_nothing(
        kind in "\\PC{0,12}|[ \\t\\n]{0,3}",
        key in "\\PC{0,12}|[ \\t\\n]{0,3}|\\x00",
        payload in "\\PC{0,24}|\\{\"[a-z]{0,4}\": ?[0-9]{0,3}\\}|\\[[0-9, ]{0,8}\\]",
    ) {
        thread_local! {
            static DB: (TestDb, Queue) = {
                let db = TestDb::new();
                let q = db.open();
                (db, q)
            };
        }
        DB.with(|(db, q)| {
            let before = jobs(db);
            let existed = q.job_by_key(&key).ok().flatten();
            match q.enqueue(NewJob::from_json(kind.clone(), key.clone(), payload.clone())) {
                Ok(Enqueued::New(id)) => {
                    let j = q.job(id).unwrap().unwrap();
                    prop_assert_eq!(&j.kind, &kind);
                    prop_assert_eq!(&j.idempotency_key, &key);
                    prop_assert_eq!(jobs(db), before + 1);
                }
                Ok(Enqueued::Duplicate(id)) => {
                    prop_assert_eq!(existed.map(|j| j.id), Some(id));
                    prop_assert_eq!(jobs(db), before);
                }
                Err(e) => {
                    prop_assert!(e.is_invalid_input(), "{:?}", e);
                    prop_assert_eq!(jobs(db), before);
                    if let Some(j) = existed {
                        let now = q.job(j.id).unwrap().unwrap();
                        prop_assert_eq!(now.deliveries, j.deliveries);
                    }
                }
            }
            Ok(())
        })?;
    }
}

/// The file a batch test starts from: keys `s:0`… of [`SPECIAL`] as three
/// kinds of key a batch may meet: a job already in `jobs` (i % 3 == 0),
/// only a ledger row, its job pruned (i % 3 == 1), and unseen (i % 3 == 2).
fn batch_start(db: &TestDb) -> Queue {
    let q = db.open();
    for i in (0..SPECIAL).filter(|i| i % 3 == 0) {
        q.enqueue(NewJob::new("k", format!("s:{i}"), &json!({})))
            .unwrap();
    }
    let c = db.sql();
    for i in (0..SPECIAL).filter(|i| i % 3 == 1) {
        c.execute(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES (?1, 1, ?2)",
            rusqlite::params![format!("s:{i}"), 9000 + i as i64],
        )
        .unwrap();
    }
    q
}

const SPECIAL: usize = 12;

/// Every job row, by id, as a batch test compares two files.
type JobRow = (i64, String, i64, String, String, String, i64, i64);

fn job_rows(db: &TestDb) -> Vec<JobRow> {
    let c = db.sql();
    let mut st = c
        .prepare(
            "SELECT id, idempotency_key, deliveries, kind, queue, payload, priority, max_attempts \
             FROM jobs ORDER BY id",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .unwrap();
    rows.map(|r| r.unwrap()).collect()
}

/// Enqueues `keys` as one batch into one new file and one by one into
/// another (both from [`batch_start`]), and checks the answers and the
/// rows are the same. Each job's payload, queue, priority and retries come
/// from its key, so a value bound to the wrong row shows.
fn batch_like_one_by_one(keys: &[String]) -> Result<(), TestCaseError> {
    let batch = || -> Vec<NewJob> {
        keys.iter()
            .map(|k| {
                let n = k.len() as i64 + k.bytes().map(i64::from).sum::<i64>();
                NewJob::new("k", k.clone(), &json!({ "k": k }))
                    .with_queue(format!("q{}", n % 3))
                    .with_priority(n % 7 - 3)
                    .with_max_retries((n % 4) as u32)
            })
            .collect()
    };
    let (a, b) = (TestDb::new(), TestDb::new());
    let (qa, qb) = (batch_start(&a), batch_start(&b));
    let together = qa.enqueue_many(batch()).unwrap();
    let one_by_one: Vec<Enqueued> = batch()
        .into_iter()
        .map(|j| qb.enqueue(j).unwrap())
        .collect();
    prop_assert_eq!(&together, &one_by_one);
    prop_assert_eq!(job_rows(&a), job_rows(&b));
    // And the next job takes the next id on both: a refused multi-row
    // insert spent none.
    let next = |q: &Queue| q.enqueue(NewJob::new("k", "next", &json!({}))).unwrap();
    prop_assert_eq!(next(&qa), next(&qb));
    Ok(())
}

#[test]
fn a_batch_whose_later_chunk_meets_a_known_key_keeps_its_earlier_chunks() {
    let fresh = |n: usize| (0..n).map(|i| format!("f:{i}")).collect::<Vec<_>>();
    // 130 jobs: a chunk of 100 goes in, the chunk of 25 after it holds a
    // key in `jobs` at 110 (its failure must not undo the first chunk).
    let mut keys = fresh(130);
    keys[110] = "s:0".into();
    batch_like_one_by_one(&keys).unwrap();
    // A key known only to the ledger as the last row of a chunk of 25.
    let mut keys = fresh(130);
    keys[124] = "s:1".into();
    batch_like_one_by_one(&keys).unwrap();
    // Both, and a chunk of 5 after them.
    let mut keys = fresh(136);
    keys[0] = "s:3".into();
    keys[130] = "s:4".into();
    batch_like_one_by_one(&keys).unwrap();
}

/// Batches from several threads at once share the writer's transactions,
/// each in its own savepoint: with keys that overlap between them, every
/// key is still one job, every answer names it, and every enqueue of a key
/// counts as a delivery.
#[test]
fn concurrent_batches_with_overlapping_keys_make_one_job_per_key() {
    let db = TestDb::new();
    let q = db.open();
    let answers: Vec<Vec<(String, Enqueued)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let q = q.clone();
                s.spawn(move || {
                    let mut got = Vec::new();
                    for b in 0..5 {
                        // 30 keys from a pool of 200 that every thread draws on.
                        let keys: Vec<String> = (0..30)
                            .map(|i| format!("p:{}", (t * 37 + b * 53 + i * 7) % 200))
                            .collect();
                        let jobs = keys
                            .iter()
                            .map(|k| NewJob::new("k", k.clone(), &json!({})))
                            .collect();
                        let r = q.enqueue_many(jobs).unwrap();
                        got.extend(keys.into_iter().zip(r));
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<(String, Enqueued)> = answers.into_iter().flatten().collect();
    let mut seen = std::collections::HashMap::<String, i64>::new();
    for (key, e) in &all {
        let job = q.job_by_key(key).unwrap().expect("a job for every key");
        assert_eq!(e.id(), job.id, "{key}: {e:?}");
        *seen.entry(key.clone()).or_default() += 1;
    }
    for (key, n) in &seen {
        let job = q.job_by_key(key).unwrap().unwrap();
        assert_eq!(job.deliveries, *n, "{key}");
    }
    assert_eq!(jobs(&db), seen.len() as i64);
    let new = all.iter().filter(|(_, e)| !e.is_duplicate()).count();
    assert_eq!(new, seen.len(), "exactly one New answer per key");
}

proptest! {
    #![proptest_config(crate::support::proptest_config(40))]

    /// `enqueue_many` answers, and leaves the file, exactly as one `enqueue`
    /// per job in order would: the same ids (in order, none spent on a
    /// duplicate), the same duplicates (of jobs in the file, of pruned jobs
    /// in the ledger, and of a key twice in the batch) and the same
    /// delivery counts and columns. Batches of up to 140 new keys go in by
    /// multi-row INSERTs; a chunk holding a key seen before goes in one by
    /// one.
    #[test]
    fn a_batch_answers_like_one_enqueue_per_job(
        fresh in prop::sample::subsequence((0..300usize).collect::<Vec<_>>(), 0..140),
        special in prop::collection::vec((0..140usize, 0..SPECIAL), 0..4),
        twice in prop::option::weighted(0.2, (0..140usize, 0..140usize)),
    ) {
        let mut keys: Vec<String> = fresh.iter().map(|i| format!("f:{i}")).collect();
        for (at, i) in special {
            keys.insert(at.min(keys.len()), format!("s:{i}"));
        }
        if let Some((from, to)) = twice {
            if !keys.is_empty() {
                let k = keys[from % keys.len()].clone();
                keys.insert(to.min(keys.len()), k);
            }
        }
        batch_like_one_by_one(&keys)?;
    }
}

/// A caller writing back to back (a prune's batches) must not starve an
/// enqueue: each enqueue waits for about two of its writes, never seconds.
/// The race this pins: the writer thread has taken the enqueue from its
/// channel and waits for the connection; the caller finishes a write and,
/// finding the channel empty, takes the connection again before the woken
/// writer thread can, write after write. Each enqueue loses that race only
/// now and then, so the test makes up to 200 of them (a few seconds when
/// fair) and counts the writes that overtook each: code with the race lets
/// dozens overtake one of them in nearly every run.
#[test]
fn back_to_back_writes_do_not_starve_an_enqueue() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;
    let db = TestDb::new();
    let q = db.open();
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE filler (n INTEGER, pad TEXT)")?;
        Ok(())
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let busy = {
        let (q, stop, writes) = (q.clone(), stop.clone(), writes.clone());
        std::thread::spawn(move || {
            // A starved enqueue waits until this gives up.
            let give_up = Instant::now() + Duration::from_secs(10);
            while !stop.load(Ordering::SeqCst) && Instant::now() < give_up {
                // Like a prune batch: thousands of rows, then a commit
                // with its fsync.
                q.write(|tx| {
                    tx.execute(
                        "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s \
                         WHERE x < 5000) INSERT INTO filler SELECT x, hex(randomblob(40)) FROM s",
                        [],
                    )?;
                    tx.execute("DELETE FROM filler WHERE n <= 2500", [])?;
                    Ok(())
                })
                .unwrap();
                writes.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let (mut worst, mut most_overtaking, mut enqueues) = (Duration::ZERO, 0, 0);
    let t0 = Instant::now();
    while enqueues < 200 && t0.elapsed() < Duration::from_secs(6) {
        let (t, before) = (Instant::now(), writes.load(Ordering::SeqCst));
        q.enqueue(NewJob::new("k", format!("starve-{enqueues}"), &json!({})))
            .unwrap();
        worst = worst.max(t.elapsed());
        most_overtaking = most_overtaking.max(writes.load(Ordering::SeqCst) - before);
        enqueues += 1;
    }
    stop.store(true, Ordering::SeqCst);
    busy.join().unwrap();
    eprintln!(
        "{enqueues} enqueues beside {} back-to-back writes: the longest took {worst:?}, \
         {most_overtaking} writes finished during one",
        writes.load(Ordering::SeqCst)
    );
    assert!(
        enqueues >= 20,
        "only {enqueues} enqueues in {:?}",
        t0.elapsed()
    );
    // Fair: the write under way and perhaps the next one (committed in the
    // same group) finish during an enqueue, 2 at most when measured. With
    // the race, at least 7 overtook one enqueue in every measured run, and
    // dozens for seconds in most. The margin absorbs a test thread that
    // was not scheduled for a while after its enqueue returned.
    assert!(
        most_overtaking <= 6,
        "{most_overtaking} back-to-back writes finished while one enqueue waited"
    );
    assert!(
        worst < Duration::from_millis(1500),
        "an enqueue waited {worst:?} behind back-to-back writes"
    );
}
