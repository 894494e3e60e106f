//! A PostgreSQL batch's transaction, after its claim (`claim.rs`): every
//! run fenced on its attempt and its ledger row inserted first, the
//! handlers' writes each inside a savepoint, every run's end recorded in
//! one statement, one commit. The ledger's insert is here, one statement
//! with the fence; its other statements are `ledger.rs`'s. Writes `jobs`,
//! `attempts` and `processed_jobs`.

use postgres::Transaction;

use super::conn::{read_err, Col, PgConn, Stmt};
use crate::core::lifecycle::JobEnd;
use crate::core::time::Millis;
use crate::error::Result;

/// Why these statements never say `state = 'running'`: a job's
/// `current_attempt` is set only while it runs (a CHECK of the table), so
/// the fence on it says as much — and that predicate would let the planner
/// walk the partial index `jobs_lease`, whose dead entries (one per job run
/// since the last vacuum) cost far more than a primary-key probe per job.
///
/// The fence and the ledger, first in the batch's transaction: the runs
/// still held by their attempts (a run whose lease was lost is not among
/// them: nothing of it runs), and the ledger row of each that asks for
/// one; a key already there is a duplicate. No row lock: the lease keeps
/// the job this run's while the batch runs (the keeper renews it), and the
/// batch's end is fenced again, under the row locks its UPDATE takes — a
/// lease lost in between (a stall past the lease) makes the end find fewer
/// rows, and the whole batch is rolled back and given back (see
/// [`end`]). Locking each row here cost a WAL record per job. Whether a
/// run's ledger row is new is one probe of the rows inserted, which the
/// server hashes once (`IN`); an `EXISTS` per run scanned them, 50 rows a
/// run in a batch of 100.
const FENCE_AND_LEDGER: &str = "\
WITH held AS (
    SELECT j.id, j.idempotency_key, f.ledger FROM jobs j
    JOIN unnest($1::bigint[], $2::bigint[], $3::boolean[]) AS f(id, attempt_id, ledger)
      ON j.id = f.id AND j.current_attempt = f.attempt_id
),
led AS (
    INSERT INTO processed_jobs (key, completed_at, job_id)
    SELECT idempotency_key, $4, id FROM held WHERE ledger
    ON CONFLICT (key) DO NOTHING RETURNING job_id
)
SELECT h.id, h.id IN (SELECT job_id FROM led) FROM held h";

/// Every run's end in one statement: each job's row takes the columns the
/// core decided for it ([`JobEnd`]: succeeded, requeued at its retry or
/// snooze time, or dead) and its output, its lease let go; its attempt row
/// records the outcome. A `run_at` of NULL keeps the row's. Fenced on the
/// attempt like the rest. It also sets the transaction's
/// `synchronous_commit` to the queue's (`$12`: on for FULL): the worker's
/// session claims with it off — a claim lost to a server crash just runs
/// again — but the batch's commit is as durable as the queue says.
const END: &str = "\
WITH ends AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                         $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::text[])
        AS e(job_id, attempt_id, outcome, error, state, finished_at, attempts, run_at,
             last_error, output)
),
j AS (
    UPDATE jobs SET state = e.state, finished_at = e.finished_at, attempts = e.attempts,
        run_at = coalesce(e.run_at, jobs.run_at), last_error = e.last_error, output = e.output,
        lease_owner = NULL, lease_expires_at = NULL, current_attempt = NULL
    FROM ends e
    WHERE jobs.id = e.job_id AND jobs.current_attempt = e.attempt_id
    RETURNING jobs.id, jobs.state, jobs.has_dependents
),
a AS (
    UPDATE attempts SET outcome = e.outcome, error = e.error, finished_at = $11::bigint
    FROM ends e WHERE attempts.id = e.attempt_id AND attempts.outcome = 'running'
),
durable AS (SELECT set_config('synchronous_commit', $12::text, true))
SELECT id, state, has_dependents FROM j, durable";

/// The prepared statements of a worker's connection.
pub(crate) struct Statements {
    pub claim: Stmt,
    pub fence: Stmt,
    pub unrecord: Stmt,
    pub end: Stmt,
    pub outbox_add: Stmt,
}

impl Statements {
    pub(crate) fn prepare(c: &mut PgConn) -> Result<Statements> {
        Ok(Statements {
            claim: c.stmt(super::claim::CLAIM)?,
            fence: c.stmt(FENCE_AND_LEDGER)?,
            unrecord: c.stmt(super::ledger::UNRECORD)?,
            end: c.stmt(END)?,
            outbox_add: c.stmt(super::outbox::ADD)?,
        })
    }
}

/// Locks the runs still held and inserts their ledger rows: for each held
/// job, whether its ledger row is new (false: a duplicate, or no row was
/// asked for).
pub(crate) fn fence_and_ledger(
    tx: &mut Transaction<'_>,
    st: &Statements,
    runs: &[(i64, i64, bool)],
    now: Millis,
) -> Result<Vec<(i64, bool)>> {
    let ids: Vec<i64> = runs.iter().map(|r| r.0).collect();
    let attempts: Vec<i64> = runs.iter().map(|r| r.1).collect();
    let ledger: Vec<bool> = runs.iter().map(|r| r.2).collect();
    st.fence
        .query(tx, &[&ids, &attempts, &ledger, &now])
        .map_err(read_err)?
        .iter()
        .map(|r| Ok((r.col(0)?, r.col(1)?)))
        .collect()
}

/// One run's end, as [`END`] records it.
pub(crate) struct End {
    pub job_id: i64,
    pub attempt_id: i64,
    /// The attempt row's outcome and error.
    pub outcome: &'static str,
    pub error: Option<String>,
    /// What the job's row takes.
    pub job: JobEnd,
    /// What a succeeded run finished with (JSON).
    pub output: Option<String>,
}

/// Records every run's end; returns each job's new state, for every job
/// still held by its run. Fewer rows than ends: a lease was lost during the
/// batch, and the caller must roll the transaction back.
pub(crate) fn end(
    tx: &mut Transaction<'_>,
    st: &Statements,
    ends: &[End],
    now: Millis,
    durable: bool,
) -> Result<Vec<(i64, String, bool)>> {
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = ends.iter().map(|e| e.job_id).collect();
    let attempts: Vec<i64> = ends.iter().map(|e| e.attempt_id).collect();
    let outcomes: Vec<&str> = ends.iter().map(|e| e.outcome).collect();
    let errors: Vec<Option<&str>> = ends.iter().map(|e| e.error.as_deref()).collect();
    let states: Vec<&str> = ends.iter().map(|e| e.job.state.as_str()).collect();
    let finished: Vec<Option<Millis>> = ends.iter().map(|e| e.job.finished_at).collect();
    let charged: Vec<i64> = ends.iter().map(|e| e.job.attempts).collect();
    let run_at: Vec<Option<Millis>> = ends.iter().map(|e| e.job.run_at).collect();
    let last_errors: Vec<Option<&str>> = ends.iter().map(|e| e.job.last_error.as_deref()).collect();
    let outputs: Vec<Option<&str>> = ends.iter().map(|e| e.output.as_deref()).collect();
    st.end
        .query(
            tx,
            &[
                &ids,
                &attempts,
                &outcomes,
                &errors,
                &states,
                &finished,
                &charged,
                &run_at,
                &last_errors,
                &outputs,
                &now,
                &if durable { "on" } else { "off" },
            ],
        )
        .map_err(read_err)?
        .iter()
        .map(|r| Ok((r.col(0)?, r.col(1)?, r.col(2)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batch's end makes its commit as durable as the queue says, on a
    /// worker's session that claims with `synchronous_commit` off.
    #[test]
    #[cfg_attr(
        not(litejob_test_pg),
        ignore = "needs PostgreSQL: LITEJOB_TEST_PG=postgres://… when the tests are built"
    )]
    fn the_batch_end_sets_the_queues_durability_for_its_commit() {
        let schema = crate::postgres::test_schema();
        let mut c = schema.connect();
        c.client
            .batch_execute(
                "SET synchronous_commit = off; \
                 INSERT INTO jobs (id, kind, idempotency_key, payload, state, run_at, attempts, \
                                   created_at, lease_owner, lease_expires_at, current_attempt) \
                 VALUES (1, 'k', 'a', '{}', 'running', 0, 1, 0, 'me', 9e12, 7); \
                 INSERT INTO attempts (id, job_id, attempt, key, worker, started_at) \
                 VALUES (7, 1, 1, 'a', 'w', 0)",
            )
            .unwrap();
        let st = Statements::prepare(&mut c).unwrap();
        for (durable, expect) in [(true, "on"), (false, "off")] {
            let mut tx = c.client.transaction().unwrap();
            let run = crate::core::lifecycle::Charged {
                attempt: 1,
                max_attempts: 1,
            };
            let end = End {
                job_id: 1,
                attempt_id: 7,
                outcome: "succeeded",
                error: None,
                job: JobEnd::succeeded(run, 5),
                output: None,
            };
            let states = super::end(&mut tx, &st, &[end], 5, durable).unwrap();
            assert_eq!(states, [(1, "succeeded".to_string(), false)]);
            let shown: String = tx.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
            assert_eq!(shown, expect);
            // Rolled back: the job is running again for the next round.
            tx.rollback().unwrap();
        }
    }
}
