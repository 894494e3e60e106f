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
mod tests;
