//! Time as litejob stores it: integer milliseconds since the Unix epoch.
//! Only the runtime and the `Queue`'s public entry points read the clock
//! (`now_ms`), once per call; everything below them takes `now` as an
//! argument. Writes no table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the unit of every `*_at` column.
pub type Millis = i64;

/// The wall clock, in milliseconds since the epoch.
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A `SystemTime` as milliseconds since the epoch (negative before 1970).
pub(crate) fn to_millis(t: SystemTime) -> Millis {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// A stored time (ms since the Unix epoch, as every `*_at` column) as
/// `YYYY-MM-DD HH:MM:SS` UTC, as the views, the log lines and the command
/// show it.
pub fn format_millis(ms: Millis) -> String {
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

/// A duration for people, in its largest whole unit: `850ms`, `12s`, `5m`,
/// `3h`, `2d`, as stored error texts, log lines and the command show it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_format_as_utc() {
        assert_eq!(format_millis(0), "1970-01-01 00:00:00");
        assert_eq!(format_millis(1_796_083_200_000), "2026-12-01 00:00:00");
    }
}
