//! Queue controls on PostgreSQL, the twin of the file's controls module:
//! the operator's changes to `queues`, the listing, the cache of the
//! controls in force that a process's claims consult, and the claim of a
//! capped or rate-limited queue under a lock on its row. Writes `queues`,
//! `queue_starts`, and (the limited claim) `jobs` and `attempts` through
//! the claim module's statements.
//!
//! Exact across machines: a limited queue is claimed only in a transaction
//! that first locks its `queues` row (`FOR UPDATE`), then counts its load
//! in a later statement, whose snapshot sees every claim that held the
//! lock before (READ COMMITTED), then claims at most the room it found and
//! commits. A queue without a control costs nothing: claims skip the
//! controlled queues by a parameter of their one statement, and the
//! controls are read again once per poll interval, not per claim.

use crate::core::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::{GenericClient, Row};

use super::claim::{self, ClaimAsk, Started};
use super::conn::{in_row, read_err, write_err, Col, PgConn, Stmt};
use crate::core::controls::{listing, Changed, Columns};
use crate::core::controls::{Limits, Load, QueueControl, QueueLimits, PARTITIONS_LISTED};
use crate::core::time::Millis;
use crate::error::Result;

const ROWS: &str = "SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at, \
     partition_concurrency, partition_rate_limit, partition_rate_window_ms FROM queues";
const ROW: &str = "SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at, \
     partition_concurrency, partition_rate_limit, partition_rate_window_ms \
     FROM queues WHERE name = $1";
/// The limited claim's lock: claims of the queue, and the operator's
/// changes, take turns on it.
const LOCK_ROW: &str = "SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at, \
     partition_concurrency, partition_rate_limit, partition_rate_window_ms \
     FROM queues WHERE name = $1 FOR UPDATE";
/// Two operators changing one queue take turns even before it has a row
/// to lock (the first argument is litejob's own key space).
const SERIALIZE_CHANGES: &str = "SELECT pg_advisory_xact_lock(1818914658, hashtext($1))";
const UPSERT: &str = "INSERT INTO queues (name, paused, concurrency, rate_limit, rate_window_ms, \
     updated_at, partition_concurrency, partition_rate_limit, partition_rate_window_ms) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO UPDATE SET \
     paused = excluded.paused, concurrency = excluded.concurrency, \
     rate_limit = excluded.rate_limit, rate_window_ms = excluded.rate_window_ms, \
     updated_at = excluded.updated_at, partition_concurrency = excluded.partition_concurrency, \
     partition_rate_limit = excluded.partition_rate_limit, \
     partition_rate_window_ms = excluded.partition_rate_window_ms";
const DELETE: &str = "DELETE FROM queues WHERE name = $1";
const FORGET_STARTS: &str = "DELETE FROM queue_starts WHERE queue = $1";
const LOAD: &str = "SELECT count(*) FILTER (WHERE lease_expires_at >= $2), \
     count(*) FILTER (WHERE current_attempt IS NULL), count(*) \
     FROM jobs WHERE state = 'running' AND queue = $1";
const STARTED: &str =
    "SELECT count(*), min(started_at) FROM queue_starts WHERE queue = $1 AND started_at > $2";
const PRUNE_STARTS: &str = "DELETE FROM queue_starts WHERE queue = $1 AND started_at <= $2";
const RECORD_STARTS: &str = "INSERT INTO queue_starts (queue, started_at, partition_key) \
     SELECT $1, $2, p FROM unnest($3::text[]) AS s(p)";
// A partitioned queue's load, partition by partition: only the partitions
// with a job running or a start in the window have a row (through
// `jobs_partition_running` and `queue_starts_partition`).
const PARTITIONS_RUNNING: &str = "SELECT partition_key, count(*), \
     count(*) FILTER (WHERE current_attempt IS NULL) FROM jobs \
     WHERE state = 'running' AND queue = $1 AND partition_key IS NOT NULL GROUP BY partition_key";
const PARTITIONS_STARTED: &str = "SELECT partition_key, count(*) FROM queue_starts \
     WHERE queue = $1 AND partition_key IS NOT NULL AND started_at > $2 GROUP BY partition_key";
const JOB_COUNTS: &str = "SELECT queue, count(*) FILTER (WHERE state = 'queued'), \
     count(*) FILTER (WHERE state = 'running') FROM jobs GROUP BY queue";

/// A row of `queues`: its name, limits and time of change.
fn from_row(r: &Row) -> Result<(String, Limits, Millis)> {
    in_row("queues", r, |r| {
        let columns = Columns {
            paused: r.col(1)?,
            concurrency: r.col(2)?,
            rate_limit: r.col(3)?,
            rate_window_ms: r.col(4)?,
            partition_concurrency: r.col(6)?,
            partition_rate_limit: r.col(7)?,
            partition_rate_window_ms: r.col(8)?,
        };
        Ok((r.col(0)?, columns.limits(), r.col(5)?))
    })
}

/// A queue's load at `now` (see [`crate::core::controls::Load`]), and its jobs
/// `running` whatever their lease.
/// `sql` holds [`LOAD`] and [`STARTED`], as text or prepared.
fn load(
    client: &mut impl GenericClient,
    sql: (&Stmt, &Stmt),
    queue: &str,
    limits: &Limits,
    now: Millis,
) -> Result<(crate::core::controls::Load, i64, Option<Millis>)> {
    let r = sql.0.query_one(client, &[&queue, &now]).map_err(read_err)?;
    let (running, claimed, all): (i64, i64, i64) = (r.col(0)?, r.col(1)?, r.col(2)?);
    let (started, oldest) = match limits.rate {
        Some(rate) => {
            let r = sql
                .1
                .query_one(
                    client,
                    &[&queue, &crate::core::controls::window_floor(now, rate)],
                )
                .map_err(read_err)?;
            (r.col::<i64>(0)?, r.col::<Option<i64>>(1)?)
        }
        None => (0, None),
    };
    Ok((
        crate::core::controls::Load {
            running,
            started,
            claimed,
        },
        all,
        oldest,
    ))
}

/// The load of each partition of `queue` with a job running or a start in
/// its rate's window at `now` (a partition without a row has none); none
/// read without partition limits. `sql` holds [`PARTITIONS_RUNNING`] and
/// [`PARTITIONS_STARTED`], as text or prepared.
fn partition_loads(
    client: &mut impl GenericClient,
    sql: (&Stmt, &Stmt),
    queue: &str,
    limits: &Limits,
    now: Millis,
) -> Result<HashMap<String, Load>> {
    let mut loads: HashMap<String, Load> = HashMap::new();
    if !limits.partitioned() {
        return Ok(loads);
    }
    for r in sql.0.query(client, &[&queue]).map_err(read_err)? {
        let l = loads.entry(r.col(0)?).or_default();
        l.running = r.col(1)?;
        l.claimed = r.col(2)?;
    }
    if let Some(rate) = limits.partition_rate {
        let floor = crate::core::controls::window_floor(now, rate);
        for r in sql.1.query(client, &[&queue, &floor]).map_err(read_err)? {
            loads.entry(r.col(0)?).or_default().started = r.col(1)?;
        }
    }
    Ok(loads)
}

/// [`partition_loads`] in a read (its statements as text).
fn partitions_of(
    client: &mut impl GenericClient,
    queue: &str,
    limits: &Limits,
    now: Millis,
) -> Result<HashMap<String, Load>> {
    let sql = (
        &Stmt::Text(PARTITIONS_RUNNING),
        &Stmt::Text(PARTITIONS_STARTED),
    );
    partition_loads(client, sql, queue, limits, now)
}

/// The room of each partition a claim may take from, from their loads.
fn partition_room(limits: &Limits, loads: HashMap<String, Load>) -> claim::PartitionRoom {
    let mut room = claim::PartitionRoom {
        full: Vec::new(),
        keys: Vec::with_capacity(loads.len()),
        rooms: Vec::with_capacity(loads.len()),
        default_room: crate::core::controls::empty_partition_room(limits).min(i64::MAX as usize)
            as i64,
    };
    for (key, load) in loads {
        let r = crate::core::controls::partition_room(limits, &load).unwrap_or(usize::MAX);
        if r == 0 {
            room.full.push(key.clone());
        }
        room.keys.push(key);
        room.rooms.push(r.min(i64::MAX as usize) as i64);
    }
    room
}

/// Applies an operator's change to `queue`, in one transaction.
pub(crate) fn change(
    c: &mut PgConn,
    queue: &str,
    paused: Option<bool>,
    limits: &QueueLimits,
    now: Millis,
) -> Result<()> {
    let mut tx = c.begin().map_err(read_err)?;
    tx.execute(SERIALIZE_CHANGES, &[&queue]).map_err(read_err)?;
    let current = tx
        .query_opt(LOCK_ROW, &[&queue])
        .map_err(read_err)?
        .map(|r| from_row(&r))
        .transpose()?
        .map(|(_, l, _)| l)
        .unwrap_or_default();
    let changed = Changed::of(current, paused, limits);
    match changed.row {
        None => tx.execute(DELETE, &[&queue]),
        Some(c) => tx.execute(
            UPSERT,
            &[
                &queue,
                &c.paused,
                &c.concurrency,
                &c.rate_limit,
                &c.rate_window_ms,
                &now,
                &c.partition_concurrency,
                &c.partition_rate_limit,
                &c.partition_rate_window_ms,
            ],
        ),
    }
    .map_err(read_err)?;
    if changed.forget_starts {
        tx.execute(FORGET_STARTS, &[&queue]).map_err(read_err)?;
    }
    tx.commit().map_err(write_err)
}

/// Every queue with jobs or controls, by name, with its load at `now`.
pub(crate) fn list(c: &mut PgConn, now: Millis) -> Result<Vec<QueueControl>> {
    super::reports::in_snapshot(c, |tx| {
        let counts = tx
            .query(JOB_COUNTS, &[])
            .map_err(read_err)?
            .iter()
            .map(|r| Ok((r.col(0)?, r.col(1)?, r.col(2)?)))
            .collect::<Result<Vec<(String, i64, i64)>>>()?;
        Ok(listing(counts, controlled(tx, now)?))
    })
}

/// The queues with controls in force (no job counts), by name, with the
/// starts in each rate's window at `now`.
pub(crate) fn controlled(tx: &mut impl GenericClient, now: Millis) -> Result<Vec<QueueControl>> {
    let rows: Vec<(String, Limits, Millis)> = tx
        .query(ROWS, &[])
        .map_err(read_err)?
        .iter()
        .map(from_row)
        .collect::<Result<_>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (name, l, updated_at) in rows {
        let (load, _, _) = load(
            tx,
            (&Stmt::Text(LOAD), &Stmt::Text(STARTED)),
            &name,
            &l,
            now,
        )?;
        let partitions = partitions_of(tx, &name, &l, now)?;
        out.push(QueueControl::found(
            &name,
            &l,
            updated_at,
            load.started,
            partitions,
            PARTITIONS_LISTED,
        ));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// One queue's controls and load; None when it has no control.
pub(crate) fn of_queue(c: &mut PgConn, queue: &str, now: Millis) -> Result<Option<QueueControl>> {
    super::reports::in_snapshot(c, |tx| {
        let Some((name, l, updated_at)) = tx
            .query_opt(ROW, &[&queue])
            .map_err(read_err)?
            .map(|r| from_row(&r))
            .transpose()?
        else {
            return Ok(None);
        };
        let (load, running, _) = load(
            tx,
            (&Stmt::Text(LOAD), &Stmt::Text(STARTED)),
            &name,
            &l,
            now,
        )?;
        let partitions = partitions_of(tx, &name, &l, now)?;
        let mut q =
            QueueControl::found(&name, &l, updated_at, load.started, partitions, usize::MAX);
        q.running = running;
        Ok(Some(q))
    })
}

/// The controls in force as a process last read them: every claim
/// consults this cache, and it is read again once it is a poll interval
/// old, so a change made anywhere is honoured within one poll interval.
#[derive(Default)]
pub(crate) struct Cache {
    state: Mutex<Option<(Instant, InForce)>>,
}

/// The controls in force: each controlled queue and its limits.
pub(crate) type InForce = Arc<Vec<(String, Limits)>>;

impl Cache {
    /// The controls, read again on `c` when older than `max_age`.
    pub(crate) fn get(&self, c: &mut PgConn, max_age: Duration) -> Result<InForce> {
        if let Some((at, rows)) = &*lock(&self.state) {
            if at.elapsed() < max_age {
                return Ok(rows.clone());
            }
        }
        let read_at = Instant::now();
        let rows: InForce = Arc::new(
            c.query(ROWS, &[])?
                .iter()
                .map(|r| from_row(r).map(|(name, l, _)| (name, l)))
                .collect::<Result<_>>()?,
        );
        *lock(&self.state) = Some((read_at, rows.clone()));
        Ok(rows)
    }

    /// Forgets the cache (this process changed a control): the next claim
    /// reads the table again.
    pub(crate) fn forget(&self) {
        *lock(&self.state) = None;
    }
}

/// What a claim of one limited queue took.
pub(crate) struct LimitedClaim {
    pub started: Vec<Started>,
    /// The queue's room was all taken (or there was none): jobs may wait.
    pub held_back: bool,
    /// When a full rate's window next frees a start.
    pub frees_at: Option<Millis>,
    /// Room was left after this claim: another worker may take more.
    pub more_room: bool,
}

/// Claims and starts up to `ask.limit` jobs of the limited queue `queue`
/// in one transaction: locks its row, counts its load, takes at most the
/// room left (under a cap, one job: a worker runs its batch's prepare
/// steps one after another, so a second slot in its batch would sit idle
/// while other workers, here or elsewhere, could run it), records the
/// starts of a rate, commits.
///
/// `clock` is read once the lock is held: claims of the queue then count
/// and record in the order of their times, so one that waited for the lock
/// never counts with an older `now` than the rows its predecessor pruned.
pub(crate) fn claim_limited(
    c: &mut PgConn,
    claim: &Stmt,
    queue: &str,
    ask: &ClaimAsk<'_>,
    clock: &dyn Fn() -> Millis,
) -> Result<LimitedClaim> {
    // Prepared once per connection, before the transaction borrows it.
    let (lock, prune, count, started, record) = (
        c.stmt(LOCK_ROW)?,
        c.stmt(PRUNE_STARTS)?,
        c.stmt(LOAD)?,
        c.stmt(STARTED)?,
        c.stmt(RECORD_STARTS)?,
    );
    let partitioned = (
        c.stmt(PARTITIONS_RUNNING)?,
        c.stmt(PARTITIONS_STARTED)?,
        c.stmt(claim::CLAIM_PARTITIONED)?,
    );
    let mut tx = c.begin().map_err(read_err)?;
    let limits = lock
        .query_opt(&mut tx, &[&queue])
        .map_err(read_err)?
        .map(|r| from_row(&r))
        .transpose()?
        .map(|(_, l, _)| l)
        .unwrap_or_default();
    let now = clock();
    let lease_until = now + (ask.lease_until - ask.now);
    if let Some(floor) = limits.prune_floor(now) {
        prune
            .execute(&mut tx, &[&queue, &floor])
            .map_err(read_err)?;
    }
    let (load, _, oldest) = load(&mut tx, (&count, &started), queue, &limits, now)?;
    let room = crate::core::controls::room(&limits, &load);
    let mut take = room.min(ask.limit.max(0) as usize);
    if limits.concurrency.is_some() {
        take = take.min(1);
    }
    let queues = [queue.to_string()];
    let ask = ClaimAsk {
        queues: Some(&queues),
        skipped: None,
        limit: take as i64,
        now,
        lease_until,
        ..*ask
    };
    let mut partitions_full = false;
    let started = if take == 0 {
        Vec::new()
    } else if limits.partitioned() {
        let loads = partition_loads(
            &mut tx,
            (&partitioned.0, &partitioned.1),
            queue,
            &limits,
            now,
        )?;
        let room = partition_room(&limits, loads);
        partitions_full = !room.full.is_empty();
        // Enough candidates that a batch finds partitions with room past
        // the head of one with many jobs waiting.
        let scan = (take as i64 * 32).max(256);
        claim::claim_partitioned(&mut tx, &partitioned.2, &ask, &room, scan)?
    } else {
        claim::claim_with(&mut tx, claim, &ask)?
    };
    if limits.rated() && !started.is_empty() {
        let partitions: Vec<Option<&str>> =
            started.iter().map(|s| s.partition.as_deref()).collect();
        record
            .execute(&mut tx, &[&queue, &now, &partitions])
            .map_err(read_err)?;
    }
    tx.commit().map_err(write_err)?;
    // A rate found or left full frees its next start when its oldest start
    // (one of these, if none is older) leaves the window.
    let frees_at = limits
        .rate
        .filter(|_| started.len() >= room)
        .map(|rate| crate::core::controls::frees_at(oldest.unwrap_or(now), rate));
    Ok(LimitedClaim {
        held_back: limits.limited() && (take == 0 || started.len() == take || partitions_full),
        more_room: started.len() == take && room > take,
        started,
        frees_at,
    })
}
