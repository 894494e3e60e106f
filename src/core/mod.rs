//! The core: the queue's domain types and its decisions, free of any
//! database crate. Both engines and everything above them use it; it
//! imports nothing of theirs. Writes no table.

pub(crate) mod attempt;
pub(crate) mod backoff;
pub(crate) mod cancel;
pub(crate) mod controls;
pub(crate) mod copy;
pub(crate) mod handler;
pub(crate) mod job;
pub(crate) mod lifecycle;
pub(crate) mod options;
pub(crate) mod outbox;
pub(crate) mod reports;
pub(crate) mod schedule;
pub(crate) mod steps;
pub(crate) mod sync;
pub(crate) mod time;
pub(crate) mod validate;
pub(crate) mod workflow;

/// The version of the queue's schema this library writes, the same on
/// both engines: `PRAGMA user_version` in a file, the row of
/// `litejob_schema` in PostgreSQL. An older one is migrated on open, a
/// newer one refused untouched.
pub const SCHEMA_VERSION: i64 = 8;
