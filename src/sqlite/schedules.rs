//! The `schedules` table and its only writer: one row per schedule name
//! with its declaration (last writer wins), the latest slot fired and the
//! next one. Every statement on the table is a named constant here. Writes
//! `schedules`.
//!
//! The two writes a runtime makes: [`upsert`] at its start (when the
//! core finds its declaration new or changed), and [`fired`]
//! in the transaction that enqueues a slot's job. `fired` only moves the
//! row forward, so a process that enqueued a slot another one had already
//! fired (its enqueue was a duplicate) writes nothing here.

use rusqlite::{Connection, OptionalExtension, Row};

use crate::core::time::Millis;
use crate::error::Result;

use crate::core::job::{Enqueued, NewJob};
use crate::core::schedule::{Declared, ScheduleRow};
use crate::driver::schedules::SlotTx;

/// A `ScheduleRow` from a row read with [`GET`]'s columns.
fn row_from(r: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        name: r.get(0)?,
        cron: r.get(1)?,
        tz: r.get(2)?,
        kind: r.get(3)?,
        payload: r.get(4)?,
        queue: r.get(5)?,
        priority: r.get(6)?,
        max_retries: r.get(7)?,
        catch_up: r.get(8)?,
        catch_up_window_ms: r.get(9)?,
        last_slot_at: r.get(10)?,
        next_slot_at: r.get(11)?,
        updated_at: r.get(12)?,
    })
}

const GET: &str = "SELECT name, cron, tz, kind, payload, queue, priority, max_retries, catch_up, \
     catch_up_window_ms, last_slot_at, next_slot_at, updated_at FROM schedules WHERE name = ?1";

const LIST: &str = "SELECT name, cron, tz, kind, payload, queue, priority, max_retries, catch_up, \
     catch_up_window_ms, last_slot_at, next_slot_at, updated_at FROM schedules ORDER BY name";

const COUNT: &str = "SELECT count(*) FROM schedules";

/// A new row, or a new declaration for an existing one; the slots fired
/// are kept.
const UPSERT: &str = "INSERT INTO schedules (name, cron, tz, kind, payload, queue, priority, \
     max_retries, catch_up, catch_up_window_ms, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11) \
     ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, \
     kind = excluded.kind, payload = excluded.payload, queue = excluded.queue, \
     priority = excluded.priority, max_retries = excluded.max_retries, \
     catch_up = excluded.catch_up, catch_up_window_ms = excluded.catch_up_window_ms, \
     updated_at = excluded.updated_at";

/// A slot fired: moves the row forward only (another process may have
/// recorded a later one already).
const FIRED: &str = "UPDATE schedules SET last_slot_at = ?2, next_slot_at = ?3 \
     WHERE name = ?1 AND (last_slot_at IS NULL OR last_slot_at < ?2)";

/// The next slot a start computed (written only when it changes).
const SET_NEXT: &str =
    "UPDATE schedules SET next_slot_at = ?2 WHERE name = ?1 AND next_slot_at IS NOT ?2";

/// One row by name.
pub(crate) fn get(conn: &Connection, name: &str) -> Result<Option<ScheduleRow>> {
    Ok(conn
        .prepare_cached(GET)?
        .query_row([name], row_from)
        .optional()?)
}

/// Every row, by name.
pub(crate) fn list(conn: &Connection) -> Result<Vec<ScheduleRow>> {
    let mut st = conn.prepare_cached(LIST)?;
    let rows = st.query_map([], row_from)?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// How many schedules the file has.
pub(crate) fn count(conn: &Connection) -> Result<i64> {
    Ok(conn.prepare_cached(COUNT)?.query_row([], |r| r.get(0))?)
}

/// Writes `d` to its row (a new row, or the new declaration of an existing
/// one: last writer wins) inside the caller's write transaction.
pub(crate) fn upsert(conn: &Connection, d: &Declared, now: Millis) -> Result<()> {
    let s = &d.schedule;
    conn.prepare_cached(UPSERT)?.execute(rusqlite::params![
        s.name,
        s.cron,
        s.tz,
        s.kind,
        d.payload,
        s.queue,
        s.priority,
        s.max_retries,
        s.catch_up.as_str(),
        s.catch_up.window_ms(),
        now,
    ])?;
    Ok(())
}

/// Records that `slot` fired and `next` comes after it, unless the row
/// already records `slot` or a later one. True when the row changed.
pub(crate) fn fired(
    conn: &Connection,
    name: &str,
    slot: Millis,
    next: Option<Millis>,
) -> Result<bool> {
    Ok(conn
        .prepare_cached(FIRED)?
        .execute(rusqlite::params![name, slot, next])?
        == 1)
}

/// Records the next slot a start computed.
pub(crate) fn set_next(conn: &Connection, name: &str, next: Option<Millis>) -> Result<()> {
    conn.prepare_cached(SET_NEXT)?
        .execute(rusqlite::params![name, next])?;
    Ok(())
}

impl SlotTx for &crate::sqlite::tx::WriteTx<'_> {
    fn schedule(&mut self, name: &str) -> Result<Option<ScheduleRow>> {
        get(self, name)
    }
    fn write_declaration(&mut self, d: &Declared, now: Millis) -> Result<()> {
        upsert(self, d, now)
    }
    fn fired(&mut self, name: &str, slot: Millis, next: Option<Millis>) -> Result<bool> {
        fired(self, name, slot, next)
    }
    fn set_next(&mut self, name: &str, next: Option<Millis>) -> Result<()> {
        set_next(self, name, next)
    }
    fn enqueue(&mut self, job: NewJob) -> Result<Enqueued> {
        crate::sqlite::tx::WriteTx::enqueue(self, job)
    }
}
