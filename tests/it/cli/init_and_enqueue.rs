//! `init` and `enqueue`: the path and schema version, new or duplicate with
//! the delivery count, every option stored, and bad input refused with
//! status 2 before anything is written (a file that cannot be read is a
//! failure, status 1).

use serde_json::{json, Value};

use super::{init, json_of, stderr_of};
use crate::support::{litejob, litejob_ok, show, TestDb};

#[test]
fn init_prints_the_path_and_schema_version() {
    let db = TestDb::new();
    let out = litejob_ok(&db.path, &["init"], 0);
    let canonical = std::fs::canonicalize(&db.path).unwrap();
    assert!(out.contains(&canonical.display().to_string()), "{out}");
    assert!(out.contains("schema version 3"), "{out}");
    // Again, on the existing file, as JSON.
    let v = json_of(&db, &["init"], 0);
    assert_eq!(v["schema_version"], 3);
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

// Long: one scenario, a table of refused command lines and what is not bad input.
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
