//! Time as litejob stores it: integer milliseconds since the Unix epoch,
//! and the clock a queue reads it from ([`Clock`]: the system's, or a
//! test's). Only the runtime and the `Queue`'s public entry points read the
//! clock, once per call; everything below them takes `now` as an argument.
//! Writes no table.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A clock a test owns: it stands still until the test moves it, so a job
/// due in ten minutes runs once the test says ten minutes passed, at once.
/// Clones share the one time. Give it to a queue with
/// [`QueueOptions::with_clock`](crate::QueueOptions::with_clock).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use litejob::testing::ManualClock;
///
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
/// let later = clock.clone();
/// clock.advance(Duration::from_secs(600));
/// assert_eq!(later.now(), UNIX_EPOCH + Duration::from_secs(1_800_000_600));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `at` (to the millisecond).
    pub fn new(at: SystemTime) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(to_millis(at))))
    }

    /// The time it stands at.
    pub fn now(&self) -> SystemTime {
        let ms = self.0.load(Ordering::SeqCst);
        if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        }
    }

    /// Moves it forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = d.as_millis().min(i64::MAX as u128) as i64;
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets it to `at` (forward or back).
    pub fn set(&self, at: SystemTime) {
        self.0.store(to_millis(at), Ordering::SeqCst);
    }

    /// The queue's view of it.
    pub(crate) fn clock(&self) -> Clock {
        Clock::Manual(self.0.clone())
    }
}

impl Default for ManualClock {
    /// A clock standing at the system's time when it is made.
    fn default() -> Self {
        ManualClock::new(SystemTime::now())
    }
}

/// The clock a queue reads every time it stores from: run times, backoff,
/// leases, schedules' slots, rate windows, `created_at`, `finished_at`.
#[derive(Debug, Clone, Default)]
pub(crate) enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// A clock a test owns and moves (`litejob::testing::ManualClock`).
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// Now, on this clock.
    pub(crate) fn now(&self) -> Millis {
        match self {
            Clock::System => now_ms(),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    /// True for a test's clock, which wins over any other (a database
    /// server's).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(_))
    }
}

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

/// `d` in the largest units that say it exactly: `300ms`, `30s`,
/// `1m30s`, `2h`.
pub fn exact_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) || ms == 0 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (sec, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
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
