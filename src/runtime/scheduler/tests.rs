//! The scheduler on a real file with the clock as a parameter: what a start
//! catches up under each policy, what a running runtime fires, and how two
//! processes (two queues on one file, each with its own writer) share the
//! slots.

use std::time::Duration;

use jiff::Timestamp;

use super::*;
use crate::core::options::QueueOptions;
use crate::core::schedule::{CatchUp, ScheduleRow};
use crate::sqlite::schedules;

/// An instant written in RFC 3339, in ms.
fn at(s: &str) -> Millis {
    s.parse::<Timestamp>().unwrap().as_millisecond()
}

fn file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    (dir, path)
}

fn hourly(catch_up: CatchUp) -> Declared {
    Schedule::new(
        "digest",
        "0 * * * *",
        "send_digest",
        &serde_json::json!({"n": 1}),
    )
    .with_catch_up(catch_up)
    .declared()
    .unwrap()
}

/// The keys of every job in the file, oldest first.
fn keys(q: &Queue) -> Vec<String> {
    q.read(|c| {
        let mut st = c.prepare("SELECT idempotency_key FROM jobs ORDER BY id")?;
        let k = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(k)
    })
    .unwrap()
}

fn deliveries(q: &Queue, key: &str) -> i64 {
    q.job_by_key(key).unwrap().unwrap().deliveries
}

fn row(q: &Queue) -> ScheduleRow {
    q.read(|c| schedules::get(c, "digest")).unwrap().unwrap()
}

/// A runtime that declared the hourly digest at 05:30, then stopped.
fn declared_at_0530(catch_up: CatchUp) -> (tempfile::TempDir, Queue) {
    let (dir, path) = file();
    let q = Queue::open(&path).unwrap();
    let armed = declare(&q, vec![hourly(catch_up)], at("2026-12-01T05:30:00Z")).unwrap();
    assert_eq!(armed[0].next, Some(at("2026-12-01T06:00:00Z")));
    assert!(keys(&q).is_empty(), "a new schedule misses nothing");
    let r = row(&q);
    assert_eq!(r.last_slot_at, None);
    assert_eq!(r.next_slot_at, Some(at("2026-12-01T06:00:00Z")));
    (dir, q)
}

/// Restarts at 10:30 after a stop from 05:30: slots 06:00 to 10:00 missed.
fn restart_at_1030(q: &Queue, catch_up: CatchUp) -> Vec<String> {
    let armed = declare(q, vec![hourly(catch_up)], at("2026-12-01T10:30:00Z")).unwrap();
    assert_eq!(armed[0].next, Some(at("2026-12-01T11:00:00Z")));
    assert_eq!(row(q).next_slot_at, Some(at("2026-12-01T11:00:00Z")));
    keys(q)
}

#[test]
fn a_start_fires_only_the_latest_missed_slot_by_default() {
    let (_d, q) = declared_at_0530(CatchUp::default());
    assert_eq!(
        restart_at_1030(&q, CatchUp::default()),
        ["schedule:digest:2026-12-01T10:00:00Z"]
    );
    assert_eq!(row(&q).last_slot_at, Some(at("2026-12-01T10:00:00Z")));
    // Started again at once: that slot is not fired twice.
    declare(
        &q,
        vec![hourly(CatchUp::Latest)],
        at("2026-12-01T10:31:00Z"),
    )
    .unwrap();
    assert_eq!(keys(&q).len(), 1);
    assert_eq!(deliveries(&q, "schedule:digest:2026-12-01T10:00:00Z"), 1);
    // Not even when the row's next slot is moved back before it by hand.
    let five_hours = 5 * 3_600_000;
    q.write(move |tx| {
        tx.execute(
            "UPDATE schedules SET next_slot_at = next_slot_at - ?1",
            [five_hours],
        )?;
        Ok(())
    })
    .unwrap();
    declare(
        &q,
        vec![hourly(CatchUp::Latest)],
        at("2026-12-01T10:32:00Z"),
    )
    .unwrap();
    assert_eq!(keys(&q).len(), 1);
    assert_eq!(deliveries(&q, "schedule:digest:2026-12-01T10:00:00Z"), 1);
}

#[test]
fn a_start_with_a_window_fires_every_missed_slot_inside_it() {
    let (_d, q) = declared_at_0530(CatchUp::Window(Duration::from_secs(3 * 3600)));
    assert_eq!(
        restart_at_1030(&q, CatchUp::Window(Duration::from_secs(3 * 3600))),
        [
            "schedule:digest:2026-12-01T08:00:00Z",
            "schedule:digest:2026-12-01T09:00:00Z",
            "schedule:digest:2026-12-01T10:00:00Z",
        ]
    );
    let (_d, q) = declared_at_0530(CatchUp::Window(Duration::from_secs(86_400)));
    assert_eq!(
        restart_at_1030(&q, CatchUp::Window(Duration::from_secs(86_400))).len(),
        5,
        "06:00 to 10:00, nothing before the stop"
    );
}

#[test]
fn a_start_with_catch_up_none_fires_nothing_missed() {
    let (_d, q) = declared_at_0530(CatchUp::None);
    assert!(restart_at_1030(&q, CatchUp::None).is_empty());
    assert_eq!(row(&q).last_slot_at, None);
    // And a later start does not count the skipped slots as missed again.
    let armed = declare(
        &q,
        vec![hourly(CatchUp::Latest)],
        at("2026-12-01T10:40:00Z"),
    )
    .unwrap();
    assert_eq!(armed[0].next, Some(at("2026-12-01T11:00:00Z")));
    assert!(keys(&q).is_empty());
}

#[test]
fn a_running_scheduler_fires_each_slot_when_it_comes_and_nothing_before() {
    let (_d, q) = declared_at_0530(CatchUp::Latest);
    let mut a = declare(
        &q,
        vec![hourly(CatchUp::Latest)],
        at("2026-12-01T05:31:00Z"),
    )
    .unwrap()
    .remove(0);
    let before = row(&q);
    a.turn(&q, at("2026-12-01T05:59:59.999Z"), false);
    assert!(keys(&q).is_empty());
    assert_eq!(row(&q), before, "nothing written before the slot");
    a.turn(&q, at("2026-12-01T06:00:00.004Z"), false);
    assert_eq!(keys(&q), ["schedule:digest:2026-12-01T06:00:00Z"]);
    let r = row(&q);
    assert_eq!(r.last_slot_at, Some(at("2026-12-01T06:00:00Z")));
    assert_eq!(r.next_slot_at, Some(at("2026-12-01T07:00:00Z")));
    assert_eq!(a.next, Some(at("2026-12-01T07:00:00Z")));
    // Late (a slow write held it up past two slots): both fire.
    a.turn(&q, at("2026-12-01T08:00:01Z"), false);
    assert_eq!(
        keys(&q)[1..],
        [
            "schedule:digest:2026-12-01T07:00:00Z",
            "schedule:digest:2026-12-01T08:00:00Z"
        ]
    );
    // After a stall (suspended from 08:00 to 12:30): as at a start.
    a.turn(&q, at("2026-12-01T12:30:00Z"), true);
    assert_eq!(keys(&q)[3..], ["schedule:digest:2026-12-01T12:00:00Z"]);
    assert_eq!(a.next, Some(at("2026-12-01T13:00:00Z")));
}

#[test]
fn a_stall_that_ends_before_the_next_slot_misses_nothing() {
    let (_d, q) = declared_at_0530(CatchUp::None);
    let mut a = declare(&q, vec![hourly(CatchUp::None)], at("2026-12-01T05:31:00Z"))
        .unwrap()
        .remove(0);
    // Suspended from 05:31 to 05:45, then the 06:00 slot on time.
    a.turn(&q, at("2026-12-01T05:45:00Z"), true);
    a.turn(&q, at("2026-12-01T06:00:00.002Z"), false);
    assert_eq!(keys(&q), ["schedule:digest:2026-12-01T06:00:00Z"]);
}

#[test]
fn two_processes_create_each_slot_once_and_the_second_counts_a_delivery() {
    let (_d, path) = file();
    let (qa, qb) = (Queue::open(&path).unwrap(), Queue::open(&path).unwrap());
    let t0 = at("2026-12-01T05:30:00Z");
    let mut a = declare(&qa, vec![hourly(CatchUp::Latest)], t0)
        .unwrap()
        .remove(0);
    let mut b = declare(&qb, vec![hourly(CatchUp::Latest)], t0 + 1000)
        .unwrap()
        .remove(0);
    let six = at("2026-12-01T06:00:00Z");
    a.turn(&qa, six + 3, false);
    let after_a = row(&qa);
    b.turn(&qb, six + 9, false);
    assert_eq!(keys(&qa), ["schedule:digest:2026-12-01T06:00:00Z"]);
    assert_eq!(deliveries(&qa, "schedule:digest:2026-12-01T06:00:00Z"), 2);
    assert_eq!(row(&qa), after_a, "the duplicate moved nothing");
    assert_eq!(b.next, Some(six + 3_600_000));
    // A dies; B fires 07:00 alone; A restarts at 07:30: nothing is missed
    // (B ran) and nothing fires twice.
    drop(a);
    b.turn(&qb, six + 3_600_000 + 2, false);
    let mut a = declare(&qa, vec![hourly(CatchUp::Latest)], six + 5_400_000)
        .unwrap()
        .remove(0);
    assert_eq!(keys(&qa).len(), 2);
    assert_eq!(deliveries(&qa, "schedule:digest:2026-12-01T07:00:00Z"), 1);
    a.turn(&qa, six + 7_200_001, false);
    b.turn(&qb, six + 7_200_005, false);
    assert_eq!(
        keys(&qa),
        [
            "schedule:digest:2026-12-01T06:00:00Z",
            "schedule:digest:2026-12-01T07:00:00Z",
            "schedule:digest:2026-12-01T08:00:00Z",
        ]
    );
}

#[test]
fn a_failed_firing_keeps_its_slot_and_fires_it_once_the_lock_is_free() {
    let (_d, path) = file();
    let q = Queue::open_with(
        &path,
        QueueOptions::default().with_busy_timeout(Duration::from_millis(50)),
    )
    .unwrap();
    let mut a = declare(&q, vec![hourly(CatchUp::None)], at("2026-12-01T05:30:00Z"))
        .unwrap()
        .remove(0);
    // Another program holds the write lock.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let six = at("2026-12-01T06:00:00Z");
    a.turn(&q, six + 1, false);
    assert_eq!(a.next, Some(six), "the slot waits");
    assert_eq!(a.retry_at, Some(six + 1 + RETRY_MS));
    // Not tried again before its retry time.
    a.turn(&q, six + 500, false);
    other.execute_batch("COMMIT").unwrap();
    a.turn(&q, six + 500, false);
    assert!(keys(&q).is_empty());
    // Later than the next slot by then: both fire, whatever the policy
    // (the process ran all along).
    a.turn(&q, six + 3_600_000 + 10, false);
    assert_eq!(
        keys(&q),
        [
            "schedule:digest:2026-12-01T06:00:00Z",
            "schedule:digest:2026-12-01T07:00:00Z"
        ]
    );
    assert_eq!(a.retry_at, None);
}

#[test]
fn a_new_declaration_replaces_the_row_and_keeps_its_slots() {
    let (_d, q) = declared_at_0530(CatchUp::Latest);
    let mut a = declare(
        &q,
        vec![hourly(CatchUp::Latest)],
        at("2026-12-01T05:31:00Z"),
    )
    .unwrap()
    .remove(0);
    a.turn(&q, at("2026-12-01T06:00:00.001Z"), false);
    let other = Schedule::new("digest", "30 6 * * *", "weekly_digest", &2)
        .with_tz("Europe/Berlin")
        .with_queue("mail")
        .with_max_retries(3)
        .with_catch_up(CatchUp::Window(Duration::from_secs(60)))
        .declared()
        .unwrap();
    let t = at("2026-12-01T06:10:00Z");
    let found = q
        .write(move |tx| {
            let mut tx = tx;
            SlotTx::declare(&mut tx, &other, t).map(|d| format!("{d:?}"))
        })
        .unwrap();
    assert!(found.starts_with("Changed"), "{found}");
    for what in [
        "cron",
        "tz",
        "kind",
        "payload",
        "queue",
        "max_retries",
        "catch_up",
    ] {
        assert!(found.contains(&format!("\"{what} ")), "{what}: {found}");
    }
    let r = row(&q);
    assert_eq!(
        (
            r.cron.as_str(),
            r.tz.as_str(),
            r.kind.as_str(),
            r.payload.as_str()
        ),
        ("30 6 * * *", "Europe/Berlin", "weekly_digest", "2")
    );
    assert_eq!((r.queue.as_str(), r.max_retries), ("mail", Some(3)));
    assert_eq!(
        (r.catch_up.as_str(), r.catch_up_window_ms),
        ("window", Some(60_000))
    );
    assert_eq!(r.updated_at, t);
    assert_eq!(r.last_slot_at, Some(at("2026-12-01T06:00:00Z")));
}

#[test]
fn the_row_only_moves_forward() {
    let (_d, q) = declared_at_0530(CatchUp::Latest);
    let (seven, eight) = (at("2026-12-01T07:00:00Z"), at("2026-12-01T08:00:00Z"));
    let moved = q
        .write(move |tx| {
            Ok((
                schedules::fired(tx, "digest", eight, Some(eight + 3_600_000))?,
                schedules::fired(tx, "digest", seven, Some(eight))?,
                schedules::fired(tx, "digest", eight, Some(eight + 3_600_000))?,
            ))
        })
        .unwrap();
    assert_eq!(moved, (true, false, false));
    assert_eq!(row(&q).last_slot_at, Some(eight));
}
