//! Connections to the PostgreSQL server: opening one (the URL, the session
//! settings, the server's reach), a connection and its statements, and the
//! settings behind a transaction pooler. Writes nothing. The pool is in
//! `pool.rs`, how the server's errors become litejob's in `errors.rs`.

use crate::core::sync::lock;
use std::collections::HashMap;

use std::sync::Arc;

use postgres::types::{FromSql, Type};
use postgres::{Client, GenericClient, NoTls, Row, Statement, Transaction};

pub(crate) use super::errors::{connect_err, read_err, with_causes, write_err};
pub(crate) use super::pool::{pool, Pool};
pub(crate) use super::stmt::{Params, Stmt};

use crate::error::{Error, Result};

/// Statements' parameter types, by statement.
type Types = Arc<std::sync::Mutex<HashMap<&'static str, Arc<[Type]>>>>;

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
            let known = lock(&self.types).get(sql).cloned();
            let types = match known {
                Some(t) => t,
                None => {
                    let mut tx = self.begin().map_err(read_err)?;
                    let st = tx.prepare(sql).map_err(read_err)?;
                    let types: Arc<[Type]> = st.params().into();
                    // Closed before the commit, on the session it was made on.
                    drop(st);
                    tx.commit().map_err(read_err)?;
                    lock(&self.types).insert(sql, types.clone());
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
    /// The URL's TLS (`sslmode`): none when it is disabled.
    pub(crate) tls: Option<postgres_native_tls::MakeTlsConnector>,
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
            tls: None,
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
        let connected = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        let client = match connected {
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
