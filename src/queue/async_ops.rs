//! The producer's API for async code: `enqueue_async` and
//! `enqueue_many_async` hand their write to a thread of the library's — the
//! writer for a file, the store's async threads for PostgreSQL — and
//! return a [`WriteFuture`] that thread completes. The caller's thread (an
//! executor's) never runs a commit, waits for one, or takes a connection.
//! Writes `jobs` through the store's enqueue, like the blocking forms.

use crate::core::job::{Enqueued, NewJob};
use crate::driver::reply::{Deliver, ReplyTx, WriteFuture};
use crate::driver::{Engine, Store};
use crate::error::Result;

use super::Queue;

impl<E: Engine> Queue<E> {
    /// [`Queue::enqueue`] for async code: returns at once, without waiting
    /// for the commit, and the future resolves to the same answer, `New(id)`
    /// or `Duplicate(id)`, once the commit is durable. Bad input resolves to
    /// the same [`crate::error::Error`] at once, with nothing written.
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
        let now = self.now();
        let valid = match crate::core::validate::validate_owned(job, &self.inner.rules, now) {
            Ok(v) => v,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        let (fut, tx) = WriteFuture::channel();
        self.store().enqueue_async(valid, now, self.deliver(tx));
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
        let now = self.now();
        let valid = match self.validate_batch(jobs, now) {
            Ok(v) => v,
            Err(e) => return WriteFuture::ready(Err(e)),
        };
        let (fut, tx) = WriteFuture::channel();
        self.store()
            .enqueue_many_async(valid, now, self.deliver(tx));
        fut
    }

    pub(crate) fn deliver<R>(&self, tx: ReplyTx<Result<R>>) -> Deliver<R> {
        Deliver {
            tx,
            wake: self.inner.job_wake.clone(),
        }
    }
}
