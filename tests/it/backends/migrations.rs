//! A queue as an older version left it (schema 3, before workflows)
//! is migrated when opened: every job, attempt and outbox row is kept
//! with its id, ids are never reused, and the new state, column and table
//! work on it.

use litejob::{JobState, NewJob};
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
        assert_eq!(litejob::admin::SCHEMA_VERSION, 7);
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
