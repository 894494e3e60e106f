//! The file's job pipeline on its one writer: the supervisor claims (and
//! starts the apply-only runs of a claim in the writer's same cycle), the
//! workers start the rest and run their prepare steps, and every run's
//! apply step runs on the writer inside a group transaction.

pub(crate) mod begin;
pub(crate) mod claims;
pub(crate) mod finish;
pub(crate) mod pending;
pub(crate) mod supervisor;
pub(crate) mod worker;
