//! The sending side of a copy out of a file: every copied table
//! (`driver::copy::TABLES`) read in the caller's one read snapshot and streamed, in
//! batches, into the destination's sink, ids and keys kept (jobs with
//! their outputs, and the workflows' edges and the steps' results after
//! every job); then the highest id each table ever gave out. Writes no
//! table. The receiving side of a copy into a file is
//! `import`.

use rusqlite::Connection;

use crate::core::copy::CopyReport;
use crate::driver::copy::{each_table, with_values, Batch, CopySink, LastIds, Table};
use crate::error::Result;

/// Rows per batch: large enough that a round trip is spent on thousands
/// of rows, small enough that a batch's arrays stay a few MB.
const BATCH: usize = 5000;

/// The highest id each table ever gave out: `AUTOINCREMENT` remembers the
/// ids of rows deleted since (pruned jobs, whose keys the ledger still
/// names), and the destination must never give them out again.
const LAST_IDS: &str = "SELECT \
     max((SELECT coalesce(max(id), 0) FROM jobs), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0)), \
     max((SELECT coalesce(max(id), 0) FROM outbox), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox'), 0)), \
     max((SELECT coalesce(max(id), 0) FROM attempts), \
         coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'attempts'), 0))";

/// Reads every row of `table` into batches, handing each full batch and
/// the last to `sink`; returns the number of rows.
fn stream(conn: &Connection, table: &'static Table, sink: &mut dyn CopySink) -> Result<u64> {
    let mut st = conn.prepare(&table.select())?;
    let mut rows = st.query([])?;
    let (mut batch, mut total) = (Batch::new(table, BATCH), 0u64);
    while let Some(row) = rows.next()? {
        for (i, v) in batch.columns.iter_mut().enumerate() {
            with_values!(v, v => v.push(row.get(i)?));
        }
        total += 1;
        if batch.len() == BATCH {
            sink.rows(&batch)?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        sink.rows(&batch)?;
    }
    Ok(total)
}

/// Streams every copied table of the file into `sink` (the caller holds
/// one read snapshot); returns what was moved and the file's last ids.
pub(crate) fn export(conn: &Connection, sink: &mut dyn CopySink) -> Result<(CopyReport, LastIds)> {
    let report = each_table(|t| stream(conn, t, sink))?;
    let last = conn.query_row(LAST_IDS, [], |r| {
        Ok(LastIds {
            jobs: r.get(0)?,
            outbox: r.get(1)?,
            attempts: r.get(2)?,
        })
    })?;
    Ok((report, last))
}
