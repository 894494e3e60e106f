//! `litejob verify`: a queue that went through runs, retries, failures and
//! effects verifies on both engines, and so does a workflow; each
//! invariant an operator's SQL can break, the workflows' among them, is
//! reported with its count and an example id (exit 1), and so is a
//! partition running more jobs than its cap; a copy whose
//! succeeded job lost its ledger row fails; the storage's own check is
//! amcheck on PostgreSQL where it is installed.

use std::path::Path;
use std::time::Duration;

use litejob::admin::{Invariant, QueueLimits};
use litejob::{NewJob, Outcome};
use serde_json::Value;

use super::{a_workflow, assert_verifies, json, run, wf, DemoRows};
use crate::backends::{handler, Runtimes, TestQueue};
use crate::both;
use crate::support::{wait_until, LONG};

/// The broken invariants of a `verify --json` document: name → (count,
/// example).
fn broken(v: &Value) -> Vec<(String, u64, String)> {
    v["broken"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["count"].as_u64().unwrap(),
                b["example"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Six jobs run: four succeed (each writing an outbox row whose effect
/// runs), one fails for good (dead), one is cancelled before it runs.
fn a_queue_that_lived(q: &TestQueue) {
    let queue = q.open();
    for i in 0..4 {
        queue
            .enqueue(NewJob::new("ok", format!("ok-{i}"), &i))
            .unwrap();
    }
    queue
        .enqueue(NewJob::new("bad", "bad-1", &0).with_max_retries(1))
        .unwrap();
    let cancelled = queue.enqueue(NewJob::new("never", "never-1", &0)).unwrap();
    queue.admin().cancel_job(cancelled.id()).unwrap();
    let b = queue
        .runtime()
        .poll_interval(Duration::from_millis(10))
        .backoff(crate::support::tiny_backoff())
        .effect("mail", |_, _: Value| Ok(()));
    let b = handler(b, "ok", |tx, _: Value| {
        let key = tx.job().key.clone();
        tx.outbox("mail", &format!("mail:{key}"), &key)?;
        Ok(Outcome::Done)
    });
    let mut rt = handler(b, "bad", |_, _: Value| Err("always".into()))
        .start()
        .unwrap();
    wait_until("every job and effect finished", LONG, || {
        q.count("SELECT count(*) FROM jobs WHERE state IN ('succeeded', 'dead', 'cancelled')") == 6
            && q.count("SELECT count(*) FROM outbox WHERE state = 'sent'") == 4
    });
    rt.stop();
}

both! {
    /// Sound after real work; then each cross-table invariant broken by
    /// SQL is reported, with its count and an example id, and exit 1.
    fn verify_finds_each_broken_invariant_with_a_count_and_an_example(q) {
        a_queue_that_lived(q);
        let db = Path::new(&q.location);
        let v = json(db, &["verify"], 0);
        assert_eq!(v["broken"], json!([]), "{v}");
        assert_eq!(v["schema_version"], litejob::admin::SCHEMA_VERSION, "{v}");
        let report = q.open().admin().verify().unwrap();
        assert!(report.is_sound(), "{report:?}");

        let id = |key: &str| q.count(&format!("SELECT id FROM jobs WHERE idempotency_key = '{key}'"));
        let (ok0, ok1, bad) = (id("ok-0"), id("ok-1"), id("bad-1"));
        // A succeeded job made dead by hand: its outbox row, its ledger
        // row and its successful run now belong to a job that did not
        // succeed.
        q.exec(&format!("UPDATE jobs SET state = 'dead' WHERE id = {ok0}"));
        // A dead job's failed run marked running: it is not its job's
        // current run.
        let stale = q.count(&format!("SELECT min(id) FROM attempts WHERE job_id = {bad}"));
        q.exec(&format!(
            "UPDATE attempts SET outcome = 'running', finished_at = NULL WHERE id = {stale}"
        ));
        // A sent outbox row whose sending attempt is gone.
        let mail = q.count("SELECT id FROM outbox WHERE key = 'mail:ok-1'");
        q.exec(&format!("DELETE FROM attempts WHERE outbox_id = {mail}"));
        // A running job whose current attempt is another job's finished run.
        let other = q.count(&format!("SELECT min(id) FROM attempts WHERE job_id = {ok1}"));
        q.exec(&format!(
            "INSERT INTO jobs (id, kind, idempotency_key, payload, state, run_at, created_at, \
             lease_owner, lease_expires_at, current_attempt) \
             VALUES (900, 'ok', 'stray', '{{}}', 'running', 1, 1, 'x', 99999999999999, {other})"
        ));
        let v = json(db, &["verify"], 1);
        let found = broken(&v);
        let names: Vec<&str> = found.iter().map(|b| b.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "ledger_row_of_another_job",
                "outbox_row_of_unsucceeded_job",
                "running_job_on_ended_run",
                "running_run_not_current",
                "successful_run_of_unsucceeded_job",
                "sent_row_without_successful_send",
            ],
            "{v}"
        );
        for (name, count, example) in &found {
            assert_eq!(*count, 1, "{name}: {v}");
            let want = match name.as_str() {
                "ledger_row_of_another_job" => "ok-0".to_string(),
                "outbox_row_of_unsucceeded_job" => {
                    q.count("SELECT id FROM outbox WHERE key = 'mail:ok-0'").to_string()
                }
                "running_job_on_ended_run" => "900".to_string(),
                "running_run_not_current" => stale.to_string(),
                "sent_row_without_successful_send" => mail.to_string(),
                _ => ok0.to_string(),
            };
            assert_eq!(example, &want, "{name}: {v}");
        }
        // The text names each, with its count and example.
        let text = run(db, &["verify"], 1);
        assert!(text.contains("BROKEN: 6 invariants"), "{text}");
        assert!(text.contains("job 900"), "{text}");
    }
}

both! {
    /// A workflow (its waiting dependent, its dependent cancelled by a
    /// dead dependency) is sound; then each workflow invariant broken by
    /// SQL is reported with its count and an example id, and the cases
    /// that are no fault (a dead dependent that never ran) are not.
    fn verify_finds_each_broken_workflow_invariant_with_a_count_and_an_example(q) {
        a_workflow(q);
        let db = Path::new(&q.location);
        let v = json(db, &["verify"], 0);
        assert_eq!(v["broken"], json!([]), "{v}");
        let checked: Vec<&str> =
            v["checked"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        for name in [
            "waiting_job_not_promoted",
            "dependent_ahead_of_dependency",
            "waiting_job_not_cancelled",
        ] {
            assert!(checked.contains(&name), "{name}: {v}");
        }

        let id = |key: &str| q.count(&format!("SELECT id FROM jobs WHERE idempotency_key = '{key}'"));
        let (later, report) = (id(wf::LATER), id(wf::REPORT));
        let (fragile, after) = (id(wf::FRAGILE), id(wf::AFTER_FRAGILE));
        // Never promoted: the waiting report loses its edge to the queued
        // job, so it waits only on the fan-in, which succeeded; and a
        // waiting job without any edge, which nothing will ever queue.
        q.exec(&format!(
            "DELETE FROM job_dependencies WHERE job_id = {report} AND depends_on = {later}"
        ));
        let job = |id: i64, key: &str, state: &str, finished: &str| {
            format!(
                "INSERT INTO jobs (id, kind, idempotency_key, payload, state, run_at, created_at, \
                 finished_at) VALUES ({id}, 'report', '{key}', '{{}}', '{state}', 1, 1, {finished})"
            )
        };
        let edge = |id: i64, on: i64| {
            format!("INSERT INTO job_dependencies (job_id, depends_on) VALUES ({id}, {on})")
        };
        q.exec(&job(903, "alone", "waiting", "NULL"));
        // Ahead of its dependency: the job cancelled by the dead one set
        // back to queued; a job dead after a run of its own whose
        // dependency is still queued. Not a fault: one dead without any
        // run (it never started).
        q.exec(&format!(
            "UPDATE jobs SET state = 'queued', finished_at = NULL, last_error = NULL \
             WHERE id = {after}"
        ));
        q.exec(&job(902, "ran-early", "dead", "2"));
        q.exec(&edge(902, later));
        q.exec(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, \
             outcome, error) VALUES (902, 1, 'ran-early', 'w', 1, 2, 'failed', 'x')",
        );
        q.exec(&job(901, "never-ran", "dead", "2"));
        q.exec(&edge(901, later));
        // Never cancelled: a job waiting on the dead one.
        q.exec(&job(900, "waits-on-dead", "waiting", "NULL"));
        q.exec(&edge(900, fragile));

        let v = json(db, &["verify"], 1);
        assert_eq!(
            broken(&v),
            [
                ("waiting_job_not_promoted".to_string(), 2, report.to_string()),
                ("dependent_ahead_of_dependency".to_string(), 2, after.to_string()),
                ("waiting_job_not_cancelled".to_string(), 1, "900".to_string()),
            ],
            "{v}"
        );
        for b in v["broken"].as_array().unwrap() {
            assert_eq!(b["table"], "jobs", "{b}");
        }
        let r = q.open().admin().verify().unwrap();
        assert_eq!(r.broken.len(), 3, "{r:?}");
        let text = run(db, &["verify"], 1);
        assert!(text.contains("BROKEN: 3 invariants"), "{text}");
        assert!(text.contains(&format!("job {after}")), "{text}");
    }
}

both! {
    /// A queue capping its partitions at one running job each verifies
    /// clean after its jobs ran, and with one partition at its cap, jobs
    /// without a partition running beside it and an uncapped queue's
    /// partition running two; a second running job in the capped partition
    /// is reported with the queue, the partition and the counts, and exit 1.
    fn verify_finds_a_partition_running_more_jobs_than_its_cap(q) {
        let queue = q.open();
        queue
            .admin()
            .set_queue_limits("sync", QueueLimits::new().partition_concurrency(1))
            .unwrap();
        let job = |key: &str, queue: &str, partition: Option<&str>| {
            let j = NewJob::new("sync", key, &0).with_queue(queue);
            match partition {
                Some(p) => j.with_partition(p),
                None => j,
            }
        };
        for i in 0..4 {
            let partition = if i % 2 == 0 { "acme" } else { "globex" };
            queue.enqueue(job(&format!("ran-{i}"), "sync", Some(partition))).unwrap();
        }
        let b = queue.runtime().workers(4).poll_interval(Duration::from_millis(10));
        let mut rt = handler(b, "sync", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        wait_until("the partitioned jobs ran", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 4
        });
        rt.stop();
        let db = Path::new(&q.location);
        let v = json(db, &["verify"], 0);
        assert_eq!(v["broken"], json!([]), "{v}");
        let checked: Vec<&str> =
            v["checked"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert!(checked.contains(&"partition_over_cap"), "{v}");

        for (key, on, partition) in [
            ("acme-1", "sync", Some("acme")),
            ("acme-2", "sync", Some("acme")),
            ("globex-1", "sync", Some("globex")),
            ("plain-1", "sync", None),
            ("plain-2", "sync", None),
            ("free-1", "free", Some("acme")),
            ("free-2", "free", Some("acme")),
        ] {
            queue.enqueue(job(key, on, partition)).unwrap();
        }
        // Running as a claim leaves a job, lease and all; the second of
        // acme's stays queued for now.
        let start = |key: &str| {
            q.exec(&format!(
                "UPDATE jobs SET state = 'running', lease_owner = 'w', \
                 lease_expires_at = 99999999999999 WHERE idempotency_key = '{key}'"
            ))
        };
        for key in ["acme-1", "globex-1", "plain-1", "plain-2", "free-1", "free-2"] {
            start(key);
        }
        let v = json(db, &["verify"], 0);
        assert_eq!(v["broken"], json!([]), "at or under every cap: {v}");

        start("acme-2");
        let v = json(db, &["verify"], 1);
        assert_eq!(
            broken(&v),
            [(
                "partition_over_cap".to_string(),
                1,
                "queue sync, partition acme: 2 running, cap 1".to_string()
            )],
            "{v}"
        );
        assert_eq!(v["broken"][0]["table"], "", "{v}");
        let r = queue.admin().verify().unwrap();
        assert_eq!(r.broken.len(), 1, "{r:?}");
        assert_eq!(r.broken[0].invariant, Invariant::PartitionOverCap);
        let text = run(db, &["verify"], 1);
        assert!(
            text.contains("partition_over_cap")
                && text.contains("queue sync, partition acme: 2 running, cap 1"),
            "{text}"
        );
    }
}

it! {
    fn verify_exits_1_on_a_copy_whose_succeeded_job_lost_its_ledger_row() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.db");
        let summary = json(&db, &["demo", "--events", "200"], 0);
        assert_eq!(summary["invoices"], 200, "{summary}");
        let copy = dir.path().join("copy.db");
        run(&db, &["backup", copy.to_str().unwrap()], 0);
        assert_verifies(&copy);
        DemoRows::of(&copy).assert_one_moment("the copy");

        // The job that finished last loses its ledger row, as an operator's
        // stray DELETE in the sqlite3 shell would do it.
        let c = rusqlite::Connection::open(&copy).unwrap();
        let (job, key): (i64, String) = c
            .query_row(
                "SELECT id, idempotency_key FROM jobs ORDER BY finished_at DESC, id DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        drop(c);
        let delete = format!("DELETE FROM processed_jobs WHERE key = '{key}'");
        rusqlite::Connection::open(&copy)
            .unwrap()
            .execute_batch(&delete)
            .unwrap();
        let v = json(&copy, &["verify"], 1);
        assert_eq!(
            broken(&v),
            [(
                "succeeded_job_without_ledger_row".to_string(),
                1,
                job.to_string()
            )],
            "{v}"
        );
        // The positional FILE wins over --db; the original still verifies.
        let out = crate::support::litejob(&db, &["verify", copy.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("succeeded_job_without_ledger_row") && text.contains(&format!("job {job}")),
            "{text}"
        );
        assert_verifies(&db);
    }
}

it! {
    /// Where the server has amcheck, a database it is installed in gets its
    /// indexes checked by it.
    #[needs(Postgres)]
    fn on_postgres_verify_checks_the_indexes_with_amcheck_where_it_is_installed() {
        let q = crate::postgres::pg();
        drop(q.open());
        let available =
            q.count("SELECT count(*) FROM pg_available_extensions WHERE name = 'amcheck'") == 1;
        let v = json(Path::new(&q.location), &["verify"], 0);
        if !available {
            eprintln!("amcheck is not available on this server: only its absence is checked");
            assert!(v["integrity"].as_str().unwrap().starts_with("none"), "{v}");
            return;
        }
        // In the test's own schema, dropped with it.
        q.exec("CREATE EXTENSION IF NOT EXISTS amcheck");
        let v = json(Path::new(&q.location), &["verify"], 0);
        let how = v["integrity"].as_str().unwrap();
        assert!(how.starts_with("amcheck: bt_index_check of"), "{v}");
    }
}

it! {
    /// A job deleted in the `sqlite3` shell (foreign keys off, its
    /// default) leaves its steps' rows; verify names them, and the job
    /// the next id would get their results back otherwise.
    #[needs(Sqlite3)]
    fn verify_names_the_step_rows_a_job_deleted_in_the_shell_left_behind() {
        let q = TestQueue::new(crate::backends::Engine::Sqlite);
        let queue = q.open();
        let b = queue.runtime().poll_interval(Duration::from_millis(10));
        let mut rt = crate::backends::handler_with_prepare(
            b,
            "order",
            |ctx, _: Value| ctx.step("charge", |_| Ok::<_, String>(1_i64)),
            |_, _: i64| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let id = queue.enqueue(NewJob::new("order", "order:1", &0)).unwrap().id();
        crate::support::wait_state(&queue, id, litejob::JobState::Succeeded);
        rt.stop();
        drop(queue);
        let db = Path::new(&q.location);
        assert_verifies(db);
        crate::support::sqlite3(db, &format!("DELETE FROM jobs WHERE id = {id}"));
        let v = json(db, &["verify"], 1);
        let found = broken(&v);
        assert!(
            found.contains(&("step_of_missing_job".to_string(), 1, format!("job {id}, step charge"))),
            "{v}"
        );
        let text = run(db, &["verify"], 1);
        assert!(text.contains("step_of_missing_job"), "{text}");
    }
}

both! {
    /// A job cancelled while it ran verifies clean, its run `cancelled`;
    /// the job set to another state by SQL leaves a cancelled run of a job
    /// that is not cancelled, reported with the run's id, and exit 1.
    fn verify_finds_a_cancelled_run_of_a_job_that_is_not_cancelled(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("k", "k-1", &0)).unwrap().id();
        q.exec(&format!(
            "INSERT INTO attempts (id, job_id, attempt, key, worker, started_at) \
             VALUES (77, {id}, 1, 'k-1', 'w', 1); \
             UPDATE jobs SET state = 'running', attempts = 1, lease_owner = 'x', \
             lease_expires_at = 99999999999999, current_attempt = 77 WHERE id = {id}"
        ));
        assert_eq!(queue.admin().cancel_job(id).unwrap(), litejob::JobState::Running);
        let db = Path::new(&q.location);
        let v = json(db, &["verify"], 0);
        let checked: Vec<&str> =
            v["checked"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        assert!(checked.contains(&"cancelled_run_of_uncancelled_job"), "{v}");
        q.exec(&format!("UPDATE jobs SET state = 'dead' WHERE id = {id}"));
        let v = json(db, &["verify"], 1);
        assert_eq!(
            broken(&v),
            [("cancelled_run_of_uncancelled_job".to_string(), 1, "77".to_string())],
            "{v}"
        );
        assert_eq!(v["broken"][0]["table"], "attempts", "{v}");
    }
}
