//! The bench's async executor: tasks polled one at a time on the calling
//! thread, woken through a `std::task::Wake` waker that puts them back in
//! the run queue. Enough to measure `enqueue_async` from many tasks on one
//! thread without pulling a runtime into the command. Writes no table.

use litejob::__command::{lock, wait};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Wake, Waker};

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The tasks ready to be polled, and the condvar the executor sleeps on
/// when there are none.
#[derive(Default)]
struct RunQueue {
    ready: Mutex<VecDeque<Arc<Task>>>,
    woken: Condvar,
}

struct Task {
    /// None once it completed.
    future: Mutex<Option<BoxedTask>>,
    /// In the run queue already: a second wake-up adds nothing.
    queued: AtomicBool,
    runs: Arc<RunQueue>,
}

impl Task {
    fn schedule(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            let mut ready = lock(&self.runs.ready);
            ready.push_back(self.clone());
            drop(ready);
            self.runs.woken.notify_one();
        }
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.schedule();
    }
}

/// Runs every future to completion on this thread, all of them at once.
pub fn run_all<F>(futures: impl IntoIterator<Item = F>)
where
    F: Future<Output = ()> + Send + 'static,
{
    let runs = Arc::new(RunQueue::default());
    let mut left = 0usize;
    for f in futures {
        left += 1;
        Arc::new(Task {
            future: Mutex::new(Some(Box::pin(f))),
            queued: AtomicBool::new(false),
            runs: runs.clone(),
        })
        .schedule();
    }
    while left > 0 {
        let task = {
            let mut ready = lock(&runs.ready);
            loop {
                match ready.pop_front() {
                    Some(t) => break t,
                    None => ready = wait(&runs.woken, ready),
                }
            }
        };
        task.queued.store(false, Ordering::Release);
        let mut slot = lock(&task.future);
        let Some(future) = slot.as_mut() else {
            continue;
        };
        let waker = Waker::from(task.clone());
        if future
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready()
        {
            *slot = None;
            left -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Poll;

    #[test]
    fn every_task_completes_when_woken_from_other_threads() {
        let done = Arc::new(AtomicUsize::new(0));
        let tasks = (0..50).map(|i| {
            let done = done.clone();
            async move {
                // Resolves once another thread wakes it, after a first Pending.
                let mut handed = false;
                std::future::poll_fn(move |cx| {
                    if handed {
                        return Poll::Ready(());
                    }
                    handed = true;
                    let waker = cx.waker().clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(i % 5));
                        waker.wake();
                    });
                    Poll::Pending
                })
                .await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        run_all(tasks);
        assert_eq!(done.load(Ordering::Relaxed), 50);
    }
}
