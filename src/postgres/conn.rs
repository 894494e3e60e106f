//! Connections to the PostgreSQL server: opening one (the URL, the session
//! settings), the pool's manager, the per-connection statement cache, and
//! how the server's errors become litejob's. Writes nothing.

use std::collections::HashMap;
use std::time::Duration;

use postgres::types::{FromSql, ToSql};
use postgres::{Client, NoTls, Row, Statement};
use r2d2_postgres::PostgresConnectionManager;

use crate::error::{Error, Result};

/// Parameters of a statement, as the client takes them.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One connection, with the statements it has prepared: every query litejob
/// runs is a named constant, prepared once per connection, so a call costs
/// one round trip (a query by text costs two: prepare, then execute).
pub(crate) struct PgConn {
    pub client: Client,
    stmts: HashMap<&'static str, Statement>,
}

impl PgConn {
    pub(crate) fn new(client: Client) -> PgConn {
        PgConn {
            client,
            stmts: HashMap::new(),
        }
    }

    /// The prepared form of `sql`.
    pub(crate) fn stmt(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(st) = self.stmts.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql).map_err(read_err)?;
        self.stmts.insert(sql, st.clone());
        Ok(st)
    }

    /// Runs a read.
    pub(crate) fn query(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.client.query(&st, params).map_err(read_err)
    }

    /// Runs a read that returns at most one row.
    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
    ) -> Result<Option<Row>> {
        let st = self.stmt(sql)?;
        self.client.query_opt(&st, params).map_err(read_err)
    }

    /// Runs a read that returns exactly one row.
    pub(crate) fn query_one(&mut self, sql: &'static str, params: Params<'_>) -> Result<Row> {
        let st = self.stmt(sql)?;
        self.client.query_one(&st, params).map_err(read_err)
    }

    /// Runs a write in its own transaction (autocommit); a broken
    /// connection leaves its outcome unknown.
    pub(crate) fn write(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.client.query(&st, params).map_err(write_err)
    }

    /// Runs a write that returns how many rows it changed.
    pub(crate) fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<u64> {
        let st = self.stmt(sql)?;
        self.client.execute(&st, params).map_err(write_err)
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
    /// Run once on each new connection (`SET ...`).
    pub setup: String,
}

impl Session {
    /// Opens one connection with the session settings.
    pub(crate) fn connect(&self) -> Result<PgConn> {
        let mut client = self.config.connect(NoTls).map_err(connect_err)?;
        client.batch_execute(&self.setup).map_err(connect_err)?;
        Ok(PgConn::new(client))
    }
}

/// The pool's connections: r2d2_postgres's, each with the session settings
/// and a statement cache.
pub(crate) struct Manager {
    inner: PostgresConnectionManager<NoTls>,
    setup: String,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = PoolConnectError;

    fn connect(&self) -> std::result::Result<PgConn, PoolConnectError> {
        let mut client = self.inner.connect().map_err(PoolConnectError)?;
        client
            .batch_execute(&self.setup)
            .map_err(PoolConnectError)?;
        Ok(PgConn::new(client))
    }

    fn is_valid(&self, conn: &mut PgConn) -> std::result::Result<(), PoolConnectError> {
        self.inner
            .is_valid(&mut conn.client)
            .map_err(PoolConnectError)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

/// A connection the pool could not open. r2d2 keeps only the text of the
/// last failure, so that text carries the causes ([`with_causes`]).
#[derive(Debug)]
pub(crate) struct PoolConnectError(postgres::Error);

impl std::fmt::Display for PoolConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&with_causes(&self.0))
    }
}

impl std::error::Error for PoolConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

/// The pool of connections producers and readers share.
pub(crate) type Pool = r2d2::Pool<Manager>;

/// A pool of at most `size` connections. Connections are not tested on
/// checkout (that would be one more round trip per enqueue); one found
/// broken is dropped when it comes back, and the call that met it is
/// retried where that is safe (see [`super::PgStore::with_conn`]).
pub(crate) fn pool(session: &Session, size: u32, wait: Duration) -> Pool {
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .connection_timeout(wait)
        .build_unchecked(Manager {
            inner: PostgresConnectionManager::new(session.config.clone(), NoTls),
            setup: session.setup.clone(),
        })
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
