//! Two real processes declare one schedule firing every second; one is
//! SIGKILLed midway and restarted. Each slot's job is created once, its
//! handler's work commits once, and the slots run on with no gap, since a
//! process ran all along.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use litejob::{Outcome, Queue};
use serde_json::json;

use crate::reliability::harness::{kill, self_exe, tail};
use crate::support::{now_ms, wait_until, TestDb, LONG};

use super::{slots_of, wait_all_succeeded};

child! {
    /// The child: declares `every-second`, whose `tick` handler records the
    /// slot's key in the app table `ticks`, announces itself in the ready file
    /// and runs until it is killed.
    fn schedule_child() {
        let db = std::env::var("LITEJOB_SCHEDULE_CHILD_DB").expect("LITEJOB_SCHEDULE_CHILD_DB");
        let ready = std::env::var("LITEJOB_SCHEDULE_CHILD_READY").expect("ready file");
        let _ = env_logger::builder()
            .parse_env(env_logger::Env::default().default_filter_or("litejob=warn"))
            .try_init();
        let q = Queue::open(&db).expect("child: open");
        let _rt = ticks_runtime(&q)
            .schedule(
                "every-second",
                "* * * * * *",
                "tick",
                &json!({"from": "child"}),
            )
            .start()
            .expect("child: start");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ready)
            .expect("ready file");
        std::io::Write::write_all(&mut f, format!("{}\n", std::process::id()).as_bytes()).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// A runtime whose `tick` handler inserts its job's key into `ticks`.
fn ticks_runtime(q: &Queue) -> litejob::RuntimeBuilder {
    q.runtime()
        .workers(1)
        .lease(Duration::from_millis(1000))
        .poll_interval(Duration::from_millis(50))
        .handler("tick", |tx, _p: serde_json::Value| {
            tx.execute("INSERT INTO ticks (key) VALUES (?1)", [&tx.job().key])?;
            Ok(Outcome::Done)
        })
}

fn spawn(db: &TestDb, stderr: &Path) -> Child {
    let err = OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr)
        .unwrap();
    crate::suite::as_child(
        &mut Command::new(self_exe()),
        "schedules::processes::schedule_child",
    )
    .env("LITEJOB_SCHEDULE_CHILD_DB", &db.path)
    .env("LITEJOB_SCHEDULE_CHILD_READY", db.dir.path().join("ready"))
    .env("RUST_LOG", "litejob=warn")
    .env_remove("LITEJOB_FAULT")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::from(err))
    .spawn()
    .expect("spawn child")
}

/// Waits until `n` children have announced themselves in the ready file.
fn wait_ready(db: &TestDb, n: usize, stderr: &Path) {
    let ready = db.dir.path().join("ready");
    wait_until(&format!("{n} children ready"), LONG, || {
        let lines = std::fs::read_to_string(&ready).unwrap_or_default();
        let up = lines.lines().count() >= n;
        if !up
            && std::fs::read_to_string(stderr)
                .unwrap_or_default()
                .contains("panicked")
        {
            panic!(
                "a child failed:\n{}",
                tail(&std::fs::read_to_string(stderr).unwrap())
            );
        }
        up
    });
}

it! {
    // Long: the whole scenario (two children, a kill, a restart) then the checks.
    fn two_processes_fire_each_slot_once_and_a_killed_one_leaves_no_gap() {
        let db = TestDb::new();
        let stderr = db.dir.path().join("children.stderr");
        let q = db.open();
        q.write(|tx| {
            tx.execute_batch("CREATE TABLE ticks (key TEXT NOT NULL)")?;
            Ok(())
        })
        .unwrap();
        let first_spawn = now_ms();
        let mut a = spawn(&db, &stderr);
        let mut b = spawn(&db, &stderr);
        wait_ready(&db, 2, &stderr);
        let both_up = now_ms();
        std::thread::sleep(Duration::from_millis(3000));
        kill(&mut a);
        std::thread::sleep(Duration::from_millis(2000));
        let mut a2 = spawn(&db, &stderr);
        wait_ready(&db, 3, &stderr);
        std::thread::sleep(Duration::from_millis(3000));
        let end = now_ms();
        kill(&mut a2);
        kill(&mut b);
        let children = std::fs::read_to_string(&stderr).unwrap_or_default();
        assert!(!children.contains("panicked"), "{}", tail(&children));

        // Finish what the children left queued or running (their leases lapse).
        let mut rt = ticks_runtime(&q).start().unwrap();
        wait_all_succeeded(&q);
        rt.stop();

        let slots = slots_of(&q, "every-second");
        assert!(
            slots.len() >= 6,
            "only {} slots fired in {} ms",
            slots.len(),
            end - first_spawn
        );
        // Consecutive: a process ran all along, so no second was left out.
        for w in slots.windows(2) {
            assert_eq!(
                w[1] - w[0],
                1000,
                "a gap between slots {} and {}",
                w[0],
                w[1]
            );
        }
        // From the first slot after both were up to the last one they surely
        // had time to fire; nothing before the first process started.
        let (first, last) = (slots[0], *slots.last().unwrap());
        assert!(
            first > first_spawn - 1000,
            "slot {first} before any process ran"
        );
        assert!(
            first <= both_up.div_euclid(1000) * 1000 + 1000,
            "first slot {first}, both up at {both_up}"
        );
        assert!(
            last >= (end - 2000).div_euclid(1000) * 1000,
            "last slot {last}, stopped at {end}"
        );
        let c = db.sql();
        // Each slot's work committed once; both processes fired (a duplicate
        // counted in deliveries), never more than the two of them.
        let per_key: Vec<(String, i64, i64, i64)> = c
            .prepare(
                "SELECT j.idempotency_key, j.deliveries, \
                    (SELECT count(*) FROM ticks t WHERE t.key = j.idempotency_key), \
                    (SELECT count(*) FROM processed_jobs p WHERE p.key = j.idempotency_key) \
             FROM jobs j ORDER BY j.id",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(per_key.len(), slots.len());
        for (key, deliveries, ticks, ledger) in &per_key {
            assert_eq!(
                (*ticks, *ledger),
                (1, 1),
                "{key}: work committed {ticks} times"
            );
            assert!(
                (1..=2).contains(deliveries),
                "{key}: {deliveries} deliveries"
            );
        }
        assert!(
            per_key.iter().any(|(_, d, _, _)| *d == 2),
            "no slot was fired by both processes"
        );
        let row_last: i64 = c
            .query_row(
                "SELECT last_slot_at FROM schedules WHERE name = 'every-second'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(row_last, last, "the row records the last slot fired");
    }
}
