//! Slot arithmetic, pure: the slots of a cron expression in a time zone
//! (the next after an instant, the latest at or before one, those in a
//! span), its DST rules, and which missed slots a catch-up policy fires.
//! Every time is a parameter; nothing here reads the clock. Writes no table.
//!
//! The expression is matched on the zone's wall clock (croner searches
//! civil date-times), and each match becomes an instant here (jiff): a wall
//! time that a spring-forward skips is no instant, so it fires nothing; one
//! that a fall-back repeats is its first instant only, so it fires once.
//! croner's own zoned search follows another rule (a skipped fixed time
//! fires just after the gap, a repeated wildcard time fires twice), which is
//! why it searches civil times only.

use croner::parser::{CronParser, Seconds, Year};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

use crate::core::time::Millis;
use crate::error::{Error, Result};

use super::CatchUp;

/// Wall-clock matches one search looks at before it gives up: a fall-back
/// repeats at most a few hours, which an every-second expression matches a
/// few thousand times.
const SEARCH_LIMIT: usize = 20_000;

/// Most missed slots one catch-up fires (the latest ones): a wide window on
/// a frequent expression must not enqueue millions of jobs at once.
pub(crate) const MAX_CATCH_UP: usize = 10_000;

/// The slots of a cron expression in a time zone. Slots are whole seconds,
/// as milliseconds since the epoch.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    cron: croner::Cron,
    tz: TimeZone,
}

/// Parses a cron expression: 5 fields, 6 with seconds first, or one of the
/// `@hourly` forms. Bad ones are refused with the rules in the message.
fn parse_cron(expr: &str) -> Result<croner::Cron> {
    const FORMS: &str = "5 fields (minute hour day-of-month month day-of-week), \
        6 with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly";
    let trimmed = expr.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid(format!(
            "the cron expression is empty: use {FORMS}"
        )));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(trimmed)
        .map_err(|e| {
            Error::invalid(format!(
                "cron expression {expr:?} is not valid ({e}): use {FORMS}"
            ))
        })
}

/// Looks up an IANA time zone name (`UTC`, `Europe/Berlin`).
fn parse_tz(name: &str) -> Result<TimeZone> {
    if name.trim().is_empty() {
        return Err(Error::invalid(
            "the time zone is empty: use an IANA name such as UTC or Europe/Berlin",
        ));
    }
    TimeZone::get(name).map_err(|_| {
        Error::invalid(format!(
            "unknown time zone {name:?}: use an IANA name such as UTC, Europe/Berlin or America/New_York"
        ))
    })
}

impl Slots {
    /// The slots of `expr` on the wall clock of `tz`.
    pub(crate) fn parse(expr: &str, tz: &str) -> Result<Slots> {
        Ok(Slots {
            cron: parse_cron(expr)?,
            tz: parse_tz(tz)?,
        })
    }

    /// The wall-clock time at `t`, to the second.
    fn civil(&self, t: Millis) -> Option<DateTime> {
        let ts = Timestamp::from_second(t.div_euclid(1000)).ok()?;
        Some(self.tz.to_datetime(ts))
    }

    /// The instant a matching wall-clock time fires at: none in a gap, the
    /// first one of a repeated time. Non-decreasing in the wall-clock time,
    /// which the searches below rely on.
    fn instant(&self, c: DateTime) -> Option<Millis> {
        let amb = self.tz.to_ambiguous_timestamp(c);
        if let AmbiguousOffset::Gap { .. } = amb.offset() {
            return None;
        }
        amb.earlier().ok().map(|ts| ts.as_second() * 1000)
    }

    /// The first slot after `t`; `None` when there is none (within the
    /// search limit, or the calendar's end).
    pub(crate) fn next_after(&self, t: Millis) -> Option<Millis> {
        let mut c = self.civil(t)?;
        // A wall time at or before the one at `t` fires at or before `t`.
        // Later ones may still fire before `t` when `t` is in the second
        // pass of a repeated hour: those fired in the first pass.
        for _ in 0..SEARCH_LIMIT {
            c = self.cron.find_next_occurrence(&c, false).ok()?;
            match self.instant(c) {
                Some(i) if i > t => return Some(i),
                _ => continue,
            }
        }
        None
    }

    /// The latest slot at or before `t`.
    pub(crate) fn latest_at_or_before(&self, t: Millis) -> Option<Millis> {
        let mut c = self.civil(t)?;
        let mut inclusive = true;
        let mut found = None;
        for _ in 0..SEARCH_LIMIT {
            c = self.cron.find_previous_occurrence(&c, inclusive).ok()?;
            inclusive = false;
            if let Some(i) = self.instant(c) {
                found = Some(i);
                break;
            }
        }
        // In the second pass of a repeated hour, the wall times after the
        // one at `t` fired before `t` too (in the first pass): walk on.
        let mut s = found?;
        while let Some(n) = self.next_after(s).filter(|&n| n <= t) {
            s = n;
        }
        Some(s)
    }

    /// The slots in `from..=to`, oldest first; the latest `max` of them
    /// when there are more.
    pub(crate) fn between(&self, from: Millis, to: Millis, max: usize) -> Vec<Millis> {
        let mut out = Vec::new();
        let mut at = to;
        while out.len() < max {
            match self.latest_at_or_before(at) {
                Some(s) if s >= from => {
                    out.push(s);
                    at = s - 1;
                }
                _ => break,
            }
        }
        out.reverse();
        out
    }
}

/// The slots a runtime fires for the ones it missed, looking at `now`:
/// `from` is the first slot not handled yet (the row's next slot), `None`
/// when nothing was ever handled (a new schedule misses nothing). Latest:
/// the latest missed slot; a window: every missed slot inside it; none:
/// nothing.
pub(crate) fn catch_up(
    slots: &Slots,
    policy: &CatchUp,
    from: Option<Millis>,
    now: Millis,
) -> Vec<Millis> {
    let Some(from) = from else {
        return Vec::new();
    };
    match policy {
        CatchUp::Latest => slots
            .latest_at_or_before(now)
            .filter(|&s| s >= from)
            .into_iter()
            .collect(),
        CatchUp::Window(w) => {
            let w = i64::try_from(w.as_millis()).unwrap_or(i64::MAX);
            slots.between(from.max(now.saturating_sub(w)), now, MAX_CATCH_UP)
        }
        CatchUp::None => Vec::new(),
    }
}

/// The slots a running runtime fires when it looks at `now`, its next slot
/// being `next`: every one due, late ones too (a slow write, a busy lock).
/// After a stall (the process was suspended or stopped), the slots it slept
/// through are missed ones and follow the catch-up policy, as at a start.
pub(crate) fn due(
    slots: &Slots,
    policy: &CatchUp,
    next: Millis,
    now: Millis,
    stalled: bool,
) -> Vec<Millis> {
    if stalled {
        catch_up(slots, policy, Some(next), now)
    } else {
        slots.between(next, now, MAX_CATCH_UP)
    }
}

/// A slot as the key names it: UTC, RFC 3339, to the second, with `Z`.
pub(crate) fn format_slot(slot: Millis) -> String {
    match Timestamp::from_second(slot.div_euclid(1000)) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => slot.to_string(),
    }
}

#[cfg(test)]
mod tests {
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
}
