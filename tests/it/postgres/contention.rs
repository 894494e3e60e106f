//! Producers racing other transactions for keys: a key that another
//! transaction holds, uncommitted, holds up only its own producers, never
//! the others whose jobs would have gone in with theirs (producers of one
//! process share their inserts); a deadlock the server breaks by rolling
//! an enqueue back is retried, not handed to the caller.

use crate::backends::Runtimes;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use litejob::{Enqueued, NewJob};
use serde_json::json;

use super::pg;

it! {
    /// An application's transaction has enqueued `held` and stays open. Four
    /// producers enqueue keys of their own and then `held` (each must wait for
    /// that transaction, as on any PostgreSQL table with a unique key), while
    /// eight others keep enqueueing keys of their own, so that `held` arrives
    /// while inserts are being combined. The eight are all answered while the
    /// transaction is still open; once it commits, the waiting producers learn
    /// the application's job is a duplicate of theirs.
    #[needs(Postgres)]
    fn a_key_held_by_an_open_transaction_holds_up_only_its_own_producers() {
        let q = pg();
        let queue = q.open();
        let (holding_tx, holding) = crossbeam_channel::bounded::<()>(1);
        let (others_done_tx, others_done) = crossbeam_channel::bounded::<()>(1);
        let holder = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                queue.pg().write(|tx| {
                    let id = tx
                        .enqueue(NewJob::new("k", "held", &json!({"by": "app"})))?
                        .id();
                    holding_tx.send(()).unwrap();
                    // Until the other producers are answered, or long past
                    // any lock timeout a blocked one would wait for.
                    let answered = others_done.recv_timeout(Duration::from_secs(60)).is_ok();
                    Ok((id, answered))
                })
            })
        };
        holding.recv_timeout(Duration::from_secs(30)).unwrap();
        let barrier = Arc::new(Barrier::new(12));
        let free = |queue: &litejob::admin::AnyQueue, t: usize, n: usize| {
            (0..n)
                .map(|i| {
                    queue
                        .enqueue(NewJob::new("k", format!("free:{t}:{i}"), &json!({})))
                        .expect("a free key is enqueued")
                })
                .collect::<Vec<Enqueued>>()
        };
        let waiters: Vec<_> = (0..4)
            .map(|t| {
                let (queue, barrier) = (queue.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let answers = free(&queue, 100 + t, 10);
                    assert!(answers.iter().all(|e| !e.is_duplicate()), "{answers:?}");
                    queue.enqueue(NewJob::new("k", "held", &json!({"by": t})))
                })
            })
            .collect();
        let others: Vec<_> = (0..8)
            .map(|t| {
                let (queue, barrier) = (queue.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    free(&queue, t, 40)
                })
            })
            .collect();
        for o in others {
            let answers = o.join().unwrap();
            assert!(answers.iter().all(|e| !e.is_duplicate()), "{answers:?}");
        }
        others_done_tx.send(()).unwrap();
        let (held_id, answered_while_held) = holder.join().unwrap().unwrap();
        assert!(
            answered_while_held,
            "the producers of free keys were held up behind the locked key"
        );
        for w in waiters {
            assert_eq!(w.join().unwrap().unwrap(), Enqueued::Duplicate(held_id));
        }
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE idempotency_key LIKE 'free:%'"),
            8 * 40 + 4 * 10
        );
    }
}

it! {
    /// A deadlock made on purpose: the application's transaction holds `a`
    /// and then wants `b`, while a batch enqueue holds `b` and wants `a`. The
    /// server breaks it by rolling one of them back; when that is the batch's
    /// statement (nothing of it written), the enqueue is run again and
    /// answers, never surfacing the deadlock to its caller.
    #[needs(Postgres)]
    fn a_batch_enqueue_rolled_back_to_break_a_deadlock_is_retried() {
        let q = pg();
        let queue = q.open();
        let (holding_tx, holding) = crossbeam_channel::bounded::<()>(1);
        let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
        let app = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                queue.pg().write(|tx| {
                    tx.enqueue(NewJob::new("k", "a", &json!({})))?;
                    holding_tx.send(()).unwrap();
                    go.recv_timeout(Duration::from_secs(30)).unwrap();
                    // The batch below holds `b` by now and waits for `a`.
                    std::thread::sleep(Duration::from_millis(300));
                    tx.enqueue(NewJob::new("k", "b", &json!({})))?;
                    Ok(())
                })
            })
        };
        holding.recv_timeout(Duration::from_secs(30)).unwrap();
        let batch = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                queue.enqueue_many(vec![
                    NewJob::new("k", "b", &json!({})),
                    NewJob::new("k", "a", &json!({})),
                ])
            })
        };
        go_tx.send(()).unwrap();
        let answers = batch
            .join()
            .unwrap()
            .expect("the batch enqueue is answered");
        let app = app.join().unwrap();
        assert_eq!(answers.len(), 2);
        for (key, e) in ["b", "a"].iter().zip(&answers) {
            let job = queue.job_by_key(key).unwrap().expect("one job per key");
            assert_eq!(e.id(), job.id, "{key}");
        }
        // Whichever the server rolled back, each key is one job.
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 2, "app: {app:?}");
    }
}
