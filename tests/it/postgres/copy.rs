//! `litejob copy --to postgres://…` and `Queue::copy_to`: a queue file's
//! jobs (in every state, with their outputs and partitions), workflow
//! edges, ledger, outbox rows, attempts, schedules and queue controls
//! (partition limits included, with their rates' starts) and durable
//! steps' results land in an empty database column for column, ids and keys
//! kept; a copied key is a duplicate there, a new row never takes an id
//! the file gave out, a copied workflow carries on there; a copy is all or
//! nothing, and refused (nothing written) into a database that holds
//! litejob rows already, from a missing file, or to a bad URL. [`dump`]
//! reads every column of every table on either engine, for the copy the
//! other way too.

use crate::backends::Runtimes;
use std::process::{Command, Output};
use std::time::Duration;

use litejob::admin::Rate;

use litejob::pg::{Client, NoTls};
use litejob::{Enqueued, NewJob, Outcome};
use serde_json::{json, Value};

use super::pg;
use crate::backends::{Engine, TestQueue};
use crate::support::{bin, show, wait_until, LONG};

/// A file holding every state of every table, with NULLs and values in the
/// nullable columns, non-ASCII text, and ids given out and deleted since
/// (jobs 500, outbox 50, attempts 900: `AUTOINCREMENT` remembers them);
/// job 6 waits on jobs 1 and 3, job 5 was cancelled by job 4's death,
/// job 7 while it ran (its run `cancelled`); jobs 1, 2 and 7 have timeouts.
/// Jobs 1 and 2 have partitions, queue `fast` limits its partitions as
/// well as itself and `tenants` only its partitions, and two of `fast`'s
/// starts are a partition's.
const FILE_ROWS: &str = r#"
INSERT INTO jobs (id, queue, kind, idempotency_key, payload, state, priority, run_at, attempts,
    max_attempts, abandoned, deliveries, last_error, created_at, finished_at, lease_owner,
    lease_expires_at, current_attempt, output, partition_key, timeout_ms) VALUES
 (1, 'default', 'mail', 'q-1', '{"a":1}', 'queued', 0, 1000, 0, 2, 0, 1, NULL, 900, NULL, NULL, NULL, NULL, NULL, 'tenant-é ☃', 30000),
 (2, 'fast', 'mail', 'r-2', '{"b":[1,2]}', 'running', -5, 1000, 1, 3, 1, 4, 'abandoned: the lease expired', 900, NULL, '123-abcd', 99999999999999, 3, NULL, 'acme', 250),
 (3, 'default', 'mail', 's-3', '{}', 'succeeded', 0, 1000, 1, 2, 0, 2, NULL, 900, 1500, NULL, NULL, NULL, '{"sent":["a","é ☃"],"n":1.5}', NULL, NULL),
 (4, 'default', 'sms', 'd-4', '{"x":"é ☃"}', 'dead', 2, 1000, 2, 2, 0, 1, 'smtp 451 «busy»', 900, 1600, NULL, NULL, NULL, NULL, NULL, NULL),
 (5, 'default', 'sms', 'c-5', '{}', 'cancelled', 0, 5000, 0, 2, 0, 1, 'cancelled: its dependency "d-4" (job 4) ended dead', 900, 1700, NULL, NULL, NULL, NULL, NULL, NULL),
 (6, 'default', 'report', 'w-6', '{}', 'waiting', 0, 1000, 0, 2, 0, 1, NULL, 900, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (7, 'default', 'sms', 'x-7', '{}', 'cancelled', 0, 1000, 1, 2, 0, 1, 'cancelled while running', 900, 1800, NULL, NULL, NULL, NULL, NULL, 60000),
 (500, 'default', 'mail', 'pruned-500', '{}', 'succeeded', 0, 1, 1, 2, 0, 1, NULL, 1, 2, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO job_dependencies (job_id, depends_on) VALUES (5, 4), (6, 1), (6, 3);
INSERT INTO job_steps (job_id, name, attempt, output, started_at, finished_at, reused_in) VALUES
 (2, 'charge', 1, '"ch_1 é ☃"', 1000, 1010, '[2]'),
 (3, 'charge', 1, '{"id":"ch_3","cents":4200}', 1300, 1310, NULL),
 (3, 'book', 1, '77', 1320, 1330, NULL);
INSERT INTO processed_jobs (key, completed_at, job_id) VALUES
 ('s-3', 1500, 3), ('gone-9', 1200, 400), ('no-job', 1100, NULL);
INSERT INTO outbox (id, key, kind, payload, state, attempts, max_attempts, job_id, next_attempt_at,
    last_error, created_at, sent_at, lease_owner, lease_expires_at, current_attempt) VALUES
 (1, 'mail:s-3', 'mail', '{"to":"a"}', 'sent', 1, 2, 3, 1500, NULL, 1500, 1550, NULL, NULL, NULL),
 (2, 'mail:p', 'mail', '{}', 'pending', 1, 3, 3, 2000, 'timeout', 1500, NULL, NULL, NULL, NULL),
 (3, 'mail:sending', 'mail', '{}', 'sending', 1, 2, NULL, 2000, NULL, 1500, NULL, '123-abcd', 99999999999, 7),
 (4, 'mail:dead', 'mail', '{}', 'dead', 2, 2, 4, 2000, '550 no such user', 1500, NULL, NULL, NULL, NULL),
 (50, 'mail:gone', 'mail', '{}', 'sent', 1, 2, NULL, 1, NULL, 1, 2, NULL, NULL, NULL);
INSERT INTO attempts (id, job_id, outbox_id, attempt, key, worker, started_at, finished_at,
    outcome, error) VALUES
 (1, 2, NULL, 1, 'r-2', '11/litejob-worker-1', 1000, 1100, 'abandoned', 'abandoned: the lease expired'),
 (3, 2, NULL, 1, 'r-2', '12/litejob-worker-2', 1200, NULL, 'running', NULL),
 (4, 3, NULL, 1, 's-3', '11/litejob-worker-1', 1400, 1500, 'succeeded', NULL),
 (5, 4, NULL, 1, 'd-4', '11/litejob-worker-1', 1000, 1100, 'failed', 'smtp 451'),
 (6, 4, NULL, 2, 'd-4', '11/litejob-worker-1', 1200, 1300, 'panicked', 'boom'),
 (7, NULL, 3, 1, 'mail:sending', '11/litejob-effect-1', 1500, NULL, 'running', NULL),
 (8, NULL, 1, 1, 'mail:s-3', '11/litejob-effect-1', 1500, 1550, 'succeeded', NULL),
 (9, 3, NULL, 1, 's-3', '11/litejob-worker-1', 1300, 1350, 'duplicate', 'duplicate'),
 (10, 1, NULL, 1, 'q-1', '11/litejob-worker-1', 1000, 1001, 'released', 'released at shutdown'),
 (11, 7, NULL, 1, 'x-7', '11/litejob-worker-1', 1700, 1800, 'cancelled', 'cancelled while running'),
 (900, 500, NULL, 1, 'pruned-500', '11/litejob-worker-1', 1, 2, 'succeeded', NULL);
INSERT INTO schedules (name, cron, tz, kind, payload, queue, priority, max_retries, catch_up,
    catch_up_window_ms, last_slot_at, next_slot_at, created_at, updated_at) VALUES
 ('digest', '0 6 * * *', 'Europe/Paris', 'digest', '{}', 'mail', 0, 3, 'window', 3600000, 1000, 2000, 900, 950),
 ('hourly', '@hourly', 'UTC', 'tick', '{"a":1}', 'default', -1, NULL, 'latest', NULL, NULL, 5000, 900, 900);
INSERT INTO queues (name, paused, concurrency, rate_limit, rate_window_ms, updated_at,
    partition_concurrency, partition_rate_limit, partition_rate_window_ms) VALUES
 ('mail', 1, 2, NULL, NULL, 950, NULL, NULL, NULL),
 ('fast', 0, NULL, 100, 60000, 960, 1, 5, 1000),
 ('tenants', 0, NULL, NULL, NULL, 970, 3, NULL, NULL);
INSERT INTO queue_starts (queue, started_at, partition_key) VALUES
 ('fast', 1000, NULL), ('fast', 1001, 'acme'), ('fast', 1002, 'acme');
DELETE FROM jobs WHERE id = 500;
DELETE FROM outbox WHERE id = 50;
"#;

/// A table: its name, the order its rows are compared in, and every
/// column (`i`: integer, `t`: text).
pub(crate) type Table = (&'static str, &'static str, &'static [(&'static str, char)]);

/// Every column of every table.
pub(crate) const TABLES: &[Table] = &[
    (
        "jobs",
        "id",
        &[
            ("id", 'i'),
            ("queue", 't'),
            ("kind", 't'),
            ("idempotency_key", 't'),
            ("payload", 't'),
            ("state", 't'),
            ("priority", 'i'),
            ("run_at", 'i'),
            ("attempts", 'i'),
            ("max_attempts", 'i'),
            ("abandoned", 'i'),
            ("deliveries", 'i'),
            ("last_error", 't'),
            ("created_at", 'i'),
            ("finished_at", 'i'),
            ("lease_owner", 't'),
            ("lease_expires_at", 'i'),
            ("current_attempt", 'i'),
            ("output", 't'),
            ("partition_key", 't'),
            ("timeout_ms", 'i'),
        ],
    ),
    (
        "processed_jobs",
        "key",
        &[("key", 't'), ("completed_at", 'i'), ("job_id", 'i')],
    ),
    (
        "outbox",
        "id",
        &[
            ("id", 'i'),
            ("key", 't'),
            ("kind", 't'),
            ("payload", 't'),
            ("state", 't'),
            ("attempts", 'i'),
            ("max_attempts", 'i'),
            ("job_id", 'i'),
            ("next_attempt_at", 'i'),
            ("last_error", 't'),
            ("created_at", 'i'),
            ("sent_at", 'i'),
            ("lease_owner", 't'),
            ("lease_expires_at", 'i'),
            ("current_attempt", 'i'),
        ],
    ),
    (
        "attempts",
        "id",
        &[
            ("id", 'i'),
            ("job_id", 'i'),
            ("outbox_id", 'i'),
            ("attempt", 'i'),
            ("key", 't'),
            ("worker", 't'),
            ("started_at", 'i'),
            ("finished_at", 'i'),
            ("outcome", 't'),
            ("error", 't'),
        ],
    ),
    (
        "schedules",
        "name",
        &[
            ("name", 't'),
            ("cron", 't'),
            ("tz", 't'),
            ("kind", 't'),
            ("payload", 't'),
            ("queue", 't'),
            ("priority", 'i'),
            ("max_retries", 'i'),
            ("catch_up", 't'),
            ("catch_up_window_ms", 'i'),
            ("last_slot_at", 'i'),
            ("next_slot_at", 'i'),
            ("created_at", 'i'),
            ("updated_at", 'i'),
        ],
    ),
    (
        "queues",
        "name",
        &[
            ("name", 't'),
            ("paused", 'b'),
            ("concurrency", 'i'),
            ("rate_limit", 'i'),
            ("rate_window_ms", 'i'),
            ("updated_at", 'i'),
            ("partition_concurrency", 'i'),
            ("partition_rate_limit", 'i'),
            ("partition_rate_window_ms", 'i'),
        ],
    ),
    (
        "queue_starts",
        "queue, started_at",
        &[("queue", 't'), ("started_at", 'i'), ("partition_key", 't')],
    ),
    (
        "job_dependencies",
        "job_id, depends_on",
        &[("job_id", 'i'), ("depends_on", 'i')],
    ),
    (
        "job_steps",
        "job_id, name",
        &[
            ("job_id", 'i'),
            ("name", 't'),
            ("attempt", 'i'),
            ("output", 't'),
            ("started_at", 'i'),
            ("finished_at", 'i'),
            ("reused_in", 't'),
        ],
    ),
];

/// One stored value, as plain SQL reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    /// A boolean: 0 or 1 in the file, `boolean` in PostgreSQL.
    Bool(bool),
}

/// Every row of `table`, every column, in key order.
pub(crate) fn dump(q: &TestQueue, table: &str) -> Vec<Vec<Cell>> {
    let (_, order, cols) = TABLES.iter().find(|t| t.0 == table).unwrap();
    let names: Vec<&str> = cols.iter().map(|c| c.0).collect();
    let sql = format!("SELECT {} FROM {table} ORDER BY {order}", names.join(", "));
    match q.engine {
        Engine::Sqlite => {
            let c = rusqlite::Connection::open(&q.location).unwrap();
            let mut st = c.prepare(&sql).unwrap();
            let rows = st
                .query_map([], |r| {
                    cols.iter()
                        .enumerate()
                        .map(|(i, (_, ty))| {
                            Ok(match ty {
                                'i' => Cell::Int(r.get(i)?),
                                'b' => Cell::Bool(r.get::<_, i64>(i)? != 0),
                                _ => Cell::Text(r.get(i)?),
                            })
                        })
                        .collect::<rusqlite::Result<Vec<Cell>>>()
                })
                .unwrap();
            rows.map(|r| r.unwrap()).collect()
        }
        Engine::Postgres => {
            let mut c = Client::connect(&q.location, NoTls).unwrap();
            c.query(sql.as_str(), &[])
                .unwrap()
                .iter()
                .map(|r| {
                    cols.iter()
                        .enumerate()
                        .map(|(i, (_, ty))| match ty {
                            'i' => Cell::Int(r.get(i)),
                            'b' => Cell::Bool(r.get(i)),
                            _ => Cell::Text(r.get(i)),
                        })
                        .collect()
                })
                .collect()
        }
    }
}

/// The file of [`FILE_ROWS`], through a queue opened on it first (the
/// schema), then plain SQL.
fn full_file() -> TestQueue {
    let f = TestQueue::new(Engine::Sqlite);
    drop(f.open());
    f.exec(FILE_ROWS);
    f
}

fn litejob(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob")
}

/// Whether the schema behind `q` has litejob's tables at all.
fn has_tables(q: &TestQueue) -> bool {
    q.count(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'jobs'",
    ) == 1
}

it! {
    #[needs(Postgres)]
    fn a_copy_moves_every_row_and_column_and_the_database_carries_on_from_it() {
        let dest = pg();
        let file = full_file();
        // The library's own call, on a database without the tables yet.
        let (src, to) = (file.open(), dest.open());
        let (src, to) = (src.file(), to.pg());
        let report = src.copy_to(to).unwrap();
        assert_eq!(
            (
                report.jobs,
                report.processed_jobs,
                report.outbox,
                report.attempts,
                report.schedules
            ),
            (7, 3, 4, 10, 2)
        );
        assert_eq!(
            (
                report.queues,
                report.queue_starts,
                report.job_dependencies,
                report.job_steps
            ),
            (3, 3, 3, 3)
        );
        for (table, _, _) in TABLES {
            let (a, b) = (dump(&file, table), dump(&dest, table));
            assert!(!a.is_empty(), "{table}: the file has rows");
            assert_eq!(a, b, "{table}: the same rows, column for column");
        }
        // The partitions and their limits, read back as the database's
        // claims and controls read them.
        assert_eq!(
            dest.strings("SELECT idempotency_key || ' ' || partition_key FROM jobs \
                          WHERE partition_key IS NOT NULL ORDER BY id"),
            ["q-1 tenant-é ☃", "r-2 acme"]
        );
        assert_eq!(
            dest.count("SELECT count(*) FROM queue_starts WHERE queue = 'fast' \
                        AND partition_key = 'acme'"),
            2
        );
        let controls = to.admin().queue_controls().unwrap();
        let limits = |name: &str| {
            let c = controls.iter().find(|c| c.name == name).unwrap();
            (c.partition_concurrency, c.partition_rate)
        };
        let five_a_second = Rate::new(5, Duration::from_secs(1)).unwrap();
        assert_eq!(limits("fast"), (Some(1), Some(five_a_second)));
        assert_eq!(limits("tenants"), (Some(3), None));
        assert_eq!(limits("mail"), (None, None));
        // A copied key is a duplicate of its job, a key only in the ledger of
        // the job the ledger names.
        assert_eq!(
            to.enqueue(NewJob::new("mail", "s-3", &json!({}))).unwrap(),
            Enqueued::Duplicate(3)
        );
        assert_eq!(to.job(3).unwrap().unwrap().deliveries, 3);
        assert_eq!(
            to.enqueue(NewJob::new("mail", "gone-9", &json!({})))
                .unwrap(),
            Enqueued::Duplicate(400)
        );
        // New rows take ids past every id the file ever gave out, including
        // those of rows deleted since.
        let fresh = to
            .enqueue(NewJob::new("fresh", "fresh-1", &json!({})))
            .unwrap();
        assert!(matches!(fresh, Enqueued::New(id) if id > 500), "{fresh:?}");
        let mut rt = to
            .runtime()
            .handler("fresh", |tx, _: Value| {
                let key = tx.job().key.clone();
                tx.outbox("note", &format!("note:{key}"), &key)?;
                Ok(Outcome::Done)
            })
            .start()
            .unwrap();
        wait_until("the new job ran on the database", LONG, || {
            dest.count("SELECT count(*) FROM outbox WHERE key = 'note:fresh-1'") == 1
        });
        rt.stop();
        assert!(dest.count("SELECT id FROM outbox WHERE key = 'note:fresh-1'") > 50);
        assert!(dest.count("SELECT max(id) FROM attempts WHERE key = 'fresh-1'") > 900);
    }
}

it! {
    #[needs(Postgres)]
    fn the_command_copies_once_and_refuses_a_second_time_with_nothing_written() {
        let dest = pg();
        let file = full_file();
        let args = [
            "--db",
            &file.location,
            "--json",
            "copy",
            "--to",
            &dest.location,
        ];
        let out = litejob(&args);
        assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (
                &v["jobs"],
                &v["processed_jobs"],
                &v["outbox"],
                &v["attempts"],
                &v["schedules"]
            ),
            (&json!(7), &json!(3), &json!(4), &json!(10), &json!(2)),
            "{v}"
        );
        assert_eq!(
            (
                &v["queues"],
                &v["queue_starts"],
                &v["job_dependencies"],
                &v["job_steps"]
            ),
            (&json!(3), &json!(3), &json!(3), &json!(3)),
            "{v}"
        );
        assert!(
            !v["to"].as_str().unwrap().contains(":litejob@"),
            "no password in {v}"
        );
        let before: Vec<_> = TABLES.iter().map(|t| dump(&dest, t.0)).collect();
        // Twice: refused, exit 1, and the database is as the first copy left it.
        let out = litejob(&args);
        assert_eq!(out.status.code(), Some(1), "{}", show(&args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("already holds litejob rows") && err.contains("nothing was written"),
            "{err}"
        );
        let after: Vec<_> = TABLES.iter().map(|t| dump(&dest, t.0)).collect();
        assert_eq!(before, after);
        // Into a database some application already uses: refused too.
        let used = pg();
        litejob::admin::AnyQueue::open_with(&used.location, Default::default())
            .unwrap()
            .enqueue(NewJob::new("mail", "live-1", &json!({})))
            .unwrap();
        let out = litejob(&["--db", &file.location, "copy", "--to", &used.location]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(used.strings("SELECT idempotency_key FROM jobs"), ["live-1"]);
    }
}

it! {
    #[needs(Postgres)]
    fn a_copy_that_fails_midway_leaves_the_database_empty() {
        let dest = pg();
        let file = full_file();
        // Text SQLite stores and PostgreSQL cannot (a NUL character), in the
        // last table copied: everything before it must go too.
        file.exec(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome, error) \
         VALUES (3, 1, 's-3', 'w', 1, 2, 'failed', 'a' || char(0) || 'b')",
        );
        let args = ["--db", &file.location, "copy", "--to", &dest.location];
        let out = litejob(&args);
        assert_eq!(out.status.code(), Some(2), "{}", show(&args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("a row of attempts cannot be stored"), "{err}");
        for (table, _, _) in TABLES {
            assert_eq!(
                dest.count(&format!("SELECT count(*) FROM {table}")),
                0,
                "{table}"
            );
        }
    }
}

it! {
    #[needs(Postgres)]
    fn a_copy_from_a_missing_file_or_to_a_bad_url_is_refused_with_nothing_written() {
        let dest = pg();
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.db").display().to_string();
        let run = |args: &[&str], status: i32, says: &str| {
            let out = litejob(args);
            assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(!err.contains(":litejob@"), "a password in {err}");
            err.into_owned()
        };
        run(
            &["--db", &missing, "copy", "--to", &dest.location],
            1,
            "no queue file",
        );
        assert!(!std::path::Path::new(&missing).exists());
        assert!(!has_tables(&dest), "a refused copy created the tables");
        let file = full_file();
        let f = file.location.as_str();
        run(
            &["--db", f, "copy", "--to", "mysql://x@y/z"],
            2,
            "not a PostgreSQL URL",
        );
        run(
            &["--db", f, "copy", "--to", "postgres://a@b:notaport/c"],
            2,
            "not a PostgreSQL URL",
        );
        run(
            &["--db", &dest.location, "copy", "--to", &dest.location],
            2,
            "reads a queue file",
        );
        let base = crate::backends::pg_base_url();
        let wrong = base.replacen(":litejob@", ":not-the-password@", 1);
        assert_ne!(wrong, base, "the test URL names its password");
        let err = run(&["--db", f, "copy", "--to", &wrong], 1, "refused the login");
        assert!(
            err.contains("litejob") && !err.contains("not-the-password"),
            "{err}"
        );
        assert!(!has_tables(&dest));
    }
}

it! {
    /// A file still in use while it is copied (a runtime completing jobs, a
    /// producer enqueueing): the copy is one moment of it, read in one
    /// snapshot — each job copied succeeded exactly when its ledger row, its
    /// outbox row and its succeeded run were copied too.
    #[needs(Postgres)]
    fn a_copy_of_a_file_in_use_is_one_moment_of_it() {
        let dest = pg();
        let file = TestQueue::new(Engine::Sqlite);
        let src = file.open();
        let src = src.file();
        let jobs: Vec<NewJob> = (0..3000)
            .map(|i| NewJob::new("work", format!("k-{i}"), &json!({})))
            .collect();
        src.enqueue_many(jobs).unwrap();
        let mut rt = src
            .runtime()
            .workers(2)
            .handler_with_prepare(
                "work",
                |ctx, _: Value| {
                    // Slow enough that the copy lands in the middle.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.outbox("mail", &format!("mail:{key}"), &key)?;
                    Ok(Outcome::Done)
                },
            )
            .start()
            .unwrap();
        wait_until("the runtime is under way", LONG, || {
            file.count("SELECT count(*) FROM processed_jobs") >= 100
        });
        let report = src.copy_to(dest.open().pg()).unwrap();
        rt.stop();
        let done = file.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'");
        assert!(
            (report.processed_jobs as i64) < done,
            "the runtime finished before the copy: {report:?}, {done} done"
        );
        let q = |sql: &str| dest.count(sql);
        let succeeded = q("SELECT count(*) FROM jobs WHERE state = 'succeeded'");
        assert!(succeeded > 0);
        assert_eq!(q("SELECT count(*) FROM processed_jobs"), succeeded);
        assert_eq!(
            q(
                "SELECT count(*) FROM processed_jobs p JOIN jobs j ON j.idempotency_key = p.key \
           WHERE j.state = 'succeeded'"
            ),
            succeeded,
            "a ledger row of a job the copy did not see succeed"
        );
        assert_eq!(q("SELECT count(*) FROM outbox"), succeeded);
        assert_eq!(
            q("SELECT count(*) FROM attempts WHERE job_id IS NOT NULL AND outcome = 'succeeded'"),
            succeeded
        );
    }
}

it! {
    /// A workflow run on a file as far as it goes (a fan-in with outputs, a
    /// waiting dependent, a dependent cancelled by a dead dependency) lands
    /// in the database row for row, outputs and edges included, verifies
    /// there, and carries on: the waiting job is queued when its last
    /// dependency runs in the database, and reads the copied output.
    #[needs(Postgres)]
    fn a_workflow_copied_into_the_database_keeps_its_outputs_and_edges_and_carries_on() {
        let dest = pg();
        let file = TestQueue::new(Engine::Sqlite);
        crate::safety::a_workflow(&file);
        let report = file.open().file().copy_to(dest.open().pg()).unwrap();
        assert_eq!((report.jobs, report.job_dependencies), (7, 5), "{report:?}");
        for (table, _, _) in TABLES {
            assert_eq!(
                dump(&file, table),
                dump(&dest, table),
                "{table}: the same rows, column for column"
            );
        }
        assert_eq!(
            dest.count("SELECT count(*) FROM jobs WHERE output IS NOT NULL"),
            3,
            "the fan-in's outputs"
        );
        crate::safety::assert_verifies(std::path::Path::new(&dest.location));
        crate::safety::carry_on_with_a_workflow(&dest.open());
        crate::safety::assert_verifies(std::path::Path::new(&dest.location));
    }
}
