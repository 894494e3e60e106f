//! What failed, grouped by why: dead jobs and dead outbox rows, grouped by
//! their last error and kind, the largest group first ([`Failures`]), as
//! each engine reads them in one snapshot. Writes no table.

use serde::Serialize;

use crate::core::time::Millis;

/// Dead rows that share a last error and a kind.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FailureGroup {
    /// The last error they recorded (`None`: none was recorded, e.g. a
    /// poison pill that never returned).
    pub error: Option<String>,
    /// Their kind (a job's kind, or an effect's).
    pub kind: String,
    /// How many.
    pub count: i64,
    /// The newest one's id.
    pub newest_id: i64,
    /// The earliest and latest time among them (jobs: when they died;
    /// outbox rows: when they were written), ms since the epoch.
    pub first_at: Option<Millis>,
    /// See `first_at`.
    pub last_at: Option<Millis>,
}

/// What [`Admin::failures`](crate::admin::Admin::failures) returns.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Failures {
    /// Dead jobs, largest group first.
    pub jobs: Vec<FailureGroup>,
    /// Dead outbox rows, largest group first.
    pub outbox: Vec<FailureGroup>,
}
