//! Queue controls on a real file, the clock a parameter: the operator's
//! changes, and what a claim may take under a pause, a cap or a rate.

//! The window and room arithmetic with the clock as a parameter, and
//! the file's statements on a fresh file.

use super::*;
use crate::core::controls::{
    check_change, frees_at, partition_room, prune_floor, room, MAX_WINDOW_MS,
};
use crate::sql_check::fresh_file;
use std::time::Duration;

const T0: Millis = 1_000_000;

fn rate(n: u32, ms: u64) -> Rate {
    Rate::new(n, Duration::from_millis(ms)).unwrap()
}

#[test]
fn a_rate_shows_its_window_in_the_largest_unit_that_divides_it() {
    assert_eq!(rate(100, 60_000).to_string(), "100/1m");
    assert_eq!(rate(20, 1000).to_string(), "20/1s");
    assert_eq!(rate(5, 90_000).to_string(), "5/90s");
    assert_eq!(rate(1, 250).to_string(), "1/250ms");
    assert_eq!(rate(3, 7_200_000).to_string(), "3/2h");
    assert_eq!(rate(9, 86_400_000).to_string(), "9/1d");
    assert_eq!(serde_json::to_string(&rate(2, 1000)).unwrap(), "\"2/1s\"");
}

#[test]
fn a_rate_refuses_no_starts_an_empty_window_and_one_over_a_year() {
    assert!(Rate::new(0, Duration::from_secs(1)).is_err());
    assert!(Rate::new(5, Duration::ZERO).is_err());
    assert!(Rate::new(5, Duration::from_micros(999)).is_err());
    assert!(Rate::new(5, Duration::from_millis(MAX_WINDOW_MS as u64 + 1)).is_err());
    assert!(Rate::new(5, Duration::from_millis(MAX_WINDOW_MS as u64)).is_ok());
}

#[test]
fn a_start_counts_for_one_window_then_frees_its_place() {
    let r = rate(2, 1000);
    let start = T0;
    // Counted while start > now - window: through now = start + 999.
    assert!(start > window_floor(T0 + 999, r));
    assert!(start <= window_floor(T0 + 1000, r));
    assert_eq!(frees_at(start, r), T0 + 1000);
    // A start recorded ahead of the clock (another clock) still counts.
    assert!(T0 + 50 > window_floor(T0, r));
    // Deleted only a window after it stopped counting.
    assert_eq!(prune_floor(T0 + 1000, r), T0 - 1000);
}

#[test]
fn room_is_the_tightest_of_the_cap_and_the_rate_and_none_when_paused() {
    let cap = Limits {
        concurrency: Some(2),
        ..Limits::default()
    };
    let load = |running, started, claimed| Load {
        running,
        started,
        claimed,
    };
    assert_eq!(room(&cap, &load(0, 0, 0)), 2);
    assert_eq!(room(&cap, &load(1, 9, 9)), 1);
    assert_eq!(room(&cap, &load(2, 0, 0)), 0);
    // More running than the cap (it was lowered): none, not negative.
    assert_eq!(room(&cap, &load(5, 0, 0)), 0);
    let rated = Limits {
        rate: Some(rate(20, 1000)),
        ..Limits::default()
    };
    assert_eq!(room(&rated, &load(50, 0, 0)), 20);
    // Claimed jobs are starts to come.
    assert_eq!(room(&rated, &load(0, 15, 3)), 2);
    assert_eq!(room(&rated, &load(0, 20, 0)), 0);
    let both = Limits {
        concurrency: Some(4),
        rate: Some(rate(3, 1000)),
        ..Limits::default()
    };
    assert_eq!(room(&both, &load(0, 0, 0)), 3);
    assert_eq!(room(&both, &load(3, 0, 0)), 1);
    let paused = Limits {
        paused: true,
        ..both
    };
    assert_eq!(room(&paused, &load(0, 0, 0)), 0);
    assert!(room(&Limits::default(), &load(0, 0, 0)) > 1 << 40);
}

#[test]
fn a_partition_has_the_tightest_of_its_cap_and_its_rate_counted_from_its_own_load() {
    let load = |running, started, claimed| Load {
        running,
        started,
        claimed,
    };
    assert_eq!(partition_room(&Limits::default(), &load(0, 0, 0)), None);
    let one = Limits {
        partition_concurrency: Some(1),
        ..Limits::default()
    };
    assert!(one.limited() && one.partitioned() && !one.rated());
    assert_eq!(partition_room(&one, &load(0, 0, 0)), Some(1));
    assert_eq!(partition_room(&one, &load(1, 0, 0)), Some(0));
    // A cap lowered under what runs: none, not negative.
    assert_eq!(partition_room(&one, &load(3, 0, 0)), Some(0));
    let both = Limits {
        partition_concurrency: Some(4),
        partition_rate: Some(rate(2, 1000)),
        ..Limits::default()
    };
    assert!(both.rated());
    assert_eq!(partition_room(&both, &load(0, 0, 0)), Some(2));
    // Claimed jobs are starts to come.
    assert_eq!(partition_room(&both, &load(1, 1, 1)), Some(0));
    assert_eq!(partition_room(&both, &load(3, 0, 0)), Some(1));
    // The queue-wide room knows nothing of partitions.
    assert!(room(&both, &load(9, 9, 9)) > 1 << 40);
    // Starts are kept for the longer of the two windows.
    let rates = Limits {
        rate: Some(rate(5, 1000)),
        partition_rate: Some(rate(1, 60_000)),
        ..Limits::default()
    };
    assert_eq!(rates.prune_floor(T0 * 10), Some(T0 * 10 - 120_000));
}

#[test]
fn a_partition_limit_of_zero_is_refused_and_clearing_one_keeps_the_others() {
    assert!(check_change("q", &QueueLimits::new().partition_concurrency(0)).is_err());
    let l = Limits::default().changed(None, &QueueLimits::new().partition_concurrency(1));
    assert!(!l.is_empty() && l.partitioned());
    let l = l.changed(None, &QueueLimits::new().partition_rate(rate(2, 1000)));
    let l = l.changed(None, &QueueLimits::new().no_partition_concurrency());
    assert_eq!(
        (l.partition_concurrency, l.partition_rate),
        (None, Some(rate(2, 1000)))
    );
    assert!(l
        .changed(None, &QueueLimits::new().no_partition_rate())
        .is_empty());
}

#[test]
fn a_change_keeps_what_it_does_not_name() {
    let start = Limits {
        paused: true,
        concurrency: Some(3),
        rate: Some(rate(10, 1000)),
        ..Limits::default()
    };
    let l = start.changed(None, &QueueLimits::new().no_concurrency());
    assert_eq!(
        l,
        Limits {
            concurrency: None,
            ..start
        }
    );
    let l = l.changed(Some(false), &QueueLimits::new().no_rate());
    assert!(l.is_empty());
    let l = l.changed(None, &QueueLimits::new().concurrency(7));
    assert_eq!(l.concurrency, Some(7));
    assert!(!l.paused && l.limited());
}

#[test]
fn a_change_refuses_a_cap_of_zero_and_an_empty_name() {
    assert!(check_change("q", &QueueLimits::new().concurrency(0)).is_err());
    assert!(check_change("", &QueueLimits::new().concurrency(1)).is_err());
    assert!(check_change("q", &QueueLimits::new().concurrency(1)).is_ok());
}

#[test]
fn a_queue_keeps_a_row_while_a_control_is_in_force() {
    let (_dir, conn) = fresh_file();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    change(&conn, "mail", Some(true), &QueueLimits::new(), T0).unwrap();
    assert_eq!(count("SELECT count(*) FROM queues WHERE paused = 1"), 1);
    let l = change(
        &conn,
        "mail",
        None,
        &QueueLimits::new().rate(rate(5, 1000)),
        T0 + 1,
    )
    .unwrap();
    assert!(l.paused && l.rate.is_some());
    record_start(&conn, "mail", None, T0 + 2).unwrap();
    let l = change(
        &conn,
        "mail",
        Some(false),
        &QueueLimits::new().no_rate(),
        T0 + 3,
    )
    .unwrap();
    assert!(l.is_empty());
    assert_eq!(count("SELECT count(*) FROM queues"), 0);
    // Its counted starts went with the rate.
    assert_eq!(count("SELECT count(*) FROM queue_starts"), 0);
    // Resuming a queue nobody paused changes nothing.
    change(&conn, "other", Some(false), &QueueLimits::new(), T0).unwrap();
    assert_eq!(count("SELECT count(*) FROM queues"), 0);
}

#[test]
fn the_listing_counts_each_queues_jobs_and_starts_in_the_window() {
    let (_dir, conn) = fresh_file();
    for (i, q) in ["a", "a", "b"].iter().enumerate() {
        conn.execute(
            "INSERT INTO jobs (queue, kind, idempotency_key, payload, run_at, created_at) \
             VALUES (?1, 'k', ?2, '{}', 0, 0)",
            rusqlite::params![q, format!("key{i}")],
        )
        .unwrap();
    }
    change(
        &conn,
        "c",
        None,
        &QueueLimits::new().rate(rate(5, 1000)),
        T0,
    )
    .unwrap();
    for at in [T0 - 1000, T0 - 999, T0 - 1] {
        record_start(&conn, "c", None, at).unwrap();
    }
    let all = list(&conn, T0).unwrap();
    let names: Vec<&str> = all.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!((all[0].queued, all[0].updated_at), (2, None));
    // T0 - 1000 left the window at T0.
    assert_eq!(all[2].started_in_window, Some(2));
    assert_eq!(all[2].updated_at, Some(T0));
}

#[test]
fn a_claim_that_fills_partitions_takes_one_of_each_after_asking_again() {
    let (_dir, conn) = fresh_file();
    change(
        &conn,
        "sync",
        None,
        &QueueLimits::new().partition_concurrency(1),
        T0,
    )
    .unwrap();
    let mut gate = Gate::read(&conn, T0).unwrap();
    fn key_of<'c>(c: &'c (&str, &str)) -> (&'c str, Option<&'c str>) {
        ("sync", Some(c.1))
    }
    // Two partitions with two candidates each: the first round fills both
    // and asks again without them, handing back the one it took of each.
    let first = vec![
        ("j1", "acme"),
        ("j2", "globex"),
        ("j3", "acme"),
        ("j4", "globex"),
    ];
    let kept = match gate.choose(&conn, first, 4, T0, key_of).unwrap() {
        Chosen::Again(kept) => kept,
        Chosen::Done(c) => panic!("done in one round: {c:?}"),
    };
    assert_eq!(kept, [("j1", "acme"), ("j2", "globex")]);
    // The next round's query skips both partitions: only the handed-back
    // candidates come up, and each still has its partition's place.
    match gate.choose(&conn, kept, 4, T0, key_of).unwrap() {
        Chosen::Done(chosen) => assert_eq!(chosen, [("j1", "acme"), ("j2", "globex")]),
        Chosen::Again(c) => panic!("asked again: {c:?}"),
    }
    assert!(gate.held_back);
}
