//! The durable steps of a database's jobs: a step's record (fenced on its
//! run), the job's recorded steps, the mark of a reuse. Writes `job_steps`
//! only.

use postgres::{GenericClient, Row};

use super::conn::{read_err, Col, PgConn};
use crate::core::steps::{JobStep, StepRecord};
use crate::error::Result;

/// A step's record, only while its run holds the job (`current_attempt`):
/// a run that lost its lease records nothing.
pub(crate) const RECORD: &str = "INSERT INTO job_steps \
     (job_id, name, attempt, output, started_at, finished_at) \
     SELECT $1::bigint, $2::text, $3::bigint, $4::text, $5::bigint, $6::bigint \
     WHERE EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND state = 'running' AND current_attempt = $7)";

/// A job's steps, in the order they ran.
pub(crate) const OF_JOB: &str = "SELECT name, attempt, output, started_at, finished_at, reused_in \
     FROM job_steps WHERE job_id = $1 ORDER BY started_at, name";

/// One step's result, for `tx.step_output`.
const OUTPUT: &str = "SELECT output FROM job_steps WHERE job_id = $1 AND name = $2";

/// Appends an attempt to the named steps' `reused_in`.
pub(crate) const MARK_REUSED: &str = "UPDATE job_steps \
     SET reused_in = (coalesce(reused_in, '[]')::jsonb || to_jsonb($2::bigint))::text \
     WHERE job_id = $1 AND name = ANY($3::text[])";

pub(crate) fn from_row(r: &Row) -> Result<JobStep> {
    let reused: Option<String> = r.col(5)?;
    Ok(JobStep {
        name: r.col(0)?,
        attempt: r.col(1)?,
        output: r.col(2)?,
        started_at: r.col(3)?,
        finished_at: r.col(4)?,
        reused_in: crate::core::steps::parse_reused(reused.as_deref()),
    })
}

/// Records a step; false when its run no longer holds the job.
pub(crate) fn record(c: &mut PgConn, s: &StepRecord<'_>) -> Result<bool> {
    let n = c.execute(
        RECORD,
        &[
            &s.job_id,
            &s.name,
            &s.attempt,
            &s.output,
            &s.started_at,
            &s.finished_at,
            &s.run_id,
        ],
    )?;
    Ok(n == 1)
}

/// A job's recorded steps.
pub(crate) fn of_job(c: &mut PgConn, job_id: i64) -> Result<Vec<JobStep>> {
    c.query(OF_JOB, &[&job_id])?.iter().map(from_row).collect()
}

/// One step's result as JSON, in the job's transaction; None when the job
/// has no such step.
pub(crate) fn output<C: GenericClient>(
    client: &mut C,
    job_id: i64,
    name: &str,
) -> Result<Option<String>> {
    let row = client
        .query_opt(OUTPUT, &[&job_id, &name])
        .map_err(read_err)?;
    row.map(|r| r.col(0)).transpose()
}

/// Marks the named steps as reused in `attempt`.
pub(crate) fn mark_reused(
    c: &mut PgConn,
    job_id: i64,
    attempt: i64,
    names: &[String],
) -> Result<()> {
    c.execute(MARK_REUSED, &[&job_id, &attempt, &names])?;
    Ok(())
}
