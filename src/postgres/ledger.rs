//! The `processed_jobs` ledger on PostgreSQL: a key whose work committed.
//! A run's row is inserted by the batch's first statement, one with the
//! fence on its attempts (`FENCE_AND_LEDGER`, in `run.rs`); the ledger's
//! other statements are here: taking a failed run's rows back, reading a
//! key's row, pruning. Writes `processed_jobs` only.

use postgres::{GenericClient, Transaction};

use super::conn::{one, read_err, Col, PgConn, Stmt};
use crate::core::time::Millis;
use crate::error::Result;

/// Takes back the ledger rows of runs that failed in this transaction.
pub(crate) const UNRECORD: &str = "DELETE FROM processed_jobs WHERE key = ANY($1)";

/// The ledger row of a key.
const LOOKUP: &str = "SELECT completed_at, job_id FROM processed_jobs WHERE key = $1";

const PRUNE: &str = "\
WITH gone AS (
    DELETE FROM processed_jobs WHERE key IN
        (SELECT key FROM processed_jobs WHERE completed_at < $1 ORDER BY completed_at LIMIT $2)
    RETURNING 1
)
SELECT count(*), 0::bigint FROM gone";

/// Deletes the ledger rows of `keys` (their runs failed) with `stmt`, the
/// worker's prepared [`UNRECORD`].
pub(crate) fn unrecord(tx: &mut Transaction<'_>, stmt: &Stmt, keys: &[String]) -> Result<()> {
    if !keys.is_empty() {
        stmt.execute(tx, &[&keys]).map_err(read_err)?;
    }
    Ok(())
}

/// The ledger row for `key`, if its work committed: `(completed_at, job_id)`.
pub(crate) fn lookup<C: GenericClient>(
    c: &mut C,
    key: &str,
) -> Result<Option<(Millis, Option<i64>)>> {
    c.query(LOOKUP, &[&key])
        .map_err(read_err)?
        .first()
        .map(|r| Ok((r.col(0)?, r.col(1)?)))
        .transpose()
}

/// Deletes ledger rows completed before `before`, at most `limit` of them.
/// Returns how many went.
pub(crate) fn prune(c: &mut PgConn, before: Millis, limit: i64) -> Result<usize> {
    Ok(one(c.write(PRUNE, &[&before, &limit])?)?.col::<i64>(0)? as usize)
}
