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
//! (see [`SyncMode`]). A durable caller is answered only after an fsync that
//! began after its commit, so "it returned" still means "it is durable".

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use crate::checkpoint::Checkpointer;
use crate::error::{Error, Result};

/// Called once the group's commit finished, with its result.
type Reply = Box<dyn FnOnce(Result<()>) + Send>;
/// The body of an operation, boxed. It runs inside the writer's transaction
/// (a durable one inside its own savepoint, unless self-isolated or alone in
/// its group) and says whether it succeeded (false undoes it, except for a
/// self-isolated one, which undid itself) and how to answer its caller
/// after the commit.
type RunFn = Box<dyn FnOnce(&Connection) -> (bool, Reply) + Send>;

/// Answers a caller whose operation could not be run at all.
type Reject = Box<dyn FnOnce(Error) + Send>;

/// One operation: `run`, or `reject` when it cannot run.
struct Op {
    run: RunFn,
    reject: Reject,
    durability: Durability,
    /// A durable operation that must run in the same cycle as this light
    /// one, after its commit: a run's apply step, paired with its start.
    /// A cycle then never ends with a run started but not applied, so a
    /// crash abandons only the runs of the cycle it hit.
    pair: Option<Box<Op>>,
    /// Run this pair alone, in a cycle of its own (a suspect job, perhaps a
    /// poison pill: when it kills the process, no other run of this writer
    /// is started and unfinished, so no healthy job is charged with it).
    isolated: bool,
    /// Sent by a caller blocked until its commit ([`Writer::run`]), not
    /// pipelined: the writer waits a moment for such callers to come back.
    blocking: bool,
    /// The operation isolates itself ([`Writer::submit_apply`]): the writer
    /// opens no savepoint for it. When it fails it has left the transaction
    /// as it found it, or ended it (ROLLBACK); if it panics, the writer
    /// cannot know, and rolls the whole transaction back.
    self_isolated: bool,
}

/// How hard an operation's commit must push to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Answered once the commit is on disk (with FULL, the default: after an
    /// fsync of the WAL that began after the commit), each in its own
    /// savepoint (see [`run_group`] for the two exceptions). Enqueues,
    /// completions, failures, acknowledgements.
    Durable,
    /// Answered right after the commit, without an fsync, and run without a
    /// savepoint (a failure undoes the whole light transaction): it survives
    /// a process crash — the commit is in the WAL — but a power loss may
    /// undo it. Only for bookkeeping whose loss is harmless and that runs no
    /// user code: claims, the start of a run, lease renewals, reaping. A
    /// lost claim or start just means the job runs again; its work is still
    /// fenced by the ledger.
    Light,
}

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
    watchdog: Option<(Sender<()>, JoinHandle<()>)>,
}

/// The write connection behind a mutex: whoever holds it runs a cycle.
struct Core {
    /// Declared first, so it stops before the write connection closes.
    checkpointer: Option<Checkpointer>,
    conn: std::sync::Mutex<Connection>,
    /// How durable commits reach the disk (see [`SyncMode`]).
    sync: SyncMode,
    op_started: Arc<AtomicI64>,
    epoch: Instant,
    /// Operations sent to the writer thread and not yet applied (still in
    /// the channel, or taken by the thread and waiting for the connection).
    /// A caller runs its cycle inline only when this is 0: otherwise a
    /// caller writing back to back (a prune's batches) re-took the mutex
    /// each time before the woken writer thread could, and starved the
    /// operations that thread held for seconds.
    queued: AtomicUsize,
    /// Callers inside [`Writer::run_with`] (waiting for their commit or
    /// about to run one). A caller runs its cycle inline only when it is
    /// alone: with several producers, one that ran inline committed alone
    /// while the others queued behind its fsync, and groups split in two.
    callers: AtomicUsize,
    /// With `synchronous=NORMAL`: the WAL file, which the syncer fsyncs in
    /// the background, after answering (see [`syncer_loop`]).
    background_wal: Option<std::fs::File>,
    /// Cycles whose fsync the writer thread ran itself (see `direct` in
    /// [`writer_loop`]), for `LITEJOB_WRITER_STATS` and a test.
    direct_syncs: std::sync::atomic::AtomicU64,
}

impl Core {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // Ops run under catch_unwind; a poisoned lock still guards a
        // connection that is outside any transaction.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One cycle, in two transactions (or more, see below). The first holds the durable
    /// operations that are not a run's apply step (enqueues, acks, operator
    /// actions), each in its own savepoint, then the light ones (claims,
    /// starts, renewals) without: a claim then sees the jobs enqueued in the
    /// same cycle. Its light operations are answered right after its
    /// commit, without an fsync, so a worker waiting to start its next job
    /// does not wait for the fsync of other jobs' completions. The second
    /// holds the apply steps of the runs started in the first (a pair's, or
    /// one a light operation queued with [`follow_up`]): their starts are
    /// committed before any of their user code runs. A light follow-up
    /// ([`follow_up_light`]) queued by the first runs in the second, and the
    /// runs it queues get a third; and so on while follow-ups queue more.
    /// The durable operations of all are answered once the last commit is
    /// on disk — one fsync covers every commit
    /// before it: by the syncer thread if `syncer` is given (the writer goes
    /// on with the next cycle while the disk works); otherwise their answers
    /// are returned, to be given after [`Core::sync`] — which the caller
    /// runs once it let go of the connection, so the writer thread can apply
    /// other operations during that fsync. Operations of one class keep
    /// their order; the classes are independent (each op is atomic and
    /// fenced on its own).
    #[must_use]
    fn cycle(
        &self,
        conn: &Connection,
        first: &mut Vec<Op>,
        applies: &mut Vec<Op>,
        syncer: Option<&Sender<Vec<Reply>>>,
        taken: usize,
    ) -> Vec<Reply> {
        let mut durable: Vec<Reply> = Vec::new();
        if !first.is_empty() {
            self.commit_group(conn, first, taken, &mut durable);
        }
        // What the light operations just committed queued, first; then
        // again for what light follow-ups queue in turn (a claim that
        // started its urgent jobs first, see [`follow_up_light`]).
        loop {
            let queued = FOLLOW_UPS_READY.with(|r| std::mem::take(&mut *r.borrow_mut()));
            applies.splice(0..0, queued);
            if applies.is_empty() {
                break;
            }
            self.commit_group(conn, applies, taken, &mut durable);
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
    /// that committed, and keeps the durable ones' answers in `durable`
    /// for after the fsync.
    fn commit_group(
        &self,
        conn: &Connection,
        ops: &mut Vec<Op>,
        taken: usize,
        durable: &mut Vec<Reply>,
    ) {
        let committed = run_group(conn, ops, &self.op_started, self.epoch);
        self.after_commit(conn, taken);
        for (class, reply) in committed {
            match class {
                Durability::Light => reply(Ok(())),
                Durability::Durable => durable.push(reply),
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
    fn sync_and_answer(&self, answers: Vec<Reply>) {
        if answers.is_empty() {
            return;
        }
        let result = self.sync.sync();
        for r in answers {
            r(result.as_ref().map_err(Error::duplicate).copied());
        }
    }
}

/// How a durable commit reaches the disk with `synchronous=FULL`.
enum SyncMode {
    /// SQLite's own: the connection runs with the file's `synchronous`
    /// (NORMAL, or FULL when the WAL file could not be opened for
    /// [`SyncMode::Wal`]); every commit, light ones too, syncs as it says.
    Sqlite,
    /// Pipelined: the write connection runs with `synchronous=NORMAL` (a
    /// commit writes its WAL frames, no fsync), and litejob fsyncs the WAL
    /// file itself, through its own handle, before it answers a durable
    /// commit's callers. The writer thread hands that fsync to the syncer
    /// thread and applies the next group meanwhile; one fsync covers every
    /// commit made before it (the WAL is appended in order, and recovery
    /// keeps only a prefix whose checksums chain). Light commits are simply
    /// not synced. Nothing outside reacts to a commit before its fsync: a
    /// caller waits for it, and an effect runs only after its own claim (a
    /// later, durable commit) was synced, which covers the job's commit too.
    Wal {
        wal: std::fs::File,
        /// Set by the first failed fsync, for good: after one, Linux may have
        /// dropped the unwritten pages and report the next fsync as a
        /// success, and recovery would stop at the hole. No later commit can
        /// then be called durable (PostgreSQL's "fsyncgate" rule).
        failed: AtomicBool,
        /// Held across the check of `failed`, the fsync and the setting of
        /// `failed`: one fsync at a time. Two threads sync (the syncer, and
        /// the writer thread or an inline caller), and Linux reports a
        /// failed writeback to one fsync of a file, not to each one running
        /// then: without the turn, one could see the error while the other,
        /// covering a later commit, returned success for a WAL with a hole.
        turn: std::sync::Mutex<()>,
    },
}

impl SyncMode {
    /// Makes every commit so far durable.
    fn sync(&self) -> Result<()> {
        match self {
            SyncMode::Sqlite => Ok(()),
            SyncMode::Wal { wal, failed, turn } => {
                let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
                if failed.load(Ordering::Acquire) {
                    return Err(Error::OutcomeUnknown(
                        "an earlier fsync of the WAL failed: no commit of this process can be \
                         called durable any more; restart it"
                            .into(),
                    ));
                }
                wal.sync_data().map_err(|e| {
                    failed.store(true, Ordering::Release);
                    log::error!(target: "litejob", "fsync of the WAL failed: {e}; every later durable write reports 'outcome unknown' until the process restarts");
                    Error::OutcomeUnknown(format!(
                        "the commit was written but its fsync failed ({e}); it may be lost on power loss"
                    ))
                })
            }
        }
    }
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
        let sync = if cfg.full_sync {
            match open_wal(&conn) {
                Some(wal) => {
                    conn.pragma_update(None, "synchronous", "NORMAL")?;
                    SyncMode::Wal {
                        wal,
                        failed: AtomicBool::new(false),
                        turn: std::sync::Mutex::new(()),
                    }
                }
                None => {
                    log::warn!(target: "litejob", "cannot open the WAL file to fsync it: every commit syncs (slower)");
                    SyncMode::Sqlite
                }
            }
        } else {
            SyncMode::Sqlite
        };
        let (sender, receiver) = crossbeam_channel::unbounded::<Op>();
        // Milliseconds since `epoch` when the current op started, 0 when idle,
        // -1 when the watchdog found it over budget (see below).
        let epoch = Instant::now();
        let op_started = Arc::new(AtomicI64::new(0));
        let watchdog = match cfg.op_budget {
            Some(budget) => {
                let handle = conn.get_interrupt_handle();
                let started = op_started.clone();
                // sqlite3_interrupt only stops a statement running at that
                // instant; an apply step that hangs in Rust between short
                // statements would never be stopped. So the watchdog also
                // marks the op as over budget (-1) and the next statement
                // the op runs (checked every few VM steps) is interrupted.
                // The period must stay below the length of a one-row INSERT
                // (about 10 steps; SQLite checks at the end of a step only
                // once the statement ran that many): with 1000 a handler
                // looping over short statements was never stopped (test
                // reliability::locks::handler_hanging_inside_its_transaction).
                // The callback is one relaxed atomic load.
                let over = op_started.clone();
                conn.progress_handler(
                    8,
                    Some(move || {
                        over.load(Ordering::Relaxed) == -1
                            && over
                                .compare_exchange(-1, 0, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                    }),
                )?;
                let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
                let tick =
                    (budget / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
                let t = std::thread::Builder::new()
                    .name("litejob-watchdog".into())
                    .spawn(move || loop {
                        match stop_rx.recv_timeout(tick) {
                            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                            _ => return,
                        }
                        let s = started.load(Ordering::Acquire);
                        if s > 0 {
                            let ran = epoch.elapsed().as_millis() as i64 - s;
                            // Only if that op is still the one running: an
                            // interrupt that arrived after it finished would
                            // hit the next op or the COMMIT.
                            if ran > budget.as_millis() as i64
                                && started
                                    .compare_exchange(s, -1, Ordering::AcqRel, Ordering::Acquire)
                                    .is_ok()
                            {
                                log::warn!(target: "litejob",
                                    "a write ran {ran} ms, past its budget of {} ms: interrupting it", budget.as_millis());
                                handle.interrupt();
                            }
                        }
                    })?;
                Some((stop_tx, t))
            }
            None => None,
        };
        let max_batch = cfg.max_batch.max(1);
        let background_wal = if cfg.full_sync { None } else { open_wal(&conn) };
        let checkpointer = Checkpointer::start(&conn);
        let core = Arc::new(Core {
            checkpointer,
            conn: std::sync::Mutex::new(conn),
            sync,
            op_started,
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
            .spawn(move || syncer_loop(c, rx))?;
        let c = core.clone();
        let thread = std::thread::Builder::new()
            .name("litejob-writer".into())
            .spawn(move || writer_loop(c, receiver, max_batch, syncer_tx))?;
        Ok(Writer {
            sender: Some(sender),
            core,
            thread: Some(thread),
            syncer: Some(syncer_thread),
            watchdog,
        })
    }

    /// Sends `f` to the writer; the receiver yields its result once the
    /// transaction holding it committed (or failed).
    pub(crate) fn submit<R, F>(&self, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        self.submit_with(Durability::Durable, f)
    }

    /// [`Writer::submit`] for an operation that isolates itself (a run's
    /// apply step, see [`crate::execute::apply`]): the writer opens no
    /// savepoint for it, and trusts it, when it fails, to have undone its
    /// writes or ended the transaction.
    pub(crate) fn submit_apply<R, F>(&self, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (mut op, rx) = make_op_rx(Durability::Durable, f);
        op.self_isolated = true;
        self.send(op);
        rx
    }

    /// [`Writer::submit`] with an explicit durability class.
    pub(crate) fn submit_with<R, F>(&self, durability: Durability, f: F) -> Receiver<Result<R>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let (op, rx) = make_op_rx(durability, f);
        self.send(op);
        rx
    }

    /// Hands `op` to the writer thread. If the writer is gone the op (and
    /// its reply sender) is dropped and the caller's receive sees the
    /// disconnect.
    fn send(&self, op: Op) {
        if let Some(s) = &self.sender {
            self.core.queued.fetch_add(1, Ordering::AcqRel);
            if s.send(op).is_err() {
                self.core.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Sends a run's start (light) and its apply step (durable) as one
    /// unit: the writer commits the start, then applies in the same cycle.
    /// `isolated` runs the pair in a cycle of its own. The apply step is
    /// self-isolated, as with [`Writer::submit_apply`]: it must keep that
    /// operation's rule.
    pub(crate) fn submit_pair<S, A, FS, FA>(
        &self,
        isolated: bool,
        start: FS,
        apply: FA,
    ) -> (Receiver<Result<S>>, Receiver<Result<A>>)
    where
        S: Send + 'static,
        A: Send + 'static,
        FS: FnOnce(&Connection) -> Result<S> + Send + 'static,
        FA: FnOnce(&Connection) -> Result<A> + Send + 'static,
    {
        let (mut op, start_rx) = make_op_rx(Durability::Light, start);
        let (mut apply_op, apply_rx) = make_op_rx(Durability::Durable, apply);
        apply_op.self_isolated = true;
        // The apply step runs only if its start committed: when the light
        // transaction was undone, no user code of the run may run (its
        // attempt row is not there to be charged if that code crashes).
        let started = Arc::new(AtomicBool::new(false));
        let (run, flag) = (op.run, started.clone());
        op.run = Box::new(move |conn: &Connection| {
            let (ok, reply) = run(conn);
            let reply: Reply = Box::new(move |commit: Result<()>| {
                flag.store(ok && commit.is_ok(), Ordering::Release);
                reply(commit)
            });
            (ok, reply)
        });
        let reject = Arc::new(std::sync::Mutex::new(Some(apply_op.reject)));
        let reject_run = reject.clone();
        apply_op.reject = Box::new(move |e: Error| {
            if let Some(r) = reject.lock().unwrap_or_else(|p| p.into_inner()).take() {
                r(e)
            }
        });
        let run = apply_op.run;
        apply_op.run = Box::new(move |conn: &Connection| {
            if started.load(Ordering::Acquire) {
                return run(conn);
            }
            let reply: Reply = Box::new(move |_| {
                if let Some(r) = reject_run.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    r(Error::Aborted(
                        "the run's start was not committed: nothing of it ran".into(),
                    ))
                }
            });
            (false, reply)
        });
        op.pair = Some(Box::new(apply_op));
        op.isolated = isolated;
        self.send(op);
        (start_rx, apply_rx)
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
                    let mut first = vec![make_op(durability, f, tx)];
                    let unsynced = self.core.cycle(&conn, &mut first, &mut Vec::new(), None, 0);
                    drop(conn);
                    self.core.sync_and_answer(unsynced);
                    return answer(rx.recv());
                }
            }
        }
        let (rx, tx) = OneShot::new();
        let mut op = make_op(durability, f, tx);
        op.blocking = true;
        self.send(op);
        answer(rx.recv())
    }
}

/// Where an operation's answer goes: a channel (pipelined callers select
/// over several) or a [`OneShot`] (a caller blocked on this one answer).
trait Sink<T>: Clone + Send + 'static {
    /// Delivers the answer (each operation is answered once).
    fn put(&self, v: T);
}

impl<T: Send + 'static> Sink<T> for Sender<T> {
    fn put(&self, v: T) {
        let _ = self.send(v);
    }
}

/// Wraps `f` into an operation whose answer goes to `tx`.
fn make_op<R, F, S>(durability: Durability, f: F, tx: S) -> Op
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    S: Sink<Result<R>>,
{
    let reject_tx = tx.clone();
    let reject = Box::new(move |e: Error| reject_tx.put(Err(e)));
    let run = Box::new(move |conn: &Connection| {
        let result = f(conn);
        let ok = result.is_ok();
        let reply: Reply = Box::new(move |commit: Result<()>| {
            let answer = match result {
                Err(e) => Err(e),
                Ok(v) => commit.map(|_| v),
            };
            tx.put(answer);
        });
        (ok, reply)
    });
    Op {
        run,
        reject,
        durability,
        pair: None,
        isolated: false,
        blocking: false,
        self_isolated: false,
    }
}

/// [`make_op`] answering on a new channel.
fn make_op_rx<R, F>(durability: Durability, f: F) -> (Op, Receiver<Result<R>>)
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R> + Send + 'static,
{
    let (tx, rx) = crossbeam_channel::bounded(1);
    (make_op(durability, f, tx), rx)
}

/// A one-answer slot for a caller blocked in [`Writer::run_with`]. Its
/// wait goes straight to the futex: a channel's receive spins and yields
/// first, and with eight producers waiting for one fsync those yields took
/// the two cores from the writer and the syncer (eight producers: CPU per
/// enqueue 86 → 71 µs, and 14 % more enqueues a second).
struct OneShot<T> {
    slot: std::sync::Mutex<Option<T>>,
    ready: std::sync::Condvar,
    /// Live [`OneShotTx`]s; at 0 with no answer, the operation was dropped
    /// unanswered (the writer stopped).
    senders: AtomicUsize,
}

/// The sending side of a [`OneShot`].
struct OneShotTx<T>(Arc<OneShot<T>>);

impl<T> OneShot<T> {
    fn new() -> (Arc<OneShot<T>>, OneShotTx<T>) {
        let shot = Arc::new(OneShot {
            slot: std::sync::Mutex::new(None),
            ready: std::sync::Condvar::new(),
            senders: AtomicUsize::new(1),
        });
        (shot.clone(), OneShotTx(shot))
    }

    /// The answer, or `None` when every sender was dropped without one.
    fn recv(&self) -> Option<T> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = slot.take() {
                return Some(v);
            }
            if self.senders.load(Ordering::Acquire) == 0 {
                return None;
            }
            slot = self.ready.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<T> Clone for OneShotTx<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::AcqRel);
        OneShotTx(self.0.clone())
    }
}

impl<T> Drop for OneShotTx<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Taken under the lock, so a receiver between its check and its
            // wait cannot miss this wake-up.
            let _slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
            self.0.ready.notify_all();
        }
    }
}

impl<T: Send + 'static> Sink<T> for OneShotTx<T> {
    fn put(&self, v: T) {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(v);
        }
        drop(slot);
        self.0.ready.notify_all();
    }
}

impl Writer {
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
        if let Some((stop, t)) = self.watchdog.take() {
            drop(stop);
            let _ = t.join();
        }
    }
}

fn classify_commit_error(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code() {
        Some(DiskFull) | Some(DatabaseBusy) | Some(DatabaseLocked) => Error::from_sqlite(e),
        _ => Error::OutcomeUnknown(e.to_string()),
    }
}

/// Answers durable groups once an fsync after their commit returned; one
/// fsync for every group waiting.
/// A handle of our own on the connection's WAL file, if it can be opened.
fn open_wal(conn: &Connection) -> Option<std::fs::File> {
    conn.path()
        .filter(|p| !p.is_empty())
        .map(|p| format!("{p}-wal"))
        .and_then(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .ok()
        })
}

/// With `synchronous=NORMAL`, the syncer still fsyncs the WAL now and then
/// (at most this often), once it has answered and nothing waits: nothing
/// waits for it, but otherwise nobody syncs the WAL until a checkpoint,
/// which then flushes megabytes in one fsync — on the writer thread when it
/// checkpoints itself, or while it waits for the checkpointer at 4000
/// frames. Processing with NORMAL ran ~15 % slower than with FULL, with a
/// p99 of ~10 ms against ~5 (3 pairs with and without).
const BACKGROUND_WAL_SYNC_EVERY: Duration = Duration::from_millis(4);

fn syncer_loop(core: Arc<Core>, groups: Receiver<Vec<Reply>>) {
    let mut last_background = Instant::now();
    while let Ok(first) = groups.recv() {
        let mut waiting = first;
        waiting.extend(groups.try_iter().flatten());
        core.sync_and_answer(waiting);
        if let Some(wal) = &core.background_wal {
            if groups.is_empty() && last_background.elapsed() >= BACKGROUND_WAL_SYNC_EVERY {
                // Durability is not promised here (NORMAL): a failure is
                // SQLite's to meet at the next checkpoint.
                let _ = wal.sync_data();
                last_background = Instant::now();
            }
        }
    }
}

fn writer_loop(
    core: Arc<Core>,
    receiver: Receiver<Op>,
    max_batch: usize,
    syncer: Sender<Vec<Reply>>,
) {
    // A cycle's first transaction: durable operations, then light ones
    // (see [`Core::cycle`]); its second: the pairs' apply steps.
    let mut durable: Vec<Op> = Vec::with_capacity(max_batch);
    let mut light: Vec<Op> = Vec::with_capacity(max_batch);
    let mut applies: Vec<Op> = Vec::with_capacity(max_batch);
    let stats = std::env::var_os("LITEJOB_WRITER_STATS").is_some();
    let (mut cycles, mut n_light, mut n_durable, mut busy) = (0u64, 0u64, 0u64, Duration::ZERO);
    // Blocked callers answered by the last cycle, and how long it took.
    let (mut last_blocking, mut last_cycle) = (0usize, Duration::ZERO);
    // The last cycle held only blocked callers' operations (producers, not
    // workers): see `direct` below.
    let mut last_only_blocking = false;
    let run_cycle =
        |first: &mut Vec<Op>, light: &mut Vec<Op>, applies: &mut Vec<Op>, taken, direct: bool| {
            first.append(light);
            let conn = core.lock();
            let unsynced = core.cycle(&conn, first, applies, (!direct).then_some(&syncer), taken);
            drop(conn);
            if unsynced.is_empty() {
                return;
            }
            // Operations that arrived meanwhile (a worker's run) should not
            // wait for this fsync: the syncer takes it after all.
            if core.queued.load(Ordering::Acquire) > taken {
                if let Err(e) = syncer.send(unsynced) {
                    core.sync_and_answer(e.0);
                }
                return;
            }
            core.direct_syncs.fetch_add(1, Ordering::Relaxed);
            core.sync_and_answer(unsynced);
        };
    while let Ok(first) = receiver.recv() {
        let t0 = Instant::now();
        let gather_until = t0 + (last_cycle / 2).min(Duration::from_micros(500));
        let mut taken = 0;
        let mut next = Some(first);
        let mut blocking = 0;
        while let Some(mut op) = next.take() {
            taken += 1;
            blocking += op.blocking as usize;
            if op.isolated {
                // Finish what came before, then the pair alone.
                if !light.is_empty() || !durable.is_empty() || !applies.is_empty() {
                    cycles += 1;
                    run_cycle(&mut durable, &mut light, &mut applies, taken, false);
                }
                let mut d = Vec::with_capacity(1);
                if let Some(pair) = op.pair.take() {
                    d.push(*pair);
                }
                cycles += 1;
                run_cycle(&mut vec![op], &mut Vec::new(), &mut d, taken, false);
            } else {
                if let Some(pair) = op.pair.take() {
                    applies.push(*pair);
                }
                match op.durability {
                    Durability::Light => light.push(op),
                    Durability::Durable => durable.push(op),
                }
            }
            if taken < max_batch {
                next = receiver.try_recv().ok();
                if next.is_none() && last_blocking > 2 && blocking < last_blocking {
                    // The last group answered more blocked callers (several
                    // producers): they are likely sending their next
                    // operations right now, woken by their answers. Wait a
                    // moment for them rather than commit a small group and
                    // leave them to the next fsync; at most half the last
                    // cycle's time, and 0.5 ms. Pipelined operations
                    // (workers' runs) never make the writer wait.
                    let left = gather_until.saturating_duration_since(Instant::now());
                    if !left.is_zero() {
                        next = receiver.recv_timeout(left).ok();
                    }
                }
            }
        }
        n_light += light.len() as u64;
        n_durable += (durable.len() + applies.len()) as u64;
        if !light.is_empty() || !durable.is_empty() || !applies.is_empty() {
            cycles += 1;
            let t1 = Instant::now();
            // Only blocked callers, in this cycle and the last, and nothing
            // else waiting (producers, no worker): the writer fsyncs and
            // answers them itself. Handing the fsync to the syncer put a
            // thread wake-up (a round trip measures 50–100 µs on this VM)
            // on every caller's path, while the writer had nothing to do
            // meanwhile: these callers come back only once answered. Eight
            // producers enqueued 8.5 % more a second (16 pairs). Workers'
            // operations (pipelined) keep the syncer, so the writer goes on
            // applying during the fsync, and so does NORMAL, whose syncer
            // also syncs the WAL in the background. If operations arrive
            // during the commit, the syncer takes the fsync after all. A
            // group the syncer is still syncing is no matter: each group is
            // answered after an fsync that began after its own commit, and
            // the two fsyncs take turns (see `SyncMode::Wal::turn`).
            let direct = matches!(core.sync, SyncMode::Wal { .. })
                && blocking == taken
                && last_only_blocking
                && core.queued.load(Ordering::Acquire) <= taken
                && syncer.is_empty();
            run_cycle(&mut durable, &mut light, &mut applies, taken, direct);
            last_cycle = t1.elapsed();
        }
        core.queued.fetch_sub(taken, Ordering::AcqRel);
        last_blocking = blocking;
        last_only_blocking = blocking == taken;
        busy += t0.elapsed();
    }
    if stats {
        let (bg, inline) = core.checkpointer.as_ref().map_or((0, 0), |c| c.counts());
        eprintln!(
            "litejob writer: {cycles} cycles ({} synced by the writer), {n_light} light ops, {n_durable} durable ops, busy {busy:?}, \
             checkpoints {bg} in the background and {inline} inline",
            core.direct_syncs.load(Ordering::Relaxed)
        );
    }
}

/// Applies `batch` in as few transactions as possible (one, unless an
/// operation's failure rolled the whole transaction back). Answers the
/// callers whose operation or transaction failed; returns the answers of
/// those whose commit succeeded, for the caller to give once the commit is
/// as durable as it must be.
///
/// Each durable operation runs inside its own savepoint, so a failing one
/// rolls back alone (enqueues, operator actions, acknowledgements). Two
/// exceptions: an operation alone in the group (rolling back the
/// transaction undoes exactly it), and a self-isolated one (a run's apply
/// step), which opens its own savepoint only around the handler's SQL and
/// undoes its bookkeeping row itself, so a no-op handler costs no savepoint
/// at all (see [`crate::execute::apply`]). A light operation (bookkeeping:
/// claims, starts, lease renewals, reaping, which fail only when the disk
/// does) gets no savepoint — two statements and a copy of every page each
/// operation touches saved, about 5 % of the writer's time per job — and
/// when one fails it undoes the light operations before it in the
/// transaction (they learn `Aborted`): back to one savepoint opened where
/// they begin, if durable operations came first (those stay), or else the
/// whole transaction; the operations after it go on.
///
/// The runs a light operation queued with [`follow_up`] go with its
/// answer: once its commit succeeded they are ready for the cycle's second
/// transaction; if it failed or was undone, they are answered `Aborted`.
#[must_use]
fn run_group(
    conn: &Connection,
    batch: &mut Vec<Op>,
    op_started: &AtomicI64,
    epoch: Instant,
) -> Vec<(Durability, Reply)> {
    let mut replies: Vec<(Durability, Reply)> = Vec::with_capacity(batch.len());
    let mut in_tx = false;
    let stuck = || {
        Error::Internal(
            "the write connection holds a transaction it cannot roll back; nothing was written"
                .into(),
        )
    };
    // An operation alone in its group needs no savepoint: rolling back the
    // whole transaction undoes exactly it. A lone producer's enqueue (and
    // a batch enqueue's hundred rows) then costs no sub-journal copies.
    let alone_in_group = batch.len() == 1;
    // Where the light operations begin, in a transaction that began with
    // durable ones (`replies` from there on are theirs), and a savepoint
    // open there: a light operation has none of its own, and when one
    // fails, rolling back to this one undoes the light operations only, not
    // the enqueues and acknowledgements before them.
    let mut light_from: Option<usize> = None;
    let mut ops = batch.drain(..);
    // A transaction left open (a COMMIT and its ROLLBACK both failed last
    // time) would swallow this group into it.
    if !rollback(conn) {
        ops.for_each(|op| (op.reject)(stuck()));
        return Vec::new();
    }
    while let Some(Op {
        run,
        reject,
        self_isolated,
        durability,
        ..
    }) = ops.next()
    {
        let savepoint = durability == Durability::Durable && !self_isolated && !alone_in_group;
        if !in_tx {
            if let Err(e) = exec_cached(conn, "BEGIN IMMEDIATE") {
                // Not executed at all: answer with the reason.
                reject(Error::from_sqlite(e));
                continue;
            }
            in_tx = true;
        }
        let open_light = durability == Durability::Light
            && light_from.is_none()
            && replies.iter().any(|(d, _)| *d == Durability::Durable);
        // (`ROLLBACK TO` goes back to the innermost savepoint of that name.)
        if let Err(e) = if savepoint {
            exec_cached(conn, "SAVEPOINT op")
        } else if open_light {
            exec_cached(conn, "SAVEPOINT litejob_light")
        } else {
            Ok(0)
        } {
            let err = Error::from_sqlite(e);
            reject(err.duplicate());
            for (_, r) in replies.drain(..) {
                r(Err(err.duplicate()));
            }
            in_tx = false;
            light_from = None;
            if !rollback(conn) {
                ops.for_each(|op| (op.reject)(stuck()));
                return Vec::new();
            }
            continue;
        }
        if open_light {
            light_from = Some(replies.len());
        }
        op_started.store(
            (epoch.elapsed().as_millis() as i64).max(1),
            Ordering::Release,
        );
        refuse_strays();
        let outcome = catch_unwind(AssertUnwindSafe(|| run(conn)));
        op_started.store(0, Ordering::Release);
        let outcome = with_follow_ups(durability, outcome);
        let ok = matches!(outcome, Ok((true, _)));
        // A self-isolated operation that returned its failure undid its own
        // writes (or ended the transaction, seen below).
        let clean = self_isolated && outcome.is_ok();
        if !ok && !clean && !conn.is_autocommit() {
            // Undo it: back to its savepoint, or (without one, or if that
            // fails) the whole transaction. Never commit half an operation.
            let alone = savepoint
                && exec_cached(conn, "ROLLBACK TO op")
                    .and_then(|_| exec_cached(conn, "RELEASE op"))
                    .is_ok();
            // A light one: back to where the light operations began.
            let light_only = !savepoint
                && durability == Durability::Light
                && light_from.is_some()
                && exec_cached(conn, "ROLLBACK TO litejob_light").is_ok();
            if light_only {
                let from = light_from.expect("checked");
                for (_, r) in replies.drain(from..) {
                    r(Err(Error::Aborted(
                        "another light write in the same transaction failed and was undone with it"
                            .into(),
                    )));
                }
                match outcome {
                    Ok((_, reply)) => reply(Ok(())),
                    Err(_) => reject_panicked(reject),
                }
                continue;
            }
            if !alone && !rollback(conn) {
                for (_, r) in replies.drain(..) {
                    r(Err(stuck()));
                }
                match outcome {
                    Ok((_, reply)) => reply(Err(stuck())),
                    Err(_) => reject(stuck()),
                }
                ops.for_each(|op| (op.reject)(stuck()));
                return Vec::new();
            }
        }
        if conn.is_autocommit() {
            // The whole transaction was rolled back (by SQLite: disk full,
            // interrupt, some I/O errors; or just above): every operation
            // before this one in the group is gone too. Their callers learn
            // it was not written.
            for (_, r) in replies.drain(..) {
                r(Err(Error::Aborted(
                    "another write in the same group commit failed and rolled the transaction back"
                        .into(),
                )));
            }
            in_tx = false;
            light_from = None;
            match outcome {
                Ok((true, reply)) => reply(Err(Error::Aborted(
                    "the transaction was rolled back".into(),
                ))),
                // Its own error.
                Ok((false, reply)) => reply(Ok(())),
                Err(_) => reject_panicked(reject),
            }
            continue;
        }
        if ok && savepoint {
            let _ = exec_cached(conn, "RELEASE op");
        }
        if durability == Durability::Durable && outcome.is_ok() {
            // A durable operation after light ones (a follow-up
            // transaction mixes them): the next light one opens a savepoint
            // of its own, nested, so that undoing light operations never
            // undoes this one.
            light_from = None;
        }
        match outcome {
            Ok((_, reply)) => replies.push((durability, reply)),
            Err(_) => reject_panicked(reject),
        }
    }
    if in_tx {
        let commit = exec_cached(conn, "COMMIT")
            .map(|_| ())
            .map_err(classify_commit_error);
        if commit.is_err() {
            // If this fails too, the next group's first step tries again.
            rollback(conn);
        }
        match commit {
            Ok(()) => return replies,
            Err(e) => replies.drain(..).for_each(|(_, r)| r(Err(e.duplicate()))),
        }
    }
    Vec::new()
}

thread_local! {
    /// Runs queued with [`follow_up`] by the operation running on this
    /// thread, not yet claimed by [`with_follow_ups`].
    static FOLLOW_UPS: std::cell::RefCell<Vec<Op>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Runs whose light operation committed, for this cycle's second
    /// transaction ([`Core::cycle`]).
    static FOLLOW_UPS_READY: std::cell::RefCell<Vec<Op>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// From inside a light operation (a claim): queues `apply`, a run's apply
/// step, to run in this cycle's second transaction — after the light
/// commit, so after the run's start that the operation wrote — and only if
/// the operation committed: otherwise `apply` does not run and is answered
/// `Aborted`. Like a pair's apply step it is self-isolated and must keep
/// that rule ([`Writer::submit_apply`]). This is how a claim starts the
/// jobs it takes and has them applied in the same cycle, without a round
/// trip through a worker: a job enqueued in one cycle can run in that very
/// cycle. Anywhere else (a durable operation, a thread that is not running
/// an operation) the run never runs: it is answered with an error, or its
/// sender is dropped.
pub(crate) fn follow_up<A, FA>(apply: FA) -> Receiver<Result<A>>
where
    A: Send + 'static,
    FA: FnOnce(&Connection) -> Result<A> + Send + 'static,
{
    let (mut op, rx) = make_op_rx(Durability::Durable, apply);
    op.self_isolated = true;
    FOLLOW_UPS.with(|f| f.borrow_mut().push(op));
    rx
}

/// [`follow_up`] for a light operation: it runs in the next transaction of
/// this cycle, after the runs queued before it, and may queue runs of its
/// own, which get one more transaction. A claim that took jobs of a better
/// priority than the rest starts only those itself and leaves the others'
/// starts to one of these: the urgent runs' handlers then wait for one
/// commit of a few rows, not for the starts of the whole batch (~40 % of
/// a cycle), at the price of one more commit in such a cycle.
pub(crate) fn follow_up_light<A, FA>(f: FA) -> Receiver<Result<A>>
where
    A: Send + 'static,
    FA: FnOnce(&Connection) -> Result<A> + Send + 'static,
{
    let (op, rx) = make_op_rx(Durability::Light, f);
    FOLLOW_UPS.with(|fu| fu.borrow_mut().push(op));
    rx
}

/// Refuses runs queued on this thread outside any operation, before the
/// next operation could adopt them.
fn refuse_strays() {
    let strays = FOLLOW_UPS.with(|f| std::mem::take(&mut *f.borrow_mut()));
    for op in strays {
        (op.reject)(Error::Internal(
            "a run was queued outside a light operation".into(),
        ));
    }
}

/// Ties the runs an operation queued with [`follow_up`] to its answer (see
/// [`run_group`]).
fn with_follow_ups(
    durability: Durability,
    outcome: std::thread::Result<(bool, Reply)>,
) -> std::thread::Result<(bool, Reply)> {
    let queued = FOLLOW_UPS.with(|f| std::mem::take(&mut *f.borrow_mut()));
    if queued.is_empty() {
        return outcome;
    }
    let refuse = |queued: Vec<Op>, why: &str| {
        for op in queued {
            (op.reject)(Error::Aborted(why.to_string()));
        }
    };
    match outcome {
        Ok((true, reply)) if durability == Durability::Light => {
            let reply: Reply = Box::new(move |commit: Result<()>| {
                match &commit {
                    Ok(()) => FOLLOW_UPS_READY.with(|r| r.borrow_mut().extend(queued)),
                    Err(_) => refuse(
                        queued,
                        "the run's start was not committed: nothing of it ran",
                    ),
                }
                reply(commit)
            });
            Ok((true, reply))
        }
        Ok((false, reply)) => {
            refuse(
                queued,
                "the operation that started the run failed: nothing of it ran",
            );
            Ok((false, reply))
        }
        Ok((true, reply)) => {
            refuse(queued, "only a light operation can queue a run (follow_up)");
            Ok((true, reply))
        }
        Err(p) => {
            refuse(
                queued,
                "the operation that started the run panicked: nothing of it ran",
            );
            Err(p)
        }
    }
}

/// Answers the caller of an operation that panicked (it was rolled back).
fn reject_panicked(reject: Reject) {
    log::error!(target: "litejob", "a write operation panicked; it was rolled back");
    reject(Error::Internal(
        "the write operation panicked; it was rolled back".into(),
    ));
}

/// Ends the open transaction, if any, without committing it; false when the
/// connection is still inside one afterwards.
fn rollback(conn: &Connection) -> bool {
    if conn.is_autocommit() {
        return true;
    }
    if exec_cached(conn, "ROLLBACK").is_err() && !conn.is_autocommit() {
        // Not through the statement cache this time.
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.is_autocommit()
}

/// Runs a statement from the connection's statement cache. Savepoint
/// statements run several times per job: parsing them each time would cost
/// more than the work they bracket.
pub(crate) fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute([])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(dir: &tempfile::TempDir) -> Writer {
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v TEXT NOT NULL UNIQUE);")
            .unwrap();
        Writer::spawn(
            conn,
            WriterConfig {
                max_batch: 512,
                full_sync: true,
                op_budget: None,
            },
        )
        .unwrap()
    }

    fn insert(v: &'static str) -> impl FnOnce(&Connection) -> Result<()> + Send + 'static {
        move |c: &Connection| {
            c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
            Ok(())
        }
    }

    fn rows(w: &Writer) -> Vec<String> {
        let c = w.core.lock();
        let mut st = c.prepare("SELECT v FROM t ORDER BY v").unwrap();
        let v = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        v
    }

    type TestOp = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

    /// Whatever `submit` sends reaches the writer thread as one group: the
    /// connection is held while it is queued behind a first, empty operation.
    fn as_one_group<T>(w: &Writer, submit: impl FnOnce() -> T) -> T {
        let held = w.core.lock();
        let first = w.submit_with(Durability::Light, |_| Ok(()));
        std::thread::sleep(Duration::from_millis(50));
        let sent = submit();
        drop(held);
        let _ = wait(first);
        sent
    }

    /// An operation that writes a row ('half'), then fails on the unique
    /// 'taken' row: what it wrote must not survive.
    fn half_then_fail() -> impl FnOnce(&Connection) -> Result<()> + Send + 'static {
        |c: &Connection| {
            c.execute("INSERT INTO t (v) VALUES ('half')", [])?;
            c.execute("INSERT INTO t (v) VALUES ('taken')", [])?;
            Ok(())
        }
    }

    /// Runs `ops` as one group of the writer thread.
    fn one_group(w: &Writer, durability: Durability, ops: Vec<TestOp>) -> Vec<Result<()>> {
        let rx: Vec<_> = as_one_group(w, || {
            ops.into_iter()
                .map(|f| w.submit_with(durability, f))
                .collect()
        });
        rx.into_iter().map(wait).collect()
    }

    #[test]
    fn a_failing_light_operation_undoes_its_transaction_and_the_next_ones_commit() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        let r = one_group(
            &w,
            Durability::Light,
            vec![
                Box::new(insert("a")),
                // No savepoint: its half goes with the whole transaction.
                Box::new(half_then_fail()),
                Box::new(insert("b")),
                Box::new(insert("c")),
            ],
        );
        assert!(matches!(r[0], Err(Error::Aborted(_))), "{:?}", r[0]);
        assert!(
            r[1].is_err() && !matches!(r[1], Err(Error::Aborted(_))),
            "{:?}",
            r[1]
        );
        assert!(r[2].is_ok() && r[3].is_ok(), "{r:?}");
        assert_eq!(rows(&w), ["b", "c", "taken"]);
    }

    #[test]
    fn a_failing_light_operation_leaves_the_durable_ones_of_its_transaction_alone() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        let (a, failing, b, durable) = as_one_group(&w, || {
            let light = |f: TestOp| w.submit_with(Durability::Light, f);
            let a = light(Box::new(insert("a")));
            let failing = light(Box::new(half_then_fail()));
            let b = light(Box::new(insert("b")));
            // Sent last, applied first: durable operations lead the cycle.
            let durable = w.submit(insert("enqueued"));
            (a, failing, b, durable)
        });
        assert!(matches!(wait(a), Err(Error::Aborted(_))));
        let failing = wait(failing);
        assert!(
            failing.is_err() && !matches!(failing, Err(Error::Aborted(_))),
            "{failing:?}"
        );
        assert!(wait(b).is_ok());
        assert!(wait(durable).is_ok());
        assert_eq!(rows(&w), ["b", "enqueued", "taken"]);
    }

    #[test]
    fn a_failing_durable_operation_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        let r = one_group(
            &w,
            Durability::Durable,
            vec![
                Box::new(insert("a")),
                Box::new(half_then_fail()),
                Box::new(|_: &Connection| panic!("an operation panics")),
                Box::new(insert("b")),
            ],
        );
        assert!(r[0].is_ok() && r[3].is_ok(), "{r:?}");
        assert!(r[1].is_err() && r[2].is_err(), "{r:?}");
        assert_eq!(rows(&w), ["a", "b", "taken"]);
    }

    #[test]
    fn an_operation_alone_in_its_group_runs_without_a_savepoint_and_still_fails_whole() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        let r = one_group(&w, Durability::Durable, vec![Box::new(half_then_fail())]);
        assert!(r[0].is_err(), "{r:?}");
        // Its first row went with the transaction, and the writer goes on.
        w.run(insert("after")).unwrap();
        assert_eq!(rows(&w), ["after", "taken"]);
    }

    #[test]
    fn a_self_isolated_operation_is_trusted_when_it_fails_and_never_half_committed_when_it_panics()
    {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        // A clean failure (it wrote nothing): its neighbours commit.
        let (a, clean, b) = as_one_group(&w, || {
            (
                w.submit(insert("a")),
                w.submit_apply(|_: &Connection| -> Result<()> {
                    Err(Error::LeaseLost("lost, wrote nothing".into()))
                }),
                w.submit(insert("b")),
            )
        });
        assert!(wait(a).is_ok() && wait(b).is_ok());
        assert!(matches!(wait(clean), Err(Error::LeaseLost(_))));
        assert_eq!(rows(&w), ["a", "b", "taken"]);
        // A panic after a write: the writer cannot tell what it left, so
        // nothing of its transaction commits; later operations do.
        let (c, panicked, d) = as_one_group(&w, || {
            (
                w.submit(insert("c")),
                w.submit_apply(|conn: &Connection| -> Result<()> {
                    conn.execute("INSERT INTO t (v) VALUES ('half a run')", [])?;
                    panic!("a bug after the first write")
                }),
                w.submit(insert("d")),
            )
        });
        assert!(matches!(wait(c), Err(Error::Aborted(_))));
        assert!(wait(panicked).is_err());
        assert!(wait(d).is_ok());
        assert_eq!(rows(&w), ["a", "b", "d", "taken"]);
    }

    /// A light operation that looks for 'x', and queues a run writing
    /// `apply` — as a claim starts the jobs it takes.
    fn claim_like(
        apply: &'static str,
    ) -> impl FnOnce(&Connection) -> Result<(bool, Receiver<Result<()>>)> + Send + 'static {
        move |c: &Connection| {
            let seen: bool =
                c.query_row("SELECT EXISTS (SELECT 1 FROM t WHERE v = 'x')", [], |r| {
                    r.get(0)
                })?;
            Ok((seen, follow_up(insert(apply))))
        }
    }

    #[test]
    fn a_claim_sees_what_its_cycle_enqueued_and_its_runs_apply_in_that_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        // The claim is sent before the enqueue, as when a supervisor claims
        // again while a producer's enqueue is on its way.
        let (claim, enqueue) = as_one_group(&w, || {
            let claim = w.submit_with(Durability::Light, claim_like("run"));
            let enqueue = w.submit(insert("x"));
            (claim, enqueue)
        });
        let (seen, run) = wait(claim).unwrap();
        assert!(seen, "the claim ran before the enqueue of its own cycle");
        wait(run).unwrap();
        wait(enqueue).unwrap();
        assert_eq!(rows(&w), ["run", "x"]);
    }

    #[test]
    fn a_light_follow_up_runs_after_the_runs_queued_before_it_and_its_own_runs_after_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        let path = dir.path().join("w.db");
        // Whether a reader (another connection) sees `v` committed.
        let committed = move |v: &str| -> bool {
            let c = Connection::open(&path).unwrap();
            c.query_row("SELECT EXISTS (SELECT 1 FROM t WHERE v = ?1)", [v], |r| {
                r.get(0)
            })
            .unwrap()
        };
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s1, s2) = (seen.clone(), seen.clone());
        let claim = move |c: &Connection| -> Result<_> {
            insert("claim")(c)?;
            let urgent = follow_up(insert("urgent"));
            let rest = follow_up_light(move |c: &Connection| {
                s1.lock()
                    .unwrap()
                    .push(("rest starts", committed("claim"), committed("urgent")));
                insert("rest")(c)?;
                let committed = committed.clone();
                Ok(follow_up(move |c: &Connection| {
                    s2.lock()
                        .unwrap()
                        .push(("rest runs", committed("rest"), committed("urgent")));
                    insert("rest run")(c)
                }))
            });
            Ok((urgent, rest))
        };
        let (urgent, rest) = wait(w.submit_with(Durability::Light, claim)).unwrap();
        wait(urgent).unwrap();
        let rest_run = wait(rest).unwrap();
        wait(rest_run).unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            // The rest starts in the urgent run's transaction (after the
            // claim's commit); its own run comes after that commit.
            [("rest starts", true, false), ("rest runs", true, true)]
        );
        assert_eq!(rows(&w), ["claim", "rest", "rest run", "urgent"]);
    }

    #[test]
    fn a_failing_light_follow_up_spares_the_runs_before_it_in_its_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        // As two claims' follow-ups land in one transaction: a run, a
        // light one, a run, a light one that fails.
        let queue = |c: &Connection| -> Result<_> {
            insert("claim")(c)?;
            Ok((
                follow_up(insert("a")),
                follow_up_light(insert("light ok")),
                follow_up(insert("b")),
                follow_up_light(half_then_fail()),
            ))
        };
        let (a, ok, b, fails) = wait(w.submit_with(Durability::Light, queue)).unwrap();
        assert!(wait(a).is_ok() && wait(ok).is_ok());
        let b = wait(b);
        assert!(b.is_ok(), "{b:?}");
        assert!(wait(fails).is_err());
        assert_eq!(rows(&w), ["a", "b", "claim", "light ok", "taken"]);
    }

    #[test]
    fn a_run_queued_by_an_operation_that_is_undone_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        // Queues its run, then fails.
        let failing = |c: &Connection| -> Result<Receiver<Result<()>>> {
            let run = follow_up(insert("run b"));
            c.execute("INSERT INTO t (v) VALUES ('taken')", [])?;
            Ok(run)
        };
        let (a, b) = as_one_group(&w, || {
            let a = w.submit_with(Durability::Light, claim_like("run a"));
            // Fails after a: the light transaction, a's claim with it, is undone.
            let b = w.submit_with(Durability::Light, failing);
            (a, b)
        });
        assert!(matches!(wait(a), Err(Error::Aborted(_))));
        assert!(wait(b).is_err());
        // Only a light operation may queue runs.
        let (_, run_c) = wait(w.submit(claim_like("run c"))).unwrap();
        assert!(matches!(wait(run_c), Err(Error::Aborted(_))));
        assert_eq!(rows(&w), ["taken"]);
    }

    #[test]
    fn an_apply_step_runs_only_if_its_start_committed() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("taken")).unwrap();
        let pair = |start: TestOp, apply: &'static str| w.submit_pair(false, start, insert(apply));
        let (a, b, c) = as_one_group(&w, || {
            let a = pair(Box::new(insert("start a")), "apply a");
            // Its start fails: the light transaction (a's start with it) is undone.
            let b = pair(Box::new(insert("taken")), "apply b");
            let c = pair(Box::new(insert("start c")), "apply c");
            (a, b, c)
        });
        let [(a_start, a_apply), (b_start, b_apply), (c_start, c_apply)] =
            [a, b, c].map(|(s, a)| (wait(s), wait(a)));
        assert!(matches!(a_start, Err(Error::Aborted(_))), "{a_start:?}");
        assert!(matches!(a_apply, Err(Error::Aborted(_))), "{a_apply:?}");
        assert!(b_start.is_err() && matches!(b_apply, Err(Error::Aborted(_))));
        assert!(
            c_start.is_ok() && c_apply.is_ok(),
            "{c_start:?} {c_apply:?}"
        );
        assert_eq!(rows(&w), ["apply c", "start c", "taken"]);
    }

    #[test]
    fn after_a_failed_fsync_no_durable_write_is_called_durable() {
        let dir = tempfile::tempdir().unwrap();
        let w = writer(&dir);
        w.run(insert("before")).unwrap();
        let SyncMode::Wal { failed, .. } = &w.core.sync else {
            panic!("a file queue syncs its WAL itself");
        };
        // What a failed sync_data() leaves behind.
        failed.store(true, Ordering::Release);
        for v in ["inline", "queued"] {
            let r = if v == "inline" {
                w.run(insert("inline"))
            } else {
                wait(w.submit(insert("queued")))
            };
            assert!(matches!(r, Err(Error::OutcomeUnknown(_))), "{v}: {r:?}");
        }
        // Light writes never claimed durability: still answered.
        w.run_light(insert("light")).unwrap();
        // Producers blocked together, whose groups the writer thread syncs
        // itself rather than the syncer: none is called durable either.
        let (mut rounds, n) = (0, AtomicUsize::new(0));
        while w.core.direct_syncs.load(Ordering::Relaxed) == 0 {
            rounds += 1;
            assert!(rounds <= 200, "no group was synced by the writer thread");
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..3 {
                            let v = format!("together {}", n.fetch_add(1, Ordering::Relaxed));
                            let r = w.run(move |c: &Connection| {
                                c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
                                Ok(())
                            });
                            assert!(matches!(r, Err(Error::OutcomeUnknown(_))), "{r:?}");
                        }
                    });
                }
            });
        }
    }

    #[test]
    fn a_blocked_caller_gets_its_answer_or_an_error_never_a_hang() {
        // Answered from another thread, after the caller began to wait.
        let (rx, tx) = OneShot::new();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.put(7)
        });
        assert_eq!(rx.recv(), Some(7));
        t.join().unwrap();
        // Every sender (the run and the reject of an operation) dropped
        // unanswered, as when the writer stops with the operation queued:
        // the caller learns it instead of waiting forever.
        let (rx, tx) = OneShot::<i32>::new();
        let reject = tx.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
            drop(reject);
        });
        assert_eq!(rx.recv(), None);
        t.join().unwrap();
        assert!(matches!(answer::<()>(None), Err(Error::Internal(_))));
    }
}
