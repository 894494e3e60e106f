//! What an operation is: its body (light, durable, or a self-isolated apply
//! step), how its caller is answered, and the pairing of a run's start with
//! its apply step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::cycle::Cycle;
use crate::core::sync::lock;
use crate::driver::reply::Sink;
use crate::error::{Error, Result};

/// Called once the group's commit finished, with its result.
pub(super) type Reply = Box<dyn FnOnce(Result<()>) + Send>;

/// Answers a caller whose operation could not be run at all.
pub(super) type Reject = Box<dyn FnOnce(Error) + Send>;

/// How an operation's body ended, as the writer must treat its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// It succeeded.
    Ok,
    /// It failed: the writer undoes it (a self-isolated one undid itself).
    Failed,
    /// It failed half-way and could not undo itself: the writer ends the
    /// whole transaction, never committing half of it.
    LeftOpen,
}

/// The body of a durable operation, boxed. It runs inside the writer's
/// transaction and says how it ended and how to answer its caller after
/// the commit.
pub(super) type DurableFn = Box<dyn FnOnce(&Connection) -> (Status, Reply) + Send>;

/// The body of a light operation: a durable one's, plus the [`Cycle`] it
/// runs in, through which it may queue follow-up work.
pub(super) type LightFn = Box<dyn FnOnce(&Connection, &mut Cycle) -> (Status, Reply) + Send>;

/// How the writer runs an operation's body.
pub(super) enum Kind {
    /// No savepoint (see [`Durability::Light`]); the only kind that may
    /// queue follow-up work, so the only one given a [`Cycle`].
    Light(LightFn),
    /// In its own savepoint, unless alone in its group.
    Durable(DurableFn),
    /// Durable, and isolates itself ([`super::Writer::submit_apply`]): the
    /// writer opens no savepoint for it. When it fails it has left the
    /// transaction as it found it, or ended it (ROLLBACK); if it panics, the
    /// writer cannot know, and rolls the whole transaction back.
    Apply(DurableFn),
}

impl Kind {
    pub(super) fn durability(&self) -> Durability {
        match self {
            Kind::Light(_) => Durability::Light,
            Kind::Durable(_) | Kind::Apply(_) => Durability::Durable,
        }
    }
}

/// One operation: its body, or `reject` when it cannot run.
pub(super) struct Op {
    pub(super) kind: Kind,
    pub(super) reject: Reject,
    /// A run's apply step that must run in the same cycle as this light
    /// operation (its start), after its commit.
    pub(super) pair: Option<Pair>,
    /// Sent by a caller blocked until its commit ([`super::Writer::run`]),
    /// not pipelined: the writer waits a moment for such callers to come
    /// back.
    pub(super) blocking: bool,
}

/// A run's apply step, paired with its start. A cycle then never ends with
/// a run started but not applied, so a crash abandons only the runs of the
/// cycle it hit.
pub(super) struct Pair {
    pub(super) apply: Box<Op>,
    /// Run the pair alone, in a cycle of its own (a suspect job, perhaps a
    /// poison pill: when it kills the process, no other run of this writer
    /// is started and unfinished, so no healthy job is charged with it).
    pub(super) alone: bool,
}

/// How hard an operation's commit must push to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Answered once the commit is on disk (with FULL, the default: after an
    /// fsync of the WAL that began after the commit), each in its own
    /// savepoint (see [`super::group::run_group`] for the two exceptions).
    /// Enqueues, completions, failures, acknowledgements.
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

/// The body's success, and the reply that gives its caller `result` once
/// the commit is known.
fn reply_with<R: Send + 'static, S: Sink<Result<R>>>(result: Result<R>, tx: S) -> (Status, Reply) {
    let (status, result) = match result {
        Ok(v) => (Status::Ok, Ok(v)),
        Err(Error::HalfWritten(m)) => (Status::LeftOpen, Err(Error::Aborted(m))),
        Err(e) => (Status::Failed, Err(e)),
    };
    let reply: Reply = Box::new(move |commit: Result<()>| {
        let answer = match result {
            Err(e) => Err(e),
            Ok(v) => commit.map(|_| v),
        };
        tx.put(answer);
    });
    (status, reply)
}

impl Op {
    /// `tx`: where a rejection goes (a clone of the body's sink).
    fn new<R: Send + 'static, S: Sink<Result<R>>>(tx: S, kind: Kind) -> Op {
        Op {
            kind,
            reject: Box::new(move |e: Error| tx.put(Err(e))),
            pair: None,
            blocking: false,
        }
    }

    /// A durable operation whose answer goes to `tx`.
    pub(super) fn durable<R, F, S>(f: F, tx: S) -> Op
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
        S: Sink<Result<R>>,
    {
        Op::new(
            tx.clone(),
            Kind::Durable(Box::new(move |c| reply_with(f(c), tx))),
        )
    }

    /// A self-isolated apply step whose answer goes to `tx`.
    pub(super) fn apply<R, F, S>(f: F, tx: S) -> Op
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
        S: Sink<Result<R>>,
    {
        Op::new(
            tx.clone(),
            Kind::Apply(Box::new(move |c| reply_with(f(c), tx))),
        )
    }

    /// A light operation whose answer goes to `tx`.
    pub(super) fn light<R, F, S>(f: F, tx: S) -> Op
    where
        R: Send + 'static,
        F: FnOnce(&Connection, &mut Cycle) -> Result<R> + Send + 'static,
        S: Sink<Result<R>>,
    {
        Op::new(
            tx.clone(),
            Kind::Light(Box::new(move |c, cycle| reply_with(f(c, cycle), tx))),
        )
    }

    /// An operation of either class that queues no follow-up work.
    pub(super) fn plain<R, F, S>(durability: Durability, f: F, tx: S) -> Op
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
        S: Sink<Result<R>>,
    {
        match durability {
            Durability::Durable => Op::durable(f, tx),
            Durability::Light => Op::light(move |c, _| f(c), tx),
        }
    }
}

/// A new channel for one answer.
pub(super) fn channel<R>() -> (Sender<Result<R>>, Receiver<Result<R>>) {
    crossbeam_channel::bounded(1)
}

/// A run's start (light) and its apply step (durable, self-isolated) as one
/// operation: the writer commits the start, then applies in the same cycle.
/// The apply step runs only if its start committed: when the light
/// transaction was undone, no user code of the run may run (its attempt row
/// is not there to be charged if that code crashes).
pub(super) fn start_and_apply<S, A, FS, FA>(
    alone: bool,
    start: FS,
    apply: FA,
) -> (Op, Receiver<Result<S>>, Receiver<Result<A>>)
where
    S: Send + 'static,
    A: Send + 'static,
    FS: FnOnce(&Connection) -> Result<S> + Send + 'static,
    FA: FnOnce(&Connection) -> Result<A> + Send + 'static,
{
    let started = Arc::new(AtomicBool::new(false));
    let (tx, start_rx) = channel();
    let flag = started.clone();
    let mut op = Op::light(move |c: &Connection, _: &mut Cycle| start(c), tx);
    let Kind::Light(run) = op.kind else {
        unreachable!("Op::light builds a light operation")
    };
    op.kind = Kind::Light(Box::new(move |conn: &Connection, cycle: &mut Cycle| {
        let (status, reply) = run(conn, cycle);
        let ok = status == Status::Ok;
        let reply: Reply = Box::new(move |commit: Result<()>| {
            flag.store(ok && commit.is_ok(), Ordering::Release);
            reply(commit)
        });
        (status, reply)
    }));
    let (tx, apply_rx) = channel();
    let mut apply_op = Op::apply(apply, tx);
    let reject = Arc::new(Mutex::new(Some(apply_op.reject)));
    let reject_run = reject.clone();
    apply_op.reject = Box::new(move |e: Error| {
        if let Some(r) = lock(&reject).take() {
            r(e)
        }
    });
    let Kind::Apply(run) = apply_op.kind else {
        unreachable!("Op::apply builds an apply step")
    };
    apply_op.kind = Kind::Apply(Box::new(move |conn: &Connection| {
        if started.load(Ordering::Acquire) {
            return run(conn);
        }
        let reply: Reply = Box::new(move |_| {
            if let Some(r) = lock(&reject_run).take() {
                r(Error::Aborted(
                    "the run's start was not committed: nothing of it ran".into(),
                ))
            }
        });
        (Status::Failed, reply)
    }));
    op.pair = Some(Pair {
        apply: Box::new(apply_op),
        alone,
    });
    (op, start_rx, apply_rx)
}
