//! The one file kept safe: `litejob backup` of a file in use, `litejob
//! verify` of a file or a database, a Litestream replica restored, and a
//! PostgreSQL queue copied back into a file. Each runs the real binary
//! (and the real `litestream`) as an operator would.

mod backup;
mod copy_back;
mod litestream;
mod verify;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

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
