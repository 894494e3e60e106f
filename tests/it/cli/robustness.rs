//! The command in a hostile world: a broken pipe exits quietly, a newer
//! schema is refused with both versions and the file left unchanged, and
//! every command works while workers run on the same file.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use litejob::{NewJob, Outcome, Queue};
use serde_json::Value;

use super::{init, json_of, stderr_of};
use crate::support::{bin, litejob_ok, wait_until, TestDb, LONG};

#[test]
fn a_broken_pipe_exits_quietly() {
    let db = TestDb::new();
    let q = db.open();
    let jobs: Vec<NewJob> = (0..3000)
        .map(|i| NewJob::new("k", format!("pipe-key-with-some-length-{i:06}"), &i))
        .collect();
    q.enqueue_many(jobs).unwrap();
    drop(q);
    for args in [
        vec!["jobs", "--limit", "3000"],
        vec!["jobs", "--limit", "3000", "--json"],
    ] {
        let mut child = Command::new(bin())
            .arg("--db")
            .arg(&db.path)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one byte (like `head -c1`), then close the read end.
        let mut stdout = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        stdout.read_exact(&mut one).unwrap();
        drop(stdout);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn a_newer_schema_is_refused_with_both_versions_and_left_unchanged() {
    let db = TestDb::new();
    init(&db);
    litejob_ok(&db.path, &["enqueue", "k", "--key", "v"], 0);
    {
        let c = db.sql();
        c.pragma_update(None, "user_version", 99).unwrap();
        // Fold the WAL into the file, so its bytes are the whole state.
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }
    let before = std::fs::read(&db.path).unwrap();
    for args in [
        vec!["jobs"],
        vec!["init"],
        vec!["enqueue", "k", "--key", "w"],
        vec!["stats", "--json"],
    ] {
        let e = stderr_of(&db, &args, 1);
        assert!(e.contains("99") && e.contains("version 3"), "{args:?}: {e}");
    }
    assert_eq!(std::fs::read(&db.path).unwrap(), before, "the file changed");
}

#[test]
fn the_command_works_while_workers_run_on_the_same_file() {
    let db = TestDb::new();
    init(&db);
    let q = Queue::open(&db.path).unwrap();
    let mut rt = q
        .runtime()
        .handler("live", |_tx, _v: Value| Ok(Outcome::Done))
        .poll_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    for i in 0..10 {
        let key = format!("live-{i}");
        litejob_ok(&db.path, &["enqueue", "live", "--key", &key], 0);
        litejob_ok(&db.path, &["jobs", "--limit", "5"], 0);
    }
    json_of(&db, &["stats"], 0);
    wait_until("every job succeeded", LONG, || {
        db.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 10
    });
    let v = json_of(&db, &["prune", "--older-than", "0s"], 0);
    assert_eq!(v["jobs"], 10, "{v}");
    rt.stop();
}
