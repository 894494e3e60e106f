//! The producer's API for async code: `enqueue_async`, `enqueue_many_async`
//! and `write_async` (`pg_write_async` on PostgreSQL) hand their write to a
//! thread of the library's — the writer for a file, the store's async
//! threads for PostgreSQL — and return a [`WriteFuture`] that thread
//! completes. The caller's thread (an executor's) never runs a commit,
//! waits for one, or takes a connection. Writes `jobs` through enqueue,
//! like the blocking forms.

use std::sync::Arc;

use rusqlite::Connection;

use super::{in_write_tx, Queue, Wakers, WriteTx, ABORTED_RETRIES};
use crate::core::job::{Enqueued, NewJob};
use crate::core::time::now_ms;
use crate::driver::reply::{ReplyTx, WriteFuture};
use crate::error::Result;
use crate::sqlite::enqueue;
use crate::sqlite::writer::Sink;

impl Queue {
    /// [`Queue::enqueue`] for async code: returns at once, without waiting
    /// for the commit, and the future resolves to the same answer, `New(id)`
    /// or `Duplicate(id)`, once the commit is durable. Bad input resolves to
    /// the same [`crate::Error`] at once, with nothing written.
    ///
    /// The job is sent to the writer thread when this returns. **Dropping
    /// the future does not withdraw it**: the enqueue may still commit (and
    /// is retried as [`Queue::enqueue`] retries it). To learn its id,
    /// enqueue again with the same key: always safe.
    ///
    /// ```
    /// # use litejob::{NewJob, Queue};
    /// # fn main() -> litejob::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let queue = Queue::open(dir.path().join("q.db"))?;
    /// async fn on_webhook(queue: &Queue, event_id: &str) -> litejob::Result<i64> {
    ///     let job = NewJob::new("payment.succeeded", event_id, &event_id);
    ///     // New or Duplicate: either way the event is recorded once.
    ///     Ok(queue.enqueue_async(job).await?.id())
    /// }
    /// # let id = block_on(on_webhook(&queue, "evt_1"))?;
    /// # assert_eq!(block_on(on_webhook(&queue, "evt_1"))?, id);
    /// # Ok(())
    /// # }
    /// # // A minimal executor: the library needs no runtime.
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     struct Unpark(std::thread::Thread);
    /// #     impl std::task::Wake for Unpark {
    /// #         fn wake(self: std::sync::Arc<Self>) { self.0.unpark() }
    /// #     }
    /// #     let waker = std::sync::Arc::new(Unpark(std::thread::current())).into();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; }
    /// #         std::thread::park();
    /// #     }
    /// # }
    /// ```
    pub fn enqueue_async(&self, job: NewJob) -> WriteFuture<Enqueued> {
        let now = self.backend().now();
        let valid = match crate::core::validate::validate_owned(job, &self.inner.rules, now) {
            Ok(v) => v,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        let (fut, tx) = WriteFuture::channel();
        #[cfg(feature = "postgres")]
        if let Some(store) = self.postgres() {
            store.offload(self.deliver(tx), move |h| {
                let e = h.enqueue(&valid, now)?;
                Ok((e, !e.is_duplicate()))
            });
            return fut;
        }
        let insert = move |conn: &Connection| {
            let e = enqueue::insert(conn, &valid, now)?;
            Ok((e, !e.is_duplicate()))
        };
        self.writer()
            .submit_retrying(Arc::new(insert), ABORTED_RETRIES, self.deliver(tx));
        fut
    }

    /// [`Queue::enqueue_many`] for async code: one transaction, all written
    /// or none, and any invalid job refuses the whole batch (the future
    /// resolves to the error at once, nothing written). Returns without
    /// waiting for the commit, like [`Queue::enqueue_async`], and like it,
    /// **dropping the future does not withdraw the batch**: it may still
    /// commit. Enqueue it again to learn the ids: every job already there
    /// answers `Duplicate(id)`.
    pub fn enqueue_many_async(&self, jobs: Vec<NewJob>) -> WriteFuture<Vec<Enqueued>> {
        let now = self.backend().now();
        let valid = match self.validate_batch(jobs, now) {
            Ok(v) => v,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        let (fut, tx) = WriteFuture::channel();
        #[cfg(feature = "postgres")]
        if let Some(store) = self.postgres() {
            store.offload(self.deliver(tx), move |h| {
                let r = h.enqueue_many(&valid, now)?;
                let created = r.iter().any(|e| !e.is_duplicate());
                Ok((r, created))
            });
            return fut;
        }
        let insert = move |conn: &Connection| {
            let r = enqueue::insert_many(conn, &valid, now)?;
            let created = r.iter().any(|e| !e.is_duplicate());
            Ok((r, created))
        };
        self.writer()
            .submit_retrying(Arc::new(insert), ABORTED_RETRIES, self.deliver(tx));
        fut
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
        let Ok(store) = self.sqlite("Queue::write_async") else {
            return WriteFuture::ready(Err(crate::Error::Unsupported(
                "Queue::write_async hands out a SQLite transaction; this queue is on PostgreSQL: \
                 use Queue::pg_write_async"
                    .into(),
            )));
        };
        // The rules, not the queue: see `Inner::rules`.
        let rules = self.inner.rules.clone();
        let now = now_ms();
        let (fut, tx) = WriteFuture::channel();
        let writer = match store.writer() {
            Ok(w) => w,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        writer.submit_to(
            move |conn: &Connection| in_write_tx(conn, &rules, now, f),
            self.deliver(tx),
        );
        fut
    }

    /// [`Queue::pg_write`] for async code: `f` runs on one of the store's
    /// threads, in a transaction on a pooled connection; what it writes and
    /// enqueues commits together, or not at all when it returns an error.
    /// As with [`Queue::write_async`], **dropping the future does not
    /// withdraw it**.
    #[cfg(feature = "postgres")]
    pub fn pg_write_async<R, F>(&self, f: F) -> WriteFuture<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut crate::PgWriteTx<'_, '_>) -> Result<R> + Send + 'static,
    {
        let Some(store) = self.postgres() else {
            return WriteFuture::ready(Err(crate::Error::Unsupported(
                "Queue::pg_write_async hands out a PostgreSQL transaction; this queue is a SQLite \
                 file: use Queue::write_async"
                    .into(),
            )));
        };
        let rules = self.inner.rules.clone();
        let now = self.backend().now();
        let (fut, tx) = WriteFuture::channel();
        store.offload(self.deliver(tx), move |h| h.write(&rules, now, f));
        fut
    }

    fn deliver<R>(&self, tx: ReplyTx<Result<R>>) -> Deliver<R> {
        Deliver {
            tx,
            wake: self.inner.job_wake.clone(),
        }
    }
}

/// Where an async write's answer goes: the caller's future, after waking
/// this process's workers if the write created a job — on the thread that
/// answers, so the workers do not wait for the caller's executor to poll.
pub(crate) struct Deliver<R> {
    tx: ReplyTx<Result<R>>,
    wake: Arc<Wakers>,
}

impl<R> Clone for Deliver<R> {
    fn clone(&self) -> Self {
        Deliver {
            tx: self.tx.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<R: Send + 'static> Sink<Result<(R, bool)>> for Deliver<R> {
    fn put(&self, answer: Result<(R, bool)>) {
        let answer = answer.map(|(r, created)| {
            if created {
                self.wake.wake();
            }
            r
        });
        self.tx.put(answer);
    }
}
