//! Processes on PostgreSQL that die: children (this test binary with a
//! runtime on the database) SIGKILLed at random moments and aborted at
//! every announced fault point, and two processes on one database while
//! one of them is killed again and again; then a clean run, and the
//! invariants in plain SQL: nothing lost, nothing committed twice, an
//! effect repeated only where a kill landed between it and its ack.

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::NewJob;

use crate::backends::child::{check_invariants, enqueue_n, Env, BUSY};
use crate::backends::Engine;
use crate::reliability::harness::{kill, wait_timeout};
use crate::support::{wait_until, Rng};

it! {
    #[needs(Postgres)]
    fn kills_at_every_fault_point_and_at_random_lose_nothing_and_double_nothing() {
        let env = Env::new(Engine::Postgres);
        let q = env.q.open();
        let mut rng = Rng::seeded();
        let mut keys = enqueue_n(&q, "work", "w", 0, 30);
        keys.extend(enqueue_n(&q, "doomed", "d", 0, 3));
        keys.extend(enqueue_n(&q, "quick", "q", 0, 30));
        let mut next = 30;
        // Every fault point twice (the first and a later hit), then random
        // SIGKILLs.
        let mut plan: Vec<Option<String>> = litejob::fault::POINTS
            .iter()
            .flat_map(|p| {
                [
                    Some(format!("{p}:1")),
                    Some(format!("{p}:{}", 2 + rng.below(3))),
                ]
            })
            .collect();
        plan.extend((0..16).map(|_| None));
        let (mut kills, mut aborts) = (0, 0);
        let t0 = Instant::now();
        for fault in plan {
            keys.extend(enqueue_n(&q, "work", "w", next, 6));
            keys.extend(enqueue_n(&q, "quick", "q", next, 6));
            next += 6;
            let old = format!("w-{}", rng.below(next as u64));
            assert!(q
                .enqueue(NewJob::new("work", old, &serde_json::json!({})))
                .unwrap()
                .is_duplicate());
            match fault {
                Some(point) => {
                    let mut c = env.spawn(&[
                        ("LITEJOB_BCHILD_UNTIL", "idle".into()),
                        ("LITEJOB_FAULT", point),
                    ]);
                    let st =
                        wait_timeout(&mut c, Duration::from_secs(30)).unwrap_or_else(|| kill(&mut c));
                    if st.signal().is_some() {
                        aborts += 1;
                    }
                }
                None => {
                    let mut c = env.spawn(&[("LITEJOB_BCHILD_UNTIL", "forever".into())]);
                    std::thread::sleep(Duration::from_millis(100 + rng.below(500)));
                    if kill(&mut c).signal().is_some() {
                        kills += 1;
                    }
                }
            }
        }
        env.run_clean();
        let f = check_invariants(&env, &keys);
        let stderr = env.stderr_text();
        let missed: Vec<&str> = litejob::fault::POINTS
            .iter()
            .copied()
            .filter(|p| !stderr.contains(&format!("litejob-fault: aborting at {p}\n")))
            .collect();
        eprintln!(
            "postgres kills: {kills} SIGKILLs and {aborts} aborts at fault points in {:?}; {f:?}",
            t0.elapsed()
        );
        assert!(missed.is_empty(), "fault points never reached: {missed:?}");
        assert!(f.abandoned_runs > 0, "no kill ever landed during a run");
    }
}

it! {
    #[needs(Postgres)]
    fn two_processes_on_one_database_lose_nothing_while_one_is_killed_repeatedly() {
        let env = Env::new(Engine::Postgres);
        let q = env.q.open();
        let mut rng = Rng::seeded();
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut keys, mut i) = (Vec::new(), 0);
                while !stop.load(Ordering::SeqCst) {
                    keys.extend(enqueue_n(&q, "work", "p", i, 5));
                    keys.extend(enqueue_n(&q, "quick", "pq", i, 5));
                    i += 5;
                    std::thread::sleep(Duration::from_millis(40));
                }
                keys
            })
        };
        let mut steady = env.spawn(&[("LITEJOB_BCHILD_UNTIL", "forever".into())]);
        let mut kills = 0;
        for _ in 0..10 {
            let mut c = env.spawn(&[("LITEJOB_BCHILD_UNTIL", "forever".into())]);
            std::thread::sleep(Duration::from_millis(150 + rng.below(500)));
            if kill(&mut c).signal().is_some() {
                kills += 1;
            }
        }
        stop.store(true, Ordering::SeqCst);
        let keys = producer.join().unwrap();
        wait_until(
            "the steady process drains the queue",
            Duration::from_secs(120),
            || env.q.count(BUSY) == 0,
        );
        assert!(
            steady.try_wait().unwrap().is_none(),
            "the steady process died"
        );
        kill(&mut steady);
        env.run_clean();
        let f = check_invariants(&env, &keys);
        let pids = env.q.count(
            "SELECT count(DISTINCT split_part(worker, '/', 1)) FROM attempts WHERE job_id IS NOT NULL",
        );
        eprintln!(
            "postgres, two processes: {kills} kills, {} jobs, {pids} processes ran jobs; {f:?}",
            keys.len()
        );
        assert!(pids >= 2, "only {pids} process ran jobs");
    }
}
