//! The one writer: a thread that owns this process's only write connection
//! and applies every write (enqueues, claims, job applies, acks) with group
//! commit. Writes every table, but only through the operations other modules
//! hand it; it knows no table itself.
//!
//! Why one writer: SQLite allows one writer at a time. Threads that each open
//! their own write transaction fight over the lock with sleeps; funnelling
//! them into one thread turns the fight into a queue. Why group commit: with
//! `synchronous=FULL` each commit costs an fsync; the writer takes every
//! operation waiting in its channel, runs each durable one inside its own
//! SAVEPOINT (so a failing one rolls back alone; a run's apply step isolates
//! itself instead, and an operation alone in its group needs none) and
//! commits them together —
//! one fsync for the group, run by the syncer thread while the writer goes on
//! (see [`sync::SyncMode`]). A durable caller is answered only after an fsync
//! that began after its commit, so "it returned" still means "it is durable".
//!
//! The parts: [`op`] (what an operation is), [`cycle`] (a cycle's
//! transactions, and the [`Cycle`] a light operation queues follow-up work
//! with, such as the apply step of a run it started), [`start`] (a run's
//! start and apply step as one operation), [`group`] (one transaction:
//! savepoints, rollback, commit),
//! [`sync`] (fsyncs and the syncer thread), [`thread`] (the writer thread's
//! loop), [`watchdog`] (the transaction budget), [`oneshot`] (a blocked
//! caller's reply slot).

mod cycle;
mod group;
mod oneshot;
mod op;
mod start;
mod sync;
mod thread;
mod watchdog;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

pub(crate) use crate::driver::reply::Sink;
use crate::error::{Error, Result};
use crate::sqlite::checkpoint::Checkpointer;
use cycle::Core;
use oneshot::OneShot;
use op::{Durability, Op, Reply};
use sync::SyncMode;
use watchdog::Watchdog;

pub(crate) use cycle::Cycle;
pub(crate) use group::exec_cached;

/// The handle to the writer thread. Dropping it closes the channel; the thread
/// finishes the operations already sent and exits, and drop joins it.
pub(crate) struct Writer {
    /// Dropped first in `Drop`, which ends the writer loop.
    sender: Option<Sender<Op>>,
    /// The write connection and what every cycle needs, shared by the writer
    /// thread and by callers that find it idle (see [`Writer::run`]).
    core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
    /// Answers the writer thread's durable groups, after an fsync of the
    /// WAL with [`SyncMode::Wal`]; ends when the writer thread drops its
    /// sender.
    syncer: Option<JoinHandle<()>>,
    watchdog: Option<Watchdog>,
}

/// Tuning for the writer.
#[derive(Debug, Clone)]
pub(crate) struct WriterConfig {
    /// Most operations applied in one transaction.
    pub max_batch: usize,
    /// Whether durable commits must be fsynced (FULL) before their callers
    /// are answered.
    pub full_sync: bool,
    /// An operation running longer than this is interrupted (its whole
    /// transaction rolls back), so a handler that hangs inside its
    /// transaction cannot hold the write lock forever.
    pub op_budget: Option<Duration>,
}

impl Writer {
    pub(crate) fn spawn(conn: Connection, cfg: WriterConfig) -> Result<Writer> {
        // Every statement the writer runs stays prepared (rusqlite keeps 16
        // by default; enqueue, claim, run, outbox and admin paths use more).
        conn.set_prepared_statement_cache_capacity(128);
        let sync = SyncMode::for_connection(&conn, cfg.full_sync)?;
        let (sender, receiver) = crossbeam_channel::unbounded::<Op>();
        // Milliseconds since `epoch` when the current op started, 0 when idle,
        // -1 when the watchdog found it over budget.
        let epoch = Instant::now();
        let op_started = Arc::new(AtomicI64::new(0));
        let interrupts = Arc::new(AtomicU64::new(0));
        let watchdog = match cfg.op_budget {
            Some(budget) => Some(Watchdog::start(
                &conn,
                budget,
                epoch,
                &op_started,
                &interrupts,
            )?),
            None => None,
        };
        let max_batch = cfg.max_batch.max(1);
        let background_wal = if cfg.full_sync {
            None
        } else {
            sync::open_wal(&conn)
        };
        let checkpointer = Checkpointer::start(&conn);
        let core = Arc::new(Core {
            checkpointer,
            conn: Mutex::new(conn),
            sync,
            op_started,
            interrupts,
            epoch,
            queued: AtomicUsize::new(0),
            callers: AtomicUsize::new(0),
            background_wal,
            direct_syncs: Default::default(),
        });
        // The syncer answers durable groups off the writer thread: after
        // its fsync of the WAL with FULL, at once with SQLite's own sync.
        let (syncer_tx, rx) = crossbeam_channel::unbounded::<Vec<Reply>>();
        let c = core.clone();
        let syncer_thread = std::thread::Builder::new()
            .name("litejob-syncer".into())
            .spawn(move || sync::syncer_loop(c, rx))?;
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name("litejob-writer".into())
            .spawn(move || thread::writer_loop(c, receiver, max_batch, syncer_tx))?;
        Ok(Writer {
            sender: Some(sender),
            core,
            thread: Some(thread),
            syncer: Some(syncer_thread),
            watchdog,
        })
    }

    /// Operations the watchdog has interrupted so far, over the writer's
    /// life. An operation that reads it before and after its own work knows
    /// whether the watchdog stopped it: a fact, where the handler's error
    /// (or its panic) may carry no code.
    pub(crate) fn interrupts(&self) -> &Arc<AtomicU64> {
        &self.core.interrupts
    }

    /// Sends `f` to the writer; the receiver yields its result once the
    /// transaction holding it committed (or failed).
    pub(crate) fn submit<R, F>(&self, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = op::channel();
        self.send(Op::durable(f, tx));
        rx
    }

    /// [`Writer::submit`] for an operation that isolates itself (a run's
    /// apply step, see [`crate::sqlite::run::apply`]): the writer opens no
    /// savepoint for it, and trusts it, when it fails, to have undone its
    /// writes or ended the transaction.
    pub(crate) fn submit_apply<R, F>(&self, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = op::channel();
        self.send(Op::apply(f, tx));
        rx
    }

    /// [`Writer::submit`] for a light operation ([`Durability::Light`]),
    /// which may queue follow-up work in its [`Cycle`].
    pub(crate) fn submit_light<R, F>(&self, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection, &mut Cycle) -> Result<R> + Send + 'static,
    {
        let (tx, rx) = op::channel();
        self.send(Op::light(f, tx));
        rx
    }

    /// Hands `op` to the writer thread. If the writer is gone the op (and
    /// its reply sender) is dropped and the caller's receive sees the
    /// disconnect.
    fn send(&self, op: Op) {
        if let Some(s) = &self.sender {
            let _ = send_op(s, &self.core, op);
        }
    }

    /// Hands `f`, a durable operation, to the writer thread and never runs
    /// it on the caller's thread, as [`Writer::run`] may: the caller is an
    /// async executor's thread, which must not wait for a commit or the
    /// connection. The answer goes to `tx` once the commit is durable.
    pub(crate) fn submit_to<R, F, S>(&self, f: F, tx: S)
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
        S: Sink<Result<R>>,
    {
        self.send(Op::durable(f, tx));
    }

    /// [`Writer::submit_to`] for an operation that may run again: answered
    /// `Aborted` (rolled back with a neighbour, so nothing of it was
    /// written), it is sent again, up to `retries` times, by the thread
    /// that got that answer, as [`Writer::run`]'s callers retry it. Nobody
    /// has to poll for it: the operation is carried out whether or not its
    /// caller still waits for the answer.
    pub(crate) fn submit_retrying<R, F, S>(&self, f: Arc<F>, retries: u32, tx: S)
    where
        R: Send + 'static,
        F: Fn(&Connection) -> Result<R> + Send + Sync + 'static,
        S: Sink<Result<R>>,
    {
        // Without a sender (the writer is stopping) `tx` is dropped
        // unanswered, and its caller learns it.
        if let Some(sender) = &self.sender {
            let again = Retry {
                f: f.clone(),
                left: retries,
                tx,
                sender: sender.clone(),
                core: self.core.clone(),
            };
            self.send(Op::durable(move |c| f(c), again));
        }
    }

    /// Runs `f` in the writer and waits for its commit.
    pub(crate) fn run<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        self.run_with(Durability::Durable, f)
    }

    /// Runs `f` as a light write (no fsync, see [`Durability::Light`]).
    pub(crate) fn run_light<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        self.run_with(Durability::Light, f)
    }

    /// Runs `f` and waits for its commit. When the writer is idle (nothing
    /// queued, connection free) the caller runs the cycle itself, on its own
    /// thread: a lone producer then pays no thread hand-off, only its commit.
    /// Under load the writer thread groups everyone's operations.
    fn run_with<R, F>(&self, durability: Durability, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        struct Caller<'a>(&'a AtomicUsize);
        impl Drop for Caller<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let alone = self.core.callers.fetch_add(1, Ordering::AcqRel) == 0;
        let _caller = Caller(&self.core.callers);
        if let Some(sender) = &self.sender {
            if alone && sender.is_empty() && self.core.queued.load(Ordering::Acquire) == 0 {
                if let Ok(conn) = self.core.conn.try_lock() {
                    let (rx, tx) = OneShot::new();
                    let mut first = vec![Op::plain(durability, f, tx)];
                    let unsynced = self.core.cycle(&conn, &mut first, None, 0);
                    drop(conn);
                    self.core.sync_and_answer(unsynced);
                    return answer(rx.recv());
                }
            }
        }
        let (rx, tx) = OneShot::new();
        let mut op = Op::plain(durability, f, tx);
        op.blocking = true;
        self.send(op);
        answer(rx.recv())
    }
}

/// Puts `op` in the writer's channel, counted in [`Core::queued`]; gives
/// it back if the writer thread is gone.
fn send_op(sender: &Sender<Op>, core: &Core, op: Op) -> std::result::Result<(), Op> {
    core.queued.fetch_add(1, Ordering::AcqRel);
    sender.send(op).map_err(|e| {
        core.queued.fetch_sub(1, Ordering::AcqRel);
        e.0
    })
}

/// The answer of an operation sent with [`Writer::submit_retrying`]: an
/// `Aborted` with retries left sends the operation again, with this sink
/// (one retry fewer) as its answer; any other answer goes to `tx`.
struct Retry<F, S> {
    f: Arc<F>,
    left: u32,
    tx: S,
    /// A sender of the writer's channel, so the retry can be sent from any
    /// thread. It keeps the writer loop running until the operation is
    /// answered for good, which is what [`Writer`]'s drop promises anyway
    /// ("finishes the operations already sent").
    sender: Sender<Op>,
    core: Arc<Core>,
}

impl<F, S: Clone> Clone for Retry<F, S> {
    fn clone(&self) -> Self {
        Retry {
            f: self.f.clone(),
            left: self.left,
            tx: self.tx.clone(),
            sender: self.sender.clone(),
            core: self.core.clone(),
        }
    }
}

impl<R, F, S> Sink<Result<R>> for Retry<F, S>
where
    R: Send + 'static,
    F: Fn(&Connection) -> Result<R> + Send + Sync + 'static,
    S: Sink<Result<R>>,
{
    fn put(&self, v: Result<R>) {
        match v {
            Err(Error::Aborted(why)) if self.left > 0 => {
                let again = Retry {
                    left: self.left - 1,
                    ..self.clone()
                };
                let f = self.f.clone();
                if send_op(&self.sender, &self.core, Op::durable(move |c| f(c), again)).is_err() {
                    self.tx.put(Err(Error::Aborted(why)));
                }
            }
            v => self.tx.put(v),
        }
    }
}

/// Waits for a submitted operation's answer.
pub(crate) fn wait<R>(rx: Receiver<Result<R>>) -> Result<R> {
    answer(rx.recv().ok())
}

/// An answer, or the error for an operation dropped unanswered.
fn answer<R>(a: Option<Result<R>>) -> Result<R> {
    a.unwrap_or_else(|| {
        Err(Error::Internal(
            "the write operation panicked or the writer stopped".into(),
        ))
    })
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.sender.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
        drop(self.watchdog.take());
    }
}
