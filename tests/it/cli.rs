//! The `litejob` command, run as the real binary, a file per behaviour it
//! pins, on both backends (`--db PATH` or `--db postgres://…`) unless the
//! behaviour is the file's own: `init` and `enqueue`, which queue it opens,
//! reading commands, `explain`, repairs, `bench`, help, and how it behaves
//! beside workers, on a broken pipe and on a newer schema.
//!
//! The helpers the files share live here: running the binary on a test's
//! queue, a `--json` document, stderr with an exit status, `init`, a job's
//! state and running a kind's jobs.

mod bench;
mod connection;
mod db_path;
mod explain;
mod help;
mod init_and_enqueue;
mod inspect;
mod queue_names;
mod read_only;
mod repairs;
mod robustness;
mod run_log;
pub(crate) mod steps;
mod workflows;

use crate::backends::Runtimes;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use litejob::Outcome;
use serde_json::Value;

use crate::backends::{handler, TestQueue};
use crate::support::{litejob, litejob_ok, show, wait_until, TestDb, LONG};

/// What the command's `--db` names: a test's queue on either engine, or a
/// file of a [`TestDb`] (for what only a file has).
trait Db {
    fn db(&self) -> &Path;
}

impl Db for TestQueue {
    fn db(&self) -> &Path {
        Path::new(&self.location)
    }
}

impl Db for TestDb {
    fn db(&self) -> &Path {
        &self.path
    }
}

/// Runs the binary with `--db` naming `q`.
fn run(q: &impl Db, args: &[&str]) -> Output {
    litejob(q.db(), args)
}

/// Runs the binary on `q`, asserts its status, returns stdout.
fn ok(q: &impl Db, args: &[&str], status: i32) -> String {
    litejob_ok(q.db(), args, status)
}

/// Runs the binary with `--json` and parses its one document.
fn json_of(q: &impl Db, args: &[&str], status: i32) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ok(q, &all, status);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}):\n{out}"))
}

/// Runs the binary, asserts its status, returns stderr.
fn stderr_of(q: &impl Db, args: &[&str], status: i32) -> String {
    let out = run(q, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        show(args, &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Creates the queue with `litejob init`.
fn init(q: &TestQueue) {
    ok(q, &["init"], 0);
}

/// Job `id`'s state, read with plain SQL.
fn state_of(q: &TestQueue, id: i64) -> String {
    q.strings(&format!("SELECT state FROM jobs WHERE id = {id}"))
        .pop()
        .unwrap_or_else(|| panic!("no job {id}"))
}

/// Runs every queued job of kind `k` through an in-process runtime whose
/// handler succeeds, and stops it.
fn run_jobs(q: &TestQueue, kind: &'static str) {
    let queue = q.open();
    let b = queue.runtime().poll_interval(Duration::from_millis(10));
    let mut rt = handler(b, kind, |_, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    wait_until("no job queued or running", LONG, || {
        q.count(&format!(
            "SELECT count(*) FROM jobs WHERE kind = '{kind}' AND state IN ('queued', 'running')"
        )) == 0
    });
    rt.stop();
}
