//! Moving a queue between a file and PostgreSQL without losing a job
//! ([`Queue::copy_to`], either way): the source's rows, read in one
//! snapshot, into one transaction of the destination. Writes the
//! destination's tables (through its store, or a connection of its own
//! to the file).

use crate::core::copy::CopyReport;
use crate::driver::Store;
use crate::error::Result;
use crate::postgres::Postgres;
use crate::sqlite::reports::in_snapshot;
use crate::sqlite::{copy, db, Sqlite};

use super::Queue;

impl Queue<Sqlite> {
    /// Copies this queue's file into `dest`, a queue on PostgreSQL (whose
    /// open creates the tables when they are missing): every job (its
    /// output and state, `waiting` included), workflow edge, ledger row,
    /// outbox row, attempt, schedule and queue control (with the starts
    /// counted in each rate's window), with their ids and keys,
    /// read in one snapshot of the file and written in one PostgreSQL
    /// transaction: all of it, or nothing. The destination's id sequences
    /// then continue past every id the file gave out. Refused with
    /// [`crate::error::Error::NotEmpty`], nothing written, when the destination
    /// holds any queue row already (a second copy, or a database in use).
    /// Stop the processes working on the file first: what they write
    /// after the snapshot is not copied.
    pub fn copy_to(&self, dest: &Queue<Postgres>) -> Result<CopyReport> {
        self.store().read(|conn| {
            in_snapshot(conn, |conn| {
                dest.store().copy_in(|sink| copy::export(conn, sink))
            })
        })
    }
}

impl Queue<Postgres> {
    /// Copies this queue's database into `dest`, a queue file that holds
    /// no queue row yet (a new file: [`Queue::open`] creates it): every
    /// job (its output and state, `waiting` included), workflow edge,
    /// ledger row, outbox row, attempt, schedule and queue control, with
    /// their ids and keys, read in one snapshot of the database
    /// (a read-only REPEATABLE READ transaction) and written in one
    /// transaction of the file: all of it, or nothing. The file's
    /// AUTOINCREMENT counters (`sqlite_sequence`) then continue past every
    /// id the database gave out. Refused with
    /// [`crate::error::Error::NotEmpty`], nothing written, when the file
    /// holds any queue row already. Stop the processes working on the
    /// database first: what they write after the snapshot is not copied.
    pub fn copy_to(&self, dest: &Queue<Sqlite>) -> Result<CopyReport> {
        let file = dest.store();
        file.writable()?;
        let mut conn = db::connect(&file.path, &file.conn_cfg)?;
        copy::copy_in(&mut conn, &file.location, |sink| self.store().export(sink))
    }
}
