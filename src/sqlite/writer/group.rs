//! Running one transaction of a cycle ([`run_group`]): savepoints, what a
//! failure undoes, the commit and the classification of its errors. Writes
//! no table itself: the operations it runs do.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use rusqlite::Connection;

use super::cycle::{Cycle, Outcome, Ran};
use super::op::{Durability, Kind, Op, Reject};
use crate::error::Error;

/// Applies `batch` in as few transactions as possible (one, unless an
/// operation's failure rolled the whole transaction back). Answers the
/// callers whose operation or transaction failed; returns the operations
/// whose commit succeeded, for the caller to answer once the commit is as
/// durable as it must be.
///
/// Each durable operation runs inside its own savepoint, so a failing one
/// rolls back alone (enqueues, operator actions, acknowledgements). Two
/// exceptions: an operation alone in the group (rolling back the
/// transaction undoes exactly it), and a self-isolated one (a run's apply
/// step), which opens its own savepoint only around the handler's SQL and
/// undoes its bookkeeping row itself, so a no-op handler costs no savepoint
/// at all (see [`crate::sqlite::run::apply`]). A light operation (bookkeeping:
/// claims, starts, lease renewals, reaping, which fail only when the disk
/// does) gets no savepoint — two statements and a copy of every page each
/// operation touches saved, on the writer's hottest path — and
/// when one fails it undoes the light operations before it in the
/// transaction (they learn `Aborted`): back to one savepoint opened where
/// they begin, if durable operations came first (those stay), or else the
/// whole transaction; the operations after it go on.
///
/// The work a light operation queued with its [`Cycle`] goes with its
/// answer: once its commit succeeded it is ready for the cycle's next
/// transaction; if it failed or was undone, it is answered `Aborted`.
#[must_use]
pub(super) fn run_group(
    conn: &Connection,
    batch: &mut Vec<Op>,
    op_started: &AtomicI64,
    epoch: Instant,
) -> Vec<Ran> {
    let mut group = Group {
        conn,
        replies: Vec::with_capacity(batch.len()),
        in_tx: false,
        // An operation alone in its group needs no savepoint: rolling back
        // the whole transaction undoes exactly it. A lone producer's
        // enqueue (and a batch enqueue's hundred rows) then costs no
        // sub-journal copies.
        alone_in_group: batch.len() == 1,
        light_from: None,
        op_started,
        epoch,
    };
    // Whatever way the group ends, its transactions have.
    struct Ended;
    impl Drop for Ended {
        fn drop(&mut self) {
            crate::sqlite::workflow::writer_tx_ended();
        }
    }
    let _ended = Ended;
    let mut ops = batch.drain(..);
    // A transaction left open (a COMMIT and its ROLLBACK both failed last
    // time) would swallow this group into it.
    if !rollback(conn) {
        ops.for_each(|op| (op.reject)(stuck()));
        return Vec::new();
    }
    while let Some(op) = ops.next() {
        if let Flow::Stuck = group.apply(op) {
            ops.for_each(|op| (op.reject)(stuck()));
            return Vec::new();
        }
    }
    group.commit()
}

/// One transaction being built by [`run_group`].
struct Group<'a> {
    conn: &'a Connection,
    /// The operations that ran and are still part of the transaction.
    replies: Vec<Ran>,
    in_tx: bool,
    alone_in_group: bool,
    /// Where the light operations begin, in a transaction that began with
    /// durable ones (`replies` from there on are theirs), and a savepoint
    /// open there: a light operation has none of its own, and when one
    /// fails, rolling back to this one undoes the light operations only, not
    /// the enqueues and acknowledgements before them.
    light_from: Option<usize>,
    op_started: &'a AtomicI64,
    epoch: Instant,
}

/// Whether [`run_group`] goes on after an operation.
enum Flow {
    Next,
    /// The connection holds a transaction it cannot roll back: the rest of
    /// the group is refused.
    Stuck,
}

/// What undoing a failed operation went back to.
enum Undone {
    /// Its own savepoint.
    Op,
    /// The savepoint where the transaction's light operations begin.
    Light,
    /// The start of the transaction.
    Transaction,
    /// Nothing: the transaction could not be rolled back.
    Stuck,
}

impl Group<'_> {
    /// Runs one operation inside the transaction (opening it if need be)
    /// and undoes it, or more, when it fails.
    fn apply(&mut self, op: Op) -> Flow {
        let Op { kind, reject, .. } = op;
        let durability = kind.durability();
        let self_isolated = matches!(kind, Kind::Apply(_));
        let savepoint = durability == Durability::Durable && !self_isolated && !self.alone_in_group;
        if !self.in_tx {
            if let Err(e) = exec_cached(self.conn, "BEGIN IMMEDIATE") {
                // Not executed at all: answer with the reason.
                reject(crate::sqlite::db::from_sqlite(e));
                return Flow::Next;
            }
            self.in_tx = true;
            crate::sqlite::workflow::writer_tx_began();
        }
        let open_light = durability == Durability::Light
            && self.light_from.is_none()
            && self
                .replies
                .iter()
                .any(|r| r.durability == Durability::Durable);
        // (`ROLLBACK TO` goes back to the innermost savepoint of that name.)
        if let Err(e) = if savepoint {
            exec_cached(self.conn, "SAVEPOINT op")
        } else if open_light {
            exec_cached(self.conn, "SAVEPOINT litejob_light")
        } else {
            Ok(0)
        } {
            return self.fail_before_run(reject, crate::sqlite::db::from_sqlite(e));
        }
        if open_light {
            self.light_from = Some(self.replies.len());
        }
        let outcome = self.run(kind, durability);
        let ok = matches!(outcome, Outcome::Done(_));
        // A self-isolated operation that returned its failure undid its own
        // writes (or ended the transaction, seen below), unless it says it
        // could not.
        let clean = self_isolated && !matches!(outcome, Outcome::Panicked | Outcome::LeftOpen(_));
        if !ok && !clean && !self.conn.is_autocommit() {
            match self.undo(savepoint, durability) {
                Undone::Op | Undone::Transaction => {}
                Undone::Light => {
                    self.light_undone(outcome, reject);
                    return Flow::Next;
                }
                Undone::Stuck => {
                    self.give_up(outcome, reject);
                    return Flow::Stuck;
                }
            }
        }
        if self.conn.is_autocommit() {
            self.rolled_back(outcome, reject);
            return Flow::Next;
        }
        if ok && savepoint {
            let _ = exec_cached(self.conn, "RELEASE op");
        }
        if durability == Durability::Durable && !matches!(outcome, Outcome::Panicked) {
            // A durable operation after light ones (a follow-up
            // transaction mixes them): the next light one opens a savepoint
            // of its own, nested, so that undoing light operations never
            // undoes this one.
            self.light_from = None;
        }
        match outcome {
            Outcome::Done(ran) => self.replies.push(ran),
            Outcome::Failed(reply) | Outcome::LeftOpen(reply) => {
                self.replies.push(Ran::failed(durability, reply))
            }
            Outcome::Panicked => reject_panicked(reject),
        }
        Flow::Next
    }

    /// Runs the operation's body under the watchdog's clock, catching a
    /// panic; a light one gets the [`Cycle`] to queue follow-up work with.
    fn run(&self, kind: Kind, durability: Durability) -> Outcome {
        self.op_started.store(
            (self.epoch.elapsed().as_millis() as i64).max(1),
            Ordering::Release,
        );
        let mut cycle = Cycle::new();
        let outcome = catch_unwind(AssertUnwindSafe(|| match kind {
            Kind::Light(f) => f(self.conn, &mut cycle),
            Kind::Durable(f) | Kind::Apply(f) => f(self.conn),
        }));
        self.op_started.store(0, Ordering::Release);
        cycle.settle(durability, outcome)
    }

    /// Its savepoint could not be opened: the operation did not run, and
    /// the transaction so far is given up.
    fn fail_before_run(&mut self, reject: Reject, err: Error) -> Flow {
        reject(err.duplicate());
        for r in self.replies.drain(..) {
            r.fail(err.duplicate());
        }
        self.in_tx = false;
        self.light_from = None;
        if rollback(self.conn) {
            Flow::Next
        } else {
            Flow::Stuck
        }
    }

    /// Undoes a failed operation: back to its savepoint, or (without one,
    /// or if that fails) the whole transaction. Never commit half an
    /// operation. A light one goes back to where the light operations
    /// began, if that is inside the transaction.
    fn undo(&self, savepoint: bool, durability: Durability) -> Undone {
        if savepoint
            && exec_cached(self.conn, "ROLLBACK TO op")
                .and_then(|_| exec_cached(self.conn, "RELEASE op"))
                .is_ok()
        {
            return Undone::Op;
        }
        if !savepoint
            && durability == Durability::Light
            && self.light_from.is_some()
            && exec_cached(self.conn, "ROLLBACK TO litejob_light").is_ok()
        {
            return Undone::Light;
        }
        if rollback(self.conn) {
            Undone::Transaction
        } else {
            Undone::Stuck
        }
    }

    /// A light operation failed and was undone back to where the light
    /// operations began: those before it in the transaction go with it.
    fn light_undone(&mut self, outcome: Outcome, reject: Reject) {
        let from = self.light_from.expect("undone to it");
        for r in self.replies.drain(from..) {
            r.fail(Error::Aborted(
                "another light write in the same transaction failed and was undone with it".into(),
            ));
        }
        match outcome {
            Outcome::Failed(reply) | Outcome::LeftOpen(reply) => reply(Ok(())),
            Outcome::Done(ran) => {
                ran.fail(Error::Aborted("the transaction was rolled back".into()))
            }
            Outcome::Panicked => reject_panicked(reject),
        }
    }

    /// The transaction could not be rolled back: nothing of it is written.
    fn give_up(&mut self, outcome: Outcome, reject: Reject) {
        for r in self.replies.drain(..) {
            r.fail(stuck());
        }
        match outcome {
            Outcome::Done(ran) => ran.fail(stuck()),
            Outcome::Failed(reply) | Outcome::LeftOpen(reply) => reply(Err(stuck())),
            Outcome::Panicked => reject(stuck()),
        }
    }

    /// The whole transaction was rolled back (by SQLite: disk full,
    /// interrupt, some I/O errors; or by [`Group::undo`]): every operation
    /// before this one in the group is gone too. Their callers learn it was
    /// not written.
    fn rolled_back(&mut self, outcome: Outcome, reject: Reject) {
        for r in self.replies.drain(..) {
            r.fail(Error::Aborted(
                "another write in the same group commit failed and rolled the transaction back"
                    .into(),
            ));
        }
        self.in_tx = false;
        self.light_from = None;
        match outcome {
            Outcome::Done(ran) => {
                ran.fail(Error::Aborted("the transaction was rolled back".into()))
            }
            // Its own error.
            Outcome::Failed(reply) | Outcome::LeftOpen(reply) => reply(Ok(())),
            Outcome::Panicked => reject_panicked(reject),
        }
    }

    /// Commits the transaction; the operations in it, if it committed.
    fn commit(mut self) -> Vec<Ran> {
        if !self.in_tx {
            return Vec::new();
        }
        let commit = exec_cached(self.conn, "COMMIT")
            .map(|_| ())
            .map_err(classify_commit_error);
        if commit.is_err() {
            // If this fails too, the next group's first step tries again.
            rollback(self.conn);
        }
        match commit {
            Ok(()) => self.replies,
            Err(e) => {
                self.replies.drain(..).for_each(|r| r.fail(e.duplicate()));
                Vec::new()
            }
        }
    }
}

/// The error of an operation refused because the connection is stuck.
fn stuck() -> Error {
    Error::Internal(
        "the write connection holds a transaction it cannot roll back; nothing was written".into(),
    )
}

/// A failed COMMIT, by SQLite's result code: a full disk or a lock means
/// nothing was written; anything else (an I/O error mid-commit) leaves the
/// outcome unknown.
fn classify_commit_error(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code() {
        Some(DiskFull) | Some(DatabaseBusy) | Some(DatabaseLocked) => {
            crate::sqlite::db::from_sqlite(e)
        }
        _ => Error::OutcomeUnknown(e.to_string()),
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
