//! Cancelling a running job on both backends: `litejob cancel ID` from
//! another process ends the job `cancelled` at once, its run's attempt
//! `cancelled`, its waiting dependents with it; the handler sees
//! `ctx.is_cancelled()`; the run's work never commits, even when the
//! handler ignores the cancel and its process never learns of it (the
//! end is fenced on the run's attempt); a prepare step with a timeout is
//! let go of and its worker freed. A finished job is refused as before.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{AttemptOutcome, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::controls::{json as cli_json, litejob};
use super::{handler_with_prepare, Runtimes, TestQueue};
use crate::both;
use crate::support::{wait_state, wait_until, LONG};

/// The outcomes of job `id`'s runs, oldest first.
fn outcomes(queue: &AnyQueue, id: i64) -> Vec<AttemptOutcome> {
    queue
        .attempts(id)
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect()
}

/// What a cancelled run left: the job cancelled while running, its one
/// attempt cancelled, its dependent cancelled, and nothing of its work.
fn check_cancelled(q: &TestQueue, queue: &AnyQueue, id: i64, dependent: i64) {
    let job = queue.job(id).unwrap().unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(job.last_error.as_deref(), Some("cancelled while running"));
    assert!(
        job.finished_at.is_some() && job.lease_owner.is_none() && job.current_attempt.is_none()
    );
    assert_eq!(outcomes(queue, id), [AttemptOutcome::Cancelled]);
    let a = &queue.attempts(id).unwrap()[0];
    assert_eq!(a.error.as_deref(), Some("cancelled while running"));
    assert!(a.finished_at.is_some());
    assert_eq!(
        queue.job(dependent).unwrap().unwrap().state,
        JobState::Cancelled
    );
    let of_key = |table: &str| {
        q.count(&format!(
            "SELECT count(*) FROM {table} WHERE key = 'slow:1'"
        ))
    };
    assert_eq!(of_key("app_rows"), 0, "the cancelled run's work committed");
    assert_eq!(of_key("processed_jobs"), 0, "the ledger has its key");
}

/// Enqueues the job `slow:1` and a job that depends on it; returns both ids.
fn slow_and_dependent(queue: &AnyQueue) -> (i64, i64) {
    let id = queue
        .enqueue(NewJob::new("slow", "slow:1", &json!({})).with_max_retries(3))
        .unwrap()
        .id();
    let dependent = queue
        .enqueue(NewJob::new("after", "after:1", &json!({})).with_depends_on(["slow:1"]))
        .unwrap()
        .id();
    (id, dependent)
}

both! {
    /// A prepare step that loops until `ctx.is_cancelled()`: cancelled
    /// from another process, it sees the cancel and returns; nothing of its
    /// run commits.
    fn cancel_from_another_process_stops_a_running_job_that_checks_for_it(q) {
        let queue = q.open();
        q.create_app_table();
        let (started, saw) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (st, sw) = (started.clone(), saw.clone());
        let builder = queue.runtime().workers(1).poll_interval(Duration::from_millis(50));
        let builder = handler_with_prepare(
            builder,
            "slow",
            move |ctx, _: Value| {
                st.store(true, Ordering::SeqCst);
                let t0 = std::time::Instant::now();
                while !ctx.is_cancelled() && t0.elapsed() < LONG {
                    std::thread::sleep(Duration::from_millis(5));
                }
                sw.store(ctx.is_cancelled(), Ordering::SeqCst);
                Ok(())
            },
            |tx, ()| {
                tx.record("slow")?;
                Ok(Outcome::Done)
            },
        );
        let builder = handler_with_prepare(builder, "after", |_, _: Value| Ok(()), |_, ()| {
            Ok(Outcome::Done)
        });
        let mut rt = builder.start().unwrap();
        let (id, dependent) = slow_and_dependent(&queue);
        wait_until("the prepare step to run", LONG, || started.load(Ordering::SeqCst));
        let out = litejob(q, &["cancel", &id.to_string()], 0);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(said.contains("cancelled while running") && said.contains("1 job that depends on it"), "{said}");
        wait_until("the handler to see the cancel", LONG, || saw.load(Ordering::SeqCst));
        rt.stop();
        check_cancelled(q, &queue, id, dependent);
        // An ended job is refused with its state, as before.
        let out = litejob(q, &["cancel", &id.to_string()], 1);
        let refused = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(refused.contains("is cancelled"), "{refused}");
        let shown = cli_json(q, &["show", &id.to_string()]);
        assert_eq!(shown["attempts"][0]["outcome"], "cancelled");
    }
}

both! {
    /// A handler that ignores the cancel, in a process whose watcher never
    /// looks (its poll interval is an hour): its prepare step returns, its
    /// apply step is refused by the fence on its attempt, and the attempt
    /// stays `cancelled`.
    fn a_run_that_ignores_the_cancel_never_commits(q) {
        let queue = q.open();
        q.create_app_table();
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let running = Arc::new(AtomicI64::new(0));
        let (returned, applied) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (r, ret, app) = (running.clone(), returned.clone(), applied.clone());
        let builder = queue.runtime().workers(1).poll_interval(Duration::from_secs(3600));
        let builder = handler_with_prepare(
            builder,
            "slow",
            move |ctx, _: Value| {
                r.store(ctx.id, Ordering::SeqCst);
                let _ = held.recv_timeout(LONG);
                ret.store(true, Ordering::SeqCst);
                Ok(())
            },
            move |tx, ()| {
                app.store(true, Ordering::SeqCst);
                tx.record("slow")?;
                Ok(Outcome::Done)
            },
        );
        let builder = handler_with_prepare(builder, "after", |_, _: Value| Ok(()), |_, ()| {
            Ok(Outcome::Done)
        });
        let mut rt = builder.start().unwrap();
        let (id, dependent) = slow_and_dependent(&queue);
        wait_until("the prepare step to run", LONG, || running.load(Ordering::SeqCst) == id);
        litejob(q, &["cancel", &id.to_string()], 0);
        release.send(()).unwrap();
        wait_until("the prepare step to return", LONG, || returned.load(Ordering::SeqCst));
        // The stop sees the run through: its apply step was handed on
        // (its process saw nothing of the cancel) and refused.
        rt.stop();
        assert!(!applied.load(Ordering::SeqCst), "the fence let the apply step run");
        check_cancelled(q, &queue, id, dependent);
    }
}

both! {
    /// A run with a timeout prepares on a runner thread: cancelled, it is
    /// let go of though its step ignores the cancel, and its only worker
    /// runs the next job while the step still hangs.
    fn a_cancelled_run_with_a_timeout_frees_its_worker(q) {
        let queue = q.open();
        q.create_app_table();
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let running = Arc::new(AtomicI64::new(0));
        let r = running.clone();
        let builder = queue
            .runtime()
            .workers(1)
            .poll_interval(Duration::from_millis(50))
            .job_timeout(Duration::from_secs(600));
        let builder = handler_with_prepare(
            builder,
            "slow",
            move |ctx, _: Value| {
                r.store(ctx.id, Ordering::SeqCst);
                let _ = held.recv_timeout(Duration::from_secs(120));
                Ok(())
            },
            |tx, ()| {
                tx.record("slow")?;
                Ok(Outcome::Done)
            },
        );
        let builder = handler_with_prepare(builder, "after", |_, _: Value| Ok(()), |_, ()| {
            Ok(Outcome::Done)
        });
        let builder = handler_with_prepare(builder, "next", |_, _: Value| Ok(()), |_, ()| {
            Ok(Outcome::Done)
        });
        let mut rt = builder.start().unwrap();
        let (id, dependent) = slow_and_dependent(&queue);
        wait_until("the prepare step to run", LONG, || running.load(Ordering::SeqCst) == id);
        assert_eq!(queue.admin().cancel_job(id).unwrap(), JobState::Running);
        let next = queue.enqueue(NewJob::new("next", "next:1", &json!({}))).unwrap().id();
        wait_state(&queue, next, JobState::Succeeded);
        drop(release);
        let report = rt.stop();
        assert!(report.detached_threads <= 1, "{report:?}");
        check_cancelled(q, &queue, id, dependent);
    }
}
