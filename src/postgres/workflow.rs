//! Workflows on PostgreSQL: a job enqueued with dependencies (its edges
//! written with it, its dependencies found by key, locked and marked as
//! having dependents, so a dependency finishing at the same moment either
//! sees the mark or is seen finished), and what jobs' ends do to their
//! dependents in the
//! finishing transaction: the last dependency's success queues them, a
//! death or cancellation cancels them (transitively). Writes `jobs` and
//! `job_dependencies`.

use std::collections::HashMap;

use postgres::GenericClient;

use super::conn::{read_err, write_err, Col, PgConn};
use crate::core::job::{Enqueued, JobState};
use crate::core::reports::workflow::{trim, Linked, Workflow};
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::core::workflow;
use crate::error::{Error, Result};

/// A job that names dependencies, in its own transaction on a pooled
/// connection.
pub(crate) fn insert_one(conn: &mut PgConn, job: &ValidJob, now: Millis) -> Result<Enqueued> {
    let mut tx = conn.begin().map_err(write_err)?;
    let e = insert(&mut tx, job, now)?;
    tx.commit().map_err(write_err)?;
    Ok(e)
}

/// A batch that names dependencies, in one transaction: each job after
/// the batch's jobs it depends on (a cycle refused before anything is
/// written), the answers in the batch's order; all or nothing.
pub(crate) fn insert_batch(
    conn: &mut PgConn,
    jobs: &[ValidJob],
    now: Millis,
) -> Result<Vec<Enqueued>> {
    let order = workflow::batch_order(jobs)?;
    let mut tx = conn.begin().map_err(write_err)?;
    let mut out = vec![None; jobs.len()];
    for i in order {
        out[i] = Some(insert(&mut tx, &jobs[i], now)?);
    }
    tx.commit().map_err(write_err)?;
    out.into_iter()
        .map(|e| e.ok_or_else(|| Error::Internal("a batch's job was not inserted".into())))
        .collect()
}

/// Inserts a job that names dependencies inside `client`'s transaction,
/// or counts a duplicate delivery (a duplicate keeps the dependencies of
/// the job already there). It starts `waiting`, `queued` or `cancelled` by
/// its dependencies' states.
pub(crate) fn insert<C: GenericClient>(
    client: &mut C,
    job: &ValidJob,
    now: Millis,
) -> Result<Enqueued> {
    const SEEN: &str = "SELECT id, true FROM jobs WHERE idempotency_key = $1 \
         UNION ALL SELECT coalesce(job_id, 0), false FROM processed_jobs WHERE key = $1";
    if let Some(r) = client.query(SEEN, &[&job.key]).map_err(read_err)?.first() {
        let (id, in_jobs): (i64, bool) = (r.col(0)?, r.col(1)?);
        if in_jobs {
            client
                .execute(
                    "UPDATE jobs SET deliveries = deliveries + 1 WHERE id = $1",
                    &[&id],
                )
                .map_err(write_err)?;
        }
        return Ok(Enqueued::Duplicate(id));
    }
    // Each dependency's row is locked in id order and marked: its end (an
    // UPDATE of its row) waits for this insert's commit, and then reads the
    // mark on the row's new version and looks for its dependents; or this
    // waits for the end's commit, and reads the state it wrote.
    const DEPS: &str = "UPDATE jobs SET has_dependents = true WHERE id IN ( \
           SELECT id FROM jobs WHERE idempotency_key = ANY($1) ORDER BY id FOR NO KEY UPDATE) \
         RETURNING idempotency_key, id, state";
    let found: HashMap<String, (i64, String)> = client
        .query(DEPS, &[&job.depends_on])
        .map_err(write_err)?
        .iter()
        .map(|r| Ok((r.col(0)?, (r.col(1)?, r.col(2)?))))
        .collect::<Result<_>>()?;
    let deps = job
        .depends_on
        .iter()
        .map(|k| {
            let (id, state) = found.get(k).ok_or_else(|| workflow::missing(&job.key, k))?;
            Ok((k.clone(), *id, state.parse()?))
        })
        .collect::<Result<Vec<(String, i64, JobState)>>>()?;
    let (state, finished_at, last_error) = workflow::start(&deps).columns(now);
    const INSERT: &str = "INSERT INTO jobs (queue, kind, idempotency_key, payload, priority, \
         run_at, max_attempts, created_at, state, finished_at, last_error, partition_key, \
         timeout_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (idempotency_key) DO UPDATE SET deliveries = jobs.deliveries + 1 \
         RETURNING id, (xmax = 0)";
    let row = client
        .query_one(
            INSERT,
            &[
                &job.queue,
                &job.kind,
                &job.key,
                &job.payload,
                &job.priority,
                &job.run_at,
                &job.max_attempts,
                &now,
                &state.as_str(),
                &finished_at,
                &last_error,
                &job.partition,
                &job.timeout_ms,
            ],
        )
        .map_err(write_err)?;
    let (id, new): (i64, bool) = (row.col(0)?, row.col(1)?);
    if !new {
        // Another producer inserted the key a moment ago.
        return Ok(Enqueued::Duplicate(id));
    }
    let ids: Vec<i64> = deps.iter().map(|(_, id, _)| *id).collect();
    client
        .execute(
            "INSERT INTO job_dependencies (job_id, depends_on) SELECT $1, unnest($2::bigint[])",
            &[&id, &ids],
        )
        .map_err(write_err)?;
    Ok(Enqueued::New(id))
}

/// Locks the waiting dependents of jobs that just ended, in id order (two
/// batches ending two dependencies of one job queue it once, one after the
/// other). A statement after the ends, so its snapshot holds the edges of
/// any enqueue the ends waited for. Returns their ids.
const LOCK_DEPENDENTS: &str = "SELECT id FROM jobs \
     WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on = ANY($1)) \
     AND state = 'waiting' ORDER BY id FOR UPDATE";

/// Queues the locked dependents whose every dependency succeeded; read in
/// a statement of its own, after the locks, so it sees the other
/// dependencies' ends committed meanwhile.
const PROMOTE: &str = "UPDATE jobs SET state = 'queued' \
     WHERE id = ANY($1) AND state = 'waiting' \
     AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on \
                     WHERE d.job_id = jobs.id AND p.state <> 'succeeded')";

/// Cancels every waiting job that depends on `$1`, directly or through
/// others.
const CANCEL: &str = "WITH RECURSIVE doomed(id) AS ( \
       SELECT job_id FROM job_dependencies WHERE depends_on = $1 \
       UNION SELECT d.job_id FROM job_dependencies d JOIN doomed ON d.depends_on = doomed.id) \
     UPDATE jobs SET state = 'cancelled', finished_at = $2, last_error = $3 \
     WHERE id IN (SELECT id FROM doomed) AND state = 'waiting'";

/// What the jobs that just ended (id, key, state) do to their dependents,
/// in the transaction that ended them: returns how many became `queued`.
/// One statement when none of them has a dependent; one more to queue
/// the dependents of any number of them.
pub(crate) fn ended<C: GenericClient>(
    client: &mut C,
    ends: &[(i64, &str, JobState)],
    now: Millis,
) -> Result<usize> {
    let finished: Vec<i64> = ends
        .iter()
        .filter(|(_, _, s)| {
            matches!(
                s,
                JobState::Succeeded | JobState::Dead | JobState::Cancelled
            )
        })
        .map(|(id, _, _)| *id)
        .collect();
    if finished.is_empty() {
        return Ok(0);
    }
    let locked: Vec<i64> = client
        .query(LOCK_DEPENDENTS, &[&finished])
        .map_err(read_err)?
        .iter()
        .map(|r| r.col(0))
        .collect::<Result<_>>()?;
    if locked.is_empty() {
        return Ok(0);
    }
    for (id, key, state) in ends {
        if matches!(state, JobState::Dead | JobState::Cancelled) {
            let why = workflow::cancelled_by(key, *id, *state);
            client
                .execute(CANCEL, &[id, &now, &why])
                .map_err(write_err)?;
        }
    }
    let n = client.execute(PROMOTE, &[&locked]).map_err(write_err)?;
    Ok(n as usize)
}

/// The output of `key`, a dependency of job `job_id`: `None` when it
/// finished without one; an error when `key` is not one of its
/// dependencies.
pub(crate) fn dependency_output<C: GenericClient>(
    client: &mut C,
    job_id: i64,
    key: &str,
) -> Result<Option<String>> {
    const SQL: &str = "SELECT j.output FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on \
         WHERE d.job_id = $1 AND j.idempotency_key = $2";
    let row = client.query_opt(SQL, &[&job_id, &key]).map_err(read_err)?;
    match row {
        Some(r) => r.col(0),
        None => Err(Error::invalid(format!(
            "{key:?} is not a dependency of job {job_id} (see NewJob::with_depends_on)"
        ))),
    }
}

const DEPS: &str = "SELECT j.id, j.idempotency_key, j.kind, j.state \
     FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on WHERE d.job_id = $1 ORDER BY j.id";
const DEPENDENTS: &str = "SELECT j.id, j.idempotency_key, j.kind, j.state \
     FROM job_dependencies d JOIN jobs j ON j.id = d.job_id WHERE d.depends_on = $1 \
     ORDER BY j.id LIMIT 1000";
/// The graph around `$1`, nearest first; the recursion stops at the
/// outer limit.
const NEAR: &str = "WITH RECURSIVE near(id) AS ( \
       SELECT $1::bigint \
       UNION SELECT CASE WHEN d.job_id = near.id THEN d.depends_on ELSE d.job_id END \
       FROM job_dependencies d JOIN near ON near.id IN (d.job_id, d.depends_on)), \
     first AS (SELECT id FROM near LIMIT $2) \
     SELECT j.id, j.idempotency_key, j.kind, j.state FROM jobs j WHERE j.id IN (SELECT id FROM first)";
const EDGES: &str = "SELECT job_id, depends_on FROM job_dependencies \
     WHERE job_id = ANY($1) AND depends_on = ANY($1) ORDER BY job_id, depends_on";

fn linked(rows: Vec<postgres::Row>) -> Result<Vec<Linked>> {
    rows.iter()
        .map(|r| {
            let state: String = r.col(3)?;
            Ok(Linked {
                id: r.col(0)?,
                key: r.col(1)?,
                kind: r.col(2)?,
                state: state.parse()?,
            })
        })
        .collect()
}

/// A job's dependencies and (the first thousand of) its dependents.
pub(crate) fn links<C: GenericClient>(c: &mut C, id: i64) -> Result<(Vec<Linked>, Vec<Linked>)> {
    let deps = linked(c.query(DEPS, &[&id]).map_err(read_err)?)?;
    let dependents = linked(c.query(DEPENDENTS, &[&id]).map_err(read_err)?)?;
    Ok((deps, dependents))
}

/// The jobs linked to job `id` through dependencies, either way,
/// transitively: at most `limit` of them, nearest first.
pub(crate) fn graph<C: GenericClient>(c: &mut C, id: i64, limit: usize) -> Result<Workflow> {
    let found = linked(
        c.query(NEAR, &[&id, &(limit as i64 + 1)])
            .map_err(read_err)?,
    )?;
    let (jobs, truncated) = trim(found, id, limit);
    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let edges = c
        .query(EDGES, &[&ids])
        .map_err(read_err)?
        .iter()
        .map(|r| Ok((r.col(0)?, r.col(1)?)))
        .collect::<Result<Vec<(i64, i64)>>>()?;
    Ok(Workflow {
        job_id: id,
        jobs,
        edges,
        truncated,
    })
}
