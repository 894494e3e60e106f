//! The server going away mid-run and coming back (a restart, a failover):
//! every connection closed and new ones refused for two seconds while a
//! runtime works through a backlog and a producer keeps enqueueing. The
//! workers pause and resume, nothing is lost (every job succeeds), no run
//! counts twice, enqueues during the outage fail with a transient error
//! that says the server is out of reach, and succeed again after it.

use crate::backends::Runtimes;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::{NewJob, QueueOptions};
use serde_json::json;

use super::pg;
use super::proxy::Proxy;
use super::wakeups::upstream;
use crate::backends::{Engine, TestQueue};
use crate::support::{wait_until, LONG};

/// What the producer saw.
#[derive(Default)]
struct Produced {
    /// Keys whose enqueue returned Ok.
    ok: Vec<String>,
    /// Errors: transient or not, and the message.
    errors: Vec<(bool, String)>,
    /// Enqueues that returned Ok after the server came back.
    ok_after: usize,
}

/// The invariants after the work is done, in plain SQL.
fn check_nothing_lost_nothing_doubled(q: &TestQueue, ok: &[String]) {
    let keys: HashSet<String> = q
        .strings("SELECT idempotency_key FROM jobs")
        .into_iter()
        .collect();
    for k in ok {
        assert!(keys.contains(k), "job {k} lost: its enqueue returned Ok");
    }
    assert_eq!(
        q.count("SELECT count(*) FROM jobs WHERE state <> 'succeeded'"),
        0,
        "every job succeeded"
    );
    let jobs = q.count("SELECT count(*) FROM jobs");
    assert_eq!(q.count("SELECT count(*) FROM app_rows"), jobs, "app rows");
    assert_eq!(
        q.count("SELECT count(*) FROM processed_jobs"),
        jobs,
        "ledger rows"
    );
    assert_eq!(
        q.count(
            "SELECT count(*) FROM (SELECT key FROM app_rows GROUP BY key HAVING count(*) > 1) d"
        ),
        0,
        "a key's work committed twice"
    );
    assert_eq!(
        q.count(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE job_id IS NOT NULL AND outcome = 'succeeded' \
             GROUP BY job_id HAVING count(*) > 1) d"
        ),
        0,
        "a job with two succeeded runs"
    );
    assert_eq!(
        q.count("SELECT count(*) FROM attempts WHERE outcome = 'running'"),
        0
    );
}

it! {
    #[needs(Postgres)]
    fn the_server_going_away_mid_run_pauses_the_workers_and_loses_nothing() {
        let q = pg();
        q.create_app_table();
        let direct = q.open();
        let backlog: Vec<NewJob> = (0..300)
            .map(|i| NewJob::new("work", format!("b-{i}"), &json!({})))
            .collect();
        direct.enqueue_many(backlog).unwrap();
        let proxy = Proxy::start(&upstream(&q.location));
        // A short busy timeout, so an enqueue during the outage gives up
        // within it instead of waiting for the server.
        let opts = QueueOptions::default().with_busy_timeout(Duration::from_millis(500));
        let queue = litejob::admin::AnyQueue::open_with(proxy.url(&q.location), opts).unwrap();
        let mut rt = crate::backends::app_handler(
            Engine::Postgres,
            queue
                .runtime()
                .workers(4)
                .poll_interval(Duration::from_millis(100)),
            "work",
            |_, _| {
                // Slow enough that the backlog outlasts the outage.
                std::thread::sleep(Duration::from_millis(15));
                Ok(litejob::Outcome::Done)
            },
        )
        .start()
        .unwrap();

        let produced = Arc::new(Mutex::new(Produced::default()));
        let (stop, restored) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let producer = {
            let (queue, produced, stop, restored) = (
                queue.clone(),
                produced.clone(),
                stop.clone(),
                restored.clone(),
            );
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("p-{i}");
                    i += 1;
                    let r = queue.enqueue(NewJob::new("work", key.as_str(), &json!({})));
                    let mut p = produced.lock().unwrap();
                    match r {
                        Ok(_) => {
                            p.ok.push(key);
                            if restored.load(Ordering::SeqCst) {
                                p.ok_after += 1;
                            }
                        }
                        Err(e) => p.errors.push((e.is_transient(), e.to_string())),
                    }
                    drop(p);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        wait_until("the runtime is under way", Duration::from_secs(30), || {
            q.count("SELECT count(*) FROM app_rows") >= 40
        });
        proxy.cut();
        let cut_at = q.count("SELECT count(*) FROM app_rows");
        std::thread::sleep(Duration::from_secs(2));
        let during = q.count("SELECT count(*) FROM app_rows");
        proxy.restore();
        restored.store(true, Ordering::SeqCst);
        let t0 = Instant::now();
        wait_until("enqueues succeed again", Duration::from_secs(30), || {
            produced.lock().unwrap().ok_after >= 20
        });
        stop.store(true, Ordering::SeqCst);
        producer.join().unwrap();
        // Well within the 30 s lease: no run waits for one to expire.
        wait_until("the workers resume and finish", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state <> 'succeeded'") == 0
        });
        let resumed_in = t0.elapsed();
        rt.stop();
        let p = produced.lock().unwrap();
        eprintln!(
            "outage: {} rows at the cut, {during} after 2 s cut, all {} jobs done {resumed_in:?} after; \
         {} enqueues failed, {} connections refused",
            cut_at,
            q.count("SELECT count(*) FROM jobs"),
            p.errors.len(),
            proxy.refused()
        );
        assert!(
            proxy.refused() > 0,
            "nothing tried to reach the server while it was away"
        );
        assert!(
            during - cut_at <= 4 * 32,
            "work went on while the server was away"
        );
        assert!(!p.errors.is_empty(), "no enqueue failed during the outage");
        eprintln!("outage: the first failed enqueue said: {}", p.errors[0].1);
        for (transient, msg) in &p.errors {
            assert!(
                *transient,
                "an enqueue failed for good during the outage: {msg}"
            );
            assert!(msg.contains("database server"), "unclear: {msg}");
        }
        check_nothing_lost_nothing_doubled(&q, &p.ok);
        assert_eq!(
            q.count("SELECT count(*) FROM attempts WHERE outcome = 'abandoned'"),
            0,
            "a run waited for its lease to expire"
        );
    }
}

it! {
    /// A claim the server committed whose answer the connection lost (the
    /// reply held back, then the cut): the job and the outbox row it took are
    /// given back uncharged as soon as the server is back — not left until
    /// their 30 s lease runs out, and not counted abandoned.
    #[needs(Postgres)]
    fn a_claim_whose_answer_was_lost_is_given_back_uncharged_at_once() {
        let q = pg();
        q.create_app_table();
        drop(q.open());
        let proxy = Proxy::start(&upstream(&q.location));
        let queue = litejob::admin::AnyQueue::open_with(proxy.url(&q.location), QueueOptions::default()).unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c2 = calls.clone();
        let mut rt = crate::backends::app_handler(
            Engine::Postgres,
            queue
                .runtime()
                .workers(1)
                .effect_workers(1)
                .poll_interval(Duration::from_millis(200)),
            "work",
            crate::backends::done,
        )
        .effect("mail", move |_, _: serde_json::Value| {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .start()
        .unwrap();
        // The answers of both claims (job and outbox row, which draw their
        // attempt ids the same way) are held back, then lost in the cut.
        proxy.hold_answers_to(Some("nextval((SELECT pg_get_serial_sequence('attempts'"));
        // Claims already on their way pass, empty.
        std::thread::sleep(Duration::from_millis(500));
        // Written by another process: the runtime's polls claim them.
        q.exec(
            "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
         VALUES ('work', 'lost-1', '{}', 0, 0); \
         INSERT INTO outbox (key, kind, payload, max_attempts, next_attempt_at, created_at) \
         VALUES ('mail:lost', 'mail', '{}', 3, 0, 0)",
        );
        wait_until("both claims' answers held back", LONG, || {
            proxy.answers_held() == 2
        });
        proxy.hold_answers_to(None);
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE state = 'running'"),
            1
        );
        assert_eq!(
            q.count("SELECT count(*) FROM outbox WHERE state = 'sending'"),
            1
        );
        proxy.cut();
        std::thread::sleep(Duration::from_millis(500));
        proxy.restore();
        wait_until("the job and the effect are done", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 1
                && q.count("SELECT count(*) FROM outbox WHERE state = 'sent'") == 1
        });
        rt.stop();
        let outcomes = |of: &str| {
            q.strings(&format!(
                "SELECT outcome FROM attempts WHERE {of} IS NOT NULL ORDER BY id"
            ))
        };
        assert_eq!(outcomes("job_id"), ["released", "succeeded"]);
        assert_eq!(outcomes("outbox_id"), ["released", "succeeded"]);
        assert_eq!(
            q.count("SELECT attempts + abandoned FROM jobs"),
            1,
            "the lost claim was charged"
        );
        assert_eq!(
            q.count("SELECT attempts FROM outbox"),
            1,
            "the lost claim was charged"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the effect ran once");
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1);
    }
}
