//! The picture of a queue an operator looks at first ([`Admin::overview`](crate::admin::Admin::overview)):
//! jobs per queue and state with each queue's backlog age, the queues'
//! controls, the runs that
//! succeeded and failed minute by minute over the last hour, the outbox's
//! backlog, the schedules, the ledger and the storage's size. Read by the
//! backend in one snapshot; put together here, the same way for both.
//! Writes no table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::controls::QueueControl;
use crate::core::reports::stats::{JobCounts, OutboxCounts};
use crate::core::reports::tally::Tally;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;

/// One minute, in the unit of the `*_at` columns.
const MINUTE: Millis = 60_000;

/// Minutes in [`Activity`].
pub(crate) const ACTIVITY_MINUTES: usize = 60;

/// The most attempt rows [`Activity`] reads: past that (more than a
/// million runs in the hour) the oldest minutes are left short, and
/// [`Activity::truncated`] says so.
const ACTIVITY_MAX_ROWS: usize = 1_000_000;

/// One queue in the [`Overview`].
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct QueueOverview {
    /// Its jobs per state.
    pub jobs: JobCounts,
    /// How long its longest-waiting runnable job has been due (since its
    /// `run_at`), in ms; `None` when no queued job is due.
    pub oldest_due_wait_ms: Option<i64>,
    /// Its jobs per kind, per state.
    pub by_kind: BTreeMap<String, JobCounts>,
}

/// Job runs per minute over the last hour, oldest minute first.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Activity {
    /// Start of the first minute (ms since the epoch); minute `i` covers
    /// `[start + i min, start + (i + 1) min)`.
    pub start: Millis,
    /// Runs that finished `succeeded` in each minute.
    pub succeeded: Vec<i64>,
    /// Runs that finished `failed` or `panicked` in each minute.
    pub failed: Vec<i64>,
    /// True when the hour held more runs than were read.
    pub truncated: bool,
}

/// What [`Admin::overview`](crate::admin::Admin::overview) returns.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Overview {
    /// When it was read (ms since the epoch).
    pub now: Millis,
    /// All jobs per state.
    pub jobs: JobCounts,
    /// Per queue.
    pub queues: BTreeMap<String, QueueOverview>,
    /// The queues with controls in force (paused, capped, rate-limited),
    /// by name, with their load; a controlled queue may have no jobs yet.
    pub controls: Vec<QueueControl>,
    /// The last hour's runs.
    pub activity: Activity,
    /// Outbox rows per state.
    pub outbox: OutboxCounts,
    /// Outbox rows per kind, per state.
    pub outbox_by_kind: BTreeMap<String, OutboxCounts>,
    /// Every schedule's row, by name.
    pub schedules: Vec<ScheduleRow>,
    /// Rows in the `processed_jobs` ledger.
    pub ledger_rows: i64,
    /// Size of the database file in bytes (PostgreSQL: of litejob's tables
    /// on the server, indexes and TOAST included).
    pub file_bytes: u64,
    /// Size of its write-ahead log in bytes (PostgreSQL: 0, the server's
    /// log is the whole cluster's).
    pub wal_bytes: u64,
}

/// The overview of a queue from what a backend read in one snapshot.
pub(crate) fn assemble(
    now: Millis,
    t: Tally,
    activity: Activity,
    schedules: Vec<ScheduleRow>,
) -> Overview {
    let mut all = JobCounts::default();
    let mut queues: BTreeMap<String, QueueOverview> = BTreeMap::new();
    for ((queue, kind), states) in &t.jobs {
        let q = queues.entry(queue.clone()).or_default();
        let k = q.by_kind.entry(kind.clone()).or_default();
        for (state, g) in states {
            all.add(state.as_str(), g.count);
            q.jobs.add(state.as_str(), g.count);
            k.add(state.as_str(), g.count);
            if let Some(t) = g.oldest_due_run_at {
                let wait = (now - t).max(0);
                q.oldest_due_wait_ms = Some(q.oldest_due_wait_ms.map_or(wait, |w| w.max(wait)));
            }
        }
    }
    let mut outbox = OutboxCounts::default();
    let mut outbox_by_kind = BTreeMap::new();
    for (kind, states) in &t.outbox {
        let k: &mut OutboxCounts = outbox_by_kind.entry(kind.clone()).or_default();
        for (state, n) in states {
            outbox.add(state.as_str(), *n);
            k.add(state.as_str(), *n);
        }
    }
    Overview {
        now,
        jobs: all,
        queues,
        controls: Vec::new(),
        activity,
        outbox,
        outbox_by_kind,
        schedules,
        ledger_rows: t.ledger_rows,
        file_bytes: t.file_bytes,
        wal_bytes: t.wal_bytes,
    }
}

/// [`Activity`] counted from job attempts read newest first: the last
/// [`ACTIVITY_MINUTES`] whole minutes and the current one. The walk stops
/// at the first run that started a minute before the window (ids follow
/// start times up to the clock differences between processes; a run that
/// started before the window and finished inside it is not counted).
pub(crate) struct ActivityCount {
    a: Activity,
    end: Millis,
    read: usize,
}

impl ActivityCount {
    /// The window that ends with the minute of `now`.
    pub(crate) fn new(now: Millis) -> ActivityCount {
        let end = (now.div_euclid(MINUTE) + 1) * MINUTE;
        ActivityCount {
            a: Activity {
                start: end - ACTIVITY_MINUTES as Millis * MINUTE,
                succeeded: vec![0; ACTIVITY_MINUTES],
                failed: vec![0; ACTIVITY_MINUTES],
                truncated: false,
            },
            end,
            read: 0,
        }
    }

    /// Counts the next (older) run; false when the walk is over and this
    /// row was not counted.
    pub(crate) fn add(&mut self, started: Millis, finished: Option<Millis>, outcome: &str) -> bool {
        let start = self.a.start;
        if started < start - MINUTE {
            return false;
        }
        self.read += 1;
        if self.read > ACTIVITY_MAX_ROWS {
            self.a.truncated = true;
            return false;
        }
        let Some(finished) = finished else {
            return true;
        };
        if finished < start || finished >= self.end {
            return true;
        }
        let minute = ((finished - start) / MINUTE) as usize;
        match outcome {
            "succeeded" => self.a.succeeded[minute] += 1,
            "failed" | "panicked" => self.a.failed[minute] += 1,
            _ => {}
        }
        true
    }

    /// The counts.
    pub(crate) fn finish(self) -> Activity {
        self.a
    }
}
