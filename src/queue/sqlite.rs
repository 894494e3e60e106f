//! What the facade offers on a file only: the SQLite transactions and
//! connections handed to the application (`write`, its async form,
//! `read`, `connect`, and `enqueue_in` on the application's own
//! transaction). Writes `jobs` (enqueues) and what the application writes.

use rusqlite::Connection;

use crate::core::job::{Enqueued, NewJob};
use crate::core::validate;
use crate::driver::reply::WriteFuture;
use crate::driver::Store;
use crate::error::Result;
use crate::sqlite::tx::{in_write_tx, WriteTx};
use crate::sqlite::{db, enqueue, Sqlite};

use super::Queue;

impl Queue<Sqlite> {
    /// Runs `f` in a write transaction on the writer thread, where it
    /// commits together with other writes (group commit). What `f` writes
    /// and enqueues through [`WriteTx::enqueue`] commits together, or not
    /// at all when `f` returns an error.
    pub fn write<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> Result<R> + Send + 'static,
    {
        let rules = self.inner.rules.clone();
        let now = self.now();
        let (r, enqueued) = self
            .store()
            .writer()?
            .run(move |conn| in_write_tx(conn, &rules, now, f))?;
        if enqueued {
            self.notify();
        }
        Ok(r)
    }

    /// [`Queue::write`] for async code: `f` runs in a write transaction on
    /// the writer thread, where what it writes and what it enqueues through
    /// [`WriteTx::enqueue`] commit together ("insert the order and enqueue
    /// its job"), or not at all when it returns an error, which the future
    /// resolves to. The future resolves once the commit is durable; `f`
    /// never runs on the caller's thread.
    ///
    /// `f` is sent to the writer when this returns. **Dropping the future
    /// does not withdraw it**: `f` still runs and its transaction may
    /// commit. If it enqueues, enqueue again with the same key to learn
    /// whether it did (always safe).
    pub fn write_async<R, F>(&self, f: F) -> WriteFuture<R>
    where
        R: Send + 'static,
        F: FnOnce(&WriteTx<'_>) -> Result<R> + Send + 'static,
    {
        // The rules, not the queue: see `Inner::rules`.
        let rules = self.inner.rules.clone();
        let now = self.now();
        let (fut, tx) = WriteFuture::channel();
        let writer = match self.store().writer() {
            Ok(w) => w,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        writer.submit_to(
            move |conn: &Connection| in_write_tx(conn, &rules, now, f),
            self.deliver(tx),
        );
        fut
    }

    /// Runs `f` on a pooled reader connection. It is read-only (`PRAGMA
    /// query_only`): a write fails with an error and changes nothing; write
    /// through [`Queue::write`].
    pub fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        self.store().read(f)
    }

    /// A new connection to the file with litejob's pragmas (busy timeout,
    /// synchronous, foreign keys), for the application's own transactions.
    /// Open write transactions with `BEGIN IMMEDIATE`
    /// ([`crate::sqlite::immediate`]).
    pub fn connect(&self) -> Result<Connection> {
        let store = self.store();
        store.writable()?;
        db::connect(&store.path, &store.conn_cfg)
    }

    /// Enqueues inside a transaction the application opened itself on its
    /// own connection to the same file (see [`Queue::connect`]). The job
    /// exists if and only if that transaction commits. Call
    /// [`Queue::notify`] after the commit to wake workers at once;
    /// otherwise they see it at their next poll.
    pub fn enqueue_in(&self, conn: &Connection, job: &NewJob) -> Result<Enqueued> {
        self.store().writable()?;
        let now = self.now();
        let valid = validate::validate(job, &self.inner.rules, now)?;
        enqueue::insert(conn, &valid, now)
    }

    /// Test hook: sets `PRAGMA max_page_count` on the writer connection (the
    /// only one that writes), so tests can simulate a full disk and then
    /// give the space back. Returns the limit SQLite applied (never below
    /// the file's current size). Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_max_page_count(&self, pages: u64) -> Result<u64> {
        self.store().writer()?.run(move |c| {
            Ok(
                c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                    r.get::<_, i64>(0)
                })? as u64,
            )
        })
    }
}
