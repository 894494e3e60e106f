//! Queue controls as values and arithmetic: a queue paused, capped (at most
//! N of its jobs running at once) or rate-limited (at most N starts per
//! rolling window), and the same two limits for each partition of a queue
//! apart, in force for every process on the queue ([`QueueLimits`],
//! [`Rate`], [`QueueControl`]), and what a claim may take under them, the
//! clock a parameter. Both engines' claims use it. Writes no table.

use std::time::Duration;

use serde::Serialize;

use crate::core::time::Millis;
use crate::error::{Error, Result};

mod partitions;
mod stored;
pub(crate) use partitions::{empty_partition_room, partition_room, partitions_at_limit};
pub use partitions::{PartitionAtLimit, PARTITIONS_LISTED};
pub(crate) use stored::{listing, Changed, Columns};

/// The longest rate window accepted: a year.
pub(crate) const MAX_WINDOW_MS: i64 = 366 * 86_400_000;

/// A rate limit: at most `limit` starts in any rolling window of `window`.
/// Shown as `100/1m` (see its `Display`).
///
/// ```
/// # use std::time::Duration;
/// let r = litejob::admin::Rate::new(100, Duration::from_secs(60)).unwrap();
/// assert_eq!(r.to_string(), "100/1m");
/// assert!(litejob::admin::Rate::new(0, Duration::from_secs(1)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    limit: u32,
    window_ms: i64,
}

impl Rate {
    /// At most `limit` starts per `window`. Refuses a limit of 0, a window
    /// under a millisecond and one over a year ([`Error::InvalidInput`]).
    pub fn new(limit: u32, window: Duration) -> Result<Rate> {
        if limit == 0 {
            return Err(Error::invalid(
                "a rate limit must allow at least 1 start per window",
            ));
        }
        let ms = window.as_millis();
        if ms == 0 {
            return Err(Error::invalid(
                "a rate window must be at least 1 millisecond long",
            ));
        }
        if ms > MAX_WINDOW_MS as u128 {
            return Err(Error::invalid(
                "a rate window must not be longer than a year",
            ));
        }
        Ok(Rate {
            limit,
            window_ms: ms as i64,
        })
    }

    /// A rate as stored; None when the columns do not make one (written by
    /// hand).
    pub(crate) fn from_columns(limit: Option<i64>, window_ms: Option<i64>) -> Option<Rate> {
        let limit = u32::try_from(limit?).ok().filter(|&n| n >= 1)?;
        let window_ms = window_ms.filter(|&w| w >= 1)?;
        Some(Rate { limit, window_ms })
    }

    /// Starts allowed per window.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms as u64)
    }

    /// The window in milliseconds (`queues.rate_window_ms`).
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }
}

/// `N/DUR`, the window in the largest unit that divides it: `100/1m`,
/// `20/1s`, `5/90s`, `1/250ms`.
impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(i64, &str); 5] = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1000, "s"),
            (1, "ms"),
        ];
        let (per, unit) = UNITS
            .into_iter()
            .find(|(per, _)| self.window_ms % per == 0)
            .unwrap_or((1, "ms"));
        write!(f, "{}/{}{unit}", self.limit, self.window_ms / per)
    }
}

/// As its text, `"100/1m"`.
impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What to do with one limit of a queue: keep it, clear it, or set it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Change<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T: Copy> Change<T> {
    fn apply(self, current: Option<T>) -> Option<T> {
        match self {
            Change::Keep => current,
            Change::Clear => None,
            Change::Set(v) => Some(v),
        }
    }
}

/// Changes to a queue's limits for [`Admin::set_queue_limits`](crate::admin::Admin::set_queue_limits); a
/// limit not named is kept. Builder-lite:
///
/// ```
/// # use std::time::Duration;
/// # use litejob::admin::{QueueLimits, Rate};
/// let limits = QueueLimits::new()
///     .concurrency(2)
///     .rate(Rate::new(100, Duration::from_secs(60)).unwrap());
/// let uncapped = QueueLimits::new().no_concurrency(); // keeps the rate
/// # let _ = (limits, uncapped);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLimits {
    pub(crate) concurrency: Change<u32>,
    pub(crate) rate: Change<Rate>,
    pub(crate) partition_concurrency: Change<u32>,
    pub(crate) partition_rate: Change<Rate>,
}

impl QueueLimits {
    /// No change yet.
    pub fn new() -> QueueLimits {
        QueueLimits::default()
    }

    /// At most `n` of the queue's jobs running at once, across every
    /// process (0 is refused when it is set).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Change::Set(n);
        self
    }

    /// No cap on running jobs.
    pub fn no_concurrency(mut self) -> Self {
        self.concurrency = Change::Clear;
        self
    }

    /// At most `rate.limit()` starts per `rate.window()`, across every
    /// process.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Change::Set(rate);
        self
    }

    /// No rate limit.
    pub fn no_rate(mut self) -> Self {
        self.rate = Change::Clear;
        self
    }

    /// At most `n` jobs of each partition of the queue running at once
    /// (see [`NewJob::with_partition`](crate::NewJob::with_partition)),
    /// across every process, beside the queue-wide cap. `1` is one at a
    /// time per key: a partition's jobs start in order of (priority,
    /// run_at, id) and never overlap. 0 is refused when it is set.
    ///
    /// ```
    /// # use litejob::admin::QueueLimits;
    /// let one_sync_per_user = QueueLimits::new().partition_concurrency(1);
    /// # let _ = one_sync_per_user;
    /// ```
    pub fn partition_concurrency(mut self, n: u32) -> Self {
        self.partition_concurrency = Change::Set(n);
        self
    }

    /// No cap per partition.
    pub fn no_partition_concurrency(mut self) -> Self {
        self.partition_concurrency = Change::Clear;
        self
    }

    /// At most `rate.limit()` starts per `rate.window()` in each partition
    /// of the queue, across every process, beside the queue-wide rate.
    pub fn partition_rate(mut self, rate: Rate) -> Self {
        self.partition_rate = Change::Set(rate);
        self
    }

    /// No rate limit per partition.
    pub fn no_partition_rate(mut self) -> Self {
        self.partition_rate = Change::Clear;
        self
    }

    /// True when it changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &QueueLimits::default()
    }
}

/// One queue's controls and load ([`Admin::queue_controls`](crate::admin::Admin::queue_controls)): a queue
/// that has jobs, a control, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueControl {
    /// The queue.
    pub name: String,
    /// Nothing new of the queue starts.
    pub paused: bool,
    /// At most this many of its jobs run at once; None: no cap.
    pub concurrency: Option<u32>,
    /// At most so many starts per window; None: no rate limit.
    pub rate: Option<Rate>,
    /// Its jobs `queued` (due or not).
    pub queued: i64,
    /// Its jobs `running` (claimed ahead or started).
    pub running: i64,
    /// Starts counted in the rate's window at the time of reading; None
    /// without a rate.
    pub started_in_window: Option<i64>,
    /// At most this many jobs of each partition run at once; None: no cap.
    pub partition_concurrency: Option<u32>,
    /// At most so many starts per window in each partition; None: no rate.
    pub partition_rate: Option<Rate>,
    /// Its partitions at their limit when it was read, the busiest first
    /// (every one when one queue's controls are read; in a listing of all
    /// queues at most [`PARTITIONS_LISTED`], and
    /// `partitions_at_limit_count` counts them all).
    pub partitions_at_limit: Vec<PartitionAtLimit>,
    /// How many of its partitions were at their limit.
    pub partitions_at_limit_count: i64,
    /// When its controls last changed; None when it has none.
    pub updated_at: Option<Millis>,
}

impl QueueControl {
    /// True when a control is in force: paused, capped or rate-limited, as
    /// a whole or per partition.
    pub fn in_force(&self) -> bool {
        self.paused
            || self.concurrency.is_some()
            || self.rate.is_some()
            || self.partition_concurrency.is_some()
            || self.partition_rate.is_some()
    }

    /// A queue with no control and no jobs counted yet.
    pub(crate) fn named(name: &str) -> QueueControl {
        QueueControl {
            name: name.to_string(),
            paused: false,
            concurrency: None,
            rate: None,
            queued: 0,
            running: 0,
            started_in_window: None,
            partition_concurrency: None,
            partition_rate: None,
            partitions_at_limit: Vec::new(),
            partitions_at_limit_count: 0,
            updated_at: None,
        }
    }

    /// A queue of `limits`, changed at `updated_at`, its load not read yet.
    pub(crate) fn with_limits(name: &str, limits: &Limits, updated_at: Millis) -> QueueControl {
        let mut c = QueueControl::named(name);
        c.paused = limits.paused;
        c.concurrency = limits.concurrency;
        c.rate = limits.rate;
        c.partition_concurrency = limits.partition_concurrency;
        c.partition_rate = limits.partition_rate;
        c.updated_at = Some(updated_at);
        c
    }

    /// Whether any control is in force.
    pub fn is_controlled(&self) -> bool {
        self.in_force()
    }
}

/// The JSON of a [`QueueControl`]: the rate as text (`"100/1m"`) and as
/// its two numbers.
impl Serialize for QueueControl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            name: &'a str,
            paused: bool,
            concurrency: Option<u32>,
            rate: Option<Rate>,
            rate_limit: Option<u32>,
            rate_window_ms: Option<i64>,
            queued: i64,
            running: i64,
            started_in_window: Option<i64>,
            partition_concurrency: Option<u32>,
            partition_rate: Option<Rate>,
            partition_rate_limit: Option<u32>,
            partition_rate_window_ms: Option<i64>,
            partitions_at_limit: &'a [PartitionAtLimit],
            partitions_at_limit_count: i64,
            updated_at: Option<Millis>,
        }
        Json {
            name: &self.name,
            paused: self.paused,
            concurrency: self.concurrency,
            rate: self.rate,
            rate_limit: self.rate.map(|r| r.limit),
            rate_window_ms: self.rate.map(|r| r.window_ms),
            queued: self.queued,
            running: self.running,
            started_in_window: self.started_in_window,
            partition_concurrency: self.partition_concurrency,
            partition_rate: self.partition_rate,
            partition_rate_limit: self.partition_rate.map(|r| r.limit),
            partition_rate_window_ms: self.partition_rate.map(|r| r.window_ms),
            partitions_at_limit: &self.partitions_at_limit,
            partitions_at_limit_count: self.partitions_at_limit_count,
            updated_at: self.updated_at,
        }
        .serialize(s)
    }
}

/// What is in force on one queue: its row of `queues`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub paused: bool,
    pub concurrency: Option<u32>,
    pub rate: Option<Rate>,
    pub partition_concurrency: Option<u32>,
    pub partition_rate: Option<Rate>,
}

impl Limits {
    /// Nothing in force: the queue needs no row.
    pub(crate) fn is_empty(&self) -> bool {
        !self.paused && !self.limited()
    }

    /// A cap or a rate, queue-wide or per partition: a claim must count
    /// the queue's load.
    pub(crate) fn limited(&self) -> bool {
        self.concurrency.is_some() || self.rate.is_some() || self.partitioned()
    }

    /// A limit per partition: a claim counts each partition's load.
    pub(crate) fn partitioned(&self) -> bool {
        self.partition_concurrency.is_some() || self.partition_rate.is_some()
    }

    /// A claim records its starts: a rate, queue-wide or per partition.
    pub(crate) fn rated(&self) -> bool {
        self.rate.is_some() || self.partition_rate.is_some()
    }

    /// The starts a claim may delete at `now`: those before both rates'
    /// margins (see [`prune_floor`]); None without a rate.
    pub(crate) fn prune_floor(&self, now: Millis) -> Option<Millis> {
        let floors = [self.rate, self.partition_rate]
            .into_iter()
            .flatten()
            .map(|r| prune_floor(now, r));
        floors.min()
    }

    /// These limits after `change` (`paused`: Some to set it).
    pub(crate) fn changed(self, paused: Option<bool>, change: &QueueLimits) -> Limits {
        Limits {
            paused: paused.unwrap_or(self.paused),
            concurrency: change.concurrency.apply(self.concurrency),
            rate: change.rate.apply(self.rate),
            partition_concurrency: change
                .partition_concurrency
                .apply(self.partition_concurrency),
            partition_rate: change.partition_rate.apply(self.partition_rate),
        }
    }
}

/// Refuses a change that sets a cap of 0 or names no queue.
pub(crate) fn check_change(queue: &str, change: &QueueLimits) -> Result<()> {
    crate::core::validate::check_name("queue", queue)?;
    if change.concurrency == Change::Set(0) {
        return Err(Error::invalid(
            "a concurrency cap must be at least 1 (clear it to lift the cap)",
        ));
    }
    if change.partition_concurrency == Change::Set(0) {
        return Err(Error::invalid(
            "a partition concurrency cap must be at least 1 (clear it to lift the cap)",
        ));
    }
    Ok(())
}

/// A queue's load when a claim counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Load {
    /// Its jobs running under an unexpired lease (claimed or started).
    pub running: i64,
    /// Starts inside the rate's window (see [`window_floor`]).
    pub started: i64,
    /// Its jobs claimed and not started yet, whatever their lease: each
    /// may still start, under its claim.
    pub claimed: i64,
}

/// The starts a rate counts at `now`: those after this instant. A start at
/// `s` counts until `s + window`, then frees its place. Starts recorded
/// after `now` (by a process whose clock runs ahead) count too, so no
/// window holds more than the limit whatever order the clocks gave them.
pub(crate) fn window_floor(now: Millis, rate: Rate) -> Millis {
    now - rate.window_ms
}

/// The starts a claim may delete at `now`: those a window before the
/// counted ones. A window's margin, not none: two processes' clocks never
/// quite agree, and a start one of them deletes as just out of the window
/// may still be inside it for another.
pub(crate) fn prune_floor(now: Millis, rate: Rate) -> Millis {
    window_floor(now, rate) - rate.window_ms
}

/// When the rate's oldest start in the window frees its place.
pub(crate) fn frees_at(oldest_start: Millis, rate: Rate) -> Millis {
    oldest_start + rate.window_ms
}

/// How many more of a queue's jobs a claim may take: none when paused;
/// under a cap, its free slots; under a rate, the starts left in the
/// window once the claimed jobs (starts to come) are counted.
pub(crate) fn room(limits: &Limits, load: &Load) -> usize {
    if limits.paused {
        return 0;
    }
    room_under(limits.concurrency, limits.rate, load)
}

/// The room a cap and a rate leave over `load`: the cap's free slots, the
/// rate's starts left once the claimed jobs (starts to come) are counted.
fn room_under(cap: Option<u32>, rate: Option<Rate>, load: &Load) -> usize {
    let mut room = i64::MAX;
    if let Some(cap) = cap {
        room = room.min(i64::from(cap) - load.running);
    }
    if let Some(rate) = rate {
        room = room.min(i64::from(rate.limit) - load.started - load.claimed);
    }
    usize::try_from(room.max(0)).unwrap_or(usize::MAX)
}
