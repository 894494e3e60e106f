//! The file: pragmas read back on every kind of connection, the
//! schema version, refusing files it must not touch, the sqlite3 shell, the
//! schema's CHECK constraints, ids never reused.

use std::time::Duration;

use litejob::{Error, JobState, NewJob, Outcome, QueueOptions, Synchronous};
use rusqlite::Connection;
use serde_json::json;

use crate::support::{sqlite3, wait_until, TestDb};

/// The pragmas every litejob connection must carry.
#[derive(Debug, PartialEq)]
struct Pragmas {
    journal_mode: String,
    synchronous: i64,
    foreign_keys: i64,
    busy_timeout: i64,
}

fn pragmas(c: &Connection) -> Pragmas {
    let get = |p: &str| -> i64 {
        c.query_row(&format!("PRAGMA {p}"), [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("PRAGMA {p}: {e}"))
    };
    Pragmas {
        journal_mode: c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap(),
        synchronous: get("synchronous"),
        foreign_keys: get("foreign_keys"),
        busy_timeout: get("busy_timeout"),
    }
}

fn check_pragmas(p: &Pragmas, synchronous: i64) {
    assert_eq!(p.journal_mode.to_ascii_lowercase(), "wal", "{p:?}");
    assert_eq!(p.synchronous, synchronous, "{p:?}");
    assert_eq!(p.foreign_keys, 1, "{p:?}");
    assert!(p.busy_timeout >= 30_000, "{p:?}");
}

fn check_all_connections(opts: QueueOptions, synchronous: i64) {
    let db = TestDb::new();
    let q = db.open_with(opts);
    check_pragmas(&q.read(|c| Ok(pragmas(c))).unwrap(), synchronous);
    // Several pooled connections at once: each one is configured, not only
    // the first.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (q, b) = (q.clone(), barrier.clone());
            std::thread::spawn(move || {
                q.read(|c| {
                    // Hold this connection until all four are out.
                    b.wait();
                    Ok(pragmas(c))
                })
                .unwrap()
            })
        })
        .collect();
    for h in handles {
        check_pragmas(&h.join().unwrap(), synchronous);
    }
    // The application's own connection.
    check_pragmas(&pragmas(&q.connect().unwrap()), synchronous);
    // The write connection (where `Queue::write` runs) commits without
    // SQLite's own fsync in both modes: with FULL, litejob fsyncs the WAL
    // itself before answering (reliability::durable checks that), so a
    // second, SQLite-side fsync per commit would only cost time.
    let mut writer = q.write(|tx| Ok(pragmas(tx))).unwrap();
    assert_eq!(writer.synchronous, 1, "{writer:?}");
    writer.synchronous = synchronous;
    check_pragmas(&writer, synchronous);
    // WAL is a property of the file: a plain connection sees it too.
    assert_eq!(pragmas(&db.sql()).journal_mode.to_ascii_lowercase(), "wal");
}

it! {
    fn pragmas_are_set_on_every_connection_full_by_default() {
        check_all_connections(QueueOptions::default(), 2);
    }
}

it! {
    fn synchronous_normal_is_an_opt_in() {
        check_all_connections(
            QueueOptions::default().with_synchronous(Synchronous::Normal),
            1,
        );
    }
}

it! {
    fn a_pooled_connection_is_never_handed_out_inside_a_transaction() {
        let db = TestDb::new();
        let q = db.open();
        // Give a connection back with a transaction left open, several times, so
        // every pooled connection has had the chance.
        for _ in 0..8 {
            q.read(|c| {
                c.execute_batch("BEGIN")?;
                c.query_row("SELECT count(*) FROM jobs", [], |r| r.get::<_, i64>(0))?;
                Ok(())
            })
            .unwrap();
        }
        for _ in 0..16 {
            assert!(q.read(|c| Ok(c.is_autocommit())).unwrap());
        }
        // And the stale read transaction does not block the writer or hide new
        // rows from later reads.
        let id = q
            .enqueue(NewJob::new("k", "after-begin", &json!({})))
            .unwrap()
            .id();
        assert!(q.job(id).unwrap().is_some());
    }
}

it! {
    fn a_write_through_a_read_connection_fails_and_writes_nothing() {
        let db = TestDb::new();
        let q = db.open();
        let id = q
            .enqueue(NewJob::new("k", "read-only", &json!({})))
            .unwrap()
            .id();
        for _ in 0..8 {
            let on: i64 = q
                .read(|c| Ok(c.query_row("PRAGMA query_only", [], |r| r.get(0))?))
                .unwrap();
            assert_eq!(on, 1, "every pooled reader is query_only");
            let e = q
                .read(|c| Ok(c.execute("UPDATE jobs SET priority = 9 WHERE id = ?1", [id])?))
                .unwrap_err();
            assert!(e.to_string().contains("readonly"), "{e}");
        }
        assert_eq!(q.job(id).unwrap().unwrap().priority, 0);
    }
}

it! {
    fn user_version_is_the_schema_version() {
        let db = TestDb::new();
        let q = db.open();
        assert_eq!(q.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
        let v: i64 = db
            .sql()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, litejob::admin::SCHEMA_VERSION);
        drop(q);
        // Opening again is a no-op migration.
        let q = db.open();
        assert_eq!(q.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
    }
}

it! {
    fn a_newer_schema_is_refused_and_the_file_is_untouched() {
        let db = TestDb::new();
        let newer = litejob::admin::SCHEMA_VERSION + 1;
        {
            // A rollback-journal file from "the future", fully checkpointed.
            let c = Connection::open(&db.path).unwrap();
            c.execute_batch(&format!(
                "CREATE TABLE future (x); INSERT INTO future VALUES (1); PRAGMA user_version = {newer};"
            ))
            .unwrap();
        }
        let before = std::fs::read(&db.path).unwrap();
        let err = litejob::Queue::open(&db.path).unwrap_err();
        assert!(
            matches!(err, Error::SchemaTooNew { found, supported }
                if found == newer && supported == litejob::admin::SCHEMA_VERSION),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&newer.to_string()), "{msg}");
        assert!(msg.contains(&litejob::admin::SCHEMA_VERSION.to_string()), "{msg}");
        assert_eq!(std::fs::read(&db.path).unwrap(), before, "file changed");
        let wal = db.path.with_extension("db-wal");
        assert!(!wal.exists(), "a -wal file appeared");
        assert!(!db.path.with_extension("db-journal").exists());
        // Also a newer WAL-mode file (as a newer litejob would leave it).
        let db2 = TestDb::new();
        {
            let q = db2.open();
            q.enqueue(NewJob::new("k", "x", &json!(1))).unwrap();
        }
        db2.sql()
            .execute_batch(&format!("PRAGMA user_version = {newer}"))
            .unwrap();
        let before = std::fs::read(&db2.path).unwrap();
        let err = litejob::Queue::open(&db2.path).unwrap_err();
        assert!(matches!(err, Error::SchemaTooNew { .. }), "{err:?}");
        assert_eq!(std::fs::read(&db2.path).unwrap(), before, "file changed");
    }
}

it! {
    fn a_file_that_is_not_sqlite_gives_a_typed_error() {
        let db = TestDb::new();
        let mut bytes = Vec::with_capacity(8192);
        let mut x: u64 = 0x1234_5678_9abc_def0;
        for _ in 0..8192 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8);
        }
        std::fs::write(&db.path, &bytes).unwrap();
        let err = litejob::Queue::open(&db.path).unwrap_err();
        assert!(matches!(err, Error::NotADatabase(_)), "{err:?}");
        assert!(
            err.to_string().contains(&db.path.display().to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read(&db.path).unwrap(), bytes, "file changed");

        // A text file too.
        std::fs::write(&db.path, "hello, this is not a database\n".repeat(100)).unwrap();
        let err = litejob::Queue::open(&db.path).unwrap_err();
        assert!(matches!(err, Error::NotADatabase(_)), "{err:?}");
    }
}

it! {
    fn a_directory_or_a_missing_directory_gives_an_error_naming_the_path() {
        let db = TestDb::new();
        let err = litejob::Queue::open(db.dir.path()).unwrap_err();
        assert!(matches!(err, Error::Open(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains(&db.dir.path().display().to_string()),
            "{err}"
        );
        let missing = db.dir.path().join("no-such-dir").join("q.db");
        let err = litejob::Queue::open(&missing).unwrap_err();
        assert!(matches!(err, Error::Open(_)), "{err:?}");
        assert!(
            err.to_string().contains(&missing.display().to_string()),
            "{err}"
        );
        assert!(!missing.parent().unwrap().exists());
    }
}

it! {
    #[needs(Sqlite3)]
    fn the_sqlite3_shell_reads_the_views_and_inserts_a_job_the_library_runs() {
        let db = TestDb::new();
        let q = db.open();
        let id = q
            .enqueue(NewJob::new("greet", "shell:1", &json!({"n": 1})))
            .unwrap()
            .id();
        drop(q);
        let version = sqlite3(&db.path, "PRAGMA user_version;");
        assert_eq!(version.trim(), litejob::admin::SCHEMA_VERSION.to_string());
        for view in [
            "job_overview",
            "attempt_history",
            "recent_failures",
            "outbox_overview",
            "key_summary",
        ] {
            sqlite3(&db.path, &format!("SELECT * FROM {view};"));
        }
        let row = sqlite3(
            &db.path,
            &format!("SELECT idempotency_key, state, created_at FROM job_overview WHERE id = {id};"),
        );
        assert!(row.starts_with("shell:1|queued|20"), "{row}");
        let summary = sqlite3(
            &db.path,
            "SELECT key, deliveries, runs FROM key_summary WHERE key = 'shell:1';",
        );
        assert_eq!(summary.trim(), "shell:1|1|0");
        // An operator inserts a job with plain SQL.
        sqlite3(
            &db.path,
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
         VALUES ('greet', 'shell:2', '{\"n\": 2}', CAST(unixepoch('now') AS INTEGER) * 1000, \
                 CAST(unixepoch('now') AS INTEGER) * 1000);",
        );
        let q = db.open();
        let job = q.job_by_key("shell:2").unwrap().expect("shell's job");
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.max_attempts, 2);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let mut rt = q
            .runtime()
            .poll_interval(Duration::from_millis(20))
            .handler("greet", move |_tx, p: serde_json::Value| {
                s.lock().unwrap().push(p["n"].as_i64().unwrap());
                Ok(Outcome::Done)
            })
            .start()
            .unwrap();
        wait_until("both jobs ran", Duration::from_secs(20), || {
            q.job_by_key("shell:2").unwrap().unwrap().state == JobState::Succeeded
                && q.job(id).unwrap().unwrap().state == JobState::Succeeded
        });
        rt.stop();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, vec![1, 2]);
        // The shell reads the history the library wrote.
        let out = sqlite3(
            &db.path,
            "SELECT outcome FROM attempt_history WHERE key = 'shell:2';",
        );
        assert_eq!(out.trim(), "succeeded");
    }
}

it! {
    /// Every state column's CHECK refuses a bad value.
    // Long: a table of bad values, one per state column.
    fn the_schema_refuses_bad_states() {
        let db = TestDb::new();
        let q = db.open();
        let id = q.enqueue(NewJob::new("k", "c:1", &json!({}))).unwrap().id();
        let c = db.sql();
        c.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        let refused = |sql: &str| {
            let e = c.execute_batch(sql).expect_err(sql);
            assert_eq!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::ConstraintViolation),
                "{sql}: {e}"
            );
        };
        let now = "CAST(unixepoch('now') AS INTEGER) * 1000";
        refused(&format!("UPDATE jobs SET state = 'bogus' WHERE id = {id}"));
        refused(&format!(
            "UPDATE jobs SET state = 'running' WHERE id = {id}"
        )); // no lease
        refused(&format!(
            "UPDATE jobs SET state = 'succeeded' WHERE id = {id}"
        )); // no finished_at
        refused(&format!("UPDATE jobs SET finished_at = 1 WHERE id = {id}")); // queued but finished
        refused(&format!(
            "UPDATE jobs SET current_attempt = 1 WHERE id = {id}"
        )); // not running
        refused(&format!("UPDATE jobs SET attempts = -1 WHERE id = {id}"));
        refused(&format!("UPDATE jobs SET max_attempts = 0 WHERE id = {id}"));
        refused(&format!("UPDATE jobs SET deliveries = 0 WHERE id = {id}"));
        refused(&format!("UPDATE jobs SET abandoned = -1 WHERE id = {id}"));
        refused(&format!(
            "UPDATE jobs SET payload = 'not json' WHERE id = {id}"
        ));
        refused(&format!("UPDATE jobs SET kind = '' WHERE id = {id}"));
        refused(&format!("UPDATE jobs SET queue = '' WHERE id = {id}"));
        refused(&format!(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) VALUES ('k', '', '{{}}', {now}, {now})"
        ));
        refused(&format!(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) VALUES ('k', 'c:1', '{{}}', {now}, {now})"
        )); // UNIQUE key
        refused(&format!(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) VALUES ('k', NULL, '{{}}', {now}, {now})"
        ));
        // outbox
        c.execute_batch(&format!(
            "INSERT INTO outbox (key, kind, payload, job_id, next_attempt_at, created_at) VALUES ('o:1', 'mail', '{{}}', {id}, {now}, {now})"
        ))
        .unwrap();
        refused("UPDATE outbox SET state = 'bogus' WHERE key = 'o:1'");
        refused("UPDATE outbox SET state = 'sending' WHERE key = 'o:1'"); // no lease
        refused("UPDATE outbox SET state = 'sent' WHERE key = 'o:1'"); // no sent_at
        refused("UPDATE outbox SET payload = '{' WHERE key = 'o:1'");
        refused("UPDATE outbox SET max_attempts = 0 WHERE key = 'o:1'");
        refused(&format!(
            "INSERT INTO outbox (key, kind, payload, next_attempt_at, created_at) VALUES ('o:1', 'mail', '{{}}', {now}, {now})"
        ));
        refused(&format!(
            "INSERT INTO outbox (key, kind, payload, job_id, next_attempt_at, created_at) VALUES ('o:2', 'mail', '{{}}', 999999, {now}, {now})"
        )); // foreign key
            // attempts
        c.execute_batch(&format!(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at) VALUES ({id}, 1, 'c:1', 'me', {now})"
        ))
        .unwrap();
        refused("UPDATE attempts SET outcome = 'bogus'");
        refused("UPDATE attempts SET outcome = 'failed'"); // no finished_at
        refused("UPDATE attempts SET finished_at = 1"); // running but finished
        refused("UPDATE attempts SET attempt = 0");
        refused(&format!(
            "INSERT INTO attempts (job_id, outbox_id, attempt, key, worker, started_at) VALUES ({id}, 1, 1, 'c:1', 'me', {now})"
        )); // both job and outbox
        refused(&format!(
            "INSERT INTO attempts (attempt, key, worker, started_at) VALUES (1, 'c:1', 'me', {now})"
        )); // neither
            // ledger
        refused(&format!(
            "INSERT INTO processed_jobs (key, completed_at) VALUES ('', {now})"
        ));
        // The job row is unchanged after all of that.
        let job = q.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.deliveries, 1);
    }
}

it! {
    fn job_ids_are_never_reused() {
        let db = TestDb::new();
        let q = db.open();
        let a = q
            .enqueue(NewJob::new("k", "id:1", &json!({})))
            .unwrap()
            .id();
        let b = q
            .enqueue(NewJob::new("k", "id:2", &json!({})))
            .unwrap()
            .id();
        assert!(b > a);
        db.sql()
            .execute("DELETE FROM jobs WHERE id = ?1", [b])
            .unwrap();
        let c = q
            .enqueue(NewJob::new("k", "id:3", &json!({})))
            .unwrap()
            .id();
        assert!(c > b, "id {c} reused after deleting {b}");
        // Same for the attempts and outbox tables: AUTOINCREMENT everywhere.
        let sql: String = db
            .sql()
            .query_row(
                "SELECT group_concat(name) FROM sqlite_sequence ORDER BY name",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(sql.contains("jobs"), "{sql}");
    }
}

it! {
    fn an_applications_existing_database_gets_the_queue_beside_its_tables() {
        // Transactional enqueue needs the queue in the app's own file.
        let db = TestDb::new();
        {
            let c = Connection::open(&db.path).unwrap();
            c.execute_batch(
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT);
             INSERT INTO orders (note) VALUES ('kept');",
            )
            .unwrap();
        }
        let q = db.open();
        assert_eq!(q.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
        assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
        q.enqueue(NewJob::new("k", "app:1", &json!({}))).unwrap();
        assert_eq!(db.count("SELECT count(*) FROM jobs"), 1);
    }
}

it! {
    fn the_wal_stays_bounded_under_continuous_writes() {
        // The writer checkpoints off its thread (see src/checkpoint.rs), which
        // turns SQLite's own autocheckpoint off on the write connection: if
        // nothing checkpointed, the WAL would hold every page ever written.
        // Back-to-back batch commits of ~32 MB of payload must leave a WAL of
        // a few thousand frames (4000 + a commit or two) and every row in the
        // database file once the queue closes.
        let db = TestDb::new();
        let q = db.open();
        let blob = "x".repeat(2000);
        let wal = format!("{}-wal", db.path.display());
        let mut biggest = 0u64;
        for batch in 0..160 {
            let jobs = (0..100)
                .map(|i| NewJob::new("k", format!("wal:{batch}:{i}"), &json!({ "pad": blob })))
                .collect();
            q.enqueue_many(jobs).unwrap();
            biggest = biggest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        // 4096-byte pages plus a 24-byte header per frame, 32-byte file header.
        let limit = (4000 + 2 * 200) * (4096 + 24) + 32;
        assert!(
            biggest <= limit,
            "the WAL grew to {biggest} bytes, past {limit}: nothing checkpointed it"
        );
        drop(q);
        let n: i64 = db
            .sql()
            .query_row("SELECT count(*) FROM jobs WHERE kind = 'k'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 16_000);
    }
}

/// Every schema object of a file: (type, name, SQL), sorted.
fn schema_of(c: &Connection) -> Vec<(String, String, Option<String>)> {
    let mut st = c
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
        .unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    rows.collect::<rusqlite::Result<_>>().unwrap()
}

it! {
    fn a_version_1_file_is_migrated_to_the_current_schema_and_keeps_its_jobs() {
        let old = TestDb::new();
        {
            // A file as the version-1 binary left it, with a job in it.
            let c = Connection::open(&old.path).unwrap();
            c.execute_batch(include_str!("../fixtures/schema-v1.sql"))
                .unwrap();
            c.execute_batch(
                "PRAGMA user_version = 1; PRAGMA journal_mode = WAL; \
             INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
             VALUES ('k', 'from-v1', '{}', 0, 0);",
            )
            .unwrap();
        }
        let q = old.open();
        assert_eq!(q.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
        assert!(q.job_by_key("from-v1").unwrap().is_some());
        assert!(q.admin().schedules().unwrap().is_empty());
        drop(q);
        let fresh = TestDb::new();
        drop(fresh.open());
        assert_eq!(
            schema_of(&old.sql()),
            schema_of(&fresh.sql()),
            "a migrated file's schema reads exactly as a new file's"
        );
    }
}
