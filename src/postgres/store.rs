//! A queue in a PostgreSQL database ([`PgStore`]): it owns the pool, the
//! notifier thread and the async API's threads, and implements the
//! driver's store on them; opened read-only, it has neither the notifier
//! nor a write. Writes every queue table, only through the engine's
//! modules.

use std::sync::Arc;
use std::time::Duration;

use crate::core::attempt::Attempt;
use crate::core::controls::{QueueControl, QueueLimits};
use crate::core::job::{Enqueued, Job, JobFilter};
use crate::core::options::{EngineKind, QueueOptions, Synchronous};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::reports::failures::Failures;
use crate::core::reports::overview::Overview;
use crate::core::reports::stats::{Explanation, JobDetail, Stats};
use crate::core::reports::tally::Tally;
use crate::core::reports::verify::VerifyReport;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::core::SCHEMA_VERSION;
use crate::driver::reply::Deliver;
use crate::driver::{PruneWhat, Store};
use crate::error::{Error, Result};

use super::conn::{pool_err, PgConn, Pool, Session};
use super::notify::{Clock, Notifier, NotifyHandle};
use super::{
    admin, conn, controls, enqueue, failures, group, leases, outbox, reads, run, schedules, schema,
    tally, tx,
};

/// Threads that run the async API's writes, so an executor's thread never
/// waits for the server.
const ASYNC_THREADS: usize = 4;

/// A queue in a PostgreSQL database.
pub struct PgStore {
    /// The options it was opened with (its workers' statement timeout and
    /// commit durability).
    pub(crate) opts: QueueOptions,
    /// The URL without its password.
    pub(crate) location: String,
    /// How every connection is opened and set up.
    pub(crate) session: Session,
    /// Producers' and readers' connections (workers have their own).
    pub(crate) pool: Pool,
    /// The server's clock, as an offset from this machine's.
    pub(crate) clock: Arc<Clock>,
    /// Sends the wake-ups other processes listen for, off the callers'
    /// path.
    pub(crate) notifier: Notifier,
    /// The queue controls in force, as this process's claims last read
    /// them.
    pub(crate) controls: controls::Cache,
    /// Producers calling at the same moment (the async API's threads
    /// too), inserted together.
    enqueues: Arc<group::Enqueuer>,
    /// The async API's writes, for its threads (closed on drop, which ends
    /// them; they hold no handle to the store).
    offload: Option<crossbeam_channel::Sender<Box<dyn FnOnce() + Send>>>,
    offload_threads: Vec<std::thread::JoinHandle<()>>,
    schema_version: i64,
    /// Opened read-only ([`PgStore::open_read_only`]): every session is
    /// `default_transaction_read_only`, and every write is refused here
    /// before anything is sent.
    read_only: bool,
}

/// What an async write needs of the store, lent to the thread that runs
/// it: the pool and the notifier's sender.
#[derive(Clone)]
pub(crate) struct PgHandle {
    pool: Pool,
    enqueues: Arc<group::Enqueuer>,
    notify: Option<NotifyHandle>,
}

impl PgHandle {
    /// [`Backend::enqueue`], on this thread.
    pub(crate) fn enqueue(&self, job: &ValidJob, now: Millis) -> Result<Enqueued> {
        let r = self.enqueues.enqueue(job.clone(), now)?;
        if !r.is_duplicate() {
            self.notify_jobs();
        }
        Ok(r)
    }

    /// [`Backend::enqueue_many`], on this thread.
    pub(crate) fn enqueue_many(&self, jobs: &[ValidJob], now: Millis) -> Result<Vec<Enqueued>> {
        let r = with_conn(&self.pool, true, |c| enqueue::insert_many(c, jobs, now))?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notify_jobs();
        }
        Ok(r)
    }

    /// Runs `f` in a transaction on a pooled connection and commits it;
    /// its result, and whether it enqueued a new job.
    pub(crate) fn write<R>(
        &self,
        rules: &crate::core::validate::EnqueueRules,
        now: Millis,
        f: impl FnOnce(&mut tx::PgWriteTx<'_, '_>) -> Result<R>,
    ) -> Result<(R, bool)> {
        let mut conn = self
            .pool
            .get()
            .map_err(|e| pool_err(e, self.pool.connection_timeout()))?;
        let insert = conn.stmt(enqueue::INSERT_ONE)?;
        let mut t = conn.client.transaction().map_err(conn::read_err)?;
        let mut w = tx::PgWriteTx {
            tx: &mut t,
            rules,
            now,
            insert: &insert,
            enqueued: false,
        };
        let r = f(&mut w)?;
        let enqueued = w.enqueued;
        tx::commit(t)?;
        if enqueued {
            self.notify_jobs();
        }
        Ok((r, enqueued))
    }

    fn notify_jobs(&self) {
        if let Some(n) = &self.notify {
            n.jobs();
        }
    }
}

/// Runs `f` on a connection of `pool`. When the connection turns out to be
/// broken, or the server rolled the call back (a deadlock), and `retry`
/// says the call is safe to repeat (a read, or an enqueue, which its key
/// makes safe), it runs again.
pub(crate) fn with_conn<R>(
    pool: &Pool,
    retry: bool,
    mut f: impl FnMut(&mut PgConn) -> Result<R>,
) -> Result<R> {
    let (mut tries, mut aborts) = (0, 0);
    loop {
        let mut conn = pool
            .get()
            .map_err(|e| pool_err(e, pool.connection_timeout()))?;
        match f(&mut conn) {
            Err(Error::Connection(_) | Error::OutcomeUnknown(_))
                if retry && conn.client.is_closed() && tries + 1 < CONNECTION_TRIES =>
            {
                tries += 1;
            }
            // The server rolled the statement back to break a deadlock
            // (two producers' batches taking the same new keys in other
            // orders): nothing of it was written.
            Err(Error::Aborted(_)) if retry && aborts + 1 < ABORTED_TRIES => {
                aborts += 1;
                drop(conn);
                // A few ms, more with each try and different per thread,
                // so two retries that crossed do not cross again.
                let spread =
                    crate::core::backoff::Rng::from_entropy().next_u64() % (5 * aborts as u64);
                std::thread::sleep(Duration::from_millis(1 + spread));
            }
            other => return other,
        }
    }
}

/// Tries of a retryable call that the server rolled back (a deadlock or
/// a serialization failure).
const ABORTED_TRIES: usize = 5;

/// Tries of a call that met a broken pooled connection (the server
/// restarted: every idle connection in the pool is dead, and each one that
/// fails is dropped).
const CONNECTION_TRIES: usize = 3;

/// The URL without its password, and how each connection to it is opened:
/// the client's settings from the URL, then `setup` and the lock timeout.
fn session(url: &str, opts: &QueueOptions, setup: String) -> Result<(String, Session)> {
    let mut config: postgres::Config = url.parse().map_err(|e| {
        Error::invalid(format!(
            "not a PostgreSQL URL ({e}): expected postgres://user:password@host:port/database"
        ))
    })?;
    let location = conn::redact(url);
    if config.get_application_name().is_none() {
        config.application_name("litejob");
    }
    config.connect_timeout(opts.busy_timeout.min(Duration::from_secs(10)));
    let session = Session {
        config,
        setup: format!(
            "{setup}; SET lock_timeout = '{}ms'",
            opts.busy_timeout.as_millis()
        ),
    };
    Ok((location, session))
}

/// An error of opening `location`, naming it.
fn located(location: String) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::Open(m) => Error::Open(format!("cannot open {location}: {m}")),
        Error::Connection(m) => Error::Connection(format!("{location}: {m}")),
        other => other,
    }
}

impl PgStore {
    /// Connects to `url`, creates or migrates the schema (refusing a newer
    /// one untouched) and starts the notifier.
    pub(crate) fn open(url: &str, opts: &QueueOptions) -> Result<PgStore> {
        let synchronous = match opts.synchronous {
            Synchronous::Full => "on",
            Synchronous::Normal => "off",
        };
        let (location, session) =
            session(url, opts, format!("SET synchronous_commit = {synchronous}"))?;
        let at = located(location.clone());
        let mut first = session.connect().map_err(&at)?;
        let schema_version = schema::migrate(&mut first.client).map_err(&at)?;
        let clock = Arc::new(Clock::default());
        clock.measure(&mut first)?;
        let pool = conn::pool(&session, opts.pool_size.max(1) * 4, opts.busy_timeout);
        let enqueues = Arc::new(group::Enqueuer::new(
            &session,
            pool.clone(),
            opts.busy_timeout,
        ));
        let notifier = Notifier::start(session.clone(), clock.clone())?;
        let (offload, jobs) = crossbeam_channel::unbounded::<Box<dyn FnOnce() + Send>>();
        let offload_threads = (1..=ASYNC_THREADS)
            .map(|i| {
                let jobs = jobs.clone();
                std::thread::Builder::new()
                    .name(format!("litejob-pg-async-{i}"))
                    .spawn(move || jobs.iter().for_each(|job| job()))
                    .map_err(Error::Io)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PgStore {
            opts: opts.clone(),
            location,
            session,
            pool,
            clock,
            notifier,
            controls: controls::Cache::default(),
            enqueues,
            offload: Some(offload),
            offload_threads,
            schema_version,
            read_only: false,
        })
    }

    /// Connects to `url` for reading only (see
    /// [`crate::queue::Queue::open_postgres_read_only`]): every connection's
    /// session is `default_transaction_read_only`, so the server itself
    /// refuses a write; the schema is never created or migrated (a database
    /// without litejob's tables, or with another version of them, is
    /// refused); no notifier and no async thread start.
    pub(crate) fn open_read_only(url: &str, opts: &QueueOptions) -> Result<PgStore> {
        let (location, session) = session(
            url,
            opts,
            "SET default_transaction_read_only = on".to_string(),
        )?;
        let at = located(location.clone());
        let mut first = session.connect().map_err(&at)?;
        let found = schema::read_version(&mut first.client).map_err(&at)?;
        if found == 0 {
            return Err(Error::NotADatabase(format!(
                "{location}: no litejob tables in this database (in the schema its search_path \
                 names); create them with `litejob --db URL init`, or name the schema that \
                 holds them (options=-csearch_path%3DSCHEMA in the URL)"
            )));
        }
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found < SCHEMA_VERSION {
            return Err(Error::Open(format!(
                "cannot open {location} read-only: its schema is version {found}, older than \
                 this litejob's {SCHEMA_VERSION}; open it once read-write (`litejob init`) to \
                 migrate it"
            )));
        }
        let clock = Arc::new(Clock::default());
        clock.measure(&mut first)?;
        let pool = conn::pool(&session, opts.pool_size.max(1) * 4, opts.busy_timeout);
        // Never used (every write is refused first); its pool opens no
        // connection until one is asked for.
        let enqueues = Arc::new(group::Enqueuer::new(
            &session,
            pool.clone(),
            opts.busy_timeout,
        ));
        Ok(PgStore {
            opts: opts.clone(),
            location,
            session,
            pool,
            clock,
            notifier: Notifier::none(),
            controls: controls::Cache::default(),
            enqueues,
            offload: None,
            offload_threads: Vec::new(),
            schema_version: found,
            read_only: true,
        })
    }

    /// A read-only store has no notifier to keep the server's clock: its
    /// reports measure it again when it is due.
    fn refresh_clock(&self, c: &mut PgConn) -> Result<()> {
        if self.read_only {
            self.clock.refresh(c)?;
        }
        Ok(())
    }

    /// [`Error::ReadOnly`] for a store opened read-only: every write asks
    /// this first, so nothing is sent to the server.
    pub(crate) fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(format!(
                "{} was opened read-only: nothing was sent to the server",
                self.location
            )));
        }
        Ok(())
    }

    /// Runs `f` on a pooled connection (see [`with_conn`]).
    pub(crate) fn with_conn<R>(
        &self,
        retry: bool,
        f: impl FnMut(&mut PgConn) -> Result<R>,
    ) -> Result<R> {
        with_conn(&self.pool, retry, f)
    }

    /// What a write on another thread needs of the store.
    pub(crate) fn handle(&self) -> PgHandle {
        PgHandle {
            pool: self.pool.clone(),
            enqueues: self.enqueues.clone(),
            notify: self.notifier.handle(),
        }
    }

    /// Runs `f` on one of the store's async threads and gives its answer to
    /// `sink`; the caller does not wait.
    pub(crate) fn offload<R, S>(
        &self,
        sink: S,
        f: impl FnOnce(&PgHandle) -> Result<R> + Send + 'static,
    ) where
        R: Send + 'static,
        S: crate::driver::reply::Sink<Result<R>>,
    {
        if let Err(e) = self.writable() {
            return sink.put(Err(e));
        }
        let h = self.handle();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || sink.put(f(&h)));
        if let Some(tx) = &self.offload {
            if let Err(e) = tx.send(job) {
                // The threads are gone (never while the store lives): run it
                // here rather than lose it.
                (e.0)();
            }
        }
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Closing the channel ends the async threads once the writes sent
        // to them are done.
        self.offload.take();
        for t in self.offload_threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Store for PgStore {
    fn kind(&self) -> EngineKind {
        EngineKind::Postgres
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn writable(&self) -> Result<()> {
        PgStore::writable(self)
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn schema_version(&self) -> Result<i64> {
        let _ = self.schema_version;
        self.with_conn(true, |c| schema::read_version(&mut c.client))
    }

    fn verify(&self) -> Result<VerifyReport> {
        super::verify::report(self)
    }

    fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued> {
        self.writable()?;
        let r = self.enqueues.enqueue(job, now)?;
        if !r.is_duplicate() {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn enqueue_many(&self, jobs: Vec<ValidJob>, now: Millis) -> Result<Vec<Enqueued>> {
        self.writable()?;
        let r = self.with_conn(true, |c| enqueue::insert_many(c, &jobs, now))?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn enqueue_async(&self, job: ValidJob, now: Millis, reply: Deliver<Enqueued>) {
        self.offload(reply, move |h| {
            let e = h.enqueue(&job, now)?;
            Ok((e, !e.is_duplicate()))
        });
    }

    fn enqueue_many_async(&self, jobs: Vec<ValidJob>, now: Millis, reply: Deliver<Vec<Enqueued>>) {
        self.offload(reply, move |h| {
            let r = h.enqueue_many(&jobs, now)?;
            let created = r.iter().any(|e| !e.is_duplicate());
            Ok((r, created))
        });
    }

    fn job(&self, id: i64) -> Result<Option<Job>> {
        self.with_conn(true, |c| reads::job(c, id))
    }

    fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.with_conn(true, |c| reads::job_by_key(c, key))
    }

    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.with_conn(true, |c| reads::jobs(c, filter))
    }

    fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.with_conn(true, |c| reads::attempts(c, job_id))
    }

    fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.with_conn(true, |c| reads::outbox_attempts(c, outbox_id))
    }

    fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| reads::outbox_for_job(c, job_id))
    }

    fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| reads::outbox(c, state, limit))
    }

    fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| reads::outbox_page(c, state, before, after, limit))
    }

    fn stats(&self, now: Millis) -> Result<Stats> {
        let version = self.schema_version()?;
        let mut s = self.with_conn(true, |c| reads::stats(c, now, version))?;
        s.schedules = self.with_conn(true, |c| schedules::count(&mut c.client))?;
        s.path = self.location.clone().into();
        Ok(s)
    }

    fn job_detail(&self, id: i64) -> Result<Option<JobDetail>> {
        self.with_conn(true, |c| reads::job_detail(c, id))
    }

    fn explain(&self, key: &str) -> Result<Explanation> {
        self.with_conn(true, |c| reads::explain(c, key))
    }

    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.with_conn(true, |c| schedules::list(&mut c.client))
    }

    fn queue_controls(&self, now: Millis) -> Result<Vec<QueueControl>> {
        self.with_conn(true, |c| controls::list(c, now))
    }

    fn queue_control(&self, queue: &str, now: Millis) -> Result<Option<QueueControl>> {
        self.with_conn(true, |c| controls::of_queue(c, queue, now))
    }

    fn change_queue(
        &self,
        queue: &str,
        paused: Option<bool>,
        limits: &QueueLimits,
        now: Millis,
    ) -> Result<()> {
        crate::core::controls::check_change(queue, limits)?;
        // The same change twice leaves the same row: safe to repeat.
        self.with_conn(true, |c| controls::change(c, queue, paused, limits, now))?;
        self.controls.forget();
        // Other processes' workers look again (a resumed queue's jobs are
        // theirs to take once their cache of the controls is read again).
        self.notifier.jobs();
        Ok(())
    }

    fn tally(&self, now: Millis) -> Result<Tally> {
        self.with_conn(true, |c| {
            self.refresh_clock(c)?;
            tally::tally(c, now)
        })
    }

    fn overview(&self, now: Millis) -> Result<Overview> {
        self.with_conn(true, |c| {
            self.refresh_clock(c)?;
            tally::overview(c, now)
        })
    }

    fn failures(&self, limit: u32) -> Result<Failures> {
        self.with_conn(true, |c| failures::read(c, limit))
    }

    fn retry_job(&self, id: i64, now: Millis) -> Result<()> {
        self.writable()?;
        self.with_conn(false, |c| admin::retry_job(c, id, now))?;
        self.notifier.jobs();
        Ok(())
    }

    fn retry_dead_batch(
        &self,
        kind: Option<&str>,
        after: i64,
        limit: i64,
        now: Millis,
    ) -> Result<Vec<i64>> {
        self.writable()?;
        let ids = self.with_conn(false, |c| {
            admin::retry_dead_batch(c, kind, after, limit, now)
        })?;
        if !ids.is_empty() {
            self.notifier.jobs();
        }
        Ok(ids)
    }

    fn cancel_job(&self, id: i64, now: Millis) -> Result<()> {
        self.writable()?;
        self.with_conn(false, |c| admin::cancel_job(c, id, now))
    }

    fn retry_outbox(&self, outbox_id: i64, now: Millis) -> Result<()> {
        self.writable()?;
        self.with_conn(false, |c| admin::retry_outbox(c, outbox_id, now))?;
        self.notifier.outbox();
        Ok(())
    }

    fn prune_batch(&self, what: PruneWhat, before: Millis, limit: i64) -> Result<(usize, usize)> {
        self.writable()?;
        self.with_conn(false, |c| admin::prune_batch(c, what, before, limit))
    }

    fn any_to_claim(
        &self,
        kinds: &[String],
        queues: Option<&[String]>,
        now: Millis,
    ) -> Result<bool> {
        self.with_conn(true, |c| run::any_due(c, kinds, queues, now))
    }

    fn renew_leases(
        &self,
        owner: &str,
        jobs: &[i64],
        effects: &[i64],
        until: Millis,
    ) -> Result<()> {
        self.writable()?;
        self.with_conn(true, |c| leases::renew(c, owner, jobs, effects, until))
    }

    fn reap(&self, now: Millis, max_abandoned: i64) -> Result<(usize, usize)> {
        self.writable()?;
        let r = self.with_conn(false, |c| leases::reap(c, now, max_abandoned))?;
        if r.0 > 0 {
            self.notifier.jobs();
        }
        if r.1 > 0 {
            self.notifier.outbox();
        }
        Ok(r)
    }

    fn release_job(
        &self,
        id: i64,
        owner: &str,
        attempt: Option<i64>,
        why: &str,
        now: Millis,
    ) -> Result<bool> {
        self.writable()?;
        let r = self.with_conn(true, |c| leases::release(c, id, owner, attempt, why, now))?;
        if r {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn claim_effect(
        &self,
        kinds: &[String],
        owner: &str,
        worker: &str,
        lease_until: Millis,
        now: Millis,
    ) -> Result<Option<ClaimedEffect>> {
        self.writable()?;
        self.with_conn(false, |c| {
            outbox::claim(c, kinds, owner, worker, lease_until, now)
        })
    }

    fn ack_effect(
        &self,
        outbox_id: i64,
        attempt_id: i64,
        result: &EffectResult,
        now: Millis,
    ) -> Result<Option<OutboxState>> {
        self.writable()?;
        // Fenced on the attempt: repeating an ack that committed changes
        // nothing more.
        self.with_conn(true, |c| outbox::ack(c, outbox_id, attempt_id, result, now))
    }

    fn release_effect(&self, outbox_id: i64, attempt_id: i64, now: Millis) -> Result<bool> {
        self.writable()?;
        self.with_conn(true, |c| outbox::release(c, outbox_id, attempt_id, now))
    }

    fn release_lost_effect_claims(
        &self,
        owner: &str,
        worker: &str,
        performed: &[i64],
        now: Millis,
    ) -> Result<usize> {
        let n = self.with_conn(true, |c| {
            outbox::release_lost_claims(c, owner, worker, performed, now)
        })?;
        if n > 0 {
            self.notifier.outbox();
        }
        Ok(n as usize)
    }
}
