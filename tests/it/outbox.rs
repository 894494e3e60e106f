//! The outbox, on both backends: rows exist iff the job's transaction
//! committed, stable keys, effects outside any transaction on their own
//! threads, their own retries and death, requeueing a dead row, a sender
//! that died, and a slow effect never holding up jobs.

use crate::backends::Runtimes;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{AttemptOutcome, Error, JobState, NewJob, OutboxState, Outcome};
use serde_json::{json, Value};

use crate::backends::{handler, Engine, TestQueue};
use crate::both;
use crate::support::{now_ms, tiny_backoff, wait_state, wait_until, LONG};

fn enqueue(q: &AnyQueue, key: &str) -> i64 {
    q.enqueue(NewJob::new("k", key, &json!({ "key": key })).with_max_retries(0))
        .unwrap()
        .id()
}

fn row(q: &AnyQueue, key: &str) -> Option<litejob::OutboxRow> {
    q.outbox(None, 1000)
        .unwrap()
        .into_iter()
        .find(|r| r.key == key)
}

fn wait_row(q: &AnyQueue, key: &str, state: OutboxState) -> litejob::OutboxRow {
    wait_until(&format!("outbox {key} {state}"), LONG, || {
        row(q, key).map(|r| r.state) == Some(state)
    });
    row(q, key).unwrap()
}

fn effect_outcomes(q: &AnyQueue, id: i64) -> Vec<AttemptOutcome> {
    q.admin()
        .outbox_attempts(id)
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect()
}

both! {
    /// Every way a run can end but Done, after writing its row: no row.
    /// The committed one waits, pending, for an effect (none is registered).
    fn an_outbox_row_exists_if_and_only_if_its_jobs_transaction_committed(q) {
        let queue = q.open();
        let b = queue.runtime().poll_interval(Duration::from_millis(20));
        let mut rt = handler(b, "k", |tx, _: Value| {
            let key = tx.job().key.clone();
            let (_, new) = tx.outbox("mail", &format!("mail:{key}"), &json!({ "for": key }))?;
            assert!(new);
            match key.as_str() {
                "retry" => Ok(Outcome::Retry("again".into())),
                "after" => Ok(Outcome::RetryAfter(Duration::from_millis(1), "x".into())),
                "discard" => Ok(Outcome::Discard("no".into())),
                "err" => Err("failed after writing the row".into()),
                "panic" => panic!("panicked after writing the row"),
                _ => Ok(Outcome::Done),
            }
        })
        .start()
        .unwrap();
        let ids: Vec<(String, i64)> = ["retry", "after", "discard", "err", "panic", "ok"]
            .iter()
            .map(|k| (k.to_string(), enqueue(&queue, k)))
            .collect();
        for (key, id) in &ids {
            let want = if key == "ok" {
                JobState::Succeeded
            } else {
                JobState::Dead
            };
            wait_state(&queue, *id, want);
        }
        rt.stop();
        let rows = queue.outbox(None, 100).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(r.key, "mail:ok");
        assert_eq!(r.kind, "mail");
        assert_eq!(r.payload, r#"{"for":"ok"}"#);
        assert_eq!(r.state, OutboxState::Pending);
        assert_eq!((r.attempts, r.max_attempts), (0, 2));
        assert_eq!(r.job_id, Some(ids[5].1));
        assert_eq!(queue.outbox_for_job(ids[5].1).unwrap().len(), 1);
        for (_, id) in &ids[..5] {
            assert!(queue.outbox_for_job(*id).unwrap().is_empty());
        }
        assert_eq!(q.count("SELECT count(*) FROM outbox"), 1);
    }
}

both! {
    /// Twice in the same run, and again from another job: one row, the
    /// first add's.
    fn a_second_add_with_the_same_key_is_a_no_op(q) {
        let queue = q.open();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let mut rt = handler(queue.runtime().workers(1), "k", move |tx, _: Value| {
            let by = tx.job().key.clone();
            let first = tx.outbox("mail", "receipt:42", &json!({ "by": by }))?;
            let again = tx.outbox("mail", "receipt:42", &json!({ "by": "again" }))?;
            s.lock().unwrap().push((first, again));
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        let a = enqueue(&queue, "job:a");
        wait_state(&queue, a, JobState::Succeeded);
        let b = enqueue(&queue, "job:b");
        wait_state(&queue, b, JobState::Succeeded);
        rt.stop();
        let seen = seen.lock().unwrap();
        let id = seen[0].0 .0;
        assert_eq!(
            *seen,
            vec![((id, true), (id, false)), ((id, false), (id, false))]
        );
        let rows = queue.outbox(None, 100).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].payload, r#"{"by":"job:a"}"#);
        assert_eq!(rows[0].job_id, Some(a));
    }
}

/// Inside an effect: nobody holds a lock the effect could wait on — on a
/// file another connection takes the write lock at once; on PostgreSQL the
/// effect's outbox row is not held by an open transaction (its claim's).
fn check_no_lock_held(
    engine: Engine,
    location: &str,
    outbox_id: i64,
) -> Result<(), litejob::HandlerError> {
    match engine {
        Engine::Sqlite => {
            let conn = rusqlite::Connection::open(location)?;
            conn.busy_timeout(Duration::from_secs(5))?;
            conn.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
        }
        Engine::Postgres => {
            let mut c = litejob::pg::Client::connect(location, litejob::pg::NoTls)?;
            c.batch_execute(&format!(
                "SELECT id FROM outbox WHERE id = {outbox_id} FOR UPDATE NOWAIT"
            ))?;
        }
    }
    Ok(())
}

both! {
    /// Each committed row is sent once, after its job's commit, with its
    /// stable key and payload, on the named effect threads, outside any
    /// transaction.
    fn effects_run_outside_any_transaction_on_their_own_threads_with_payload_and_key(q) {
        let queue = q.open();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let (c, t, engine, location) = (calls.clone(), threads.clone(), q.engine, q.sql_location.clone());
        let reader = queue.clone();
        let b = queue.runtime().effect_workers(3);
        let mut rt = handler(b, "k", |tx, p: Value| {
            let key = p["key"].as_str().unwrap().to_string();
            tx.outbox("mail", &format!("mail:{key}"), &json!({ "to": key }))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |ctx, p: Value| {
            t.lock()
                .unwrap()
                .insert(std::thread::current().name().unwrap_or("").to_string());
            check_no_lock_held(engine, &location, ctx.id)?;
            let job = reader.job(ctx.job_id.unwrap())?.unwrap();
            if job.state != JobState::Succeeded {
                return Err(format!("sent before its job committed: {job:?}").into());
            }
            c.lock().unwrap().push((
                ctx.key.clone(),
                p["to"].as_str().unwrap().to_string(),
                ctx.attempt,
                ctx.job_id,
            ));
            Ok(())
        })
        .start()
        .unwrap();
        let ids: Vec<i64> = (0..12).map(|i| enqueue(&queue, &format!("e{i}"))).collect();
        for i in 0..12 {
            wait_row(&queue, &format!("mail:e{i}"), OutboxState::Sent);
        }
        rt.stop();
        let mut calls = calls.lock().unwrap().clone();
        calls.sort();
        assert_eq!(calls.len(), 12, "{calls:?}");
        for (key, to, attempt, job_id) in &calls {
            assert_eq!(key, &format!("mail:{to}"));
            assert_eq!(*attempt, 1);
            let job = queue.job(job_id.unwrap()).unwrap().unwrap();
            assert_eq!(job.idempotency_key, *to);
            assert_eq!(job.state, JobState::Succeeded);
            assert!(ids.contains(&job.id));
        }
        for name in threads.lock().unwrap().iter() {
            let n: usize = name
                .strip_prefix("litejob-effect-")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("effect thread {name:?}"));
            assert!((1..=3).contains(&n));
        }
        let r = row(&queue, "mail:e0").unwrap();
        assert!(r.sent_at.is_some() && r.last_error.is_none());
        assert_eq!(r.attempts, 1);
        assert_eq!(queue.admin().outbox_attempts(r.id).unwrap().len(), 1);
        let of_job = queue.outbox_for_job(r.job_id.unwrap()).unwrap();
        assert_eq!(of_job.len(), 1);
        assert_eq!((of_job[0].id, of_job[0].state), (r.id, OutboxState::Sent));
    }
}

both! {
    /// The effect's second attempt succeeds; the job ran once and is not
    /// touched; the row's attempts name the effect thread.
    fn a_failed_effect_is_retried_with_its_own_backoff_and_never_reruns_the_job(q) {
        let queue = q.open();
        let job_runs = Arc::new(AtomicUsize::new(0));
        let effect_calls = Arc::new(AtomicUsize::new(0));
        let (j, e) = (job_runs.clone(), effect_calls.clone());
        let b = queue
            .runtime()
            .poll_interval(Duration::from_millis(20))
            .effect_backoff(tiny_backoff());
        let mut rt = handler(b, "k", move |tx, _: Value| {
            j.fetch_add(1, Ordering::SeqCst);
            tx.outbox("mail", "flaky:1", &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |ctx, _: Value| {
            e.fetch_add(1, Ordering::SeqCst);
            if ctx.attempt == 1 {
                return Err("mail server down".into());
            }
            Ok(())
        })
        .start()
        .unwrap();
        let id = enqueue(&queue, "flaky-job");
        let r = wait_row(&queue, "flaky:1", OutboxState::Sent);
        rt.stop();
        assert_eq!(job_runs.load(Ordering::SeqCst), 1);
        assert_eq!(effect_calls.load(Ordering::SeqCst), 2);
        assert_eq!(r.attempts, 2);
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Succeeded, 1));
        assert_eq!(queue.attempts(id).unwrap().len(), 1);
        let a = queue.admin().outbox_attempts(r.id).unwrap();
        assert_eq!(
            a.iter().map(|a| a.outcome).collect::<Vec<_>>(),
            vec![AttemptOutcome::Failed, AttemptOutcome::Succeeded]
        );
        for (i, a) in a.iter().enumerate() {
            assert_eq!(a.outbox_id, Some(r.id));
            assert_eq!(a.job_id, None);
            assert_eq!(a.key, "flaky:1");
            assert_eq!(a.attempt, i as i64 + 1);
            assert!(a.worker.contains("litejob-effect-"), "{}", a.worker);
            assert!(a.finished_at.is_some());
        }
        assert_eq!(a[0].error.as_deref(), Some("mail server down"));
    }
}

both! {
    /// Out of attempts (errors, or panics), a row is dead and its job
    /// untouched; only a dead row can be retried, with a fresh budget.
    fn an_effect_out_of_attempts_is_dead_and_retry_outbox_gives_it_a_fresh_budget(q) {
        let queue = q.open();
        let healthy = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let (h, c) = (healthy.clone(), calls.clone());
        let b = queue
            .runtime()
            .poll_interval(Duration::from_millis(20))
            .effect_backoff(tiny_backoff())
            .outbox_max_retries(2);
        let mut rt = handler(b, "k", |tx, _: Value| {
            tx.outbox("mail", "doomed:1", &json!({}))?;
            tx.outbox("panicky", "doomed:2", &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |_ctx, _: Value| {
            c.fetch_add(1, Ordering::SeqCst);
            if h.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("mailbox full".into())
            }
        })
        .effect(
            "panicky",
            |_ctx, _: Value| -> Result<(), litejob::HandlerError> { panic!("effect blew up") },
        )
        .start()
        .unwrap();
        let id = enqueue(&queue, "doomed-job");
        let dead = wait_row(&queue, "doomed:1", OutboxState::Dead);
        let dead2 = wait_row(&queue, "doomed:2", OutboxState::Dead);
        assert_eq!((dead.attempts, dead.max_attempts), (3, 3));
        assert_eq!(dead.last_error.as_deref(), Some("mailbox full"));
        assert_eq!(calls.load(Ordering::SeqCst), 3, "three attempts with max_retries 2");
        assert_eq!(
            effect_outcomes(&queue, dead.id),
            vec![AttemptOutcome::Failed; 3]
        );
        assert_eq!(
            effect_outcomes(&queue, dead2.id),
            vec![AttemptOutcome::Panicked; 3]
        );
        assert!(dead2.last_error.unwrap().contains("effect blew up"));
        // The job is untouched by its effects' failures.
        let job = queue.job(id).unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Succeeded, 1));

        // Only a dead row can be retried; a missing one is not found.
        let err = queue.admin().retry_outbox(dead.id + 1000).unwrap_err();
        assert!(matches!(err, Error::NotFound(_)), "{err:?}");
        healthy.store(true, Ordering::SeqCst);
        queue.admin().retry_outbox(dead.id).unwrap();
        let sent = wait_row(&queue, "doomed:1", OutboxState::Sent);
        assert_eq!(sent.attempts, 1, "a fresh budget starts again at 1");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let err = queue.admin().retry_outbox(dead.id).unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
        rt.stop();
        assert_eq!(
            effect_outcomes(&queue, dead.id),
            vec![
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Succeeded
            ]
        );
        assert_eq!(queue.attempts(id).unwrap().len(), 1);
        assert_eq!(
            q.count("SELECT count(*) FROM attempts WHERE job_id IS NOT NULL"),
            1,
            "the job ran once"
        );
    }
}

both! {
    fn max_retries_of_outbox_rows_defaults_to_one(q) {
        let queue = q.open();
        let b = queue
            .runtime()
            .poll_interval(Duration::from_millis(20))
            .effect_backoff(tiny_backoff());
        let mut rt = handler(b, "k", |tx, _: Value| {
            tx.outbox("mail", "twice:1", &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", |_ctx, _: Value| Err("down".into()))
        .start()
        .unwrap();
        enqueue(&queue, "twice-job");
        let dead = wait_row(&queue, "twice:1", OutboxState::Dead);
        rt.stop();
        assert_eq!((dead.attempts, dead.max_attempts), (2, 2));
        assert_eq!(effect_outcomes(&queue, dead.id).len(), 2);
    }
}

both! {
    /// One effect thread hangs in the provider: jobs keep completing, and
    /// every effect goes through once it is let go.
    fn a_slow_effect_does_not_delay_job_processing(q) {
        let queue = q.open();
        let (unblock_tx, unblock_rx) = crossbeam_channel::unbounded::<()>();
        let blocked = Arc::new(AtomicBool::new(false));
        let b = blocked.clone();
        let mut rt = handler(queue.runtime().workers(2).effect_workers(1), "k", |tx, p: Value| {
            let key = p["key"].as_str().unwrap().to_string();
            tx.outbox("mail", &format!("slow:{key}"), &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |_ctx, _: Value| {
            b.store(true, Ordering::SeqCst);
            let _ = unblock_rx.recv_timeout(LONG);
            Ok(())
        })
        .start()
        .unwrap();
        let first = enqueue(&queue, "j0");
        wait_state(&queue, first, JobState::Succeeded);
        wait_until("the effect is blocked", LONG, || {
            blocked.load(Ordering::SeqCst)
        });
        let ids: Vec<i64> = (1..=20).map(|i| enqueue(&queue, &format!("j{i}"))).collect();
        for id in &ids {
            wait_state(&queue, *id, JobState::Succeeded);
        }
        assert_eq!(
            queue.outbox(Some(OutboxState::Sending), 100).unwrap().len(),
            1,
            "the one effect is still running"
        );
        assert_eq!(queue.outbox(Some(OutboxState::Sent), 100).unwrap().len(), 0);
        for _ in 0..=ids.len() {
            unblock_tx.send(()).unwrap();
        }
        wait_until("all effects sent", LONG, || {
            queue.outbox(Some(OutboxState::Sent), 100).unwrap().len() == 21
        });
        rt.stop();
    }
}

/// Makes an outbox row look like a dead process was sending it.
fn simulate_dead_sender(q: &TestQueue, outbox_id: i64) {
    let now = now_ms();
    q.exec(&format!(
        "BEGIN; \
         INSERT INTO attempts (outbox_id, attempt, key, worker, started_at) \
         SELECT id, attempts + 1, key, '999999/litejob-effect-1', {started} \
         FROM outbox WHERE id = {outbox_id}; \
         UPDATE outbox SET state = 'sending', attempts = attempts + 1, lease_owner = 'dead-proc', \
         lease_expires_at = {expired}, \
         current_attempt = (SELECT max(id) FROM attempts WHERE outbox_id = {outbox_id}) \
         WHERE id = {outbox_id} AND state = 'pending'; \
         COMMIT",
        started = now - 10_000,
        expired = now - 1_000,
    ));
}

both! {
    /// One scenario: a sender that died, and the runtime that finishes its
    /// rows; its attempt was charged (the effect may have reached the
    /// world), and a row whose last attempt was abandoned is dead.
    fn an_abandoned_effect_attempt_counts_against_its_retries(q) {
        let queue = q.open();
        // Write two committed rows through a job, with no effect running yet.
        let mut rt = handler(queue.runtime(), "k", |tx, _: Value| {
            tx.outbox("mail", "crash:1", &json!({}))?;
            tx.outbox("mail", "crash:2", &json!({}))?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        let id = enqueue(&queue, "writer");
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        let one = row(&queue, "crash:1").unwrap().id;
        let two = row(&queue, "crash:2").unwrap().id;
        // Each died once while sending: one attempt of two left.
        simulate_dead_sender(q, one);
        simulate_dead_sender(q, two);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        let mut rt = queue
            .runtime()
            .poll_interval(Duration::from_millis(20))
            .effect("mail", move |ctx, _: Value| {
                c.lock().unwrap().push(ctx.key.clone());
                Ok(())
            })
            .start()
            .unwrap();
        let sent = wait_row(&queue, "crash:1", OutboxState::Sent);
        assert_eq!(sent.attempts, 2);
        wait_row(&queue, "crash:2", OutboxState::Sent);
        rt.stop();
        assert_eq!(
            effect_outcomes(&queue, one),
            vec![AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]
        );
        let mut calls = calls.lock().unwrap().clone();
        calls.sort();
        assert_eq!(calls, vec!["crash:1", "crash:2"]);

        // A row whose last attempt was abandoned is dead, not retried.
        let mut rt = handler(queue.runtime(), "k", |tx, _: Value| {
            tx.outbox("other", "crash:3", &json!({}))?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
        let id = enqueue(&queue, "writer-3");
        wait_state(&queue, id, JobState::Succeeded);
        rt.stop();
        let three = row(&queue, "crash:3").unwrap().id;
        let reaper = || {
            let b = queue.runtime().poll_interval(Duration::from_millis(20));
            handler(b, "nothing", |_, _: Value| Ok(Outcome::Done))
                .start()
                .unwrap()
        };
        simulate_dead_sender(q, three);
        let mut r = reaper();
        wait_row(&queue, "crash:3", OutboxState::Pending);
        r.stop();
        simulate_dead_sender(q, three);
        let mut r = reaper();
        let dead = wait_row(&queue, "crash:3", OutboxState::Dead);
        r.stop();
        assert_eq!((dead.attempts, dead.max_attempts), (2, 2));
        assert!(dead.last_error.unwrap().contains("abandoned"));
        assert_eq!(
            effect_outcomes(&queue, three),
            vec![AttemptOutcome::Abandoned, AttemptOutcome::Abandoned]
        );
    }
}
