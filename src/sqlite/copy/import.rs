//! The receiving side of a copy from PostgreSQL into a file: one write
//! transaction (`BEGIN IMMEDIATE`) on a connection of its own to the file,
//! which must hold no queue row yet; the rows inserted as the database
//! holds them, ids and keys kept, each table's insert built from its
//! description (`driver::copy::TABLES`); `sqlite_sequence` set past every
//! id the database gave out; one commit — all of it or nothing. Writes
//! `jobs` (outputs and partitions included), `processed_jobs`, `outbox`,
//! `attempts`, `schedules`, `queues`, `queue_starts`, `job_dependencies`,
//! `job_steps` and `sqlite_sequence`.

use rusqlite::{params, Connection};

use crate::driver::copy::{
    non_empty_sql, refuse_non_empty, with_values, Batch, CopySink, LastIds, Table, TABLES,
};
use crate::error::{Error, Result};
use crate::sqlite::db::{from_sqlite, immediate};

/// Moves `table`'s AUTOINCREMENT counter to `?2` unless it is past it
/// already (an insert with an explicit id moves it to that id only).
const RAISE_SEQUENCE: &str = "UPDATE sqlite_sequence SET seq = max(seq, ?2) WHERE name = ?1";
const ADD_SEQUENCE: &str = "INSERT INTO sqlite_sequence (name, seq) \
     SELECT ?1, ?2 WHERE ?2 > 0 AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)";

/// The statement that inserts one row of `table`, every column given.
pub(crate) fn insert_sql(table: &Table) -> String {
    let params: Vec<String> = (1..=table.columns.len()).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT INTO {} ({}) VALUES ({})",
        table.name,
        table.column_list(),
        params.join(", ")
    )
}

/// A copy in progress: the transaction [`copy_in`] opened.
struct FileSink<'c> {
    conn: &'c Connection,
    location: &'c str,
}

impl FileSink<'_> {
    /// A row the file's schema refuses is the database's content, not a
    /// fault of the copy: bad input, named.
    fn refused(&self, table: &str, e: rusqlite::Error) -> Error {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
            return Error::InvalidInput(format!(
                "a row of {table} cannot be stored in {}: {e}; nothing was written",
                self.location
            ));
        }
        from_sqlite(e)
    }
}

impl CopySink for FileSink<'_> {
    /// Inserts the batch a row at a time, through one prepared statement
    /// whose parameters are bound straight from the batch's columns.
    fn rows(&mut self, batch: &Batch) -> Result<()> {
        let table = batch.table;
        let mut st = self.conn.prepare_cached(&insert_sql(table))?;
        for row in 0..batch.len() {
            for (i, v) in batch.columns.iter().enumerate() {
                // One body for every column type: the texts need the borrow.
                #[allow(clippy::needless_borrows_for_generic_args)]
                with_values!(v, v => st.raw_bind_parameter(i + 1, &v[row]))?;
            }
            st.raw_execute().map_err(|e| self.refused(table.name, e))?;
        }
        Ok(())
    }
}

/// Runs a copy into the file `conn` writes: `fill` inserts the rows
/// through the sink it is given and returns the source's last ids; then
/// the AUTOINCREMENT counters are set and the transaction commits.
/// Refused with [`Error::NotEmpty`], nothing written, when any copied
/// table of the file holds a row already.
pub(crate) fn copy_in<R>(
    conn: &mut Connection,
    location: &str,
    fill: impl FnOnce(&mut dyn CopySink) -> Result<(R, LastIds)>,
) -> Result<R> {
    let tx = immediate(conn)?;
    let flags: Vec<bool> = tx.query_row(&non_empty_sql(), [], |r| {
        (0..TABLES.len()).map(|i| r.get(i)).collect()
    })?;
    refuse_non_empty(location, "file", &flags)?;
    let (r, last) = fill(&mut FileSink {
        conn: &tx,
        location,
    })?;
    for (table, id) in last.each() {
        tx.execute(RAISE_SEQUENCE, params![table, id])?;
        tx.execute(ADD_SEQUENCE, params![table, id])?;
    }
    tx.commit()?;
    Ok(r)
}
