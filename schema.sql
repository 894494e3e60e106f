-- litejob schema, version 8 (PRAGMA user_version = 8).
--
-- This file is the whole current schema. The litejob binary embeds it and runs
-- it on a new file; an older file is migrated step by step (src/schema.rs).
-- It stays within what SQLite 3.40 (Debian 12's sqlite3 shell) understands.
--
-- Times: every *_at column is INTEGER milliseconds since the Unix epoch (UTC),
-- so times sort and compare in plain SQL. The views at the end show them as
-- 'YYYY-MM-DD HH:MM:SS.SSS' (UTC). To read a time yourself:
--     SELECT strftime('%Y-%m-%d %H:%M:%f', created_at / 1000.0, 'unixepoch') FROM jobs;
--
-- Open the file in the shell with:   sqlite3 litejob.db
-- and ask, for example, "ten events or one event ten times?":
--     SELECT idempotency_key, deliveries, state, attempts FROM jobs WHERE idempotency_key = 'evt_42';
--     SELECT * FROM attempts WHERE key = 'evt_42' ORDER BY id;

-- jobs: one row is one unit of work, identified by its producer's
-- idempotency key. A second enqueue with the same key creates no row; it
-- increments `deliveries` instead.
CREATE TABLE IF NOT EXISTS jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused
    queue            TEXT    NOT NULL DEFAULT 'default' CHECK (length(queue) > 0),
    kind             TEXT    NOT NULL CHECK (length(kind) > 0),
    idempotency_key  TEXT    NOT NULL UNIQUE CHECK (length(idempotency_key) > 0),
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    -- waiting: its dependencies (job_dependencies) have not all succeeded yet
    -- queued: waiting (includes scheduled and waiting-for-retry, see run_at)
    -- running: claimed by a worker that holds the lease below
    -- succeeded / dead / cancelled: finished, see finished_at
    state            TEXT    NOT NULL DEFAULT 'queued'
                     -- (OR chains, not IN lists: SQLite builds a temporary table for an
                     -- IN list each time a CHECK runs, on every insert and update.)
                     CHECK (state = 'queued' OR state = 'running' OR state = 'succeeded'
                            OR state = 'dead' OR state = 'cancelled' OR state = 'waiting'),
    priority         INTEGER NOT NULL DEFAULT 0,        -- smaller runs first
    run_at           INTEGER NOT NULL,                  -- not claimed before this time
    -- runs charged against max_attempts (failed, panicked, and the run in
    -- progress). A run cut short by a crash is not charged: it moves to
    -- `abandoned` instead.
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 2 CHECK (max_attempts >= 1), -- max_retries + 1
    abandoned        INTEGER NOT NULL DEFAULT 0 CHECK (abandoned >= 0),    -- runs cut short by a crash
    deliveries       INTEGER NOT NULL DEFAULT 1 CHECK (deliveries >= 1),   -- enqueues seen for this key
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    -- Lease: who holds a running job and until when. `lease_owner` names the
    -- process (pid and a random tag); `current_attempt` is the attempts.id of
    -- the run in progress (NULL while claimed but not yet started). Completion
    -- is fenced on current_attempt: a run that lost its lease cannot complete.
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    current_attempt  INTEGER,
    -- What the handler finished with (JSON), committed with its success;
    -- NULL when it returned no value.
    output           TEXT    CHECK (output IS NULL OR json_valid(output)),
    -- The partition of its queue the queue's partition limits count it in
    -- (e.g. 'shop:42'); NULL: none.
    partition_key    TEXT    CHECK (partition_key IS NULL OR length(partition_key) BETWEEN 1 AND 200),
    -- How long one run may take (NewJob::with_timeout, `enqueue --timeout`),
    -- in ms; NULL: the runtime's timeout for its kind, if any.
    timeout_ms       INTEGER CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    CHECK ((state = 'running') = (lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL)),
    CHECK (state = 'running' OR current_attempt IS NULL),
    CHECK ((state = 'succeeded' OR state = 'dead' OR state = 'cancelled') = (finished_at IS NOT NULL))
);

-- Claiming reads only this index: the queued set of one kind in claim order
-- (a worker asks once per kind it handles). It stays small and O(log n)
-- however many jobs have finished or wait for kinds nobody handles.
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (kind, priority, run_at, id) WHERE state = 'queued';
-- Expired leases are found without scanning finished jobs.
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
-- A partitioned claim counts each partition's running jobs here; a job
-- without a partition never enters it.
CREATE INDEX IF NOT EXISTS jobs_partition_running ON jobs (queue, partition_key)
    WHERE state = 'running' AND partition_key IS NOT NULL;
-- Pruning walks finished jobs oldest first.
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- processed_jobs: the ledger. One row is a key whose work committed. A job's
-- transaction inserts its key here first; a conflict means the work was
-- already done. Kept when jobs are pruned (unless asked), so a re-enqueue of a
-- pruned key is still a duplicate. job_id has no foreign key on purpose: the
-- ledger outlives the job rows.
CREATE TABLE IF NOT EXISTS processed_jobs (
    key          TEXT    PRIMARY KEY CHECK (length(key) > 0),
    completed_at INTEGER NOT NULL,
    job_id       INTEGER
);
CREATE INDEX IF NOT EXISTS processed_jobs_completed ON processed_jobs (completed_at);

-- outbox: one row is a side effect (mail, HTTP call) to perform after the job
-- that wrote it committed. A dispatcher runs it outside any transaction,
-- at least once while attempts remain.
CREATE TABLE IF NOT EXISTS outbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    key              TEXT    NOT NULL UNIQUE CHECK (length(key) > 0), -- stable; pass it to a provider that deduplicates
    kind             TEXT    NOT NULL CHECK (length(kind) > 0),
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    -- pending: waiting (see next_attempt_at); sending: an effect is running
    -- under the lease below; sent / dead: finished
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state = 'pending' OR state = 'sending' OR state = 'sent' OR state = 'dead'),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0), -- counted before the effect is called
    max_attempts     INTEGER NOT NULL DEFAULT 2 CHECK (max_attempts >= 1),
    job_id           INTEGER REFERENCES jobs (id) ON DELETE SET NULL, -- the job that wrote it
    next_attempt_at  INTEGER NOT NULL,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    sent_at          INTEGER,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    current_attempt  INTEGER,
    CHECK ((state = 'sending') = (lease_expires_at IS NOT NULL AND lease_owner IS NOT NULL)),
    CHECK ((state = 'sent') = (sent_at IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS outbox_lease ON outbox (lease_expires_at) WHERE state = 'sending';
CREATE INDEX IF NOT EXISTS outbox_job ON outbox (job_id);
CREATE INDEX IF NOT EXISTS outbox_sent ON outbox (sent_at) WHERE state = 'sent';

-- attempts: one row is one run of a job (job_id) or of an effect
-- (outbox_id). Written when the run starts (outcome 'running'), so a run cut
-- short by a crash is still seen: it becomes 'abandoned'. A running job
-- an operator cancels ends its run 'cancelled', in the cancel's commit.
CREATE TABLE IF NOT EXISTS attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER REFERENCES jobs (id) ON DELETE CASCADE,
    outbox_id   INTEGER REFERENCES outbox (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL CHECK (attempt >= 1), -- charged attempt number, N of max_attempts
    key         TEXT    NOT NULL,                      -- the job's idempotency key or the outbox row's key
    worker      TEXT    NOT NULL,                      -- pid and thread name
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT    NOT NULL DEFAULT 'running'
                CHECK (outcome = 'running' OR outcome = 'succeeded' OR outcome = 'failed'
                       OR outcome = 'panicked' OR outcome = 'duplicate' OR outcome = 'abandoned'
                       OR outcome = 'released' OR outcome = 'snoozed' OR outcome = 'cancelled'),
    error       TEXT,
    CHECK ((job_id IS NULL) <> (outbox_id IS NULL)),
    CHECK ((outcome = 'running') = (finished_at IS NULL))
);
CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS attempts_outbox ON attempts (outbox_id) WHERE outbox_id IS NOT NULL;

-- schedules: one row per schedule (periodic job), written by the runtimes
-- that declare it (the last start wins). Each slot fires an ordinary job of
-- `kind` whose key names the slot, 'schedule:<name>:<slot in UTC>' (e.g.
-- 'schedule:digest:2026-12-01T06:00:00Z'), so processes that declare the
-- same schedule create each slot's job once: see it with
--     SELECT * FROM job_overview WHERE idempotency_key LIKE 'schedule:digest:%';
CREATE TABLE IF NOT EXISTS schedules (
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

-- Views for people: the same rows with readable times (UTC).

CREATE VIEW IF NOT EXISTS job_overview AS
SELECT id, queue, kind, idempotency_key, state, priority,
       attempts || '/' || max_attempts AS attempts,
       abandoned, deliveries,
       strftime('%Y-%m-%d %H:%M:%f', run_at / 1000.0, 'unixepoch')      AS run_at,
       strftime('%Y-%m-%d %H:%M:%f', created_at / 1000.0, 'unixepoch')  AS created_at,
       strftime('%Y-%m-%d %H:%M:%f', finished_at / 1000.0, 'unixepoch') AS finished_at,
       lease_owner,
       strftime('%Y-%m-%d %H:%M:%f', lease_expires_at / 1000.0, 'unixepoch') AS lease_expires_at,
       last_error
FROM jobs;

CREATE VIEW IF NOT EXISTS attempt_history AS
SELECT a.id, coalesce('job ' || a.job_id, 'outbox ' || a.outbox_id) AS run_of,
       a.key, a.attempt, a.worker, a.outcome,
       strftime('%Y-%m-%d %H:%M:%f', a.started_at / 1000.0, 'unixepoch')  AS started_at,
       strftime('%Y-%m-%d %H:%M:%f', a.finished_at / 1000.0, 'unixepoch') AS finished_at,
       a.finished_at - a.started_at AS duration_ms,
       a.error
FROM attempts a;

CREATE VIEW IF NOT EXISTS recent_failures AS
SELECT a.id AS attempt_id, coalesce('job ' || a.job_id, 'outbox ' || a.outbox_id) AS run_of,
       a.key, a.attempt, a.outcome, a.worker,
       strftime('%Y-%m-%d %H:%M:%f', a.started_at / 1000.0, 'unixepoch') AS started_at,
       a.error
FROM attempts a
WHERE a.outcome IN ('failed', 'panicked', 'abandoned', 'cancelled')
ORDER BY a.id DESC
LIMIT 100;

CREATE VIEW IF NOT EXISTS outbox_overview AS
SELECT id, key, kind, state, attempts || '/' || max_attempts AS attempts, job_id,
       strftime('%Y-%m-%d %H:%M:%f', next_attempt_at / 1000.0, 'unixepoch') AS next_attempt_at,
       strftime('%Y-%m-%d %H:%M:%f', created_at / 1000.0, 'unixepoch')      AS created_at,
       strftime('%Y-%m-%d %H:%M:%f', sent_at / 1000.0, 'unixepoch')         AS sent_at,
       last_error
FROM outbox;

-- "Ten events or one event ten times?" per key: deliveries, runs and effects.
CREATE VIEW IF NOT EXISTS key_summary AS
SELECT j.idempotency_key AS key, j.id AS job_id, j.kind, j.state, j.deliveries,
       (SELECT count(*) FROM attempts a WHERE a.job_id = j.id) AS runs,
       (SELECT count(*) FROM processed_jobs p WHERE p.key = j.idempotency_key) AS committed,
       (SELECT count(*) FROM outbox o WHERE o.job_id = j.id) AS outbox_rows,
       (SELECT count(*) FROM outbox o WHERE o.job_id = j.id AND o.state = 'sent') AS outbox_sent
FROM jobs j;

CREATE VIEW IF NOT EXISTS schedule_overview AS
SELECT name, cron, tz, kind, queue, catch_up,
       strftime('%Y-%m-%d %H:%M:%S', last_slot_at / 1000.0, 'unixepoch') AS last_slot_at,
       strftime('%Y-%m-%d %H:%M:%S', next_slot_at / 1000.0, 'unixepoch') AS next_slot_at,
       strftime('%Y-%m-%d %H:%M:%f', updated_at / 1000.0, 'unixepoch')   AS updated_at
FROM schedules;

-- queues: the controls an operator set on a queue (`litejob queue pause|resume|set`),
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

-- job_dependencies: the edges of workflows. A row says job_id runs only
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

-- job_steps: the durable steps of jobs (`ctx.step(name, ..)` in a prepare
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
