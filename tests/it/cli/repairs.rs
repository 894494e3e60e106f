//! Repairs: `retry` renews dead jobs, `cancel` takes only queued ones,
//! `outbox` lists rows and `outbox retry` renews a dead one, and `prune`
//! deletes old finished jobs and their attempts but keeps the ledger unless
//! asked; a duration without its unit is refused.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::{Backoff, Outcome};
use serde_json::{json, Value};

use super::{json_of, ok, run_jobs, state_of, stderr_of};
use crate::backends::handler;
use crate::both;
use crate::support::{wait_until, LONG};

both! {
    /// One scenario: dead jobs renewed one by one and by kind, a queued one
    /// cancelled (and, once old, pruned), a running one cancelled too, and
    /// every wrong state refused with status 1.
    fn retry_renews_dead_jobs_and_cancel_takes_only_unfinished_ones(q) {
        for (kind, key) in [("a", "d1"), ("a", "d2"), ("b", "d3"), ("a", "q4")] {
            ok(q, &["enqueue", kind, "--key", key], 0);
        }
        q.exec(
            "UPDATE jobs SET state = 'dead', attempts = 2, abandoned = 1, finished_at = 5, \
             run_at = 5, last_error = 'boom' WHERE idempotency_key LIKE 'd%'",
        );

        assert_eq!(ok(q, &["retry", "1"], 0).trim(), "job 1 requeued");
        assert_eq!(state_of(q, 1), "queued");
        assert_eq!(
            q.count(
                "SELECT count(*) FROM jobs WHERE id = 1 AND attempts = 0 AND abandoned = 0 \
                 AND finished_at IS NULL AND run_at > 5"
            ),
            1,
            "a renewed budget, due now"
        );
        // Not dead any more: refused, exit 1.
        let e = stderr_of(q, &["retry", "1"], 1);
        assert!(e.contains("queued") && e.contains("dead"), "{e}");
        stderr_of(q, &["retry", "99"], 1);

        // --dead --kind takes only that kind.
        let v = json_of(q, &["retry", "--dead", "--kind", "b"], 0);
        assert_eq!(v["retried"], 1);
        assert_eq!(state_of(q, 3), "queued");
        assert_eq!(state_of(q, 2), "dead");
        let out = ok(q, &["retry", "--dead"], 0);
        assert_eq!(out.trim(), "requeued 1 dead job");
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE state = 'dead'"), 0);

        // cancel: a job that has not finished.
        let v = json_of(q, &["cancel", "4"], 0);
        assert_eq!(v, json!({"id": 4, "state": "cancelled", "dependents_cancelled": 0}));
        assert_eq!(state_of(q, 4), "cancelled");
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE id = 4 AND finished_at IS NOT NULL"),
            1
        );
        let stats = json_of(q, &["stats"], 0);
        assert_eq!(
            (stats["jobs"]["queued"].as_i64(), stats["jobs"]["cancelled"].as_i64()),
            (Some(3), Some(1))
        );
        let e = stderr_of(q, &["cancel", "4"], 1);
        assert!(e.contains("cancelled") && e.contains("queued"), "{e}");
        let e = stderr_of(q, &["cancel", "99"], 1);
        assert!(e.contains("99"), "{e}");
        q.exec("UPDATE jobs SET state = 'running', lease_owner = 'x', lease_expires_at = 1 WHERE id = 1");
        let out = ok(q, &["cancel", "1"], 0);
        assert!(out.contains("job 1 cancelled while running"), "{out}");
        assert_eq!(state_of(q, 1), "cancelled");
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE id = 1 AND lease_owner IS NULL"),
            1
        );

        // A cancelled job is finished: once old, prune takes it.
        q.exec("UPDATE jobs SET finished_at = 1 WHERE id = 4");
        assert_eq!(json_of(q, &["prune", "--older-than", "1s"], 0)["jobs"], 1);
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 3);
    }
}

both! {
    /// A row whose effect failed out of attempts is listed (by state, as
    /// text and JSON), explained with its attempt, and renewed once.
    fn outbox_lists_rows_and_retries_a_dead_one(q) {
        ok(q, &["enqueue", "pay", "--key", "evt_9"], 0);
        let queue = q.open();
        let b = queue
            .runtime()
            .outbox_max_retries(0)
            .effect_backoff(
                Backoff::default()
                    .with_base(Duration::from_millis(5))
                    .with_max(Duration::from_millis(5))
                    .with_jitter(0.0),
            )
            .poll_interval(Duration::from_millis(10));
        let mut rt = handler(b, "pay", |tx, _: Value| {
            tx.outbox("send_receipt", "receipt:evt_9", &json!({"to": "a@b"}))?;
            Ok(Outcome::Done)
        })
        .effect("send_receipt", |_ctx, _v: Value| Err("smtp down".into()))
        .start()
        .unwrap();
        wait_until("outbox row dead", LONG, || {
            q.count("SELECT count(*) FROM outbox WHERE state = 'dead'") == 1
        });
        rt.stop();

        let v = json_of(q, &["outbox", "--state", "dead"], 0);
        let rows = v["outbox"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{v}");
        assert_eq!(rows[0]["kind"], "send_receipt");
        assert_eq!(rows[0]["key"], "receipt:evt_9");
        assert_eq!(rows[0]["last_error"], "smtp down");
        let id = rows[0]["id"].as_i64().unwrap();
        assert_eq!(json_of(q, &["outbox", "--state", "sent"], 0)["outbox"], json!([]));
        let text = ok(q, &["outbox"], 0);
        assert!(
            text.contains("receipt:evt_9") && text.contains("dead"),
            "{text}"
        );

        // explain shows the effect and its attempt.
        let v = json_of(q, &["explain", "evt_9"], 0);
        assert_eq!(
            v["summary"],
            "1 event, delivered once, run once, send_receipt dead after 1 attempt, not sent"
        );
        assert_eq!(v["outbox"][0]["state"], "dead");
        assert_eq!(v["outbox"][0]["attempts"][0]["outcome"], "failed");
        assert_eq!(v["outbox"][0]["attempts"][0]["error"], "smtp down");

        let out = ok(q, &["outbox", "retry", &id.to_string()], 0);
        assert!(out.contains("requeued"), "{out}");
        assert_eq!(q.strings(&format!("SELECT state FROM outbox WHERE id = {id}")), ["pending"]);
        assert_eq!(q.count(&format!("SELECT attempts FROM outbox WHERE id = {id}")), 0);
        let e = stderr_of(q, &["outbox", "retry", &id.to_string()], 1);
        assert!(e.contains("pending") && e.contains("dead"), "{e}");
        stderr_of(q, &["outbox", "retry", "999"], 1);
    }
}

both! {
    /// Old finished jobs and their attempts go, in batches; queued ones
    /// never; the ledger stays (a pruned key is still a duplicate, and
    /// explain still knows it) unless asked.
    fn prune_deletes_old_finished_jobs_and_attempts_but_keeps_the_ledger(q) {
        for key in ["p1", "p2", "p3"] {
            ok(q, &["enqueue", "k", "--key", key], 0);
        }
        run_jobs(q, "k");
        ok(q, &["enqueue", "k", "--key", "p4"], 0); // queued: never pruned
        assert_eq!(q.count("SELECT count(*) FROM attempts"), 3);
        // p1 finished two days ago; the others just now.
        q.exec("UPDATE jobs SET finished_at = finished_at - 2 * 86400000 WHERE idempotency_key = 'p1'");

        let v = json_of(q, &["prune", "--older-than", "1d"], 0);
        assert_eq!(v["jobs"], 1, "{v}");
        assert_eq!(v["job_attempts"], 1, "{v}");
        assert_eq!(v["ledger"], 0, "{v}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 3);
        assert_eq!(q.count("SELECT count(*) FROM attempts"), 2);

        let out = ok(q, &["prune", "--older-than", "0s", "--batch", "1"], 0);
        assert!(
            out.contains("pruned 2 jobs") && out.contains("ledger kept"),
            "{out}"
        );
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM attempts"), 0);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 3);
        let v = json_of(q, &["enqueue", "k", "--key", "p1"], 0);
        assert_eq!(v["duplicate"], true);
        let v = json_of(q, &["explain", "p2"], 0);
        assert_eq!(v["job"], Value::Null);
        assert!(
            v["summary"].as_str().unwrap().contains("committed once"),
            "{v}"
        );

        // Asked to, it prunes the ledger too.
        std::thread::sleep(Duration::from_millis(5));
        let v = json_of(
            q,
            &["prune", "--older-than", "0s", "--ledger-older-than", "0s"],
            0,
        );
        assert_eq!(v["ledger"], 3, "{v}");
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 0);
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE state = 'queued'"),
            1
        );
    }
}

both! {
    /// A duration without a unit is refused by every flag that takes one:
    /// exit 2, the units named, nothing written (`--older-than 1` pruned
    /// everything older than one second).
    fn a_duration_without_a_unit_is_refused_and_nothing_is_written(q) {
        ok(q, &["enqueue", "k", "--key", "u1"], 0);
        run_jobs(q, "k");
        q.exec("UPDATE jobs SET finished_at = finished_at - 60000");
        let cases = [
            vec!["prune", "--older-than", "1"],
            vec!["prune", "--older-than", "0s", "--ledger-older-than", "7"],
            vec!["enqueue", "k", "--key", "u2", "--delay", "30"],
            vec!["queue", "set", "default", "--rate", "10/60"],
            vec!["demo", "--events", "1", "--lease", "30"],
            // Refused for its bind too, so it never starts a server.
            vec!["serve", "--timeout", "10", "--bind", "0.0.0.0:0"],
        ];
        for args in &cases {
            let e = stderr_of(q, args, 2);
            assert!(
                e.contains("use a number with a unit (30s, 15m, 12h, 7d)"),
                "{args:?}: {e}"
            );
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0);
    }
}
