//! The PostgreSQL side of a copy from a queue file: one transaction on a
//! connection of its own that locks the copied tables, refuses a
//! database already holding any litejob row, inserts the file's rows in
//! batches (one statement per batch, the columns passed as arrays, built
//! from each table's description, `driver::copy::TABLES`), sets the id
//! sequences past every id the file ever gave out, and commits — all of
//! it or nothing. Writes `jobs` (outputs and partitions included, and
//! `has_dependents` from the workflow edges), `processed_jobs`, `outbox`,
//! `attempts`, `schedules`, `queues`, `queue_starts`, `job_dependencies`
//! and `job_steps` (rows as the file holds them, ids kept). The sending
//! side of a copy into a file is `export`.

use postgres::types::ToSql;
use postgres::Transaction;

use crate::driver::copy::{
    non_empty_sql, refuse_non_empty, with_values, Batch, CopySink, LastIds, Table, Ty, TABLES,
};
use crate::error::{Error, Result};
use crate::postgres::conn::{read_err, write_err, Col, PgConn};
use crate::postgres::store::PgStore;

/// The array type a column's values are passed as.
fn array_type(ty: Ty) -> &'static str {
    match ty {
        Ty::Int | Ty::OptInt => "bigint[]",
        Ty::Text | Ty::OptText => "text[]",
        Ty::Bool => "boolean[]",
    }
}

/// The statement that inserts a batch of `table`'s rows, each column
/// passed as one array. A workflow edge also marks the job it depends on
/// (`has_dependents`): only a marked job's end looks for dependents.
pub(crate) fn insert_sql(table: &Table) -> String {
    let arrays: Vec<String> = (table.columns.iter().enumerate())
        .map(|(i, c)| format!("${}::{}", i + 1, array_type(c.ty)))
        .collect();
    let insert = format!(
        "INSERT INTO {} ({}) SELECT * FROM unnest({})",
        table.name,
        table.column_list(),
        arrays.join(", ")
    );
    if table.name != "job_dependencies" {
        return insert;
    }
    format!(
        "WITH e AS ({insert} RETURNING depends_on)          UPDATE jobs SET has_dependents = true WHERE id IN (SELECT depends_on FROM e)"
    )
}

/// Taken first: concurrent copies (or a producer) into the same database
/// wait for this one instead of interleaving with it; readers go on.
fn lock_tables() -> String {
    let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
    format!("LOCK TABLE {} IN EXCLUSIVE MODE", names.join(", "))
}

/// Moves the identity sequence of table `$1` to `$2` (the highest id the
/// file ever gave out), unless it is already past it: a new row never
/// takes an id the file used, even one of a row pruned since.
const SET_SEQUENCE: &str = "\
SELECT setval(s, v) FROM (
    SELECT s, greatest($2::bigint, coalesce(pg_sequence_last_value(s), 0)) AS v
    FROM (SELECT pg_get_serial_sequence($1, 'id')::regclass AS s) a
) b WHERE v > 0";

/// A copy in progress: the transaction [`PgStore::copy_in`] opened.
pub(crate) struct CopyTx<'a, 't> {
    tx: &'a mut Transaction<'t>,
    location: &'a str,
}

impl CopySink for CopyTx<'_, '_> {
    /// Inserts a batch in one statement, each column one array parameter.
    fn rows(&mut self, batch: &Batch) -> Result<()> {
        let table = batch.table.name;
        let params: Vec<&(dyn ToSql + Sync)> = (batch.columns.iter())
            .map(|v| with_values!(v, v => v as &(dyn ToSql + Sync)))
            .collect();
        let at = |e: postgres::Error| match write_err(e) {
            Error::InvalidInput(m) => Error::InvalidInput(format!(
                "a row of {table} cannot be stored in {}: {m}",
                self.location
            )),
            other => other,
        };
        self.tx
            .execute(insert_sql(batch.table).as_str(), &params)
            .map_err(at)?;
        Ok(())
    }
}

impl PgStore {
    /// Runs a copy into this database: `fill` inserts the rows through the
    /// sink it is given and returns the file's last ids; then the
    /// sequences are set and the transaction commits. Refused, with
    /// nothing written, when any litejob table holds a row already.
    pub(crate) fn copy_in<R>(
        &self,
        fill: impl FnOnce(&mut dyn CopySink) -> Result<(R, LastIds)>,
    ) -> Result<R> {
        let mut conn: PgConn = self.session.connect()?;
        let mut tx = conn.begin().map_err(read_err)?;
        tx.batch_execute(&lock_tables()).map_err(read_err)?;
        // The row keeps its statement, prepared by its text: it must be
        // closed before the commit, on the server session it was made on
        // (behind a transaction pooler the next one may be another's).
        let flags = {
            let row = tx
                .query_one(non_empty_sql().as_str(), &[])
                .map_err(read_err)?;
            (0..TABLES.len())
                .map(|i| row.col::<bool>(i))
                .collect::<Result<Vec<bool>>>()?
        };
        refuse_non_empty(&self.location, "database", &flags)?;
        let mut c = CopyTx {
            tx: &mut tx,
            location: &self.location,
        };
        let (r, last) = fill(&mut c)?;
        for (table, id) in last.each() {
            tx.query(SET_SEQUENCE, &[&table, &id]).map_err(read_err)?;
        }
        tx.commit().map_err(write_err)?;
        Ok(r)
    }
}
