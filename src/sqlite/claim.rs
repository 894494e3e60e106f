//! Claims and starts: claim a batch of due jobs (starting some of them in
//! the same statements), start the run of a job claimed before. Writes
//! `jobs` (state, lease and fence columns), `attempts` (through the history
//! module) and `queue_starts` (a rated queue's starts, through the controls
//! module). Renewing, reaping and releasing leases is the leases module's.

use rusqlite::{CachedStatement, Connection};

use crate::core::time::Millis;
use crate::error::Result;
use crate::sqlite::controls;
use crate::sqlite::history::{self};

/// A job claimed by this process but not started yet: it holds a lease but
/// no attempt, so a crash before it starts charges nothing.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub id: i64,
    pub kind: String,
    /// Runs of this job cut short by a crash so far. A job with one is a
    /// suspect: the runtime runs it with nothing else of its worker in
    /// flight, so that if it is the one that kills the process, it does not
    /// take a healthy neighbour's uncommitted run down with it again.
    pub abandoned: i64,
    /// Its queue is rate-limited, as a whole or per partition: its start
    /// is recorded in `queue_starts` (see the controls module), in the
    /// start's transaction.
    pub rated: bool,
}

/// A claimed job, and its start with the caller's token if it was started.
pub(crate) type Taken<W> = (Claimed, Option<(Started, W)>);

/// What [`claim_batch`] does with a candidate, as its caller decides.
pub(crate) enum Take<W> {
    /// Claim it; a worker starts it.
    Claim,
    /// Claim and start it now, for the named worker; `W` is given back.
    Start(W, String),
    /// Leave it queued for now: the caller starts it with [`Starts::start`]
    /// in a moment (a later transaction of the cycle).
    Later(W, String),
}

/// What a claim took.
pub(crate) struct Batch<W> {
    pub taken: Vec<Taken<W>>,
    /// Left for [`Starts::start`], in priority order.
    pub later: Vec<(Claimed, W, String)>,
    /// Jobs were left queued because their queue's cap or rate was full: a
    /// run of it ending frees a slot worth claiming at once.
    pub held_back: bool,
    /// When a full rate's window next frees a start, if one held jobs back.
    pub frees_at: Option<Millis>,
}

/// A job the claim's query found: `(priority, run_at, id, kind index,
/// abandoned, queue, partition)`; the queue and the partition are read
/// only when controls are in force.
type Candidate = (i64, i64, i64, usize, i64, Option<String>, Option<String>);

/// What a claim asks for: up to `limit` runnable jobs of `kinds` (in the
/// queues of `queues_json`, if given), leased to `owner` until
/// `lease_until`, at `now`. At most `for_workers` jobs of a capped or
/// rate-limited queue are claimed for the workers to start: the workers
/// free to start one now (more would wait in the buffer holding their
/// slots while another process's workers sat idle).
pub(crate) struct ClaimAsk<'a> {
    pub kinds: &'a [String],
    pub queues_json: Option<&'a str>,
    pub limit: usize,
    pub for_workers: usize,
    pub owner: &'a str,
    pub lease_until: Millis,
    pub now: Millis,
}

/// Claims the jobs `ask` asks for, in priority order; `decide` says what to
/// do with each (see [`Take`]), knowing whether the batch holds jobs of
/// different priorities (`split`) and whether this one is `ahead` of its
/// last job (a strictly better priority). A job started here is started as
/// [`start`] would, in the same statements: its row is updated once, claim
/// and fence together.
///
/// The queue controls in force are read first, in this transaction: a
/// paused queue's jobs are left queued, a capped or rate-limited queue
/// gives at most the room it has left (its claimed-ahead jobs count), and
/// such a job is never left for a later transaction (`Take::Later`
/// becomes `Take::Start`), where another process could take the slot
/// meanwhile.
pub(crate) fn claim_batch<W>(
    conn: &Connection,
    ask: &ClaimAsk<'_>,
    mut decide: impl FnMut(&Claimed, bool, bool) -> Take<W>,
) -> Result<Batch<W>> {
    const TAKE: &str =
        "UPDATE jobs SET state = 'running', lease_owner = ?2, lease_expires_at = ?3 \
         WHERE id = ?1 AND state = 'queued'";
    let mut gate = controls::Gate::read(conn, ask.now)?;
    let candidates = candidates(conn, ask, &mut gate)?;
    let worst = candidates.last().map_or(0, |c| c.0);
    let split = candidates.first().is_some_and(|c| c.0 < worst);
    let mut batch = Batch {
        taken: Vec::with_capacity(candidates.len()),
        later: Vec::new(),
        held_back: gate.held_back,
        frees_at: gate.wake_at,
    };
    let mut take = conn.prepare_cached(TAKE)?;
    let mut starts: Option<Starts<'_>> = None;
    let mut for_workers = ask.for_workers;
    for (priority, _, id, k, abandoned, queue, _) in candidates {
        let limits = queue.as_deref().and_then(|q| gate.limits(q));
        let limited = limits.is_some_and(crate::core::controls::Limits::limited);
        let c = Claimed {
            id,
            kind: ask.kinds[k].clone(),
            abandoned,
            rated: limits.is_some_and(crate::core::controls::Limits::rated),
        };
        let decided = match decide(&c, split, priority < worst) {
            Take::Later(token, worker) if limited => Take::Start(token, worker),
            other => other,
        };
        match decided {
            Take::Start(token, worker) => {
                let starts = match &mut starts {
                    Some(s) => s,
                    None => starts.insert(Starts::new(conn)?),
                };
                let (owner, until, now) = (ask.owner, ask.lease_until, ask.now);
                if let Some(st) = starts.start(&c, owner, until, &worker, now)? {
                    batch.taken.push((c, Some((st, token))));
                }
            }
            Take::Later(token, worker) => batch.later.push((c, token, worker)),
            Take::Claim if limited && for_workers == 0 => batch.held_back = true,
            Take::Claim => {
                if limited {
                    for_workers -= 1;
                }
                if take.execute(rusqlite::params![id, ask.owner, ask.lease_until])? == 1 {
                    batch.taken.push((c, None));
                }
            }
        }
    }
    Ok(batch)
}

/// The jobs a claim may take, best first: due, of the asked kinds and
/// queues, and (with controls in force) through the gate, which leaves a
/// paused queue's jobs and those past a cap's or a rate's room.
fn candidates(
    conn: &Connection,
    ask: &ClaimAsk<'_>,
    gate: &mut controls::Gate,
) -> Result<Vec<Candidate>> {
    // One index seek per kind on jobs_claim (kind, priority, run_at, id),
    // then a merge: O(kinds × (log n + limit)) however many jobs have
    // finished or wait for other kinds; a single `kind IN (...) ORDER BY
    // priority` query would sort every queued job of those kinds. The
    // LIMIT is written into the SQL, not bound: SQLite (built with STAT4)
    // re-prepares a statement whenever a bound LIMIT changes. Rounded up to
    // a power of two, so a handful of texts stay prepared; the merge takes
    // `limit`.
    let cap = ask.limit.max(1).next_power_of_two();
    let sql = |cap: usize| {
        format!(
            "SELECT id, priority, run_at, abandoned, queue, partition_key FROM jobs \
             WHERE state = 'queued' AND kind = ?1 AND run_at <= ?2 \
             AND (?3 IS NULL OR queue IN (SELECT value FROM json_each(?3))) \
             AND (?4 IS NULL OR queue NOT IN (SELECT value FROM json_each(?4))) \
             AND (?5 IS NULL OR partition_key IS NULL \
                  OR queue || char(31) || partition_key NOT IN (SELECT value FROM json_each(?5))) \
             ORDER BY priority, run_at, id LIMIT {cap}"
        )
    };
    // A partition gives a round its room only (one job, under a cap of 1)
    // and its next jobs are skipped: a round asked again reads further, or
    // a backlog stored partition by partition would take a round per job.
    let mut widen = gate.is_partitioned();
    let mut st = conn.prepare_cached(&sql(cap))?;
    let mut find = |skipped: (Option<&str>, Option<&str>),
                    with_queue: bool,
                    again: bool|
     -> Result<Vec<Candidate>> {
        if again && widen {
            st = conn.prepare_cached(&sql((cap * 16).min(1024)))?;
            widen = false;
        }
        let mut found: Vec<Candidate> = Vec::new();
        for (k, kind) in ask.kinds.iter().enumerate() {
            let params = rusqlite::params![kind, ask.now, ask.queues_json, skipped.0, skipped.1];
            let rows = st.query_map(params, |r| {
                Ok((
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(0)?,
                    k,
                    r.get::<_, i64>(3)?,
                    if with_queue {
                        Some(r.get::<_, String>(4)?)
                    } else {
                        None
                    },
                    if with_queue { r.get(5)? } else { None },
                ))
            })?;
            for row in rows {
                found.push(row?);
            }
        }
        found.sort_unstable();
        Ok(found)
    };
    if gate.is_open() {
        let mut found = find((None, None), false, false)?;
        found.truncate(ask.limit);
        return Ok(found);
    }
    let mut kept = Vec::new();
    let mut rounds = 0;
    loop {
        let (queues, partitions) = gate.skipped_json();
        let again = !kept.is_empty() || rounds > 0;
        rounds += 1;
        let mut found = find((queues.as_deref(), partitions.as_deref()), true, again)?;
        found.append(&mut kept);
        found.sort_unstable();
        match gate.choose(conn, found, ask.limit, ask.now, |c| {
            (c.5.as_deref().unwrap_or(""), c.6.as_deref())
        })? {
            controls::Chosen::Done(chosen) => return Ok(chosen),
            controls::Chosen::Again(full) => kept = full,
        }
    }
}

/// The starts of a claim's batch: each claims a queued job and starts its
/// run in one go — read the job, write the attempt row, then one update
/// that both claims the job and fences it on the attempt (where a claim
/// then a [`start`] would update the row twice and read it once more). Its
/// three statements are taken from the connection's cache once, for a
/// whole batch.
pub(crate) struct Starts<'c> {
    conn: &'c Connection,
    read: CachedStatement<'c>,
    attempt: CachedStatement<'c>,
    take: CachedStatement<'c>,
}

impl<'c> Starts<'c> {
    /// Prepares (or takes from the cache) the statements.
    pub(crate) fn new(conn: &'c Connection) -> Result<Starts<'c>> {
        // Still queued, due, and as suspect as when the claim chose it: a
        // job started a transaction after its claim chose it (see
        // `Take::Later`) may have been run, failed and requeued meanwhile
        // by another process.
        const READ: &str = "SELECT attempts, max_attempts, idempotency_key, queue, payload, \
             partition_key, timeout_ms FROM jobs \
             WHERE id = ?1 AND state = 'queued' AND run_at <= ?2 AND abandoned = ?3";
        const TAKE_FENCED: &str = "UPDATE jobs SET state = 'running', lease_owner = ?2, \
             lease_expires_at = ?3, attempts = ?4, current_attempt = ?5 \
             WHERE id = ?1 AND state = 'queued'";
        Ok(Starts {
            conn,
            read: conn.prepare_cached(READ)?,
            attempt: history::start_statement(conn)?,
            take: conn.prepare_cached(TAKE_FENCED)?,
        })
    }

    /// Claims job `c` for `owner` until `lease_until` and starts its run,
    /// the attempt run by `worker`. None if it is not queued, due and as
    /// abandoned as `c` says (any more).
    pub(crate) fn start(
        &mut self,
        c: &Claimed,
        owner: &str,
        lease_until: Millis,
        worker: &str,
        now: Millis,
    ) -> Result<Option<Started>> {
        let job_id = c.id;
        let params = rusqlite::params![job_id, now, c.abandoned];
        let Some(row) = StartRow::read(&mut self.read, params, false)? else {
            return Ok(None);
        };
        let st = row.start(&mut self.attempt, self.conn, job_id, worker, now)?;
        let taken = self.take.execute(rusqlite::params![
            job_id,
            owner,
            lease_until,
            st.attempt,
            st.attempt_id
        ])?;
        if taken != 1 {
            // Read as queued a moment ago in this transaction: cannot
            // happen. Fail the operation, so its transaction (the attempt
            // row with it) is undone.
            return Err(crate::error::Error::Internal(format!(
                "job {job_id} changed between its read and its claim"
            )));
        }
        if c.rated {
            controls::record_start(self.conn, &st.queue, st.partition.as_deref(), now)?;
        }
        Ok(Some(st))
    }
}

/// What a start reads of its job, before it writes the attempt row.
struct StartRow {
    /// Attempts charged so far.
    charged: i64,
    max_attempts: i64,
    key: String,
    queue: String,
    payload: String,
    partition: Option<String>,
    timeout_ms: Option<i64>,
    /// Its queue is paused (read only by a [`start`] of a claimed job).
    paused: bool,
}

impl StartRow {
    /// The job's row by `read` (fenced as the caller needs, with `params`),
    /// if it is there. With `paused`, the read's eighth column says
    /// whether the job's queue is paused.
    fn read(
        read: &mut CachedStatement<'_>,
        params: impl rusqlite::Params,
        paused: bool,
    ) -> Result<Option<StartRow>> {
        // Text read leniently: a row written by hand with bytes that are not
        // UTF-8 must not make every start fail (a failing light operation
        // undoes the light operations of its transaction: a claim and every
        // start in it, the other workers' starts with them).
        let text = |r: &rusqlite::Row<'_>, i: usize| -> rusqlite::Result<String> {
            Ok(
                String::from_utf8_lossy(r.get_ref(i)?.as_bytes_or_null()?.unwrap_or_default())
                    .into_owned(),
            )
        };
        let mut rows = read.query(params)?;
        let Some(r) = rows.next()? else {
            return Ok(None);
        };
        Ok(Some(StartRow {
            charged: r.get(0)?,
            max_attempts: r.get(1)?,
            key: text(r, 2)?,
            queue: text(r, 3)?,
            payload: text(r, 4)?,
            partition: r.get(5)?,
            timeout_ms: r.get(6)?,
            paused: paused && r.get(7)?,
        }))
    }

    /// Writes the attempt row with `attempt_row`, charging the next
    /// attempt. The caller then fences the job on it.
    fn start(
        self,
        attempt_row: &mut CachedStatement<'_>,
        conn: &Connection,
        job_id: i64,
        worker: &str,
        now: Millis,
    ) -> Result<Started> {
        let attempt = self.charged + 1;
        let attempt_id = history::start(
            attempt_row,
            conn,
            history::RunOf::Job(job_id),
            attempt,
            &self.key,
            worker,
            now,
        )?;
        Ok(Started {
            attempt_id,
            attempt,
            max_attempts: self.max_attempts,
            key: self.key,
            queue: self.queue,
            payload: self.payload,
            partition: self.partition,
            timeout_ms: self.timeout_ms,
        })
    }
}

/// A run that started: its attempt row is written and the job is fenced on
/// it. Its start commits (a light commit) before any of its user code runs;
/// its apply step gets it by value.
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub attempt_id: i64,
    pub attempt: i64,
    pub max_attempts: i64,
    pub key: String,
    pub queue: String,
    pub payload: String,
    /// Its partition of the queue, if it has one.
    pub partition: Option<String>,
    /// Its own timeout (`jobs.timeout_ms`), if it has one.
    pub timeout_ms: Option<i64>,
}

/// Starts the run of a job `owner` claimed: charges an attempt, writes the
/// attempt row and fences the job on it; records the start of a `rated`
/// queue (see [`Claimed::rated`]). None when the claim was lost meanwhile,
/// or when its queue was paused since the claim: then the claim goes back,
/// uncharged, since a paused queue starts nothing new.
pub(crate) fn start(
    conn: &Connection,
    job_id: i64,
    owner: &str,
    worker: &str,
    rated: bool,
    now: Millis,
) -> Result<Option<Started>> {
    // The lease is not renewed here: the claim set it and the supervisor
    // renews every held lease (claimed or started) every lease/3. Leaving
    // lease_expires_at alone spares an update of the jobs_lease index.
    // Three one-row statements: read the job (fenced on the claim: still
    // running under `owner`, not started), write the attempt row, fence the
    // job on it. Not `INSERT … SELECT` (a statement journal for one row)
    // nor `UPDATE … RETURNING` (a temporary b-tree per start).
    // Its queue's pause read in the same statement: one key lookup in a
    // table that holds only the controlled queues.
    const READ: &str = "SELECT attempts, max_attempts, idempotency_key, queue, payload, \
         partition_key, timeout_ms, \
         EXISTS (SELECT 1 FROM queues q WHERE q.name = jobs.queue AND q.paused = 1) FROM jobs \
         WHERE id = ?1 AND state = 'running' AND lease_owner = ?2 AND current_attempt IS NULL";
    const FENCE: &str = "UPDATE jobs SET attempts = ?2, current_attempt = ?3 WHERE id = ?1";
    let params = rusqlite::params![job_id, owner];
    let Some(row) = StartRow::read(&mut conn.prepare_cached(READ)?, params, true)? else {
        return Ok(None);
    };
    if row.paused {
        crate::sqlite::leases::release(conn, job_id, owner, None, "its queue was paused", now)?;
        return Ok(None);
    }
    let st = row.start(
        &mut history::start_statement(conn)?,
        conn,
        job_id,
        worker,
        now,
    )?;
    conn.prepare_cached(FENCE)?
        .execute(rusqlite::params![job_id, st.attempt, st.attempt_id])?;
    if rated {
        controls::record_start(conn, &st.queue, st.partition.as_deref(), now)?;
    }
    Ok(Some(st))
}

/// Whether any job of `kinds` (a JSON list; in `queues_json`, if given) is
/// due at `now`: a reader's look before a claim, since an idle poll must
/// not write.
pub(crate) fn any_due(
    conn: &Connection,
    kinds_json: &str,
    queues_json: Option<&str>,
    now: Millis,
) -> Result<bool> {
    const SQL: &str = "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued' AND run_at <= ?1 \
         AND kind IN (SELECT value FROM json_each(?2)) \
         AND (?3 IS NULL OR queue IN (SELECT value FROM json_each(?3))))";
    Ok(conn
        .prepare_cached(SQL)?
        .query_row(rusqlite::params![now, kinds_json, queues_json], |r| {
            r.get(0)
        })?)
}

#[cfg(test)]
mod tests;
