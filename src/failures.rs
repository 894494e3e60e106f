//! What failed, grouped by why ([`Queue::failures`]): dead jobs and dead
//! outbox rows, grouped by their last error and kind, the largest group
//! first, read by the backend in one snapshot. The file's statements are
//! here ([`read`]); PostgreSQL's twins in `postgres::failures`. Writes no
//! table.

use rusqlite::Connection;
use serde::Serialize;

use crate::core::time::Millis;
use crate::error::Result;
use crate::queue::Queue;

/// Dead jobs by last error and kind. `+state`: a table scan, which a
/// million finished jobs cost less than an index walk with a lookup each.
const DEAD_JOBS: &str =
    "SELECT last_error, kind, count(*), max(id), min(finished_at), max(finished_at) \
     FROM jobs WHERE +state = 'dead' GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT ?1";

/// Dead outbox rows by last error and kind.
const DEAD_OUTBOX: &str =
    "SELECT last_error, kind, count(*), max(id), min(created_at), max(created_at) \
     FROM outbox WHERE +state = 'dead' GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT ?1";

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

/// What [`Queue::failures`] returns.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Failures {
    /// Dead jobs, largest group first.
    pub jobs: Vec<FailureGroup>,
    /// Dead outbox rows, largest group first.
    pub outbox: Vec<FailureGroup>,
}

impl Queue {
    /// Dead jobs and dead outbox rows grouped by last error and kind, the
    /// largest groups first, at most `limit` groups of each.
    pub fn failures(&self, limit: u32) -> Result<Failures> {
        self.backend().failures(limit)
    }
}

/// The groups of a file (the caller holds one read transaction).
pub(crate) fn read(conn: &Connection, limit: u32) -> Result<Failures> {
    Ok(Failures {
        jobs: groups(conn, DEAD_JOBS, limit)?,
        outbox: groups(conn, DEAD_OUTBOX, limit)?,
    })
}

fn groups(conn: &Connection, sql: &str, limit: u32) -> Result<Vec<FailureGroup>> {
    let mut st = conn.prepare_cached(sql)?;
    let rows = st.query_map([limit], |r| {
        Ok(FailureGroup {
            error: r.get(0)?,
            kind: r.get(1)?,
            count: r.get(2)?,
            newest_id: r.get(3)?,
            first_at: r.get(4)?,
            last_at: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}
