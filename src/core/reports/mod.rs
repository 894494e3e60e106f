//! What an operator reads: the reports' types, and how an engine's rows
//! become them, the same for both engines. Writes no table.

pub(crate) mod backup;
pub(crate) mod failures;
pub(crate) mod metrics;
pub(crate) mod overview;
pub(crate) mod prune;
pub(crate) mod stats;
pub(crate) mod tally;
pub(crate) mod verify;
pub(crate) mod workflow;
