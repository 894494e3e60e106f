//! The outbox: rows exist iff the job's transaction committed,
//! stable keys, effects outside any transaction on their own threads, their
//! own retries and death, requeueing a dead row, and a slow effect never
//! holding up jobs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use litejob::{AttemptOutcome, Error, JobState, NewJob, OutboxState, Outcome, Queue};
use serde_json::{json, Value};

use crate::support::{now_ms, tiny_backoff, wait_state, wait_until, TestDb, LONG};

fn enqueue(q: &Queue, key: &str) -> i64 {
    q.enqueue(NewJob::new("k", key, &json!({ "key": key })).with_max_retries(0))
        .unwrap()
        .id()
}

fn row(q: &Queue, key: &str) -> Option<litejob::OutboxRow> {
    q.outbox(None, 1000)
        .unwrap()
        .into_iter()
        .find(|r| r.key == key)
}

fn wait_row(q: &Queue, key: &str, state: OutboxState) -> litejob::OutboxRow {
    wait_until(&format!("outbox {key} {state}"), LONG, || {
        row(q, key).map(|r| r.state) == Some(state)
    });
    row(q, key).unwrap()
}

fn effect_outcomes(q: &Queue, id: i64) -> Vec<AttemptOutcome> {
    q.outbox_attempts(id)
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect()
}

#[test]
fn an_outbox_row_exists_if_and_only_if_its_jobs_transaction_committed() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("k", |tx, _: Value| {
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
        .map(|k| (k.to_string(), enqueue(&q, k)))
        .collect();
    for (key, id) in &ids {
        let want = if key == "ok" {
            JobState::Succeeded
        } else {
            JobState::Dead
        };
        wait_state(&q, *id, want);
    }
    rt.stop();
    // No effect is registered: the committed row waits, pending.
    let rows = q.outbox(None, 100).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.key, "mail:ok");
    assert_eq!(r.kind, "mail");
    assert_eq!(r.payload, r#"{"for":"ok"}"#);
    assert_eq!(r.state, OutboxState::Pending);
    assert_eq!((r.attempts, r.max_attempts), (0, 2));
    assert_eq!(r.job_id, Some(ids[5].1));
    assert_eq!(q.outbox_for_job(ids[5].1).unwrap().len(), 1);
    for (_, id) in &ids[..5] {
        assert!(q.outbox_for_job(*id).unwrap().is_empty());
    }
}

#[test]
fn a_second_add_with_the_same_key_is_a_no_op() {
    let db = TestDb::new();
    let q = db.open();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut rt = q
        .runtime()
        .workers(1)
        .handler("k", move |tx, _: Value| {
            let first = tx.outbox("mail", "receipt:42", &json!({ "by": tx.job().key }))?;
            // Twice in the same run, too.
            let again = tx.outbox("mail", "receipt:42", &json!({ "by": "again" }))?;
            s.lock().unwrap().push((first, again));
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    let a = enqueue(&q, "job:a");
    wait_state(&q, a, JobState::Succeeded);
    let b = enqueue(&q, "job:b");
    wait_state(&q, b, JobState::Succeeded);
    rt.stop();
    let seen = seen.lock().unwrap();
    let id = seen[0].0 .0;
    assert_eq!(
        *seen,
        vec![((id, true), (id, false)), ((id, false), (id, false))]
    );
    let rows = q.outbox(None, 100).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, r#"{"by":"job:a"}"#);
    assert_eq!(rows[0].job_id, Some(a));
}

#[test]
fn effects_run_outside_any_transaction_on_their_own_threads_with_payload_and_key() {
    let db = TestDb::new();
    let q = db.open();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let threads = Arc::new(Mutex::new(HashSet::new()));
    let (c, t, path) = (calls.clone(), threads.clone(), db.path.clone());
    let mut rt = q
        .runtime()
        .effect_workers(3)
        .handler("k", |tx, p: Value| {
            let key = p["key"].as_str().unwrap().to_string();
            tx.outbox("mail", &format!("mail:{key}"), &json!({ "to": key }))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |ctx, p: Value| {
            t.lock()
                .unwrap()
                .insert(std::thread::current().name().unwrap_or("").to_string());
            // Nobody holds the write lock while the effect runs.
            let conn = rusqlite::Connection::open(&path)?;
            conn.busy_timeout(Duration::from_secs(5))?;
            conn.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
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
    let ids: Vec<i64> = (0..12).map(|i| enqueue(&q, &format!("e{i}"))).collect();
    for i in 0..12 {
        wait_row(&q, &format!("mail:e{i}"), OutboxState::Sent);
    }
    rt.stop();
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls.len(), 12, "{calls:?}");
    for (key, to, attempt, job_id) in &calls {
        assert_eq!(key, &format!("mail:{to}"));
        assert_eq!(*attempt, 1);
        let job = q.job(job_id.unwrap()).unwrap().unwrap();
        assert_eq!(job.idempotency_key, *to);
        assert!(ids.contains(&job.id));
    }
    for name in threads.lock().unwrap().iter() {
        let n: usize = name
            .strip_prefix("litejob-effect-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("effect thread {name:?}"));
        assert!((1..=3).contains(&n));
    }
    let r = row(&q, "mail:e0").unwrap();
    assert!(r.sent_at.is_some() && r.last_error.is_none());
    assert_eq!(r.attempts, 1);
}

#[test]
fn a_failed_effect_is_retried_with_its_own_backoff_and_never_reruns_the_job() {
    let db = TestDb::new();
    let q = db.open();
    let job_runs = Arc::new(AtomicUsize::new(0));
    let effect_calls = Arc::new(AtomicUsize::new(0));
    let (j, e) = (job_runs.clone(), effect_calls.clone());
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .effect_backoff(tiny_backoff())
        .handler("k", move |tx, _: Value| {
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
    let id = enqueue(&q, "flaky-job");
    let r = wait_row(&q, "flaky:1", OutboxState::Sent);
    rt.stop();
    assert_eq!(job_runs.load(Ordering::SeqCst), 1);
    assert_eq!(effect_calls.load(Ordering::SeqCst), 2);
    assert_eq!(r.attempts, 2);
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Succeeded, 1));
    assert_eq!(q.attempts(id).unwrap().len(), 1);
    let a = q.outbox_attempts(r.id).unwrap();
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

#[test]
fn an_effect_out_of_attempts_is_dead_and_retry_outbox_gives_it_a_fresh_budget() {
    let db = TestDb::new();
    let q = db.open();
    let healthy = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (h, c) = (healthy.clone(), calls.clone());
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .effect_backoff(tiny_backoff())
        .outbox_max_retries(2)
        .handler("k", |tx, _: Value| {
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
    let id = enqueue(&q, "doomed-job");
    let dead = wait_row(&q, "doomed:1", OutboxState::Dead);
    let dead2 = wait_row(&q, "doomed:2", OutboxState::Dead);
    assert_eq!((dead.attempts, dead.max_attempts), (3, 3));
    assert_eq!(dead.last_error.as_deref(), Some("mailbox full"));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        effect_outcomes(&q, dead.id),
        vec![AttemptOutcome::Failed; 3]
    );
    assert_eq!(
        effect_outcomes(&q, dead2.id),
        vec![AttemptOutcome::Panicked; 3]
    );
    assert!(dead2.last_error.unwrap().contains("effect blew up"));
    // The job is untouched by its effects' failures.
    let job = q.job(id).unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Succeeded, 1));

    // Only a dead row can be retried; a missing one is not found.
    let err = q.retry_outbox(dead.id + 1000).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    healthy.store(true, Ordering::SeqCst);
    q.retry_outbox(dead.id).unwrap();
    let sent = wait_row(&q, "doomed:1", OutboxState::Sent);
    assert_eq!(sent.attempts, 1, "a fresh budget starts again at 1");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let err = q.retry_outbox(dead.id).unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    rt.stop();
    assert_eq!(
        effect_outcomes(&q, dead.id),
        vec![
            AttemptOutcome::Failed,
            AttemptOutcome::Failed,
            AttemptOutcome::Failed,
            AttemptOutcome::Succeeded
        ]
    );
    assert_eq!(q.attempts(id).unwrap().len(), 1);
}

#[test]
fn max_retries_of_outbox_rows_defaults_to_one() {
    let db = TestDb::new();
    let q = db.open();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .effect_backoff(tiny_backoff())
        .handler("k", |tx, _: Value| {
            tx.outbox("mail", "twice:1", &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", |_ctx, _: Value| Err("down".into()))
        .start()
        .unwrap();
    enqueue(&q, "twice-job");
    let dead = wait_row(&q, "twice:1", OutboxState::Dead);
    rt.stop();
    assert_eq!((dead.attempts, dead.max_attempts), (2, 2));
    assert_eq!(effect_outcomes(&q, dead.id).len(), 2);
}

#[test]
fn a_slow_effect_does_not_delay_job_processing() {
    let db = TestDb::new();
    let q = db.open();
    let (unblock_tx, unblock_rx) = crossbeam_channel::unbounded::<()>();
    let blocked = Arc::new(AtomicBool::new(false));
    let b = blocked.clone();
    let mut rt = q
        .runtime()
        .workers(2)
        .effect_workers(1)
        .handler("k", |tx, p: Value| {
            let key = p["key"].as_str().unwrap().to_string();
            tx.outbox("mail", &format!("slow:{key}"), &json!({}))?;
            Ok(Outcome::Done)
        })
        .effect("mail", move |_ctx, _: Value| {
            b.store(true, Ordering::SeqCst);
            // The mail provider hangs until the test lets it go.
            let _ = unblock_rx.recv_timeout(LONG);
            Ok(())
        })
        .start()
        .unwrap();
    let first = enqueue(&q, "j0");
    wait_state(&q, first, JobState::Succeeded);
    wait_until("the effect is blocked", LONG, || {
        blocked.load(Ordering::SeqCst)
    });
    // While it hangs, jobs keep completing.
    let ids: Vec<i64> = (1..=20).map(|i| enqueue(&q, &format!("j{i}"))).collect();
    for id in &ids {
        wait_state(&q, *id, JobState::Succeeded);
    }
    assert_eq!(
        q.outbox(Some(OutboxState::Sending), 100).unwrap().len(),
        1,
        "the one effect is still running"
    );
    assert_eq!(q.outbox(Some(OutboxState::Sent), 100).unwrap().len(), 0);
    // Let every effect through.
    for _ in 0..=ids.len() {
        unblock_tx.send(()).unwrap();
    }
    wait_until("all effects sent", LONG, || {
        q.outbox(Some(OutboxState::Sent), 100).unwrap().len() == 21
    });
    rt.stop();
}

/// Makes an outbox row look like a dead process was sending it.
fn simulate_dead_sender(db: &TestDb, outbox_id: i64) {
    let c = db.sql();
    let now = now_ms();
    let tx = c.unchecked_transaction().unwrap();
    tx.execute(
        "INSERT INTO attempts (outbox_id, attempt, key, worker, started_at) \
         SELECT id, attempts + 1, key, '999999/litejob-effect-1', ?2 FROM outbox WHERE id = ?1",
        (outbox_id, now - 10_000),
    )
    .unwrap();
    let attempt = tx.last_insert_rowid();
    tx.execute(
        "UPDATE outbox SET state = 'sending', attempts = attempts + 1, lease_owner = 'dead-proc', \
         lease_expires_at = ?2, current_attempt = ?3 WHERE id = ?1 AND state = 'pending'",
        (outbox_id, now - 1_000, attempt),
    )
    .unwrap();
    tx.commit().unwrap();
}

// Long: one scenario, a sender that died and the runtime that finishes its rows.
#[test]
fn an_abandoned_effect_attempt_counts_against_its_retries() {
    let db = TestDb::new();
    let q = db.open();
    // Write two committed rows through a job, with no effect running yet.
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            tx.outbox("mail", "crash:1", &json!({}))?;
            tx.outbox("mail", "crash:2", &json!({}))?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    let id = enqueue(&q, "writer");
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let one = row(&q, "crash:1").unwrap().id;
    let two = row(&q, "crash:2").unwrap().id;
    // Each died once while sending: one attempt of two left.
    simulate_dead_sender(&db, one);
    simulate_dead_sender(&db, two);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let c = calls.clone();
    let mut rt = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .effect("mail", move |ctx, _: Value| {
            c.lock().unwrap().push(ctx.key.clone());
            Ok(())
        })
        .start()
        .unwrap();
    let sent = wait_row(&q, "crash:1", OutboxState::Sent);
    assert_eq!(sent.attempts, 2);
    wait_row(&q, "crash:2", OutboxState::Sent);
    rt.stop();
    assert_eq!(
        effect_outcomes(&q, one),
        vec![AttemptOutcome::Abandoned, AttemptOutcome::Succeeded]
    );
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls, vec!["crash:1", "crash:2"]);

    // A row whose last attempt was abandoned is dead, not retried.
    let mut rt = q
        .runtime()
        .handler("k", |tx, _: Value| {
            tx.outbox("other", "crash:3", &json!({}))?;
            Ok(Outcome::Done)
        })
        .start()
        .unwrap();
    let id = enqueue(&q, "writer-3");
    wait_state(&q, id, JobState::Succeeded);
    rt.stop();
    let three = row(&q, "crash:3").unwrap().id;
    simulate_dead_sender(&db, three);
    let mut reaper = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("nothing", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    wait_row(&q, "crash:3", OutboxState::Pending);
    reaper.stop();
    simulate_dead_sender(&db, three);
    let mut reaper = q
        .runtime()
        .poll_interval(Duration::from_millis(20))
        .handler("nothing", |_tx, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    let dead = wait_row(&q, "crash:3", OutboxState::Dead);
    reaper.stop();
    assert_eq!((dead.attempts, dead.max_attempts), (2, 2));
    assert!(dead.last_error.unwrap().contains("abandoned"));
    assert_eq!(
        effect_outcomes(&q, three),
        vec![AttemptOutcome::Abandoned, AttemptOutcome::Abandoned]
    );
}
