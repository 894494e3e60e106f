//! Operator actions on a queue file: requeue dead jobs and outbox rows,
//! cancel queued jobs, prune finished history, count, and gather everything
//! known about one key ("ten events or one event ten times?"). Writes `jobs`
//! (retry, cancel, prune), `attempts` and `outbox` (prune of finished rows;
//! an outbox retry goes through the outbox module) and `processed_jobs`
//! (prune, through the ledger module, only when asked).
//!
//! Writes go through [`Queue::write`], so they share the process's one
//! writer and its `BEGIN IMMEDIATE` rule, and work while another process
//! runs workers on the same file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::history::{self, Attempt, AttemptOutcome};
use crate::job::{self, Job, JobState};
use crate::outbox::{self, OutboxRow, OutboxState};
use crate::queue::Queue;
use crate::time::{format_duration, format_millis, Millis};
use crate::{ledger, schema};

/// What an operator action did to one row that exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum Transition {
    /// The row moved to its new state.
    Changed,
    /// The row is in a state the action does not apply to; nothing changed.
    Refused {
        /// The state the row is in.
        state: String,
    },
}

fn job_state(conn: &Connection, id: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT state FROM jobs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// Requeuing a dead job renews its budget: the attempts it used are history
/// (kept in `attempts`), not a debt. `last_error` is kept so the operator
/// still sees why it died until the next run.
const RETRY_JOB: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
     run_at = ?2, finished_at = NULL WHERE id = ?1 AND state = 'dead'";

/// Requeues one dead job with a renewed attempt budget. `NotFound` when there
/// is no such job; `Refused` when it is not dead.
pub fn retry_job(queue: &Queue, id: i64, now: Millis) -> Result<Transition> {
    let t = queue.write(move |tx| {
        if tx.prepare_cached(RETRY_JOB)?.execute((id, now))? == 1 {
            return Ok(Transition::Changed);
        }
        match job_state(tx, id)? {
            None => Err(Error::NotFound(format!("no job with id {id}"))),
            Some(state) => Ok(Transition::Refused { state }),
        }
    })?;
    if t == Transition::Changed {
        queue.notify();
    }
    Ok(t)
}

/// Requeues every dead job (of `kind`, if given) with a renewed attempt
/// budget, `batch` jobs per write transaction so the write lock is never held
/// long. Only jobs dead when a batch runs are touched; the walk goes by id,
/// so a job that dies again meanwhile is not retried twice. Returns how many.
pub fn retry_dead_jobs(
    queue: &Queue,
    kind: Option<&str>,
    batch: usize,
    now: Millis,
) -> Result<usize> {
    const SQL: &str = "UPDATE jobs SET state = 'queued', attempts = 0, abandoned = 0, \
         run_at = ?3, finished_at = NULL \
         WHERE id IN (SELECT id FROM jobs WHERE state = 'dead' AND (?1 IS NULL OR kind = ?1) \
                      AND id > ?2 ORDER BY id LIMIT ?4) \
         RETURNING id";
    let batch = batch.max(1) as i64;
    let mut after = 0i64;
    let mut total = 0usize;
    loop {
        let kind = kind.map(str::to_owned);
        let ids: Vec<i64> = queue.write(move |tx| {
            let mut st = tx.prepare_cached(SQL)?;
            let rows = st.query_map(rusqlite::params![kind, after, now, batch], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<i64>>>()?)
        })?;
        total += ids.len();
        if let Some(max) = ids.iter().max() {
            after = *max;
            queue.notify();
        }
        if (ids.len() as i64) < batch {
            return Ok(total);
        }
    }
}

/// Cancels a queued job: it will not run. `NotFound` when there is no such
/// job; `Refused` when it is not queued (a running job's transaction is
/// already under way; a finished one has nothing left to cancel).
pub fn cancel_job(queue: &Queue, id: i64, now: Millis) -> Result<Transition> {
    const SQL: &str = "UPDATE jobs SET state = 'cancelled', finished_at = ?2 \
                       WHERE id = ?1 AND state = 'queued'";
    queue.write(move |tx| {
        if tx.prepare_cached(SQL)?.execute((id, now))? == 1 {
            return Ok(Transition::Changed);
        }
        match job_state(tx, id)? {
            None => Err(Error::NotFound(format!("no job with id {id}"))),
            Some(state) => Ok(Transition::Refused { state }),
        }
    })
}

/// Requeues one dead outbox row with a fresh attempt budget. `NotFound` when
/// there is no such row; `Refused` when it is not dead.
pub fn retry_outbox(queue: &Queue, id: i64, now: Millis) -> Result<Transition> {
    let t = queue.write(move |tx| match outbox::get(tx, id)? {
        None => Err(Error::NotFound(format!("no outbox row with id {id}"))),
        Some(row) if row.state == OutboxState::Dead => {
            outbox::retry_dead(tx, id, now)?;
            Ok(Transition::Changed)
        }
        Some(row) => Ok(Transition::Refused {
            state: row.state.as_str().to_string(),
        }),
    })?;
    if t == Transition::Changed {
        // Effect threads of this process pick it up now, not at their next poll.
        queue.notify_outbox();
    }
    Ok(t)
}

/// What [`prune`] removes.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// Finished jobs (succeeded, dead, cancelled) whose `finished_at` is at or
    /// before this go, with their attempts; so do sent outbox rows whose
    /// `sent_at` is at or before it.
    pub finished_before: Millis,
    /// Ledger rows completed before this go too. `None` keeps the ledger,
    /// so a re-delivered key stays a duplicate after its job row is gone.
    pub ledger_before: Option<Millis>,
    /// Rows per write transaction.
    pub batch: usize,
}

/// What [`prune`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Job rows deleted.
    pub jobs: usize,
    /// Attempt rows of those jobs deleted.
    pub job_attempts: usize,
    /// Sent outbox rows deleted.
    pub outbox: usize,
    /// Attempt rows of those outbox rows deleted.
    pub outbox_attempts: usize,
    /// Ledger rows deleted (0 unless asked).
    pub ledger: usize,
    /// Write transactions used.
    pub transactions: usize,
}

/// Deletes finished history in bounded batches (one write transaction per
/// batch), so even a prune of millions of rows holds the write lock only
/// briefly at a time and workers keep going in between. A finished job whose
/// outbox rows are not all sent yet is kept, so `explain` can still link the
/// pending effect to its job.
pub fn prune(queue: &Queue, opts: &PruneOptions) -> Result<PruneReport> {
    let batch = opts.batch.max(1) as i64;
    let before = opts.finished_before;
    let mut report = PruneReport::default();

    // Jobs first: their outbox rows outlive them (job_id becomes NULL), and
    // their attempts go in the same transaction.
    const PICK_JOBS: &str =
        "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= ?1 \
         AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.job_id = jobs.id AND o.state <> 'sent') \
         ORDER BY finished_at LIMIT ?2";
    loop {
        let (jobs, attempts) = queue.write(move |tx| {
            let ids = pick(tx, PICK_JOBS, before, batch)?;
            if ids.is_empty() {
                return Ok((0, 0));
            }
            let a = tx
                .prepare_cached(
                    "DELETE FROM attempts WHERE job_id IN (SELECT value FROM json_each(?1))",
                )?
                .execute([&ids])?;
            let j = tx
                .prepare_cached("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))")?
                .execute([&ids])?;
            Ok((j, a))
        })?;
        report.transactions += 1;
        report.jobs += jobs;
        report.job_attempts += attempts;
        if (jobs as i64) < batch {
            break;
        }
    }

    const PICK_OUTBOX: &str = "SELECT id FROM outbox WHERE state = 'sent' AND sent_at <= ?1 \
         ORDER BY sent_at LIMIT ?2";
    loop {
        let (rows, attempts) = queue.write(move |tx| {
            let ids = pick(tx, PICK_OUTBOX, before, batch)?;
            if ids.is_empty() {
                return Ok((0, 0));
            }
            let a = tx
                .prepare_cached(
                    "DELETE FROM attempts WHERE outbox_id IN (SELECT value FROM json_each(?1))",
                )?
                .execute([&ids])?;
            let o = tx
                .prepare_cached("DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?1))")?
                .execute([&ids])?;
            Ok((o, a))
        })?;
        report.transactions += 1;
        report.outbox += rows;
        report.outbox_attempts += attempts;
        if (rows as i64) < batch {
            break;
        }
    }

    if let Some(ledger_before) = opts.ledger_before {
        loop {
            let n = queue.write(move |tx| ledger::prune(tx, ledger_before, batch))?;
            report.transactions += 1;
            report.ledger += n;
            if (n as i64) < batch {
                break;
            }
        }
    }
    Ok(report)
}

/// Runs a `SELECT id ... ?1 ... LIMIT ?2` and returns the ids as a JSON array,
/// ready for `json_each`.
fn pick(conn: &Connection, sql: &str, before: Millis, limit: i64) -> Result<String> {
    let mut st = conn.prepare_cached(sql)?;
    let ids = st
        .query_map((before, limit), |r| r.get::<_, i64>(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    if ids.is_empty() {
        return Ok(String::new());
    }
    Ok(serde_json::to_string(&ids)?)
}

/// Job counts per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JobCounts {
    /// All jobs.
    pub total: i64,
    /// `queued` (includes scheduled and waiting for a retry).
    pub queued: i64,
    /// `running`.
    pub running: i64,
    /// `succeeded`.
    pub succeeded: i64,
    /// `dead`.
    pub dead: i64,
    /// `cancelled`.
    pub cancelled: i64,
}

impl JobCounts {
    fn add(&mut self, state: &str, n: i64) {
        self.total += n;
        match state {
            "queued" => self.queued += n,
            "running" => self.running += n,
            "succeeded" => self.succeeded += n,
            "dead" => self.dead += n,
            "cancelled" => self.cancelled += n,
            _ => {}
        }
    }

    /// The count of one state.
    pub fn get(&self, state: JobState) -> i64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Succeeded => self.succeeded,
            JobState::Dead => self.dead,
            JobState::Cancelled => self.cancelled,
        }
    }
}

/// Outbox counts per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OutboxCounts {
    /// All rows.
    pub total: i64,
    /// `pending`.
    pub pending: i64,
    /// `sending`.
    pub sending: i64,
    /// `sent`.
    pub sent: i64,
    /// `dead`.
    pub dead: i64,
}

impl OutboxCounts {
    fn add(&mut self, state: &str, n: i64) {
        self.total += n;
        match state {
            "pending" => self.pending += n,
            "sending" => self.sending += n,
            "sent" => self.sent += n,
            "dead" => self.dead += n,
            _ => {}
        }
    }

    /// The count of one state.
    pub fn get(&self, state: OutboxState) -> i64 {
        match state {
            OutboxState::Pending => self.pending,
            OutboxState::Sending => self.sending,
            OutboxState::Sent => self.sent,
            OutboxState::Dead => self.dead,
        }
    }
}

/// A picture of the queue file, for `litejob stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// The file.
    pub path: PathBuf,
    /// `PRAGMA user_version`.
    pub schema_version: i64,
    /// Jobs per state.
    pub jobs: JobCounts,
    /// Jobs per kind, per state.
    pub by_kind: BTreeMap<String, JobCounts>,
    /// Jobs per queue, per state.
    pub by_queue: BTreeMap<String, JobCounts>,
    /// Outbox rows per state.
    pub outbox: OutboxCounts,
    /// Outbox rows per kind, per state.
    pub outbox_by_kind: BTreeMap<String, OutboxCounts>,
    /// Queued jobs whose `run_at` has come (runnable now).
    pub queued_due: i64,
    /// How long ago the oldest queued job was enqueued (ms).
    pub oldest_queued_age_ms: Option<i64>,
    /// How long the longest-waiting runnable job has been due (ms): the
    /// backlog's lag.
    pub oldest_due_wait_ms: Option<i64>,
    /// Rows in the `processed_jobs` ledger.
    pub ledger_rows: i64,
    /// Size of the database file in bytes.
    pub file_bytes: u64,
    /// Size of its write-ahead log (`<file>-wal`) in bytes.
    pub wal_bytes: u64,
}

/// Counts jobs and outbox rows, the backlog's age, and the file's size.
pub fn stats(queue: &Queue, now: Millis) -> Result<Stats> {
    let path = queue.path().to_path_buf();
    let mut stats = queue.read(|conn| stats_of(conn, now))?;
    stats.file_bytes = file_len(&path);
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    stats.wal_bytes = file_len(Path::new(&wal));
    stats.path = path;
    Ok(stats)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The counting part of [`stats`], on one connection (file sizes left 0).
/// Runs in one read transaction so the numbers agree with each other.
pub fn stats_of(conn: &Connection, now: Millis) -> Result<Stats> {
    in_snapshot(conn, |c| stats_in_snapshot(c, now))
}

/// Runs `f` in one read transaction (unless the caller already opened one),
/// so several queries see the same state of the file while workers write.
fn in_snapshot<R>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
    if !conn.is_autocommit() {
        return f(conn);
    }
    conn.execute_batch("BEGIN DEFERRED")?;
    let r = f(conn);
    if conn.execute_batch("COMMIT").is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    r
}

fn stats_in_snapshot(conn: &Connection, now: Millis) -> Result<Stats> {
    let mut s = Stats {
        path: PathBuf::new(),
        schema_version: schema::read_version(conn)?,
        jobs: JobCounts::default(),
        by_kind: BTreeMap::new(),
        by_queue: BTreeMap::new(),
        outbox: OutboxCounts::default(),
        outbox_by_kind: BTreeMap::new(),
        queued_due: 0,
        oldest_queued_age_ms: None,
        oldest_due_wait_ms: None,
        ledger_rows: 0,
        file_bytes: 0,
        wal_bytes: 0,
    };
    {
        let mut st = conn.prepare_cached(
            "SELECT kind, queue, state, count(*) FROM jobs GROUP BY kind, queue, state",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (kind, queue, state, n) = row?;
            s.jobs.add(&state, n);
            s.by_kind.entry(kind).or_default().add(&state, n);
            s.by_queue.entry(queue).or_default().add(&state, n);
        }
    }
    {
        let mut st =
            conn.prepare_cached("SELECT kind, state, count(*) FROM outbox GROUP BY kind, state")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (kind, state, n) = row?;
            s.outbox.add(&state, n);
            s.outbox_by_kind.entry(kind).or_default().add(&state, n);
        }
    }
    let (oldest_created, oldest_due, due): (Option<i64>, Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT min(created_at), min(CASE WHEN run_at <= ?1 THEN run_at END), \
                    coalesce(sum(run_at <= ?1), 0) \
             FROM jobs WHERE state = 'queued'",
        )?
        .query_row([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    s.oldest_queued_age_ms = oldest_created.map(|t| (now - t).max(0));
    s.oldest_due_wait_ms = oldest_due.map(|t| (now - t).max(0));
    s.queued_due = due;
    s.ledger_rows = conn
        .prepare_cached("SELECT count(*) FROM processed_jobs")?
        .query_row([], |r| r.get(0))?;
    Ok(s)
}

/// The `processed_jobs` row of a key: its work committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    /// The key.
    pub key: String,
    /// When the work committed (ms since epoch).
    pub completed_at: Millis,
    /// The job whose run committed it.
    pub job_id: Option<i64>,
}

/// An outbox row with every attempt of its effect.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxEntry {
    /// The row.
    #[serde(flatten)]
    pub row: OutboxRow,
    /// Its attempts, oldest first.
    pub attempts: Vec<Attempt>,
}

/// One job with its runs and the outbox rows it wrote (`litejob show`).
#[derive(Debug, Clone, Serialize)]
pub struct JobDetail {
    /// The job.
    pub job: Job,
    /// Every run, oldest first.
    pub attempts: Vec<Attempt>,
    /// The outbox rows it wrote, with their attempts.
    pub outbox: Vec<OutboxEntry>,
}

/// One job by id with its attempts and outbox rows.
pub fn job_detail(conn: &Connection, id: i64) -> Result<Option<JobDetail>> {
    let Some(job) = job::get_job(conn, id)? else {
        return Ok(None);
    };
    let attempts = history::for_job(conn, id)?;
    let outbox = outbox_entries(conn, id)?;
    Ok(Some(JobDetail {
        job,
        attempts,
        outbox,
    }))
}

fn outbox_entries(conn: &Connection, job_id: i64) -> Result<Vec<OutboxEntry>> {
    outbox::for_job(conn, job_id)?
        .into_iter()
        .map(|row| {
            Ok(OutboxEntry {
                attempts: history::for_outbox(conn, row.id)?,
                row,
            })
        })
        .collect()
}

/// Everything known about one idempotency key (`litejob explain`).
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The key asked about.
    pub key: String,
    /// One sentence answering "ten events or one event ten times?".
    pub summary: String,
    /// Enqueues seen for this key (0 when no job row exists).
    pub deliveries: i64,
    /// The job, unless none was ever enqueued or it was pruned.
    pub job: Option<Job>,
    /// Every run of the job, oldest first.
    pub attempts: Vec<Attempt>,
    /// The ledger row, if the key's work committed.
    pub ledger: Option<LedgerEntry>,
    /// The outbox rows the job wrote, with their attempts.
    pub outbox: Vec<OutboxEntry>,
}

/// Gathers everything known about `key` in one read transaction, and the
/// sentence that sums it up. `now` is used for "scheduled in ..." phrases.
pub fn explain(conn: &Connection, key: &str, now: Millis) -> Result<Explanation> {
    in_snapshot(conn, |c| explain_in_snapshot(c, key, now))
}

fn explain_in_snapshot(conn: &Connection, key: &str, now: Millis) -> Result<Explanation> {
    let job = job::get_job_by_key(conn, key)?;
    let ledger = ledger::lookup(conn, key)?.map(|(completed_at, job_id)| LedgerEntry {
        key: key.to_string(),
        completed_at,
        job_id,
    });
    let (attempts, outbox) = match &job {
        Some(j) => (history::for_job(conn, j.id)?, outbox_entries(conn, j.id)?),
        None => (Vec::new(), Vec::new()),
    };
    let summary = summarize(job.as_ref(), &attempts, ledger.as_ref(), &outbox, now);
    Ok(Explanation {
        key: key.to_string(),
        summary,
        deliveries: job.as_ref().map_or(0, |j| j.deliveries),
        job,
        attempts,
        ledger,
        outbox,
    })
}

/// "once", "twice", "3 times".
fn times(n: i64) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

fn plural(n: i64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The one sentence on top of `explain`: how many events, how many
/// deliveries, how many runs and what became of them, and each effect.
pub fn summarize(
    job: Option<&Job>,
    attempts: &[Attempt],
    ledger: Option<&LedgerEntry>,
    outbox: &[OutboxEntry],
    now: Millis,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (job, ledger) {
        (None, None) => return "no job has this key".into(),
        (None, Some(l)) => {
            parts.push("1 event".into());
            parts.push("its job row was pruned".into());
            parts.push(format!(
                "work committed once at {}",
                format_millis(l.completed_at)
            ));
        }
        (Some(j), _) => {
            parts.push("1 event".into());
            parts.push(format!("delivered {}", times(j.deliveries)));
            parts.push(run_phrase(j, attempts, ledger.is_some(), now));
        }
    }
    for o in outbox {
        parts.push(outbox_phrase(o));
    }
    parts.join(", ")
}

fn run_phrase(job: &Job, attempts: &[Attempt], committed: bool, now: Millis) -> String {
    if attempts.is_empty() {
        return match job.state {
            JobState::Queued if job.run_at > now => format!(
                "not run yet (scheduled in {})",
                format_duration(std::time::Duration::from_millis((job.run_at - now) as u64))
            ),
            JobState::Queued => "not run yet".into(),
            JobState::Running => "claimed, about to run".into(),
            JobState::Succeeded => "succeeded".into(),
            JobState::Dead => "dead without a run".into(),
            JobState::Cancelled => "cancelled before it ran".into(),
        };
    }
    let n = attempts.len() as i64;
    let only_success = n == 1 && attempts[0].outcome == AttemptOutcome::Succeeded;
    let mut s = if only_success {
        "run once".to_string()
    } else {
        // Outcomes in a fixed order, so the sentence reads the same each time.
        let order = [
            AttemptOutcome::Failed,
            AttemptOutcome::Panicked,
            AttemptOutcome::Abandoned,
            AttemptOutcome::Released,
            AttemptOutcome::Duplicate,
            AttemptOutcome::Succeeded,
            AttemptOutcome::Running,
        ];
        let breakdown: Vec<String> = order
            .iter()
            .filter_map(|o| {
                let c = attempts.iter().filter(|a| a.outcome == *o).count();
                (c > 0).then(|| format!("{c} {o}"))
            })
            .collect();
        format!("run {} ({})", times(n), breakdown.join(", "))
    };
    let tail = match job.state {
        JobState::Succeeded if only_success => "",
        JobState::Succeeded if committed => ", work committed once",
        JobState::Succeeded => ", succeeded",
        JobState::Queued => ", waiting to retry",
        JobState::Running => ", running now",
        JobState::Dead => ", dead",
        JobState::Cancelled => ", cancelled",
    };
    s.push_str(tail);
    s
}

fn outbox_phrase(o: &OutboxEntry) -> String {
    let kind = &o.row.kind;
    let n = (o.attempts.len() as i64).max(o.row.attempts);
    match o.row.state {
        OutboxState::Sent if n <= 1 => format!("{kind} sent once"),
        OutboxState::Sent => format!("{kind} sent after {}", plural(n, "attempt")),
        OutboxState::Pending if n == 0 => format!("{kind} not sent yet"),
        OutboxState::Pending => format!("{kind} not sent yet ({} failed)", plural(n, "attempt")),
        OutboxState::Sending => format!("{kind} being sent now"),
        OutboxState::Dead => format!("{kind} dead after {}, not sent", plural(n, "attempt")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, deliveries: i64) -> Job {
        Job {
            id: 1,
            queue: "default".into(),
            kind: "k".into(),
            idempotency_key: "evt".into(),
            payload: "{}".into(),
            state,
            priority: 0,
            run_at: 0,
            attempts: 1,
            max_attempts: 2,
            abandoned: 0,
            deliveries,
            last_error: None,
            created_at: 0,
            finished_at: None,
            lease_owner: None,
            lease_expires_at: None,
            current_attempt: None,
        }
    }

    fn attempt(outcome: AttemptOutcome) -> Attempt {
        Attempt {
            id: 1,
            job_id: Some(1),
            outbox_id: None,
            attempt: 1,
            key: "evt".into(),
            worker: "1/w".into(),
            started_at: 0,
            finished_at: Some(1),
            outcome,
            error: None,
        }
    }

    fn receipt(state: OutboxState, attempts: usize) -> OutboxEntry {
        OutboxEntry {
            row: OutboxRow {
                id: 1,
                key: "receipt:evt".into(),
                kind: "send_receipt".into(),
                payload: "{}".into(),
                state,
                attempts: attempts as i64,
                max_attempts: 2,
                job_id: Some(1),
                next_attempt_at: 0,
                last_error: None,
                created_at: 0,
                sent_at: None,
            },
            attempts: vec![attempt(AttemptOutcome::Succeeded); attempts],
        }
    }

    #[test]
    fn the_sentence_answers_ten_events_or_one_event_ten_times() {
        let ledger = LedgerEntry {
            key: "evt".into(),
            completed_at: 0,
            job_id: Some(1),
        };
        assert_eq!(
            summarize(
                Some(&job(JobState::Succeeded, 10)),
                &[attempt(AttemptOutcome::Succeeded)],
                Some(&ledger),
                &[receipt(OutboxState::Sent, 1)],
                0
            ),
            "1 event, delivered 10 times, run once, send_receipt sent once"
        );
        assert_eq!(
            summarize(
                Some(&job(JobState::Succeeded, 1)),
                &[
                    attempt(AttemptOutcome::Failed),
                    attempt(AttemptOutcome::Succeeded)
                ],
                Some(&ledger),
                &[],
                0
            ),
            "1 event, delivered once, run twice (1 failed, 1 succeeded), work committed once"
        );
        assert_eq!(
            summarize(Some(&job(JobState::Queued, 2)), &[], None, &[], 0),
            "1 event, delivered twice, not run yet"
        );
        assert_eq!(summarize(None, &[], None, &[], 0), "no job has this key");
        assert!(summarize(None, &[], Some(&ledger), &[], 0).contains("pruned"));
        assert_eq!(
            outbox_phrase(&receipt(OutboxState::Dead, 2)),
            "send_receipt dead after 2 attempts, not sent"
        );
    }
}
