//! The `schedules` table on PostgreSQL, the twin of the file's
//! `schedule::store`: the same rows, the same named statements, the same
//! rule that a slot's record only moves forward. Writes `schedules`.

use postgres::{GenericClient, Row};

use super::conn::{in_row, read_err, Col};
use crate::core::job::Enqueued;
use crate::core::job::NewJob;
use crate::core::schedule::Declared;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;
use crate::driver::schedules::SlotTx;
use crate::error::Result;

const GET: &str = "SELECT name, cron, tz, kind, payload, queue, priority, max_retries, catch_up, \
     catch_up_window_ms, last_slot_at, next_slot_at, updated_at FROM schedules WHERE name = $1";
const LIST: &str = "SELECT name, cron, tz, kind, payload, queue, priority, max_retries, catch_up, \
     catch_up_window_ms, last_slot_at, next_slot_at, updated_at FROM schedules ORDER BY name";
const COUNT: &str = "SELECT count(*) FROM schedules";
/// A new row, or a new declaration for an existing one; the slots fired
/// are kept.
const UPSERT: &str = "INSERT INTO schedules (name, cron, tz, kind, payload, queue, priority, \
     max_retries, catch_up, catch_up_window_ms, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) \
     ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, \
     kind = excluded.kind, payload = excluded.payload, queue = excluded.queue, \
     priority = excluded.priority, max_retries = excluded.max_retries, \
     catch_up = excluded.catch_up, catch_up_window_ms = excluded.catch_up_window_ms, \
     updated_at = excluded.updated_at";
/// A slot fired: moves the row forward only.
const FIRED: &str = "UPDATE schedules SET last_slot_at = $2, next_slot_at = $3 \
     WHERE name = $1 AND (last_slot_at IS NULL OR last_slot_at < $2)";
/// The next slot a start computed (written only when it changes).
const SET_NEXT: &str = "UPDATE schedules SET next_slot_at = $2 \
     WHERE name = $1 AND next_slot_at IS DISTINCT FROM $2";

fn from_row(r: &Row) -> Result<ScheduleRow> {
    in_row("schedules", r, |r| {
        Ok(ScheduleRow {
            name: r.col(0)?,
            cron: r.col(1)?,
            tz: r.col(2)?,
            kind: r.col(3)?,
            payload: r.col(4)?,
            queue: r.col(5)?,
            priority: r.col(6)?,
            max_retries: r.col(7)?,
            catch_up: r.col(8)?,
            catch_up_window_ms: r.col(9)?,
            last_slot_at: r.col(10)?,
            next_slot_at: r.col(11)?,
            updated_at: r.col(12)?,
        })
    })
}

pub(crate) fn get<C: GenericClient>(c: &mut C, name: &str) -> Result<Option<ScheduleRow>> {
    c.query_opt(GET, &[&name])
        .map_err(read_err)?
        .as_ref()
        .map(from_row)
        .transpose()
}

pub(crate) fn list<C: GenericClient>(c: &mut C) -> Result<Vec<ScheduleRow>> {
    c.query(LIST, &[])
        .map_err(read_err)?
        .iter()
        .map(from_row)
        .collect()
}

pub(crate) fn count<C: GenericClient>(c: &mut C) -> Result<i64> {
    c.query_one(COUNT, &[]).map_err(read_err)?.col(0)
}

/// Writes `d` to its row inside the caller's transaction (see [`UPSERT`]).
pub(crate) fn upsert<C: GenericClient>(c: &mut C, d: &Declared, now: Millis) -> Result<()> {
    let s = &d.schedule;
    let max_retries = s.max_retries.map(i64::from);
    c.execute(
        UPSERT,
        &[
            &s.name,
            &s.cron,
            &s.tz,
            &s.kind,
            &d.payload,
            &s.queue,
            &s.priority,
            &max_retries,
            &s.catch_up.as_str(),
            &s.catch_up.window_ms(),
            &now,
        ],
    )
    .map_err(read_err)?;
    Ok(())
}

pub(crate) fn fired<C: GenericClient>(
    c: &mut C,
    name: &str,
    slot: Millis,
    next: Option<Millis>,
) -> Result<bool> {
    Ok(c.execute(FIRED, &[&name, &slot, &next]).map_err(read_err)? == 1)
}

pub(crate) fn set_next<C: GenericClient>(
    c: &mut C,
    name: &str,
    next: Option<Millis>,
) -> Result<()> {
    c.execute(SET_NEXT, &[&name, &next]).map_err(read_err)?;
    Ok(())
}

impl SlotTx for crate::postgres::tx::PgWriteTx<'_, '_> {
    fn schedule(&mut self, name: &str) -> Result<Option<ScheduleRow>> {
        get(&mut **self, name)
    }
    fn write_declaration(&mut self, d: &Declared, now: Millis) -> Result<()> {
        upsert(&mut **self, d, now)
    }
    fn fired(&mut self, name: &str, slot: Millis, next: Option<Millis>) -> Result<bool> {
        fired(&mut **self, name, slot, next)
    }
    fn set_next(&mut self, name: &str, next: Option<Millis>) -> Result<()> {
        set_next(&mut **self, name, next)
    }
    fn enqueue(&mut self, job: NewJob) -> Result<Enqueued> {
        crate::postgres::tx::PgWriteTx::enqueue(self, job)
    }
}
