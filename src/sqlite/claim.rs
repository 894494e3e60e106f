//! Leases on jobs: claim a batch, start a run, renew, reap expired leases,
//! release at shutdown. Writes `jobs` (state and lease columns) and
//! `attempts` (through the history module).

use rusqlite::{CachedStatement, Connection};

use crate::core::attempt::AttemptOutcome;
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
    /// Its queue is rate-limited: its start is recorded in `queue_starts`
    /// (see the controls module), in the start's transaction.
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
    /// Leave it queued for now: the caller starts it with
    /// [`Starter::take_and_start`] in a moment (a later transaction of the
    /// cycle).
    Later(W, String),
}

/// What a claim took.
pub(crate) struct Batch<W> {
    pub taken: Vec<Taken<W>>,
    /// Left for [`Starter::take_and_start`], in priority order.
    pub later: Vec<(Claimed, W, String)>,
    /// Jobs were left queued because their queue's cap or rate was full: a
    /// run of it ending frees a slot worth claiming at once.
    pub held_back: bool,
    /// When a full rate's window next frees a start, if one held jobs back.
    pub frees_at: Option<Millis>,
}

/// A job the claim's query found: `(priority, run_at, id, kind index,
/// abandoned, queue)`; the queue is read only when controls are in force.
type Candidate = (i64, i64, i64, usize, i64, Option<String>);

/// Claims up to `limit` runnable jobs of `kinds` (and `queues`, if given), in
/// priority order, for `owner` until `lease_until`; `decide` says what to do
/// with each (see [`Take`]), knowing whether the batch holds jobs of
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
/// meanwhile. At most `for_workers` such jobs are claimed for the workers
/// to start (`Take::Claim`): the workers free to start one now. More would
/// wait in the buffer holding their slots while another process's workers
/// sat idle.
#[allow(clippy::too_many_arguments)]
// Long: one claim transaction, read, decide and write in order, under one lock.
pub(crate) fn claim_batch<W>(
    conn: &Connection,
    kinds: &[String],
    queues_json: Option<&str>,
    limit: usize,
    for_workers: usize,
    owner: &str,
    lease_until: Millis,
    now: Millis,
    mut decide: impl FnMut(&Claimed, bool, bool) -> Take<W>,
) -> Result<Batch<W>> {
    // One index seek per kind on jobs_claim (kind, priority, run_at, id),
    // then a merge: O(kinds × (log n + limit)) however many jobs have
    // finished or wait for other kinds. A single `kind IN (...) ORDER BY
    // priority` query would have to sort every queued job of those kinds.
    // The LIMIT is written into the SQL, not bound: SQLite (built with
    // STAT4) re-prepares a statement every time a bound LIMIT changes, which
    // cost ~5 % of the writer's time. Rounded up to a power of two, so a
    // handful of texts stay prepared; the merge below takes `limit`.
    let cap = limit.max(1).next_power_of_two();
    let candidates_sql = format!(
        "SELECT id, priority, run_at, abandoned, queue FROM jobs \
         WHERE state = 'queued' AND kind = ?1 AND run_at <= ?2 \
         AND (?3 IS NULL OR queue IN (SELECT value FROM json_each(?3))) \
         AND (?4 IS NULL OR queue NOT IN (SELECT value FROM json_each(?4))) \
         ORDER BY priority, run_at, id LIMIT {cap}"
    );
    const TAKE: &str =
        "UPDATE jobs SET state = 'running', lease_owner = ?2, lease_expires_at = ?3 \
         WHERE id = ?1 AND state = 'queued'";
    let mut gate = controls::Gate::read(conn)?;
    let candidates = {
        let mut st = conn.prepare_cached(&candidates_sql)?;
        let mut find = |skipped: Option<&str>, with_queue: bool| -> Result<Vec<Candidate>> {
            let mut found: Vec<Candidate> = Vec::new();
            for (k, kind) in kinds.iter().enumerate() {
                let rows =
                    st.query_map(rusqlite::params![kind, now, queues_json, skipped], |r| {
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
            let mut found = find(None, false)?;
            found.truncate(limit);
            found
        } else {
            let mut kept = Vec::new();
            loop {
                let mut found = find(gate.skipped_json().as_deref(), true)?;
                found.append(&mut kept);
                found.sort_unstable();
                match gate.choose(conn, found, limit, now, |c| c.5.as_deref().unwrap_or(""))? {
                    controls::Chosen::Done(chosen) => break chosen,
                    controls::Chosen::Again(full) => kept = full,
                }
            }
        }
    };
    let worst = candidates.last().map_or(0, |c| c.0);
    let split = candidates.first().is_some_and(|c| c.0 < worst);
    let mut batch = Batch {
        taken: Vec::with_capacity(candidates.len()),
        later: Vec::new(),
        held_back: gate.held_back,
        frees_at: gate.wake_at,
    };
    let mut take = conn.prepare_cached(TAKE)?;
    let mut starter: Option<Starter<'_>> = None;
    let mut for_workers = for_workers;
    for (priority, _, id, k, abandoned, queue) in candidates {
        let limits = queue.as_deref().and_then(|q| gate.limits(q));
        let limited = limits.is_some_and(crate::core::controls::Limits::limited);
        let c = Claimed {
            id,
            kind: kinds[k].clone(),
            abandoned,
            rated: limits.is_some_and(|l| l.rate.is_some()),
        };
        let decided = match decide(&c, split, priority < worst) {
            Take::Later(token, worker) if limited => Take::Start(token, worker),
            other => other,
        };
        match decided {
            Take::Start(token, worker) => {
                let starter = match &mut starter {
                    Some(s) => s,
                    None => starter.insert(Starter::new(conn)?),
                };
                if let Some(st) = starter.take_and_start(&c, owner, lease_until, &worker, now)? {
                    batch.taken.push((c, Some((st, token))));
                }
            }
            Take::Later(token, worker) => batch.later.push((c, token, worker)),
            Take::Claim if limited && for_workers == 0 => batch.held_back = true,
            Take::Claim => {
                if limited {
                    for_workers -= 1;
                }
                if take.execute(rusqlite::params![id, owner, lease_until])? == 1 {
                    batch.taken.push((c, None));
                }
            }
        }
    }
    Ok(batch)
}

/// Claims queued jobs and starts their runs, each in one go: read it, write
/// the attempt row, then one update of the job that both claims it and
/// fences it on the attempt (where a claim then a [`start`] would update
/// the row twice and read it once more). Its three statements are taken
/// from the connection's cache once, for a whole batch.
pub(crate) struct Starter<'c> {
    conn: &'c Connection,
    read: CachedStatement<'c>,
    attempt: CachedStatement<'c>,
    take: CachedStatement<'c>,
}

impl<'c> Starter<'c> {
    /// Prepares (or takes from the cache) the statements.
    pub(crate) fn new(conn: &'c Connection) -> Result<Starter<'c>> {
        // Still queued, due, and as suspect as when the claim chose it: a
        // job started a transaction after its claim chose it (see
        // `Take::Later`) may have been run, failed and requeued meanwhile
        // by another process.
        const READ: &str = "SELECT attempts, max_attempts, idempotency_key, queue, payload \
             FROM jobs WHERE id = ?1 AND state = 'queued' AND run_at <= ?2 AND abandoned = ?3";
        const TAKE_FENCED: &str = "UPDATE jobs SET state = 'running', lease_owner = ?2, \
             lease_expires_at = ?3, attempts = ?4, current_attempt = ?5 \
             WHERE id = ?1 AND state = 'queued'";
        Ok(Starter {
            conn,
            read: conn.prepare_cached(READ)?,
            attempt: history::start_statement(conn)?,
            take: conn.prepare_cached(TAKE_FENCED)?,
        })
    }

    /// Claims and starts job `c` for `owner` until `lease_until`, its
    /// attempt run by `worker`. None if it is not queued, due and as
    /// abandoned as `c` says (any more).
    pub(crate) fn take_and_start(
        &mut self,
        c: &Claimed,
        owner: &str,
        lease_until: Millis,
        worker: &str,
        now: Millis,
    ) -> Result<Option<Started>> {
        let job_id = c.id;
        let Begun::Started(st) = begin_run(
            &mut self.read,
            &mut self.attempt,
            self.conn,
            rusqlite::params![job_id, now, c.abandoned],
            None,
            job_id,
            worker,
            now,
        )?
        else {
            return Ok(None);
        };
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
            controls::record_start(self.conn, &st.queue, now)?;
        }
        Ok(Some(st))
    }
}

/// What [`begin_run`] found.
enum Begun {
    Started(Started),
    /// The read found no job (the claim or the job changed meanwhile).
    Missing,
    /// The job's queue is paused: nothing written.
    Paused,
}

/// The part of a start both kinds share: reads the job by `read` (fenced
/// as the caller needs, with `params`), writes its attempt row. The caller
/// then fences the job on the attempt. With `paused_col`, the read's
/// column of that index says whether the job's queue is paused, and a
/// paused one is not started.
#[allow(clippy::too_many_arguments)]
fn begin_run(
    read: &mut CachedStatement<'_>,
    attempt_row: &mut CachedStatement<'_>,
    conn: &Connection,
    params: impl rusqlite::Params,
    paused_col: Option<usize>,
    job_id: i64,
    worker: &str,
    now: Millis,
) -> Result<Begun> {
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
    let row: Option<(i64, i64, String, String, String, bool)> = {
        let mut rows = read.query(params)?;
        match rows.next()? {
            Some(r) => Some((
                r.get(0)?,
                r.get(1)?,
                text(r, 2)?,
                text(r, 3)?,
                text(r, 4)?,
                match paused_col {
                    Some(i) => r.get(i)?,
                    None => false,
                },
            )),
            None => None,
        }
    };
    let Some((charged, max_attempts, key, queue, payload, paused)) = row else {
        return Ok(Begun::Missing);
    };
    if paused {
        return Ok(Begun::Paused);
    }
    let attempt = charged + 1;
    let attempt_id = history::start(
        attempt_row,
        conn,
        history::RunOf::Job(job_id),
        attempt,
        &key,
        worker,
        now,
    )?;
    Ok(Begun::Started(Started {
        attempt_id,
        attempt,
        max_attempts,
        key,
        queue,
        payload,
    }))
}

/// A run that started: its attempt row is written and the job is fenced on it.
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub attempt_id: i64,
    pub attempt: i64,
    pub max_attempts: i64,
    pub key: String,
    pub queue: String,
    pub payload: String,
}

/// Starts the run of a claimed job: charges an attempt, writes the attempt
/// row and fences the job on it; records the start of a `rated` queue (see
/// [`Claimed::rated`]). None when the claim was lost meanwhile, or when its
/// queue was paused since the claim: then the claim goes back, uncharged,
/// since a paused queue starts nothing new.
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
         EXISTS (SELECT 1 FROM queues q WHERE q.name = jobs.queue AND q.paused = 1) FROM jobs \
         WHERE id = ?1 AND state = 'running' AND lease_owner = ?2 AND current_attempt IS NULL";
    const FENCE: &str = "UPDATE jobs SET attempts = ?2, current_attempt = ?3 WHERE id = ?1";
    let st = match begin_run(
        &mut conn.prepare_cached(READ)?,
        &mut history::start_statement(conn)?,
        conn,
        rusqlite::params![job_id, owner],
        Some(5),
        job_id,
        worker,
        now,
    )? {
        Begun::Started(st) => st,
        Begun::Missing => return Ok(None),
        Begun::Paused => {
            release(conn, job_id, owner, None, "its queue was paused", now)?;
            return Ok(None);
        }
    };
    conn.prepare_cached(FENCE)?
        .execute(rusqlite::params![job_id, st.attempt, st.attempt_id])?;
    if rated {
        controls::record_start(conn, &st.queue, now)?;
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

/// Whether any job or outbox row's lease expired before `now`: a reader's
/// look before reaping.
pub(crate) fn any_expired(conn: &Connection, now: Millis) -> Result<bool> {
    const SQL: &str =
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires_at < ?1) \
         OR EXISTS (SELECT 1 FROM outbox WHERE state = 'sending' AND lease_expires_at < ?1)";
    Ok(conn.prepare_cached(SQL)?.query_row([now], |r| r.get(0))?)
}

/// Extends the leases `owner` holds on the given jobs.
pub(crate) fn heartbeat(
    conn: &Connection,
    owner: &str,
    ids_json: &str,
    until: Millis,
) -> Result<usize> {
    const SQL: &str =
        "UPDATE jobs SET lease_expires_at = ?3 WHERE state = 'running' AND lease_owner = ?1 \
                       AND id IN (SELECT value FROM json_each(?2))";
    Ok(conn
        .prepare_cached(SQL)?
        .execute(rusqlite::params![owner, ids_json, until])?)
}

/// The message a poison pill dies with.
pub(crate) fn poison_message(abandoned: i64) -> String {
    format!("abandoned {abandoned} times: the process died while running it (poison pill?)")
}

/// Takes back jobs whose lease ran out (the process died, or the run hung
/// past its lease). A claimed-but-unstarted job goes back to `queued`
/// uncharged. A started run is recorded `abandoned`; it does not use up
/// `max_retries`, but the `max_abandoned`-th abandoned run makes the job
/// `dead` as a poison pill. Returns how many jobs were taken back.
pub(crate) fn reap_expired(conn: &Connection, now: Millis, max_abandoned: i64) -> Result<usize> {
    let expired: Vec<(i64, Option<i64>, i64)> = conn
        .prepare_cached(
            "SELECT id, current_attempt, abandoned FROM jobs \
             WHERE state = 'running' AND lease_expires_at < ?1 LIMIT 500",
        )?
        .query_map([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, attempt, abandoned) in &expired {
        match attempt {
            None => {
                conn.prepare_cached(
                    "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1",
                )?
                .execute([id])?;
            }
            Some(a) => {
                history::finish(
                    conn,
                    *a,
                    AttemptOutcome::Abandoned,
                    Some("abandoned: the lease expired (the process died or the run hung past its lease)"),
                    now,
                )?;
                let total = abandoned + 1;
                if total >= max_abandoned {
                    conn.prepare_cached(
                        "UPDATE jobs SET state = 'dead', abandoned = ?2, attempts = max(attempts - 1, 0), \
                         last_error = ?3, finished_at = ?4, lease_owner = NULL, lease_expires_at = NULL, \
                         current_attempt = NULL WHERE id = ?1",
                    )?
                    .execute(rusqlite::params![id, total, poison_message(total), now])?;
                    log::warn!(target: "litejob", job_id = *id, abandoned = total; "job is dead: {}", poison_message(total));
                } else {
                    conn.prepare_cached(
                        "UPDATE jobs SET state = 'queued', abandoned = ?2, attempts = max(attempts - 1, 0), \
                         run_at = ?3, last_error = 'abandoned: the lease expired', lease_owner = NULL, \
                         lease_expires_at = NULL, current_attempt = NULL WHERE id = ?1",
                    )?
                    .execute(rusqlite::params![id, total, now])?;
                }
            }
        }
    }
    Ok(expired.len())
}

/// Gives a job back to `queued` without charging it: a claimed job never
/// started (`attempt` None) or a run cut short by shutdown (recorded
/// `released`). Fenced on the lease. Returns false when the job was no
/// longer ours.
pub(crate) fn release(
    conn: &Connection,
    job_id: i64,
    owner: &str,
    attempt: Option<i64>,
    reason: &str,
    now: Millis,
) -> Result<bool> {
    match attempt {
        None => Ok(conn
            .prepare_cached(
                "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL \
                 WHERE id = ?1 AND state = 'running' AND lease_owner = ?2 AND current_attempt IS NULL",
            )?
            .execute(rusqlite::params![job_id, owner])?
            == 1),
        Some(a) => {
            let n = conn
                .prepare_cached(
                    "UPDATE jobs SET state = 'queued', attempts = max(attempts - 1, 0), lease_owner = NULL, \
                     lease_expires_at = NULL, current_attempt = NULL \
                     WHERE id = ?1 AND state = 'running' AND current_attempt = ?2",
                )?
                .execute(rusqlite::params![job_id, a])?;
            if n == 1 {
                history::finish(conn, a, AttemptOutcome::Released, Some(reason), now)?;
            }
            Ok(n == 1)
        }
    }
}

#[cfg(test)]
mod tests {
    //! Claims, starts, lease expiry and reaping with the clock as a
    //! parameter: every `now` is a number the test picks, nothing sleeps.

    use super::*;
    use crate::core::job::{Enqueued, NewJob};
    use crate::sqlite::sql_check::fresh_file as fresh;

    /// A moment in the file's unit; the tests move it by hand.
    const T0: Millis = 1_000_000;
    const LEASE: Millis = 30_000;
    const OWNER: &str = "1/test";

    /// Enqueues job `key` of kind `k`, due at `run_at`, with two attempts.
    fn enqueue(conn: &Connection, key: &str, run_at: Millis) -> i64 {
        let job = crate::core::validate::into_valid(NewJob::new("k", key, &0), run_at, 2);
        match crate::sqlite::enqueue::insert(conn, &job, T0).unwrap() {
            Enqueued::New(id) => id,
            other => panic!("{key}: {other:?}"),
        }
    }

    /// Claims everything due at `now` for [`OWNER`], leased until now + LEASE.
    fn claim(conn: &Connection, now: Millis) -> Vec<i64> {
        let batch = claim_batch::<()>(
            conn,
            &["k".to_string()],
            None,
            10,
            usize::MAX,
            OWNER,
            now + LEASE,
            now,
            |_, _, _| Take::Claim,
        )
        .unwrap();
        batch.taken.iter().map(|(c, _)| c.id).collect()
    }

    /// `(state, attempts, abandoned, lease_expires_at, current_attempt)`.
    fn job(conn: &Connection, id: i64) -> (String, i64, i64, Option<i64>, Option<i64>) {
        conn.query_row(
            "SELECT state, attempts, abandoned, lease_expires_at, current_attempt \
             FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap()
    }

    fn outcomes(conn: &Connection, id: i64) -> Vec<String> {
        let sql = "SELECT outcome FROM attempts WHERE job_id = ?1 ORDER BY id";
        let mut st = conn.prepare(sql).unwrap();
        let rows = st.query_map([id], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn a_claim_takes_due_jobs_only_and_leases_them_until_now_plus_the_lease() {
        let (_dir, conn) = fresh();
        let due = enqueue(&conn, "due", T0);
        let later = enqueue(&conn, "later", T0 + 5_000);
        assert_eq!(claim(&conn, T0), [due]);
        assert_eq!(
            job(&conn, due),
            ("running".into(), 0, 0, Some(T0 + LEASE), None)
        );
        assert_eq!(job(&conn, later).0, "queued");
        // One millisecond early it still waits; at its run_at it is due.
        assert!(claim(&conn, T0 + 4_999).is_empty());
        assert_eq!(claim(&conn, T0 + 5_000), [later]);
    }

    #[test]
    fn a_claim_charges_nothing_until_the_run_starts() {
        let (_dir, conn) = fresh();
        let id = enqueue(&conn, "a", T0);
        claim(&conn, T0);
        assert_eq!(job(&conn, id).1, 0);
        assert!(outcomes(&conn, id).is_empty());
        let st = start(&conn, id, OWNER, "w", false, T0 + 1)
            .unwrap()
            .unwrap();
        assert_eq!(st.attempt, 1);
        let (state, attempts, _, lease, current) = job(&conn, id);
        assert_eq!((state.as_str(), attempts), ("running", 1));
        assert_eq!(current, Some(st.attempt_id));
        // A start keeps the claim's lease: renewing it is the heartbeat's.
        assert_eq!(lease, Some(T0 + LEASE));
        assert_eq!(outcomes(&conn, id), ["running"]);
        // Another owner cannot start it, nor start it twice.
        assert!(start(&conn, id, "2/other", "w", false, T0 + 2)
            .unwrap()
            .is_none());
        assert!(start(&conn, id, OWNER, "w", false, T0 + 2)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_lease_holds_through_its_last_millisecond_and_is_reaped_after_it() {
        let (_dir, conn) = fresh();
        let id = enqueue(&conn, "a", T0);
        claim(&conn, T0);
        start(&conn, id, OWNER, "w", false, T0).unwrap().unwrap();
        // The lease is `lease_expires_at >= now`: valid at T0 + LEASE.
        assert_eq!(reap_expired(&conn, T0 + LEASE - 1, 3).unwrap(), 0);
        assert_eq!(reap_expired(&conn, T0 + LEASE, 3).unwrap(), 0);
        assert_eq!(job(&conn, id).0, "running");
        assert_eq!(reap_expired(&conn, T0 + LEASE + 1, 3).unwrap(), 1);
        // Abandoned, back to queued, due at once, not charged.
        assert_eq!(job(&conn, id), ("queued".into(), 0, 1, None, None));
        let (run_at, err): (i64, String) = conn
            .query_row(
                "SELECT run_at, last_error FROM jobs WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(run_at, T0 + LEASE + 1);
        assert!(err.contains("lease expired"), "{err}");
        assert_eq!(outcomes(&conn, id), ["abandoned"]);
        // Reaping again finds nothing.
        assert_eq!(reap_expired(&conn, T0 + 10 * LEASE, 3).unwrap(), 0);
    }

    #[test]
    fn a_heartbeat_moves_the_expiry_and_a_reaped_run_cannot_start() {
        let (_dir, conn) = fresh();
        let (a, b) = (enqueue(&conn, "a", T0), enqueue(&conn, "b", T0));
        claim(&conn, T0);
        let ids = format!("[{a}]");
        assert_eq!(heartbeat(&conn, OWNER, &ids, T0 + 2 * LEASE).unwrap(), 1);
        assert_eq!(
            heartbeat(&conn, "2/other", &ids, T0 + 9 * LEASE).unwrap(),
            0
        );
        assert_eq!(job(&conn, a).3, Some(T0 + 2 * LEASE));
        // Only b's lease ran out. A claimed job never started goes back
        // without an attempt row.
        assert_eq!(reap_expired(&conn, T0 + LEASE + 1, 3).unwrap(), 1);
        assert_eq!(job(&conn, a).0, "running");
        assert_eq!(job(&conn, b), ("queued".into(), 0, 0, None, None));
        assert!(outcomes(&conn, b).is_empty());
        // Its old claim is gone: starting it under that claim finds nothing.
        assert!(start(&conn, b, OWNER, "w", false, T0 + LEASE + 2)
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_max_abandoned_th_abandoned_run_makes_a_poison_pill_dead() {
        let (_dir, conn) = fresh();
        let id = enqueue(&conn, "pill", T0);
        let mut now = T0;
        for n in 1..=3 {
            assert_eq!(claim(&conn, now), [id], "run {n}");
            start(&conn, id, OWNER, "w", false, now).unwrap().unwrap();
            now += LEASE + 1;
            assert_eq!(reap_expired(&conn, now, 3).unwrap(), 1);
            let (state, attempts, abandoned, _, _) = job(&conn, id);
            assert_eq!(abandoned, n);
            // Never charged: a crash is not the job's failure.
            assert_eq!(attempts, 0);
            assert_eq!(state, if n < 3 { "queued" } else { "dead" }, "run {n}");
        }
        let (err, finished): (String, i64) = conn
            .query_row(
                "SELECT last_error, finished_at FROM jobs WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(err, poison_message(3));
        assert_eq!(finished, now);
        assert_eq!(outcomes(&conn, id), ["abandoned"; 3]);
        assert!(claim(&conn, now + 1).is_empty());
    }

    /// Enqueues job `key` in `queue` at `priority`, due at T0.
    fn enqueue_in(conn: &Connection, queue: &str, key: &str, priority: i64) -> i64 {
        let job = NewJob::new("k", key, &0)
            .with_queue(queue)
            .with_priority(priority);
        let job = crate::core::validate::into_valid(job, T0, 2);
        crate::sqlite::enqueue::insert(conn, &job, T0).unwrap().id()
    }

    /// Claims up to `limit` at `now` for `owner`, each as `take` says;
    /// the ids, and whether a control held jobs back.
    fn claim_as(
        conn: &Connection,
        owner: &str,
        limit: usize,
        now: Millis,
        take: fn() -> Take<()>,
    ) -> (Vec<i64>, bool) {
        let batch = claim_batch::<()>(
            conn,
            &["k".to_string()],
            None,
            limit,
            usize::MAX,
            owner,
            now + LEASE,
            now,
            |_, _, _| take(),
        )
        .unwrap();
        let ids = batch.taken.iter().map(|(c, _)| c.id).collect();
        (ids, batch.held_back)
    }

    fn set(
        conn: &Connection,
        queue: &str,
        paused: Option<bool>,
        l: crate::core::controls::QueueLimits,
    ) {
        crate::sqlite::controls::change(conn, queue, paused, &l, T0).unwrap();
    }

    #[test]
    fn a_paused_queue_gives_nothing_and_the_others_go_on() {
        let (_dir, conn) = fresh();
        let held = enqueue_in(&conn, "held", "h", 0);
        let free = enqueue_in(&conn, "free", "f", 5);
        set(
            &conn,
            "held",
            Some(true),
            crate::core::controls::QueueLimits::new(),
        );
        assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [free]);
        set(
            &conn,
            "held",
            Some(false),
            crate::core::controls::QueueLimits::new(),
        );
        assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [held]);
    }

    #[test]
    fn a_cap_counts_claimed_ahead_jobs_across_owners_until_their_lease_expires() {
        let (_dir, conn) = fresh();
        let ids: Vec<i64> = (0..5)
            .map(|i| enqueue_in(&conn, "capped", &format!("c{i}"), 0))
            .collect();
        set(
            &conn,
            "capped",
            None,
            crate::core::controls::QueueLimits::new().concurrency(2),
        );
        // A claim asking for 10 takes the 2 slots, in priority order.
        let (first, held) = claim_as(&conn, OWNER, 10, T0, || Take::Claim);
        assert_eq!(first, ids[..2]);
        assert!(held);
        // Claimed, not started: they hold the slots against another owner.
        assert!(claim_as(&conn, "2/other", 10, T0 + 1, || Take::Claim)
            .0
            .is_empty());
        // A run that ends frees its slot.
        conn.execute(
            "UPDATE jobs SET state = 'succeeded', finished_at = ?2, lease_owner = NULL, \
                      lease_expires_at = NULL WHERE id = ?1",
            rusqlite::params![ids[0], T0 + 2],
        )
        .unwrap();
        assert_eq!(
            claim_as(&conn, "2/other", 10, T0 + 2, || Take::Claim).0,
            [ids[2]]
        );
        // Once a lease has expired its slot counts no more, reaped or not.
        let later = T0 + LEASE + 1;
        let (got, _) = claim_as(&conn, "2/other", 10, later, || Take::Claim);
        assert_eq!(got.len(), 1, "{got:?}");
    }

    #[test]
    fn priority_order_holds_inside_a_capped_queue() {
        let (_dir, conn) = fresh();
        let low = enqueue_in(&conn, "capped", "low", 9);
        let high = enqueue_in(&conn, "capped", "high", 1);
        let mid = enqueue_in(&conn, "capped", "mid", 5);
        set(
            &conn,
            "capped",
            None,
            crate::core::controls::QueueLimits::new().concurrency(1),
        );
        let mut order = Vec::new();
        for n in 0..3 {
            let (got, _) = claim_as(&conn, OWNER, 10, T0 + n, || Take::Claim);
            assert_eq!(got.len(), 1);
            order.push(got[0]);
            conn.execute(
                "UPDATE jobs SET state = 'succeeded', finished_at = 1, lease_owner = NULL, \
                          lease_expires_at = NULL WHERE id = ?1",
                [got[0]],
            )
            .unwrap();
        }
        assert_eq!(order, [high, mid, low]);
    }

    #[test]
    fn a_full_queue_ahead_in_priority_does_not_crowd_out_the_others() {
        let (_dir, conn) = fresh();
        for i in 0..8 {
            enqueue_in(&conn, "capped", &format!("c{i}"), 0);
        }
        let free: Vec<i64> = (0..3)
            .map(|i| enqueue_in(&conn, "free", &format!("f{i}"), 5))
            .collect();
        set(
            &conn,
            "capped",
            None,
            crate::core::controls::QueueLimits::new().concurrency(1),
        );
        // The claim's first look (4 candidates) sees only the capped queue's
        // jobs; it looks again past the full queue.
        let (got, held) = claim_as(&conn, OWNER, 4, T0, || Take::Claim);
        assert_eq!(got.len(), 4);
        assert!(held);
        assert_eq!(got[1..], free[..]);
    }

    #[test]
    fn a_rate_counts_starts_and_claims_to_come_and_frees_them_after_the_window() {
        let (_dir, conn) = fresh();
        let ids: Vec<i64> = (0..8)
            .map(|i| enqueue_in(&conn, "rated", &format!("r{i}"), 0))
            .collect();
        let rate =
            crate::core::controls::Rate::new(3, std::time::Duration::from_millis(1000)).unwrap();
        set(
            &conn,
            "rated",
            None,
            crate::core::controls::QueueLimits::new().rate(rate),
        );
        let starts = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM queue_starts", [], |r| r.get(0))
                .unwrap()
        };
        // Two started in the claim (recorded), one claimed for a worker.
        let batch = claim_batch::<()>(
            &conn,
            &["k".to_string()],
            None,
            2,
            usize::MAX,
            OWNER,
            T0 + LEASE,
            T0,
            |_, _, _| Take::Start((), "w".into()),
        )
        .unwrap();
        assert_eq!(batch.taken.len(), 2);
        assert_eq!(starts(&conn), 2);
        let (claimed, _) = claim_as(&conn, OWNER, 10, T0 + 10, || Take::Claim);
        assert_eq!(claimed, [ids[2]]);
        // The claimed one is a start to come: nothing more now.
        let (none, held) = claim_as(&conn, OWNER, 10, T0 + 20, || Take::Claim);
        assert!(none.is_empty() && held);
        // Its worker's start is recorded at the start's time.
        start(&conn, ids[2], OWNER, "w", true, T0 + 500)
            .unwrap()
            .unwrap();
        assert_eq!(starts(&conn), 3);
        // The two first starts leave the window at T0 + 1000, the third at
        // T0 + 1500.
        assert!(claim_as(&conn, OWNER, 10, T0 + 999, || Take::Claim)
            .0
            .is_empty());
        let batch = claim_batch::<()>(
            &conn,
            &["k".to_string()],
            None,
            10,
            usize::MAX,
            OWNER,
            T0 + 1000 + LEASE,
            T0 + 1000,
            |_, _, _| Take::Start((), "w".into()),
        )
        .unwrap();
        assert_eq!(batch.taken.len(), 2);
        assert_eq!(batch.frees_at, Some(T0 + 1500));
        assert_eq!(starts(&conn), 5);
        // A claim deletes the rows a window older than the counted ones.
        claim_as(&conn, OWNER, 10, T0 + 2001, || Take::Claim);
        assert_eq!(starts(&conn), 3);
    }

    #[test]
    fn a_claim_takes_a_capped_queues_jobs_for_its_free_workers_only() {
        let (_dir, conn) = fresh();
        let ids: Vec<i64> = (0..6)
            .map(|i| enqueue_in(&conn, "capped", &format!("c{i}"), 0))
            .collect();
        set(
            &conn,
            "capped",
            None,
            crate::core::controls::QueueLimits::new().concurrency(6),
        );
        let claim = |for_workers: usize| {
            let batch = claim_batch::<()>(
                &conn,
                &["k".to_string()],
                None,
                10,
                for_workers,
                OWNER,
                T0 + LEASE,
                T0,
                |_, _, _| Take::Claim,
            )
            .unwrap();
            let ids: Vec<i64> = batch.taken.iter().map(|(c, _)| c.id).collect();
            (ids, batch.held_back)
        };
        // Two free workers: two of the six slots, the rest left to others.
        assert_eq!(claim(2), (ids[..2].to_vec(), true));
        assert_eq!(claim(0), (vec![], true));
        assert_eq!(claim(10).0, ids[2..]);
    }

    #[test]
    fn a_job_claimed_ahead_does_not_start_once_its_queue_is_paused() {
        let (_dir, conn) = fresh();
        let id = enqueue_in(&conn, "mail", "m", 0);
        assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [id]);
        set(
            &conn,
            "mail",
            Some(true),
            crate::core::controls::QueueLimits::new(),
        );
        assert!(start(&conn, id, OWNER, "w", false, T0 + 1)
            .unwrap()
            .is_none());
        // Back to queued, uncharged, with no attempt row.
        assert_eq!(job(&conn, id), ("queued".into(), 0, 0, None, None));
        assert!(outcomes(&conn, id).is_empty());
    }

    #[test]
    fn a_limited_queues_job_is_started_in_the_claim_never_left_for_later() {
        let (_dir, conn) = fresh();
        let capped = enqueue_in(&conn, "capped", "c", 5);
        let free = enqueue_in(&conn, "free", "f", 5);
        set(
            &conn,
            "capped",
            None,
            crate::core::controls::QueueLimits::new().concurrency(1),
        );
        let batch = claim_batch::<()>(
            &conn,
            &["k".to_string()],
            None,
            10,
            usize::MAX,
            OWNER,
            T0 + LEASE,
            T0,
            |_, _, _| Take::Later((), "w".into()),
        )
        .unwrap();
        let started: Vec<i64> = batch.taken.iter().map(|(c, _)| c.id).collect();
        let later: Vec<i64> = batch.later.iter().map(|(c, _, _)| c.id).collect();
        assert_eq!((started, later), (vec![capped], vec![free]));
        assert_eq!(job(&conn, capped).0, "running");
    }

    #[test]
    fn a_release_gives_the_job_back_uncharged_and_only_to_its_owner() {
        let (_dir, conn) = fresh();
        let (a, b) = (enqueue(&conn, "a", T0), enqueue(&conn, "b", T0));
        claim(&conn, T0);
        let st = start(&conn, b, OWNER, "w", false, T0).unwrap().unwrap();
        assert!(!release(&conn, a, "2/other", None, "stop", T0).unwrap());
        assert!(release(&conn, a, OWNER, None, "stop", T0).unwrap());
        assert!(release(&conn, b, OWNER, Some(st.attempt_id), "stop", T0).unwrap());
        assert_eq!(job(&conn, a), ("queued".into(), 0, 0, None, None));
        assert_eq!(job(&conn, b), ("queued".into(), 0, 0, None, None));
        assert_eq!(outcomes(&conn, b), ["released"]);
        // A second release of the same run changes nothing.
        assert!(!release(&conn, b, OWNER, Some(st.attempt_id), "stop", T0).unwrap());
    }
}
