//! The runner threads that free a worker from a hung prepare step. A
//! thread cannot be killed, so a run with a timeout and a prepare step of
//! the user's runs that step on a runner thread its worker owns (started
//! the first time, reused run after run) while the worker waits for the
//! answer until the run's deadline or its stop. Past either, the worker
//! abandons the thread (it goes on in the background, and what it
//! returns is dropped) and takes its next job at once; a new runner is
//! started for its next such run. A runtime leaves at most
//! [`Runners::cap`] threads behind this way; past that, the worker waits
//! for the stuck code itself before its next job. Writes no table.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{select, Receiver, Sender};

use crate::core::handler::{JobContext, PrepareStop, Prepared};

/// What a prepare step answers.
pub(crate) type Answer = std::result::Result<Prepared, PrepareStop>;

/// A prepare step to run, and where its answer goes.
type Task = (Box<dyn FnOnce() -> Answer + Send>, Sender<Answer>);

/// A runtime's account of the runner threads its workers left behind.
pub(crate) struct Runners {
    /// Most threads left running at once; past it a worker waits.
    cap: usize,
    /// Threads left behind whose code has not returned yet.
    left: Arc<AtomicUsize>,
    /// Numbers the runner threads' names.
    next: AtomicUsize,
}

impl Runners {
    /// At most `cap` threads left behind at once (at least one).
    pub(crate) fn new(cap: usize) -> Runners {
        Runners {
            cap: cap.max(1),
            left: Arc::new(AtomicUsize::new(0)),
            next: AtomicUsize::new(1),
        }
    }

    /// How many runner threads are left behind, their code still running.
    pub(crate) fn left_behind(&self) -> usize {
        self.left.load(Ordering::SeqCst)
    }

    /// Takes a place for one more thread left behind, if under the cap.
    fn leave_one(&self) -> bool {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .is_ok()
    }
}

/// A runner thread as its worker holds it.
struct Thread {
    tasks: Sender<Task>,
    handle: JoinHandle<()>,
    /// Set before its worker lets go of it: on its way out the thread
    /// gives back its place among those left behind.
    abandoned: Arc<AtomicBool>,
}

/// A worker's runner: none until the first run that needs one. A drain's
/// (or a worker without [`Runners`]) runs everything in the caller's
/// thread.
pub(crate) struct Runner {
    runners: Option<Arc<Runners>>,
    thread: Option<Thread>,
    /// The answer of a run the worker gave up on past the cap: it waits
    /// for it before its next job.
    stuck: Option<Receiver<Answer>>,
}

/// How a run on the runner ended.
pub(crate) enum Ran {
    /// Its prepare step answered in time.
    Answered(Answer),
    /// Its deadline passed or it was stopped first: the worker let go of
    /// it (see [`Runner::run`]).
    Abandoned,
}

impl Runner {
    /// A worker's runner, its threads accounted in `runners`.
    pub(crate) fn new(runners: Arc<Runners>) -> Runner {
        Runner {
            runners: Some(runners),
            thread: None,
            stuck: None,
        }
    }

    /// A runner that runs nothing on a thread of its own (a drain's).
    pub(crate) fn inline() -> Runner {
        Runner {
            runners: None,
            thread: None,
            stuck: None,
        }
    }

    /// Whether runs may go to a runner thread.
    pub(crate) fn threaded(&self) -> bool {
        self.runners.is_some()
    }

    /// Waits for the stuck code of a run given up on past the cap, if
    /// there is one: the worker's next job waits for it (as a worker with
    /// no runner would).
    pub(crate) fn settle(&mut self) {
        if let Some(rx) = self.stuck.take() {
            let _ = rx.recv();
        }
    }

    /// Runs `task`, the prepare step of `ctx`'s run (which has a
    /// deadline), on the runner thread, and waits for its answer until the
    /// deadline or the run's stop. Then the run's signal is stopped and the
    /// thread abandoned, or, with [`Runners::cap`] threads left behind
    /// already, kept and waited for at [`Runner::settle`]; either way a
    /// warning names the job.
    pub(crate) fn run(
        &mut self,
        ctx: &JobContext,
        task: Box<dyn FnOnce() -> Answer + Send>,
    ) -> Ran {
        self.settle();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut task = Some((task, tx));
        if let Some(t) = &self.thread {
            if let Err(e) = t.tasks.send(task.take().expect("not sent yet")) {
                // Its thread is gone (cannot happen: it outlives its
                // sender): a new one takes the task.
                task = Some(e.into_inner());
                self.thread = None;
            }
        }
        if let Some(task) = task {
            match self.start_thread() {
                Some(t) => {
                    let _ = t.tasks.send(task);
                    self.thread = Some(t);
                }
                // No thread could be started: the step runs here.
                None => return Ran::Answered((task.0)()),
            }
        }
        let signal = &ctx.signal;
        let Some(deadline) = signal.deadline() else {
            return Ran::Answered(wait(&rx));
        };
        let never = crossbeam_channel::never();
        let woken = signal.woken().unwrap_or(&never);
        select! {
            recv(rx) -> a => return Ran::Answered(a.unwrap_or_else(lost)),
            recv(woken) -> _ => {}
            recv(crossbeam_channel::at(deadline)) -> _ => {
                signal.stop(crate::core::cancel::Stop::TimedOut);
            }
        }
        // An answer that came at the same moment is still the run's own.
        if let Ok(a) = rx.try_recv() {
            return Ran::Answered(a);
        }
        self.let_go(ctx, rx);
        Ran::Abandoned
    }

    /// Lets go of the run under way on the runner: its thread is left
    /// behind, or, past the cap, kept for [`Runner::settle`] to wait for.
    fn let_go(&mut self, ctx: &JobContext, rx: Receiver<Answer>) {
        let why = match ctx.signal.stopped() {
            Some(crate::core::cancel::Stop::Cancelled) => "its job was cancelled",
            Some(crate::core::cancel::Stop::Lost) => "its run lost its job",
            _ => "its timeout ran out",
        };
        let runners = self.runners.as_ref().expect("a threaded runner");
        if runners.leave_one() {
            if let Some(t) = self.thread.take() {
                t.abandoned.store(true, Ordering::SeqCst);
                // Dropping the sender ends the thread once the stuck code
                // returns; its handle is let go of (it cannot be joined
                // while the code hangs).
                drop(t.tasks);
                drop(t.handle);
            }
            log::warn!(target: "litejob", job_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str();
                "job {} ({}): its prepare step is still running but {why}; its worker goes on and leaves it behind ({} left behind)",
                ctx.id, ctx.kind, runners.left_behind());
        } else {
            self.stuck = Some(rx);
            log::warn!(target: "litejob", job_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str();
                "job {} ({}): its prepare step is still running but {why}; {} runner threads are left behind already, so its worker waits for it before its next job",
                ctx.id, ctx.kind, runners.left_behind());
        }
    }

    /// Starts a runner thread; None when the system refuses one.
    fn start_thread(&self) -> Option<Thread> {
        let runners = self.runners.as_ref()?;
        let (tasks, rx) = crossbeam_channel::unbounded::<Task>();
        let abandoned = Arc::new(AtomicBool::new(false));
        let (flag, left) = (abandoned.clone(), runners.left.clone());
        let n = runners.next.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name(format!("litejob-runner-{n}"))
            .spawn(move || {
                for (task, answer) in rx {
                    let _ = answer.send(task());
                }
                if flag.load(Ordering::SeqCst) {
                    left.fetch_sub(1, Ordering::SeqCst);
                }
            });
        match spawned {
            Ok(handle) => Some(Thread {
                tasks,
                handle,
                abandoned,
            }),
            Err(e) => {
                log::warn!(target: "litejob", "could not start a runner thread ({e}); the prepare step runs on its worker");
                None
            }
        }
    }
}

impl Drop for Runner {
    /// Ends and joins the runner thread, idle between runs; one the
    /// worker is stuck behind is let go of instead.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            drop(t.tasks);
            if self.stuck.is_none() {
                let _ = t.handle.join();
            }
        }
    }
}

/// Waits for an answer whatever the time.
fn wait(rx: &Receiver<Answer>) -> Answer {
    rx.recv().unwrap_or_else(lost)
}

/// The answer of a runner thread that died without one (a prepare step
/// catches its panics, so it cannot).
fn lost<E>(_: E) -> Answer {
    Err(PrepareStop::Panicked(
        "panicked: the runner thread ended without an answer".into(),
    ))
}
