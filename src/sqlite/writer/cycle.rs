//! A writer cycle: the [`Cycle`] value through which a light operation
//! queues follow-up work (the apply steps of the runs it started, light
//! follow-ups), and [`Core::cycle`], which runs a cycle's transactions and
//! answers them. Writes no table itself.

use crate::core::sync::lock;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::group::run_group;
use super::op::{channel, Durability, Op, Reply, Status};
use super::sync::SyncMode;
use crate::driver::reply::Sink;
use crate::error::{Error, Result};
use crate::sqlite::checkpoint::Checkpointer;

/// The cycle a light operation runs in, as far as the operation may touch
/// it: work queued here runs later in the same cycle, and only if the
/// operation committed. Only the writer makes one, and only for a light
/// operation's body, so a durable operation, or code running outside any
/// operation, has none to queue work with.
pub(crate) struct Cycle {
    /// What the operation queued, in order; tied to its answer once it
    /// returns (see [`Cycle::settle`]).
    queued: Vec<Op>,
}

impl Cycle {
    pub(super) fn new() -> Cycle {
        Cycle { queued: Vec::new() }
    }

    /// Hands `started`, a run this operation just started, to its apply
    /// step: `apply` gets it by value in this cycle's next transaction —
    /// after the light commit, so after the run's start — and only if the
    /// operation committed: otherwise `apply` does not run (no user code of
    /// the run may run while its attempt row is not there to be charged)
    /// and is answered `Aborted`. A cycle thus never ends with a run
    /// started but not applied, so a crash abandons only the runs of the
    /// cycle it hit. The apply step is self-isolated and must keep that
    /// rule ([`super::Writer::submit_apply`]). This is how every
    /// run without a prepare step reaches its apply step: a claim starts
    /// the jobs it takes and has them applied in the same cycle, without a
    /// round trip through a worker (a job enqueued in one cycle can run in
    /// that very cycle), and a worker's start does the same
    /// ([`super::Writer::start`]).
    pub(crate) fn apply<S, A, FA>(&mut self, started: S, apply: FA) -> Receiver<Result<A>>
    where
        S: Send + 'static,
        A: Send + 'static,
        FA: FnOnce(&Connection, S) -> Result<A> + Send + 'static,
    {
        let (tx, rx) = channel();
        self.apply_to(started, apply, tx);
        rx
    }

    /// [`Cycle::apply`], its answer going to `tx`.
    pub(super) fn apply_to<S, A, FA, T>(&mut self, started: S, apply: FA, tx: T)
    where
        S: Send + 'static,
        A: Send + 'static,
        FA: FnOnce(&Connection, S) -> Result<A> + Send + 'static,
        T: Sink<Result<A>>,
    {
        self.queued
            .push(Op::apply(move |conn: &Connection| apply(conn, started), tx));
    }

    /// [`Cycle::apply`] for a light operation: it runs in the next
    /// transaction of this cycle, after the runs queued before it, and may
    /// queue runs of its own, which get one more transaction. A claim that
    /// took jobs of a better priority than the rest starts only those itself
    /// and leaves the others' starts to one of these: the urgent runs'
    /// handlers then wait for one commit of a few rows, not for the starts
    /// of the whole batch, at the price of one more commit in such a cycle.
    pub(crate) fn follow_up_light<A, FA>(&mut self, f: FA) -> Receiver<Result<A>>
    where
        A: Send + 'static,
        FA: FnOnce(&Connection, &mut Cycle) -> Result<A> + Send + 'static,
    {
        let (tx, rx) = channel();
        self.queued.push(Op::light(f, tx));
        rx
    }

    /// Ties what the operation queued to its outcome: kept for its commit
    /// if it succeeded, answered `Aborted` at once if it failed or panicked.
    pub(super) fn settle(
        self,
        durability: Durability,
        outcome: std::thread::Result<(Status, Reply)>,
    ) -> Outcome {
        match outcome {
            Ok((Status::Ok, reply)) => Outcome::Done(Ran {
                durability,
                reply,
                follow_ups: self.queued,
            }),
            Ok((status, reply)) => {
                refuse(
                    self.queued,
                    "the operation that started the run failed: nothing of it ran",
                );
                if status == Status::LeftOpen {
                    Outcome::LeftOpen(reply)
                } else {
                    Outcome::Failed(reply)
                }
            }
            Err(_) => {
                refuse(
                    self.queued,
                    "the operation that started the run panicked: nothing of it ran",
                );
                Outcome::Panicked
            }
        }
    }
}

/// Answers queued follow-ups that will never run.
fn refuse(queued: Vec<Op>, why: &str) {
    for op in queued {
        (op.reject)(Error::Aborted(why.to_string()));
    }
}

/// How an operation's body ended.
pub(super) enum Outcome {
    /// It succeeded; waits for its transaction's end.
    Done(Ran),
    /// It returned its own error (its follow-ups were refused); the reply
    /// gives it to the caller.
    Failed(Reply),
    /// It failed half-way and could not undo itself (its follow-ups were
    /// refused): the writer must end the transaction; the reply gives the
    /// caller its error.
    LeftOpen(Reply),
    /// It panicked (its follow-ups were refused).
    Panicked,
}

/// An operation that ran, waiting for its transaction's end.
pub(super) struct Ran {
    pub(super) durability: Durability,
    reply: Reply,
    /// What it queued with its [`Cycle`]: ready for the cycle's next
    /// transaction once its commit succeeded.
    follow_ups: Vec<Op>,
}

impl Ran {
    /// An operation that queued nothing (one that failed on its own).
    pub(super) fn failed(durability: Durability, reply: Reply) -> Ran {
        Ran {
            durability,
            reply,
            follow_ups: Vec::new(),
        }
    }

    /// Its transaction did not commit: what it queued never runs.
    pub(super) fn fail(self, e: Error) {
        refuse(
            self.follow_ups,
            "the run's start was not committed: nothing of it ran",
        );
        (self.reply)(Err(e))
    }
}

/// The write connection behind a mutex, and what every cycle needs:
/// whoever holds the connection runs a cycle.
pub(super) struct Core {
    /// Declared first, so it stops before the write connection closes.
    pub(super) checkpointer: Option<Checkpointer>,
    pub(super) conn: Mutex<Connection>,
    /// How durable commits reach the disk (see [`SyncMode`]).
    pub(super) sync: SyncMode,
    /// Milliseconds since `epoch` when the current op started, 0 when idle,
    /// -1 when the watchdog found it over budget.
    pub(super) op_started: std::sync::Arc<AtomicI64>,
    /// Operations the watchdog interrupted (see [`super::Writer::interrupts`]).
    pub(super) interrupts: std::sync::Arc<AtomicU64>,
    pub(super) epoch: Instant,
    /// Operations sent to the writer thread and not yet applied (still in
    /// the channel, or taken by the thread and waiting for the connection).
    /// A caller runs its cycle inline only when this is 0: otherwise a
    /// caller writing back to back (a prune's batches) re-took the mutex
    /// each time before the woken writer thread could, and starved the
    /// operations that thread held for seconds.
    pub(super) queued: AtomicUsize,
    /// Callers inside [`super::Writer::run`] (waiting for their commit or
    /// about to run one). A caller runs its cycle inline only when it is
    /// alone: with several producers, one that ran inline committed alone
    /// while the others queued behind its fsync, and groups split in two.
    pub(super) callers: AtomicUsize,
    /// With `synchronous=NORMAL`: the WAL file, which the syncer fsyncs in
    /// the background, after answering (see [`super::sync::syncer_loop`]).
    pub(super) background_wal: Option<std::fs::File>,
    /// Cycles whose fsync the writer thread ran itself (see
    /// [`super::thread`]), for its statistics and a test.
    pub(super) direct_syncs: AtomicU64,
}

impl Core {
    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        // Ops run under catch_unwind; a poisoned lock still guards a
        // connection that is outside any transaction.
        lock(&self.conn)
    }

    /// One cycle, in two transactions (or more, see below). The first holds
    /// `first`: the durable operations (enqueues, acks, operator actions,
    /// the apply steps of runs prepared on a worker), each in its own
    /// savepoint unless self-isolated, then the light ones (claims, starts,
    /// renewals) without: a claim then sees the jobs enqueued in the same
    /// cycle. Its light operations are answered right after its commit,
    /// without an fsync, so a worker waiting to start its next job does not
    /// wait for the fsync of other jobs' completions. The second holds the
    /// apply steps of the runs started in the first ([`Cycle::apply`]):
    /// their starts are committed before any of their user code runs. A
    /// light follow-up ([`Cycle::follow_up_light`]) queued by the first runs
    /// in the second, and the runs it starts get a third; and so on while
    /// follow-ups queue more. The durable operations of all are answered
    /// once the last commit is on disk — one fsync covers every commit
    /// before it: by the syncer thread if `syncer` is given (the writer goes
    /// on with the next cycle while the disk works); otherwise their answers
    /// are returned, to be given after [`Core::sync_and_answer`] — which the
    /// caller runs once it let go of the connection, so the writer thread
    /// can apply other operations during that fsync. Operations of one class
    /// keep their order; the classes are independent (each op is atomic and
    /// fenced on its own).
    #[must_use]
    pub(super) fn cycle(
        &self,
        conn: &Connection,
        first: &mut Vec<Op>,
        syncer: Option<&Sender<Vec<Reply>>>,
        taken: usize,
    ) -> Vec<Reply> {
        let mut durable: Vec<Reply> = Vec::new();
        // Follow-ups of the light operations committed so far: the runs
        // they started, and light follow-ups (a claim that started its
        // urgent jobs first, see [`Cycle::follow_up_light`]), which may
        // start more.
        let mut next: Vec<Op> = Vec::new();
        if !first.is_empty() {
            self.commit_group(conn, first, taken, &mut durable, &mut next);
        }
        // Emptied by each transaction, then swapped: one buffer each.
        let mut ops: Vec<Op> = Vec::new();
        while !next.is_empty() {
            std::mem::swap(&mut ops, &mut next);
            self.commit_group(conn, &mut ops, taken, &mut durable, &mut next);
        }
        match (&self.sync, syncer) {
            _ if durable.is_empty() => Vec::new(),
            // With SQLite's own sync too: the syncer thread then only
            // answers, but answering a group (a channel send and often a
            // wake per caller) is work the writer thread, the bottleneck
            // when processing, need not do.
            (_, Some(syncer)) => match syncer.send(durable) {
                Ok(()) => Vec::new(),
                // The syncer is gone (it never is while the writer runs):
                // the caller syncs rather than answer unsynced.
                Err(e) => e.0,
            },
            (SyncMode::Wal { .. }, None) => durable,
            (SyncMode::Sqlite, None) => {
                // SQLite's commit already synced as the file says.
                durable.into_iter().for_each(|r| r(Ok(())));
                Vec::new()
            }
        }
    }

    /// One transaction of a cycle: applies `ops`, answers the light ones
    /// that committed (their follow-ups go to `ready`), and keeps the
    /// durable ones' answers in `durable` for after the fsync.
    fn commit_group(
        &self,
        conn: &Connection,
        ops: &mut Vec<Op>,
        taken: usize,
        durable: &mut Vec<Reply>,
        ready: &mut Vec<Op>,
    ) {
        let committed = run_group(conn, ops, &self.op_started, self.epoch);
        self.after_commit(conn, taken);
        for ran in committed {
            match ran.durability {
                Durability::Light => {
                    ready.extend(ran.follow_ups);
                    (ran.reply)(Ok(()))
                }
                Durability::Durable => durable.push(ran.reply),
            }
        }
    }

    /// Keeps the WAL short once a group committed (see [`Checkpointer`]).
    /// `taken`: the operations of this cycle counted in `queued`; any more
    /// are waiting for the writer, which is then busy.
    fn after_commit(&self, conn: &Connection, taken: usize) {
        if let Some(c) = &self.checkpointer {
            c.after_commit(conn, self.queued.load(Ordering::Acquire) > taken);
        }
    }

    /// Makes every commit so far durable, then gives `answers`.
    pub(super) fn sync_and_answer(&self, answers: Vec<Reply>) {
        if answers.is_empty() {
            return;
        }
        let result = self.sync.sync();
        for r in answers {
            r(result.as_ref().map_err(Error::duplicate).copied());
        }
    }
}
