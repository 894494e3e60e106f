//! The pool of connections producers and readers share: r2d2's, with
//! connections opened through the session (its settings, its reach), and
//! callers answered at once while the server is out of reach. Writes
//! nothing.

use std::time::Duration;

use super::conn::{PgConn, Session};
use super::errors::{pool_err, read_err};
use crate::error::{Error, Result};

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
/// last failure, so that text carries the causes ([`with_causes`](super::errors::with_causes)).
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
