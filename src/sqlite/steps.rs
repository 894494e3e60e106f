//! The durable steps of a file's jobs: a step's record (fenced on its run),
//! the job's recorded steps, the mark of a reuse. Writes `job_steps` only.

use rusqlite::{params, Connection, Row};

use crate::core::steps::{JobStep, StepRecord};
use crate::error::Result;

/// A step's record, only while its run holds the job (`current_attempt`):
/// a run that lost its lease records nothing.
pub(crate) const RECORD: &str = "INSERT INTO job_steps \
     (job_id, name, attempt, output, started_at, finished_at) \
     SELECT ?1, ?2, ?3, ?4, ?5, ?6 \
     WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?1 AND state = 'running' AND current_attempt = ?7)";

/// A job's steps, by name.
pub(crate) const OF_JOB: &str = "SELECT name, attempt, output, started_at, finished_at, reused_in \
     FROM job_steps WHERE job_id = ?1 ORDER BY started_at, name";

/// One step's result, for `tx.step_output`.
pub(crate) const OUTPUT: &str = "SELECT output FROM job_steps WHERE job_id = ?1 AND name = ?2";

/// Appends an attempt to the named steps' `reused_in` (`?3`: a JSON array
/// of names).
pub(crate) const MARK_REUSED: &str = "UPDATE job_steps \
     SET reused_in = json_insert(coalesce(reused_in, '[]'), '$[#]', ?2) \
     WHERE job_id = ?1 AND name IN (SELECT value FROM json_each(?3))";

fn from_row(r: &Row<'_>) -> rusqlite::Result<JobStep> {
    let reused: Option<String> = r.get(5)?;
    Ok(JobStep {
        name: r.get(0)?,
        attempt: r.get(1)?,
        output: r.get(2)?,
        started_at: r.get(3)?,
        finished_at: r.get(4)?,
        reused_in: crate::core::steps::parse_reused(reused.as_deref()),
    })
}

/// Records a step; false when its run no longer holds the job.
pub(crate) fn record(conn: &Connection, s: &StepRecord<'_>) -> Result<bool> {
    let n = conn.prepare_cached(RECORD)?.execute(params![
        s.job_id,
        s.name,
        s.attempt,
        s.output,
        s.started_at,
        s.finished_at,
        s.run_id
    ])?;
    Ok(n == 1)
}

/// A job's recorded steps.
pub(crate) fn of_job(conn: &Connection, job_id: i64) -> Result<Vec<JobStep>> {
    let mut st = conn.prepare_cached(OF_JOB)?;
    let rows = st.query_map([job_id], from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One step's result as JSON; None when the job has no such step.
pub(crate) fn output(conn: &Connection, job_id: i64, name: &str) -> Result<Option<String>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(OUTPUT)?
        .query_row(params![job_id, name], |r| r.get(0))
        .optional()?)
}

/// Marks the named steps as reused in `attempt`.
pub(crate) fn mark_reused(
    conn: &Connection,
    job_id: i64,
    attempt: i64,
    names: &[String],
) -> Result<()> {
    let names = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(MARK_REUSED)?
        .execute(params![job_id, attempt, names])?;
    Ok(())
}
