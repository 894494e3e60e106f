//! Dead jobs and dead outbox rows grouped by last error and kind on
//! PostgreSQL, the twins of the file's statements in `reports`, in one
//! snapshot. Writes no table.

use postgres::Row;

use super::conn::Stmt;

use super::conn::{read_err, Col, PgConn};
use super::reads::in_snapshot;
use crate::core::reports::failures::{FailureGroup, Failures};
use crate::error::Result;

/// Dead jobs by last error and kind, the largest groups first (`$1`: how
/// many groups).
pub(crate) const DEAD_JOBS: &str = "SELECT last_error, kind, count(*), max(id), \
     min(finished_at), max(finished_at) FROM jobs WHERE state = 'dead' \
     GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT $1";

/// Dead outbox rows by last error and kind.
pub(crate) const DEAD_OUTBOX: &str = "SELECT last_error, kind, count(*), max(id), \
     min(created_at), max(created_at) FROM outbox WHERE state = 'dead' \
     GROUP BY last_error, kind ORDER BY 3 DESC, 4 DESC LIMIT $1";

fn group(r: &Row) -> Result<FailureGroup> {
    Ok(FailureGroup {
        error: r.col(0)?,
        kind: r.col(1)?,
        count: r.col(2)?,
        newest_id: r.col(3)?,
        first_at: r.col(4)?,
        last_at: r.col(5)?,
    })
}

/// The failures, in one snapshot.
pub(crate) fn read(c: &mut PgConn, limit: u32) -> Result<Failures> {
    let (jobs, outbox): (Stmt, Stmt) = (c.stmt(DEAD_JOBS)?, c.stmt(DEAD_OUTBOX)?);
    let limit = i64::from(limit);
    in_snapshot(c, |tx| {
        let mut groups = |st: &Stmt| -> Result<Vec<FailureGroup>> {
            st.query(tx, &[&limit])
                .map_err(read_err)?
                .iter()
                .map(group)
                .collect()
        };
        Ok(Failures {
            jobs: groups(&jobs)?,
            outbox: groups(&outbox)?,
        })
    })
}
