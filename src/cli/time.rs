//! Times and durations as the command shows and reads them: stored
//! milliseconds as UTC text, spans like `12s` or `3h`, and durations typed
//! on the command line. Writes no table.

use std::time::Duration;

pub(crate) use litejob::__command::{format_duration, format_millis};

/// A stored timeout (ms) in the largest units that say it exactly:
/// `300ms`, `30s`, `1m30s`.
pub(crate) fn exact_duration(ms: i64) -> String {
    litejob::__command::exact_duration(Duration::from_millis(ms.max(0) as u64))
}

/// Now, in ms since the epoch, as the library stores times.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Parses a duration like `500ms`, `30s`, `15m`, `12h`, `7d` (or a sum:
/// `1h30m`). The error is the message to show.
///
/// A bare number is refused: its unit would be a guess, and a wrong guess
/// in `prune --older-than 7` deletes history its operator meant to keep.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {s:?}: use a number with a unit (30s, 15m, 12h, 7d)");
    let s = s.trim();
    if s.is_empty() || s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: u128 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms_per: u128 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = total
            .checked_add(n.checked_mul(ms_per).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    if total > (i64::MAX as u128) / 2 {
        return Err(bad());
    }
    Ok(Duration::from_millis(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_people_write_them() {
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            parse_duration("12h").unwrap(),
            Duration::from_secs(12 * 3600)
        );
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        for bad in [
            "",
            "45",
            "0",
            "d",
            "7x",
            "-3d",
            "1.5h",
            "h1",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn millis_format_as_utc() {
        assert_eq!(format_millis(0), "1970-01-01 00:00:00");
        assert_eq!(format_millis(1_796_083_200_000), "2026-12-01 00:00:00");
    }
}
