//! The runtime: which jobs it claims, its threads, the ledger
//! transaction, outcomes and retries, panics, prepare outside the lock,
//! wake-up and polling, leases and fencing, the attempt history, graceful
//! stop, abandoned runs and poison pills.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::{AttemptOutcome, Enqueued, JobState, NewJob, Outcome, Queue, Runtime};
use serde_json::{json, Value};

use crate::support::{now_ms, tiny_backoff, wait_state, wait_until, TestDb, LONG};

fn enqueue(q: &Queue, kind: &str, key: &str) -> i64 {
    q.enqueue(NewJob::new(kind, key, &json!({ "key": key })))
        .unwrap()
        .id()
}

fn outcomes(q: &Queue, id: i64) -> Vec<AttemptOutcome> {
    q.attempts(id).unwrap().iter().map(|a| a.outcome).collect()
}

fn app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS effects (key TEXT, note TEXT)")?;
        Ok(())
    })
    .unwrap();
}

/// The handler's own SQL: one row per applied run.
fn record(tx: &litejob::JobTx<'_>, note: &str) -> Result<(), litejob::HandlerError> {
    tx.execute(
        "INSERT INTO effects (key, note) VALUES (?1, ?2)",
        (&tx.job().key, note),
    )?;
    Ok(())
}

/// No connection of the queue is left inside a transaction, and no write
/// lock is held: another connection can take it at once.
fn check_no_open_transaction(db: &TestDb, q: &Queue) {
    for _ in 0..8 {
        assert!(q.read(|c| Ok(c.is_autocommit())).unwrap());
    }
    let c = db.sql();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    c.execute_batch("BEGIN IMMEDIATE; COMMIT").unwrap();
}

#[test]
fn claims_only_kinds_it_has_handlers_for() {
    let db = TestDb::new();
    let q = db.open();
    // The foreign kind comes first in priority order: a claim that ignored
    // kinds would take it.
    let theirs = q
        .enqueue(NewJob::new("theirs", "t:1", &json!({})).with_priority(-10))
        .unwrap()
        .id();
    let mine: Vec<i64> = (0..5)
        .map(|i| enqueue(&q, "mine", &format!("m:{i}")))
        .collect();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("mine", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    for id in &mine {
        wait_state(&q, *id, JobState::Succeeded);
    }
    rt.stop();
    let j = q.job(theirs).unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued);
    assert_eq!((j.attempts, j.abandoned), (0, 0));
    assert!(j.lease_owner.is_none());
    assert!(q.attempts(theirs).unwrap().is_empty());
}

#[test]
fn a_runtime_limited_to_some_queues_claims_only_their_jobs() {
    let db = TestDb::new();
    let q = db.open();
    // The other queue's job comes first in priority order.
    let other = q
        .enqueue(NewJob::new("k", "other", &json!({})).with_priority(-10))
        .unwrap()
        .id();
    let mine: Vec<i64> = ["mail", "sms"]
        .iter()
        .map(|queue| {
            q.enqueue(NewJob::new("k", *queue, &json!({})).with_queue(*queue))
                .unwrap()
                .id()
        })
        .collect();
    let mut rt = q
        .runtime()
        .queues(["mail", "sms"])
        .poll_interval(Duration::from_millis(20))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    for id in &mine {
        wait_state(&q, *id, JobState::Succeeded);
    }
    rt.stop();
    let j = q.job(other).unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued);
    assert!(q.attempts(other).unwrap().is_empty());
}

#[test]
fn worker_threads_are_named_and_stopping_twice_is_harmless() {
    let db = TestDb::new();
    let q = db.open();
    let names = Arc::new(Mutex::new(HashSet::new()));
    let n = names.clone();
    let mut rt = q
        .runtime()
        .workers(3)
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                n.lock()
                    .unwrap()
                    .insert(std::thread::current().name().unwrap_or("").to_string());
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let ids: Vec<i64> = (0..30)
        .map(|i| enqueue(&q, "k", &format!("n:{i}")))
        .collect();
    for id in &ids {
        wait_state(&q, *id, JobState::Succeeded);
    }
    let first = rt.stop();
    let second = rt.stop();
    assert_eq!(first, second);
    assert_eq!(first.detached_threads, 0);
    drop(rt);
    let names = names.lock().unwrap();
    assert!(!names.is_empty());
    for name in names.iter() {
        let n: usize = name
            .strip_prefix("litejob-worker-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("thread name {name:?}"));
        assert!((1..=3).contains(&n), "{name}");
    }
    // The attempt history names the process and the thread.
    let pid = std::process::id().to_string();
    for id in ids {
        for a in q.attempts(id).unwrap() {
            assert!(a.worker.contains(&pid), "{}", a.worker);
            assert!(a.worker.contains("litejob-worker-"), "{}", a.worker);
        }
    }
    // A runtime stopped before doing anything, and one only dropped.
    let mut idle = q
        .runtime()
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    idle.stop();
    idle.stop();
    let dropped = q
        .runtime()
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    drop(dropped);
}

#[test]
fn the_handlers_sql_the_ledger_row_and_the_completion_commit_together() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = enqueue(&q, "k", "ledger:1");
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            record(tx, "applied")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'ledger:1'"),
        1
    );
    assert_eq!(
        db.count("SELECT job_id FROM processed_jobs WHERE key = 'ledger:1'"),
        id
    );
    let job = q.job(id).unwrap().unwrap();
    assert_eq!(job.attempts, 1);
    assert!(job.finished_at.is_some() && job.lease_owner.is_none());
    assert_eq!(outcomes(&q, id), vec![AttemptOutcome::Succeeded]);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_key_already_in_the_ledger_is_recorded_duplicate_and_its_sql_is_not_applied() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = enqueue(&q, "k", "dup:1");
    // Someone (another process, an earlier life of this job) did the work.
    db.sql()
        .execute(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('dup:1', 1, ?1)",
            [id],
        )
        .unwrap();
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            record(tx, "applied")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    assert_eq!(db.count("SELECT count(*) FROM effects"), 0);
    assert_eq!(outcomes(&q, id), vec![AttemptOutcome::Duplicate]);
    assert_eq!(
        db.count("SELECT completed_at FROM processed_jobs WHERE key = 'dup:1'"),
        1
    );
}

/// A runtime whose handler behaves per key prefix.
fn behaving_runtime(q: &Queue, workers: usize) -> Runtime {
    q.runtime()
        .workers(workers)
        .poll_interval(Duration::from_millis(20))
        .backoff(tiny_backoff())
        .handler("k", |tx, _: Value| {
            let key = tx.job().key.clone();
            let attempt = tx.job().attempt;
            // Written before the outcome: must roll back unless Done.
            record(tx, &format!("attempt {attempt}"))?;
            match key.split(':').next().unwrap() {
                "retry" if attempt == 1 => Ok(Outcome::Retry("not yet".into())),
                "after" if attempt == 1 => Ok(Outcome::RetryAfter(
                    Duration::from_millis(30),
                    "come back later".into(),
                )),
                "discard" => Ok(Outcome::Discard("never mind".into())),
                "err" => Err("the handler failed".into()),
                "panic" => panic!("the handler panicked on {key}"),
                _ => Ok(Outcome::Done),
            }
        })
        .start()
        .unwrap()
}

#[test]
fn outcomes_retry_retry_after_discard_error_and_panic() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let retry = enqueue(&q, "k", "retry:1");
    let after = enqueue(&q, "k", "after:1");
    let discard = q
        .enqueue(NewJob::new("k", "discard:1", &json!({})).with_max_retries(5))
        .unwrap()
        .id();
    let err = enqueue(&q, "k", "err:1");
    let panic = enqueue(&q, "k", "panic:1");
    let more = q
        .enqueue(NewJob::new("k", "err:more", &json!({})).with_max_retries(3))
        .unwrap()
        .id();
    let mut rt = behaving_runtime(&q, 2);
    wait_state(&q, retry, JobState::Succeeded);
    wait_state(&q, after, JobState::Succeeded);
    wait_state(&q, discard, JobState::Dead);
    wait_state(&q, err, JobState::Dead);
    wait_state(&q, panic, JobState::Dead);
    wait_state(&q, more, JobState::Dead);

    use AttemptOutcome::*;
    assert_eq!(outcomes(&q, retry), vec![Failed, Succeeded]);
    let a = q.attempts(retry).unwrap();
    assert_eq!(a[0].error.as_deref(), Some("retry: not yet"));
    assert_eq!((a[0].attempt, a[1].attempt), (1, 2));
    assert_eq!(q.job(retry).unwrap().unwrap().attempts, 2);
    assert_eq!(outcomes(&q, after), vec![Failed, Succeeded]);
    assert!(q.attempts(after).unwrap()[0]
        .error
        .as_deref()
        .unwrap()
        .contains("come back later"));

    let j = q.job(discard).unwrap().unwrap();
    assert_eq!((j.attempts, j.max_attempts), (1, 6));
    assert!(j.last_error.unwrap().contains("never mind"));
    assert_eq!(outcomes(&q, discard), vec![Failed]);

    // max_retries defaults to 1: two attempts, then dead with the error.
    let j = q.job(err).unwrap().unwrap();
    assert_eq!((j.attempts, j.max_attempts), (2, 2));
    assert_eq!(j.last_error.as_deref(), Some("the handler failed"));
    assert!(j.finished_at.is_some());
    assert_eq!(outcomes(&q, err), vec![Failed, Failed]);
    assert_eq!(q.job(more).unwrap().unwrap().attempts, 4);
    assert_eq!(outcomes(&q, more), vec![Failed; 4]);

    let j = q.job(panic).unwrap().unwrap();
    assert_eq!(j.attempts, 2);
    assert!(
        j.last_error
            .as_deref()
            .unwrap()
            .contains("the handler panicked on panic:1"),
        "{:?}",
        j.last_error
    );
    assert_eq!(outcomes(&q, panic), vec![Panicked, Panicked]);

    // Only the successful runs' SQL committed.
    let mut notes: Vec<(String, String)> = db
        .sql()
        .prepare("SELECT key, note FROM effects ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    notes.sort();
    assert_eq!(
        notes,
        vec![
            ("after:1".to_string(), "attempt 2".to_string()),
            ("retry:1".to_string(), "attempt 2".to_string())
        ]
    );
    // No ledger row for work that did not commit.
    assert_eq!(db.count("SELECT count(*) FROM processed_jobs"), 2);

    // The workers survived the panics: later jobs succeed on the same runtime.
    let later: Vec<i64> = (0..10)
        .map(|i| enqueue(&q, "k", &format!("ok:{i}")))
        .collect();
    for id in later {
        wait_state(&q, id, JobState::Succeeded);
    }
    assert_eq!(rt.stop().detached_threads, 0);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_run_that_fails_without_writing_leaves_no_ledger_row_and_its_neighbours_commit() {
    // A handler that touches no SQL runs without a savepoint (see
    // execute::apply): a failed run must still take its ledger row back, so
    // the key's work counts as not done, while the runs committed in the
    // same group keep theirs.
    let db = TestDb::new();
    let q = db.open();
    let ids: Vec<(String, i64)> = (0..40)
        .map(|i| {
            let key = match i % 4 {
                0 => format!("fail:{i}"),
                1 => format!("panic:{i}"),
                _ => format!("ok:{i}"),
            };
            let id = q
                .enqueue(NewJob::new("quiet", &key, &json!({})).with_max_retries(0))
                .unwrap()
                .id();
            (key, id)
        })
        .collect();
    let mut rt = q
        .runtime()
        .workers(2)
        .poll_interval(Duration::from_millis(20))
        .handler("quiet", |tx, _: Value| {
            match tx.job().key.split(':').next().unwrap() {
                "fail" => Err("failed before writing anything".into()),
                "panic" => panic!("panicked before writing anything"),
                _ => Ok(Outcome::Done),
            }
        })
        .start()
        .unwrap();
    for (key, id) in &ids {
        let want = if key.starts_with("ok:") {
            JobState::Succeeded
        } else {
            JobState::Dead
        };
        wait_state(&q, *id, want);
    }
    rt.stop();
    let ledger: Vec<String> = db
        .sql()
        .prepare("SELECT key FROM processed_jobs ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut ok: Vec<String> = ids
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| k.starts_with("ok:"))
        .collect();
    ok.sort();
    assert_eq!(ledger, ok);
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_failed_runs_writes_are_undone_even_when_the_handler_left_its_own_savepoint_open() {
    // The run's savepoint has a reserved name: a handler's own savepoint,
    // whatever its name, is nested inside it and undone with it.
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let bad = q
        .enqueue(NewJob::new("nested", "nested:fail", &json!({})).with_max_retries(0))
        .unwrap()
        .id();
    let good = enqueue(&q, "nested", "nested:ok");
    let mut rt = q
        .runtime()
        .workers(1)
        .poll_interval(Duration::from_millis(20))
        .handler("nested", |tx, _: Value| {
            record(tx, "before its savepoint")?;
            tx.execute_batch("SAVEPOINT run; SAVEPOINT mine;")?;
            record(tx, "inside its savepoints")?;
            if tx.job().key.ends_with("fail") {
                Err("failed with its savepoints open".into())
            } else {
                Ok(Outcome::Done)
            }
        })
        .start()
        .unwrap();
    wait_state(&q, bad, JobState::Dead);
    wait_state(&q, good, JobState::Succeeded);
    rt.stop();
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'nested:fail'"),
        0
    );
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'nested:ok'"),
        2
    );
    assert_eq!(
        db.count("SELECT count(*) FROM processed_jobs WHERE key = 'nested:fail'"),
        0
    );
    check_no_open_transaction(&db, &q);
}

#[test]
fn a_panic_or_error_in_prepare_is_recorded_and_retried_like_one_in_apply() {
    let db = TestDb::new();
    let q = db.open();
    let p = enqueue(&q, "k", "prep:panic");
    let e = enqueue(&q, "k", "prep:err");
    let bad = q
        .enqueue(NewJob::new("k", "prep:badpayload", &json!("not an object")))
        .unwrap()
        .id();
    #[derive(serde::Deserialize)]
    struct P {
        key: String,
    }
    let mut rt = q
        .runtime()
        .workers(1)
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(20))
        .handler_with_prepare(
            "k",
            |_ctx, p: P| {
                if p.key == "prep:panic" {
                    panic!("prepare blew up");
                }
                if p.key == "prep:err" {
                    return Err("prepare failed".into());
                }
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    wait_state(&q, p, JobState::Dead);
    wait_state(&q, e, JobState::Dead);
    wait_state(&q, bad, JobState::Dead);
    use AttemptOutcome::*;
    assert_eq!(outcomes(&q, p), vec![Panicked, Panicked]);
    assert_eq!(outcomes(&q, e), vec![Failed, Failed]);
    // A payload that cannot decode is not retried.
    assert_eq!(outcomes(&q, bad), vec![Failed]);
    assert!(q
        .job(bad)
        .unwrap()
        .unwrap()
        .last_error
        .unwrap()
        .contains("decode"));
    let ok = enqueue(&q, "k", "prep:fine");
    wait_state(&q, ok, JobState::Succeeded);
    rt.stop();
    check_no_open_transaction(&db, &q);
}

#[test]
fn prepare_runs_outside_the_write_lock_and_in_parallel() {
    let db = TestDb::new();
    let q = db.open();
    let active = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let lock_free = Arc::new(AtomicUsize::new(0));
    let (a, m, l, path) = (
        active.clone(),
        most.clone(),
        lock_free.clone(),
        db.path.clone(),
    );
    let mut rt = q
        .runtime()
        .workers(4)
        .handler_with_prepare(
            "slow",
            move |_ctx, _: Value| {
                let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                // Nobody holds the write lock for us while we prepare:
                // another connection takes it at once.
                let c = rusqlite::Connection::open(&path)?;
                c.busy_timeout(Duration::from_secs(5))?;
                c.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
                l.fetch_add(1, Ordering::SeqCst);
                // Wait (bounded) until all four prepares are in at once.
                let t0 = Instant::now();
                while m.load(Ordering::SeqCst) < 4 && t0.elapsed() < LONG {
                    std::thread::sleep(Duration::from_millis(2));
                }
                a.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let ids = q
        .enqueue_many(
            (0..4)
                .map(|i| NewJob::new("slow", format!("s:{i}"), &json!({})))
                .collect(),
        )
        .unwrap();
    for e in &ids {
        wait_state(&q, e.id(), JobState::Succeeded);
    }
    rt.stop();
    assert_eq!(most.load(Ordering::SeqCst), 4, "prepares did not overlap");
    assert_eq!(lock_free.load(Ordering::SeqCst), 4);
}

#[test]
fn apply_only_jobs_keep_running_while_a_worker_is_stuck_in_a_prepare_step() {
    let db = TestDb::new();
    let q = db.open();
    let (release, held) = crossbeam_channel::bounded::<()>(0);
    let stuck = Arc::new(AtomicBool::new(false));
    let s = stuck.clone();
    let mut rt = q
        .runtime()
        .workers(4)
        .handler("fast", |_tx, _: Value| Ok(Outcome::Done))
        .handler_with_prepare(
            "slow",
            move |_ctx, _: Value| {
                s.store(true, Ordering::SeqCst);
                // Until the test lets go (or gives up on it).
                let _ = held.recv_timeout(Duration::from_secs(120));
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let slow = enqueue(&q, "slow", "slow:1");
    wait_until("the prepare step to start", LONG, || {
        stuck.load(Ordering::SeqCst)
    });
    // Many more than the runs in flight at once: a worker stuck in user
    // code must not hold up the claims of the others' kinds.
    for chunk in 0..30 {
        q.enqueue_many(
            (0..100)
                .map(|i| NewJob::new("fast", format!("f:{chunk}:{i}"), &json!({})))
                .collect(),
        )
        .unwrap();
    }
    let c = db.sql();
    wait_until("3000 fast jobs while the prepare step hangs", LONG, || {
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM jobs WHERE kind = 'fast' AND state = 'succeeded'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        n == 3000
    });
    assert_eq!(q.job(slow).unwrap().unwrap().state, JobState::Running);
    release.send(()).unwrap();
    wait_state(&q, slow, JobState::Succeeded);
    rt.stop();
}

#[test]
fn an_in_process_enqueue_wakes_an_idle_worker_without_polling() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_secs(3600))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    // Let the runtime's first look find nothing, so only a wake-up can find
    // what comes next.
    let warmup = enqueue(&q, "k", "wake:0");
    wait_state(&q, warmup, JobState::Succeeded);
    for i in 1..=3 {
        let id = enqueue(&q, "k", &format!("wake:{i}"));
        wait_state(&q, id, JobState::Succeeded);
    }
    // Through a batch and a transactional write too.
    let batch = q
        .enqueue_many(vec![
            NewJob::new("k", "wake:b1", &json!({})),
            NewJob::new("k", "wake:b2", &json!({})),
        ])
        .unwrap();
    let tx = q
        .write(|tx| Ok(tx.enqueue(NewJob::new("k", "wake:tx", &json!({})))?.id()))
        .unwrap();
    for id in batch.iter().map(|e| e.id()).chain([tx]) {
        wait_state(&q, id, JobState::Succeeded);
    }
    // enqueue_in in the app's own transaction, then notify.
    let mut conn = q.connect().unwrap();
    let t = litejob::immediate(&mut conn).unwrap();
    let id = q
        .enqueue_in(&t, &NewJob::new("k", "wake:own", &json!({})))
        .unwrap()
        .id();
    t.commit().unwrap();
    q.notify();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
}

#[test]
fn work_written_by_another_connection_is_found_by_polling() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(30))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    // Plain SQL, as an operator or another program would.
    let now = now_ms();
    db.sql()
        .execute(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
             VALUES ('k', 'poll:sql', '{}', ?1, ?1)",
            [now],
        )
        .unwrap();
    // Another Queue on the file: another process's writer and wake channel.
    let other = db.open();
    let id = enqueue(&other, "k", "poll:other");
    wait_state(&q, id, JobState::Succeeded);
    let sql_job = q.job_by_key("poll:sql").unwrap().unwrap();
    wait_state(&q, sql_job.id, JobState::Succeeded);
    rt.stop();
}

#[test]
fn a_run_that_lost_its_lease_cannot_complete_and_another_process_finishes_it() {
    let db = TestDb::new();
    let qa = db.open();
    app_table(&qa);
    let id = enqueue(&qa, "k", "fence:1");
    let entered = Arc::new(AtomicBool::new(false));
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let applied_a = Arc::new(AtomicUsize::new(0));
    let (e, ap) = (entered.clone(), applied_a.clone());
    let mut rt_a = qa
        .runtime()
        .workers(1)
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20))
        .handler_with_prepare(
            "k",
            move |ctx, _: Value| {
                if ctx.key == "fence:1" {
                    e.store(true, Ordering::SeqCst);
                    // Hangs until the test lets it go.
                    let _ = release_rx.recv_timeout(LONG);
                }
                Ok(())
            },
            move |tx, ()| {
                if tx.job().key == "fence:1" {
                    ap.fetch_add(1, Ordering::SeqCst);
                }
                record(tx, "run A")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    wait_until("A is in prepare", LONG, || entered.load(Ordering::SeqCst));
    // Fill A's claim buffer, so that A cannot take the job back itself once
    // its lease is gone: the take-over must come from B.
    let blocker = qa
        .enqueue(NewJob::new("k", "blocker", &json!({})).with_priority(-100))
        .unwrap()
        .id();
    wait_until("A claimed the blocker", LONG, || {
        qa.job(blocker).unwrap().unwrap().state == JobState::Running
    });
    let first = qa.job(id).unwrap().unwrap();
    let attempt_a = first.current_attempt.expect("A started the run");
    // A's heartbeat renews its lease while it is alive; a process that hangs
    // as a whole (stopped, swapped out) stops renewing. Simulate that: the
    // lease runs out and is no longer A's to renew.
    db.sql()
        .execute(
            "UPDATE jobs SET lease_expires_at = ?2, lease_owner = 'frozen-a' WHERE id = ?1",
            (id, now_ms() - 1),
        )
        .unwrap();
    // B: another Queue on the file, as another process would be.
    let qb = db.open();
    let mut rt_b = qb
        .runtime()
        .lease(Duration::from_millis(300))
        .poll_interval(Duration::from_millis(20))
        .handler("k", |tx, _: Value| {
            record(tx, "run B")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&qb, id, JobState::Succeeded);
    rt_b.stop();
    // A wakes up and tries to complete: refused, nothing of it applied.
    release_tx.send(()).unwrap();
    wait_state(&qa, blocker, JobState::Succeeded);
    assert_eq!(rt_a.stop_with_grace(LONG).detached_threads, 0);
    assert_eq!(applied_a.load(Ordering::SeqCst), 0);
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'fence:1'"),
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE key = 'fence:1' AND note = 'run B'"),
        1
    );
    let attempts = qa.attempts(id).unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].id, attempt_a);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Abandoned);
    assert!(attempts[0].finished_at.is_some());
    assert_eq!(attempts[1].outcome, AttemptOutcome::Succeeded);
    let j = qa.job(id).unwrap().unwrap();
    assert_eq!(j.state, JobState::Succeeded);
    // The abandoned run was not charged.
    assert_eq!((j.attempts, j.abandoned), (1, 1));
    assert_eq!(attempts[1].attempt, 1);
    check_no_open_transaction(&db, &qa);
}

#[test]
fn the_attempt_history_records_each_run_and_caps_huge_errors() {
    let db = TestDb::new();
    let q = db.open();
    let huge = enqueue(&q, "k", "huge:1");
    let fine = enqueue(&q, "k", "fine:1");
    let t0 = now_ms();
    let mut rt = q
        .runtime()
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(20))
        .handler("k", |tx, _: Value| {
            if tx.job().key == "huge:1" {
                return Err("é".repeat(100_000).into());
            }
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    wait_state(&q, huge, JobState::Dead);
    wait_state(&q, fine, JobState::Succeeded);
    rt.stop();
    let t1 = now_ms();
    let pid = std::process::id().to_string();
    let a = q.attempts(huge).unwrap();
    assert_eq!(a.len(), 2);
    for (i, a) in a.iter().enumerate() {
        assert_eq!(a.job_id, Some(huge));
        assert_eq!(a.outbox_id, None);
        assert_eq!(a.attempt, i as i64 + 1);
        assert_eq!(a.key, "huge:1");
        assert!(a.worker.contains(&pid), "{}", a.worker);
        // An apply-only run is started by a claim and its handler runs on
        // the writer thread, which the row names.
        assert!(a.worker.ends_with("/litejob-writer"), "{}", a.worker);
        assert_eq!(a.outcome, AttemptOutcome::Failed);
        let f = a.finished_at.unwrap();
        assert!(t0 <= a.started_at && a.started_at <= f && f <= t1);
        let e = a.error.as_deref().unwrap();
        assert!(e.len() <= litejob::MAX_ERROR_BYTES, "{}", e.len());
        assert!(e.starts_with("ééé"));
    }
    let j = q.job(huge).unwrap().unwrap();
    assert!(j.last_error.unwrap().len() <= litejob::MAX_ERROR_BYTES);
    let a = q.attempts(fine).unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].outcome, AttemptOutcome::Succeeded);
    assert_eq!(a[0].error, None);
}

#[test]
fn stop_lets_a_short_job_finish_within_the_grace_period() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let entered = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let e = entered.clone();
    let rt = q
        .runtime()
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                record(tx, "done")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    let id = enqueue(&q, "k", "grace:1");
    wait_until("running", LONG, || entered.load(Ordering::SeqCst));
    let stopper = std::thread::spawn(move || {
        let mut rt = rt;
        rt.stop_with_grace(LONG)
    });
    go_tx.send(()).unwrap();
    let report = stopper.join().unwrap();
    assert_eq!(report.released_jobs, 0, "{report:?}");
    assert_eq!(report.detached_threads, 0);
    assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Succeeded);
    assert_eq!(db.count("SELECT count(*) FROM effects"), 1);
}

#[test]
fn stop_releases_running_and_claimed_ahead_jobs_without_charging_them() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let entered = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = crossbeam_channel::unbounded::<()>();
    let e = entered.clone();
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            q.enqueue(NewJob::new("k", format!("rel:{i}"), &json!({})).with_priority(i))
                .unwrap()
                .id()
        })
        .collect();
    let mut rt = q
        .runtime()
        .workers(1)
        .claim_ahead(2)
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.fetch_add(1, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |tx, ()| {
                record(tx, "late")?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
    wait_until("one running, two claimed ahead", LONG, || {
        entered.load(Ordering::SeqCst) == 1
            && db.count("SELECT count(*) FROM jobs WHERE state = 'running'") == 3
    });
    let report = rt.stop_with_grace(Duration::from_millis(200));
    assert_eq!(report.released_jobs, 3, "{report:?}");
    assert_eq!(report.detached_threads, 1, "{report:?}");
    for id in &ids {
        let j = q.job(*id).unwrap().unwrap();
        assert_eq!(j.state, JobState::Queued, "{j:?}");
        assert_eq!((j.attempts, j.abandoned), (0, 0), "{j:?}");
        assert!(j.lease_owner.is_none() && j.current_attempt.is_none());
    }
    // The running one is recorded `released`; the claimed-ahead ones never
    // started and have no attempt at all.
    assert_eq!(outcomes(&q, ids[0]), vec![AttemptOutcome::Released]);
    assert!(q.attempts(ids[1]).unwrap().is_empty());
    assert!(q.attempts(ids[2]).unwrap().is_empty());
    // The stuck handler finishes late: fenced off, nothing applied.
    go_tx.send(()).unwrap();
    // Then a new runtime runs all three, each charged once.
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            record(tx, "second life")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    for id in &ids {
        wait_state(&q, *id, JobState::Succeeded);
        assert_eq!(q.job(*id).unwrap().unwrap().attempts, 1);
    }
    rt.stop();
    check_no_open_transaction(&db, &q);
    assert_eq!(
        db.count("SELECT count(*) FROM effects WHERE note = 'late'"),
        0
    );
    assert_eq!(db.count("SELECT count(*) FROM effects"), 3);
    let a = q.attempts(ids[0]).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[1].attempt, 1);
}

/// Makes a job look like a dead process was running it: state running, a
/// lease that ran out, an attempt row still `running`.
fn simulate_dead_process_run(db: &TestDb, id: i64, key: &str) {
    let c = db.sql();
    let now = now_ms();
    let tx = c.unchecked_transaction().unwrap();
    tx.execute(
        "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
         SELECT id, attempts + 1, ?2, '999999/litejob-worker-1', ?3 FROM jobs WHERE id = ?1",
        (id, key, now - 10_000),
    )
    .unwrap();
    let attempt = tx.last_insert_rowid();
    tx.execute(
        "UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = 'dead-proc', \
         lease_expires_at = ?2, current_attempt = ?3 WHERE id = ?1 AND state = 'queued'",
        (id, now - 1_000, attempt),
    )
    .unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_dead_processs_run_is_abandoned_uncharged_and_the_job_runs_again() {
    let db = TestDb::new();
    let q = db.open();
    let id = enqueue(&q, "k", "crash:1");
    simulate_dead_process_run(&db, id, "crash:1");
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("k", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!((j.attempts, j.abandoned), (1, 1));
    let a = q.attempts(id).unwrap();
    assert_eq!(
        a.iter().map(|a| a.outcome).collect::<Vec<_>>(),
        vec![AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]
    );
    assert!(a[0].finished_at.is_some());
    assert!(a[0].error.as_deref().unwrap().contains("abandoned"));
}

fn poison(max_abandoned: Option<u32>, expected: i64) {
    let db = TestDb::new();
    let q = db.open();
    let id = enqueue(&q, "pill", "pill:1");
    // A runtime that reaps but has no handler for the pill: every run of it
    // is a "crash" written by the test.
    let mut b = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("other", |_tx, _: Value| Ok(Outcome::Done));
    if let Some(n) = max_abandoned {
        b = b.max_abandoned(n);
    }
    let mut rt = b.start().unwrap();
    for n in 1..=expected {
        simulate_dead_process_run(&db, id, "pill:1");
        wait_until(&format!("abandoned run {n} reaped"), LONG, || {
            let j = q.job(id).unwrap().unwrap();
            j.abandoned == n && j.state != JobState::Running
        });
        let j = q.job(id).unwrap().unwrap();
        assert_eq!(j.attempts, 0, "an abandoned run was charged: {j:?}");
        if n < expected {
            assert_eq!(j.state, JobState::Queued, "{j:?}");
        }
    }
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!(j.state, JobState::Dead, "{j:?}");
    assert_eq!(j.attempts, 0);
    let msg = j.last_error.unwrap();
    assert!(
        msg.contains(&format!("abandoned {expected} times")),
        "{msg}"
    );
    assert!(j.finished_at.is_some() && j.lease_owner.is_none());
    assert_eq!(
        outcomes(&q, id),
        vec![AttemptOutcome::Abandoned; expected as usize]
    );
}

#[test]
fn the_third_abandoned_run_makes_a_poison_pill_dead() {
    poison(None, 3);
}

#[test]
fn max_abandoned_is_configurable() {
    poison(Some(1), 1);
    poison(Some(5), 5);
}

#[test]
fn an_enqueue_seen_by_a_running_runtime_is_not_lost_when_it_is_a_duplicate() {
    // A duplicate enqueue while the job is running changes nothing but the
    // delivery count.
    let db = TestDb::new();
    let q = db.open();
    let entered = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let e = entered.clone();
    let mut rt = q
        .runtime()
        .handler_with_prepare(
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
    let id = enqueue(&q, "k", "running:1");
    wait_until("running", LONG, || entered.load(Ordering::SeqCst));
    assert_eq!(
        q.enqueue(NewJob::new("k", "running:1", &json!({})))
            .unwrap(),
        Enqueued::Duplicate(id)
    );
    go_tx.send(()).unwrap();
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let j = q.job(id).unwrap().unwrap();
    assert_eq!((j.deliveries, j.attempts), (2, 1));
}

#[test]
fn two_runtimes_on_one_queue_are_both_woken_by_an_in_process_enqueue() {
    // Regression: the wake-up channel was shared by every runtime of a
    // queue, so one runtime could swallow the wake meant for the other.
    let db = TestDb::new();
    let q = db.open();
    let start = |kind: &'static str| {
        q.runtime()
            .poll_interval(Duration::from_secs(3600))
            .handler(kind, |_tx, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap()
    };
    let mut a = start("a");
    let mut b = start("b");
    for i in 0..10 {
        let ida = enqueue(&q, "a", &format!("two:a{i}"));
        wait_state(&q, ida, JobState::Succeeded);
        let idb = enqueue(&q, "b", &format!("two:b{i}"));
        wait_state(&q, idb, JobState::Succeeded);
    }
    a.stop();
    b.stop();
}
