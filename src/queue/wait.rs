//! Waiting for a job's end: [`Queue::wait`] and [`Queue::wait_async`].
//! Writes no table.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::core::job::Job;
use crate::driver::reply::WriteFuture;
use crate::driver::Engine;
use crate::error::Result;

use super::Queue;

/// How often a waiter looks at the database when nothing in this process
/// told it of an end: a job run by another process is seen this late at
/// most (the runtime's default poll interval).
const WAIT_POLL: Duration = Duration::from_millis(500);

impl<E: Engine> Queue<E> {
    /// Waits until the job of idempotency key `key` has finished
    /// (`succeeded`, `dead` or `cancelled`) and returns it, with its
    /// [`output`](crate::Job::output); `None` if it has not by `timeout`
    /// (or no job has the key by then). A job a runtime of this process
    /// finishes is answered at its commit, through the runtime's own
    /// wake-up; one finished elsewhere within half a second.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use litejob::{NewJob, Outcome};
    /// # let (queue, _clock) = litejob::testing::temp_queue()?;
    /// queue.enqueue(NewJob::new("square", "square-7", &7))?;
    /// let mut runtime = queue
    ///     .runtime()
    ///     .handler("square", |_tx, n: i64| Outcome::done_with(&(n * n)))
    ///     .start()?;
    /// let job = queue.wait("square-7", Duration::from_secs(10))?.expect("finished");
    /// assert_eq!(job.output.as_deref(), Some("49"));
    /// runtime.stop();
    /// # Ok::<(), litejob::Error>(())
    /// ```
    pub fn wait(&self, key: &str, timeout: Duration) -> Result<Option<Job>> {
        let deadline = Instant::now() + timeout;
        // Joined before the first look: an end between the look and the
        // wait is not missed.
        let waiting = self.inner.done_wake.join();
        loop {
            if let Some(job) = self.job_by_key(key)? {
                if job.finished_at.is_some() {
                    return Ok(Some(job));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let _ = waiting.rx.recv_timeout(left.min(WAIT_POLL));
        }
    }

    /// [`Queue::wait`] as a future, for async code: a thread of its own
    /// waits, so no executor thread is blocked.
    pub fn wait_async(&self, key: &str, timeout: Duration) -> WaitFuture {
        let (future, reply) = WriteFuture::channel();
        let (queue, key) = (self.clone(), key.to_string());
        let spawned = std::thread::Builder::new()
            .name("litejob-wait".into())
            .spawn(move || reply.put(queue.wait(&key, timeout)));
        WaitFuture(match spawned {
            Ok(_) => future,
            Err(e) => WriteFuture::ready(Err(crate::error::Error::Io(e))),
        })
    }
}

/// The end of a job, awaited ([`Queue::wait_async`]): the finished job,
/// or `None` at the timeout. It writes nothing, so dropping it changes
/// nothing in the queue; its thread waits on until the timeout or the
/// job's end, then goes. `Send + 'static`, for any executor.
#[must_use = "a wait does nothing but answer: await it"]
pub struct WaitFuture(WriteFuture<Option<Job>>);

impl Future for WaitFuture {
    type Output = Result<Option<Job>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}
