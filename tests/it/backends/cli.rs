//! The command on both backends: every subcommand takes `--db PATH` or
//! `--db postgres://…` (and `LITEJOB_DB`), prints the same text and JSON
//! fields, and exits with the same statuses (0 success, a duplicate too;
//! 1 failure; 2 bad input, with nothing written).

use std::process::{Command, Output};

use serde_json::Value;

use super::TestQueue;
use crate::both;
use crate::support::{bin, show};

/// Runs the real binary with `--db` naming the test's queue.
fn run(q: &TestQueue, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--db")
        .arg(&q.location)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob")
}

/// Runs it, checks the exit status, returns stdout.
fn ok(q: &TestQueue, args: &[&str], status: i32) -> String {
    let out = run(q, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs it with `--json`, checks the exit status, returns the document.
fn json(q: &TestQueue, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(q, &a, 0)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

both! {
    /// init, enqueue (new and duplicate), jobs, show and explain.
    fn the_producer_and_reader_commands_answer_alike(q) {
        let v = json(q, &["init"]);
        assert_eq!(v["schema_version"], litejob::SCHEMA_VERSION);
        assert_eq!(ok(q, &["enqueue", "mail", "--key", "evt_1", "--payload", r#"{"a":1}"#], 0).trim(), "enqueued 1");
        assert_eq!(ok(q, &["enqueue", "mail", "--key", "evt_1"], 0).trim(), "duplicate 1");
        let e = json(q, &["enqueue", "sms", "--key", "evt_2", "--queue", "fast", "--priority", "-2"]);
        assert_eq!((e["id"].as_i64(), e["duplicate"].as_bool()), (Some(2), Some(false)));
        let jobs = json(q, &["jobs"]);
        let ids: Vec<i64> = jobs["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [2, 1]);
        assert_eq!(json(q, &["jobs", "--kind", "sms"])["jobs"][0]["queue"], "fast");
        let shown = json(q, &["show", "1"]);
        assert_eq!(shown["job"]["deliveries"], 2);
        assert_eq!(shown["job"]["payload"], r#"{"a":1}"#);
        let text = ok(q, &["explain", "evt_1"], 0);
        assert!(text.starts_with("1 event, delivered twice, not run yet"), "{text}");
        let ex = json(q, &["explain", "evt_1"]);
        assert_eq!(ex["deliveries"], 2);
        // A missing id is a failure; nothing else changes.
        assert!(ok(q, &["show", "99"], 1).is_empty());
    }
}

both! {
    /// Bad input exits 2 and writes nothing.
    fn bad_input_exits_2_with_nothing_written(q) {
        ok(q, &["init"], 0);
        for args in [
            &["enqueue", "mail", "--key", "k", "--payload", "{nope"][..],
            &["enqueue", "", "--key", "k"][..],
            &["enqueue", "mail", "--key", "k", "--max-retries", "-1"][..],
            &["jobs", "--state", "asleep"][..],
            &["prune", "--older-than", "soon"][..],
        ] {
            ok(q, args, 2);
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
    }
}

both! {
    /// retry, cancel, outbox, stats and prune.
    fn the_repair_commands_answer_alike(q) {
        for key in ["d1", "d2", "q3"] {
            ok(q, &["enqueue", "mail", "--key", key], 0);
        }
        q.exec("UPDATE jobs SET state = 'dead', attempts = 2, finished_at = 1 WHERE idempotency_key LIKE 'd%'");
        assert_eq!(ok(q, &["retry", "1"], 0).trim(), "job 1 requeued");
        ok(q, &["retry", "1"], 1);
        assert_eq!(json(q, &["retry", "--dead"])["retried"], 1);
        assert_eq!(ok(q, &["cancel", "3"], 0).trim(), "job 3 cancelled");
        ok(q, &["cancel", "3"], 1);
        let stats = json(q, &["stats"]);
        assert_eq!((stats["jobs"]["queued"].as_i64(), stats["jobs"]["cancelled"].as_i64()), (Some(2), Some(1)));
        q.exec("UPDATE jobs SET finished_at = 1 WHERE id = 3");
        let pruned = json(q, &["prune", "--older-than", "1s"]);
        assert_eq!(pruned["jobs"], 1);
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 2);
        q.exec(
            "INSERT INTO outbox (key, kind, payload, state, attempts, max_attempts, job_id, next_attempt_at, created_at) \
             VALUES ('mail:1', 'send', '{}', 'dead', 2, 2, 1, 1, 1)",
        );
        let rows = json(q, &["outbox", "--state", "dead"]);
        assert_eq!(rows["outbox"].as_array().unwrap().len(), 1, "{rows}");
        let id = rows["outbox"][0]["id"].as_i64().unwrap().to_string();
        ok(q, &["outbox", "retry", &id], 0);
        assert_eq!(q.strings("SELECT state FROM outbox"), ["pending"]);
        ok(q, &["outbox", "retry", &id], 1);
    }
}

both! {
    /// `LITEJOB_DB` names the queue when `--db` is not given.
    fn litejob_db_names_the_queue(q) {
        let out = Command::new(bin())
            .args(["enqueue", "mail", "--key", "env"])
            .env("LITEJOB_DB", &q.location)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE idempotency_key = 'env'"), 1);
    }
}
