//! The SQLite engine: a queue in one file, its one writer thread and its
//! reader pool, and its own job pipeline on that writer.

pub(crate) mod admin;
pub(crate) mod checkpoint;
pub(crate) mod claim;
pub(crate) mod controls;
pub(crate) mod db;
pub(crate) mod enqueue;
pub(crate) mod history;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod pipeline;
pub(crate) mod reads;
pub(crate) mod reports;
pub(crate) mod run;
pub(crate) mod schedules;
pub(crate) mod schema;
#[cfg(test)]
mod sql_check;
pub(crate) mod store;
pub(crate) mod writer;
