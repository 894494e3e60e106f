//! A PostgreSQL worker's claim: one statement takes a batch of due jobs
//! with `FOR UPDATE SKIP LOCKED` and starts them (lease, charged attempt,
//! attempt row, the fence on it); a queue with partition limits has its
//! own ([`CLAIM_PARTITIONED`], run by `controls.rs` under the queue's
//! lock). The batch's transaction that follows is `run.rs`'s. Writes
//! `jobs` (state and lease columns) and `attempts`.

use postgres::GenericClient;

use super::conn::{autocommit, in_row, write_err, Col, PgConn, Stmt};
use super::run::Statements;
use crate::core::time::Millis;
use crate::error::Result;

/// Whether any job of `kinds` (in `queues`) is due: a read before a claim.
const ANY_DUE: &str = "SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) AS k(kind) \
     CROSS JOIN LATERAL (SELECT 1 FROM jobs WHERE state = 'queued' AND kind = k.kind \
     AND run_at <= $2 AND ($3::text[] IS NULL OR queue = ANY($3)) LIMIT 1) x)";

/// Claims up to `$4` due jobs of the kinds `$1` (in the queues `$3`, if
/// given, and none of the queues `$9`, the controlled ones a claim skips;
/// suspects, `abandoned > 0`, exactly when `$8`) in priority order,
/// and starts them: lease, charged attempt, attempt row and the fence on
/// it, all in one statement. One seek per kind on `jobs_claim` (or
/// `jobs_suspect`), then the best `$4` of those: a single `kind = ANY(..)`
/// scan would sort every queued job of those kinds. The attempt ids are
/// drawn first, so each job row is updated once, from the sequence looked
/// up once per statement (an uncorrelated subquery: looked up for each row,
/// it was a tenth of the claim's time).
pub(crate) const CLAIM: &str = "\
WITH picked AS (
    SELECT c.id, nextval((SELECT pg_get_serial_sequence('attempts', 'id'))::regclass) AS attempt_id
    FROM unnest($1::text[]) AS k(kind)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM jobs
        WHERE state = 'queued' AND kind = k.kind AND run_at <= $2
          AND ($3::text[] IS NULL OR queue = ANY($3)) AND (abandoned > 0) = $8
          AND ($9::text[] IS NULL OR queue <> ALL($9))
        ORDER BY priority, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY c.priority, c.run_at, c.id LIMIT $4
),
taken AS (
    UPDATE jobs j SET state = 'running', lease_owner = $5, lease_expires_at = $6,
        attempts = j.attempts + 1, current_attempt = p.attempt_id
    FROM picked p WHERE j.id = p.id
    RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.payload, j.attempts, j.max_attempts,
        p.attempt_id, j.abandoned, j.priority, j.run_at, j.partition_key, j.timeout_ms
),
att AS (
    INSERT INTO attempts (id, job_id, attempt, key, worker, started_at)
    SELECT attempt_id, id, attempts, idempotency_key, $7, $2 FROM taken
)
SELECT id, kind, idempotency_key, queue, payload, attempts, max_attempts, attempt_id, partition_key,
    timeout_ms
FROM taken ORDER BY priority, run_at, id";

/// [`CLAIM`] for one queue with partition limits (`$3`, a list of one),
/// run under the lock on its `queues` row: the partitions at their limit
/// (`$9`) are skipped by the scan itself, so a partition with many jobs
/// waiting does not fill the candidates; of the first `$10` candidates of
/// each kind, each partition gives at most its room (`$12` for the
/// partitions `$11` with a load, `$13` for any other) in its own order,
/// so one at a time means its best job; then the best `$4` of those.
pub(crate) const CLAIM_PARTITIONED: &str = "\
WITH cand AS (
    SELECT c.id, c.partition_key, c.priority, c.run_at
    FROM unnest($1::text[]) AS k(kind)
    CROSS JOIN LATERAL (
        SELECT id, partition_key, priority, run_at FROM jobs
        WHERE state = 'queued' AND kind = k.kind AND run_at <= $2
          AND queue = ANY($3) AND (abandoned > 0) = $8
          AND (partition_key IS NULL OR partition_key <> ALL($9::text[]))
        ORDER BY priority, run_at, id LIMIT $10
    ) c
),
ranked AS (
    SELECT id, partition_key, priority, run_at,
        row_number() OVER (PARTITION BY partition_key ORDER BY priority, run_at, id) AS rn
    FROM cand
),
fits AS (
    SELECT r.id FROM ranked r
    LEFT JOIN unnest($11::text[], $12::bigint[]) AS p(key, room) ON p.key = r.partition_key
    WHERE r.partition_key IS NULL OR r.rn <= coalesce(p.room, $13)
    ORDER BY r.priority, r.run_at, r.id LIMIT $4
),
picked AS (
    SELECT j.id, nextval((SELECT pg_get_serial_sequence('attempts', 'id'))::regclass) AS attempt_id
    FROM jobs j WHERE j.id IN (SELECT id FROM fits) AND j.state = 'queued'
    FOR UPDATE OF j SKIP LOCKED
),
taken AS (
    UPDATE jobs j SET state = 'running', lease_owner = $5, lease_expires_at = $6,
        attempts = j.attempts + 1, current_attempt = p.attempt_id
    FROM picked p WHERE j.id = p.id
    RETURNING j.id, j.kind, j.idempotency_key, j.queue, j.payload, j.attempts, j.max_attempts,
        p.attempt_id, j.abandoned, j.priority, j.run_at, j.partition_key, j.timeout_ms
),
att AS (
    INSERT INTO attempts (id, job_id, attempt, key, worker, started_at)
    SELECT attempt_id, id, attempts, idempotency_key, $7, $2 FROM taken
)
SELECT id, kind, idempotency_key, queue, payload, attempts, max_attempts, attempt_id, partition_key,
    timeout_ms
FROM taken ORDER BY priority, run_at, id";

/// A job a claim took and started.
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub id: i64,
    pub kind: String,
    pub key: String,
    pub queue: String,
    pub payload: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub attempt_id: i64,
    /// Its partition of the queue, if it has one.
    pub partition: Option<String>,
    /// Its own timeout (`jobs.timeout_ms`), if it has one.
    pub timeout_ms: Option<i64>,
}

pub(crate) fn any_due(
    c: &mut PgConn,
    kinds: &[String],
    queues: Option<&[String]>,
    now: Millis,
) -> Result<bool> {
    let queues: Option<Vec<String>> = queues.map(<[String]>::to_vec);
    c.query_one(ANY_DUE, &[&kinds, &now, &queues])?.col(0)
}

/// What a claim asks for.
#[derive(Clone, Copy)]
pub(crate) struct ClaimAsk<'a> {
    pub kinds: &'a [String],
    pub queues: Option<&'a [String]>,
    /// Queues to leave alone (paused, or claimed under their row's lock).
    pub skipped: Option<&'a [String]>,
    pub limit: i64,
    pub suspects: bool,
    pub owner: &'a str,
    pub lease_until: Millis,
    pub worker: &'a str,
    pub now: Millis,
}

/// Claims and starts a batch; commits in its own transaction (the
/// worker's session does not wait for its WAL flush: a claim lost to a
/// server crash just means the jobs run again, and the batch's durable
/// commit flushes it first anyway).
pub(crate) fn claim(c: &mut PgConn, st: &Statements, ask: &ClaimAsk<'_>) -> Result<Vec<Started>> {
    autocommit!(c, write_err, |client| claim_with(client, &st.claim, ask))
}

/// [`claim`] on `client`, a connection or a transaction open on it.
pub(crate) fn claim_with(
    client: &mut impl GenericClient,
    claim: &Stmt,
    ask: &ClaimAsk<'_>,
) -> Result<Vec<Started>> {
    let queues: Option<Vec<String>> = ask.queues.map(<[String]>::to_vec);
    let skipped: Option<Vec<String>> = ask.skipped.map(<[String]>::to_vec);
    let rows = claim
        .query(
            client,
            &[
                &ask.kinds,
                &ask.now,
                &queues,
                &ask.limit,
                &ask.owner,
                &ask.lease_until,
                &ask.worker,
                &ask.suspects,
                &skipped,
            ],
        )
        .map_err(write_err)?;
    started(&rows)
}

/// The partitions a partitioned claim must respect: those at their limit,
/// the room of those with a load, and the room of any other.
pub(crate) struct PartitionRoom {
    pub full: Vec<String>,
    pub keys: Vec<String>,
    pub rooms: Vec<i64>,
    pub default_room: i64,
}

/// [`claim_with`] for a queue with partition limits (see
/// [`CLAIM_PARTITIONED`]), scanning `scan` candidates of each kind.
pub(crate) fn claim_partitioned(
    client: &mut impl GenericClient,
    claim: &Stmt,
    ask: &ClaimAsk<'_>,
    room: &PartitionRoom,
    scan: i64,
) -> Result<Vec<Started>> {
    let queues: Option<Vec<String>> = ask.queues.map(<[String]>::to_vec);
    let rows = claim
        .query(
            client,
            &[
                &ask.kinds,
                &ask.now,
                &queues,
                &ask.limit,
                &ask.owner,
                &ask.lease_until,
                &ask.worker,
                &ask.suspects,
                &room.full,
                &scan,
                &room.keys,
                &room.rooms,
                &room.default_room,
            ],
        )
        .map_err(write_err)?;
    started(&rows)
}

/// The jobs a claim statement returned ([`CLAIM`], [`CLAIM_PARTITIONED`]).
fn started(rows: &[postgres::Row]) -> Result<Vec<Started>> {
    rows.iter()
        .map(|r| {
            in_row("jobs", r, |r| {
                Ok(Started {
                    id: r.col(0)?,
                    kind: r.col(1)?,
                    key: r.col(2)?,
                    queue: r.col(3)?,
                    payload: r.col(4)?,
                    attempt: r.col(5)?,
                    max_attempts: r.col(6)?,
                    attempt_id: r.col(7)?,
                    partition: r.col(8)?,
                    timeout_ms: r.col(9)?,
                })
            })
        })
        .collect()
}
