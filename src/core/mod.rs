//! The core: the queue's domain types and its decisions, free of any
//! database crate. Both engines and everything above them use it; it
//! imports nothing of theirs. Writes no table.

pub(crate) mod attempt;
pub(crate) mod backoff;
pub(crate) mod controls;
pub(crate) mod handler;
pub(crate) mod job;
pub(crate) mod lifecycle;
pub(crate) mod options;
pub(crate) mod outbox;
pub(crate) mod reports;
pub(crate) mod schedule;
pub(crate) mod time;
pub(crate) mod validate;
