//! The one file kept safe: `litejob backup` of a file in use, `litejob
//! verify` of a file or a database, a Litestream replica restored, and a
//! PostgreSQL queue copied back into a file. Each runs the real binary
//! (and the real `litestream`) as an operator would. Here too: the
//! workflow both the copies and `verify` are tried on ([`a_workflow`]).

mod backup;
mod copy_back;
mod copy_steps;
mod litestream;
mod verify;

use std::path::Path;
use std::process::Output;

use litejob::admin::AnyQueue;
use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use crate::backends::{Runtimes, TestQueue};
use crate::support::{litejob, show};

/// Runs `litejob --db DB ARGS`, asserts its exit status, returns stdout.
pub fn run(db: &Path, args: &[&str], status: i32) -> String {
    let out: Output = litejob(db, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `litejob --db DB --json ARGS`, asserts its exit status, returns
/// the document.
pub fn json(db: &Path, args: &[&str], status: i32) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run(db, &all, status);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: {e}\n{out}"))
}

/// `litejob verify FILE --json`: exit 0 and nothing broken.
pub fn assert_verifies(file: &Path) {
    let v = json(file, &["verify"], 0);
    assert_eq!(v["broken"], serde_json::json!([]), "{v}");
    assert!(v["checked"].as_array().unwrap().len() >= 12, "{v}");
}

/// The demo's work in a file as plain SQL reads it: the counts that must
/// agree in any consistent moment of a demo on it.
#[derive(Debug, PartialEq, Eq)]
pub struct DemoRows {
    pub jobs: i64,
    pub succeeded: i64,
    pub ledger: i64,
    pub invoices: i64,
    pub outbox: i64,
    /// Invoices whose event has no ledger row, or no succeeded job.
    pub orphan_invoices: i64,
}

impl DemoRows {
    pub fn of(file: &Path) -> DemoRows {
        let c =
            rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let n = |sql: &str| -> i64 {
            c.query_row(sql, [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        };
        DemoRows {
            jobs: n("SELECT count(*) FROM jobs"),
            succeeded: n("SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
            ledger: n("SELECT count(*) FROM processed_jobs"),
            invoices: n("SELECT count(*) FROM invoices"),
            outbox: n("SELECT count(*) FROM outbox"),
            orphan_invoices: n("SELECT count(*) FROM invoices i WHERE NOT EXISTS \
                 (SELECT 1 FROM processed_jobs p JOIN jobs j ON j.idempotency_key = p.key \
                  WHERE p.key = i.provider_event_id AND j.state = 'succeeded')"),
        }
    }

    /// One moment of the demo: each succeeded job has committed its
    /// ledger row, its invoice and its receipt's outbox row, and nothing
    /// else has.
    pub fn assert_one_moment(&self, what: &str) {
        assert_eq!(self.ledger, self.succeeded, "{what}: {self:?}");
        assert_eq!(self.invoices, self.succeeded, "{what}: {self:?}");
        assert_eq!(self.outbox, self.succeeded, "{what}: {self:?}");
        assert_eq!(self.orphan_invoices, 0, "{what}: {self:?}");
    }
}

/// The keys of [`a_workflow`]'s jobs.
pub mod wf {
    /// Parts of the fan-in, each finished with a value.
    pub const A: &str = "wf-a";
    pub const B: &str = "wf-b";
    /// The fan-in: after both parts, finished with their sum.
    pub const MERGE: &str = "wf-merge";
    /// Queued: no handler ran it.
    pub const LATER: &str = "wf-later";
    /// Waiting on the fan-in (succeeded) and on `LATER`.
    pub const REPORT: &str = "wf-report";
    /// Discarded: dead.
    pub const FRAGILE: &str = "wf-fragile";
    /// Cancelled by `FRAGILE`'s death.
    pub const AFTER_FRAGILE: &str = "wf-after-fragile";
}

/// A workflow on `q`, run as far as it goes: `a` and `b` fan in to
/// `merge` (all three succeeded, with outputs); `report` waits on `merge`
/// and on `later`, which is queued; `after-fragile` was cancelled when
/// `fragile` was discarded (dead). Every workflow state but running, and
/// edges to jobs in each.
pub fn a_workflow(q: &TestQueue) {
    let queue = q.open();
    queue
        .enqueue_many(vec![
            NewJob::new("part", wf::A, &2),
            NewJob::new("part", wf::B, &3),
            NewJob::new("merge", wf::MERGE, &json!({})).with_depends_on([wf::A, wf::B]),
            NewJob::new("later", wf::LATER, &7),
            NewJob::new("report", wf::REPORT, &json!({})).with_depends_on([wf::MERGE, wf::LATER]),
            NewJob::new("fragile", wf::FRAGILE, &0),
            NewJob::new("after", wf::AFTER_FRAGILE, &0).with_depends_on([wf::FRAGILE]),
        ])
        .unwrap();
    let drained = queue
        .runtime()
        .handler("part", |_, n: i64| Outcome::done_with(&(n * 10)))
        .handler("merge", |tx, _: Value| {
            let a: Option<i64> = tx.dependency_output(wf::A)?;
            let b: Option<i64> = tx.dependency_output(wf::B)?;
            Outcome::done_with(&json!({ "sum": a.unwrap_or(0) + b.unwrap_or(0) }))
        })
        .handler("fragile", |_, _: Value| {
            Ok(Outcome::Discard("bad input".into()))
        })
        .drain()
        .unwrap();
    assert_eq!(
        (drained.succeeded, drained.discarded),
        (3, 1),
        "{drained:?}"
    );
    for (key, state) in [
        (wf::A, JobState::Succeeded),
        (wf::B, JobState::Succeeded),
        (wf::MERGE, JobState::Succeeded),
        (wf::LATER, JobState::Queued),
        (wf::REPORT, JobState::Waiting),
        (wf::FRAGILE, JobState::Dead),
        (wf::AFTER_FRAGILE, JobState::Cancelled),
    ] {
        assert_eq!(state_of(&queue, key), state, "{key}");
    }
    assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 5);
}

/// The state of the job of `key`.
pub fn state_of(queue: &AnyQueue, key: &str) -> JobState {
    queue.job_by_key(key).unwrap().unwrap().state
}

/// [`a_workflow`] carried on in `queue` (a copy of it): `later` runs, which
/// queues `report` in its commit; `report` then runs and reads both its
/// dependencies' outputs, `merge`'s as the copy brought it.
pub fn carry_on_with_a_workflow(queue: &AnyQueue) {
    let drained = queue
        .runtime()
        .handler("later", |_, n: i64| Outcome::done_with(&(n * 100)))
        .drain()
        .unwrap();
    assert_eq!(drained.succeeded, 1, "{drained:?}");
    assert_eq!(state_of(queue, wf::REPORT), JobState::Queued, "promoted");
    let drained = queue
        .runtime()
        .handler("report", |tx, _: Value| {
            let merge: Option<Value> = tx.dependency_output(wf::MERGE)?;
            let later: Option<i64> = tx.dependency_output(wf::LATER)?;
            Outcome::done_with(&json!({ "merge": merge, "later": later }))
        })
        .drain()
        .unwrap();
    assert_eq!(drained.succeeded, 1, "{drained:?}");
    let report = queue.job_by_key(wf::REPORT).unwrap().unwrap();
    assert_eq!(report.state, JobState::Succeeded);
    let out: Value = serde_json::from_str(report.output.as_deref().unwrap()).unwrap();
    assert_eq!(out, json!({ "merge": { "sum": 50 }, "later": 700 }));
    assert_eq!(state_of(queue, wf::AFTER_FRAGILE), JobState::Cancelled);
}
