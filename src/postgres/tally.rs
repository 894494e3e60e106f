//! The metrics' and the overview's counts on PostgreSQL: the same
//! [`Tally`] the file's scans fill, from named `GROUP BY` queries (the
//! server aggregates with a hash, in parallel, and sends a few rows), and
//! the last hour's runs read from the newest attempt back through a
//! cursor, so the walk stops as early as on the file. Each report runs in
//! one `REPEATABLE READ READ ONLY` snapshot. Writes no table.

use postgres::{Row, Transaction};

use super::conn::Stmt;

use super::conn::{one, read_err, Col, PgConn};
use super::reports::in_snapshot;
use crate::core::attempt::AttemptOutcome;
use crate::core::job::JobState;
use crate::core::outbox::OutboxState;
use crate::core::reports::overview;
use crate::core::reports::overview::{Activity, ActivityCount, Overview};
use crate::core::reports::tally::{Group, Runs, Tally};
use crate::core::time::Millis;
use crate::error::{Error, Result};

/// Jobs per queue, kind and state, with their deliveries and the oldest
/// due `run_at` of the queued ones (`$1`: now).
pub(crate) const JOB_GROUPS: &str = "SELECT queue, kind, state, count(*), \
     sum(deliveries)::bigint, min(run_at) FILTER (WHERE state = 'queued' AND run_at <= $1) \
     FROM jobs GROUP BY queue, kind, state";

/// Outbox rows per kind and state.
pub(crate) const OUTBOX_GROUPS: &str =
    "SELECT kind, state, count(*) FROM outbox GROUP BY kind, state";

/// Job runs per job kind and outcome: one hash join of the attempts with
/// their jobs. An attempt of a pruned job went with it (`ON DELETE
/// CASCADE`).
pub(crate) const JOB_RUNS: &str = "SELECT j.kind, a.outcome, count(*) FROM attempts a \
     JOIN jobs j ON j.id = a.job_id GROUP BY j.kind, a.outcome";

/// Effect runs per outbox kind and outcome.
pub(crate) const EFFECT_RUNS: &str = "SELECT o.kind, a.outcome, count(*) FROM attempts a \
     JOIN outbox o ON o.id = a.outbox_id GROUP BY o.kind, a.outcome";

/// The ledger's rows.
pub(crate) const LEDGER_ROWS: &str = "SELECT count(*) FROM processed_jobs";

/// What litejob's tables take on the server (rows, indexes, TOAST): the
/// stand-in for a file's size. A table missing from the search path counts
/// nothing.
pub(crate) const TABLE_BYTES: &str = "SELECT coalesce(sum(pg_total_relation_size(c)), 0)::bigint \
     FROM unnest(ARRAY['jobs', 'processed_jobs', 'outbox', 'attempts', 'schedules']) AS t(name), \
     LATERAL (SELECT to_regclass(t.name) AS c) x WHERE c IS NOT NULL";

/// Job attempts newest first, for [`ActivityCount`], read through a cursor
/// (a walk down the primary key that the reader stops).
pub(crate) const RECENT_ATTEMPTS: &str = "SELECT started_at, finished_at, outcome FROM attempts \
     WHERE job_id IS NOT NULL ORDER BY id DESC";

/// Rows a cursor fetch brings: a quiet hour is one fetch, a busy one a few.
const FETCH_ROWS: i32 = 2_000;

fn bad(what: &str, v: &str) -> Error {
    Error::Internal(format!("bad {what} {v:?} in the database"))
}

/// The statements of a tally, prepared (and cached on the connection)
/// before its snapshot begins.
struct Prepared {
    jobs: Stmt,
    outbox: Stmt,
    job_runs: Stmt,
    effect_runs: Stmt,
    ledger: Stmt,
    bytes: Stmt,
}

impl Prepared {
    fn on(c: &mut PgConn) -> Result<Prepared> {
        Ok(Prepared {
            jobs: c.stmt(JOB_GROUPS)?,
            outbox: c.stmt(OUTBOX_GROUPS)?,
            job_runs: c.stmt(JOB_RUNS)?,
            effect_runs: c.stmt(EFFECT_RUNS)?,
            ledger: c.stmt(LEDGER_ROWS)?,
            bytes: c.stmt(TABLE_BYTES)?,
        })
    }
}

/// The metrics' counts, in one snapshot.
pub(crate) fn tally(c: &mut PgConn, now: Millis) -> Result<Tally> {
    let st = Prepared::on(c)?;
    in_snapshot(c, |tx| count(tx, &st, now, Runs::Counted))
}

/// The overview, in one snapshot.
pub(crate) fn overview(c: &mut PgConn, now: Millis) -> Result<Overview> {
    let st = Prepared::on(c)?;
    let recent = c.stmt(RECENT_ATTEMPTS)?;
    let (t, activity, schedules) = in_snapshot(c, |tx| {
        let t = count(tx, &st, now, Runs::Skipped)?;
        let activity = activity(tx, &recent, now)?;
        Ok((t, activity, super::schedules::list(tx)?))
    })?;
    Ok(overview::assemble(now, t, activity, schedules))
}

fn count(tx: &mut Transaction<'_>, st: &Prepared, now: Millis, runs: Runs) -> Result<Tally> {
    let q = |tx: &mut Transaction<'_>, s: &Stmt, p: super::conn::Params<'_>| {
        s.query(tx, p).map_err(read_err)
    };
    let mut t = Tally::default();
    for r in q(tx, &st.jobs, &[&now])? {
        let state = job_state(&r, 2)?;
        let g = Group {
            count: r.col(3)?,
            deliveries: r.col::<Option<i64>>(4)?.unwrap_or(0),
            oldest_due_run_at: r.col(5)?,
        };
        t.add_jobs(r.col(0)?, r.col(1)?, state, g);
    }
    for r in q(tx, &st.outbox, &[])? {
        let state: &str = r.col(1)?;
        let state: OutboxState = state.parse().map_err(|_| bad("outbox state", state))?;
        t.add_outbox(r.col(0)?, state, r.col(2)?);
    }
    if runs == Runs::Counted {
        for sql in [&st.job_runs, &st.effect_runs] {
            for r in q(tx, sql, &[])? {
                let outcome: &str = r.col(1)?;
                let o = AttemptOutcome::parse(outcome).ok_or_else(|| bad("outcome", outcome))?;
                t.add_runs(r.col(0)?, o, r.col(2)?);
            }
        }
    }
    t.ledger_rows = one(q(tx, &st.ledger, &[])?)?.col(0)?;
    t.file_bytes = one(q(tx, &st.bytes, &[])?)?.col::<i64>(0)?.max(0) as u64;
    t.wal_bytes = 0;
    Ok(t)
}

fn job_state(r: &Row, i: usize) -> Result<JobState> {
    let s: &str = r.col(i)?;
    s.parse().map_err(|_| bad("job state", s))
}

/// The last hour's runs per minute: the newest attempts, a fetch at a
/// time, until [`ActivityCount`] has seen a run older than the window.
fn activity(tx: &mut Transaction<'_>, recent: &Stmt, now: Millis) -> Result<Activity> {
    let mut a = ActivityCount::new(now);
    let portal = recent.bind(tx, &[]).map_err(read_err)?;
    'walk: loop {
        let rows = tx.query_portal(&portal, FETCH_ROWS).map_err(read_err)?;
        for r in &rows {
            if !a.add(r.col(0)?, r.col(1)?, r.col(2)?) {
                break 'walk;
            }
        }
        if rows.len() < FETCH_ROWS as usize {
            break;
        }
    }
    Ok(a.finish())
}
