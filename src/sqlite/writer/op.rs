//! What an operation is: its body (light, durable, or a self-isolated apply
//! step), how its caller is answered, and whether it runs alone. Writes no
//! table itself.

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::cycle::Cycle;
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
    /// queue follow-up work (a run's start hands the run to its apply step
    /// there), so the only one given a [`Cycle`].
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
    /// Runs in a cycle of its own, with the follow-up work it queues and
    /// nothing else (a suspect job's start, see [`super::Writer::start`]).
    pub(super) alone: bool,
    /// Sent by a caller blocked until its commit ([`super::Writer::run`]),
    /// not pipelined: the writer waits a moment for such callers to come
    /// back.
    pub(super) blocking: bool,
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
            alone: false,
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
