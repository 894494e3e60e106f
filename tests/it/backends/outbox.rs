//! The outbox on both backends: a row exists if and only if its job's
//! transaction committed; its effect runs after the commit with the row's
//! stable key, is retried on failure with its own budget without running
//! the job again, and an operator can requeue a dead one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use litejob::{JobState, NewJob, OutboxState, Outcome, RuntimeBuilder};
use serde_json::{json, Value};

use super::Engine;
use crate::both;
use crate::support::{tiny_backoff, wait_state, wait_until, LONG};

/// A handler of `kind` that writes an outbox row `mail:<key>` and then
/// says what `fail` says (true: the run fails).
fn mailer(engine: Engine, b: RuntimeBuilder, fail: bool) -> RuntimeBuilder {
    let outcome = move || {
        if fail {
            Err::<Outcome, litejob::HandlerError>("the accounting failed".into())
        } else {
            Ok(Outcome::Done)
        }
    };
    match engine {
        Engine::Sqlite => b.handler("order", move |tx, p: Value| {
            tx.outbox("send_mail", &format!("mail:{}", tx.job().key), &p)?;
            outcome()
        }),
        Engine::Postgres => b.pg_handler("order", move |tx, p: Value| {
            let key = format!("mail:{}", tx.job().key);
            tx.outbox("send_mail", &key, &p)?;
            outcome()
        }),
    }
}

both! {
    /// A committed job's outbox row is sent once, after the commit, with
    /// its stable key.
    fn an_outbox_row_is_sent_after_its_job_committed(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("order", "o1", &json!({"to": "a@b"}))).unwrap().id();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let s = sent.clone();
        let mut rt = mailer(q.engine, queue.runtime(), false)
            .effect("send_mail", move |e, p: Value| {
                s.lock().unwrap().push((e.key.clone(), p));
                Ok(())
            })
            .start()
            .unwrap();
        wait_state(&queue, id, JobState::Succeeded);
        wait_until("sent", LONG, || !queue.outbox(Some(OutboxState::Sent), 10).unwrap().is_empty());
        rt.stop();
        assert_eq!(*sent.lock().unwrap(), [("mail:o1".to_string(), json!({"to": "a@b"}))]);
        let rows = queue.outbox_for_job(id).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].state, rows[0].attempts), (OutboxState::Sent, 1));
        assert_eq!(queue.outbox_attempts(rows[0].id).unwrap().len(), 1);
    }
}

both! {
    /// A job whose transaction failed leaves no outbox row: nothing is sent.
    fn a_failed_job_writes_no_outbox_row(q) {
        let queue = q.open();
        let id = queue
            .enqueue(NewJob::new("order", "o2", &json!({})).with_max_retries(0))
            .unwrap()
            .id();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let mut rt = mailer(q.engine, queue.runtime(), true)
            .effect("send_mail", move |_, _: Value| {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .start()
            .unwrap();
        wait_state(&queue, id, JobState::Dead);
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM outbox"), 0);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}

both! {
    /// A failing effect is retried with its own budget, never re-running
    /// the job; out of attempts it is dead, and a retry requeues it.
    fn a_failing_effect_retries_on_its_own_and_a_dead_one_can_be_retried(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("order", "o3", &json!({}))).unwrap().id();
        let calls = Arc::new(AtomicUsize::new(0));
        let ok_after = Arc::new(AtomicUsize::new(usize::MAX));
        let (c, ok) = (calls.clone(), ok_after.clone());
        let mut rt = mailer(q.engine, queue.runtime(), false)
            .outbox_max_retries(2)
            .effect_backoff(tiny_backoff())
            .poll_interval(std::time::Duration::from_millis(50))
            .effect("send_mail", move |_, _: Value| {
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                if n >= ok.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("smtp 451".into())
                }
            })
            .start()
            .unwrap();
        wait_until("dead", LONG, || !queue.outbox(Some(OutboxState::Dead), 10).unwrap().is_empty());
        assert_eq!(calls.load(Ordering::SeqCst), 3, "three attempts with max_retries 2");
        assert_eq!(q.count("SELECT count(*) FROM attempts WHERE job_id IS NOT NULL"), 1, "the job ran once");
        let row = queue.outbox_for_job(id).unwrap().remove(0);
        ok_after.store(4, Ordering::SeqCst);
        queue.retry_outbox(row.id).unwrap();
        wait_until("sent", LONG, || !queue.outbox(Some(OutboxState::Sent), 10).unwrap().is_empty());
        rt.stop();
        let e = queue.retry_outbox(row.id).unwrap_err();
        assert!(e.is_invalid_input(), "a sent row is not dead: {e}");
        assert!(queue.retry_outbox(99_999).unwrap_err().is_not_found());
    }
}
