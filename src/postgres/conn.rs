//! A connection to the PostgreSQL server ([`PgConn`]): its statements,
//! prepared once on a direct connection, and behind a transaction pooler
//! the settings each of its transactions opens with; reading rows. Writes
//! nothing. Opening one is the session's (`session.rs`), the pool is in
//! `pool.rs`, how the server's errors become litejob's in `errors.rs`.
use crate::core::sync::lock;
use std::collections::HashMap;

use std::sync::Arc;

use postgres::types::{FromSql, Type};
use postgres::{Client, GenericClient, Row, Statement, Transaction};

pub(crate) use super::errors::{connect_err, read_err, with_causes, write_err};
pub(crate) use super::pool::{pool, Pool};
pub(crate) use super::session::{redact, Session};
pub(crate) use super::stmt::{Params, Stmt};

use crate::error::{Error, Result};

/// Statements' parameter types, by statement.
pub(super) type Types = Arc<std::sync::Mutex<HashMap<&'static str, Arc<[Type]>>>>;

/// One connection, with the statements it has prepared (on a direct
/// connection: see [`Stmt`]) and, behind a transaction pooler, the
/// settings each of its transactions opens with.
pub(crate) struct PgConn {
    pub client: Client,
    stmts: HashMap<&'static str, Statement>,
    /// Behind a transaction pooler: `SELECT set_config(.., true), ..`, run
    /// first in every transaction (empty: none, or a direct connection).
    pub(super) local: Arc<str>,
    pub(super) pooled: bool,
    /// Behind a transaction pooler: the parameters' types of each statement.
    types: Types,
    /// Set when a statement found the server read-only (a standby, after
    /// a failover): the pool drops the connection instead of keeping it.
    pub(crate) stale: bool,
}

impl PgConn {
    pub(super) fn new(client: Client, session: &Session) -> PgConn {
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

/// Every row of `rows`, read by `f`.
pub(crate) fn all<T>(rows: Vec<Row>, f: fn(&Row) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(f).collect()
}

/// A value in a row that litejob does not know (a state, an outcome).
pub(crate) fn bad(what: &str, v: &str) -> Error {
    Error::Internal(format!("bad {what} {v:?} in the database"))
}
