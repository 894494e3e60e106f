//! Queue controls on a file: every statement on its `queues` and
//! `queue_starts` tables, and the gate a claim passes its candidates
//! through, queue by queue and (for a queue with partition limits)
//! partition by partition. PostgreSQL's twin is `postgres/controls.rs`; the values and
//! the arithmetic are the core's. Writes `queues` (the operator's changes)
//! and `queue_starts` (a rate-limited queue's starts, and their pruning).
//!
//! Exact across processes because a claim reads the controls and counts the
//! queue's load in its own transaction, under the file's write lock: two
//! claims never count the same free slot. A claimed job waiting for a
//! worker holds its lease, so it counts as running for the cap, and as a
//! start to come for the rate (it starts at or after its claim). A
//! partition's load is counted the same way, from its own rows: no
//! counter is kept that a crash or a lost lease could leave wrong.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension};

use crate::core::controls::{listing, window_floor, Changed, Columns};
use crate::core::controls::{Limits, Load, QueueControl, QueueLimits, Rate, PARTITIONS_LISTED};
use crate::core::time::Millis;
use crate::error::Result;

// The file's statements. The load's counts read the running jobs through
// `jobs_lease` (the running set, small however many jobs wait or finished)
// and the starts through `queue_starts_window`.

const ROWS: &str = "SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at, \
     partition_concurrency, partition_rate_limit, partition_rate_window_ms FROM queues";
const ROW: &str = "SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at, \
     partition_concurrency, partition_rate_limit, partition_rate_window_ms \
     FROM queues WHERE name = ?1";
const UPSERT: &str = "INSERT INTO queues (name, paused, concurrency, rate_limit, rate_window_ms, \
     updated_at, partition_concurrency, partition_rate_limit, partition_rate_window_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (name) DO UPDATE SET \
     paused = excluded.paused, concurrency = excluded.concurrency, \
     rate_limit = excluded.rate_limit, rate_window_ms = excluded.rate_window_ms, \
     updated_at = excluded.updated_at, partition_concurrency = excluded.partition_concurrency, \
     partition_rate_limit = excluded.partition_rate_limit, \
     partition_rate_window_ms = excluded.partition_rate_window_ms";
const DELETE: &str = "DELETE FROM queues WHERE name = ?1";
const FORGET_STARTS: &str = "DELETE FROM queue_starts WHERE queue = ?1";
const RUNNING: &str = "SELECT coalesce(sum(lease_expires_at >= ?2), 0), \
     coalesce(sum(current_attempt IS NULL), 0), count(*) \
     FROM jobs WHERE state = 'running' AND queue = ?1";
const STARTED: &str =
    "SELECT count(*), min(started_at) FROM queue_starts WHERE queue = ?1 AND started_at > ?2";
const PRUNE_STARTS: &str = "DELETE FROM queue_starts WHERE queue = ?1 AND started_at <= ?2";
const RECORD_START: &str =
    "INSERT INTO queue_starts (queue, started_at, partition_key) VALUES (?1, ?2, ?3)";
// A partitioned queue's load, partition by partition: only the partitions
// with a job running or a start in the window have a row (through
// `jobs_partition_running` and `queue_starts_partition`).
const PARTITIONS_RUNNING: &str = "SELECT partition_key, count(*), \
     coalesce(sum(current_attempt IS NULL), 0) FROM jobs \
     WHERE state = 'running' AND queue = ?1 AND partition_key IS NOT NULL GROUP BY partition_key";
const PARTITIONS_STARTED: &str = "SELECT partition_key, count(*) FROM queue_starts \
     WHERE queue = ?1 AND partition_key IS NOT NULL AND started_at > ?2 GROUP BY partition_key";
const JOB_COUNTS: &str = "SELECT queue, coalesce(sum(state = 'queued'), 0), \
     coalesce(sum(state = 'running'), 0) FROM jobs GROUP BY queue";

/// A row of `queues`: its name, limits and time of change.
fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Limits, Millis)> {
    let columns = Columns {
        paused: r.get::<_, i64>(1)? != 0,
        concurrency: r.get(2)?,
        rate_limit: r.get(3)?,
        rate_window_ms: r.get(4)?,
        partition_concurrency: r.get(6)?,
        partition_rate_limit: r.get(7)?,
        partition_rate_window_ms: r.get(8)?,
    };
    Ok((r.get(0)?, columns.limits(), r.get(5)?))
}

/// Applies an operator's change to `queue` (pause, resume, limits), as
/// [`Changed::of`] decides, and returns what is in force after it.
pub(crate) fn change(
    conn: &Connection,
    queue: &str,
    paused: Option<bool>,
    limits: &QueueLimits,
    now: Millis,
) -> Result<Limits> {
    let current = conn
        .prepare_cached(ROW)?
        .query_row([queue], from_row)
        .optional()?
        .map(|(_, l, _)| l)
        .unwrap_or_default();
    let changed = Changed::of(current, paused, limits);
    match changed.row {
        None => conn.prepare_cached(DELETE)?.execute([queue])?,
        Some(c) => conn.prepare_cached(UPSERT)?.execute(rusqlite::params![
            queue,
            c.paused,
            c.concurrency,
            c.rate_limit,
            c.rate_window_ms,
            now,
            c.partition_concurrency,
            c.partition_rate_limit,
            c.partition_rate_window_ms,
        ])?,
    };
    if changed.forget_starts {
        conn.prepare_cached(FORGET_STARTS)?.execute([queue])?;
    }
    Ok(changed.next)
}

/// Records a start of a rate-limited queue (and of the job's partition),
/// in the start's transaction.
pub(crate) fn record_start(
    conn: &Connection,
    queue: &str,
    partition: Option<&str>,
    now: Millis,
) -> Result<()> {
    conn.prepare_cached(RECORD_START)?
        .execute(rusqlite::params![queue, now, partition])?;
    Ok(())
}

/// The load of each partition of `queue` with a job running or a start in
/// its rate's window at `now` (a partition without a row has none); none
/// read without partition limits.
pub(crate) fn partition_loads(
    conn: &Connection,
    queue: &str,
    limits: &Limits,
    now: Millis,
) -> Result<HashMap<String, Load>> {
    let mut loads: HashMap<String, Load> = HashMap::new();
    if !limits.partitioned() {
        return Ok(loads);
    }
    let mut st = conn.prepare_cached(PARTITIONS_RUNNING)?;
    for row in st.query_map([queue], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))? {
        let (key, running, claimed): (String, i64, i64) = row?;
        let l = loads.entry(key).or_default();
        l.running = running;
        l.claimed = claimed;
    }
    if let Some(rate) = limits.partition_rate {
        let mut st = conn.prepare_cached(PARTITIONS_STARTED)?;
        let floor = window_floor(now, rate);
        for row in st.query_map(rusqlite::params![queue, floor], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })? {
            let (key, started): (String, i64) = row?;
            loads.entry(key).or_default().started = started;
        }
    }
    Ok(loads)
}

/// Every queue with jobs or controls, by name, with its load at `now`.
pub(crate) fn list(conn: &Connection, now: Millis) -> Result<Vec<QueueControl>> {
    let counts = conn
        .prepare_cached(JOB_COUNTS)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<(String, i64, i64)>>>()?;
    Ok(listing(counts, controlled(conn, now)?))
}

/// The queues with controls in force (no job counts), by name, with the
/// starts in each rate's window at `now`.
pub(crate) fn controlled(conn: &Connection, now: Millis) -> Result<Vec<QueueControl>> {
    let rows: Vec<(String, Limits, Millis)> = conn
        .prepare_cached(ROWS)?
        .query_map([], from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (name, l, updated_at) in rows {
        let started = match l.rate {
            Some(rate) => started(conn, &name, rate, now)?.0,
            None => 0,
        };
        let partitions = partition_loads(conn, &name, &l, now)?;
        out.push(QueueControl::found(
            &name,
            &l,
            updated_at,
            started,
            partitions,
            PARTITIONS_LISTED,
        ));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One queue's controls and load; None when it has no control.
pub(crate) fn of_queue(
    conn: &Connection,
    queue: &str,
    now: Millis,
) -> Result<Option<QueueControl>> {
    let Some((name, l, updated_at)) = conn
        .prepare_cached(ROW)?
        .query_row([queue], from_row)
        .optional()?
    else {
        return Ok(None);
    };
    let (load, running) = load(conn, &name, &l, now)?;
    let partitions = partition_loads(conn, &name, &l, now)?;
    let mut c = QueueControl::found(&name, &l, updated_at, load.started, partitions, usize::MAX);
    c.running = running;
    Ok(Some(c))
}

/// Starts of `queue` in the rate's window at `now`, and the oldest of them.
fn started(
    conn: &Connection,
    queue: &str,
    rate: Rate,
    now: Millis,
) -> Result<(i64, Option<Millis>)> {
    Ok(conn
        .prepare_cached(STARTED)?
        .query_row(rusqlite::params![queue, window_floor(now, rate)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?)
}

/// A queue's load at `now`, as far as its limits need it, and how many of
/// its jobs are `running` whatever their lease.
fn load(conn: &Connection, queue: &str, limits: &Limits, now: Millis) -> Result<(Load, i64)> {
    let (running, claimed, all): (i64, i64, i64) = conn
        .prepare_cached(RUNNING)?
        .query_row(rusqlite::params![queue, now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    let started = match limits.rate {
        Some(rate) => started(conn, queue, rate, now)?.0,
        None => 0,
    };
    Ok((
        Load {
            running,
            started,
            claimed,
        },
        all,
    ))
}

mod gate;
pub(crate) use gate::{Chosen, Gate};

#[cfg(test)]
mod tests;
