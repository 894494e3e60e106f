//! The ledger transaction: the handler's SQL, the key's ledger row and the
//! completion commit together; a run that fails, with or without writing,
//! and even with its own savepoints left open, leaves neither its SQL nor a
//! ledger row, while the runs committed beside it keep theirs.

use crate::backends::Runtimes;
use std::time::Duration;

use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{check_no_open_transaction, enqueue, outcomes};
use crate::backends::handler;
use crate::both;
use crate::support::wait_state;

both! {
    /// One run: its row, its ledger row (naming the job) and its
    /// completion are there together, and no transaction is left open.
    fn the_handlers_sql_the_ledger_row_and_the_completion_commit_together(q) {
        q.create_app_table();
        let queue = q.open();
        let id = enqueue(&queue, "k", "ledger:1");
        let mut rt = handler(queue.runtime(), "k", |tx, _: Value| {
            tx.record("applied")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE key = 'ledger:1'"),
            1
        );
        assert_eq!(
            q.count("SELECT job_id FROM processed_jobs WHERE key = 'ledger:1'"),
            id
        );
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!(job.attempts, 1);
        assert!(job.finished_at.is_some() && job.lease_owner.is_none());
        assert_eq!(job.current_attempt, None);
        assert_eq!(outcomes(&queue, id), vec![AttemptOutcome::Succeeded]);
        check_no_open_transaction(q, &queue);
    }
}

both! {
    /// A handler that touches no SQL runs without a savepoint: a failed
    /// run must still take its ledger row back, so the key's work counts
    /// as not done, while the runs committed in the same group (a file's
    /// writer cycle, a PostgreSQL worker's batch) keep theirs.
    fn a_run_that_fails_without_writing_leaves_no_ledger_row_and_its_neighbours_commit(q) {
        let queue = q.open();
        let ids: Vec<(String, i64)> = (0..40)
            .map(|i| {
                let key = match i % 4 {
                    0 => format!("fail:{i}"),
                    1 => format!("panic:{i}"),
                    _ => format!("ok:{i}"),
                };
                let id = queue
                    .enqueue(NewJob::new("quiet", &key, &json!({})).with_max_retries(0))
                    .unwrap()
                    .id();
                (key, id)
            })
            .collect();
        let b = queue
            .runtime()
            .workers(2)
            .poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "quiet", |tx, _: Value| {
            match tx.job().key.split(':').next().unwrap() {
                "fail" => Err("failed before writing anything".into()),
                "panic" => panic!("panicked before writing anything"),
                _ => Ok(Outcome::Done),
            }
        })
        .start()
        .unwrap();
        for (key, id) in &ids {
            let want = if key.starts_with("ok:") {
                JobState::Succeeded
            } else {
                JobState::Dead
            };
            wait_state(&queue, *id, want);
        }
        rt.stop();
        let ledger = q.strings("SELECT key FROM processed_jobs ORDER BY key");
        let mut ok: Vec<String> = ids
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| k.starts_with("ok:"))
            .collect();
        ok.sort();
        assert_eq!(ledger, ok);
        check_no_open_transaction(q, &queue);
    }
}

both! {
    /// The run's savepoint has a reserved name: a handler's own savepoints,
    /// whatever their names, are nested inside it and undone with it.
    fn a_failed_runs_writes_are_undone_even_when_the_handler_left_its_own_savepoint_open(q) {
        q.create_app_table();
        let queue = q.open();
        let bad = queue
            .enqueue(NewJob::new("nested", "nested:fail", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let good = enqueue(&queue, "nested", "nested:ok");
        let b = queue
            .runtime()
            .workers(1)
            .poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "nested", |tx, _: Value| {
            tx.record("before its savepoint")?;
            tx.batch("SAVEPOINT run; SAVEPOINT mine;")?;
            tx.record("inside its savepoints")?;
            if tx.job().key.ends_with("fail") {
                Err("failed with its savepoints open".into())
            } else {
                Ok(Outcome::Done)
            }
        })
        .start()
        .unwrap();
        wait_state(&queue, bad, JobState::Dead);
        wait_state(&queue, good, JobState::Succeeded);
        rt.stop();
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE key = 'nested:fail'"),
            0
        );
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows WHERE key = 'nested:ok'"),
            2
        );
        assert_eq!(
            q.count("SELECT count(*) FROM processed_jobs WHERE key = 'nested:fail'"),
            0
        );
        check_no_open_transaction(q, &queue);
    }
}
