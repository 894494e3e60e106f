//! The SQLite transactions user code gets: [`JobTx`], a job's apply step
//! (its writes commit with the ledger row and the job's completion), and
//! [`WriteTx`], an application's own write with enqueues in it. Writes
//! `outbox` (through the outbox module) and `jobs` (enqueues).

use std::cell::Cell;

use rusqlite::Connection;
use serde::Serialize;

use crate::core::handler::JobContext;
use crate::core::job::{Enqueued, NewJob};
use crate::core::time::Millis;
use crate::core::validate::{self, EnqueueRules};
use crate::driver::run::Savepoint;
use crate::error::Result;
use crate::sqlite::outbox;

/// The transaction a job's apply step runs in. Derefs to the
/// [`rusqlite::Connection`] (inside the transaction: do not COMMIT or
/// ROLLBACK yourself, nor release or roll back to the savepoint
/// `litejob_run` the run's writes go into; savepoints of your own, with
/// other names, are fine). Everything written through it commits together with
/// the ledger row and the job's completion, or not at all.
pub struct JobTx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) job: &'a JobContext,
    pub(crate) now: Millis,
    pub(crate) outbox_max_attempts: i64,
    pub(crate) outbox_added: Cell<usize>,
    /// The savepoint around the handler's writes, opened the first time the
    /// handler reaches the connection (see [`crate::sqlite::run::apply`]).
    pub(crate) savepoint: Cell<Savepoint>,
}

/// The savepoint a run's handler writes inside: opened by [`JobTx::conn`],
/// released or rolled back to by [`crate::sqlite::run::apply`]. A reserved
/// name, so a handler's own savepoints nest inside it.
pub(crate) const RUN_SAVEPOINT: &str = "SAVEPOINT litejob_run";
pub(crate) const RELEASE_RUN: &str = "RELEASE litejob_run";
pub(crate) const ROLLBACK_RUN: &str = "ROLLBACK TO litejob_run";

impl<'a> JobTx<'a> {
    /// The connection, inside the job's transaction.
    pub fn conn(&self) -> &Connection {
        if self.savepoint.get() == Savepoint::NotOpened {
            // Opened lazily: a handler that writes nothing (or only reads)
            // then costs no savepoint, whose first write to each page
            // copies that page into the sub-journal.
            let opened = crate::sqlite::writer::exec_cached(self.conn, RUN_SAVEPOINT);
            self.savepoint.set(match opened {
                Ok(_) => Savepoint::Open,
                Err(e) => {
                    log::error!(target: "litejob", "job {}: cannot open its savepoint: {e}", self.job.id);
                    Savepoint::Failed
                }
            });
        }
        self.conn
    }

    /// The job this transaction belongs to.
    pub fn job(&self) -> &JobContext {
        self.job
    }

    /// The time this apply step started, in ms since the epoch.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// Records a side effect to perform after this transaction commits. The
    /// `key` is stable and unique: adding the same key again (in this run or
    /// another) is a no-op. Returns the outbox row id and whether it is new.
    pub fn outbox(&self, kind: &str, key: &str, payload: &impl Serialize) -> Result<(i64, bool)> {
        let json = serde_json::to_string(payload)?;
        let added = outbox::add(
            self.conn(),
            self.job.id,
            kind,
            key,
            &json,
            self.outbox_max_attempts,
            self.now,
        )?;
        if added.1 {
            self.outbox_added.set(self.outbox_added.get() + 1);
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
        &self,
        key: &str,
    ) -> Result<Option<T>> {
        let json = crate::sqlite::workflow::dependency_output(self.conn, self.job.id, key)?;
        json.map(|j| crate::core::workflow::decode_output(key, &j))
            .transpose()
    }
    /// The recorded result of this job's step `name`
    /// ([`JobContext::step`](crate::JobContext::step) in its prepare step),
    /// read in this transaction. `None` when the job has no such step; an
    /// error when its value does not decode as `T`.
    pub fn step_output<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let json = crate::sqlite::steps::output(self.conn, self.job.id, name)?;
        json.map(|j| crate::core::steps::decode_step(name, &j))
            .transpose()
    }
}

impl std::ops::Deref for JobTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn()
    }
}

/// A write transaction on the writer thread, for application SQL and
/// enqueues that must commit together ("row written + job enqueued, or
/// neither"). Derefs to the connection; do not COMMIT or ROLLBACK yourself.
pub struct WriteTx<'a> {
    conn: &'a Connection,
    rules: &'a EnqueueRules,
    now: Millis,
    enqueued: Cell<bool>,
}

impl WriteTx<'_> {
    /// Enqueues inside this transaction.
    pub fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let valid = validate::validate_owned(job, self.rules, self.now)?;
        let r = crate::sqlite::enqueue::insert(self.conn, &valid, self.now)?;
        if !r.is_duplicate() {
            self.enqueued.set(true);
        }
        Ok(r)
    }

    /// The connection, inside the transaction.
    pub fn conn(&self) -> &Connection {
        self.conn
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// Runs `f`, a [`Queue::write`] body, in a [`WriteTx`] on the writer's
/// connection; its result, and whether it enqueued a new job.
pub(crate) fn in_write_tx<R>(
    conn: &Connection,
    rules: &EnqueueRules,
    now: Millis,
    f: impl FnOnce(&WriteTx<'_>) -> Result<R>,
) -> Result<(R, bool)> {
    let tx = WriteTx {
        conn,
        rules,
        now,
        enqueued: Cell::new(false),
    };
    let r = f(&tx)?;
    Ok((r, tx.enqueued.get()))
}
