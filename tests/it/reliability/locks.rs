//! The write lock under pressure: another program holding it, a handler
//! hanging inside its transaction, a full disk.

use std::time::{Duration, Instant};

use litejob::{JobState, NewJob, Outcome, QueueOptions};

use super::harness::{self, create_app_table, Env};
use crate::support::{wait_until, TestDb, LONG};

fn hold_write_lock(db: &TestDb) -> rusqlite::Connection {
    let c = db.sql();
    c.execute_batch("BEGIN IMMEDIATE; CREATE TABLE IF NOT EXISTS held (x)")
        .unwrap();
    c
}

it! {
    /// Another connection (a sqlite3 shell in a transaction) holds the write
    /// lock for 5 s: enqueue waits and succeeds, no error.
    fn write_lock_held_5s_makes_enqueue_wait() {
        let db = TestDb::new();
        let q = db.open();
        let holder = hold_write_lock(&db);
        let t0 = Instant::now();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            holder.execute_batch("COMMIT").unwrap();
        });
        let r = q.enqueue(NewJob::new("k", "held-5s", &1));
        let waited = t0.elapsed();
        release.join().unwrap();
        let id = r.expect("enqueue waits for the lock and succeeds").id();
        assert!(waited >= Duration::from_secs(4), "did not wait: {waited:?}");
        assert_eq!(q.job(id).unwrap().unwrap().state, JobState::Queued);
    }
}

it! {
    /// Held longer than the busy timeout: a typed `Busy` error naming the likely
    /// cause; nothing written; work resumes after the release.
    fn write_lock_held_past_busy_timeout_gives_busy_then_resumes() {
        let env = Env::new();
        let q = env
            .db
            .open_with(QueueOptions::default().with_busy_timeout(Duration::from_secs(1)));
        let mut rt = harness::runtime(&q, &env.handlers(Duration::from_secs(5)))
            .start()
            .unwrap();
        let holder = hold_write_lock(&env.db);
        let e = q
            .enqueue(NewJob::new("work", "busy-1", &1))
            .expect_err("enqueue must fail while the lock is held");
        assert!(e.is_busy(), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("another process") && msg.contains("sqlite3"),
            "the message names the likely cause: {msg}"
        );
        holder.execute_batch("COMMIT").unwrap();
        let released = Instant::now();
        assert!(q.job_by_key("busy-1").unwrap().is_none(), "nothing written");
        let id = q.enqueue(NewJob::new("work", "busy-1", &1)).unwrap().id();
        wait_until(
            "the job runs after the release",
            Duration::from_secs(10),
            || q.job(id).unwrap().unwrap().state == JobState::Succeeded,
        );
        eprintln!(
            "busy: work resumed {:?} after the release",
            released.elapsed()
        );
        rt.stop();
    }
}

it! {
    /// A handler that hangs inside its transaction is interrupted after the
    /// transaction budget: the attempt counts as failed and other writes go on.
    // Long: one scenario repeated for each way a handler can hang.
    fn handler_hanging_inside_its_transaction_is_interrupted() {
        let db = TestDb::new();
        let budget = Duration::from_secs(1);
        let q = db.open_with(QueueOptions::default().with_transaction_budget(Some(budget)));
        q.write(|tx| {
            tx.execute_batch("CREATE TABLE spins (n INTEGER)")?;
            Ok(())
        })
        .unwrap();
        let mut rt = q
            .runtime()
            .workers(2)
            .handler("spin_sql", |tx, _: serde_json::Value| {
                // A query that never ends.
                tx.query_row(
                    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
                    [],
                    |r| r.get::<_, i64>(0),
                )?;
                Ok(Outcome::Done)
            })
            .handler("spin_rust", |tx, _: serde_json::Value| {
                // Rust code that loops, writing now and then.
                let t0 = Instant::now();
                loop {
                    tx.execute("INSERT INTO spins VALUES (1)", [])?;
                    std::thread::sleep(Duration::from_millis(20));
                    if t0.elapsed() > Duration::from_secs(60) {
                        return Ok(Outcome::Done);
                    }
                }
            })
            .handler("spin_insert_panics", |tx, _: serde_json::Value| {
                // An endless INSERT: its interrupt rolls the whole transaction
                // back, and the handler then panics on the error, leaving no
                // code behind. It is charged all the same, or it would hang
                // and be given back forever.
                tx.execute(
                    "INSERT INTO spins WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
                    [],
                )
                .unwrap();
                Ok(Outcome::Done)
            })
            .handler("ok", |_tx, _: serde_json::Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        for kind in ["spin_sql", "spin_rust", "spin_insert_panics"] {
            let key = format!("hang-{kind}");
            let id = q
                .enqueue(NewJob::new(kind, key.clone(), &1).with_max_retries(0))
                .unwrap()
                .id();
            wait_until("the hanging run starts", Duration::from_secs(10), || {
                q.job(id).unwrap().unwrap().attempts == 1
            });
            std::thread::sleep(Duration::from_millis(100));
            // Another write waits at most about the budget.
            let t0 = Instant::now();
            let other = q
                .enqueue(NewJob::new("ok", format!("after-{kind}"), &1))
                .unwrap();
            let waited = t0.elapsed();
            wait_until(
                &format!("{kind}: the hanging job dies"),
                Duration::from_secs(20),
                || q.job(id).unwrap().unwrap().state == JobState::Dead,
            );
            wait_until("the other job runs", Duration::from_secs(20), || {
                q.job(other.id()).unwrap().unwrap().state == JobState::Succeeded
            });
            let attempts = q.attempts(id).unwrap();
            assert_eq!(attempts.len(), 1);
            assert_eq!(attempts[0].outcome.as_str(), "failed");
            let err = attempts[0].error.clone().unwrap_or_default();
            assert!(err.contains("interrupt"), "{kind}: {err}");
            eprintln!("{kind}: another enqueue waited {waited:?} (budget {budget:?})");
            assert!(
                waited < Duration::from_secs(10),
                "{kind}: waited {waited:?}"
            );
        }
        assert_eq!(db.count("SELECT count(*) FROM spins"), 0, "rolled back");
        rt.stop();
    }
}

it! {
    /// A handler that panics when the disk fills under its INSERTs (SQLite
    /// rolled the whole transaction back; the panic carries no error code) is
    /// given back uncharged, like any run cut short by a full disk, and
    /// succeeds once there is room: a full disk never kills a job.
    fn a_handler_panicking_on_a_full_disk_is_not_charged_and_succeeds_after() {
        let db = TestDb::new();
        let q = db.open();
        q.write(|tx| {
            tx.execute_batch("CREATE TABLE blobs (b BLOB)")?;
            Ok(())
        })
        .unwrap();
        let mut rt = q
            .runtime()
            .workers(1)
            .backoff(
                litejob::Backoff::default()
                    .with_base(Duration::from_millis(10))
                    .with_jitter(0.0),
            )
            .handler("fill", |tx, _: serde_json::Value| {
                for _ in 0..50 {
                    tx.execute("INSERT INTO blobs VALUES (zeroblob(100000))", [])
                        .unwrap();
                }
                Ok(Outcome::Done)
            })
            .start()
            .unwrap();
        let pages = db.count("PRAGMA page_count") as u64;
        q.set_max_page_count(pages + 200).unwrap();
        let id = q
            .enqueue(NewJob::new("fill", "fill-1", &1).with_max_retries(0))
            .unwrap()
            .id();
        wait_until("two runs cut short by the full disk", LONG, || {
            db.count("SELECT count(*) FROM attempts WHERE outcome = 'released'") >= 2
        });
        let job = q.job(id).unwrap().unwrap();
        assert_ne!(job.state, JobState::Dead, "{:?}", job.last_error);
        assert_eq!(job.attempts, 0, "no run was charged");
        assert_eq!(
            db.count("SELECT count(*) FROM attempts WHERE outcome IN ('failed', 'panicked')"),
            0
        );
        q.set_max_page_count(1 << 30).unwrap();
        wait_until("the job succeeds once there is room", LONG, || {
            q.job(id).unwrap().unwrap().state == JobState::Succeeded
        });
        assert_eq!(db.count("SELECT count(*) FROM blobs"), 50);
        rt.stop();
    }
}

it! {
    /// The disk is full (simulated with `max_page_count` on the writer):
    /// enqueue fails with `StorageFull` and writes nothing, workers pause
    /// without charging attempts, and work resumes without a restart once
    /// space is back.
    // Long: one scenario (fill, refuse, pause the workers, resume).
    fn disk_full_refuses_enqueue_pauses_workers_and_resumes() {
        let env = Env::new();
        let q = env.db.open();
        create_app_table(&q);
        let mut keys = harness::enqueue_n(&q, "work", "full", 0, 300);
        let pages: u64 = env.db.count("PRAGMA page_count") as u64;
        let limit = q.set_max_page_count(pages).unwrap();
        eprintln!("disk full: page_count {pages}, max_page_count now {limit}");
        let big = "x".repeat(8000);
        let mut full = None;
        // Big payloads first, then small ones, until not even a small job fits.
        for size in [&big[..], "1"] {
            for i in 0..10_000 {
                let key = format!("fill-{}-{i}", size.len());
                let before = env.db.count("SELECT count(*) FROM jobs");
                match q.enqueue(NewJob::new("work", key.clone(), &size)) {
                    Ok(_) => keys.push(key),
                    Err(e) => {
                        assert!(e.is_storage_full(), "{e:?}");
                        assert!(e.to_string().contains("full"), "{e}");
                        assert_eq!(
                            env.db.count("SELECT count(*) FROM jobs"),
                            before,
                            "nothing partial"
                        );
                        assert!(q.job_by_key(&key).unwrap().is_none());
                        full = Some(e);
                        break;
                    }
                }
            }
        }
        assert!(full.is_some(), "the page limit never filled");
        // A batch is all or nothing.
        let batch: Vec<NewJob> = (0..5)
            .map(|i| NewJob::new("work", format!("batch-{i}"), &big))
            .collect();
        let before = env.db.count("SELECT count(*) FROM jobs");
        let e = q.enqueue_many(batch).expect_err("batch on a full disk");
        assert!(e.is_storage_full(), "{e:?}");
        assert_eq!(env.db.count("SELECT count(*) FROM jobs"), before);
        // Workers run on a full disk: they pause, charge nothing, kill nothing.
        let mut rt = harness::runtime(&q, &env.handlers(Duration::from_secs(5)))
            .start()
            .unwrap();
        let cpu0 = cpu_ms();
        std::thread::sleep(Duration::from_secs(2));
        let cpu = cpu_ms() - cpu0;
        eprintln!("disk full: the process used {cpu} ms of CPU in 2 s while full");
        assert_eq!(
            env.db
                .count("SELECT count(*) FROM jobs WHERE state = 'dead'"),
            0
        );
        assert_eq!(
            env.db
                .count("SELECT count(*) FROM attempts WHERE outcome IN ('failed', 'panicked')"),
            0
        );
        let done = env
            .db
            .count("SELECT count(*) FROM jobs WHERE state = 'succeeded'");
        eprintln!(
            "disk full: {done} of {} jobs done while full; attempts by outcome: {:?}",
            keys.len(),
            env.db
                .sql()
                .prepare("SELECT outcome, count(*) FROM attempts GROUP BY outcome")
                .unwrap()
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .unwrap()
                .collect::<Vec<_>>()
        );
        assert!(
            done < keys.len() as i64,
            "the disk was never full for the workers"
        );
        // Space is back: everything completes without a restart.
        q.set_max_page_count(1 << 30).unwrap();
        let sql = env.db.sql();
        wait_until(
            "work resumes after space is back",
            Duration::from_secs(60),
            || harness::busy_count(&sql).unwrap() == 0,
        );
        rt.stop();
        harness::check_invariants(&env, &keys);
        // Enqueue works again.
        q.enqueue(NewJob::new("work", "after-full", &1)).unwrap();
    }
}

/// CPU time this process used so far (user + system), from /proc.
fn cpu_ms() -> i64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<i64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the name.
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) * 10
}
