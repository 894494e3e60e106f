//! A queue as an older version left it (schema 3, before workflows; schema
//! 7, before timeouts) is migrated when opened: every job, attempt and
//! outbox row is kept with its id, ids are never reused, and the new
//! states, outcomes, columns and tables work on it.

use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob};
use serde_json::json;

use crate::backends::Engine;
use crate::both;

both! {
    /// The jobs table gains the waiting state and the output column
    /// without losing a row or a reference to one.
    fn a_version_3_queue_gains_workflows_and_keeps_its_rows_and_ids(q) {
        let (v3, version) = match q.engine {
            Engine::Sqlite => (
                include_str!("../../fixtures/schema-v3.sql"),
                "PRAGMA user_version = 3;",
            ),
            Engine::Postgres => (
                include_str!("../../fixtures/postgres-v3.sql"),
                "INSERT INTO litejob_schema (version) VALUES (3);",
            ),
        };
        let rows = "INSERT INTO jobs (id, kind, idempotency_key, payload, run_at, created_at) \
                    VALUES (5, 'slow', 'from-v3', '{}', 0, 0); \
                    INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome) \
                    VALUES (5, 1, 'from-v3', 'w', 0, 1, 'failed'); \
                    INSERT INTO outbox (key, kind, payload, job_id, next_attempt_at, created_at) \
                    VALUES ('o:1', 'mail', '{}', 5, 0, 0);";
        q.exec(&format!("{v3}\n{version}\n{rows}"));
        if q.engine == Engine::Sqlite {
            // Job 100 was pruned once: its id must stay spent.
            q.exec("UPDATE sqlite_sequence SET seq = 100 WHERE name = 'jobs'");
        }
        let queue = q.open();
        assert_eq!(queue.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
        assert_eq!(litejob::admin::SCHEMA_VERSION, 8);
        let old = queue.job_by_key("from-v3").unwrap().unwrap();
        assert_eq!((old.id, old.state, old.output), (5, JobState::Queued, None));
        assert_eq!(queue.attempts(5).unwrap().len(), 1, "attempts survive the rebuild");
        assert_eq!(queue.outbox_for_job(5).unwrap().len(), 1);
        let next = queue
            .enqueue(NewJob::new("after", "after-v3", &json!({})).with_depends_on(["from-v3"]))
            .unwrap();
        if q.engine == Engine::Sqlite {
            assert!(next.id() > 100, "id {} reused a spent one", next.id());
        }
        assert_eq!(queue.job(next.id()).unwrap().unwrap().state, JobState::Waiting);
        assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 1);
        assert_eq!(q.count("SELECT count(*) FROM job_overview"), 2, "the views read the new table");
        // Version 6: the durable steps' table, empty.
        assert_eq!(q.count("SELECT count(*) FROM job_steps"), 0);
        // Version 7: a run may be recorded snoozed; attempt ids go on
        // from the old ones.
        q.exec(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome) \
             VALUES (5, 1, 'from-v3', 'w', 2, 3, 'snoozed')",
        );
        assert_eq!(
            q.strings("SELECT outcome FROM attempts WHERE job_id = 5 ORDER BY id"),
            ["failed", "snoozed"]
        );
        assert!(q.count("SELECT min(id) FROM attempts WHERE outcome = 'snoozed'") > 1);
    }
}

both! {
    /// Version 8 rebuilds `jobs` (the timeout column) and `attempts` (the
    /// cancelled outcome) on a file, and alters both on PostgreSQL: a
    /// running job, its attempts, its step and its dependent keep their
    /// ids and references, spent ids stay spent, and a job can then carry
    /// a timeout and a run end cancelled.
    fn a_version_7_queue_gains_timeouts_and_cancelled_runs_and_keeps_its_rows_and_ids(q) {
        let (v7, version) = match q.engine {
            Engine::Sqlite => (
                include_str!("../../fixtures/schema-v7.sql"),
                "PRAGMA user_version = 7;",
            ),
            Engine::Postgres => (
                include_str!("../../fixtures/postgres-v7.sql"),
                "INSERT INTO litejob_schema (version) VALUES (7);",
            ),
        };
        let rows = "INSERT INTO jobs (id, kind, idempotency_key, payload, run_at, created_at, \
                        state, attempts, lease_owner, lease_expires_at, current_attempt, partition_key) \
                    VALUES (7, 'slow', 'from-v7', '{}', 0, 0, 'running', 2, 'p', 99999999999999, 41, 'shop:1'); \
                    INSERT INTO jobs (id, kind, idempotency_key, payload, run_at, created_at, state) \
                    VALUES (8, 'after', 'after-v7', '{}', 0, 0, 'waiting'); \
                    INSERT INTO job_dependencies (job_id, depends_on) VALUES (8, 7); \
                    INSERT INTO attempts (id, job_id, attempt, key, worker, started_at, finished_at, outcome) \
                    VALUES (40, 7, 1, 'from-v7', 'w', 0, 1, 'snoozed'); \
                    INSERT INTO attempts (id, job_id, attempt, key, worker, started_at) \
                    VALUES (41, 7, 2, 'from-v7', 'w', 2); \
                    INSERT INTO job_steps (job_id, name, attempt, output, started_at, finished_at) \
                    VALUES (7, 'charge', 1, '\"ch_1\"', 0, 1);";
        q.exec(&format!("{v7}\n{version}\n{rows}"));
        if q.engine == Engine::Sqlite {
            // Ids spent by pruned rows stay spent.
            q.exec(
                "UPDATE sqlite_sequence SET seq = 100 WHERE name = 'jobs'; \
                 UPDATE sqlite_sequence SET seq = 500 WHERE name = 'attempts'",
            );
        } else {
            q.exec("SELECT setval(pg_get_serial_sequence('attempts', 'id'), 500)");
        }
        let queue = q.open();
        assert_eq!(queue.schema_version().unwrap(), 8);
        let old = queue.job(7).unwrap().unwrap();
        assert_eq!(
            (old.state, old.current_attempt, old.timeout_ms, old.partition.as_deref()),
            (JobState::Running, Some(41), None, Some("shop:1"))
        );
        assert_eq!(queue.steps(7).unwrap().len(), 1, "steps survive the rebuild");
        let timed = queue
            .enqueue(NewJob::new("slow", "timed", &json!({})).with_timeout(Duration::from_millis(1500)))
            .unwrap();
        if q.engine == Engine::Sqlite {
            assert!(timed.id() > 100, "id {} reused a spent one", timed.id());
        }
        assert_eq!(queue.job(timed.id()).unwrap().unwrap().timeout_ms, Some(1500));
        // The running job cancelled: its run ends cancelled, its
        // dependent with it; the new attempt ids go on after the old.
        assert_eq!(queue.admin().cancel_job(7).unwrap(), JobState::Running);
        let runs: Vec<AttemptOutcome> = queue.attempts(7).unwrap().iter().map(|a| a.outcome).collect();
        assert_eq!(runs, [AttemptOutcome::Snoozed, AttemptOutcome::Cancelled]);
        assert_eq!(queue.job(8).unwrap().unwrap().state, JobState::Cancelled);
        assert_eq!(q.count("SELECT count(*) FROM recent_failures WHERE outcome = 'cancelled'"), 1);
        q.exec(
            "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
             VALUES (7, 3, 'from-v7', 'w', 3)",
        );
        assert!(q.count("SELECT max(id) FROM attempts") > 500, "an attempt id was reused");
        assert_eq!(q.count("SELECT count(*) FROM job_overview"), 3, "the views read the new tables");
    }
}
