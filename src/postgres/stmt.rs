//! A statement of litejob's as it runs on a connection: prepared once per
//! connection, or behind a transaction pooler unnamed with its parameters'
//! types. Writes nothing.

use std::sync::Arc;

use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Row, Statement, Transaction};

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
