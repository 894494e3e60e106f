//! The schema: embeds `schema.sql`, reads and checks `PRAGMA user_version`,
//! and migrates an older file. Writes every table's definition, no rows.

use rusqlite::Connection;

use crate::error::{Error, Result};

/// The whole current schema, as shipped in `schema.sql` at the repository root.
pub(crate) const SCHEMA_SQL: &str = include_str!("../../schema.sql");

pub(crate) use crate::core::SCHEMA_VERSION;

/// Steps from an older version: `MIGRATIONS[i]` takes version `i + 1` to
/// `i + 2`. A new file (version 0) gets `SCHEMA_SQL` in one go instead. When
/// the schema changes, edit `schema.sql`, add the step here and bump
/// `SCHEMA_VERSION`; the test `migrations_reach_schema_sql` checks both agree.
const MIGRATIONS: &[&str] = &[
    // 1 → 2: schedules (periodic jobs). The same text as in `schema.sql`,
    // so a migrated file's schema reads exactly as a new file's.
    r#"CREATE TABLE IF NOT EXISTS schedules (
    name               TEXT    PRIMARY KEY CHECK (length(name) > 0),
    cron               TEXT    NOT NULL CHECK (length(cron) > 0), -- 5 fields, 6 with seconds first, or @daily…
    tz                 TEXT    NOT NULL DEFAULT 'UTC' CHECK (length(tz) > 0), -- IANA name; the cron reads its wall clock
    kind               TEXT    NOT NULL CHECK (length(kind) > 0),
    payload            TEXT    NOT NULL CHECK (json_valid(payload)),
    queue              TEXT    NOT NULL DEFAULT 'default' CHECK (length(queue) > 0),
    priority           INTEGER NOT NULL DEFAULT 0,
    max_retries        INTEGER CHECK (max_retries >= 0),             -- NULL: the kind's default
    -- What a start fires for the slots no process ran for: the latest one,
    -- every one inside catch_up_window_ms, or none.
    catch_up           TEXT    NOT NULL DEFAULT 'latest'
                       CHECK (catch_up = 'latest' OR catch_up = 'window' OR catch_up = 'none'),
    catch_up_window_ms INTEGER CHECK (catch_up_window_ms >= 0),
    last_slot_at       INTEGER,  -- the latest slot fired; NULL before the first
    next_slot_at       INTEGER,  -- the next slot; NULL when there is none
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL, -- when the declaration last changed
    CHECK ((catch_up = 'window') = (catch_up_window_ms IS NOT NULL))
);

CREATE VIEW IF NOT EXISTS schedule_overview AS
SELECT name, cron, tz, kind, queue, catch_up,
       strftime('%Y-%m-%d %H:%M:%S', last_slot_at / 1000.0, 'unixepoch') AS last_slot_at,
       strftime('%Y-%m-%d %H:%M:%S', next_slot_at / 1000.0, 'unixepoch') AS next_slot_at,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch')   AS updated_at
FROM schedules;
"#,
    // 2 → 3: queue controls.
    QUEUES_SQL,
    // 3 → 4: workflows. `jobs` gains the `waiting` state (a CHECK SQLite
    // cannot alter) and `output`: it is rebuilt by `rebuild_jobs` first,
    // then this creates the edges' table, as `schema.sql` ends.
    WORKFLOW_SQL,
    // 4 → 5: partitions. `jobs` gains `partition_key` (rebuilt by
    // `rebuild_jobs` from a version-4 file), `queues` its partition limits
    // (a CHECK changes) and `queue_starts` the partition of each start:
    // both rebuilt by `rebuild_controls` first; `schema.sql` then creates
    // the new indexes.
    "-- partitions: see rebuild_controls",
    // 5 → 6: durable steps, as `schema.sql` ends.
    STEPS_SQL,
    // 6 → 7: `attempts.outcome` may be 'snoozed' (a CHECK SQLite cannot
    // alter): the table is rebuilt by `rebuild_table` before this.
    "-- snoozed: see rebuild_table",
    // 7 → 8: timeouts and cancelled runs: `jobs` gains `timeout_ms` and
    // `attempts.outcome` may be 'cancelled' (a CHECK): both tables are
    // rebuilt by `rebuild_table` before this, ids and counters kept.
    "-- timeouts, cancelled runs: see rebuild_table",
];

/// The durable steps' table, the end of `schema.sql` (a test checks the
/// two agree).
const STEPS_SQL: &str = r#"-- job_steps: the durable steps of jobs (`ctx.step(name, ..)` in a prepare
-- step), one row per job and step name. A step's row commits as its call
-- returns, before `step` hands the value on; a later run of the job (a
-- retry, or a rerun after a crash) gets `output` back and does not call the
-- step again. `attempt` is the run that called it, `reused_in` the later
-- runs that got it back (a JSON array of attempt numbers). Deleted with
-- their job. "Did we charge twice?":
--     SELECT name, attempt, reused_in, output FROM job_steps WHERE job_id = 42;
CREATE TABLE IF NOT EXISTS job_steps (
    job_id      INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 200),
    attempt     INTEGER NOT NULL CHECK (attempt >= 1),  -- the run that called it
    output      TEXT    NOT NULL CHECK (json_valid(output)),
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    reused_in   TEXT    CHECK (reused_in IS NULL OR json_valid(reused_in)),
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;
"#;

/// The workflows' table, the end of `schema.sql` (a test checks the two
/// agree).
const WORKFLOW_SQL: &str = r#"-- job_dependencies: the edges of workflows. A row says job_id runs only
-- after depends_on succeeded; it is written with job_id's enqueue (the keys
-- it named, resolved to their jobs) and kept after both finish, so a
-- workflow's graph stays readable (`litejob workflow KEY`). The commit that
-- finishes a job moves its waiting dependents to 'queued' (all their
-- dependencies succeeded) or 'cancelled' (it ended dead or cancelled).
-- Pruning keeps a finished job while a dependent of it is unfinished.
CREATE TABLE IF NOT EXISTS job_dependencies (
    job_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    depends_on INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (job_id, depends_on),
    CHECK (job_id <> depends_on)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_dependencies_on ON job_dependencies (depends_on);
"#;

/// The views of `schema.sql`: dropped while `jobs` is rebuilt (SQLite
/// refuses to rename a table while a view names one that is missing), and
/// created again from `schema.sql`.
pub(crate) const VIEWS: [&str; 7] = [
    "job_overview",
    "attempt_history",
    "recent_failures",
    "outbox_overview",
    "key_summary",
    "schedule_overview",
    "queue_overview",
];

/// The columns of `jobs` before version 4, copied into the new table.
const JOBS_V3_COLUMNS: &str = "id, queue, kind, idempotency_key, payload, state, priority,      run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at,      finished_at, lease_owner, lease_expires_at, current_attempt";
/// The columns of `jobs` in version 4.
const JOBS_V4_COLUMNS: &str = "id, queue, kind, idempotency_key, payload, state, priority,      run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at,      finished_at, lease_owner, lease_expires_at, current_attempt, output";

/// The columns of `jobs` from version 5 to 7.
const JOBS_V7_COLUMNS: &str = "id, queue, kind, idempotency_key, payload, state, priority,      run_at, attempts, max_attempts, abandoned, deliveries, last_error, created_at,      finished_at, lease_owner, lease_expires_at, current_attempt, output, partition_key";

/// The columns of `attempts`, copied into the table of versions 7 and 8.
const ATTEMPTS_COLUMNS: &str =
    "id, job_id, outbox_id, attempt, key, worker, started_at, finished_at, outcome, error";

/// The text of `CREATE TABLE IF NOT EXISTS <table> (…);` in `schema.sql`.
fn create_text(table: &str) -> Result<&'static str> {
    // (Searched for without its verb, which would make the SQL check take
    // the fragment for a statement.)
    let start = SCHEMA_SQL
        .find(&format!("TABLE IF NOT EXISTS {table} ("))
        .and_then(|at| at.checked_sub(7)) // "CREATE "
        .ok_or_else(|| Error::Internal(format!("schema.sql defines no {table} table")))?;
    let len = SCHEMA_SQL[start..]
        .find("\n);")
        .ok_or_else(|| Error::Internal(format!("schema.sql's {table} table has no end")))?;
    Ok(&SCHEMA_SQL[start..start + len + 3])
}

/// Rebuilds the queue controls' tables of a version-3 or -4 file as
/// `schema.sql` defines them now, their rows copied: `queues` gains the
/// partition limits (its CHECK changes) and `queue_starts` the partition
/// of a start. Their indexes and the views come again from `schema.sql`
/// at the migration's end.
fn rebuild_controls(tx: &Connection) -> Result<()> {
    let drop_views: String = VIEWS
        .iter()
        .map(|v| format!("DROP VIEW IF EXISTS {v};\n"))
        .collect();
    let (queues, starts) = (create_text("queues")?, create_text("queue_starts")?);
    tx.execute_batch(&format!(
        "{drop_views}\
         ALTER TABLE queues RENAME TO queues_v4;\n\
         ALTER TABLE queue_starts RENAME TO queue_starts_v4;\n\
         {queues}\n{starts}\n\
         INSERT INTO queues (name, paused, concurrency, rate_limit, rate_window_ms, updated_at) \
           SELECT name, paused, concurrency, rate_limit, rate_window_ms, updated_at FROM queues_v4;\n\
         INSERT INTO queue_starts (queue, started_at) SELECT queue, started_at FROM queue_starts_v4;\n\
         DROP TABLE queues_v4;\n\
         DROP TABLE queue_starts_v4;\n"
    ))?;
    Ok(())
}

/// Rebuilds `jobs` as `schema.sql` defines it now: see [`rebuild_table`].
fn rebuild_jobs(tx: &Connection, columns: &str) -> Result<()> {
    rebuild_table(tx, "jobs", columns)
}

/// Rebuilds `table` (`jobs` or `attempts`, whose ids are AUTOINCREMENT) as
/// `schema.sql` defines it now (SQLite's way to change a CHECK): the old
/// table renamed aside, the new one created from `schema.sql`'s own text
/// (so a migrated file's schema reads as a new file's), every row copied,
/// the old one dropped; the migration then creates its indexes and the
/// views again. The AUTOINCREMENT counter is carried over, so an id is
/// never reused. Runs inside the migration's transaction, with foreign
/// keys off (dropping the old `jobs` would otherwise delete every attempt
/// through their cascade) and the legacy rename (which leaves the other
/// tables' references to the table as they are, instead of pointing them
/// at the renamed one).
fn rebuild_table(tx: &Connection, table: &str, columns: &str) -> Result<()> {
    let create = create_text(table)?;
    let old = format!("{table}_old");
    let old_seq = format!("'{old}'");
    let drop_views: String = VIEWS
        .iter()
        .map(|v| format!("DROP VIEW IF EXISTS {v};\n"))
        .collect();
    tx.pragma_update(None, "legacy_alter_table", "ON")?;
    let rebuilt = tx.execute_batch(&format!(
        "{drop_views}\
         ALTER TABLE {table} RENAME TO {old};\n\
         {create}\n\
         INSERT INTO {table} ({columns}) SELECT {columns} FROM {old};\n\
         CREATE TEMP TABLE litejob_seq AS SELECT seq FROM sqlite_sequence WHERE name = {old_seq};\n\
         DROP TABLE {old};\n\
         DELETE FROM sqlite_sequence WHERE name = '{table}';\n\
         INSERT INTO sqlite_sequence (name, seq) \
           SELECT '{table}', max(coalesce((SELECT seq FROM temp.litejob_seq), 0), \
                              coalesce((SELECT max(id) FROM {table}), 0));\n\
         DROP TABLE temp.litejob_seq;\n"
    ));
    tx.pragma_update(None, "legacy_alter_table", "OFF")?;
    rebuilt?;
    let broken: i64 = tx.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
        r.get(0)
    })?;
    if broken > 0 {
        return Err(Error::Internal(format!(
            "migrating {table} left {broken} rows whose reference is broken; \
             nothing was changed"
        )));
    }
    Ok(())
}

/// The queue controls' tables and view, the end of `schema.sql` (a test
/// checks the two agree).
const QUEUES_SQL: &str = r#"-- queues: the controls an operator set on a queue (`litejob queue pause|resume|set`),
-- one row per queue with at least one in force; a queue without a row runs
-- freely. Every claim of every process on the file reads them under the
-- write lock, so they hold exactly across processes:
--   paused:      nothing new of the queue starts (running jobs finish; enqueues succeed)
--   concurrency: at most this many of its jobs running at once (state 'running'
--                with an unexpired lease, claimed-ahead jobs included)
--   rate_limit per rate_window_ms: at most this many starts in any window that long
--   partition_*: the same two limits for each partition of the queue apart
--                (jobs.partition_key), counted from the rows of that partition
CREATE TABLE IF NOT EXISTS queues (
    name                     TEXT    PRIMARY KEY CHECK (length(name) > 0),
    paused                   INTEGER NOT NULL DEFAULT 0 CHECK (paused = 0 OR paused = 1),
    concurrency              INTEGER CHECK (concurrency >= 1),    -- NULL: no cap
    rate_limit               INTEGER CHECK (rate_limit >= 1),     -- NULL: no rate limit
    rate_window_ms           INTEGER CHECK (rate_window_ms >= 1),
    partition_concurrency    INTEGER CHECK (partition_concurrency >= 1),    -- NULL: no cap per partition
    partition_rate_limit     INTEGER CHECK (partition_rate_limit >= 1),     -- NULL: no rate per partition
    partition_rate_window_ms INTEGER CHECK (partition_rate_window_ms >= 1),
    updated_at               INTEGER NOT NULL,
    CHECK ((rate_limit IS NULL) = (rate_window_ms IS NULL)),
    CHECK ((partition_rate_limit IS NULL) = (partition_rate_window_ms IS NULL)),
    CHECK (paused = 1 OR concurrency IS NOT NULL OR rate_limit IS NOT NULL
           OR partition_concurrency IS NOT NULL OR partition_rate_limit IS NOT NULL)
);

-- queue_starts: the runs of a rate-limited queue started inside its window
-- (one row per start, the same started_at as its attempts row, and the
-- job's partition); a claim deletes the rows older than the window.
CREATE TABLE IF NOT EXISTS queue_starts (
    queue         TEXT    NOT NULL,
    started_at    INTEGER NOT NULL,
    partition_key TEXT
);
CREATE INDEX IF NOT EXISTS queue_starts_window ON queue_starts (queue, started_at);
CREATE INDEX IF NOT EXISTS queue_starts_partition ON queue_starts (queue, partition_key, started_at)
    WHERE partition_key IS NOT NULL;

-- The controls with readable times, and the starts inside each rate window.
CREATE VIEW IF NOT EXISTS queue_overview AS
SELECT name, paused, concurrency,
       rate_limit || '/' || rate_window_ms || 'ms' AS rate,
       (SELECT count(*) FROM queue_starts s
        WHERE s.queue = q.name AND s.started_at > CAST(strftime('%s', 'now') AS INTEGER) * 1000 - q.rate_window_ms) AS started_in_window,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch') AS updated_at,
       partition_concurrency,
       partition_rate_limit || '/' || partition_rate_window_ms || 'ms' AS partition_rate
FROM queues q;
"#;

/// Reads `PRAGMA user_version` without writing anything.
pub(crate) fn read_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Refuses a file whose schema is newer than this binary, before anything
/// is written to it.
pub(crate) fn check_not_newer(conn: &Connection) -> Result<i64> {
    let found = read_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < 0 {
        return Err(Error::NotADatabase(format!(
            "user_version {found} is not a litejob schema version"
        )));
    }
    Ok(found)
}

/// Brings the file to `SCHEMA_VERSION`. Runs in one `BEGIN IMMEDIATE`
/// transaction so two processes opening a new file at once cannot both
/// create it; the version is read again under the lock.
pub(crate) fn migrate(conn: &mut Connection) -> Result<i64> {
    if read_version(conn)? == SCHEMA_VERSION {
        return Ok(SCHEMA_VERSION);
    }
    // Foreign keys cannot be switched inside a transaction: off for the
    // migration (see `rebuild_jobs`), on again whatever it did.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let migrated = migrate_in_tx(conn);
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrated
}

fn migrate_in_tx(conn: &mut Connection) -> Result<i64> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let found = check_not_newer(&tx)?;
    if found == 0 {
        tx.execute_batch(SCHEMA_SQL)?;
    } else {
        for (i, step) in MIGRATIONS.iter().enumerate().skip((found - 1) as usize) {
            let to = i as i64 + 2;
            if to == 4 {
                rebuild_jobs(&tx, JOBS_V3_COLUMNS)?;
            }
            if to == 5 {
                // A file that was version 3 got today's jobs a step ago.
                if found == 4 {
                    rebuild_jobs(&tx, JOBS_V4_COLUMNS)?;
                }
                rebuild_controls(&tx)?;
            }
            if to == 7 {
                rebuild_table(&tx, "attempts", ATTEMPTS_COLUMNS)?;
            }
            if to == 8 {
                rebuild_jobs(&tx, JOBS_V7_COLUMNS)?;
                rebuild_table(&tx, "attempts", ATTEMPTS_COLUMNS)?;
            }
            tx.execute_batch(step)?;
        }
        // The rebuilt tables' indexes and the views, once every table has
        // its current columns (an index of one names columns another
        // step adds).
        tx.execute_batch(SCHEMA_SQL)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_reach_schema_sql() {
        assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION - 1);
        let mut c = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut c).unwrap(), SCHEMA_VERSION);
        assert_eq!(read_version(&c).unwrap(), SCHEMA_VERSION);
        // Migrating twice is a no-op.
        assert_eq!(migrate(&mut c).unwrap(), SCHEMA_VERSION);
        // The last step reads as `schema.sql` ends, so a migrated file's
        // schema is a new file's.
        assert!(
            SCHEMA_SQL.ends_with(STEPS_SQL),
            "the steps' step differs from schema.sql"
        );
        assert!(
            SCHEMA_SQL.contains(WORKFLOW_SQL),
            "the workflows' step differs from schema.sql"
        );
        assert!(
            SCHEMA_SQL.contains(QUEUES_SQL),
            "the queue controls' step differs from schema.sql"
        );
    }
}
