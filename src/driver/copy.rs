//! A copy of a queue between two databases, as both engines see it: the
//! copied tables, described once ([`TABLES`], in `copy/tables.rs`: each
//! column's name and type); a batch of a table's rows, column by column
//! ([`Batch`]); the receiving side ([`CopySink`]); and the statements
//! every engine builds from the description alike (the reads, the
//! emptiness check). Each engine derives its own reads of a source row
//! and its inserts from the same description. Writes no table itself (the
//! destination engine does).

use crate::core::copy::CopyReport;
use crate::error::{Error, Result};

mod tables;
pub(crate) use tables::TABLES;

/// A column's type, as both engines hold it: an integer (`INTEGER`,
/// `bigint`), a text, either of them nullable, or a flag (an `INTEGER` 0
/// or 1 on a file, a `boolean` on PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    OptInt,
    Text,
    OptText,
    Bool,
}

/// One column of a copied table.
pub(crate) struct Column {
    /// Its name, the same on both engines.
    pub name: &'static str,
    /// What it holds.
    pub ty: Ty,
}

/// `name` holding a `ty`: one line of [`TABLES`].
pub(crate) const fn col(name: &'static str, ty: Ty) -> Column {
    Column { name, ty }
}

/// A copied table: what both engines hold of it. A column only one engine
/// keeps (PostgreSQL's `jobs.has_dependents`, derived from the workflow
/// edges) is not here; that engine's sink sets it.
pub(crate) struct Table {
    /// Its name, the same on both engines.
    pub name: &'static str,
    /// A unique key: the order its rows are read in.
    pub order_by: &'static str,
    /// Its columns, in the order they are read and inserted.
    pub columns: &'static [Column],
    /// Where its rows are counted in the report.
    pub count: fn(&mut CopyReport) -> &mut u64,
}

impl Table {
    /// Its columns' names, comma-separated.
    pub(crate) fn column_list(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        names.join(", ")
    }

    /// The statement that reads every row of it, in the source's one
    /// snapshot: the same text on both engines.
    pub(crate) fn select(&self) -> String {
        format!(
            "SELECT {} FROM {} ORDER BY {}",
            self.column_list(),
            self.name,
            self.order_by
        )
    }
}

/// A batch's values of one column, as its [`Ty`] says: one vector per
/// column, no value boxed.
pub(crate) enum Values {
    Int(Vec<i64>),
    OptInt(Vec<Option<i64>>),
    Text(Vec<String>),
    OptText(Vec<Option<String>>),
    Bool(Vec<bool>),
}

/// Evaluates `$body` with `$v` bound to the vector inside `$values` (a
/// [`Values`], or a reference to one), whatever its element type: the
/// body is written once and compiled for each type, so an engine reads
/// into or binds from a column without naming the five.
macro_rules! with_values {
    ($values:expr, $v:ident => $body:expr) => {
        match $values {
            $crate::driver::copy::Values::Int($v) => $body,
            $crate::driver::copy::Values::OptInt($v) => $body,
            $crate::driver::copy::Values::Text($v) => $body,
            $crate::driver::copy::Values::OptText($v) => $body,
            $crate::driver::copy::Values::Bool($v) => $body,
        }
    };
}
pub(crate) use with_values;

impl Values {
    fn empty(ty: Ty, cap: usize) -> Values {
        match ty {
            Ty::Int => Values::Int(Vec::with_capacity(cap)),
            Ty::OptInt => Values::OptInt(Vec::with_capacity(cap)),
            Ty::Text => Values::Text(Vec::with_capacity(cap)),
            Ty::OptText => Values::OptText(Vec::with_capacity(cap)),
            Ty::Bool => Values::Bool(Vec::with_capacity(cap)),
        }
    }
}

/// Rows of one table, column by column (`columns[i]` holds the values of
/// `table.columns[i]`, every vector as long as the others).
pub(crate) struct Batch {
    /// The table the rows are of.
    pub table: &'static Table,
    /// Its columns' values.
    pub columns: Vec<Values>,
}

impl Batch {
    /// An empty batch of `table`'s rows, with room for `cap` of them.
    pub(crate) fn new(table: &'static Table, cap: usize) -> Batch {
        let columns = table.columns.iter().map(|c| Values::empty(c.ty, cap));
        Batch {
            table,
            columns: columns.collect(),
        }
    }

    /// How many rows it holds.
    pub(crate) fn len(&self) -> usize {
        self.columns
            .first()
            .map_or(0, |v| with_values!(v, v => v.len()))
    }

    /// Whether it holds no row.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties it, keeping its room for the next batch.
    pub(crate) fn clear(&mut self) {
        for v in &mut self.columns {
            with_values!(v, v => v.clear());
        }
    }
}

/// Takes a copy's rows, table by table in [`TABLES`]' order, a batch at a
/// time, in the destination's one transaction; every row keeps its id
/// and key.
pub(crate) trait CopySink {
    /// Inserts a batch of rows of `batch.table`.
    fn rows(&mut self, batch: &Batch) -> Result<()>;
}

/// Copies every table in [`TABLES`]' order, each with `table` (an engine's
/// read of one table into the sink, which returns how many rows it moved),
/// and reports what was moved.
pub(crate) fn each_table(
    mut table: impl FnMut(&'static Table) -> Result<u64>,
) -> Result<CopyReport> {
    let mut report = CopyReport::default();
    for t in TABLES {
        *(t.count)(&mut report) = table(t)?;
    }
    Ok(report)
}

/// The highest ids the source ever gave out, per table with an id: the
/// destination's counters continue past them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LastIds {
    pub jobs: i64,
    pub outbox: i64,
    pub attempts: i64,
}

impl LastIds {
    /// Each table with an id, and its highest id.
    pub(crate) fn each(&self) -> [(&'static str, i64); 3] {
        [
            ("jobs", self.jobs),
            ("outbox", self.outbox),
            ("attempts", self.attempts),
        ]
    }
}

/// The statement that tells which copied tables already hold a row: one
/// flag per table, in [`TABLES`]' order. A copy goes only into a
/// destination where none does.
pub(crate) fn non_empty_sql() -> String {
    let any: Vec<String> = TABLES
        .iter()
        .map(|t| format!("EXISTS (SELECT 1 FROM {})", t.name))
        .collect();
    format!("SELECT {}", any.join(", "))
}

/// Refuses, with nothing written, a destination (`what`: a file or a
/// database, at `location`) some of whose tables hold rows: `flags` is
/// [`non_empty_sql`]'s answer.
pub(crate) fn refuse_non_empty(location: &str, what: &str, flags: &[bool]) -> Result<()> {
    let full: Vec<&str> = TABLES
        .iter()
        .zip(flags)
        .filter(|(_, any)| **any)
        .map(|(t, _)| t.name)
        .collect();
    if full.is_empty() {
        return Ok(());
    }
    Err(Error::NotEmpty(format!(
        "{location} already holds litejob rows (in {}): a queue is copied only into a \
         {what} without any; nothing was written",
        full.join(", ")
    )))
}
