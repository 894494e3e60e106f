//! The `litejob` command, run as the real binary, a file per behaviour it
//! pins: `init` and `enqueue`, which file it opens, reading commands,
//! `explain`, repairs, `bench`, help, and how it behaves beside workers,
//! on a broken pipe and on a newer schema.
//!
//! The helpers the files share live here: a `--json` document, stderr with
//! an exit status, `init`, a job's state and running a kind's jobs.

mod bench;
mod db_path;
mod explain;
mod help;
mod init_and_enqueue;
mod inspect;
mod repairs;
mod robustness;

use std::time::Duration;

use litejob::{Outcome, Queue};
use serde_json::Value;

use crate::support::{litejob, litejob_ok, show, wait_until, TestDb, LONG};

/// Runs the binary with `--json` and parses its one document.
fn json_of(db: &TestDb, args: &[&str], status: i32) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = litejob_ok(&db.path, &all, status);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}):\n{out}"))
}

/// Runs the binary, asserts its status, returns stderr.
fn stderr_of(db: &TestDb, args: &[&str], status: i32) -> String {
    let out = litejob(&db.path, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        show(args, &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Creates the file with `litejob init`.
fn init(db: &TestDb) {
    litejob_ok(&db.path, &["init"], 0);
}

/// Job `id`'s state, read with plain SQL.
fn state_of(db: &TestDb, id: i64) -> String {
    db.sql()
        .query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap()
}

/// Runs every queued job of kind `k` through an in-process runtime whose
/// handler succeeds, and stops it.
fn run_jobs(db: &TestDb, kind: &'static str) {
    let q = Queue::open(&db.path).unwrap();
    let mut rt = q
        .runtime()
        .handler(kind, |_tx, _v: Value| Ok(Outcome::Done))
        .poll_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    wait_until("no job queued or running", LONG, || {
        db.count(&format!(
            "SELECT count(*) FROM jobs WHERE kind = '{kind}' AND state IN ('queued', 'running')"
        )) == 0
    });
    rt.stop();
}
