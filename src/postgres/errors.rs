//! How the server's and the client's errors become litejob's: by SQLSTATE,
//! and by whether a write may have committed. Writes nothing.

use std::time::Duration;

use crate::error::Error;

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
        // A certificate refused, or no TLS where the URL's sslmode needs
        // it: trying again would meet the same.
        None if msg.starts_with("error performing TLS handshake") && !is_connection_error(&e) => {
            Error::Open(format!(
                "TLS with the server failed (see sslmode and sslrootcert in the URL): {}",
                with_causes(&e)
            ))
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
