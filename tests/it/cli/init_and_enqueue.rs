//! `init` and `enqueue`: the queue's location and schema version, new or
//! duplicate with the delivery count, every option stored, and bad input
//! refused with status 2 before anything is written (a payload file that
//! is not there too).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::{init, json_of, ok, run, stderr_of};
use crate::backends::Engine;
use crate::both;
use crate::support::{bin, show};

both! {
    /// The file's canonical path, or the URL without its password.
    fn init_prints_the_location_and_schema_version(q) {
        let out = ok(q, &["init"], 0);
        let expected = match q.engine {
            Engine::Sqlite => std::fs::canonicalize(&q.location).unwrap().display().to_string(),
            Engine::Postgres => {
                let (scheme, rest) = q.location.split_once("://").unwrap();
                match rest.split_once('@') {
                    Some((user, host)) if user.contains(':') => {
                        let password = user.split_once(':').unwrap().1;
                        assert!(!out.contains(&format!(":{password}@")), "{out}");
                        format!("{scheme}://{}:***@{host}", user.split(':').next().unwrap())
                    }
                    _ => q.location.clone(),
                }
            }
        };
        assert!(out.contains(&expected), "{out}");
        assert!(
            out.contains(&format!("schema version {}", litejob::admin::SCHEMA_VERSION)),
            "{out}"
        );
        // Again, on the existing queue, as JSON.
        let v = json_of(q, &["init"], 0);
        assert_eq!(v["schema_version"], litejob::admin::SCHEMA_VERSION);
        assert_eq!(v["path"], expected);
    }
}

both! {
    /// New, then duplicates of the same id; every option in its column.
    fn enqueue_says_new_or_duplicate_and_counts_deliveries(q) {
        let out = ok(q, &["enqueue", "mail", "--key", "evt_1"], 0);
        assert_eq!(out.trim(), "enqueued 1");
        let out = ok(q, &["enqueue", "mail", "--key", "evt_1"], 0);
        assert_eq!(out.trim(), "duplicate 1");
        let v = json_of(q, &["enqueue", "mail", "--key", "evt_1"], 0);
        assert_eq!(v, json!({"id": 1, "duplicate": true}));
        let v = json_of(
            q,
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
        // Ids are never reused but may have gaps.
        assert_eq!(v["duplicate"], false);
        let id2 = v["id"].as_i64().unwrap();
        assert_eq!(
            q.count("SELECT deliveries FROM jobs WHERE idempotency_key = 'evt_1'"),
            3
        );
        let payload = q.strings(&format!("SELECT payload FROM jobs WHERE id = {id2}"));
        assert_eq!(
            serde_json::from_str::<Value>(&payload[0]).unwrap(),
            json!({"to": "a@b"})
        );
        assert_eq!(q.strings(&format!("SELECT queue FROM jobs WHERE id = {id2}")), ["q2"]);
        assert_eq!(q.count(&format!("SELECT priority FROM jobs WHERE id = {id2}")), -5);
        assert_eq!(q.count(&format!("SELECT max_attempts FROM jobs WHERE id = {id2}")), 4);
        let delay = q.count(&format!("SELECT run_at - created_at FROM jobs WHERE id = {id2}"));
        assert!((3_599_000..=3_601_000).contains(&delay), "{delay}");

        // --run-at, and a payload from a file.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        std::fs::write(&f, r#"{"from": "file"}"#).unwrap();
        let v = json_of(
            q,
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
            q.count("SELECT run_at FROM jobs WHERE idempotency_key = 'evt_3'"),
            1_893_456_000_000
        );
        assert_eq!(
            q.strings("SELECT payload FROM jobs WHERE idempotency_key = 'evt_3'"),
            [r#"{"from": "file"}"#],
            "the payload is kept as written"
        );
    }
}

both! {
    /// One scenario: a table of refused command lines, and what is not bad
    /// input.
    fn bad_input_exits_2_and_writes_nothing(q) {
        let dir = tempfile::tempdir().unwrap();
        // Bad input on a queue that does not exist yet does not even create it.
        let e = stderr_of(q, &["enqueue", "k", "--key", "a", "--payload", "{"], 2);
        assert!(e.contains("litejob: error:") && e.contains("JSON"), "{e}");
        assert!(!q.created(), "bad input created the queue");
        // Every rule the library checks is checked before the file is opened:
        // an empty queue name, a key over the length limit.
        let long_key = "k".repeat(2000);
        for args in [
            vec!["enqueue", "k", "--key", "a", "--queue", ""],
            vec!["enqueue", "k", "--key", long_key.as_str()],
        ] {
            stderr_of(q, &args, 2);
            assert!(!q.created(), "{args:?}: bad input created the queue");
        }

        init(q);
        let big = dir.path().join("big.json");
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
            let out = run(q, args);
            assert_eq!(out.status.code(), Some(2), "{}", show(args, &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "{}", show(args, &out));
            assert!(out.stdout.is_empty(), "{}", show(args, &out));
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);

        // A payload file that is not there is bad input too: exit 2,
        // nothing written, the file named.
        let missing = dir.path().join("missing.json");
        let e = stderr_of(
            q,
            &[
                "enqueue",
                "k",
                "--key",
                "a",
                "--payload-file",
                missing.to_str().unwrap(),
            ],
            2,
        );
        assert!(e.contains("missing.json"), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
    }
}

both! {
    /// `--payload-file -` reads stdin, and a message about it says
    /// "stdin", not "-".
    fn a_payload_from_stdin_is_named_stdin(q) {
        let enqueue = |input: &[u8]| {
            let mut child = Command::new(bin())
                .args(["--db", &q.location, "enqueue", "k", "--key", "s"])
                .args(["--payload-file", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(input).unwrap();
            child.wait_with_output().unwrap()
        };
        let out = enqueue(b"\xff\xfe");
        assert_eq!(out.status.code(), Some(2), "{}", show(&["enqueue"], &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("the payload in stdin is not UTF-8"), "{err}");
        assert!(!q.created(), "bad input created the queue");
        let out = enqueue(br#"{"from": "stdin"}"#);
        assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
        assert_eq!(
            q.strings("SELECT payload FROM jobs WHERE idempotency_key = 's'"),
            [r#"{"from": "stdin"}"#]
        );
    }
}
