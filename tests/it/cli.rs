//! The `litejob` command, run as the real binary: `init` and `enqueue`, exit
//! statuses, `--json` documents, the explain sentence, repairs (retry,
//! cancel, outbox retry, prune), `bench`'s figures and the rows it leaves,
//! broken pipes and a newer schema.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use litejob::Backoff;
use litejob::{NewJob, Outcome, Queue};
use serde_json::{json, Value};

use crate::support::{bin, litejob, litejob_ok, show, wait_until, TestDb};

const LONG: Duration = Duration::from_secs(20);

/// Runs the binary with `--json` and parses its one document.
fn json_of(db: &TestDb, args: &[&str], status: i32) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = litejob_ok(&db.path, &all, status);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}):\n{out}"))
}

/// Runs the binary, asserts its status, returns stderr.
fn stderr_of(db: &TestDb, args: &[&str], status: i32) -> String {
    let out = litejob(&db.path, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        show(args, &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn init(db: &TestDb) {
    litejob_ok(&db.path, &["init"], 0);
}

fn state_of(db: &TestDb, id: i64) -> String {
    db.sql()
        .query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap()
}

/// Runs every queued job of kind `k` through an in-process runtime whose
/// handler succeeds, and stops it.
fn run_jobs(db: &TestDb, kind: &'static str) {
    let q = Queue::open(&db.path).unwrap();
    let mut rt = q
        .runtime()
        .handler(kind, |_tx, _v: Value| Ok(Outcome::Done))
        .poll_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    wait_until("no job queued or running", LONG, || {
        db.count(&format!(
            "SELECT count(*) FROM jobs WHERE kind = '{kind}' AND state IN ('queued', 'running')"
        )) == 0
    });
    rt.stop();
}

#[test]
fn init_prints_the_path_and_schema_version() {
    let db = TestDb::new();
    let out = litejob_ok(&db.path, &["init"], 0);
    let canonical = std::fs::canonicalize(&db.path).unwrap();
    assert!(out.contains(&canonical.display().to_string()), "{out}");
    assert!(out.contains("schema version 1"), "{out}");
    // Again, on the existing file, as JSON.
    let v = json_of(&db, &["init"], 0);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["path"], canonical.display().to_string());
}

#[test]
fn enqueue_says_new_or_duplicate_and_counts_deliveries() {
    let db = TestDb::new();
    let out = litejob_ok(&db.path, &["enqueue", "mail", "--key", "evt_1"], 0);
    assert_eq!(out.trim(), "enqueued 1");
    let out = litejob_ok(&db.path, &["enqueue", "mail", "--key", "evt_1"], 0);
    assert_eq!(out.trim(), "duplicate 1");
    let v = json_of(&db, &["enqueue", "mail", "--key", "evt_1"], 0);
    assert_eq!(v, json!({"id": 1, "duplicate": true}));
    let v = json_of(
        &db,
        &[
            "enqueue",
            "mail",
            "--key",
            "evt_2",
            "--payload",
            r#"{"to": "a@b"}"#,
            "--queue",
            "q2",
            "--priority",
            "-5",
            "--max-retries",
            "3",
            "--delay",
            "1h",
        ],
        0,
    );
    // Ids are never reused but may have gaps (a duplicate's upsert uses one).
    assert_eq!(v["duplicate"], false);
    let id2 = v["id"].as_i64().unwrap();
    assert_eq!(
        db.count("SELECT deliveries FROM jobs WHERE idempotency_key = 'evt_1'"),
        3
    );
    let (payload, queue, prio, max, delay): (String, String, i64, i64, i64) = db
        .sql()
        .query_row(
            "SELECT payload, queue, priority, max_attempts, run_at - created_at FROM jobs WHERE id = ?1",
            [id2],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&payload).unwrap(),
        json!({"to": "a@b"})
    );
    assert_eq!((queue.as_str(), prio, max), ("q2", -5, 4));
    assert!((3_599_000..=3_601_000).contains(&delay), "{delay}");

    // --run-at, and a payload from a file.
    let f = db.dir.path().join("p.json");
    std::fs::write(&f, r#"{"from": "file"}"#).unwrap();
    let v = json_of(
        &db,
        &[
            "enqueue",
            "mail",
            "--key",
            "evt_3",
            "--payload-file",
            f.to_str().unwrap(),
            "--run-at",
            "2030-01-01T00:00:00Z",
        ],
        0,
    );
    assert_eq!(v["duplicate"], false);
    assert_eq!(
        db.count("SELECT run_at FROM jobs WHERE idempotency_key = 'evt_3'"),
        1_893_456_000_000
    );
    assert_eq!(
        db.count(
            "SELECT payload = '{\"from\": \"file\"}' FROM jobs WHERE idempotency_key = 'evt_3'"
        ),
        1
    );
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let db = TestDb::new();
    // Bad input on a file that does not exist yet does not even create it.
    let e = stderr_of(&db, &["enqueue", "k", "--key", "a", "--payload", "{"], 2);
    assert!(e.contains("litejob: error:") && e.contains("JSON"), "{e}");
    assert!(!db.path.exists(), "bad input created the file");
    // Every rule the library checks is checked before the file is opened:
    // an empty queue name, a key over the length limit.
    let long_key = "k".repeat(2000);
    for args in [
        vec!["enqueue", "k", "--key", "a", "--queue", ""],
        vec!["enqueue", "k", "--key", long_key.as_str()],
    ] {
        stderr_of(&db, &args, 2);
        assert!(!db.path.exists(), "{args:?}: bad input created the file");
    }

    init(&db);
    let big = db.dir.path().join("big.json");
    std::fs::write(&big, format!("\"{}\"", "x".repeat(1024 * 1024))).unwrap();
    let big = big.to_str().unwrap().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["enqueue", "k", "--key", "a", "--payload", "not json"],
        vec!["enqueue", "k", "--key", "a", "--payload", r#"{"a": 1"#],
        vec!["enqueue", "k", "--key", ""],
        vec!["enqueue", "k", "--key", "   "],
        vec!["enqueue", "", "--key", "a"],
        vec!["enqueue", "k", "--key", "a", "--max-retries", "-1"],
        vec![
            "enqueue",
            "k",
            "--key",
            "a",
            "--max-retries",
            "99999999999999999999",
        ],
        vec!["enqueue", "k", "--key", "a", "--max-retries", "4294967296"],
        vec!["enqueue", "k", "--key", "a", "--max-retries", "100000"],
        vec!["enqueue", "k", "--key", "a", "--delay", "soon"],
        vec!["enqueue", "k", "--key", "a", "--run-at", "2026-02-30"],
        vec![
            "enqueue", "k", "--key", "a", "--delay", "1h", "--run-at", "@1",
        ],
        vec![
            "enqueue",
            "k",
            "--key",
            "a",
            "--payload",
            "{}",
            "--payload-file",
            "x",
        ],
        vec!["enqueue", "k", "--key", "a", "--payload-file", &big],
        vec!["enqueue", "k", "--key", "a", "--bogus"],
        vec!["enqueue", "k"],
        vec!["jobs", "--state", "sleeping"],
        vec!["jobs", "--limit", "-1"],
        vec!["prune", "--older-than", "7x"],
        vec!["prune"],
        vec!["retry"],
        vec!["retry", "1", "--dead"],
        vec!["show", "abc"],
        vec!["frobnicate"],
    ];
    for args in &cases {
        let out = litejob(&db.path, args);
        assert_eq!(out.status.code(), Some(2), "{}", show(args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{}", show(args, &out));
        assert!(out.stdout.is_empty(), "{}", show(args, &out));
    }
    assert_eq!(db.count("SELECT count(*) FROM jobs"), 0);

    // A payload file that cannot be read is a failure, not bad input.
    let missing = db.dir.path().join("missing.json");
    let e = stderr_of(
        &db,
        &[
            "enqueue",
            "k",
            "--key",
            "a",
            "--payload-file",
            missing.to_str().unwrap(),
        ],
        1,
    );
    assert!(e.contains("missing.json"), "{e}");
}

#[test]
fn litejob_db_names_the_file_when_db_is_not_given() {
    let db = TestDb::new();
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("LITEJOB_DB", &db.path)
            .current_dir(db.dir.path())
            .output()
            .unwrap()
    };
    let out = run(&["enqueue", "k", "--key", "env"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
    assert_eq!(db.count("SELECT count(*) FROM jobs"), 1);
    // --db wins over the environment.
    let other = db.dir.path().join("other.db");
    let out = run(&["--db", other.to_str().unwrap(), "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&["init"], &out));
    assert!(other.exists());
    assert!(!db.dir.path().join("litejob.db").exists());
}

#[test]
fn without_db_or_litejob_db_the_file_is_litejob_db_in_the_current_directory() {
    let db = TestDb::new();
    for env in [None, Some("")] {
        let mut cmd = Command::new(bin());
        cmd.args(["enqueue", "k", "--key", "here"])
            .current_dir(db.dir.path());
        match env {
            Some(v) => cmd.env("LITEJOB_DB", v),
            None => cmd.env_remove("LITEJOB_DB"),
        };
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
    }
    let here = db.dir.path().join("litejob.db");
    let c = rusqlite::Connection::open(&here).unwrap();
    let deliveries: i64 = c
        .query_row(
            "SELECT deliveries FROM jobs WHERE idempotency_key = 'here'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(deliveries, 2, "both runs wrote ./litejob.db");
}

#[test]
fn jobs_lists_with_filters_and_json() {
    let db = TestDb::new();
    let q = db.open();
    for i in 0..6 {
        let kind = if i % 2 == 0 { "even" } else { "odd" };
        let queue = if i < 3 { "low" } else { "high" };
        q.enqueue(NewJob::new(kind, format!("k{i}"), &i).with_queue(queue))
            .unwrap();
    }
    db.sql()
        .execute(
            "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE idempotency_key = 'k0'",
            [],
        )
        .unwrap();
    let ids = |v: &Value| -> Vec<i64> {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&json_of(&db, &["jobs"], 0)), vec![6, 5, 4, 3, 2, 1]);
    assert_eq!(
        ids(&json_of(&db, &["jobs", "--kind", "even"], 0)),
        vec![5, 3, 1]
    );
    assert_eq!(
        ids(&json_of(&db, &["jobs", "--queue", "high"], 0)),
        vec![6, 5, 4]
    );
    assert_eq!(ids(&json_of(&db, &["jobs", "--state", "dead"], 0)), vec![1]);
    assert_eq!(
        ids(&json_of(
            &db,
            &["jobs", "--kind", "even", "--queue", "low"],
            0
        )),
        vec![3, 1]
    );
    assert_eq!(ids(&json_of(&db, &["jobs", "--limit", "2"], 0)), vec![6, 5]);
    let v = json_of(&db, &["jobs", "--limit", "1"], 0);
    let j = &v["jobs"][0];
    assert_eq!(j["idempotency_key"], "k5");
    assert_eq!(j["state"], "queued");
    assert_eq!(j["kind"], "odd");

    let text = litejob_ok(&db.path, &["jobs"], 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("KEY"),
        "{text}"
    );
    // Columns are aligned: every row's STATE starts where the header's does.
    let col = lines[0].find("STATE").unwrap();
    for l in &lines[1..] {
        assert!(
            l[col..].starts_with("queued") || l[col..].starts_with("dead"),
            "{text}"
        );
    }
    assert_eq!(
        litejob_ok(&db.path, &["jobs", "--kind", "none"], 0).trim(),
        "no jobs"
    );
}

#[test]
fn show_prints_a_job_and_a_missing_id_exits_1() {
    let db = TestDb::new();
    litejob_ok(
        &db.path,
        &["enqueue", "k", "--key", "s1", "--payload", "[1,2]"],
        0,
    );
    let v = json_of(&db, &["show", "1"], 0);
    assert_eq!(v["job"]["idempotency_key"], "s1");
    assert_eq!(v["attempts"], json!([]));
    assert_eq!(v["outbox"], json!([]));
    let text = litejob_ok(&db.path, &["show", "1"], 0);
    assert!(text.contains("s1") && text.contains("queued"), "{text}");

    let e = stderr_of(&db, &["show", "99"], 1);
    assert!(e.contains("litejob: error:") && e.contains("99"), "{e}");
    // Read commands refuse a missing file instead of creating one.
    let missing = db.dir.path().join("typo.db");
    let out = litejob(&missing, &["jobs"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&["jobs"], &out));
    assert!(!missing.exists());
}

#[test]
fn explain_answers_one_event_delivered_three_times_run_once() {
    let db = TestDb::new();
    for _ in 0..3 {
        litejob_ok(&db.path, &["enqueue", "k", "--key", "evt_42"], 0);
    }
    run_jobs(&db, "k");

    let text = litejob_ok(&db.path, &["explain", "evt_42"], 0);
    let first = text.lines().next().unwrap();
    assert_eq!(first, "1 event, delivered 3 times, run once", "{text}");
    assert!(
        text.contains("succeeded") && text.contains("committed"),
        "{text}"
    );

    let v = json_of(&db, &["explain", "evt_42"], 0);
    assert_eq!(v["summary"], "1 event, delivered 3 times, run once");
    assert_eq!(v["deliveries"], 3);
    assert_eq!(v["job"]["state"], "succeeded");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(v["attempts"][0]["outcome"], "succeeded");
    assert!(!v["attempts"][0]["worker"].as_str().unwrap().is_empty());
    assert_eq!(v["ledger"]["key"], "evt_42");
    assert_eq!(v["ledger"]["job_id"], 1);
    assert_eq!(v["outbox"], json!([]));
}

#[test]
fn explain_an_unknown_key_says_so() {
    let db = TestDb::new();
    init(&db);
    let text = litejob_ok(&db.path, &["explain", "nobody"], 0);
    assert_eq!(text.lines().next(), Some("no job has this key"), "{text}");
    let v = json_of(&db, &["explain", "nobody"], 0);
    assert_eq!(v["summary"], "no job has this key");
    assert_eq!(v["job"], Value::Null);
    assert_eq!(v["ledger"], Value::Null);
    assert_eq!(v["deliveries"], 0);
}

#[test]
fn retry_renews_dead_jobs_and_cancel_takes_only_queued_ones() {
    let db = TestDb::new();
    for (kind, key) in [("a", "d1"), ("a", "d2"), ("b", "d3"), ("a", "q4")] {
        litejob_ok(&db.path, &["enqueue", kind, "--key", key], 0);
    }
    db.sql()
        .execute(
            "UPDATE jobs SET state = 'dead', attempts = 2, abandoned = 1, finished_at = 5, \
             run_at = 5, last_error = 'boom' WHERE idempotency_key LIKE 'd%'",
            [],
        )
        .unwrap();

    assert_eq!(
        litejob_ok(&db.path, &["retry", "1"], 0).trim(),
        "job 1 requeued"
    );
    let (state, attempts, abandoned, finished, run_at): (String, i64, i64, Option<i64>, i64) = db
        .sql()
        .query_row(
            "SELECT state, attempts, abandoned, finished_at, run_at FROM jobs WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    assert_eq!(
        (state.as_str(), attempts, abandoned, finished),
        ("queued", 0, 0, None)
    );
    assert!(run_at > 5);
    // Not dead any more: refused, exit 1.
    let e = stderr_of(&db, &["retry", "1"], 1);
    assert!(e.contains("queued") && e.contains("dead"), "{e}");
    stderr_of(&db, &["retry", "99"], 1);

    // --dead --kind takes only that kind.
    let v = json_of(&db, &["retry", "--dead", "--kind", "b"], 0);
    assert_eq!(v["retried"], 1);
    assert_eq!(state_of(&db, 3), "queued");
    assert_eq!(state_of(&db, 2), "dead");
    let out = litejob_ok(&db.path, &["retry", "--dead"], 0);
    assert_eq!(out.trim(), "requeued 1 dead job");
    assert_eq!(
        db.count("SELECT count(*) FROM jobs WHERE state = 'dead'"),
        0
    );

    // cancel: a queued job only.
    let v = json_of(&db, &["cancel", "4"], 0);
    assert_eq!(v, json!({"id": 4, "state": "cancelled"}));
    assert_eq!(state_of(&db, 4), "cancelled");
    assert_eq!(
        db.count("SELECT finished_at IS NOT NULL FROM jobs WHERE id = 4"),
        1
    );
    let e = stderr_of(&db, &["cancel", "4"], 1);
    assert!(e.contains("cancelled") && e.contains("queued"), "{e}");
    let e = stderr_of(&db, &["cancel", "99"], 1);
    assert!(e.contains("99"), "{e}");
    db.sql()
        .execute(
            "UPDATE jobs SET state = 'running', lease_owner = 'x', lease_expires_at = 1 WHERE id = 1",
            [],
        )
        .unwrap();
    stderr_of(&db, &["cancel", "1"], 1);
    assert_eq!(state_of(&db, 1), "running");
}

#[test]
fn outbox_lists_rows_and_retries_a_dead_one() {
    let db = TestDb::new();
    litejob_ok(&db.path, &["enqueue", "pay", "--key", "evt_9"], 0);
    let q = Queue::open(&db.path).unwrap();
    let mut rt = q
        .runtime()
        .handler("pay", |tx, _v: Value| {
            tx.outbox("send_receipt", "receipt:evt_9", &json!({"to": "a@b"}))?;
            Ok(Outcome::Done)
        })
        .effect("send_receipt", |_ctx, _v: Value| Err("smtp down".into()))
        .outbox_max_retries(0)
        .effect_backoff(
            Backoff::default()
                .with_base(Duration::from_millis(5))
                .with_max(Duration::from_millis(5))
                .with_jitter(0.0),
        )
        .poll_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    wait_until("outbox row dead", LONG, || {
        db.count("SELECT count(*) FROM outbox WHERE state = 'dead'") == 1
    });
    rt.stop();

    let v = json_of(&db, &["outbox", "--state", "dead"], 0);
    let rows = v["outbox"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["kind"], "send_receipt");
    assert_eq!(rows[0]["key"], "receipt:evt_9");
    assert_eq!(rows[0]["last_error"], "smtp down");
    let id = rows[0]["id"].as_i64().unwrap();
    assert_eq!(
        json_of(&db, &["outbox", "--state", "sent"], 0)["outbox"],
        json!([])
    );
    let text = litejob_ok(&db.path, &["outbox"], 0);
    assert!(
        text.contains("receipt:evt_9") && text.contains("dead"),
        "{text}"
    );

    // explain shows the effect and its attempt.
    let v = json_of(&db, &["explain", "evt_9"], 0);
    assert_eq!(
        v["summary"],
        "1 event, delivered once, run once, send_receipt dead after 1 attempt, not sent"
    );
    assert_eq!(v["outbox"][0]["state"], "dead");
    assert_eq!(v["outbox"][0]["attempts"][0]["outcome"], "failed");
    assert_eq!(v["outbox"][0]["attempts"][0]["error"], "smtp down");

    let out = litejob_ok(&db.path, &["outbox", "retry", &id.to_string()], 0);
    assert!(out.contains("requeued"), "{out}");
    let (state, attempts): (String, i64) = db
        .sql()
        .query_row(
            "SELECT state, attempts FROM outbox WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), attempts), ("pending", 0));
    let e = stderr_of(&db, &["outbox", "retry", &id.to_string()], 1);
    assert!(e.contains("pending") && e.contains("dead"), "{e}");
    stderr_of(&db, &["outbox", "retry", "999"], 1);
}

#[test]
fn stats_counts_states_kinds_queues_and_sizes() {
    let db = TestDb::new();
    let q = db.open();
    for i in 0..5 {
        let kind = if i < 3 { "a" } else { "b" };
        q.enqueue(
            NewJob::new(kind, format!("s{i}"), &i).with_queue(if i == 0 { "x" } else { "default" }),
        )
        .unwrap();
    }
    drop(q);
    db.sql()
        .execute(
            "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id = 5",
            [],
        )
        .unwrap();
    let v = json_of(&db, &["stats"], 0);
    assert_eq!(v["jobs"]["total"], 5);
    assert_eq!(v["jobs"]["queued"], 4);
    assert_eq!(v["jobs"]["dead"], 1);
    assert_eq!(v["by_kind"]["a"]["queued"], 3);
    assert_eq!(v["by_kind"]["b"]["dead"], 1);
    assert_eq!(v["by_queue"]["x"]["total"], 1);
    assert_eq!(v["by_queue"]["default"]["total"], 4);
    assert_eq!(v["outbox"]["total"], 0);
    assert_eq!(v["queued_due"], 4);
    assert!(v["oldest_queued_age_ms"].as_i64().unwrap() >= 0);
    assert!(v["file_bytes"].as_u64().unwrap() > 0);
    assert!(v["wal_bytes"].is_u64());
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["ledger_rows"], 0);
    let text = litejob_ok(&db.path, &["stats"], 0);
    assert!(
        text.contains("4 queued") && text.contains("1 dead"),
        "{text}"
    );
}

#[test]
fn prune_deletes_old_finished_jobs_and_attempts_but_keeps_the_ledger() {
    let db = TestDb::new();
    for key in ["p1", "p2", "p3"] {
        litejob_ok(&db.path, &["enqueue", "k", "--key", key], 0);
    }
    run_jobs(&db, "k");
    litejob_ok(&db.path, &["enqueue", "k", "--key", "p4"], 0); // queued: never pruned
    assert_eq!(db.count("SELECT count(*) FROM attempts"), 3);
    // p1 finished two days ago; the others just now.
    db.sql()
        .execute(
            "UPDATE jobs SET finished_at = finished_at - 2 * 86400000 WHERE idempotency_key = 'p1'",
            [],
        )
        .unwrap();

    let v = json_of(&db, &["prune", "--older-than", "1d"], 0);
    assert_eq!(v["jobs"], 1, "{v}");
    assert_eq!(v["job_attempts"], 1, "{v}");
    assert_eq!(v["ledger"], 0, "{v}");
    assert_eq!(db.count("SELECT count(*) FROM jobs"), 3);
    assert_eq!(db.count("SELECT count(*) FROM attempts"), 2);

    let out = litejob_ok(
        &db.path,
        &["prune", "--older-than", "0s", "--batch", "1"],
        0,
    );
    assert!(
        out.contains("pruned 2 jobs") && out.contains("ledger kept"),
        "{out}"
    );
    assert_eq!(db.count("SELECT count(*) FROM jobs"), 1);
    assert_eq!(db.count("SELECT count(*) FROM attempts"), 0);
    assert_eq!(db.count("SELECT count(*) FROM processed_jobs"), 3);
    // The ledger keeps a pruned key a duplicate, and explain still knows it.
    let v = json_of(&db, &["enqueue", "k", "--key", "p1"], 0);
    assert_eq!(v["duplicate"], true);
    let v = json_of(&db, &["explain", "p2"], 0);
    assert_eq!(v["job"], Value::Null);
    assert!(
        v["summary"].as_str().unwrap().contains("committed once"),
        "{v}"
    );

    // Asked to, it prunes the ledger too.
    std::thread::sleep(Duration::from_millis(5));
    let v = json_of(
        &db,
        &["prune", "--older-than", "0s", "--ledger-older-than", "0s"],
        0,
    );
    assert_eq!(v["ledger"], 3, "{v}");
    assert_eq!(db.count("SELECT count(*) FROM processed_jobs"), 0);
    assert_eq!(
        db.count("SELECT count(*) FROM jobs WHERE state = 'queued'"),
        1
    );
}

#[test]
fn a_broken_pipe_exits_quietly() {
    let db = TestDb::new();
    let q = db.open();
    let jobs: Vec<NewJob> = (0..3000)
        .map(|i| NewJob::new("k", format!("pipe-key-with-some-length-{i:06}"), &i))
        .collect();
    q.enqueue_many(jobs).unwrap();
    drop(q);
    for args in [
        vec!["jobs", "--limit", "3000"],
        vec!["jobs", "--limit", "3000", "--json"],
    ] {
        let mut child = Command::new(bin())
            .arg("--db")
            .arg(&db.path)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one byte (like `head -c1`), then close the read end.
        let mut stdout = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        stdout.read_exact(&mut one).unwrap();
        drop(stdout);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn a_newer_schema_is_refused_with_both_versions_and_left_unchanged() {
    let db = TestDb::new();
    init(&db);
    litejob_ok(&db.path, &["enqueue", "k", "--key", "v"], 0);
    {
        let c = db.sql();
        c.pragma_update(None, "user_version", 99).unwrap();
        // Fold the WAL into the file, so its bytes are the whole state.
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let before = std::fs::read(&db.path).unwrap();
    for args in [
        vec!["jobs"],
        vec!["init"],
        vec!["enqueue", "k", "--key", "w"],
        vec!["stats", "--json"],
    ] {
        let e = stderr_of(&db, &args, 1);
        assert!(e.contains("99") && e.contains("version 1"), "{args:?}: {e}");
    }
    assert_eq!(std::fs::read(&db.path).unwrap(), before, "the file changed");
}

#[test]
fn every_command_has_help_with_an_example() {
    let db = TestDb::new();
    for cmd in [
        "init", "enqueue", "jobs", "show", "explain", "retry", "cancel", "outbox", "stats",
        "prune", "demo", "bench",
    ] {
        let out = litejob_ok(&db.path, &[cmd, "--help"], 0);
        assert!(out.contains("Example"), "litejob {cmd} --help:\n{out}");
    }
    let out = litejob_ok(&db.path, &["outbox", "retry", "--help"], 0);
    assert!(out.contains("Example"), "{out}");
    let out = litejob_ok(&db.path, &["--help"], 0);
    assert!(out.contains("explain"), "{out}");
    assert!(!db.path.exists(), "--help created the file");
}

#[test]
fn the_command_works_while_workers_run_on_the_same_file() {
    let db = TestDb::new();
    init(&db);
    let q = Queue::open(&db.path).unwrap();
    let mut rt = q
        .runtime()
        .handler("live", |_tx, _v: Value| Ok(Outcome::Done))
        .poll_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    for i in 0..10 {
        let key = format!("live-{i}");
        litejob_ok(&db.path, &["enqueue", "live", "--key", &key], 0);
        litejob_ok(&db.path, &["jobs", "--limit", "5"], 0);
    }
    json_of(&db, &["stats"], 0);
    wait_until("every job succeeded", LONG, || {
        db.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 10
    });
    let v = json_of(&db, &["prune", "--older-than", "0s"], 0);
    assert_eq!(v["jobs"], 10, "{v}");
    rt.stop();
}

#[test]
fn bench_with_a_db_keeps_the_file_and_every_job_went_the_full_path() {
    let db = TestDb::new();
    let v = json_of(&db, &["bench", "--jobs", "300", "--workers", "2"], 0);
    for rate in [
        "enqueue_per_sec",
        "enqueue_concurrent_per_sec",
        "enqueue_batch_per_sec",
        "process_per_sec",
        "machine_fsync_us",
        "machine_wake_round_trip_us",
    ] {
        assert!(v[rate].as_f64().is_some_and(|x| x > 0.0), "{rate}: {v}");
    }
    let (p50, p99) = (
        v["latency_p50_us"].as_u64().unwrap(),
        v["latency_p99_us"].as_u64().unwrap(),
    );
    assert!(p50 <= p99, "{v}");
    // How many of the 30 probes (a tenth of the jobs) ran under load.
    assert!(
        v["latency_samples"].as_u64().is_some_and(|n| n <= 30),
        "{v}"
    );
    assert_eq!(
        (&v["jobs"], &v["sync"], &v["kept"]),
        (&json!(300), &json!("full"), &json!(true)),
        "{v}"
    );
    // Every benchmarked job succeeded, and the full path left its trace per
    // job: its key in the ledger and a succeeded attempt row.
    assert_eq!(
        db.count("SELECT count(*) FROM jobs WHERE state='succeeded'"),
        300
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM jobs j JOIN processed_jobs p ON p.key = j.idempotency_key \
             JOIN attempts a ON a.job_id = j.id AND a.outcome = 'succeeded'"
        ),
        300
    );
    let probe = format!("{}-fsync-probe", db.path.display());
    assert!(
        !std::path::Path::new(&probe).exists(),
        "{probe} left behind"
    );
}

#[test]
fn bench_refuses_bad_settings_with_status_2_before_creating_the_file() {
    let db = TestDb::new();
    for (args, says) in [
        (&["bench", "--jobs", "10"][..], "--jobs"),
        (&["bench", "--sync", "sometimes"][..], "synchronous"),
        (&["bench", "--workers", "0"][..], "--workers"),
    ] {
        let err = stderr_of(&db, args, 2);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!db.path.exists(), "{args:?} created the file");
    }
}
