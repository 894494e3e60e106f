//! The producer side on a file: inserts a validated job, or counts a
//! duplicate delivery. Writes `jobs` (insert, `deliveries`).

use rusqlite::{Connection, OptionalExtension};

use crate::core::job::Enqueued;
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::error::{Error, Result};
use crate::sqlite::ledger;

/// Inserts a validated job, or counts a duplicate delivery. Runs inside the
/// caller's transaction: the writer's, or the application's own.
pub(crate) fn insert(conn: &Connection, job: &ValidJob, now: Millis) -> Result<Enqueued> {
    // The common case, a new key, in one statement: insert unless the key is
    // already a job or (its job row pruned) in the ledger. One statement
    // decides under the write lock, so concurrent producers (threads or
    // processes) never see a constraint error. A key that is there inserts
    // no row, so it spends no AUTOINCREMENT id (an upsert that turns into an
    // update, or an INSERT … DO NOTHING that conflicts, would).
    if !job.depends_on.is_empty() {
        return crate::sqlite::workflow::insert(conn, job, now);
    }
    if !conn.is_autocommit() {
        return insert_in_tx(conn, job, now);
    }
    const INSERT: &str = "INSERT INTO jobs (queue, kind, idempotency_key, payload, priority, run_at, max_attempts, created_at, partition_key, timeout_ms) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 \
         WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE idempotency_key = ?3) \
         AND NOT EXISTS (SELECT 1 FROM processed_jobs WHERE key = ?3) \
         RETURNING id";
    {
        let mut st = conn.prepare_cached(INSERT)?;
        let mut rows = st
            .query(job_params(job, &now).as_slice())
            .map_err(constraint)?;
        if let Some(r) = rows.next().map_err(constraint)? {
            return Ok(Enqueued::New(r.get(0)?));
        }
    }
    // A duplicate: count the delivery on its job row, if it still has one.
    const BUMP: &str =
        "UPDATE jobs SET deliveries = deliveries + 1 WHERE idempotency_key = ?1 RETURNING id";
    {
        let mut st = conn.prepare_cached(BUMP)?;
        let mut rows = st.query([&job.key])?;
        if let Some(r) = rows.next()? {
            return Ok(Enqueued::Duplicate(r.get(0)?));
        }
    }
    ledger_duplicate(conn, &job.key)
}

/// A key whose work already committed is a duplicate even when its job row
/// was pruned: the answer is the job id the ledger recorded.
pub(crate) fn ledger_duplicate(conn: &Connection, key: &str) -> Result<Enqueued> {
    let ledger_job = ledger::lookup(conn, key)?.and_then(|(_, j)| j);
    Ok(Enqueued::Duplicate(ledger_job.unwrap_or(0)))
}

/// The `?1`…`?10` of the INSERTs, in their column order.
fn job_params<'a>(job: &'a ValidJob, now: &'a Millis) -> [&'a dyn rusqlite::ToSql; 10] {
    [
        &job.queue,
        &job.kind,
        &job.key,
        &job.payload,
        &job.priority,
        &job.run_at,
        &job.max_attempts,
        now,
        &job.partition,
        &job.timeout_ms,
    ]
}

/// [`insert`] inside an open transaction (the writer's, or an application's
/// own): a look at the ledger, then a plain insert, which the key index
/// refuses for a key already in `jobs`. The transaction holds its snapshot
/// from the look to the insert (in WAL mode a write from a
/// stale snapshot fails with SQLITE_BUSY_SNAPSHOT, never a constraint
/// error), so the two statements decide as one. Cheaper than the single
/// `INSERT … SELECT … WHERE NOT EXISTS … RETURNING`: that one reads `jobs`
/// while writing it, so SQLite materializes the SELECT in a temporary table,
/// and RETURNING fills another; this path opens neither.
fn insert_in_tx(conn: &Connection, job: &ValidJob, now: Millis) -> Result<Enqueued> {
    let mut st = Statements::new(conn)?;
    st.insert(conn, job, now)
}

/// [`insert`] for every job of a batch, in order, inside the writer's
/// transaction. The statements are taken from the cache once for the
/// batch, not twice per job: rusqlite's cache hashes the SQL text on each
/// lookup and again to put the statement back.
///
/// New keys, the common case, go in by multi-row INSERTs of
/// [`ROWS_PER_INSERT`] rows ([`insert_new`]): one statement for a hundred
/// rows opens the table's and indexes' cursors and updates the
/// AUTOINCREMENT counter once, not a hundred times. A chunk that holds a
/// key seen before (in `jobs` or in the ledger) goes in one job at a time
/// by the one-row path, which counts the duplicate; so does a batch with a
/// key twice in it.
pub(crate) fn insert_many(
    conn: &Connection,
    jobs: &[ValidJob],
    now: Millis,
) -> Result<Vec<Enqueued>> {
    if jobs.iter().any(|j| !j.depends_on.is_empty()) {
        return crate::sqlite::workflow::insert_batch(conn, jobs, now);
    }
    let mut st = Statements::new(conn)?;
    let mut out = Vec::with_capacity(jobs.len());
    let mut keys = std::collections::HashSet::with_capacity(jobs.len());
    let distinct = jobs.iter().all(|j| keys.insert(j.key.as_str()));
    let mut rest = jobs;
    // A key twice in the batch: all one by one, so that the second counts
    // as a delivery of the first.
    if distinct {
        while let Some(size) =
            (0..ROWS_PER_INSERT.len()).find(|&i| ROWS_PER_INSERT[i] <= rest.len())
        {
            let (chunk, after) = rest.split_at(ROWS_PER_INSERT[size]);
            match insert_new(conn, &mut st, size, chunk, now)? {
                Some(ids) => out.extend(ids.into_iter().map(Enqueued::New)),
                None => {
                    for j in chunk {
                        out.push(st.insert(conn, j, now)?);
                    }
                }
            }
            rest = after;
        }
    }
    for j in rest {
        out.push(st.insert(conn, j, now)?);
    }
    Ok(out)
}

/// One row's values in a multi-row INSERT: one placeholder per column of
/// [`job_params`].
pub(crate) const ROW_VALUES: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The sizes of the multi-row INSERTs of a batch, largest first: a fixed
/// few, so a batch of any length needs at most three prepared statements
/// in the connection's cache (a hundred rows: one). The last few rows of a
/// batch go in one by one.
pub(crate) const ROWS_PER_INSERT: [usize; 3] = [100, 25, 5];

/// Inserts `jobs` (distinct keys, `ROWS_PER_INSERT[size]` of them) in one
/// statement if none of their keys was seen before, and returns their ids
/// in order; `None`, with nothing written, if one was. A key already in
/// `jobs` fails the statement on the key index, and SQLite undoes a failed
/// statement whole (it keeps a statement journal for a multi-row INSERT,
/// and writes the AUTOINCREMENT counter only at the statement's end),
/// leaving the transaction as it was.
fn insert_new(
    conn: &Connection,
    st: &mut Statements<'_>,
    size: usize,
    jobs: &[ValidJob],
    now: Millis,
) -> Result<Option<Vec<i64>>> {
    debug_assert_eq!(jobs.len(), ROWS_PER_INSERT[size]);
    for j in jobs {
        if st.in_ledger.query_row([&j.key], |r| r.get::<_, bool>(0))? {
            return Ok(None);
        }
    }
    // Built once per size: ~3 KB of SQL text for a hundred rows.
    static SQL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let sql = &SQL.get_or_init(|| {
        ROWS_PER_INSERT
            .iter()
            .map(|&n| {
                format!(
                    "INSERT INTO jobs (queue, kind, idempotency_key, payload, priority, run_at, max_attempts, created_at, partition_key, timeout_ms) \
                     VALUES {} RETURNING idempotency_key, id",
                    vec![ROW_VALUES; n].join(", ")
                )
            })
            .collect()
    })[size];
    let mut insert = conn.prepare_cached(sql)?;
    let params: Vec<&dyn rusqlite::ToSql> = jobs.iter().flat_map(|j| job_params(j, &now)).collect();
    // RETURNING's order is not promised: the ids are matched by key.
    let mut ids = std::collections::HashMap::with_capacity(jobs.len());
    // A refusal that may be a key taken undoes the statement whole; the
    // chunk then goes in one by one, which tells a duplicate from a bad row.
    let mut rows = match insert.query(params.as_slice()) {
        Ok(rows) => rows,
        Err(e) if may_be_key_taken(&e) => return Ok(None),
        Err(e) => return Err(constraint(e)),
    };
    loop {
        match rows.next() {
            Ok(Some(r)) => {
                ids.insert(r.get::<_, String>(0)?, r.get::<_, i64>(1)?);
            }
            Ok(None) => break,
            Err(e) if may_be_key_taken(&e) => return Ok(None),
            Err(e) => return Err(constraint(e)),
        }
    }
    jobs.iter()
        .map(|j| {
            ids.get(&j.key).copied().ok_or_else(|| {
                Error::Internal(format!("the batch insert returned no id for key {}", j.key))
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The two statements of an insert inside a transaction.
struct Statements<'c> {
    in_ledger: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
}

impl<'c> Statements<'c> {
    fn new(conn: &'c Connection) -> Result<Self> {
        const IN_LEDGER: &str = "SELECT EXISTS (SELECT 1 FROM processed_jobs WHERE key = ?1)";
        const INSERT: &str = "INSERT INTO jobs (queue, kind, idempotency_key, payload, priority, run_at, max_attempts, created_at, partition_key, timeout_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
        Ok(Statements {
            in_ledger: conn.prepare_cached(IN_LEDGER)?,
            insert: conn.prepare_cached(INSERT)?,
        })
    }

    /// A key already in `jobs` is found by the INSERT itself: its UNIQUE
    /// index refuses the row. SQLite checks every constraint of a one-row
    /// `INSERT … VALUES` before it writes anything, so the refused insert
    /// leaves nothing behind, spends no id (AUTOINCREMENT records a rowid
    /// only when the statement completes; an `ON CONFLICT DO NOTHING` would
    /// complete, and spend it) and needs no statement journal. A separate
    /// look at `jobs` first cost a second seek of the key index per job.
    fn insert(&mut self, conn: &Connection, job: &ValidJob, now: Millis) -> Result<Enqueued> {
        let in_ledger: bool = self.in_ledger.query_row([&job.key], |r| r.get(0))?;
        let refused = if in_ledger {
            None
        } else {
            match self.insert.execute(job_params(job, &now).as_slice()) {
                Ok(_) => return Ok(Enqueued::New(conn.last_insert_rowid())),
                Err(e) if may_be_key_taken(&e) => Some(e),
                Err(e) => return Err(constraint(e)),
            }
        };
        // Seen before: a job with this key (count a delivery), or only the
        // ledger's row of a pruned job.
        const FIND: &str = "SELECT id FROM jobs WHERE idempotency_key = ?1";
        let existing: Option<i64> = conn
            .prepare_cached(FIND)?
            .query_row([&job.key], |r| r.get(0))
            .optional()?;
        match (existing, refused) {
            (Some(id), _) => {
                const BUMP: &str = "UPDATE jobs SET deliveries = deliveries + 1 WHERE id = ?1";
                conn.prepare_cached(BUMP)?.execute([id])?;
                Ok(Enqueued::Duplicate(id))
            }
            // No job holds the key: some other constraint refused the row.
            (None, Some(e)) => Err(constraint(e)),
            (None, None) => ledger_duplicate(conn, &job.key),
        }
    }
}

/// The INSERT may have been refused because `jobs` already holds the key:
/// SQLITE_CONSTRAINT_UNIQUE (the key's index is the only UNIQUE one the
/// insert can hit: the id is SQLite's own), or the bare primary code from a
/// connection without extended result codes (an application's own, through
/// `enqueue_in`). Which it was, the caller learns from a lookup of the key,
/// not from the message.
fn may_be_key_taken(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_extended_error_code(),
        Some(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT)
    )
}

pub(crate) fn constraint(e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::ConstraintViolation) => {
            Error::invalid(format!("refused by the schema's constraints: {e}"))
        }
        _ => crate::sqlite::db::from_sqlite(e),
    }
}
