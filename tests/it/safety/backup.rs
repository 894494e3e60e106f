//! `litejob backup`: backups of a file while the demo runs on it are each
//! one moment of it and verify; an existing destination is refused
//! untouched unless `--force`; bad input (a PostgreSQL `--db`, a missing
//! directory) writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{assert_verifies, json, run, DemoRows};
use crate::backends::{Engine, TestQueue};
use crate::support::{bin, show, wait_until};

/// The ledger rows of the file, read as an operator would, or 0 while the
/// demo has not created its tables yet.
fn ledger_rows(db: &Path) -> i64 {
    let Ok(c) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    c.query_row("SELECT count(*) FROM processed_jobs", [], |r| r.get(0))
        .unwrap_or(0)
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

it! {
    fn three_backups_taken_while_the_demo_runs_are_each_one_moment_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.db");
        let backups_dir = tempfile::tempdir().unwrap();
        let events = 3000;
        let demo = Command::new(bin())
            .arg("--db")
            .arg(&db)
            .args(["--json", "demo", "--events", &events.to_string()])
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut taken: Vec<(PathBuf, DemoRows)> = Vec::new();
        for (i, at) in [events / 10, events * 4 / 10, events * 7 / 10]
            .into_iter()
            .enumerate()
        {
            wait_until(
                &format!("the demo has run {at} jobs"),
                Duration::from_secs(120),
                || ledger_rows(&db) >= at,
            );
            let dest = backups_dir.path().join(format!("backup-{i}.db"));
            let v = json(&db, &["backup", dest.to_str().unwrap()], 0);
            assert_eq!(v["dest"], dest.to_str().unwrap(), "{v}");
            assert!(v["bytes"].as_u64().unwrap() > 0, "{v}");
            taken.push((dest.clone(), DemoRows::of(&dest)));
        }
        let out = demo.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&["demo"], &out));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["invoices"], events, "{summary}");
        assert_eq!(summary["receipts_sent"], events, "{summary}");
        let done = DemoRows::of(&db);
        done.assert_one_moment("the finished demo");
        assert_eq!((done.jobs, done.succeeded), (events, events));

        // The first backup lands mid-run: the demo takes far longer than a
        // tenth of its jobs.
        assert!(
            taken[0].1.succeeded < events,
            "the first backup was taken after the demo finished: {:?}",
            taken[0].1
        );
        let mut last = 0;
        for (dest, rows) in &taken {
            rows.assert_one_moment(&dest.display().to_string());
            assert!(rows.succeeded >= last, "{rows:?}");
            last = rows.succeeded;
            assert_verifies(dest);
        }
        // (The -wal and -shm beside each are the reads' above.)
        let left: Vec<String> = names(backups_dir.path())
            .into_iter()
            .filter(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
            .collect();
        assert_eq!(
            left,
            ["backup-0.db", "backup-1.db", "backup-2.db"],
            "no temporary file left beside the backups"
        );
    }
}

it! {
    fn backup_refuses_an_existing_destination_untouched_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.db");
        run(&db, &["enqueue", "k", "--key", "one"], 0);
        let dest = dir.path().join("backup.db");
        std::fs::write(&dest, b"yesterday's backup").unwrap();
        let before = names(dir.path());
        let out = crate::support::litejob(&db, &["backup", dest.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", show(&["backup"], &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("already exists") && err.contains("--force"),
            "{err}"
        );
        assert_eq!(std::fs::read(&dest).unwrap(), b"yesterday's backup");
        assert_eq!(names(dir.path()), before, "nothing written beside it");

        let v = json(&db, &["backup", dest.to_str().unwrap(), "--force"], 0);
        assert_eq!(v["replaced"], true, "{v}");
        assert_verifies(&dest);
        let c = rusqlite::Connection::open(&dest).unwrap();
        let key: String = c
            .query_row("SELECT idempotency_key FROM jobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(key, "one");

        // Bad input: a directory that does not exist, a directory as DEST.
        let missing = dir.path().join("no-such-dir").join("b.db");
        run(&db, &["backup", missing.to_str().unwrap()], 2);
        run(&db, &["backup", dir.path().to_str().unwrap()], 2);
        assert!(!dir.path().join("no-such-dir").exists());
        // A missing queue file is not created by a backup of it.
        let nothing = dir.path().join("nothing.db");
        let other = dir.path().join("other.db");
        run(&nothing, &["backup", other.to_str().unwrap()], 1);
        assert!(!nothing.exists() && !other.exists());
    }
}

it! {
    #[needs(Postgres)]
    fn backup_of_a_postgres_database_is_refused_and_points_to_pg_dump_and_copy() {
        let q = TestQueue::new(Engine::Postgres);
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("b.db");
        let out = crate::support::litejob(Path::new(&q.location), &["backup", dest.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", show(&["backup"], &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("pg_dump") && err.contains("copy --to FILE"),
            "{err}"
        );
        assert!(!dest.exists());
        assert!(!q.created(), "nothing was created in the database");
    }
}
