//! Times and durations as the command shows and reads them: stored
//! milliseconds as UTC text, spans like `12s` or `3h`, and durations typed
//! on the command line. Writes no table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wall clock, in milliseconds since the epoch (the unit of the file's
/// `*_at` columns).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Formats stored milliseconds as `YYYY-MM-DD HH:MM:SS` UTC, like the views.
pub fn format_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats a duration for people: `850ms`, `12s`, `5m`, `3h`, `2d`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{}s", ms / 1000),
        60_000..=3_599_999 => format!("{}m", ms / 60_000),
        3_600_000..=86_399_999 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

/// Parses a duration like `500ms`, `30s`, `15m`, `12h`, `7d` (or a sum:
/// `1h30m`). A bare number is seconds. The error is the message to show.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {s:?}: use a number with a unit, like 30s, 15m, 12h or 7d");
    let s = s.trim();
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Duration::from_secs(n));
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
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        for bad in ["", "d", "7x", "-3d", "1.5h", "h1", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn millis_format_as_utc() {
        assert_eq!(format_millis(0), "1970-01-01 00:00:00");
        assert_eq!(format_millis(1_796_083_200_000), "2026-12-01 00:00:00");
    }
}
