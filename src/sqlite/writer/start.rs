//! A run's start and its apply step as one writer operation
//! ([`Writer::start`]): the start commits light, then the apply step gets
//! what it started, by value, in the same cycle. Writes no table itself:
//! the caller's start and apply steps do.

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use super::op::{self, Op};
use super::{Cycle, Sink, Writer};
use crate::error::{Error, Result};

impl Writer {
    /// Starts a run and applies it, as one operation. `start` runs in the
    /// cycle's light transaction (committed without an fsync: a lost start
    /// only means the job runs again) and says what it started (`None`:
    /// nothing, and nothing is applied). The run goes by value to `apply`,
    /// in the cycle's next transaction — after the light commit, so the
    /// run's attempt row is there before any of its user code runs — and
    /// only if that commit succeeded ([`Cycle::apply`], the path of the runs
    /// a claim starts too). The first receiver answers once the start
    /// committed, with a copy of what it started, or with why it did not
    /// commit; the second once the apply step's commit is durable, or with
    /// `Aborted` when it did not run (`start` failed, started nothing, or
    /// was undone). When the operation never ran or `start` panicked, the
    /// second is dropped unanswered (its [`super::wait`] says so): never
    /// answered twice, the writer thread never blocks on it.
    ///
    /// `alone`: the start and its apply step run in a cycle of their own (a
    /// suspect job, perhaps a poison pill: when it kills the process, no
    /// other run of this writer is started and unfinished, so no healthy job
    /// is charged with it). The apply step is self-isolated, as with
    /// [`Writer::submit_apply`]: it must keep that operation's rule.
    pub(crate) fn start<S, A, FS, FA>(
        &self,
        alone: bool,
        start: FS,
        apply: FA,
    ) -> (Receiver<Result<Option<S>>>, Receiver<Result<A>>)
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
        FS: FnOnce(&Connection) -> Result<Option<S>> + Send + 'static,
        FA: FnOnce(&Connection, S) -> Result<A> + Send + 'static,
    {
        let (started_tx, started) = op::channel();
        let (applied_tx, applied) = op::channel();
        let body = move |conn: &Connection, cycle: &mut Cycle| {
            let started = start(conn);
            match &started {
                Ok(Some(run)) => cycle.apply_to(run.clone(), apply, applied_tx),
                Ok(None) => applied_tx.put(Err(Error::Aborted(
                    "the start found nothing to start: nothing ran".into(),
                ))),
                Err(_) => applied_tx.put(Err(Error::Aborted(
                    "the run's start failed: nothing of it ran".into(),
                ))),
            }
            started
        };
        let mut op = Op::light(body, started_tx);
        op.alone = alone;
        self.send(op);
        (started, applied)
    }
}
