//! Connections to the PostgreSQL server: opening one (the URL, the session
//! settings), the pool's manager, the per-connection statement cache, and
//! how the server's errors become litejob's. Writes nothing.

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;

use postgres::types::{FromSql, ToSql, Type};
use postgres::{Client, GenericClient, NoTls, Row, Statement, Transaction};

use crate::error::{Error, Result};

/// Statements' parameter types, by statement.
type Types = Arc<std::sync::Mutex<HashMap<&'static str, Arc<[Type]>>>>;

/// Parameters of a statement, as the client takes them.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A statement of litejob's, ready to run: on a direct connection its
/// prepared form, made once per connection, so that a call costs one round
/// trip. Behind a transaction pooler a named statement may not outlive its
/// transaction (the pooler may hand the next one another server session,
/// where it does not exist, or where a leftover of the same name does), and
/// a row keeps its statement alive (and unclosed) as long as it lives: so
/// there it is its text and its parameters' types, run as the unnamed
/// statement in one round trip, which nothing has to close. The types are
/// read once per process, from a statement prepared and closed inside a
/// transaction of its own ([`PgConn::stmt`]).
#[derive(Clone)]
pub(crate) enum Stmt {
    Prepared(Statement),
    Typed(&'static str, Arc<[Type]>),
    /// Prepared by the client inside the transaction that runs it; only
    /// where no row outlives that transaction.
    Text(&'static str),
}

/// `p` paired with `types`, as the client's typed queries take them.
fn typed<'a>(p: Params<'a>, types: &[Type]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    p.iter().copied().zip(types.iter().cloned()).collect()
}

impl Stmt {
    /// Runs it on `c` (a connection, or a transaction open on one).
    pub(crate) fn query(
        &self,
        c: &mut impl GenericClient,
        p: Params<'_>,
    ) -> std::result::Result<Vec<Row>, postgres::Error> {
        match self {
            Stmt::Prepared(st) => c.query(st, p),
            Stmt::Typed(sql, t) => c.query_typed(sql, &typed(p, t)),
            Stmt::Text(sql) => c.query(*sql, p),
        }
    }

    /// Runs it on `c`, for its one row.
    pub(crate) fn query_one(
        &self,
        c: &mut impl GenericClient,
        p: Params<'_>,
    ) -> std::result::Result<Row, postgres::Error> {
        match self {
            Stmt::Prepared(st) => c.query_one(st, p),
            Stmt::Typed(sql, t) => c.query_typed_one(sql, &typed(p, t)),
            Stmt::Text(sql) => c.query_one(*sql, p),
        }
    }

    /// Runs it on `c`, for at most one row.
    pub(crate) fn query_opt(
        &self,
        c: &mut impl GenericClient,
        p: Params<'_>,
    ) -> std::result::Result<Option<Row>, postgres::Error> {
        match self {
            Stmt::Prepared(st) => c.query_opt(st, p),
            Stmt::Typed(sql, t) => c.query_typed_opt(sql, &typed(p, t)),
            Stmt::Text(sql) => c.query_opt(*sql, p),
        }
    }

    /// Binds it in `tx`, for a portal read a fetch at a time.
    pub(crate) fn bind(
        &self,
        tx: &mut Transaction<'_>,
        p: Params<'_>,
    ) -> std::result::Result<postgres::Portal, postgres::Error> {
        match self {
            Stmt::Prepared(st) => tx.bind(st, p),
            // The portal's statement is closed with it, inside `tx`.
            Stmt::Typed(sql, _) | Stmt::Text(sql) => tx.bind(*sql, p),
        }
    }

    /// Runs it on `c`, for the number of rows it changed.
    pub(crate) fn execute(
        &self,
        c: &mut impl GenericClient,
        p: Params<'_>,
    ) -> std::result::Result<u64, postgres::Error> {
        match self {
            Stmt::Prepared(st) => c.execute(st, p),
            Stmt::Typed(sql, t) => {
                use postgres::fallible_iterator::FallibleIterator;
                let mut rows = c.query_typed_raw(sql, typed(p, t))?;
                while rows.next()?.is_some() {}
                Ok(rows.rows_affected().unwrap_or(0))
            }
            Stmt::Text(sql) => c.execute(*sql, p),
        }
    }
}

/// One connection, with the statements it has prepared (on a direct
/// connection: see [`Stmt`]) and, behind a transaction pooler, the
/// settings each of its transactions opens with.
pub(crate) struct PgConn {
    pub client: Client,
    stmts: HashMap<&'static str, Statement>,
    /// Behind a transaction pooler: `SELECT set_config(.., true), ..`, run
    /// first in every transaction (empty: none, or a direct connection).
    local: Arc<str>,
    pooled: bool,
    /// Behind a transaction pooler: the parameters' types of each statement.
    types: Types,
    /// Set when a statement found the server read-only (a standby, after
    /// a failover): the pool drops the connection instead of keeping it.
    pub(crate) stale: bool,
}

impl PgConn {
    fn new(client: Client, session: &Session) -> PgConn {
        PgConn {
            client,
            stmts: HashMap::new(),
            local: session.local.clone(),
            pooled: session.pooled,
            types: session.types.clone(),
            stale: false,
        }
    }

    /// `client`, a direct connection opened by hand, with no settings.
    #[cfg(test)]
    pub(crate) fn direct(client: Client) -> PgConn {
        PgConn {
            client,
            stmts: HashMap::new(),
            local: Arc::from(""),
            pooled: false,
            types: Types::default(),
            stale: false,
        }
    }

    /// Whether this connection goes through a transaction pooler.
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    /// The runnable form of `sql`.
    pub(crate) fn stmt(&mut self, sql: &'static str) -> Result<Stmt> {
        if self.pooled {
            let known = self
                .types
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(sql)
                .cloned();
            let types = match known {
                Some(t) => t,
                None => {
                    let mut tx = self.begin().map_err(read_err)?;
                    let st = tx.prepare(sql).map_err(read_err)?;
                    let types: Arc<[Type]> = st.params().into();
                    // Closed before the commit, on the session it was made on.
                    drop(st);
                    tx.commit().map_err(read_err)?;
                    self.types
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(sql, types.clone());
                    types
                }
            };
            return Ok(Stmt::Typed(sql, types));
        }
        if let Some(st) = self.stmts.get(sql) {
            return Ok(Stmt::Prepared(st.clone()));
        }
        let st = self.client.prepare(sql).map_err(read_err)?;
        self.stmts.insert(sql, st.clone());
        Ok(Stmt::Prepared(st))
    }

    /// Opens a transaction (with the session's settings, behind a
    /// transaction pooler).
    pub(crate) fn begin(&mut self) -> std::result::Result<Transaction<'_>, postgres::Error> {
        let mut tx = self.client.transaction()?;
        if !self.local.is_empty() {
            tx.batch_execute(&self.local)?;
        }
        Ok(tx)
    }

    /// Opens a read-only REPEATABLE READ transaction: one snapshot.
    pub(crate) fn begin_snapshot(
        &mut self,
    ) -> std::result::Result<Transaction<'_>, postgres::Error> {
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        if !self.local.is_empty() {
            tx.batch_execute(&self.local)?;
        }
        Ok(tx)
    }

    /// Runs `f` on the connection; behind a transaction pooler inside a
    /// transaction of its own (a statement outside one may be prepared on
    /// one server session and run on another). `err` maps its errors.
    fn auto<R>(
        &mut self,
        err: fn(postgres::Error) -> Error,
        f: impl FnOnce(&mut dyn FnMutClient) -> std::result::Result<R, postgres::Error>,
    ) -> Result<R> {
        let r = if self.pooled {
            // Three round trips: the transaction opened with its settings
            // in one simple query, the statement, the commit.
            let open = format!("START TRANSACTION; {}", self.local);
            self.client.batch_execute(&open).map_err(read_err)?;
            match f(&mut self.client) {
                Ok(r) => self.client.batch_execute("COMMIT").map_err(err).map(|()| r),
                Err(e) => {
                    let _ = self.client.batch_execute("ROLLBACK");
                    Err(err(e))
                }
            }
        } else {
            f(&mut self.client).map_err(err)
        };
        self.note(r)
    }

    /// Runs the application's `f` on the client; behind a transaction
    /// pooler inside a transaction of its own, opened with the session's
    /// settings.
    pub(crate) fn read_by_hand<R>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<R>,
    ) -> Result<R> {
        if !self.pooled {
            return f(&mut self.client);
        }
        let open = format!("START TRANSACTION; {}", self.local);
        self.client.batch_execute(&open).map_err(read_err)?;
        match f(&mut self.client) {
            Ok(r) => self
                .client
                .batch_execute("COMMIT")
                .map_err(read_err)
                .map(|()| r),
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Notes a read-only server in `r` (see [`PgConn::stale`]).
    pub(crate) fn note<R>(&mut self, r: Result<R>) -> Result<R> {
        if let Err(Error::ReadOnly(_)) = &r {
            self.stale = true;
        }
        r
    }

    /// Runs a read.
    pub(crate) fn query(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.auto(read_err, |c| c.run(&st, params))
    }

    /// Runs a read that returns at most one row.
    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>> {
        let st = self.stmt(sql)?;
        self.auto(read_err, |c| {
            let mut rows = c.run(&st, params)?;
            Ok(if rows.is_empty() {
                None
            } else {
                Some(rows.swap_remove(0))
            })
        })
    }

    /// Runs a read that returns exactly one row.
    pub(crate) fn query_one(&mut self, sql: &'static str, params: Params<'_>) -> Result<Row> {
        self.query_opt(sql, params)?
            .ok_or_else(|| Error::Internal(format!("a statement answered no row: {sql}")))
    }

    /// Runs a write in its own transaction (autocommit); a broken
    /// connection leaves its outcome unknown.
    pub(crate) fn write(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.auto(write_err, |c| c.run(&st, params))
    }

    /// Runs a write that returns how many rows it changed.
    pub(crate) fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<u64> {
        let st = self.stmt(sql)?;
        self.auto(write_err, |c| c.count(&st, params))
    }
}

/// Runs `$body` with `$c` bound to a client that can run statements of
/// litejob's as one autocommit call: the connection's client, or behind a
/// transaction pooler a transaction of its own, committed after it (a
/// statement run outside a transaction there may be prepared on one server
/// session and executed on another). The body's errors are its own; the
/// commit's are mapped by `$err`.
macro_rules! autocommit {
    ($conn:expr, $err:expr, |$c:ident| $body:expr) => {{
        let conn: &mut $crate::postgres::conn::PgConn = $conn;
        if conn.pooled() {
            let mut tx = conn.begin().map_err($crate::postgres::conn::read_err)?;
            let r = {
                let $c = &mut tx;
                $body
            }?;
            tx.commit().map_err($err)?;
            Ok(r)
        } else {
            let $c = &mut conn.client;
            $body
        }
    }};
}
pub(crate) use autocommit;

/// A client or a transaction, as [`PgConn::auto`] hands them out (the
/// client's `GenericClient` is not object-safe).
trait FnMutClient {
    fn run(&mut self, st: &Stmt, p: Params<'_>) -> std::result::Result<Vec<Row>, postgres::Error>;
    fn count(&mut self, st: &Stmt, p: Params<'_>) -> std::result::Result<u64, postgres::Error>;
}

impl<C: GenericClient> FnMutClient for C {
    fn run(&mut self, st: &Stmt, p: Params<'_>) -> std::result::Result<Vec<Row>, postgres::Error> {
        st.query(self, p)
    }
    fn count(&mut self, st: &Stmt, p: Params<'_>) -> std::result::Result<u64, postgres::Error> {
        st.execute(self, p)
    }
}

/// Reads of a row's columns that answer with an error where `Row::get`
/// would panic: a row edited by hand, or a column whose type or NOT NULL a
/// migration gone wrong changed, must cost the call that met it, not the
/// process.
pub(crate) trait Col {
    /// Column `i` as a `T`, or an error that names the column and what it
    /// holds instead.
    fn col<'a, T: FromSql<'a>>(&'a self, i: usize) -> Result<T>;
}

impl Col for Row {
    fn col<'a, T: FromSql<'a>>(&'a self, i: usize) -> Result<T> {
        self.try_get(i).map_err(|e| {
            let Some(c) = self.columns().get(i) else {
                return Error::Internal(format!(
                    "a row from the database has no column {i} (it has {})",
                    self.len()
                ));
            };
            // The client's own words only say "error deserializing column
            // {i}"; the cause under it says what was found.
            let why =
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            Error::Internal(format!(
                "column {i} ({}) holds a value litejob cannot read: {why}",
                c.name()
            ))
        })
    }
}

/// `read`'s error about a row of `table`, prefixed with the row's key (its
/// first column) so that an operator can find the row.
pub(crate) fn in_row<T>(table: &str, r: &Row, read: impl FnOnce(&Row) -> Result<T>) -> Result<T> {
    read(r).map_err(|e| match e {
        Error::Internal(m) => {
            let key = r
                .try_get::<_, i64>(0)
                .map(|id| id.to_string())
                .or_else(|_| r.try_get::<_, &str>(0).map(|k| format!("{k:?}")));
            Error::Internal(match key {
                Ok(key) => format!("{table} row {key}: {m}"),
                Err(_) => format!("a row of {table}: {m}"),
            })
        }
        e => e,
    })
}

/// The row of a statement that always answers one (an aggregate, a count
/// over a CTE): an error rather than a panic if it answered none.
pub(crate) fn one(rows: Vec<Row>) -> Result<Row> {
    rows.into_iter().next().ok_or_else(|| {
        Error::Internal("a statement that always answers one row answered none".into())
    })
}

/// How every connection of a queue is set up.
#[derive(Clone)]
pub(crate) struct Session {
    pub config: postgres::Config,
    /// The URL without its password, for messages.
    pub location: String,
    /// Settings of every connection (`synchronous_commit`, `lock_timeout`,
    /// and, behind a transaction pooler, those of the URL's `options`): on
    /// a direct connection set once when it opens, behind a transaction
    /// pooler set in each transaction ([`Session::local`]).
    settings: Vec<(&'static str, String)>,
    /// `settings` as the statement each transaction opens with, behind a
    /// transaction pooler (empty on a direct connection).
    local: Arc<str>,
    /// Connections go through a transaction pooler (see [`super::pooler`]).
    pub(crate) pooled: bool,
    /// Behind a transaction pooler: the statements' parameter types, read
    /// once for every connection (see [`Stmt`]).
    types: Types,
    /// Whether the server can be reached, shared by every clone.
    pub(crate) reach: Arc<super::reach::Reach>,
}

/// `value` as an SQL string literal.
fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

impl Session {
    pub(crate) fn new(config: postgres::Config, location: String) -> Session {
        Session {
            config,
            location,
            settings: Vec::new(),
            local: Arc::from(""),
            pooled: false,
            types: Types::default(),
            reach: Arc::default(),
        }
    }

    /// Sets `name` to `value` on every connection (replacing an earlier
    /// value of it).
    pub(crate) fn set(&mut self, name: &'static str, value: impl Into<String>) {
        let value = value.into();
        match self.settings.iter_mut().find(|(n, _)| *n == name) {
            Some(s) => s.1 = value,
            None => self.settings.push((name, value)),
        }
        self.local = Arc::from(self.local_sql());
    }

    /// True for a queue opened read-only (its sessions refuse writes).
    pub(crate) fn read_only(&self) -> bool {
        self.settings
            .iter()
            .any(|(n, v)| *n == "default_transaction_read_only" && v == "on")
    }

    /// From here on, connections go through a transaction pooler.
    pub(crate) fn set_pooled(&mut self) {
        self.pooled = true;
        self.local = Arc::from(self.local_sql());
    }

    /// Sets the URL's `options`, which a pooler refused at login, as
    /// settings of every connection instead.
    pub(crate) fn set_options(&mut self, settings: Vec<(String, String)>) {
        for (n, v) in settings {
            // Names of the URL's options live as long as the queue.
            let n: &'static str = Box::leak(n.into_boxed_str());
            self.set(n, v);
        }
    }

    /// The settings as one statement: `set_config` takes a value as the
    /// server's configuration file would (a list for `search_path`).
    fn sql(&self, local: bool) -> String {
        if self.settings.is_empty() {
            return String::new();
        }
        let sets: Vec<String> = self
            .settings
            .iter()
            .map(|(n, v)| {
                // A transaction's own read-only mode is this one (the
                // default only applies to the next transaction).
                let n = match *n {
                    "default_transaction_read_only" if local => "transaction_read_only",
                    n => n,
                };
                format!("set_config({}, {}, {local})", literal(n), literal(v))
            })
            .collect();
        format!("SELECT {}", sets.join(", "))
    }

    fn local_sql(&self) -> String {
        if self.pooled {
            self.sql(true)
        } else {
            String::new()
        }
    }

    /// Opens one connection with the session settings. While the server
    /// is out of reach, at most one thread of the process tries, once per
    /// backoff step; the others are refused at once.
    pub(crate) fn connect(&self) -> Result<PgConn> {
        let mut c = self.connect_bare()?;
        self.settle(&mut c)?;
        Ok(c)
    }

    /// Sets the session's settings on `c`, a connection [`connect_bare`]
    /// opened, once it is known not to go through a transaction pooler
    /// (where they would stay on a server session other clients share).
    ///
    /// [`connect_bare`]: Session::connect_bare
    pub(crate) fn settle(&self, c: &mut PgConn) -> Result<()> {
        c.pooled = self.pooled;
        c.local = self.local.clone();
        if !self.pooled && !self.settings.is_empty() {
            c.client
                .batch_execute(&self.sql(false))
                .map_err(connect_err)?;
        }
        Ok(())
    }

    /// Opens one connection without the session's settings (see
    /// [`Session::settle`]).
    pub(crate) fn connect_bare(&self) -> Result<PgConn> {
        match self.reach.admit(&self.location) {
            super::reach::Admit::Try => {}
            super::reach::Admit::Refused(e) => return Err(e),
        }
        let client = match self.config.connect(NoTls) {
            Ok(c) => c,
            Err(e) => {
                let text = with_causes(&e);
                let err = connect_err(e);
                if matches!(err, Error::Connection(_)) {
                    self.reach.failed(&self.location, &text);
                } else {
                    self.reach.gave_up();
                }
                return Err(err);
            }
        };
        self.reach.succeeded(&self.location);
        Ok(PgConn::new(client, self))
    }
}

/// The pool's connections: each with the session settings and a
/// statement cache, opened through the session's [`Session::connect`].
pub(crate) struct Manager {
    session: Session,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = PoolConnectError;

    fn connect(&self) -> std::result::Result<PgConn, PoolConnectError> {
        self.session.connect().map_err(PoolConnectError)
    }

    fn is_valid(&self, conn: &mut PgConn) -> std::result::Result<(), PoolConnectError> {
        conn.client
            .simple_query("")
            .map(|_| ())
            .map_err(|e| PoolConnectError(read_err(e)))
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed() || conn.stale
    }
}

/// A connection the pool could not open. r2d2 keeps only the text of the
/// last failure, so that text carries the causes ([`with_causes`]).
#[derive(Debug)]
pub(crate) struct PoolConnectError(Error);

impl std::fmt::Display for PoolConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PoolConnectError {}

/// The pool of connections producers and readers share, and the session
/// its connections are opened with.
#[derive(Clone)]
pub(crate) struct Pool {
    pool: r2d2::Pool<Manager>,
    session: Session,
}

/// A connection lent by a [`Pool`].
pub(crate) type Pooled = r2d2::PooledConnection<Manager>;

impl Pool {
    /// A connection, or at once an error while the server is out of reach
    /// (as far as this process knows: another thread tries once per
    /// backoff step), never a wait past the pool's timeout for one.
    pub(crate) fn get(&self) -> Result<Pooled> {
        let reach = &self.session.reach;
        if reach.is_down() {
            if let Some(c) = self.pool.try_get() {
                return Ok(c);
            }
            // The process's attempt for this backoff step (or, within the
            // step, its refusal), made here so that this caller has its
            // answer at once either way.
            drop(self.session.connect()?);
        }
        // In short waits, so that a caller whose connection the pool is
        // opening hears at once that the server went out of reach (the
        // pool itself would retry until its timeout).
        let timeout = self.pool.connection_timeout();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.pool.get_timeout(left.min(Duration::from_millis(100))) {
                Ok(c) => return Ok(c),
                Err(e) => {
                    if let Some(down) = reach.down_error(&self.session.location) {
                        return Err(down);
                    }
                    if left.is_zero() {
                        return Err(pool_err(e, timeout));
                    }
                }
            }
        }
    }

    /// True for the pool of a queue opened read-only.
    pub(crate) fn read_only(&self) -> bool {
        self.session.read_only()
    }

    /// How long a thread that loops should wait before it tries again
    /// (see [`super::reach::Reach::retry_in`]).
    pub(crate) fn reach_retry_in(&self) -> Duration {
        self.session.reach.retry_in()
    }
}

/// A pool of at most `size` connections. Connections are not tested on
/// checkout (that would be one more round trip per enqueue); one found
/// broken is dropped when it comes back, and the call that met it is
/// retried where that is safe (see [`super::PgStore::with_conn`]).
pub(crate) fn pool(session: &Session, size: u32, wait: Duration) -> Pool {
    Pool {
        pool: r2d2::Pool::builder()
            .max_size(size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(wait)
            // The session's connect logs what matters, once per outage.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Manager {
                session: session.clone(),
            }),
        session: session.clone(),
    }
}

/// The URL without its password, for messages and `Queue::location`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}")
            } else {
                format!("{scheme}://{userinfo}@{host}")
            }
        }
        None => url.to_string(),
    }
}

/// `e` followed by the errors under it: the client's own words ("error
/// connecting to server") do not say why, its sources do ("Connection
/// refused", "failed to lookup address information: …").
pub(crate) fn with_causes(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

/// True when `e` says nothing reached the server or the connection broke.
pub(crate) fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        use postgres::error::SqlState;
        return [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_FAILURE,
            SqlState::CONNECTION_DOES_NOT_EXIST,
        ]
        .contains(code);
    }
    // An I/O error under it: the socket failed.
    std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
}

/// A server error by its SQLSTATE, for every call.
fn classify(e: postgres::Error) -> Error {
    use postgres::error::SqlState;
    let Some(code) = e.code().cloned() else {
        return Error::Postgres(e);
    };
    let msg = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string());
    match code {
        c if c == SqlState::DISK_FULL || c == SqlState::PROGRAM_LIMIT_EXCEEDED => {
            Error::StorageFull(format!("storage full on the database server: {msg}"))
        }
        c if c == SqlState::T_R_SERIALIZATION_FAILURE || c == SqlState::T_R_DEADLOCK_DETECTED => {
            Error::Aborted(format!(
                "the transaction was rolled back by the server: {msg}"
            ))
        }
        c if c == SqlState::QUERY_CANCELED => Error::Interrupted(format!(
            "the write ran past its time budget (statement_timeout) and was rolled back: {msg}"
        )),
        // A session opened read-only (`default_transaction_read_only`):
        // the statement was refused and rolled back, nothing was written.
        c if c == SqlState::READ_ONLY_SQL_TRANSACTION => Error::ReadOnly(format!(
            "the database session is read-only, nothing was written: {msg}"
        )),
        c if c == SqlState::LOCK_NOT_AVAILABLE => Error::Busy(format!(
            "database busy: a lock was held by another session past the timeout: {msg}"
        )),
        c if c == SqlState::CHECK_VIOLATION
            || c == SqlState::NOT_NULL_VIOLATION
            || c == SqlState::INVALID_TEXT_REPRESENTATION
            || c == SqlState::CHARACTER_NOT_IN_REPERTOIRE
            || c == SqlState::UNTRANSLATABLE_CHARACTER =>
        {
            Error::invalid(format!("refused by the schema's constraints: {msg}"))
        }
        _ => Error::Postgres(e),
    }
}

/// An error of a read (or of a statement that changed nothing yet).
pub(crate) fn read_err(e: postgres::Error) -> Error {
    if is_connection_error(&e) {
        return Error::Connection(format!(
            "the connection to the database server broke: {}",
            with_causes(&e)
        ));
    }
    classify(e)
}

/// An error of a write: a connection that broke under it leaves its
/// outcome unknown (it may have committed).
pub(crate) fn write_err(e: postgres::Error) -> Error {
    if is_connection_error(&e) {
        return Error::OutcomeUnknown(format!(
            "the connection to the database server broke during the write: {}",
            with_causes(&e)
        ));
    }
    classify(e)
}

/// An error of opening a connection: nothing was sent.
pub(crate) fn connect_err(e: postgres::Error) -> Error {
    use postgres::error::SqlState;
    let msg = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string());
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            Error::Open(format!("the database server refused the login: {msg}"))
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            Error::Open(format!("no such database on the server: {msg}"))
        }
        _ if is_connection_error(&e) || e.code().is_none() => Error::Connection(format!(
            "cannot reach the database server: {}",
            with_causes(&e)
        )),
        _ => classify(e),
    }
}

/// A pool that could not hand out a connection within `waited` (the
/// busy timeout): the server is out of reach (the last connection
/// attempt's error says why), or every connection is busy.
pub(crate) fn pool_err(e: r2d2::Error, waited: Duration) -> Error {
    let text = e.to_string();
    let why = text
        .strip_prefix("timed out waiting for connection")
        .map(|rest| rest.trim_start_matches(": "))
        .unwrap_or(&text);
    let why = if why.is_empty() {
        "every connection of the pool stayed busy, or the server did not answer".to_string()
    } else {
        format!("the last attempt failed: {why}")
    };
    Error::Connection(format!(
        "cannot reach the database server: no connection within {} ms ({why}); nothing was \
         written, retry later",
        waited.as_millis()
    ))
}

/// A PostgreSQL error in the application's own SQL (a [`Queue::write`]
/// body, say), classified like litejob's: a broken connection is
/// [`Error::Connection`] (the transaction had not committed), a CHECK or
/// NOT NULL violation [`Error::InvalidInput`], the rest [`Error::Postgres`].
///
/// [`Queue::write`]: crate::queue::Queue::write
impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Self {
        read_err(e)
    }
}
