//! Schedules (periodic jobs), a file per behaviour they pin: two real
//! processes firing one schedule, one of them killed and restarted; the
//! catch-up after a stop; nothing written while no slot is due; what a
//! declaration is checked for and how a new one replaces the row; the
//! `schedules`, `explain` and `stats` commands.
//!
//! The helpers the files share live here: a no-op handler's runtime, the
//! slots of a schedule's jobs, and moving a row's next slot back as if its
//! runtimes had stopped earlier.

mod catch_up;
mod cli;
mod declaration;
mod idle;
mod processes;

use std::time::Duration;

use litejob::{JobState, Outcome, Queue, RuntimeBuilder};

use crate::support::{wait_until, LONG};

/// A runtime whose `tick` handler does nothing but succeed.
fn ticking(q: &Queue) -> RuntimeBuilder {
    q.runtime()
        .workers(1)
        .poll_interval(Duration::from_millis(50))
        .handler("tick", |_tx, _p: serde_json::Value| Ok(Outcome::Done))
}

/// The slots (ms since the epoch) of the jobs of schedule `name`, oldest
/// first, read from their keys `schedule:<name>:<slot>`.
fn slots_of(q: &Queue, name: &str) -> Vec<i64> {
    let prefix = format!("schedule:{name}:");
    let keys: Vec<String> = q
        .read(|c| {
            let mut st = c.prepare(
                "SELECT idempotency_key FROM jobs WHERE substr(idempotency_key, 1, length(?1)) = ?1",
            )?;
            let k = st
                .query_map([&prefix], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(k)
        })
        .unwrap();
    let mut slots: Vec<i64> = keys
        .iter()
        .map(|k| parse_slot(&k[prefix.len()..]).unwrap_or_else(|| panic!("key {k:?}")))
        .collect();
    slots.sort_unstable();
    slots
}

/// `2026-12-01T06:00:00Z` as ms since the epoch; `None` unless exactly
/// that form (UTC, to the second, with `Z`).
fn parse_slot(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let form = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !form {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, sec) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from civil (Howard Hinnant).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400) + h * 3600 + mi * 60 + sec) * 1000)
}

/// Moves the row's next slot back by `ms`, as if the runtimes declaring it
/// had stopped that much earlier.
fn stopped_earlier(q: &Queue, name: &str, ms: i64) {
    let c = rusqlite::Connection::open(q.location()).unwrap();
    c.busy_timeout(Duration::from_secs(30)).unwrap();
    let n = c
        .execute(
            "UPDATE schedules SET next_slot_at = next_slot_at - ?2 WHERE name = ?1",
            (name, ms),
        )
        .unwrap();
    assert_eq!(n, 1, "no schedule {name}");
}

/// Waits until every job of the file has finished.
fn wait_all_succeeded(q: &Queue) {
    wait_until("every job succeeded", LONG, || {
        q.admin().stats().unwrap().jobs.get(JobState::Succeeded)
            == q.admin().stats().unwrap().jobs.total
    });
}

it! {
    fn slot_keys_parse_back_to_their_instant() {
        assert_eq!(parse_slot("2026-12-01T06:00:00Z"), Some(1_796_104_800_000));
        assert_eq!(parse_slot("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_slot("2026-12-01T06:00:00.000Z"), None);
        assert_eq!(parse_slot("2026-12-01T06:00:00+00:00"), None);
    }
}
