//! Timeouts on both backends: a prepare step that hangs past its timeout
//! fails its run "timed out after …" (a charged attempt, retried by the
//! job's rules) and frees its worker at once; the job's own timeout beats
//! its kind's, which beats the runtime's; an apply step that returns past
//! its deadline is rolled back; a drain fails a run that ran over when it
//! returns; `enqueue --timeout` refuses a bad value with nothing written.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{AttemptOutcome, JobContext, JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::controls::{json as cli_json, litejob};
use super::{handler, handler_with_prepare, Runtimes};
use crate::both;
use crate::support::{tiny_backoff, wait_state, wait_until, LONG};

/// The outcomes and errors of job `id`'s runs, oldest first.
fn runs(queue: &AnyQueue, id: i64) -> Vec<(AttemptOutcome, String)> {
    queue
        .attempts(id)
        .unwrap()
        .into_iter()
        .map(|a| (a.outcome, a.error.unwrap_or_default()))
        .collect()
}

/// Waits, checking `ctx.is_cancelled()`, for at most `ms` (or `LONG`).
fn busy(ctx: &JobContext, ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms).min(LONG);
    while Instant::now() < until && !ctx.is_cancelled() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

both! {
    /// One worker: a prepare step that hangs (it ignores the cancel) is
    /// failed "timed out after 300ms" and its worker takes the next job
    /// while the step is still hung; the retry times out too and the job
    /// is dead. Past the runtime's cap of threads left behind (one per
    /// worker) the run is still recorded at once, but the worker waits for
    /// the stuck code before its next job.
    fn a_hung_prepare_step_times_out_and_its_only_worker_takes_the_next_job(q) {
        let queue = q.open();
        q.create_app_table();
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let (begun, returned) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (b, r) = (begun.clone(), returned.clone());
        let builder = queue
            .runtime()
            .workers(1)
            .backoff(tiny_backoff())
            .kind_timeout("hang", Duration::from_millis(300));
        let builder = handler_with_prepare(
            builder,
            "hang",
            move |_, _: Value| {
                b.fetch_add(1, Ordering::SeqCst);
                let _ = held.recv_timeout(Duration::from_secs(120));
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            },
            |tx, ()| {
                tx.record("hang")?;
                Ok(Outcome::Done)
            },
        );
        let builder = handler_with_prepare(
            builder,
            "fast",
            |_, _: Value| Ok(()),
            |tx, ()| {
                tx.record("fast")?;
                Ok(Outcome::Done)
            },
        );
        let mut rt = builder.start().unwrap();
        let hang = queue
            .enqueue(NewJob::new("hang", "hang:1", &json!({})).with_max_retries(1))
            .unwrap()
            .id();
        wait_until("the prepare step to hang", LONG, || begun.load(Ordering::SeqCst) == 1);
        let fast = queue.enqueue(NewJob::new("fast", "fast:1", &json!({}))).unwrap().id();
        wait_state(&queue, fast, JobState::Succeeded);
        assert_eq!(returned.load(Ordering::SeqCst), 0, "the worker did not wait for the hung step");
        wait_state(&queue, hang, JobState::Dead);
        let timed_out = (AttemptOutcome::Failed, "timed out after 300ms".to_string());
        assert_eq!(runs(&queue, hang), [timed_out.clone(), timed_out]);
        assert_eq!(returned.load(Ordering::SeqCst), 0, "both runs were recorded while hung");
        let job = queue.job(hang).unwrap().unwrap();
        assert_eq!((job.attempts, job.last_error.as_deref()), (2, Some("timed out after 300ms")));
        assert_eq!(q.count("SELECT count(*) FROM app_rows WHERE key = 'hang:1'"), 0);
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs WHERE key = 'hang:1'"), 0);
        // Two steps are stuck, one left behind (the cap) and one its
        // worker keeps: the next job waits for the stuck code.
        let next = queue.enqueue(NewJob::new("fast", "fast:2", &json!({}))).unwrap().id();
        std::thread::sleep(Duration::from_millis(500));
        assert_ne!(queue.job(next).unwrap().unwrap().state, JobState::Succeeded);
        drop(release);
        wait_state(&queue, next, JobState::Succeeded);
        wait_until("the hung steps to return", LONG, || returned.load(Ordering::SeqCst) == 2);
        rt.stop();
        assert_eq!(runs(&queue, hang).len(), 2, "what the hung steps returned was dropped");
        assert_eq!(q.count("SELECT count(*) FROM app_rows WHERE key = 'hang:1'"), 0);
    }
}

both! {
    /// The job's own timeout beats its kind's, which beats the runtime's
    /// default; a kind set to none runs as long as it takes.
    fn a_jobs_timeout_beats_its_kinds_which_beats_the_runtimes(q) {
        let queue = q.open();
        let builder = queue
            .runtime()
            .workers(4)
            .job_timeout(Duration::from_millis(400))
            .kind_timeout("k", Duration::from_millis(300))
            .kind_timeout("untimed", Duration::ZERO);
        let sleeper = |ctx: &JobContext, p: Value| {
            busy(ctx, p["ms"].as_u64().unwrap());
            Ok(())
        };
        let mut builder = builder;
        for kind in ["k", "other", "untimed"] {
            builder = handler_with_prepare(builder, kind, sleeper, |_, ()| Ok(Outcome::Done));
        }
        let mut rt = builder.start().unwrap();
        let long = json!({ "ms": 60_000 });
        let job = |kind: &str, key: &str, p: &Value| NewJob::new(kind, key, p).with_max_retries(0);
        let own = queue
            .enqueue(job("k", "own", &long).with_timeout(Duration::from_millis(200)))
            .unwrap()
            .id();
        let of_kind = queue.enqueue(job("k", "of-kind", &long)).unwrap().id();
        let default = queue.enqueue(job("other", "default", &long)).unwrap().id();
        let untimed = queue
            .enqueue(job("untimed", "untimed", &json!({ "ms": 700 })))
            .unwrap()
            .id();
        for (id, ms) in [(own, 200), (of_kind, 300), (default, 400)] {
            wait_state(&queue, id, JobState::Dead);
            assert_eq!(
                runs(&queue, id),
                [(AttemptOutcome::Failed, format!("timed out after {ms}ms"))]
            );
        }
        wait_state(&queue, untimed, JobState::Succeeded);
        assert_eq!(runs(&queue, untimed), [(AttemptOutcome::Succeeded, String::new())]);
        rt.stop();
    }
}

both! {
    /// An apply step that returns past its deadline (it waits on
    /// `is_cancelled()` inside the transaction) is rolled back: its row is
    /// not there, nor its ledger row; the run failed "timed out after".
    fn an_apply_step_past_its_deadline_is_rolled_back(q) {
        let queue = q.open();
        q.create_app_table();
        let builder = queue.runtime().kind_timeout("slow_apply", Duration::from_millis(200));
        let mut rt = handler(builder, "slow_apply", |tx, _: Value| {
            tx.record("written")?;
            let ctx = tx.job().clone();
            busy(&ctx, 60_000);
            assert!(ctx.is_cancelled());
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        let id = queue
            .enqueue(NewJob::new("slow_apply", "a:1", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        wait_state(&queue, id, JobState::Dead);
        assert_eq!(runs(&queue, id), [(AttemptOutcome::Failed, "timed out after 200ms".into())]);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 0, "the apply step's write committed");
        assert_eq!(q.count("SELECT count(*) FROM processed_jobs"), 0);
    }
}

both! {
    /// A drain runs prepare steps in its own thread: a run that went past
    /// its timeout is failed as timed out when it returns.
    fn a_drain_fails_a_run_that_went_past_its_timeout_when_it_returns(q) {
        let queue = q.open();
        q.create_app_table();
        let builder = queue.runtime().job_timeout(Duration::from_millis(100));
        let builder = handler_with_prepare(
            builder,
            "slow",
            |ctx, _: Value| {
                busy(ctx, 60_000);
                Ok(())
            },
            |tx, ()| {
                tx.record("slow")?;
                Ok(Outcome::Done)
            },
        );
        let builder = handler_with_prepare(builder, "quick", |_, _: Value| Ok(()), |tx, ()| {
            tx.record("quick")?;
            Ok(Outcome::Done)
        });
        let slow = queue
            .enqueue(NewJob::new("slow", "slow:1", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        queue.enqueue(NewJob::new("quick", "quick:1", &json!({}))).unwrap();
        let drained = builder.drain().unwrap();
        assert_eq!((drained.dead, drained.succeeded), (1, 1), "{drained:?}");
        assert_eq!(runs(&queue, slow), [(AttemptOutcome::Failed, "timed out after 100ms".into())]);
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["quick:1"]);
    }
}

both! {
    /// `enqueue --timeout` stores the job's timeout, shown by `show`; a
    /// zero or a value that is no duration is refused (exit 2) with
    /// nothing written.
    fn enqueue_takes_a_timeout_and_refuses_a_bad_one_writing_nothing(q) {
        for bad in ["0s", "0", "soon", "-5s", "30"] {
            let out = litejob(q, &["enqueue", "k", "--key", "a", "--timeout", bad], 2);
            assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
            assert!(!q.created(), "--timeout {bad} wrote something");
        }
        litejob(q, &["enqueue", "k", "--key", "a", "--timeout", "1m30s"], 0);
        let shown = cli_json(q, &["show", "1"]);
        assert_eq!(shown["job"]["timeout_ms"], 90_000);
        let text = String::from_utf8_lossy(&litejob(q, &["show", "1"], 0).stdout).into_owned();
        assert!(text.lines().any(|l| l.contains("timeout") && l.contains("1m30s")), "{text}");
        litejob(q, &["enqueue", "k", "--key", "b", "--timeout", "0ms"], 2);
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE timeout_ms IS NULL"), 0);
    }
}

both! {
    /// A prepare step let go of at its deadline goes on in the background:
    /// a step it calls afterwards is refused, and nothing of it recorded.
    fn a_step_called_after_its_run_timed_out_is_not_recorded(q) {
        let queue = q.open();
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let refused = Arc::new(AtomicUsize::new(0));
        let (begun, r) = (Arc::new(AtomicUsize::new(0)), refused.clone());
        let b = begun.clone();
        let builder = queue.runtime().workers(1).kind_timeout("stepper", Duration::from_millis(300));
        let mut rt = handler_with_prepare(
            builder,
            "stepper",
            move |ctx, _: Value| {
                let early: i64 = ctx.step("early", |_| Ok::<_, String>(1))?;
                b.fetch_add(1, Ordering::SeqCst);
                let _ = held.recv_timeout(Duration::from_secs(120));
                match ctx.step("late", |_| Ok::<_, String>(2)) {
                    Err(_) => r.fetch_add(1, Ordering::SeqCst),
                    Ok(_) => r.fetch_add(100, Ordering::SeqCst),
                };
                Ok(early)
            },
            |_, _: i64| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let id = queue
            .enqueue(NewJob::new("stepper", "s:1", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        wait_state(&queue, id, JobState::Dead);
        assert_eq!(begun.load(Ordering::SeqCst), 1);
        drop(release);
        wait_until("the late step's call to return", LONG, || refused.load(Ordering::SeqCst) > 0);
        assert_eq!(refused.load(Ordering::SeqCst), 1, "the late step was recorded");
        rt.stop();
        let names: Vec<String> = queue.steps(id).unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["early"]);
    }
}
