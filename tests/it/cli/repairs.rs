//! Repairs: `retry` renews dead jobs, `cancel` takes only queued ones,
//! `outbox` lists rows and `outbox retry` renews a dead one, and `prune`
//! deletes old finished jobs and their attempts but keeps the ledger unless
//! asked.

use std::time::Duration;

use litejob::Backoff;
use litejob::{Outcome, Queue};
use serde_json::{json, Value};

use super::{json_of, run_jobs, state_of, stderr_of};
use crate::support::{litejob_ok, wait_until, TestDb, LONG};

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
