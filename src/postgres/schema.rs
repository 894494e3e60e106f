//! The PostgreSQL schema: embeds `postgres.sql`, reads the version a
//! database holds (the row of `litejob_schema`), refuses a newer one
//! untouched, and creates or migrates the tables. Writes every table's
//! definition and `litejob_schema`, no rows of the others.

use super::conn::{read_err, Col, PgConn};
use crate::core::SCHEMA_VERSION;
use crate::error::{Error, Result};

/// The whole current schema, as shipped in `postgres.sql` at the
/// repository root.
pub(crate) const SCHEMA_SQL: &str = include_str!("../../postgres.sql");

/// Steps from an older version: `MIGRATIONS[i]` takes version `i + 1` to
/// `i + 2` (the same numbering as the SQLite file's), statement lists run
/// in order; each step's last list reads as in `postgres.sql`. A database
/// without the tables gets `SCHEMA_SQL` in one go instead.
const MIGRATIONS: &[&[&str]] = &[
    // 1 → 2: schedules (periodic jobs).
    &[SCHEDULES_SQL],
    // 2 → 3: queue controls.
    &[QUEUES_SQL],
    // 3 → 4: workflows: the `waiting` state, `output` and `has_dependents`
    // on `jobs`, then
    // the edges' table, as `postgres.sql` ends.
    &[JOBS_V4_SQL, DEPENDENCIES_SQL],
    // 4 → 5: partitions: `jobs.partition_key`, the partition limits of
    // `queues` and the partition of a start, then the controls' tables,
    // indexes and view as `postgres.sql` has them.
    &[PARTITIONS_V5_SQL, QUEUES_SQL],
    // 5 → 6: durable steps, as `postgres.sql` ends.
    &[STEPS_SQL],
    // 6 → 7: a run may be recorded `snoozed`.
    &[ATTEMPTS_V7_SQL],
    // 7 → 8: `jobs.timeout_ms`, a run may be recorded `cancelled`, and
    // the recent failures' view lists those runs.
    &[TIMEOUTS_V8_SQL, RECENT_FAILURES_SQL],
];

/// The column and the outcome version 8 adds.
const TIMEOUTS_V8_SQL: &str = "-- version 8: timeouts and cancelled runs.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS timeout_ms bigint
    CHECK (timeout_ms IS NULL OR timeout_ms > 0);
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'panicked', 'duplicate',
                       'abandoned', 'released', 'snoozed', 'cancelled'));
";

/// The recent failures' view, as `postgres.sql` has it from version 8.
const RECENT_FAILURES_SQL: &str = "CREATE OR REPLACE VIEW recent_failures AS
SELECT a.id AS attempt_id, coalesce('job ' || a.job_id, 'outbox ' || a.outbox_id) AS run_of,
       a.key, a.attempt, a.outcome, a.worker,
       litejob_time(a.started_at) AS started_at,
       a.error
FROM attempts a
WHERE a.outcome IN ('failed', 'panicked', 'abandoned', 'cancelled')
ORDER BY a.id DESC
LIMIT 100;
";

/// `attempts.outcome` as `postgres.sql` checks it from version 7.
const ATTEMPTS_V7_SQL: &str = "-- version 7: the snoozed outcome.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'panicked', 'duplicate',
                       'abandoned', 'released', 'snoozed'));
";

/// The durable steps' table, the end of `postgres.sql`.
const STEPS_SQL: &str = r#"-- job_steps: the durable steps of jobs (`ctx.step(name, ..)` in a prepare
-- step), one row per job and step name. A step's row commits as its call
-- returns, before `step` hands the value on; a later run of the job (a
-- retry, or a rerun after a crash) gets `output` back and does not call the
-- step again. `attempt` is the run that called it, `reused_in` the later
-- runs that got it back (a JSON array of attempt numbers). Deleted with
-- their job.
CREATE TABLE IF NOT EXISTS job_steps (
    job_id      bigint  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name        text    NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    attempt     bigint  NOT NULL CHECK (attempt >= 1),  -- the run that called it
    output      text    NOT NULL CHECK (output::json IS NOT NULL),
    started_at  bigint  NOT NULL,
    finished_at bigint  NOT NULL,
    reused_in   text    CHECK (reused_in IS NULL OR reused_in::json IS NOT NULL),
    PRIMARY KEY (job_id, name)
);
"#;

/// The columns and constraints version 5 adds, on a version-4 database (or
/// a newer shape already, from an older one's steps: each is idempotent).
const PARTITIONS_V5_SQL: &str = "-- version 5: partitions.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS partition_key text
    CHECK (partition_key IS NULL OR length(partition_key) BETWEEN 1 AND 200);
CREATE INDEX IF NOT EXISTS jobs_partition_running ON jobs (queue, partition_key)
    WHERE state = 'running' AND partition_key IS NOT NULL;
ALTER TABLE queues ADD COLUMN IF NOT EXISTS partition_concurrency bigint
    CHECK (partition_concurrency >= 1);
ALTER TABLE queues ADD COLUMN IF NOT EXISTS partition_rate_limit bigint
    CHECK (partition_rate_limit >= 1);
ALTER TABLE queues ADD COLUMN IF NOT EXISTS partition_rate_window_ms bigint
    CHECK (partition_rate_window_ms >= 1);
ALTER TABLE queues DROP CONSTRAINT IF EXISTS queues_check1;
ALTER TABLE queues DROP CONSTRAINT IF EXISTS queues_in_force_check;
ALTER TABLE queues ADD CONSTRAINT queues_in_force_check
    CHECK (paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL
           OR partition_concurrency IS NOT NULL OR partition_rate_limit IS NOT NULL);
ALTER TABLE queues DROP CONSTRAINT IF EXISTS queues_partition_rate_check;
ALTER TABLE queues ADD CONSTRAINT queues_partition_rate_check
    CHECK ((partition_rate_limit IS NULL) = (partition_rate_window_ms IS NULL));
ALTER TABLE queue_starts ADD COLUMN IF NOT EXISTS partition_key text;
";

/// `jobs` as `postgres.sql` defines it from version 4.
const JOBS_V4_SQL: &str = "-- jobs from version 4: the waiting state, the output and
-- has_dependents columns.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'dead', 'cancelled'));
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS output text
    CHECK (output IS NULL OR output::json IS NOT NULL);
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;
";

/// The workflows' edges, the end of `postgres.sql`.
const DEPENDENCIES_SQL: &str = r#"-- job_dependencies: the edges of workflows. A row says job_id runs only
-- after depends_on succeeded; it is written with job_id's enqueue (the keys
-- it named, resolved to their jobs) and kept after both finish, so a
-- workflow's graph stays readable (`litejob workflow KEY`). The commit that
-- finishes a job moves its waiting dependents to 'queued' (all their
-- dependencies succeeded) or 'cancelled' (it ended dead or cancelled).
-- Pruning keeps a finished job while a dependent of it is unfinished.
CREATE TABLE IF NOT EXISTS job_dependencies (
    job_id     bigint  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    depends_on bigint  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (job_id, depends_on),
    CHECK (job_id <> depends_on)
);
CREATE INDEX IF NOT EXISTS job_dependencies_on ON job_dependencies (depends_on);
"#;

/// The queue controls' tables and view, as `postgres.sql` ends (a test
/// checks the two agree).
const QUEUES_SQL: &str = r#"-- queues: the controls an operator set on a queue (`litejob queue pause|resume|set`),
-- one row per queue with at least one in force; a queue without a row runs
-- freely. A claim of a capped or rate-limited queue locks its row (FOR UPDATE)
-- and counts under that lock, so the limits hold exactly across machines:
--   paused:      nothing new of the queue starts (running jobs finish; enqueues succeed)
--   concurrency: at most this many of its jobs running at once (state 'running'
--                with an unexpired lease)
--   rate_limit per rate_window_ms: at most this many starts in any window that long
--   partition_*: the same two limits for each partition of the queue apart
--                (jobs.partition_key), counted from the rows of that partition
-- Every process reads the rows again at least once per poll interval.
CREATE TABLE IF NOT EXISTS queues (
    name                     text    PRIMARY KEY CHECK (length(name) > 0),
    paused                   boolean NOT NULL DEFAULT false,
    concurrency              bigint  CHECK (concurrency >= 1),    -- NULL: no cap
    rate_limit               bigint  CHECK (rate_limit >= 1),     -- NULL: no rate limit
    rate_window_ms           bigint  CHECK (rate_window_ms >= 1),
    updated_at               bigint  NOT NULL,
    partition_concurrency    bigint  CHECK (partition_concurrency >= 1),    -- NULL: no cap per partition
    partition_rate_limit     bigint  CHECK (partition_rate_limit >= 1),     -- NULL: no rate per partition
    partition_rate_window_ms bigint  CHECK (partition_rate_window_ms >= 1),
    CONSTRAINT queues_check CHECK ((rate_limit IS NULL) = (rate_window_ms IS NULL)),
    CONSTRAINT queues_partition_rate_check
        CHECK ((partition_rate_limit IS NULL) = (partition_rate_window_ms IS NULL)),
    CONSTRAINT queues_in_force_check
        CHECK (paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL
               OR partition_concurrency IS NOT NULL OR partition_rate_limit IS NOT NULL)
);

-- queue_starts: the runs of a rate-limited queue started inside its window
-- (one row per start, the same started_at as its attempts row, and the
-- job's partition); a claim deletes the rows older than the window.
CREATE TABLE IF NOT EXISTS queue_starts (
    queue         text    NOT NULL,
    started_at    bigint  NOT NULL,
    partition_key text
);
CREATE INDEX IF NOT EXISTS queue_starts_window ON queue_starts (queue, started_at);
CREATE INDEX IF NOT EXISTS queue_starts_partition ON queue_starts (queue, partition_key, started_at)
    WHERE partition_key IS NOT NULL;

-- The controls with readable times, and the starts inside each rate window.
CREATE OR REPLACE VIEW queue_overview AS
SELECT name, paused, concurrency,
       rate_limit || '/' || rate_window_ms || 'ms' AS rate,
       (SELECT count(*) FROM queue_starts s
        WHERE s.queue = q.name AND s.started_at > litejob_now_ms() - q.rate_window_ms) AS started_in_window,
       litejob_time(updated_at) AS updated_at,
       partition_concurrency,
       partition_rate_limit || '/' || partition_rate_window_ms || 'ms' AS partition_rate
FROM queues q;
"#;

/// The schedules' table and view, as in `postgres.sql` (a test checks
/// the two agree).
const SCHEDULES_SQL: &str = r#"-- schedules: one row per schedule (periodic job), written by the runtimes
-- that declare it (the last start wins). Each slot fires an ordinary job of
-- `kind` whose key names the slot, 'schedule:<name>:<slot in UTC>' (e.g.
-- 'schedule:digest:2026-12-01T06:00:00Z'), so processes — on any machine —
-- that declare the same schedule create each slot's job once.
CREATE TABLE IF NOT EXISTS schedules (
    name               text    PRIMARY KEY CHECK (length(name) > 0),
    cron               text    NOT NULL CHECK (length(cron) > 0), -- 5 fields, 6 with seconds first, or @daily…
    tz                 text    NOT NULL DEFAULT 'UTC' CHECK (length(tz) > 0), -- IANA name; the cron reads its wall clock
    kind               text    NOT NULL CHECK (length(kind) > 0),
    payload            text    NOT NULL CHECK (payload::json IS NOT NULL),
    queue              text    NOT NULL DEFAULT 'default' CHECK (length(queue) > 0),
    priority           bigint  NOT NULL DEFAULT 0,
    max_retries        bigint  CHECK (max_retries >= 0),             -- NULL: the kind's default
    -- What a start fires for the slots no process ran for: the latest one,
    -- every one inside catch_up_window_ms, or none.
    catch_up           text    NOT NULL DEFAULT 'latest'
                       CHECK (catch_up IN ('latest', 'window', 'none')),
    catch_up_window_ms bigint  CHECK (catch_up_window_ms >= 0),
    last_slot_at       bigint,  -- the latest slot fired; NULL before the first
    next_slot_at       bigint,  -- the next slot; NULL when there is none
    created_at         bigint  NOT NULL,
    updated_at         bigint  NOT NULL, -- when the declaration last changed
    CHECK ((catch_up = 'window') = (catch_up_window_ms IS NOT NULL))
);

CREATE OR REPLACE VIEW schedule_overview AS
SELECT name, cron, tz, kind, queue, catch_up,
       litejob_time(last_slot_at) AS last_slot_at,
       litejob_time(next_slot_at) AS next_slot_at,
       litejob_time(updated_at)   AS updated_at
FROM schedules;
"#;

/// Taken for the migration's transaction, so two processes opening a new
/// database at once do not both create it (one waits, then finds it done).
const MIGRATION_LOCK: i64 = 0x6c6a_6f62_0001;

/// The version the database in the connection's search path holds (0:
/// no litejob tables), without writing anything.
pub(crate) fn read_version(client: &mut PgConn) -> Result<i64> {
    let exists: bool = client
        .query_one("SELECT to_regclass('litejob_schema') IS NOT NULL", &[])?
        .col(0)?;
    if !exists {
        return Ok(0);
    }
    let row = client.query_opt("SELECT max(version) FROM litejob_schema", &[])?;
    Ok(row
        .map(|r| r.col::<Option<i64>>(0))
        .transpose()?
        .flatten()
        .unwrap_or(0))
}

/// Refuses a database whose schema is newer than this binary, before
/// anything is written to it.
pub(crate) fn check_not_newer(client: &mut PgConn) -> Result<i64> {
    let found = read_version(client)?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

/// Brings the database to `SCHEMA_VERSION`, in one transaction under an
/// advisory lock; the version is read again under the lock.
pub(crate) fn migrate(client: &mut PgConn) -> Result<i64> {
    if check_not_newer(client)? == SCHEMA_VERSION {
        return Ok(SCHEMA_VERSION);
    }
    let mut tx = client.begin().map_err(read_err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(read_err)?;
    // The notices of `CREATE ... IF NOT EXISTS` are noise here.
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .map_err(read_err)?;
    let found = {
        let exists: bool = tx
            .query_one("SELECT to_regclass('litejob_schema') IS NOT NULL", &[])
            .map_err(read_err)?
            .col(0)?;
        if exists {
            tx.query_one("SELECT coalesce(max(version), 0) FROM litejob_schema", &[])
                .map_err(read_err)?
                .col::<i64>(0)?
        } else {
            0
        }
    };
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(SCHEMA_VERSION);
    }
    if found == 0 {
        tx.batch_execute(SCHEMA_SQL).map_err(read_err)?;
    } else {
        // A version below 1 was written by no litejob (the table's CHECK
        // forbids it): refused rather than a step guessed for it.
        let steps = usize::try_from(found - 1)
            .ok()
            .and_then(|from| MIGRATIONS.get(from..))
            .ok_or_else(|| {
                Error::Internal(format!(
                    "bad schema version {found} in litejob_schema: no litejob writes it"
                ))
            })?;
        for sql in steps.iter().flat_map(|s| s.iter()) {
            tx.batch_execute(sql).map_err(read_err)?;
        }
    }
    tx.execute("DELETE FROM litejob_schema", &[])
        .map_err(read_err)?;
    tx.execute(
        "INSERT INTO litejob_schema (version) VALUES ($1)",
        &[&SCHEMA_VERSION],
    )
    .map_err(read_err)?;
    tx.commit().map_err(read_err)?;
    Ok(SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_step_has_a_version_and_reads_as_postgres_sql() {
        assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION - 1);
        let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        for step in MIGRATIONS {
            let last = step.last().unwrap();
            if *last == ATTEMPTS_V7_SQL {
                // Only a CHECK changes, and version 8 changes it again.
                continue;
            }
            assert!(
                SCHEMA_SQL.contains(last),
                "a step differs from postgres.sql:\n{last}"
            );
        }
        // Version 8's CHECK and column read as postgres.sql's.
        let table = squash(SCHEMA_SQL);
        let check = TIMEOUTS_V8_SQL
            .split("ADD CONSTRAINT attempts_outcome_check")
            .nth(1)
            .unwrap()
            .trim()
            .trim_end_matches(';');
        assert!(
            table.contains(&format!(
                "CONSTRAINT attempts_outcome_check {}",
                squash(check)
            )),
            "the outcome's CHECK differs from postgres.sql:\n{check}"
        );
        assert!(
            table.contains("timeout_ms bigint CHECK (timeout_ms IS NULL OR timeout_ms > 0)"),
            "jobs.timeout_ms differs from postgres.sql"
        );
        assert!(SCHEMA_SQL.ends_with(STEPS_SQL));
        assert!(SCHEMA_SQL.contains(DEPENDENCIES_SQL));
    }
}
