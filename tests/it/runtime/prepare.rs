//! The prepare step: on a file it runs outside the write lock and in
//! parallel; on both backends a worker stuck in it does not hold up the
//! apply-only jobs of other kinds.

use crate::backends::Runtimes;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::enqueue;
use crate::backends::{handler, handler_with_prepare, Engine};
use crate::both;
use crate::support::{wait_state, wait_until, TestDb, LONG};

it! {
    fn prepare_runs_outside_the_write_lock_and_in_parallel() {
        let db = TestDb::new();
        let q = db.open();
        let active = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let lock_free = Arc::new(AtomicUsize::new(0));
        let (a, m, l, path) = (
            active.clone(),
            most.clone(),
            lock_free.clone(),
            db.path.clone(),
        );
        let mut rt = q
            .runtime()
            .workers(4)
            .handler_with_prepare(
                "slow",
                move |_ctx, _: Value| {
                    let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    // Nobody holds the write lock for us while we prepare:
                    // another connection takes it at once.
                    let c = rusqlite::Connection::open(&path)?;
                    c.busy_timeout(Duration::from_secs(5))?;
                    c.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
                    l.fetch_add(1, Ordering::SeqCst);
                    // Wait (bounded) until all four prepares are in at once.
                    let t0 = Instant::now();
                    while m.load(Ordering::SeqCst) < 4 && t0.elapsed() < LONG {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    a.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                },
                |_tx, ()| Ok(Outcome::Done),
            )
            .start()
            .unwrap();
        let ids = q
            .enqueue_many(
                (0..4)
                    .map(|i| NewJob::new("slow", format!("s:{i}"), &json!({})))
                    .collect(),
            )
            .unwrap();
        for e in &ids {
            wait_state(&q, e.id(), JobState::Succeeded);
        }
        rt.stop();
        assert_eq!(most.load(Ordering::SeqCst), 4, "prepares did not overlap");
        assert_eq!(lock_free.load(Ordering::SeqCst), 4);
    }
}

both! {
    /// Many more jobs than the runs in flight at once (a file's writer
    /// claims ahead up to 64 per worker; a PostgreSQL worker claims
    /// batches of 32 when a handler has a prepare step): a worker stuck in
    /// user code must not hold up the claims of the others' kinds.
    fn apply_only_jobs_keep_running_while_a_worker_is_stuck_in_a_prepare_step(q) {
        let queue = q.open();
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let stuck = Arc::new(AtomicBool::new(false));
        let s = stuck.clone();
        let b = handler(queue.runtime().workers(4), "fast", |_, _: Value| Ok(Outcome::Done));
        let mut rt = handler_with_prepare(
            b,
            "slow",
            move |_ctx, _: Value| {
                s.store(true, Ordering::SeqCst);
                // Until the test lets go (or gives up on it).
                let _ = held.recv_timeout(Duration::from_secs(120));
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let slow = enqueue(&queue, "slow", "slow:1");
        wait_until("the prepare step to start", LONG, || {
            stuck.load(Ordering::SeqCst)
        });
        let chunks = match q.engine {
            Engine::Sqlite => 30,
            Engine::Postgres => 10,
        };
        for chunk in 0..chunks {
            queue
                .enqueue_many(
                    (0..100)
                        .map(|i| NewJob::new("fast", format!("f:{chunk}:{i}"), &json!({})))
                        .collect(),
                )
                .unwrap();
        }
        wait_until("every fast job while the prepare step hangs", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE kind = 'fast' AND state = 'succeeded'") == chunks * 100
        });
        assert_eq!(queue.job(slow).unwrap().unwrap().state, JobState::Running);
        release.send(()).unwrap();
        wait_state(&queue, slow, JobState::Succeeded);
        rt.stop();
    }
}
