//! The command in a hostile world: a broken pipe exits quietly, a newer
//! schema is refused with both versions and a file left byte for byte as
//! it was (on both backends: `backends::faults`), and every command works
//! while workers run on the same queue.

use crate::backends::Runtimes;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use litejob::{NewJob, Outcome};
use serde_json::Value;

use super::{init, json_of, ok, stderr_of};
use crate::backends::handler;
use crate::both;
use crate::support::{bin, wait_until, TestDb, LONG};

both! {
    /// The reader closes the pipe after one byte (like `head -c1`): exit 0,
    /// nothing on stderr, as text and as JSON.
    fn a_broken_pipe_exits_quietly(q) {
        let queue = q.open();
        let jobs: Vec<NewJob> = (0..3000)
            .map(|i| NewJob::new("k", format!("pipe-key-with-some-length-{i:06}"), &i))
            .collect();
        queue.enqueue_many(jobs).unwrap();
        drop(queue);
        for args in [
            vec!["jobs", "--limit", "3000"],
            vec!["jobs", "--limit", "3000", "--json"],
        ] {
            let mut child = Command::new(bin())
                .arg("--db")
                .arg(&q.location)
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
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
}

it! {
    fn a_newer_schema_is_refused_with_both_versions_and_the_file_left_unchanged() {
        let db = TestDb::new();
        ok(&db, &["init"], 0);
        ok(&db, &["enqueue", "k", "--key", "v"], 0);
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
            let known = format!("version {}", litejob::admin::SCHEMA_VERSION);
            assert!(e.contains("99") && e.contains(&known), "{args:?}: {e}");
        }
        assert_eq!(std::fs::read(&db.path).unwrap(), before, "the file changed");
    }
}

both! {
    /// enqueue, jobs, stats and prune beside a runtime working the jobs.
    fn the_command_works_while_workers_run_on_the_same_queue(q) {
        init(q);
        let queue = q.open();
        let b = queue.runtime().poll_interval(Duration::from_millis(10));
        let mut rt = handler(b, "live", |_, _: Value| Ok(Outcome::Done))
            .start()
            .unwrap();
        for i in 0..10 {
            let key = format!("live-{i}");
            ok(q, &["enqueue", "live", "--key", &key], 0);
            ok(q, &["jobs", "--limit", "5"], 0);
        }
        json_of(q, &["stats"], 0);
        wait_until("every job succeeded", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 10
        });
        let v = json_of(q, &["prune", "--older-than", "0s"], 0);
        assert_eq!(v["jobs"], 10, "{v}");
        rt.stop();
    }
}
