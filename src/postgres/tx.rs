//! The PostgreSQL transactions user code gets: [`PgJobTx`], a job's apply
//! step (its writes commit with the ledger row and the job's completion),
//! and [`PgWriteTx`], an application's own write with enqueues in it.
//! Writes `outbox` (through the outbox module) and `jobs` (enqueues).

use std::ops::{Deref, DerefMut};

use postgres::Transaction;

use super::conn::Stmt;
use serde::Serialize;

use super::conn::write_err;
use crate::core::handler::JobContext;
use crate::core::job::{Enqueued, NewJob};
use crate::core::time::Millis;
use crate::core::validate::EnqueueRules;
use crate::driver::run::Savepoint;
use crate::error::Result;

/// The savepoint a run's handler writes inside, opened the first time the
/// handler reaches the transaction: a handler that writes nothing costs no
/// round trip. A failed statement aborts a PostgreSQL transaction; rolling
/// back to this savepoint undoes the handler's writes and nothing else of
/// the batch's transaction.
pub(crate) const RUN_SAVEPOINT: &str = "SAVEPOINT litejob_run";
pub(crate) const RELEASE_RUN: &str = "RELEASE SAVEPOINT litejob_run";
pub(crate) const ROLLBACK_RUN: &str = "ROLLBACK TO SAVEPOINT litejob_run";

/// The transaction a job's apply step runs in, on PostgreSQL. Derefs to the
/// client's [`postgres::Transaction`]: run the handler's SQL through it
/// (`tx.execute(..)`, `tx.query(..)`). Everything written through it
/// commits together with the ledger row and the job's completion, or not
/// at all. Do not COMMIT or ROLLBACK yourself, nor release or roll back to
/// the savepoint `litejob_run`; savepoints of your own are fine.
pub struct PgJobTx<'a, 't> {
    pub(crate) tx: &'a mut Transaction<'t>,
    pub(crate) job: &'a JobContext,
    pub(crate) now: Millis,
    pub(crate) outbox_max_attempts: i64,
    pub(crate) outbox_add: &'a Stmt,
    pub(crate) outbox_added: usize,
    pub(crate) savepoint: Savepoint,
}

impl<'t> PgJobTx<'_, 't> {
    /// The transaction, inside the run's savepoint.
    pub fn transaction(&mut self) -> &mut Transaction<'t> {
        if self.savepoint == Savepoint::NotOpened {
            self.savepoint = match self.tx.batch_execute(RUN_SAVEPOINT) {
                Ok(()) => Savepoint::Open,
                Err(e) => {
                    log::error!(target: "litejob", "job {}: cannot open its savepoint: {e}", self.job.id);
                    Savepoint::Failed
                }
            };
        }
        self.tx
    }

    /// The job this transaction belongs to.
    pub fn job(&self) -> &JobContext {
        self.job
    }

    /// The time this apply step started, in ms since the epoch (the
    /// server's clock).
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Records a side effect to perform after this transaction commits. The
    /// `key` is stable and unique: adding the same key again (in this run or
    /// another) is a no-op. Returns the outbox row id and whether it is new.
    pub fn outbox(
        &mut self,
        kind: &str,
        key: &str,
        payload: &impl Serialize,
    ) -> Result<(i64, bool)> {
        let json = serde_json::to_string(payload)?;
        let (job, max, now, stmt) = (
            self.job.id,
            self.outbox_max_attempts,
            self.now,
            self.outbox_add,
        );
        let added = super::outbox::add(self.transaction(), stmt, job, kind, key, &json, max, now)?;
        if added.1 {
            self.outbox_added += 1;
        }
        Ok(added)
    }

    /// The result of `key`, one of this job's dependencies
    /// ([`NewJob::with_depends_on`](crate::NewJob::with_depends_on)), as it
    /// committed ([`Outcome::done_with`](crate::Outcome::done_with)): read in
    /// this transaction. `None` when it finished without a value; an error
    /// when `key` is not one of its dependencies, or its value does not
    /// decode as `T`.
    pub fn dependency_output<T: serde::de::DeserializeOwned>(
        &mut self,
        key: &str,
    ) -> Result<Option<T>> {
        let id = self.job.id;
        let json = crate::postgres::workflow::dependency_output(self.transaction(), id, key)?;
        json.map(|j| crate::core::workflow::decode_output(key, &j))
            .transpose()
    }
    /// The recorded result of this job's step `name`
    /// ([`JobContext::step`](crate::JobContext::step) in its prepare step),
    /// read in this transaction. `None` when the job has no such step; an
    /// error when its value does not decode as `T`.
    pub fn step_output<T: serde::de::DeserializeOwned>(&mut self, name: &str) -> Result<Option<T>> {
        let id = self.job.id;
        let json = crate::postgres::steps::output(self.transaction(), id, name)?;
        json.map(|j| crate::core::steps::decode_step(name, &j))
            .transpose()
    }
}

impl<'t> Deref for PgJobTx<'_, 't> {
    type Target = Transaction<'t>;
    fn deref(&self) -> &Transaction<'t> {
        self.tx
    }
}

impl<'t> DerefMut for PgJobTx<'_, 't> {
    fn deref_mut(&mut self) -> &mut Transaction<'t> {
        self.transaction()
    }
}

/// A write transaction of the application's on PostgreSQL
/// ([`Queue::write`](crate::Queue#method.write-1)): its SQL and the jobs it enqueues commit
/// together, or not at all. Derefs to the client's
/// [`postgres::Transaction`].
pub struct PgWriteTx<'a, 't> {
    pub(crate) tx: &'a mut Transaction<'t>,
    pub(crate) rules: &'a EnqueueRules,
    pub(crate) now: Millis,
    pub(crate) insert: &'a Stmt,
    pub(crate) enqueued: bool,
}

impl PgWriteTx<'_, '_> {
    /// Enqueues inside this transaction.
    pub fn enqueue(&mut self, job: NewJob) -> Result<Enqueued> {
        let valid = crate::core::validate::validate_owned(job, self.rules, self.now)?;
        let r = super::enqueue::insert(self.tx, self.insert, &valid, self.now)?;
        if !r.is_duplicate() {
            self.enqueued = true;
        }
        Ok(r)
    }
}

impl<'t> Deref for PgWriteTx<'_, 't> {
    type Target = Transaction<'t>;
    fn deref(&self) -> &Transaction<'t> {
        self.tx
    }
}

impl<'t> DerefMut for PgWriteTx<'_, 't> {
    fn deref_mut(&mut self) -> &mut Transaction<'t> {
        self.tx
    }
}

/// Commits `tx`, an application's own write, mapping a broken connection
/// to "outcome unknown".
pub(crate) fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().map_err(write_err)
}
