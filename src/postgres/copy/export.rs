//! The sending side of a copy out of PostgreSQL into a file: every copied
//! table (`driver::copy::TABLES`) read in one read-only REPEATABLE READ
//! snapshot, a batch at a time through a portal, and streamed into the
//! destination's sink, ids and keys kept (jobs with their outputs, and the
//! workflows' edges and the steps' results after every job); then the
//! highest id each table's sequence ever gave out. Writes no table.

use postgres::types::FromSql;
use postgres::{Row, Transaction};

use crate::core::copy::CopyReport;
use crate::driver::copy::{each_table, with_values, Batch, CopySink, LastIds, Table};
use crate::error::{Error, Result};
use crate::postgres::conn::read_err;
use crate::postgres::store::PgStore;

/// Rows fetched per round trip.
const BATCH: i32 = 5000;

/// The highest id each table's sequence gave out: a sequence moves on
/// outside any transaction (a rolled-back insert, a pruned row still used
/// its id), so it may be past every row, and the file must never give
/// those ids out again.
const LAST_IDS: &str = "SELECT \
     greatest((SELECT coalesce(max(id), 0) FROM jobs), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('jobs', 'id')::regclass), 0)), \
     greatest((SELECT coalesce(max(id), 0) FROM outbox), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox', 'id')::regclass), 0)), \
     greatest((SELECT coalesce(max(id), 0) FROM attempts), \
         coalesce(pg_sequence_last_value(pg_get_serial_sequence('attempts', 'id')::regclass), 0))";

/// Column `i` of `r`, or an error naming it (the database's column has
/// another type than the schema this litejob wrote).
fn col<'a, T: FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| {
        Error::Internal(format!(
            "copy: column {} cannot be read: {e}",
            r.columns().get(i).map_or("?", |c| c.name())
        ))
    })
}

/// Reads every row of `table` a batch at a time through a portal, handing
/// each batch to `sink`; returns the number of rows.
fn stream(tx: &mut Transaction<'_>, table: &'static Table, sink: &mut dyn CopySink) -> Result<u64> {
    let portal = tx.bind(table.select().as_str(), &[]).map_err(read_err)?;
    let (mut batch, mut total) = (Batch::new(table, BATCH as usize), 0u64);
    loop {
        let rows = tx.query_portal(&portal, BATCH).map_err(read_err)?;
        if rows.is_empty() {
            return Ok(total);
        }
        batch.clear();
        // A column at a time: one loop per column's type, not per value.
        for (i, v) in batch.columns.iter_mut().enumerate() {
            with_values!(v, v => for r in &rows {
                v.push(col(r, i)?);
            });
        }
        sink.rows(&batch)?;
        total += rows.len() as u64;
        if rows.len() < BATCH as usize {
            return Ok(total);
        }
    }
}

impl PgStore {
    /// Streams every copied table into `sink`, read in one snapshot on a
    /// connection of its own; returns what was moved and the database's
    /// last ids.
    pub(crate) fn export(&self, sink: &mut dyn CopySink) -> Result<(CopyReport, LastIds)> {
        let mut conn = self.session.connect()?;
        let mut tx = conn.begin_snapshot().map_err(read_err)?;
        let report = each_table(|t| stream(&mut tx, t, sink))?;
        // The row (and the statement it keeps) dropped before the commit:
        // see `copy_in`.
        let last = {
            let r = tx.query_one(LAST_IDS, &[]).map_err(read_err)?;
            LastIds {
                jobs: col(&r, 0)?,
                outbox: col(&r, 1)?,
                attempts: col(&r, 2)?,
            }
        };
        tx.commit().map_err(read_err)?;
        Ok((report, last))
    }
}
