//! `litejob --db postgres://… copy --to FILE`: a demo's queue on
//! PostgreSQL lands in a new file row for row (ids, keys, partitions,
//! ledger, outbox, attempts, schedules, queue controls with their
//! partition limits, a partition's rate starts), the file's id counters continue
//! past every id the database gave out, the file verifies; a file that
//! holds litejob rows is refused untouched, a copy that cannot be made
//! leaves no file, and two files or two databases are bad input. A
//! workflow comes back whole (outputs, edges, its waiting and cancelled
//! dependents) and carries on in the file.

use std::path::Path;

use std::time::Duration;

use litejob::admin::{QueueLimits, Rate};
use litejob::NewJob;

use super::{a_workflow, assert_verifies, carry_on_with_a_workflow, json, run};
use crate::backends::{Engine, TestQueue};
use crate::postgres::copy::{dump, TABLES};
use crate::support::show;

/// One line per row of each table, the same SQL on both engines.
const ROWS: &[(&str, &str)] = &[
    (
        "jobs",
        "SELECT CAST(id AS TEXT) || ' ' || idempotency_key || ' ' || state || ' ' || \
         CAST(attempts AS TEXT) || ' ' || CAST(deliveries AS TEXT) || ' ' || \
         coalesce(CAST(finished_at AS TEXT), '-') FROM jobs ORDER BY id",
    ),
    (
        "processed_jobs",
        "SELECT key || ' ' || CAST(completed_at AS TEXT) || ' ' || \
         coalesce(CAST(job_id AS TEXT), '-') FROM processed_jobs ORDER BY key",
    ),
    (
        "outbox",
        "SELECT CAST(id AS TEXT) || ' ' || key || ' ' || state || ' ' || \
         coalesce(CAST(job_id AS TEXT), '-') || ' ' || payload FROM outbox ORDER BY id",
    ),
    (
        "attempts",
        "SELECT CAST(id AS TEXT) || ' ' || coalesce(CAST(job_id AS TEXT), '-') || ' ' || \
         coalesce(CAST(outbox_id AS TEXT), '-') || ' ' || outcome || ' ' || worker \
         FROM attempts ORDER BY id",
    ),
    (
        "schedules",
        "SELECT name || ' ' || cron || ' ' || tz || ' ' || catch_up FROM schedules ORDER BY name",
    ),
    (
        "queues",
        "SELECT name || ' ' || coalesce(CAST(concurrency AS TEXT), '-') || ' ' || \
         coalesce(CAST(partition_concurrency AS TEXT), '-') || ' ' || \
         coalesce(CAST(partition_rate_limit AS TEXT), '-') || '/' || \
         coalesce(CAST(partition_rate_window_ms AS TEXT), '-') FROM queues ORDER BY name",
    ),
    (
        "partitions",
        "SELECT idempotency_key || ' ' || partition_key FROM jobs \
         WHERE partition_key IS NOT NULL ORDER BY id",
    ),
    (
        "queue_starts",
        "SELECT queue || ' ' || CAST(started_at AS TEXT) || ' ' || \
         coalesce(partition_key, '-') FROM queue_starts ORDER BY queue, started_at",
    ),
];

fn file_rows(file: &Path, sql: &str) -> Vec<String> {
    let c = rusqlite::Connection::open(file).unwrap();
    let mut st = c.prepare(sql).unwrap();
    let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| r.unwrap()).collect()
}

it! {
    #[needs(Postgres)]
    fn a_demo_on_postgres_copied_to_a_file_has_the_same_rows_and_verifies() {
        let q = crate::postgres::pg();
        let pg = Path::new(&q.location);
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let summary = json(
            pg,
            &[
                "demo",
                "--events",
                "300",
                "--receipts",
                receipts.to_str().unwrap(),
            ],
            0,
        );
        assert_eq!(summary["invoices"], 300, "{summary}");
        // A queue control, a schedule, and an id given out and gone since
        // (as a prune leaves it): the file must never give it out again.
        run(
            pg,
            &["queue", "set", "mail", "--create", "--concurrency", "2"],
            0,
        );
        q.exec(
            "INSERT INTO schedules (name, cron, tz, kind, payload, created_at, updated_at) \
             VALUES ('digest', '0 6 * * *', 'Europe/Paris', 'digest', '{}', 1, 1)",
        );
        let gone = q
            .open()
            .enqueue(NewJob::new("gone", "gone-1", &json!({})))
            .unwrap()
            .id();
        q.exec("DELETE FROM jobs WHERE idempotency_key = 'gone-1'");
        // A queue limiting its partitions, a job in one, and a start the
        // partition's rate counts.
        let sync_limits = QueueLimits::new()
            .partition_concurrency(2)
            .partition_rate(Rate::new(10, Duration::from_secs(60)).unwrap());
        q.open()
            .admin()
            .set_queue_limits("sync", sync_limits)
            .unwrap();
        q.open()
            .enqueue(
                NewJob::new("sync", "sync-acme-1", &json!({}))
                    .with_queue("sync")
                    .with_partition("acme"),
            )
            .unwrap();
        q.exec(
            "INSERT INTO queue_starts (queue, started_at, partition_key) \
             VALUES ('sync', 1, 'acme')",
        );
        assert_verifies(pg);

        let file = dir.path().join("from-pg.db");
        let v = json(pg, &["copy", "--to", file.to_str().unwrap()], 0);
        assert_eq!(
            (
                &v["jobs"],
                &v["processed_jobs"],
                &v["outbox"],
                &v["schedules"],
                &v["queues"]
            ),
            (&json!(301), &json!(300), &json!(300), &json!(1), &json!(2)),
            "{v}"
        );
        assert!(
            !v["from"].as_str().unwrap().contains(":litejob@"),
            "no password: {v}"
        );
        for (table, sql) in ROWS {
            let (a, b) = (q.strings(sql), file_rows(&file, sql));
            assert!(!a.is_empty(), "{table}");
            assert_eq!(a, b, "{table}: the same rows");
        }
        assert_verifies(&file);
        let copied = litejob::Queue::open(&file).unwrap();
        let sync = copied
            .admin()
            .queue_controls()
            .unwrap()
            .into_iter()
            .find(|c| c.name == "sync")
            .unwrap();
        assert_eq!(
            (sync.partition_concurrency, sync.partition_rate),
            (Some(2), Some(Rate::new(10, Duration::from_secs(60)).unwrap())),
            "the partition limits, read back from the file"
        );
        drop(copied);

        // The file carries on past every id the database gave out.
        let queue = litejob::Queue::open(&file).unwrap();
        let next = queue
            .enqueue(NewJob::new("k", "after-the-copy", &json!({})))
            .unwrap();
        assert!(next.id() > gone, "{next:?} after {gone}");
        assert_eq!(
            queue
                .enqueue(NewJob::new("payment.succeeded", "evt_000001", &json!({})))
                .unwrap()
                .id(),
            q.count("SELECT id FROM jobs WHERE idempotency_key = 'evt_000001'"),
            "a copied key is a duplicate of its job"
        );
        drop(queue);

        // A second copy into the same file: refused, exit 1, the file as it was.
        let before = file_rows(&file, ROWS[0].1);
        let out = crate::support::litejob(pg, &["copy", "--to", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", show(&["copy"], &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("already holds litejob rows"), "{err}");
        assert_eq!(file_rows(&file, ROWS[0].1), before);
    }
}

it! {
    #[needs(Postgres)]
    fn a_copy_to_a_file_that_cannot_be_made_leaves_nothing_and_bad_pairs_are_refused() {
        let q = crate::postgres::pg();
        let pg = Path::new(&q.location);
        run(pg, &["enqueue", "k", "--key", "one"], 0);
        let dir = tempfile::tempdir().unwrap();
        let missing_dir = dir.path().join("nope").join("q.db");
        run(pg, &["copy", "--to", missing_dir.to_str().unwrap()], 1);
        assert!(!dir.path().join("nope").exists());
        run(pg, &["copy", "--to", dir.path().to_str().unwrap()], 2);
        // Two files, or two databases: bad input, nothing written.
        let a = dir.path().join("a.db");
        run(&a, &["enqueue", "k", "--key", "one"], 0);
        let b = dir.path().join("b.db");
        run(&a, &["copy", "--to", b.to_str().unwrap()], 2);
        assert!(!b.exists());
        run(pg, &["copy", "--to", &q.location], 2);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.db"], "nothing but the one file");
    }
}

it! {
    /// A workflow on PostgreSQL (a fan-in with outputs, a waiting
    /// dependent, a dependent cancelled by a dead dependency) lands in a
    /// new file row for row, outputs and edges included; the file
    /// verifies, and its waiting job is queued when its last dependency
    /// runs there.
    #[needs(Postgres)]
    fn a_workflow_on_postgres_copied_to_a_file_keeps_its_outputs_and_edges_and_carries_on() {
        let q = crate::postgres::pg();
        a_workflow(&q);
        let pg = Path::new(&q.location);
        let file = TestQueue::new(Engine::Sqlite);
        let v = json(pg, &["copy", "--to", &file.location], 0);
        assert_eq!((&v["jobs"], &v["job_dependencies"]), (&json!(7), &json!(5)), "{v}");
        for (table, _, _) in TABLES {
            assert_eq!(
                dump(&q, table),
                dump(&file, table),
                "{table}: the same rows, column for column"
            );
        }
        assert_eq!(
            file.count("SELECT count(*) FROM jobs WHERE output IS NOT NULL"),
            3,
            "the fan-in's outputs"
        );
        let text = run(pg, &["copy", "--to", &format!("{}.again", file.location)], 0);
        assert!(text.contains("5 workflow edges"), "{text}");
        assert_verifies(Path::new(&file.location));
        carry_on_with_a_workflow(&file.open());
        assert_verifies(Path::new(&file.location));
    }
}
