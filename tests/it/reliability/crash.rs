//! Processes that die: SIGKILL at random moments and aborts at announced
//! fault points, two processes on one file, a poison pill, and a run that
//! hangs outside its transaction past its lease (fencing).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::{NewJob, Queue};

use super::harness::{
    self, check_invariants, enqueue_n, enqueue_quick, kill, soak, wait_timeout, Env,
};
use crate::support::{wait_until, Rng};

it! {
    /// 100 kills in CI (a mix of random SIGKILLs and aborts at announced
    /// points), 1000 with `LITEJOB_SOAK=1`; then nothing lost, nothing doubled.
    fn random_kills_lose_nothing_and_double_nothing() {
        let env = Env::new();
        let q = env.db.open();
        let mut rng = Rng::seeded();
        let target = if soak() { 1000 } else { 100 };
        let mut keys = enqueue_n(&q, "work", "w", 0, 60);
        keys.extend(enqueue_n(&q, "doomed", "d", 0, 5));
        keys.extend(enqueue_quick(&q, 0, 60));
        let mut kills = 0;
        let mut fault_aborts = 0;
        let mut next = 60;
        let t0 = Instant::now();
        let mut round = 0;
        while kills < target {
            round += 1;
            keys.extend(enqueue_n(&q, "work", "w", next, 8));
            keys.extend(enqueue_quick(&q, next, 8));
            next += 8;
            // A redelivery of an old key is a duplicate, never a new job.
            let old = format!("w-{}", rng.below(next as u64));
            let again = q
                .enqueue(NewJob::new("work", old, &serde_json::json!({})))
                .unwrap();
            assert!(again.is_duplicate());
            if round % 3 == 0 {
                let point =
                    litejob::fault::POINTS[rng.below(litejob::fault::POINTS.len() as u64) as usize];
                let nth = 1 + rng.below(4);
                let mut c = env.spawn(&[
                    ("LITEJOB_CHILD_UNTIL", "idle".into()),
                    ("LITEJOB_FAULT", format!("{point}:{nth}")),
                ]);
                let st = match wait_timeout(&mut c, Duration::from_secs(20)) {
                    Some(st) => st,
                    None => kill(&mut c),
                };
                if st.signal().is_some() {
                    kills += 1;
                    fault_aborts += 1;
                }
            } else {
                let mut c = env.spawn(&[("LITEJOB_CHILD_UNTIL", "forever".into())]);
                std::thread::sleep(Duration::from_millis(30 + rng.below(600)));
                let st = kill(&mut c);
                if st.signal().is_some() {
                    kills += 1;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(if soak() { 3600 } else { 150 }),
                "only {kills} kills after {:?}",
                t0.elapsed()
            );
        }
        env.run_clean();
        let f = check_invariants(&env, &keys);
        eprintln!(
            "random kills: {kills} kills survived ({fault_aborts} at fault points) in {:?}; {f:?}",
            t0.elapsed()
        );
        assert!(f.abandoned_runs > 0, "no kill ever landed during a run");
        let stderr = env.stderr_text();
        let hit: Vec<String> = litejob::fault::POINTS
            .iter()
            .map(|p| {
                let n = stderr
                    .matches(&format!("litejob-fault: aborting at {p}\n"))
                    .count();
                format!("{p}={n}")
            })
            .collect();
        eprintln!("random kills: aborts per fault point: {}", hit.join(" "));
    }
}

it! {
    /// Two processes with workers on one file; one is killed and restarted
    /// repeatedly while the parent keeps enqueueing.
    fn two_processes_on_one_file_lose_nothing_while_one_is_killed_repeatedly() {
        let env = Env::new();
        let q = env.db.open();
        let mut rng = Rng::seeded();
        let stop = Arc::new(AtomicBool::new(false));
        let producer = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut keys = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    keys.extend(enqueue_n(&q, "work", "p", i, 5));
                    i += 5;
                    std::thread::sleep(Duration::from_millis(40));
                }
                keys
            })
        };
        let mut steady = env.spawn(&[("LITEJOB_CHILD_UNTIL", "forever".into())]);
        let rounds = if soak() { 200 } else { 20 };
        let mut kills = 0;
        for _ in 0..rounds {
            let mut c = env.spawn(&[("LITEJOB_CHILD_UNTIL", "forever".into())]);
            std::thread::sleep(Duration::from_millis(100 + rng.below(500)));
            if kill(&mut c).signal().is_some() {
                kills += 1;
            }
        }
        stop.store(true, Ordering::SeqCst);
        let keys = producer.join().unwrap();
        // Let the steady process finish what is left, then stop it too.
        let sql = env.db.sql();
        wait_until(
            "the steady process drains the queue",
            Duration::from_secs(120),
            || harness::busy_count(&sql).unwrap() == 0,
        );
        assert!(
            steady.try_wait().unwrap().is_none(),
            "the steady process died"
        );
        kill(&mut steady);
        env.run_clean();
        let f = check_invariants(&env, &keys);
        let pids: i64 = env.db.count(
            "SELECT count(DISTINCT substr(worker, 1, instr(worker, '/'))) FROM attempts WHERE job_id IS NOT NULL",
        );
        eprintln!(
            "two processes: {kills} kills, {} jobs, {pids} processes ran jobs; {f:?}",
            keys.len()
        );
        assert!(pids >= 2, "only {pids} process ran jobs");
    }
}

it! {
    /// A job that aborts the process every time it runs ends `dead` after its
    /// third abandoned run, while the other jobs complete.
    fn poison_pill_dies_after_three_abandoned_runs() {
        let env = Env::new();
        let q = env.db.open();
        let mut keys = enqueue_n(&q, "work", "a", 0, 10);
        keys.extend(enqueue_n(&q, "crash", "poison", 0, 1));
        keys.extend(enqueue_n(&q, "work", "b", 0, 10));
        let mut aborts = 0;
        let t0 = Instant::now();
        loop {
            // One worker: nothing but the poison pill runs when it aborts.
            let mut c = env.spawn(&[
                ("LITEJOB_CHILD_UNTIL", "idle".into()),
                ("LITEJOB_CHILD_WORKERS", "1".into()),
                ("LITEJOB_CHILD_LEASE_MS", "500".into()),
            ]);
            let st = wait_timeout(&mut c, Duration::from_secs(60)).expect("child stuck");
            if st.success() {
                break;
            }
            assert_eq!(st.signal(), Some(6), "child died otherwise: {st:?}");
            aborts += 1;
            assert!(
                aborts <= 3,
                "the poison pill crashed the process {aborts} times"
            );
            assert!(t0.elapsed() < Duration::from_secs(120));
        }
        assert_eq!(aborts, 3);
        let job = q.job_by_key("poison-0").unwrap().unwrap();
        assert_eq!(job.state, litejob::JobState::Dead);
        assert_eq!(job.abandoned, 3);
        let err = job.last_error.unwrap_or_default();
        assert!(err.contains("abandoned 3 times"), "{err}");
        // Abandoned runs are not charged against max_retries.
        assert_eq!(job.attempts, 0);
        let f = check_invariants(&env, &keys);
        assert_eq!(f.falsely_poisoned, 0);
        assert_eq!(f.succeeded, 20);
    }
}

it! {
    /// A run that hangs outside its transaction past its lease (the process is
    /// frozen, so it cannot renew it): another process takes the job over and
    /// completes it; the first run's completion is refused; effects = 1.
    fn hung_run_past_its_lease_is_fenced_off() {
        let env = Env::new();
        let q = env.db.open();
        q.enqueue(NewJob::new("slow", "slow-1", &serde_json::json!({})))
            .unwrap();
        let mut a = env.spawn(&[
            ("LITEJOB_CHILD_UNTIL", "forever".into()),
            ("LITEJOB_CHILD_SLOW_MS", "2000".into()),
            ("LITEJOB_CHILD_LEASE_MS", "600".into()),
        ]);
        wait_until("process A starts the job", Duration::from_secs(30), || {
            std::fs::read_to_string(&env.starts)
                .unwrap_or_default()
                .lines()
                .count()
                == 1
        });
        let pid = a.id().to_string();
        let stop = |sig: &str| {
            let st = Command::new("kill").args([sig, &pid]).status().unwrap();
            assert!(st.success(), "kill {sig} {pid}");
        };
        // Freeze A while its handler sleeps in prepare: its lease runs out.
        stop("-STOP");
        let mut h = env.handlers(Duration::from_millis(600));
        h.slow_ms = 0;
        let mut b = harness::runtime(&q, &h).start().unwrap();
        wait_until(
            "process B completes the job",
            Duration::from_secs(30),
            || q.job_by_key("slow-1").unwrap().unwrap().state == litejob::JobState::Succeeded,
        );
        // Wake A: its prepare ends, its apply must be refused.
        stop("-CONT");
        wait_until("A's run is refused", Duration::from_secs(30), || {
            let e = env.stderr_text();
            e.contains("lease lost") || e.contains("no longer holds")
        });
        b.stop();
        kill(&mut a);
        let starts = std::fs::read_to_string(&env.starts).unwrap();
        assert_eq!(starts.lines().count(), 2, "two runs started: {starts}");
        let job = q.job_by_key("slow-1").unwrap().unwrap();
        let attempts = q.attempts(job.id).unwrap();
        let outcomes: Vec<&str> = attempts.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, ["abandoned", "succeeded"]);
        env.run_clean();
        check_invariants(&env, &["slow-1".to_string()]);
        let _ = Queue::open(&env.db.path).unwrap();
    }
}
