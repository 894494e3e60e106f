//! Slot arithmetic: cron expressions in time zones, DST, catch-up.

use std::time::Duration;

use super::*;

/// An instant written in RFC 3339 (`2026-03-29T00:30:00Z`), in ms.
fn at(s: &str) -> Millis {
    s.parse::<Timestamp>().unwrap().as_millisecond()
}

fn fmt(slots: &[Millis]) -> Vec<String> {
    slots.iter().map(|&s| format_slot(s)).collect()
}

/// The slots after `from`, `n` of them, as RFC 3339 UTC.
fn after(s: &Slots, from: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut t = at(from);
    for _ in 0..n {
        t = s.next_after(t).unwrap();
        out.push(t);
    }
    fmt(&out)
}

fn slots(expr: &str, tz: &str) -> Slots {
    Slots::parse(expr, tz).unwrap()
}

#[test]
fn five_fields_six_with_seconds_and_the_at_forms() {
    let t = "2026-12-01T05:59:59.500Z";
    assert_eq!(
        after(&slots("0 6 * * *", "UTC"), t, 2),
        ["2026-12-01T06:00:00Z", "2026-12-02T06:00:00Z"]
    );
    assert_eq!(
        after(&slots("*/20 * * * * *", "UTC"), t, 3),
        [
            "2026-12-01T06:00:00Z",
            "2026-12-01T06:00:20Z",
            "2026-12-01T06:00:40Z"
        ]
    );
    assert_eq!(
        after(&slots("@hourly", "UTC"), t, 2),
        ["2026-12-01T06:00:00Z", "2026-12-01T07:00:00Z"]
    );
    assert_eq!(
        after(&slots("@daily", "UTC"), t, 1),
        ["2026-12-02T00:00:00Z"]
    );
    // 2026-12-06 is a Sunday.
    assert_eq!(
        after(&slots("@weekly", "UTC"), t, 1),
        ["2026-12-06T00:00:00Z"]
    );
    assert_eq!(
        after(&slots("@monthly", "UTC"), t, 1),
        ["2027-01-01T00:00:00Z"]
    );
    assert_eq!(
        after(&slots("  30 9 * * MON-FRI ", "Europe/Berlin"), t, 2),
        ["2026-12-01T08:30:00Z", "2026-12-02T08:30:00Z"]
    );
}

#[test]
fn next_after_is_strictly_after_and_latest_is_at_or_before() {
    let s = slots("0 * * * *", "UTC");
    let six = at("2026-12-01T06:00:00Z");
    assert_eq!(s.next_after(six), Some(six + 3_600_000));
    assert_eq!(s.next_after(six - 1), Some(six));
    assert_eq!(s.latest_at_or_before(six), Some(six));
    assert_eq!(s.latest_at_or_before(six - 1), Some(six - 3_600_000));
    assert_eq!(s.latest_at_or_before(six + 3_599_999), Some(six));
}

#[test]
fn bad_expressions_and_time_zones_are_refused() {
    for bad in [
        "",
        "   ",
        "* * *",
        "* * * *",
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "* * * * * * *",
        "0 0 1 1 * 2030",
        "@reboot",
        "@every 5m",
        "every day",
        "*/0 * * * *",
    ] {
        let e = Slots::parse(bad, "UTC").unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{bad:?}: {e:?}");
        assert!(e.to_string().contains("cron expression"), "{bad:?}: {e}");
    }
    for bad in [
        "",
        "Mars/Olympus_Mons",
        "Europe/Berlinn",
        "+02:00",
        "CEST-2",
    ] {
        let e = Slots::parse("* * * * *", bad).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{bad:?}: {e:?}");
        assert!(e.to_string().contains("time zone"), "{bad:?}: {e}");
    }
}

#[test]
fn a_time_skipped_by_spring_forward_fires_nothing_in_berlin() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 never happens.
    let s = slots("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        after(&s, "2026-03-27T12:00:00Z", 3),
        [
            "2026-03-28T01:30:00Z", // 02:30 CET
            "2026-03-30T00:30:00Z", // 02:30 CEST: the 29th fired nothing
            "2026-03-31T00:30:00Z",
        ]
    );
    // An every-15-minutes expression goes from 01:45 CET to 03:00 CEST.
    let q = slots("*/15 * * * *", "Europe/Berlin");
    assert_eq!(
        after(&q, "2026-03-29T00:40:00Z", 3),
        [
            "2026-03-29T00:45:00Z", // 01:45 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T01:15:00Z",
        ]
    );
    assert_eq!(
        q.latest_at_or_before(at("2026-03-29T00:59:59Z")),
        Some(at("2026-03-29T00:45:00Z"))
    );
}

#[test]
fn a_time_repeated_by_fall_back_fires_once_in_berlin() {
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:00–02:59 twice.
    let s = slots("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        after(&s, "2026-10-24T12:00:00Z", 2),
        [
            "2026-10-25T00:30:00Z", // 02:30 CEST, the first pass
            "2026-10-26T01:30:00Z", // not 01:30Z (02:30 CET) the 25th
        ]
    );
    let q = slots("*/15 * * * *", "Europe/Berlin");
    assert_eq!(
        after(&q, "2026-10-24T23:50:00Z", 6),
        [
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:15:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T00:45:00Z", // 02:45 CEST; 02:00–02:45 CET skipped
            "2026-10-25T02:00:00Z", // 03:00 CET
            "2026-10-25T02:15:00Z",
        ]
    );
    // From inside the second pass: the next slot is after it, the latest
    // is the last one of the first pass.
    let second_pass = at("2026-10-25T01:20:00Z"); // 02:20 CET
    assert_eq!(q.next_after(second_pass), Some(at("2026-10-25T02:00:00Z")));
    assert_eq!(
        q.latest_at_or_before(second_pass),
        Some(at("2026-10-25T00:45:00Z"))
    );
    assert_eq!(
        fmt(&q.between(at("2026-10-25T00:40:00Z"), at("2026-10-25T02:00:00Z"), 100)),
        ["2026-10-25T00:45:00Z", "2026-10-25T02:00:00Z"]
    );
}

#[test]
fn new_york_spring_forward_and_fall_back() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    let s = slots("0 2 * * *", "America/New_York");
    assert_eq!(
        after(&s, "2026-03-06T12:00:00Z", 2),
        ["2026-03-07T07:00:00Z", "2026-03-09T06:00:00Z"]
    );
    let h = slots("*/30 * * * *", "America/New_York");
    assert_eq!(
        after(&h, "2026-03-08T06:20:00Z", 3),
        [
            "2026-03-08T06:30:00Z", // 01:30 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT
            "2026-03-08T07:30:00Z",
        ]
    );
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 once.
    let f = slots("30 1 * * *", "America/New_York");
    assert_eq!(
        after(&f, "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn an_expression_that_only_matches_skipped_times_has_no_slot() {
    // 02:30 on the last Sunday of March: always inside Berlin's gap.
    let s = slots("30 2 * 3 0#L", "Europe/Berlin");
    assert_eq!(s.next_after(at("2026-12-01T00:00:00Z")), None);
    // February 30th never comes.
    assert_eq!(
        slots("0 0 30 2 *", "UTC").next_after(at("2026-12-01T00:00:00Z")),
        None
    );
}

#[test]
fn between_keeps_the_latest_when_there_are_too_many() {
    let s = slots("* * * * * *", "UTC");
    let t = at("2026-12-01T06:00:00Z");
    assert_eq!(s.between(t, t + 9_999, 100).len(), 10);
    assert_eq!(
        s.between(t, t + 9_999, 3),
        vec![t + 7_000, t + 8_000, t + 9_000]
    );
    assert!(s.between(t + 1, t + 999, 100).is_empty());
}

#[test]
fn catch_up_fires_the_latest_a_window_or_nothing() {
    let s = slots("0 * * * *", "UTC");
    // The row's next slot was 06:00; nothing ran until 10:30.
    let from = Some(at("2026-12-01T06:00:00Z"));
    let now = at("2026-12-01T10:30:00Z");
    assert_eq!(
        fmt(&catch_up(&s, &CatchUp::Latest, from, now)),
        ["2026-12-01T10:00:00Z"]
    );
    assert_eq!(
        fmt(&catch_up(
            &s,
            &CatchUp::Window(Duration::from_secs(3 * 3600)),
            from,
            now
        )),
        [
            "2026-12-01T08:00:00Z",
            "2026-12-01T09:00:00Z",
            "2026-12-01T10:00:00Z"
        ]
    );
    // A window wider than the stop covers every missed slot, no more.
    assert_eq!(
        catch_up(&s, &CatchUp::Window(Duration::from_secs(86_400)), from, now).len(),
        5
    );
    assert!(catch_up(&s, &CatchUp::None, from, now).is_empty());
    // Nothing missed: the next slot has not come yet.
    let early = at("2026-12-01T05:59:59Z");
    assert!(catch_up(&s, &CatchUp::Latest, from, early).is_empty());
    assert!(catch_up(
        &s,
        &CatchUp::Window(Duration::from_secs(86_400)),
        from,
        early
    )
    .is_empty());
    // A schedule never handled before misses nothing.
    assert!(catch_up(&s, &CatchUp::Latest, None, now).is_empty());
    // The slot at `from` itself was not handled yet: it is missed.
    let six = at("2026-12-01T06:00:00Z");
    assert_eq!(catch_up(&s, &CatchUp::Latest, from, six + 1), vec![six]);
}

#[test]
fn a_running_runtime_fires_every_due_slot_and_after_a_stall_only_what_the_policy_says() {
    let s = slots("* * * * * *", "UTC");
    let next = at("2026-12-01T06:00:00Z");
    // On time: the one slot.
    assert_eq!(due(&s, &CatchUp::None, next, next + 5, false), vec![next]);
    // Late (a busy lock): every slot since, whatever the policy.
    assert_eq!(
        due(&s, &CatchUp::None, next, next + 2_500, false),
        vec![next, next + 1_000, next + 2_000]
    );
    // After a stall: as at a start.
    assert_eq!(
        due(&s, &CatchUp::Latest, next, next + 600_500, true),
        vec![next + 600_000]
    );
    assert!(due(&s, &CatchUp::None, next, next + 600_500, true).is_empty());
    // Not due yet.
    assert!(due(&s, &CatchUp::Latest, next, next - 1, false).is_empty());
}

#[test]
fn slots_format_as_utc_rfc3339_to_the_second() {
    assert_eq!(
        format_slot(at("2026-12-01T06:00:00Z")),
        "2026-12-01T06:00:00Z"
    );
    assert_eq!(format_slot(0), "1970-01-01T00:00:00Z");
}
