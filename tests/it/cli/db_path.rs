//! Which queue the command opens: `--db`, else `LITEJOB_DB` (a file or a
//! PostgreSQL URL, on both backends), else the file `litejob.db` in the
//! current directory.

use std::process::Command;

use crate::both;
use crate::support::{bin, show, TestDb};

both! {
    /// `LITEJOB_DB` names the queue (a file or a PostgreSQL URL) when
    /// `--db` is not given; `--db` wins over it; neither makes a
    /// `./litejob.db`.
    fn litejob_db_names_the_queue_when_db_is_not_given(q) {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            Command::new(bin())
                .args(args)
                .env("LITEJOB_DB", &q.location)
                .current_dir(dir.path())
                .output()
                .unwrap()
        };
        let out = run(&["enqueue", "k", "--key", "env"]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE idempotency_key = 'env'"), 1);
        // --db wins over the environment.
        let other = dir.path().join("other.db");
        let out = run(&["--db", other.to_str().unwrap(), "enqueue", "k", "--key", "db"]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
        assert!(other.exists());
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert!(!dir.path().join("litejob.db").exists());
    }
}

it! {
    fn without_db_or_litejob_db_the_file_is_litejob_db_in_the_current_directory() {
        let db = TestDb::new();
        for env in [None, Some("")] {
            let mut cmd = Command::new(bin());
            cmd.args(["enqueue", "k", "--key", "here"])
                .current_dir(db.dir.path());
            match env {
                Some(v) => cmd.env("LITEJOB_DB", v),
                None => cmd.env_remove("LITEJOB_DB"),
            };
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", show(&["enqueue"], &out));
        }
        let here = db.dir.path().join("litejob.db");
        let c = rusqlite::Connection::open(&here).unwrap();
        let deliveries: i64 = c
            .query_row(
                "SELECT deliveries FROM jobs WHERE idempotency_key = 'here'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(deliveries, 2, "both runs wrote ./litejob.db");
    }
}
