//! A queue in a PostgreSQL database ([`PgStore`]): it owns the pool, the
//! notifier thread and the async API's threads (the driver's store on
//! them is in `operations`); opened read-only, it has neither the notifier
//! nor a write. Writes `jobs` through the enqueue group only.

use std::sync::Arc;
use std::time::Duration;

use crate::core::job::Enqueued;
use crate::core::options::{QueueOptions, Synchronous};
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::core::SCHEMA_VERSION;
use crate::error::{Error, Result};

use super::conn::{PgConn, Pool, Session};
use super::notify::{Clock, Notifier, NotifyHandle};
use super::{conn, controls, enqueue, group, pooler, schema, tx};

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
    /// Where a runtime's listener `LISTEN`s: the queue's own server on a
    /// direct connection, [`QueueOptions::listen_url`]'s, or none behind a
    /// transaction pooler (workers poll).
    pub(crate) listen: Option<Session>,
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
    pub(super) enqueues: Arc<group::Enqueuer>,
    /// The async API's writes, for its threads (closed on drop, which ends
    /// them; they hold no handle to the store).
    offload: Option<crossbeam_channel::Sender<Box<dyn FnOnce() + Send>>>,
    offload_threads: Vec<std::thread::JoinHandle<()>>,
    pub(super) schema_version: i64,
    /// Opened read-only ([`PgStore::open_read_only`]): every session is
    /// `default_transaction_read_only`, and every write is refused here
    /// before anything is sent.
    pub(super) read_only: bool,
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
        let mut conn = self.pool.get()?;
        let insert = conn.stmt(enqueue::INSERT_ONE)?;
        let mut t = conn.begin().map_err(conn::read_err)?;
        let mut w = tx::PgWriteTx {
            tx: &mut t,
            rules,
            now,
            insert: &insert,
            enqueued: false,
        };
        let r = f(&mut w);
        let enqueued = w.enqueued;
        let r = r.and_then(|r| tx::commit(t).map(|()| r));
        let r = match r {
            Err(Error::ReadOnly(m)) => {
                // See `with_conn`: a standby, after a failover.
                conn.stale = true;
                return Err(on_standby(&m));
            }
            r => r?,
        };
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
        let mut conn = pool.get()?;
        match f(&mut conn) {
            Err(Error::Connection(_) | Error::OutcomeUnknown(_))
                if retry && conn.client.is_closed() && tries + 1 < CONNECTION_TRIES =>
            {
                tries += 1;
            }
            // A server that refuses writes after a failover (the old
            // primary, back as a standby, or a session opened before the
            // promotion): nothing was written. The pool drops the
            // connection, and the next one finds the primary
            // (`target_session_attrs=read-write`).
            Err(Error::ReadOnly(m)) if !pool.read_only() => {
                conn.stale = true;
                if !retry || tries + 1 >= CONNECTION_TRIES {
                    return Err(on_standby(&m));
                }
                tries += 1;
                drop(conn);
                std::thread::sleep(pool.reach_retry_in());
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

/// The transient error of a write a server refused as read-only although
/// the queue was opened to write: the session is on a standby (the old
/// primary's standby, before or during a promotion; or a URL whose hosts
/// include a standby, without `target_session_attrs=read-write`).
pub(crate) fn on_standby(m: &str) -> Error {
    Error::Connection(format!(
        "the database server refuses writes, as a standby does (a failover under way?): {m}; \
         the connection is dropped, and the next one looks for the primary: retry later"
    ))
}

/// Tries of a retryable call that the server rolled back (a deadlock or
/// a serialization failure).
const ABORTED_TRIES: usize = 5;

/// Tries of a call that met a broken pooled connection (the server
/// restarted: every idle connection in the pool is dead, and each one that
/// fails is dropped).
const CONNECTION_TRIES: usize = 3;

/// The URL without its password, and how each connection to it is opened:
/// the client's settings from the URL, then `settings` and the lock
/// timeout.
fn session(url: &str, opts: &QueueOptions, settings: &[(&'static str, &str)]) -> Result<Session> {
    let tls = super::tls::from_url(url)?;
    let mut config: postgres::Config = tls.url.parse().map_err(|e| {
        Error::invalid(format!(
            "not a PostgreSQL URL ({e}): expected postgres://user:password@host:port/database"
        ))
    })?;
    if config.get_application_name().is_none() {
        config.application_name("litejob");
    }
    config.connect_timeout(opts.busy_timeout.min(Duration::from_secs(10)));
    config.ssl_mode(tls.ssl_mode());
    let mut session = Session::new(config, conn::redact(url));
    session.tls = tls.connector;
    for (name, value) in settings {
        session.set(name, *value);
    }
    session.set(
        "lock_timeout",
        format!("{}ms", opts.busy_timeout.as_millis()),
    );
    Ok(session)
}

/// The session of `url` and its first connection, with a transaction
/// pooler in front of the server found (and said once in the log).
fn open_session(
    url: &str,
    opts: &QueueOptions,
    settings: &[(&'static str, &str)],
) -> Result<(Session, PgConn)> {
    let mut session = session(url, opts, settings)?;
    let at = located(session.location.clone());
    let (first, why) = match session.connect_bare() {
        Ok(mut first) => {
            let why = pooler::probe(&session, &mut first).map_err(&at)?;
            (first, why)
        }
        // pgbouncer refuses the URL's options: they are set in each
        // transaction instead.
        Err(e) if pooler::refused_options(&e) => {
            let options = session.config.get_options().unwrap_or("").to_string();
            let extra = pooler::settings(&options)?;
            session = self::session(&pooler::without_options(url), opts, settings)?;
            session.location = conn::redact(url);
            session.set_options(extra);
            let mut first = session.connect_bare().map_err(&at)?;
            match pooler::probe(&session, &mut first).map_err(&at)? {
                Some(why) => (
                    first,
                    Some(format!("{why}; it refused the options startup parameter")),
                ),
                None => {
                    log::info!(
                        target: "litejob",
                        "{} goes through a connection pooler in session mode (it refused the \
                         options startup parameter): the URL's options are set on each \
                         connection once it is open",
                        session.location
                    );
                    (first, None)
                }
            }
        }
        Err(e) => return Err(at(e)),
    };
    let mut first = first;
    if let Some(why) = why {
        session.set_pooled();
        pooler::announce(&session.location, &why, opts.listen_url.is_some());
    }
    session.settle(&mut first).map_err(&at)?;
    Ok((session, first))
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
        let (session, mut first) = open_session(url, opts, &[("synchronous_commit", synchronous)])?;
        let location = session.location.clone();
        let at = located(location.clone());
        let schema_version = schema::migrate(&mut first).map_err(&at)?;
        let clock = Arc::new(Clock::new(&opts.clock));
        clock.measure(&mut first)?;
        let pool = conn::pool(&session, opts.pool_size.max(1) * 4, opts.busy_timeout);
        let enqueues = Arc::new(group::Enqueuer::new(
            &session,
            pool.clone(),
            opts.busy_timeout,
        ));
        let notifier = Notifier::start(session.clone(), clock.clone())?;
        let listen = match &opts.listen_url {
            Some(direct) => Some(self::session(direct, opts, &[])?),
            None if session.pooled => None,
            None => Some(session.clone()),
        };
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
            listen,
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
    /// [`QueueOptions::read_only`]): every connection's
    /// session is `default_transaction_read_only`, so the server itself
    /// refuses a write; the schema is never created or migrated (a database
    /// without litejob's tables, or with another version of them, is
    /// refused); no notifier and no async thread start.
    pub(crate) fn open_read_only(url: &str, opts: &QueueOptions) -> Result<PgStore> {
        let (session, mut first) =
            open_session(url, opts, &[("default_transaction_read_only", "on")])?;
        let location = session.location.clone();
        let at = located(location.clone());
        let found = schema::read_version(&mut first).map_err(&at)?;
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
        let clock = Arc::new(Clock::new(&opts.clock));
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
            listen: None,
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
    pub(super) fn refresh_clock(&self, c: &mut PgConn) -> Result<()> {
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
