//! Work done once per key: a key already in the ledger is recorded
//! `duplicate` and its SQL is not applied; an enqueue of a running job's key
//! only counts a delivery.

use crate::backends::Runtimes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use litejob::{AttemptOutcome, Enqueued, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{enqueue, outcomes};
use crate::backends::{handler, handler_with_prepare};
use crate::both;
use crate::support::{wait_state, wait_until, LONG};

both! {
    /// Someone (another process, an earlier life of this job) did the work:
    /// the handler's SQL is not applied and the ledger row is left as it was.
    fn a_key_already_in_the_ledger_is_recorded_duplicate_and_its_sql_is_not_applied(q) {
        q.create_app_table();
        let queue = q.open();
        let id = enqueue(&queue, "k", "dup:1");
        q.exec(&format!(
            "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('dup:1', 1, {id})"
        ));
        let mut rt = handler(queue.runtime(), "k", |tx, _: Value| {
            tx.record("applied")?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 0);
        assert_eq!(outcomes(&queue, id), vec![AttemptOutcome::Duplicate]);
        assert_eq!(
            q.count("SELECT completed_at FROM processed_jobs WHERE key = 'dup:1'"),
            1
        );
    }
}

both! {
    /// A duplicate enqueue while the job is running changes nothing but
    /// the delivery count.
    fn an_enqueue_seen_by_a_running_runtime_is_not_lost_when_it_is_a_duplicate(q) {
        let queue = q.open();
        let entered = Arc::new(AtomicBool::new(false));
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
        let e = entered.clone();
        let mut rt = handler_with_prepare(
            queue.runtime(),
            "k",
            move |_ctx, _: Value| {
                e.store(true, Ordering::SeqCst);
                let _ = go_rx.recv_timeout(LONG);
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "k", "running:1");
        wait_until("running", LONG, || entered.load(Ordering::SeqCst));
        assert_eq!(
            queue.enqueue(NewJob::new("k", "running:1", &json!({}))).unwrap(),
            Enqueued::Duplicate(id)
        );
        go_tx.send(()).unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        let j = queue.job(id).unwrap().unwrap();
        assert_eq!((j.deliveries, j.attempts), (2, 1));
    }
}
