//! A queue behind a transaction pooler (pgbouncer, `pool_mode =
//! transaction`, which managed providers put in front of a database): each
//! transaction may run on another server connection, shared with other
//! clients, and the URL's `options` (the schema's `search_path`) are
//! refused at startup. The real binary runs the demo and every command on
//! PostgreSQL, the dashboard answers, the pooler is named once in the log,
//! the URL's `search_path` is kept in every transaction and nothing is
//! left on the shared server connections (no prepared statement, setting
//! or `LISTEN`); a runtime given a direct connection to listen on is woken
//! long before its poll; an application's own transaction through the
//! pooler takes the enqueue with it.
//!
//! Behind a pooler in session mode (each client keeps its server connection
//! for its whole session) a queue works as on a direct connection, though
//! the pooler refuses the URL's `options` there too: the demo runs, the log
//! says once that it goes through a session pooler and never that it is
//! behind a transaction pooler, and an idle runtime is woken by `LISTEN`
//! through the pooler long before its poll.
//!
//! The poolers are the suite's (`suite::pgbouncer`, in front of the tests'
//! server); the checks connect to the server directly.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::pg::{Client, NoTls, SimpleQueryMessage};
use litejob::{JobState, NewJob, Outcome, QueueOptions};
use serde_json::{json, Value};

use super::wakeups::with_param;
use crate::backends::{app_handler, done, handler, Engine, Runtimes, TestQueue};
use crate::suite::pgbouncer::{pooled_url_for, session_pooled_url_for, POOL_SIZE};
use crate::support::{bin, show, wait_until, LONG};

/// A fresh schema that litejob reaches through the pooler, and the test's
/// checks directly.
fn pooled() -> TestQueue {
    let q = TestQueue::through_pooler();
    assert!(q.pooled && q.location != q.sql_location, "{}", q.location);
    q
}

/// A fresh schema that litejob reaches through the session pooler (the
/// URL's `options` name it), and the test's checks directly.
fn session_pooled() -> TestQueue {
    let mut q = TestQueue::new(Engine::Postgres);
    q.location = session_pooled_url_for(&q.sql_location);
    assert!(
        q.location != q.sql_location && q.location.contains("options="),
        "{}",
        q.location
    );
    q
}

/// Runs the binary on `db` with `args` and the extra environment `env`.
fn litejob_env(db: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run litejob")
}

/// Runs the binary on `db`, asserts exit 0, returns stdout.
fn ok(db: &str, args: &[&str]) -> String {
    let out = litejob_env(db, args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`ok`] with `--json`, parsed.
fn json(db: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ok(db, &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// How many times the log on `out`'s stderr names a transaction pooler.
fn pooler_lines(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stderr)
        .matches("transaction pooler")
        .count()
}

/// The schema a test queue names, as its own connection reads it.
fn schema_of(q: &TestQueue) -> String {
    q.strings("SELECT current_schema()::text").remove(0)
}

/// The rows of a simple query (no prepared statement), as text.
fn simple_rows(c: &mut Client, sql: &str) -> Vec<Vec<String>> {
    c.simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// `url` naming the database `db` instead of its own.
fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let query = tail.find('?').map_or("", |i| &tail[i..]);
    format!("{scheme}://{authority}/{db}{query}")
}

/// A database of the test's own on the server, dropped on drop: its own
/// pool in the pooler (one per database and user), which no other test
/// shares.
struct OwnDatabase {
    base: String,
    name: String,
}

impl OwnDatabase {
    fn new() -> OwnDatabase {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = crate::backends::pg_base_url().to_string();
        let name = format!(
            "litejob_pool_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = Client::connect(&base, NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        OwnDatabase { base, name }
    }

    /// The server's own URL of the database.
    fn direct_url(&self) -> String {
        with_database(&self.base, &self.name)
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.base, NoTls) {
            // The pooler still holds server connections to it.
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

it! {
    /// `litejob demo` through the pooler: it exits 0, every payment job
    /// succeeded, once, with one invoice and one receipt sent each, and
    /// the log names the pooler once.
    #[needs(Postgres, Pgbouncer)]
    fn the_demo_runs_behind_a_transaction_pooler_and_every_job_succeeds() {
        let q = pooled();
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let args = [
            "demo",
            "--events",
            "300",
            "--receipts",
            receipts.to_str().unwrap(),
        ];
        let out = litejob_env(&q.location, &args, &[("RUST_LOG", "litejob=info")]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
        assert_eq!(pooler_lines(&out), 1, "{}", show(&args, &out));
        let jobs = "SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded'";
        assert_eq!(q.count(jobs), 300);
        assert_eq!(q.count(&format!("{jobs} AND state = 'succeeded'")), 300);
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE state <> 'succeeded'"), 0);
        assert_eq!(q.count("SELECT count(DISTINCT provider_event_id) FROM invoices"), 300);
        assert_eq!(q.count("SELECT count(*) FROM invoices"), 300);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 300);
        assert_eq!(
            q.count("SELECT count(*) FROM outbox WHERE kind = 'send_receipt' AND state = 'sent'"),
            300
        );
        let lines = std::fs::read_to_string(&receipts).unwrap();
        let distinct: std::collections::HashSet<&str> = lines.lines().collect();
        assert_eq!(distinct.len(), 300, "one receipt line per event");
    }
}

it! {
    /// With `RUST_LOG=litejob=info` a command behind the pooler says once
    /// that it goes through a transaction pooler; on the server's own URL
    /// it says nothing of the kind.
    #[needs(Postgres, Pgbouncer)]
    fn a_queue_says_once_in_its_log_that_it_is_behind_a_transaction_pooler() {
        let q = pooled();
        let info = [("RUST_LOG", "litejob=info")];
        for args in [&["init"][..], &["stats"][..], &["enqueue", "k", "--key", "l-1"][..]] {
            let out = litejob_env(&q.location, args, &info);
            assert_eq!(out.status.code(), Some(0), "{}", show(args, &out));
            assert_eq!(pooler_lines(&out), 1, "{}", show(args, &out));
            let direct = litejob_env(&q.sql_location, args, &info);
            assert_eq!(direct.status.code(), Some(0), "{}", show(args, &direct));
            assert_eq!(pooler_lines(&direct), 0, "{}", show(args, &direct));
        }
    }
}

it! {
    /// The commands that apply to PostgreSQL, behind the pooler: reads,
    /// repairs, controls, verify, and a copy to a file and back into an
    /// empty schema.
    #[needs(Postgres, Pgbouncer)]
    fn every_command_works_on_a_queue_behind_a_transaction_pooler() {
        let q = pooled();
        let db = q.location.as_str();
        assert!(ok(db, &["init"]).contains("schema version"));
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let demo = ["demo", "--events", "20", "--receipts", receipts.to_str().unwrap()];
        ok(db, &demo);

        // Reads.
        let v = json(db, &["jobs"]);
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 20, "{v}");
        let id = jobs[0]["id"].as_i64().unwrap();
        let key = jobs[0]["idempotency_key"].as_str().unwrap().to_string();
        let shown = json(db, &["show", &id.to_string()]);
        assert_eq!(shown["job"]["idempotency_key"], key.as_str(), "{shown}");
        assert_eq!(shown["attempts"][0]["outcome"], "succeeded", "{shown}");
        assert!(ok(db, &["explain", &key]).starts_with("1 event"), "explain {key}");
        ok(db, &["workflow", &key]);
        let stats = json(db, &["stats"]);
        assert_eq!(stats["jobs"]["succeeded"], 20, "{stats}");
        let sent = json(db, &["outbox", "--state", "sent"]);
        assert_eq!(sent["outbox"].as_array().unwrap().len(), 20, "{sent}");
        ok(db, &["schedules"]);
        ok(db, &["queues"]);
        // Exit 0: sound.
        json(db, &["verify"]);

        // A copy to a file, and from it into an empty schema behind the pooler.
        let file = dir.path().join("copy.db");
        let file = file.to_str().unwrap();
        ok(db, &["copy", "--to", file]);
        json(file, &["verify"]);
        assert_eq!(json(file, &["stats"])["jobs"]["succeeded"], 20);
        let empty = pooled();
        ok(file, &["copy", "--to", &empty.location]);
        assert_eq!(
            empty.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
            20
        );
        json(&empty.location, &["verify"]);

        // Enqueues and repairs.
        assert!(ok(db, &["enqueue", "mail", "--key", "m-1"]).starts_with("enqueued"));
        assert!(ok(db, &["enqueue", "mail", "--key", "m-1"]).starts_with("duplicate"));
        ok(db, &["enqueue", "mail", "--key", "m-2", "--depends-on", "m-1"]);
        let m1 = q.count("SELECT id FROM jobs WHERE idempotency_key = 'm-1'");
        q.exec(&format!(
            "UPDATE jobs SET state = 'dead', attempts = 2, finished_at = 5, last_error = 'boom' \
             WHERE id = {m1}"
        ));
        assert!(ok(db, &["retry", &m1.to_string()]).contains("requeued"));
        assert_eq!(q.strings(&format!("SELECT state FROM jobs WHERE id = {m1}")), ["queued"]);
        let v = json(db, &["cancel", &m1.to_string()]);
        assert_eq!(v["state"], "cancelled", "{v}");
        assert_eq!(v["dependents_cancelled"], 1, "{v}");
        let row = q.count("SELECT min(id) FROM outbox");
        q.exec(&format!(
            "UPDATE outbox SET state = 'dead', last_error = '550', sent_at = NULL WHERE id = {row}"
        ));
        assert_eq!(json(db, &["outbox", "--state", "dead"])["outbox"][0]["id"], row);
        assert!(ok(db, &["outbox", "retry", &row.to_string()]).contains("requeued"));
        assert_eq!(q.strings(&format!("SELECT state FROM outbox WHERE id = {row}")), ["pending"]);

        // Controls.
        let paused = || -> Vec<Value> {
            json(db, &["queues"])["queues"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["paused"] == true)
                .map(|c| c["name"].clone())
                .collect()
        };
        ok(db, &["queue", "pause", "default"]);
        assert_eq!(paused(), [json!("default")]);
        ok(db, &["queue", "resume", "default"]);
        assert_eq!(paused(), Vec::<Value>::new());

        // Prune takes the finished jobs (19 of the demo's and the 2
        // cancelled), all but the one whose outbox row is pending again.
        let v = json(db, &["prune", "--older-than", "0s"]);
        assert_eq!(v["jobs"], 21, "{v}");
        assert_eq!(
            q.count(&format!(
                "SELECT count(*) FROM jobs WHERE id = (SELECT job_id FROM outbox WHERE id = {row})"
            )),
            1
        );
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 20, "the ledger is kept");
    }
}

it! {
    /// `litejob serve` behind the pooler: every page, the metrics and the
    /// health check answer 200.
    #[needs(Postgres, Pgbouncer)]
    fn the_dashboard_answers_behind_a_transaction_pooler() {
        let q = pooled();
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        ok(&q.location, &["demo", "--events", "10", "--receipts", receipts.to_str().unwrap()]);
        let (id, key) = (
            q.count("SELECT min(id) FROM jobs"),
            q.strings("SELECT idempotency_key FROM jobs ORDER BY id LIMIT 1").remove(0),
        );
        let s = crate::serve::Server::on(&q.location, &[]);
        for path in [
            "/".to_string(),
            "/jobs".into(),
            format!("/jobs/{id}"),
            format!("/keys/{key}"),
            "/failures".into(),
            "/outbox".into(),
            "/schedules".into(),
            "/healthz".into(),
        ] {
            let r = s.get(&path);
            assert_eq!(r.status, 200, "{path}: {}", r.body);
        }
        let metrics = s.get("/metrics").ok();
        assert!(metrics.contains("litejob_"), "{metrics}");
        assert!(s.get(&format!("/jobs/{id}")).ok().contains(&key));
    }
}

it! {
    /// Behind the pooler, a runtime given the server's own URL to listen
    /// on (`QueueOptions::with_listen_url`) is woken by a job another
    /// process enqueues through the pooler, long before its poll (30 s).
    #[needs(Postgres, Pgbouncer)]
    fn a_runtime_with_a_listen_url_is_woken_behind_a_transaction_pooler_long_before_its_poll() {
        let q = pooled();
        q.create_app_table();
        let name = format!(
            "listen_{}_{}",
            std::process::id(),
            crate::support::now_ms() % 1_000_000
        );
        let listen = with_param(&q.sql_location, &format!("application_name={name}"));
        let opts = QueueOptions::default().with_listen_url(listen);
        let queue = AnyQueue::open_with(&q.location, opts).unwrap();
        let mut rt = app_handler(
            Engine::Postgres,
            queue.runtime().workers(1).poll_interval(Duration::from_secs(30)),
            "work",
            done,
        )
        .start()
        .unwrap();
        wait_until("the runtime listens on the direct connection", LONG, || {
            q.count(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' \
                 AND query LIKE 'LISTEN%'"
            )) == 1
        });
        // The wake-up it gives itself on connecting is spent.
        std::thread::sleep(Duration::from_millis(500));
        for key in ["w-1", "w-2"] {
            let t0 = Instant::now();
            ok(&q.location, &["enqueue", "work", "--key", key]);
            wait_until(
                "a wake-up reaches the runtime (its poll is 30 s away)",
                Duration::from_secs(10),
                || {
                    queue
                        .job_by_key(key)
                        .unwrap()
                        .is_some_and(|j| j.state == JobState::Succeeded)
                },
            );
            eprintln!("{key}: enqueued and run in {:?}", t0.elapsed());
        }
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 2);
    }
}

it! {
    /// The server connections the pooler shares hold nothing of litejob's
    /// once its transactions end: after the demo and a runtime of this
    /// process, every one of the pool's connections (all held at once, so
    /// each is a different one) has no prepared statement, no channel it
    /// listens on, the server's default `search_path`, and no setting of
    /// the session's but those the pooler itself keeps.
    #[needs(Postgres, Pgbouncer)]
    fn a_queue_behind_a_transaction_pooler_leaves_nothing_on_the_shared_server_connections() {
        let own = OwnDatabase::new();
        let direct = own.direct_url();
        let mut c = Client::connect(&direct, NoTls).unwrap();
        c.batch_execute("CREATE SCHEMA q; CREATE TABLE q.app_rows (key TEXT NOT NULL, note TEXT)")
            .unwrap();
        let default_path = simple_rows(&mut c, "SHOW search_path").remove(0).remove(0);
        let pooled = pooled_url_for(&direct);
        let location = with_param(&pooled, "options=-csearch_path%3Dq");

        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        ok(&location, &["demo", "--events", "100", "--receipts", receipts.to_str().unwrap()]);
        let queue = AnyQueue::open_with(&location, QueueOptions::default()).unwrap();
        let mut rt = app_handler(
            Engine::Postgres,
            queue.runtime().workers(4).poll_interval(Duration::from_millis(50)),
            "work",
            done,
        )
        .start()
        .unwrap();
        let jobs: Vec<NewJob> = (0..100)
            .map(|i| NewJob::new("work", format!("r-{i}"), &i))
            .collect();
        queue.enqueue_many(jobs).unwrap();
        wait_until("the runtime's jobs succeeded", LONG, || {
            simple_rows(&mut c, "SELECT count(*) FROM q.app_rows")[0][0] == "100"
        });
        rt.stop();
        drop(queue);

        // Held at once, the pool's connections are all different ones.
        let sample = "BEGIN; SELECT pg_backend_pid(), \
            (SELECT count(*) FROM pg_prepared_statements), \
            (SELECT count(*) FROM pg_listening_channels()), \
            current_setting('search_path'), \
            (SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_settings \
             WHERE source = 'session' AND name NOT IN ('application_name', 'client_encoding', \
             'DateStyle', 'TimeZone', 'standard_conforming_strings', 'IntervalStyle'))";
        let mut held: Vec<Client> = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..POOL_SIZE {
            let mut s = Client::connect(&pooled, NoTls).unwrap();
            seen.push(simple_rows(&mut s, sample).remove(0));
            held.push(s);
        }
        for mut s in held {
            s.simple_query("COMMIT").unwrap();
        }
        let backends: std::collections::HashSet<&String> = seen.iter().map(|r| &r[0]).collect();
        assert_eq!(backends.len(), POOL_SIZE, "{seen:?}");
        for row in &seen {
            let expected = [
                row[0].clone(),
                "0".into(),
                "0".into(),
                default_path.clone(),
                String::new(),
            ];
            assert_eq!(
                row[..],
                expected[..],
                "backend {}: prepared statements, channels listened to, search_path, \
                 session settings",
                row[0]
            );
        }
    }
}

it! {
    /// Two queues on two schemas behind the same pooler, written to at once
    /// from several threads each, with a runtime each: the URL's
    /// `search_path` (refused by the pooler at startup) holds in every
    /// transaction, on whichever server connection it runs, so each schema
    /// has only its own jobs and its handlers' rows.
    #[needs(Postgres, Pgbouncer)]
    fn the_urls_search_path_holds_in_every_transaction_behind_a_transaction_pooler() {
        let qs = [pooled(), pooled()];
        let queues: Vec<AnyQueue> = qs
            .iter()
            .map(|q| {
                q.create_app_table();
                q.open()
            })
            .collect();
        let mut rts: Vec<litejob::Runtime> = queues
            .iter()
            .zip(["a", "b"])
            .map(|(queue, side)| {
                let b = queue.runtime().workers(3).poll_interval(Duration::from_millis(20));
                handler(b, "work", move |tx, _: Value| {
                    tx.record(side)?;
                    Ok(Outcome::Done)
                })
                .start()
                .unwrap()
            })
            .collect();
        let per_thread = 50;
        std::thread::scope(|s| {
            for t in 0..4 {
                let queues = &queues;
                s.spawn(move || {
                    for i in 0..per_thread {
                        for (queue, side) in queues.iter().zip(["a", "b"]) {
                            let key = format!("{side}-{t}-{i}");
                            queue.enqueue(NewJob::new("work", key, &json!({}))).unwrap();
                        }
                    }
                });
            }
        });
        let total = 4 * per_thread;
        for q in &qs {
            wait_until("every job succeeded", LONG, || {
                q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == total
            });
        }
        for rt in &mut rts {
            rt.stop();
        }
        for (q, side) in qs.iter().zip(["a", "b"]) {
            assert_eq!(q.count("SELECT count(*) FROM jobs"), total);
            assert_eq!(
                q.count(&format!(
                    "SELECT count(*) FROM jobs WHERE idempotency_key LIKE '{side}-%'"
                )),
                total,
                "only its own jobs"
            );
            assert_eq!(
                q.count(&format!("SELECT count(*) FROM app_rows WHERE note = '{side}'")),
                total,
                "only its own handlers' rows, one per job"
            );
            assert_eq!(q.count("SELECT count(*) FROM app_rows"), total);
        }
    }
}

it! {
    /// An application connected through the pooler (it sets its schema in
    /// its transaction, as the pooler refuses `options`): a job enqueued
    /// in its transaction exists if and only if that transaction commits,
    /// and a runtime behind the pooler runs it.
    #[needs(Postgres, Pgbouncer)]
    fn enqueue_in_an_apps_transaction_behind_a_transaction_pooler_commits_or_rolls_back_with_it() {
        let q = pooled();
        q.create_app_table();
        let queue = q.open();
        let schema = schema_of(&q);
        let app_url = pooled_url_for(crate::backends::pg_base_url());
        let mut app = Client::connect(&app_url, NoTls).unwrap();
        for (key, commit) in [("kept", true), ("dropped", false), ("kept-2", true)] {
            let mut tx = app.transaction().unwrap();
            tx.batch_execute(&format!("SET LOCAL search_path TO {schema}")).unwrap();
            tx.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&key]).unwrap();
            let e = queue.pg().enqueue_in(&mut tx, &NewJob::new("work", key, &json!({}))).unwrap();
            assert!(!e.is_duplicate());
            if commit {
                tx.commit().unwrap();
            } else {
                tx.rollback().unwrap();
            }
        }
        assert_eq!(
            q.strings("SELECT idempotency_key FROM jobs ORDER BY id"),
            ["kept", "kept-2"]
        );
        assert_eq!(q.strings("SELECT key FROM app_rows ORDER BY key"), ["kept", "kept-2"]);
        let runs = Arc::new(AtomicU64::new(0));
        let r = runs.clone();
        let b = queue.runtime().poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "work", move |_, _: Value| {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_until("both jobs ran", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 2
        });
        rt.stop();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}

it! {
    /// `litejob demo` through a pooler in session mode, the schema in the
    /// URL's `options` (which the pooler refuses at startup): it exits 0,
    /// every job succeeded in that schema, with one invoice and one receipt
    /// each, and with `RUST_LOG=litejob=info` the log says once that it
    /// goes through a pooler in session mode and never that it is behind a
    /// transaction pooler.
    #[needs(Postgres, Pgbouncer)]
    fn the_demo_runs_behind_a_session_pooler_as_on_a_direct_connection() {
        let q = session_pooled();
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let args = [
            "demo",
            "--events",
            "200",
            "--receipts",
            receipts.to_str().unwrap(),
        ];
        let out = litejob_env(&q.location, &args, &[("RUST_LOG", "litejob=info")]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(log.matches("session mode").count(), 1, "{}", show(&args, &out));
        assert_eq!(pooler_lines(&out), 0, "{}", show(&args, &out));
        let jobs = "SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded'";
        assert_eq!(q.count(jobs), 200);
        assert_eq!(q.count(&format!("{jobs} AND state = 'succeeded'")), 200);
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE state <> 'succeeded'"), 0);
        assert_eq!(q.count("SELECT count(DISTINCT provider_event_id) FROM invoices"), 200);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 200);
        assert_eq!(
            q.count("SELECT count(*) FROM outbox WHERE kind = 'send_receipt' AND state = 'sent'"),
            200
        );
        let lines = std::fs::read_to_string(&receipts).unwrap();
        let distinct: std::collections::HashSet<&str> = lines.lines().collect();
        assert_eq!(distinct.len(), 200, "one receipt line per event");
    }
}

it! {
    /// Through a pooler in session mode, with no other URL to listen on, a
    /// runtime polling every 30 s listens through the pooler and is woken
    /// by a job another process (`litejob enqueue`) enqueues through it:
    /// each job runs within 5 s.
    #[needs(Postgres, Pgbouncer)]
    fn an_idle_runtime_behind_a_session_pooler_is_woken_by_notify_long_before_its_poll() {
        let q = session_pooled();
        q.create_app_table();
        let name = format!(
            "session_{}_{}",
            std::process::id(),
            crate::support::now_ms() % 1_000_000
        );
        let url = with_param(&q.location, &format!("application_name={name}"));
        let queue = AnyQueue::open_with(&url, QueueOptions::default()).unwrap();
        let mut rt = app_handler(
            Engine::Postgres,
            queue.runtime().workers(1).poll_interval(Duration::from_secs(30)),
            "work",
            done,
        )
        .start()
        .unwrap();
        wait_until("the runtime listens through the session pooler", LONG, || {
            q.count(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' \
                 AND query LIKE 'LISTEN%'"
            )) == 1
        });
        // The wake-up it gives itself on connecting is spent.
        std::thread::sleep(Duration::from_millis(500));
        for key in ["s-1", "s-2", "s-3"] {
            let t0 = Instant::now();
            ok(&q.location, &["enqueue", "work", "--key", key]);
            wait_until(
                "a wake-up reaches the runtime (its poll is 30 s away)",
                Duration::from_secs(5),
                || {
                    queue
                        .job_by_key(key)
                        .unwrap()
                        .is_some_and(|j| j.state == JobState::Succeeded)
                },
            );
            eprintln!("{key}: enqueued and run in {:?}", t0.elapsed());
        }
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 3);
    }
}
