//! Workflows on a file: a job enqueued with dependencies (its edges
//! written with it, its dependencies found by key), and what a job's end
//! does to its dependents, in the same transaction: the last dependency's
//! success queues them, a dependency's death or cancellation cancels them
//! (transitively). Writes `jobs` and `job_dependencies`.

use std::cell::Cell;

use rusqlite::{Connection, OptionalExtension};

use crate::core::job::{Enqueued, JobState};
use crate::core::reports::workflow::{trim, Linked, Workflow};
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::core::workflow;
use crate::error::{Error, Result};
use crate::sqlite::enqueue::{constraint, ledger_duplicate};

/// Inserts a job that names dependencies, or counts a duplicate delivery
/// (a duplicate's dependencies are those of the job already there). Every
/// key it names must be a job's; it starts `waiting`, `queued` (all
/// succeeded already) or `cancelled` (one ended without success), and its
/// edges go in with it. Outside a transaction it opens one, so the job
/// and its edges commit together.
pub(crate) fn insert(conn: &Connection, job: &ValidJob, now: Millis) -> Result<Enqueued> {
    if !conn.is_autocommit() {
        return insert_in_tx(conn, job, now);
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    match insert_in_tx(conn, job, now) {
        Ok(e) => {
            conn.execute_batch("COMMIT")?;
            Ok(e)
        }
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(err)
        }
    }
}

/// A batch that names dependencies, inside the writer's transaction: each
/// job after the batch's jobs it depends on (a cycle refused before
/// anything is written), the answers in the batch's order. An error leaves
/// the caller to roll the batch back whole.
pub(crate) fn insert_batch(
    conn: &Connection,
    jobs: &[ValidJob],
    now: Millis,
) -> Result<Vec<Enqueued>> {
    let order = workflow::batch_order(jobs)?;
    let mut out = vec![None; jobs.len()];
    for i in order {
        out[i] = Some(insert_in_tx(conn, &jobs[i], now)?);
    }
    out.into_iter()
        .map(|e| e.ok_or_else(|| Error::Internal("a batch's job was not inserted".into())))
        .collect()
}

fn insert_in_tx(conn: &Connection, job: &ValidJob, now: Millis) -> Result<Enqueued> {
    const FIND: &str = "SELECT id FROM jobs WHERE idempotency_key = ?1";
    if let Some(id) = conn
        .prepare_cached(FIND)?
        .query_row([&job.key], |r| r.get::<_, i64>(0))
        .optional()?
    {
        const BUMP: &str = "UPDATE jobs SET deliveries = deliveries + 1 WHERE id = ?1";
        conn.prepare_cached(BUMP)?.execute([id])?;
        return Ok(Enqueued::Duplicate(id));
    }
    const IN_LEDGER: &str = "SELECT EXISTS (SELECT 1 FROM processed_jobs WHERE key = ?1)";
    if conn
        .prepare_cached(IN_LEDGER)?
        .query_row([&job.key], |r| r.get::<_, bool>(0))?
    {
        return ledger_duplicate(conn, &job.key);
    }
    let deps = dependencies(conn, job)?;
    let (state, finished_at, last_error) = workflow::start(&deps).columns(now);
    const INSERT: &str = "INSERT INTO jobs (queue, kind, idempotency_key, payload, priority, \
         run_at, max_attempts, created_at, state, finished_at, last_error, partition_key, \
         timeout_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
    conn.prepare_cached(INSERT)?
        .execute(rusqlite::params![
            job.queue,
            job.kind,
            job.key,
            job.payload,
            job.priority,
            job.run_at,
            job.max_attempts,
            now,
            state.as_str(),
            finished_at,
            last_error,
            job.partition,
            job.timeout_ms,
        ])
        .map_err(constraint)?;
    let id = conn.last_insert_rowid();
    EMPTY_IN.set(0);
    const EDGE: &str = "INSERT INTO job_dependencies (job_id, depends_on) VALUES (?1, ?2)";
    let mut edge = conn.prepare_cached(EDGE)?;
    for (_, dep, _) in &deps {
        edge.execute([id, *dep])?;
    }
    Ok(Enqueued::New(id))
}

/// The jobs `job` names, with their states; a key no job has is refused.
fn dependencies(conn: &Connection, job: &ValidJob) -> Result<Vec<(String, i64, JobState)>> {
    const FIND: &str = "SELECT id, state FROM jobs WHERE idempotency_key = ?1";
    let mut find = conn.prepare_cached(FIND)?;
    job.depends_on
        .iter()
        .map(|k| {
            let found: Option<(i64, String)> = find
                .query_row([k], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let (id, state) = found.ok_or_else(|| workflow::missing(&job.key, k))?;
            Ok((k.clone(), id, state.parse()?))
        })
        .collect()
}

thread_local! {
    /// The writer transaction this thread is in (0: none), by number.
    static WRITER_TX: Cell<u64> = const { Cell::new(0) };
    /// The last number given out.
    static LAST_TX: Cell<u64> = const { Cell::new(0) };
    /// The writer transaction in which `job_dependencies` was read empty
    /// (0: none).
    static EMPTY_IN: Cell<u64> = const { Cell::new(0) };
}

/// The writer began a transaction on this thread (`BEGIN IMMEDIATE`): until
/// it ends, only this connection writes the file, so `job_dependencies`
/// read empty in it stays empty unless this thread adds an edge. A queue
/// without workflows then pays one read per transaction, not a statement
/// per completed job.
pub(crate) fn writer_tx_began() {
    let n = LAST_TX.get() + 1;
    LAST_TX.set(n);
    WRITER_TX.set(n);
}

/// The writer's transaction ended (committed or rolled back): what was read
/// in it no longer holds.
pub(crate) fn writer_tx_ended() {
    WRITER_TX.set(0);
}

/// Whether a job may have dependents: false only inside a writer
/// transaction in which `job_dependencies` is empty.
fn may_have_dependents(conn: &Connection) -> Result<bool> {
    let tx = WRITER_TX.get();
    if tx == 0 {
        return Ok(true);
    }
    if EMPTY_IN.get() == tx {
        return Ok(false);
    }
    const ANY: &str = "SELECT EXISTS (SELECT 1 FROM job_dependencies)";
    let any: bool = conn.prepare_cached(ANY)?.query_row([], |r| r.get(0))?;
    if !any {
        EMPTY_IN.set(tx);
    }
    Ok(any)
}

/// After job `id` succeeded, in the same transaction: its waiting
/// dependents whose every dependency has succeeded now become `queued`.
/// One statement however many dependents it has, and none in a writer
/// transaction that has no edges at all. Returns how many.
pub(crate) fn promote(conn: &Connection, id: i64) -> Result<usize> {
    if !may_have_dependents(conn)? {
        return Ok(0);
    }
    const SQL: &str = "UPDATE jobs SET state = 'queued' \
         WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on = ?1) \
         AND state = 'waiting' \
         AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on \
                         WHERE d.job_id = jobs.id AND j.state <> 'succeeded')";
    Ok(conn.prepare_cached(SQL)?.execute([id])?)
}

/// After job `id` ended `state` (dead or cancelled), in the same
/// transaction: every waiting job that depends on it, directly or through
/// others, is cancelled, its `last_error` naming this job. Returns how
/// many.
pub(crate) fn cancel_dependents(
    conn: &Connection,
    id: i64,
    state: JobState,
    now: Millis,
) -> Result<usize> {
    const KEY: &str = "SELECT idempotency_key FROM jobs WHERE id = ?1";
    const SQL: &str = "WITH RECURSIVE doomed(id) AS ( \
           SELECT job_id FROM job_dependencies WHERE depends_on = ?1 \
           UNION SELECT d.job_id FROM job_dependencies d JOIN doomed ON d.depends_on = doomed.id) \
         UPDATE jobs SET state = 'cancelled', finished_at = ?2, last_error = ?3 \
         WHERE id IN (SELECT id FROM doomed) AND state = 'waiting'";
    let any: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM job_dependencies WHERE depends_on = ?1)")?
        .query_row([id], |r| r.get(0))?;
    if !any {
        return Ok(0);
    }
    let key: String = conn.prepare_cached(KEY)?.query_row([id], |r| r.get(0))?;
    let why = workflow::cancelled_by(&key, id, state);
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![id, now, why])?)
}

/// What job `id` does to its dependents now that it ended `state`;
/// returns how many became `queued`.
pub(crate) fn ended(conn: &Connection, id: i64, state: JobState, now: Millis) -> Result<usize> {
    match state {
        JobState::Succeeded => promote(conn, id),
        JobState::Dead | JobState::Cancelled => cancel_dependents(conn, id, state, now).map(|_| 0),
        _ => Ok(0),
    }
}

/// The output of `key`, a dependency of job `job_id`: `None` when it
/// finished without one; an error when `key` is not one of its
/// dependencies.
pub(crate) fn dependency_output(
    conn: &Connection,
    job_id: i64,
    key: &str,
) -> Result<Option<String>> {
    const SQL: &str = "SELECT j.output FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on \
         WHERE d.job_id = ?1 AND j.idempotency_key = ?2";
    let found: Option<Option<String>> = conn
        .prepare_cached(SQL)?
        .query_row(rusqlite::params![job_id, key], |r| r.get(0))
        .optional()?;
    found.ok_or_else(|| {
        Error::invalid(format!(
            "{key:?} is not a dependency of job {job_id} (see NewJob::with_depends_on)"
        ))
    })
}

/// A job's dependencies and (the first thousand of) its dependents.
pub(crate) fn links(conn: &Connection, id: i64) -> Result<(Vec<Linked>, Vec<Linked>)> {
    const DEPS: &str = "SELECT j.id, j.idempotency_key, j.kind, j.state \
         FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on WHERE d.job_id = ?1 ORDER BY j.id";
    const DEPENDENTS: &str = "SELECT j.id, j.idempotency_key, j.kind, j.state \
         FROM job_dependencies d JOIN jobs j ON j.id = d.job_id WHERE d.depends_on = ?1 \
         ORDER BY j.id LIMIT 1000";
    Ok((linked(conn, DEPS, id)?, linked(conn, DEPENDENTS, id)?))
}

fn linked(conn: &Connection, sql: &str, id: i64) -> Result<Vec<Linked>> {
    let mut st = conn.prepare_cached(sql)?;
    let rows = st.query_map([id], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?))
    })?;
    rows.map(|r| {
        let (id, key, kind, state) = r?;
        Ok(Linked {
            id,
            key,
            kind,
            state: state.parse()?,
        })
    })
    .collect()
}

/// The jobs linked to job `id` through dependencies, either way,
/// transitively: at most `limit` of them, nearest first.
pub(crate) fn graph(conn: &Connection, id: i64, limit: usize) -> Result<Workflow> {
    const NEAR: &str = "WITH RECURSIVE near(id) AS ( \
           SELECT ?1 \
           UNION SELECT CASE WHEN d.job_id = near.id THEN d.depends_on ELSE d.job_id END \
           FROM job_dependencies d JOIN near ON d.job_id = near.id OR d.depends_on = near.id \
           LIMIT ?2) \
         SELECT j.id, j.idempotency_key, j.kind, j.state FROM jobs j \
         WHERE j.id IN (SELECT id FROM near) ORDER BY j.id";
    const EDGES: &str = "SELECT job_id, depends_on FROM job_dependencies \
         WHERE job_id IN (SELECT value FROM json_each(?1)) \
         AND depends_on IN (SELECT value FROM json_each(?1)) ORDER BY job_id, depends_on";
    let mut st = conn.prepare_cached(NEAR)?;
    let found = st
        .query_map(rusqlite::params![id, limit as i64 + 1], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?))
        })?
        .map(|r| {
            let (id, key, kind, state) = r?;
            Ok(Linked {
                id,
                key,
                kind,
                state: state.parse()?,
            })
        })
        .collect::<Result<Vec<Linked>>>()?;
    let (jobs, truncated) = trim(found, id, limit);
    let ids = serde_json::to_string(&jobs.iter().map(|j| j.id).collect::<Vec<_>>())?;
    let edges = conn
        .prepare_cached(EDGES)?
        .query_map([ids], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<(i64, i64)>>>()?;
    Ok(Workflow {
        job_id: id,
        jobs,
        edges,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::job::NewJob;
    use crate::core::validate::into_valid;

    const T0: Millis = 1_000_000;
    const SUCCEED: &str = "UPDATE jobs SET state = 'succeeded', finished_at = 1 WHERE id = ?1";

    /// In one writer transaction a completion reads `job_dependencies`
    /// empty; a dependent enqueued later in that transaction on an
    /// unfinished job is still queued by that job's success; a new transaction reads
    /// the table again.
    #[test]
    fn an_edge_added_after_the_table_was_read_empty_is_seen_by_the_next_success() {
        let (dir, conn) = crate::sql_check::fresh_file();
        fn enqueue(conn: &Connection, key: &str, deps: &[&str]) -> i64 {
            let job = NewJob::new("k", key, &0).with_depends_on(deps.iter().copied());
            match crate::sqlite::enqueue::insert(conn, &into_valid(job, T0, 2), T0).unwrap() {
                Enqueued::New(id) => id,
                other => panic!("{other:?}"),
            }
        }
        let insert = |key: &str, deps: &[&str]| enqueue(&conn, key, deps);
        let (a, b) = (insert("a", &[]), insert("b", &[]));
        let state = |id: i64| -> String {
            conn.query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                .unwrap()
        };

        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        writer_tx_began();
        assert_eq!(promote(&conn, a).unwrap(), 0, "no edges: nothing to queue");
        let c = insert("c", &["b"]);
        assert_eq!(state(c), "waiting");
        conn.execute(SUCCEED, [b]).unwrap();
        assert_eq!(
            promote(&conn, b).unwrap(),
            1,
            "c's last dependency succeeded"
        );
        assert_eq!(state(c), "queued");
        conn.execute_batch("COMMIT").unwrap();
        writer_tx_ended();

        // The table empty again in a second transaction; between it and a
        // third, another writer (another process) adds an edge: the third
        // reads the table again.
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        writer_tx_began();
        conn.execute("DELETE FROM job_dependencies", []).unwrap();
        assert_eq!(promote(&conn, a).unwrap(), 0);
        conn.execute_batch("COMMIT").unwrap();
        writer_tx_ended();
        let d = std::thread::scope(|s| {
            s.spawn(|| {
                let cfg = crate::sqlite::db::ConnConfig {
                    synchronous: crate::core::options::Synchronous::Full,
                    busy_timeout: std::time::Duration::from_secs(5),
                };
                let other = crate::sqlite::db::open_file(&dir.path().join("q.db"), &cfg).unwrap();
                enqueue(&other, "d", &["a"])
            })
            .join()
            .unwrap()
        });
        assert_eq!(state(d), "waiting");
        conn.execute(SUCCEED, [a]).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        writer_tx_began();
        assert_eq!(
            promote(&conn, a).unwrap(),
            1,
            "d's only dependency succeeded"
        );
        assert_eq!(state(d), "queued");
        conn.execute_batch("COMMIT").unwrap();
        writer_tx_ended();
    }
}
