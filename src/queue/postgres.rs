//! What the facade offers on PostgreSQL only: the PostgreSQL transactions
//! and connections handed to the application (`write`, its async form,
//! `read`, and `enqueue_in` on the application's own transaction). Writes
//! `jobs` (enqueues) and what the application writes.

use crate::core::job::{Enqueued, NewJob};
use crate::core::validate;
use crate::driver::reply::WriteFuture;
use crate::error::Result;
use crate::postgres::tx::PgWriteTx;
use crate::postgres::{conn, enqueue, Postgres};

use super::Queue;

impl Queue<Postgres> {
    /// Runs `f` in a transaction on a pooled connection: what it writes and
    /// enqueues through [`PgWriteTx::enqueue`] commits together, or not at
    /// all when `f` returns an error.
    pub fn write<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut PgWriteTx<'_, '_>) -> Result<R>,
    {
        let store = self.store();
        store.writable()?;
        let now = self.now();
        let (r, enqueued) = store.handle().write(&self.inner.rules, now, f)?;
        if enqueued {
            self.notify();
        }
        Ok(r)
    }

    /// [`Queue::write`] for async code: `f` runs on one of the store's
    /// threads, in a transaction on a pooled connection; what it writes and
    /// enqueues commits together, or not at all when it returns an error.
    /// **Dropping the future does not withdraw it**: `f` still runs and its
    /// transaction may commit.
    pub fn write_async<R, F>(&self, f: F) -> WriteFuture<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut PgWriteTx<'_, '_>) -> Result<R> + Send + 'static,
    {
        let rules = self.inner.rules.clone();
        let now = self.now();
        let (fut, tx) = WriteFuture::channel();
        self.store()
            .offload(self.deliver(tx), move |h| h.write(&rules, now, f));
        fut
    }

    /// Runs `f` on a pooled connection, for the application's own reads of
    /// the queue's tables (`SELECT … FROM jobs`) or of its own. Behind a
    /// transaction pooler `f` runs inside a transaction with the queue's
    /// settings (its `search_path` among them), committed after it: keep
    /// the rows it reads inside `f` (a row keeps its statement, which must
    /// not outlive the transaction there).
    pub fn read<R>(&self, f: impl FnOnce(&mut postgres::Client) -> Result<R>) -> Result<R> {
        let store = self.store();
        let mut c = store.pool.get()?;
        c.read_by_hand(f)
    }

    /// Enqueues inside a transaction the application opened itself (with
    /// the `postgres` crate) on the same database. The job exists if and
    /// only if that transaction commits; call [`Queue::notify`] after the
    /// commit to wake this process's workers at once (other processes
    /// poll, or hear the next notification).
    pub fn enqueue_in(
        &self,
        client: &mut impl postgres::GenericClient,
        job: &NewJob,
    ) -> Result<Enqueued> {
        // The application's own transaction is not read-only: only this
        // check keeps a read-only queue from writing through it.
        self.store().writable()?;
        let now = self.now();
        let valid = validate::validate(job, &self.inner.rules, now)?;
        // By its text: prepared and closed inside the caller's transaction,
        // so that it is safe behind a transaction pooler too.
        let st = conn::Stmt::Text(enqueue::INSERT_ONE);
        enqueue::insert(client, &st, &valid, now)
    }
}
