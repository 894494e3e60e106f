//! The picture of a queue an operator looks at first ([`Queue::overview`]):
//! jobs per queue and state with each queue's backlog age and controls, the runs that
//! succeeded and failed minute by minute over the last hour, the outbox's
//! backlog, the ledger and the file. One read transaction. Writes no table.

use std::collections::BTreeMap;

use rusqlite::Connection;
use serde::Serialize;

use crate::controls::{self, QueueControl};
use crate::error::Result;
use crate::inspect::{file_sizes, in_snapshot, JobCounts, OutboxCounts};
use crate::queue::Queue;
use crate::tally;
use crate::time::{now_ms, Millis};

/// One minute, in the unit of the `*_at` columns.
const MINUTE: Millis = 60_000;

/// Minutes in [`Activity`].
pub const ACTIVITY_MINUTES: usize = 60;

/// The most attempt rows [`Activity`] reads: past that (more than a
/// million runs in the hour) the oldest minutes are left short, and
/// [`Activity::truncated`] says so.
const ACTIVITY_MAX_ROWS: usize = 1_000_000;

/// Attempts newest first, to read back only as far as the last hour: ids
/// grow with `started_at` (an attempt row is written when its run starts).
const RECENT_ATTEMPTS: &str =
    "SELECT started_at, finished_at, outcome FROM attempts WHERE job_id IS NOT NULL \
     ORDER BY id DESC";

/// The count of ledger rows.
const LEDGER_ROWS: &str = "SELECT count(*) FROM processed_jobs";

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

/// What [`Queue::overview`] returns.
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
    /// Rows in the `processed_jobs` ledger.
    pub ledger_rows: i64,
    /// Size of the database file in bytes.
    pub file_bytes: u64,
    /// Size of its write-ahead log in bytes.
    pub wal_bytes: u64,
}

impl Queue {
    /// Jobs per queue and state with each queue's backlog age, the last
    /// hour's runs per minute, the outbox, the ledger and the file's size,
    /// in one read transaction. Reads every job and outbox row once.
    pub fn overview(&self) -> Result<Overview> {
        let now = now_ms();
        let mut o = self.read(|conn| in_snapshot(conn, |c| overview(c, now)))?;
        (o.file_bytes, o.wal_bytes) = file_sizes(self.path());
        Ok(o)
    }
}

fn overview(conn: &Connection, now: Millis) -> Result<Overview> {
    let jobs = tally::jobs(conn, now)?;
    let mut all = JobCounts::default();
    let mut queues: BTreeMap<String, QueueOverview> = BTreeMap::new();
    for ((queue, kind), states) in &jobs.groups {
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
    let out = tally::outbox(conn)?;
    let mut outbox = OutboxCounts::default();
    let mut outbox_by_kind = BTreeMap::new();
    for (kind, states) in &out.groups {
        let k: &mut OutboxCounts = outbox_by_kind.entry(kind.clone()).or_default();
        for (state, n) in states {
            outbox.add(state.as_str(), *n);
            k.add(state.as_str(), *n);
        }
    }
    let ledger_rows = conn
        .prepare_cached(LEDGER_ROWS)?
        .query_row([], |r| r.get(0))?;
    let mut controls = controls::controlled(conn, now)?;
    for c in &mut controls {
        if let Some(q) = queues.get(&c.name) {
            (c.queued, c.running) = (q.jobs.queued, q.jobs.running);
        }
    }
    Ok(Overview {
        now,
        jobs: all,
        queues,
        controls,
        activity: activity(conn, now)?,
        outbox,
        outbox_by_kind,
        ledger_rows,
        file_bytes: 0,
        wal_bytes: 0,
    })
}

/// The last [`ACTIVITY_MINUTES`] whole minutes and the current one, read
/// from the newest attempt back. The walk stops at the first run that
/// started a minute before the window (ids follow start times up to the
/// clock differences between processes; a run that started before the
/// window and finished inside it is not counted).
fn activity(conn: &Connection, now: Millis) -> Result<Activity> {
    let end = (now.div_euclid(MINUTE) + 1) * MINUTE;
    let start = end - ACTIVITY_MINUTES as Millis * MINUTE;
    let mut a = Activity {
        start,
        succeeded: vec![0; ACTIVITY_MINUTES],
        failed: vec![0; ACTIVITY_MINUTES],
        truncated: false,
    };
    let mut st = conn.prepare_cached(RECENT_ATTEMPTS)?;
    let mut rows = st.query([])?;
    let mut read = 0;
    while let Some(r) = rows.next()? {
        let started: Millis = r.get(0)?;
        if started < start - MINUTE {
            break;
        }
        read += 1;
        if read > ACTIVITY_MAX_ROWS {
            a.truncated = true;
            break;
        }
        let Some(finished) = r.get::<_, Option<Millis>>(1)? else {
            continue;
        };
        if finished < start || finished >= end {
            continue;
        }
        let minute = ((finished - start) / MINUTE) as usize;
        match tally::text(r, 2)? {
            "succeeded" => a.succeeded[minute] += 1,
            "failed" | "panicked" => a.failed[minute] += 1,
            _ => {}
        }
    }
    Ok(a)
}
