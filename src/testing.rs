//! Helpers for an application's tests of its handlers: a queue in a
//! temporary file on a clock the test moves ([`temp_queue`],
//! [`ManualClock`]), assertions on what was enqueued, and
//! [`RuntimeBuilder::drain`](crate::RuntimeBuilder::drain), which runs
//! what is due in the test's own thread. Writes no table itself.
//!
//! ```
//! use std::time::Duration;
//! use litejob::testing::{assert_enqueued, temp_queue};
//! use litejob::{NewJob, Outcome};
//!
//! let (queue, clock) = temp_queue()?;
//! queue.enqueue(NewJob::new("email", "welcome-7", &"ada@example.com"))?;
//! assert_enqueued(&queue, "email", "welcome-7");
//!
//! let drained = queue
//!     .runtime()
//!     .handler("email", |_tx, _to: String| {
//!         Ok(Outcome::RetryAfter(Duration::from_secs(600), "mail server busy".into()))
//!     })
//!     .drain()?;
//! assert_eq!(drained.retried, 1);
//!
//! clock.advance(Duration::from_secs(600));
//! let drained = queue.runtime().handler("email", |_tx, _to: String| Ok(Outcome::Done)).drain()?;
//! assert_eq!(drained.succeeded, 1);
//! # Ok::<(), litejob::Error>(())
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::job::{Job, JobFilter, JobState};
use crate::core::options::{QueueOptions, Synchronous};
use crate::driver::Engine;
use crate::error::{Error, Result};
use crate::queue::Queue;

pub use crate::core::time::ManualClock;
pub use crate::runtime::Drained;

/// A queue in a new file of its own in the system's temporary directory,
/// on a [`ManualClock`] standing at the time it was made. The directory
/// goes when the queue's last handle (and any runtime on it) is dropped.
/// Its commits are not flushed to the disk one by one
/// ([`Synchronous::Normal`]): a test loses nothing to a power cut it never
/// has, and runs faster.
pub fn temp_queue() -> Result<(Queue, ManualClock)> {
    let dir = TempDir::new()?;
    let clock = ManualClock::default();
    let opts = QueueOptions::default()
        .with_synchronous(Synchronous::Normal)
        .with_clock(clock.clone());
    let queue: Queue = Queue::open_with(dir.0.join("queue.db"), opts)?;
    let _ = queue.store().keep.set(Box::new(dir));
    Ok((queue, clock))
}

/// Panics unless a job of `kind` with idempotency key `key` waits to run
/// in `queue` (state `queued`, due now or later). The message lists the
/// jobs that do.
#[track_caller]
pub fn assert_enqueued<E: Engine>(queue: &Queue<E>, kind: &str, key: &str) {
    match queue.job_by_key(key) {
        Ok(Some(j)) if j.kind == kind && j.state == JobState::Queued => {}
        Ok(found) => panic!(
            "expected a queued job of kind {kind:?} with key {key:?}{}; {}",
            other_state(found, kind),
            queued_list(queue)
        ),
        Err(e) => panic!("could not read the queue {}: {e}", queue.location()),
    }
}

/// Panics if a job of `kind` with idempotency key `key` waits to run in
/// `queue` (state `queued`). The message lists the jobs that do.
#[track_caller]
pub fn refute_enqueued<E: Engine>(queue: &Queue<E>, kind: &str, key: &str) {
    match queue.job_by_key(key) {
        Ok(Some(j)) if j.kind == kind && j.state == JobState::Queued => panic!(
            "expected no queued job of kind {kind:?} with key {key:?}, found job {} due at {}; {}",
            j.id,
            crate::core::time::format_millis(j.run_at),
            queued_list(queue)
        ),
        Ok(_) => {}
        Err(e) => panic!("could not read the queue {}: {e}", queue.location()),
    }
}

/// Where the key's job is instead, if it is there in another state or
/// under another kind.
fn other_state(found: Option<Job>, kind: &str) -> String {
    match found {
        None => String::new(),
        Some(j) if j.kind != kind => format!(
            " (the key belongs to job {} of kind {:?}, {})",
            j.id,
            j.kind,
            j.state.as_str()
        ),
        Some(j) => format!(" (job {} has it, {})", j.id, j.state.as_str()),
    }
}

/// The queued jobs, newest first, as an assertion's message lists them.
fn queued_list<E: Engine>(queue: &Queue<E>) -> String {
    const SHOWN: u32 = 20;
    let filter = JobFilter::default()
        .with_state(JobState::Queued)
        .with_limit(SHOWN + 1);
    match queue.jobs(&filter) {
        Ok(jobs) if jobs.is_empty() => "no job is queued".into(),
        Ok(jobs) => {
            let more = jobs.len() > SHOWN as usize;
            let lines: Vec<String> = jobs
                .iter()
                .take(SHOWN as usize)
                .map(|j| {
                    format!(
                        "  job {} kind {:?} key {:?} due at {}",
                        j.id,
                        j.kind,
                        j.idempotency_key,
                        crate::core::time::format_millis(j.run_at)
                    )
                })
                .collect();
            format!(
                "queued instead (newest first{}):\n{}",
                if more { ", the first 20" } else { "" },
                lines.join("\n")
            )
        }
        Err(e) => format!("the queued jobs could not be listed: {e}"),
    }
}

/// A directory of the test's own, removed with everything in it when
/// dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tag = crate::core::backoff::Rng::from_entropy().next_u64() as u32;
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("litejob-test-{}-{n}-{tag:08x}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(Error::Io)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
