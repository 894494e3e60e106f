//! Durable steps (`ctx.step`): a step recorded by one run is handed back to
//! the next without its call; steps are named, not positional; a step's
//! failure, a name used twice, a call outside a prepare step and a result
//! over the cap each end the run as a user expects; step rows go with
//! their job.

use crate::backends::Runtimes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::admin::PruneOptions;
use litejob::{AttemptOutcome, JobState, NewJob, Outcome, QueueOptions};
use serde_json::Value;

use super::{enqueue, outcomes};
use crate::backends::{handler, handler_with_prepare};
use crate::both;
use crate::support::{tiny_backoff, wait_state};

/// Counts the calls of one step.
fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

both! {
    /// The README's case: the charge succeeds, the booking fails once; the
    /// retry books without charging again, and the apply step reads both.
    fn a_retry_reuses_a_recorded_step_and_calls_only_the_failed_one(q) {
        let queue = q.open();
        q.create_app_table();
        let (charges, books) = (counter(), counter());
        let (c, b) = (charges.clone(), books.clone());
        let builder = queue.runtime().backoff(tiny_backoff()).poll_interval(Duration::from_millis(20));
        let mut rt = handler_with_prepare(
            builder,
            "order",
            move |ctx, cents: i64| {
                let charge: String = ctx.step("charge", |key| {
                    c.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(format!("ch:{key}:{cents}"))
                })?;
                let booking: i64 = ctx.step("book", |_key| {
                    if b.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err("the carrier is down".to_string());
                    }
                    Ok(77)
                })?;
                Ok((charge, booking))
            },
            |tx, (charge, booking): (String, i64)| {
                // The apply step reads the same results back.
                let read: Option<String> = tx.step_output("charge")?;
                assert_eq!(read.as_deref(), Some(charge.as_str()));
                assert_eq!(tx.step_output::<i64>("book")?, Some(booking));
                assert_eq!(tx.step_output::<i64>("missing")?, None);
                tx.record(&format!("{charge} {booking}"))?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        let id = queue.enqueue(NewJob::new("order", "order:1", &4200_i64)).unwrap().id();
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(charges.load(Ordering::SeqCst), 1, "the card was charged twice");
        assert_eq!(books.load(Ordering::SeqCst), 2);
        assert_eq!(
            q.strings("SELECT note FROM app_rows"),
            vec!["ch:order:1/charge:4200 77".to_string()]
        );
        assert_eq!(outcomes(&queue, id), vec![AttemptOutcome::Failed, AttemptOutcome::Succeeded]);
        let attempts = queue.attempts(id).unwrap();
        assert_eq!(
            attempts[0].error.as_deref(),
            Some("step book failed: the carrier is down")
        );
        let steps = queue.steps(id).unwrap();
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["charge", "book"]);
        assert_eq!(steps[0].output, "\"ch:order:1/charge:4200\"");
        assert_eq!((steps[0].attempt, steps[0].reused_in.clone()), (1, vec![2]));
        assert_eq!((steps[1].attempt, steps[1].reused_in.clone()), (2, vec![]));
        assert!(steps[0].finished_at >= steps[0].started_at);
        assert_eq!(
            steps[0].summary(),
            "step charge recorded in attempt 1, reused in attempt 2"
        );
        assert_eq!(
            q.count(&format!("SELECT count(*) FROM job_steps WHERE job_id = {id}")),
            2
        );
    }
}

both! {
    /// A deploy between runs may add or reorder steps: a step is found by
    /// its name, wherever the new code calls it.
    fn steps_are_found_by_name_when_a_later_run_calls_them_in_another_order(q) {
        let queue = q.open();
        q.create_app_table();
        let calls = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let c = calls.clone();
        let builder = queue.runtime().backoff(tiny_backoff()).poll_interval(Duration::from_millis(20));
        let mut rt = handler_with_prepare(
            builder,
            "k",
            move |ctx, _: Value| {
                let names: &[&str] = if ctx.attempt == 1 { &["a", "b"] } else { &["c", "b", "a"] };
                let mut got = Vec::new();
                for name in names {
                    let v: String = ctx.step(name, |_| {
                        c.lock().unwrap().push(format!("{name}@{}", ctx.attempt));
                        Ok::<_, String>(format!("{name} from {}", ctx.attempt))
                    })?;
                    got.push(v);
                }
                if ctx.attempt == 1 {
                    return Err("fail after the steps".into());
                }
                Ok(got)
            },
            |tx, got: Vec<String>| {
                tx.record(&got.join(","))?;
                Ok(Outcome::Done)
            },
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "k", "reorder:1");
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(*calls.lock().unwrap(), vec!["a@1", "b@1", "c@2"]);
        assert_eq!(
            q.strings("SELECT note FROM app_rows"),
            vec!["c from 2,b from 1,a from 1".to_string()]
        );
    }
}

both! {
    /// Misuse fails the run with a message that says what to change: a
    /// name used twice in one run, a step called from an apply step, a bad
    /// name.
    fn a_step_name_used_twice_or_a_step_outside_a_prepare_step_fails_the_run(q) {
        let queue = q.open();
        let builder = queue.runtime().backoff(tiny_backoff()).poll_interval(Duration::from_millis(20));
        let builder = handler_with_prepare(
            builder,
            "twice",
            |ctx, _: Value| {
                ctx.step("same", |_| Ok::<_, String>(1))?;
                ctx.step("same", |_| Ok::<_, String>(2))?;
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        );
        let builder = handler_with_prepare(
            builder,
            "unnamed",
            |ctx, _: Value| {
                ctx.step("", |_| Ok::<_, String>(1))?;
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        );
        let mut rt = handler(builder, "in_apply", |tx, _: Value| {
            tx.job().step("late", |_| Ok::<_, String>(1))?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        let twice = enqueue(&queue, "twice", "twice:1");
        let unnamed = enqueue(&queue, "unnamed", "unnamed:1");
        let in_apply = enqueue(&queue, "in_apply", "in_apply:1");
        for id in [twice, unnamed, in_apply] {
            wait_state(&queue, id, JobState::Dead);
        }
        rt.stop();
        let error = |id: i64| queue.attempts(id).unwrap()[0].error.clone().unwrap_or_default();
        assert_eq!(error(twice), "step same was called twice in one run");
        assert_eq!(error(unnamed), "a step name is empty");
        assert!(
            error(in_apply).contains("ctx.step is called in a prepare step only"),
            "{}",
            error(in_apply)
        );
        // The first call of "same" was recorded once, under its one name.
        assert_eq!(
            q.count(&format!("SELECT count(*) FROM job_steps WHERE job_id = {twice}")),
            1
        );
        assert_eq!(q.count("SELECT count(*) FROM job_steps"), 1);
    }
}

both! {
    /// A result over the queue's payload limit is not recorded, and its job
    /// is discarded at once: a retry would call the step again for a value
    /// too large again.
    fn a_step_result_over_the_cap_discards_the_job_without_calling_it_again(q) {
        let queue = q.open_with(QueueOptions::default().with_max_payload_bytes(1024));
        let calls = counter();
        let c = calls.clone();
        let builder = queue.runtime().backoff(tiny_backoff()).poll_interval(Duration::from_millis(20));
        let mut rt = handler_with_prepare(
            builder,
            "big",
            move |ctx, _: Value| {
                c.fetch_add(1, Ordering::SeqCst);
                let s: String = ctx.step("fetch", |_| Ok::<_, String>("x".repeat(2000)))?;
                Ok(s.len())
            },
            |_, _: usize| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "big", "big:1");
        wait_state(&queue, id, JobState::Dead);
        rt.stop();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let a = queue.attempts(id).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(
            a[0].error.as_deref(),
            Some("discarded: step fetch's result is 2002 bytes, over the limit of 1024 bytes")
        );
        assert_eq!(q.count("SELECT count(*) FROM job_steps"), 0);
    }
}

both! {
    /// Pruning a job deletes its steps in the same transaction: a key used
    /// again later never finds a step of the job before.
    fn pruning_a_job_deletes_its_steps(q) {
        let queue = q.open();
        let mut rt = handler_with_prepare(
            queue.runtime().poll_interval(Duration::from_millis(20)),
            "k",
            |ctx, _: Value| {
                ctx.step("one", |_| Ok::<_, String>(1))?;
                ctx.step("two", |_| Ok::<_, String>(2))?;
                Ok(())
            },
            |_, ()| Ok(Outcome::Done),
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "k", "pruned:1");
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM job_steps"), 2);
        let report = queue
            .admin()
            .prune(&PruneOptions::new(Duration::ZERO))
            .unwrap();
        assert_eq!(report.jobs, 1, "{report:?}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
        assert_eq!(q.count("SELECT count(*) FROM job_steps"), 0);
    }
}

it! {
    /// The application crate `examples/shop` runs the README's durable
    /// steps example as a user's program does (CI runs it): its lines stay
    /// the README's, so what the README shows is what was run.
    fn the_example_application_runs_the_readme_steps_example_line_for_line() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let app = std::fs::read_to_string(root.join("examples/shop/src/main.rs")).unwrap();
        let section = readme
            .split("## Durable steps")
            .nth(1)
            .expect("the README has a durable steps section");
        let code = section
            .split("```rust")
            .nth(1)
            .and_then(|c| c.split("```").next())
            .expect("the section has an example");
        let app_lines: Vec<&str> = app.lines().map(str::trim).collect();
        let mut shown = 0;
        for line in code.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            shown += 1;
            assert!(
                app_lines.contains(&line),
                "examples/shop/src/main.rs lacks the README's line {line:?}"
            );
        }
        assert!(shown > 20, "only {shown} lines of the example were read");
    }
}
