//! Bad files: a newer schema, not a database, flipped bytes, read-only file
//! and directory. Each is refused or reported with a typed error, never a
//! panic; a refused file is left untouched.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use litejob::{Error, NewJob, Queue};

use super::harness::{tail, wait_timeout};
use crate::support::{Rng, TestDb};

/// Opens `db` in a child process that runs a few operations on it; the
/// child must exit normally, without a panic. Returns its stdout.
fn probe(db: &Path) -> String {
    let dir = db.parent().unwrap();
    let out = dir.join("probe.out");
    let err = dir.join("probe.err");
    let mut c = super::harness::child_args(&mut Command::new(super::harness::self_exe()))
        .env("LITEJOB_CHILD_DB", db)
        .env("LITEJOB_CHILD_MODE", "probe")
        .env("RUST_LOG", "litejob=warn")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let st = wait_timeout(&mut c, Duration::from_secs(60)).unwrap_or_else(|| {
        let _ = c.kill();
        panic!("probe of {} stuck (a crash loop?)", db.display())
    });
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        st.success() && stdout.contains("probe done") && !stderr.contains("panicked"),
        "probe of {} failed ({st:?}):\nstdout:\n{}\nstderr:\n{}",
        db.display(),
        tail(&stdout),
        tail(&stderr)
    );
    stdout
}

it! {
    fn newer_schema_is_refused_untouched() {
        let db = TestDb::new();
        {
            let c = rusqlite::Connection::open(&db.path).unwrap();
            c.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 99;")
                .unwrap();
        }
        let before = std::fs::read(&db.path).unwrap();
        match Queue::open(&db.path) {
            Err(Error::SchemaTooNew { found: 99, .. }) => {}
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        assert_eq!(std::fs::read(&db.path).unwrap(), before, "bytes untouched");
        let out = probe(&db.path);
        assert!(out.contains("open refused: SchemaTooNew"), "{out}");
        assert_eq!(std::fs::read(&db.path).unwrap(), before, "bytes untouched");
    }
}

it! {
    fn not_a_database_is_refused_untouched() {
        let db = TestDb::new();
        let junk: Vec<u8> = b"this is a text file, not a database\n"
            .iter()
            .copied()
            .cycle()
            .take(10_000)
            .collect();
        std::fs::write(&db.path, &junk).unwrap();
        let e = Queue::open(&db.path).expect_err("not a database");
        assert!(matches!(e, Error::NotADatabase(_)), "{e:?}");
        assert!(
            e.to_string().contains(&db.path.display().to_string()),
            "{e}"
        );
        assert_eq!(std::fs::read(&db.path).unwrap(), junk, "bytes untouched");
        probe(&db.path);
    }
}

it! {
    /// A database with random bytes flipped in its middle pages: opening it and
    /// using it gives typed errors (or works), never a panic or a crash loop.
    fn flipped_bytes_never_panic() {
        let mut rng = Rng::seeded();
        let src = TestDb::new();
        {
            let q = src.open();
            super::harness::create_app_table(&q);
            super::harness::enqueue_n(&q, "work", "f", 0, 300);
            let big = "y".repeat(3000);
            for i in 0..30 {
                q.enqueue(NewJob::new("work", format!("big-{i}"), &big))
                    .unwrap();
            }
        }
        src.sql()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        let pristine = std::fs::read(&src.path).unwrap();
        let page = 4096;
        let pages = pristine.len() / page;
        assert!(pages > 10, "{pages} pages");
        let mut outcomes = Vec::new();
        for round in 0..6 {
            let db = TestDb::new();
            let mut bytes = pristine.clone();
            let flips = 1 + rng.below(40) as usize;
            for _ in 0..flips {
                // Middle pages only: page 1 holds the header and the schema.
                let p = 1 + rng.below(pages as u64 - 2) as usize;
                let off = p * page + rng.below(page as u64) as usize;
                bytes[off] ^= 1 << rng.below(8);
            }
            std::fs::write(&db.path, &bytes).unwrap();
            let out = probe(&db.path);
            let summary: Vec<&str> = out
                .lines()
                .filter(|l| l.contains("open") || l.contains("enqueue") || l.contains("jobs"))
                .collect();
            outcomes.push(format!(
                "round {round} ({flips} flips): {}",
                summary.join(" | ")
            ));
        }
        eprintln!("flipped bytes:\n{}", outcomes.join("\n"));
    }
}

/// Makes a path immutable (`chattr +i`: even root cannot write it) and
/// undoes it on drop.
struct Immutable(PathBuf);

impl Immutable {
    fn set(p: &Path) -> Immutable {
        crate::suite::Need::Immutable.require();
        let st = Command::new("chattr").arg("+i").arg(p).status().unwrap();
        assert!(st.success(), "chattr +i {}: {st}", p.display());
        Immutable(p.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

it! {
    #[needs(Immutable)]
    fn read_only_file_gives_a_clear_error_naming_the_path() {
        let db = TestDb::new();
        drop(db.open());
        let before = std::fs::read(&db.path).unwrap();
        let _guard = Immutable::set(&db.path);
        let name = db.path.display().to_string();
        // Regression: SQLite fell back to read-only silently and the first
        // enqueue failed with a bare "attempt to write a readonly database".
        let e = Queue::open(&db.path).expect_err("a read-only file is refused at open");
        assert!(
            e.to_string().contains(&name) && e.to_string().contains("read-only"),
            "the error names the path and the cause: {e}"
        );
        drop(_guard);
        assert_eq!(std::fs::read(&db.path).unwrap(), before);
    }
}

it! {
    #[needs(Immutable)]
    fn read_only_directory_gives_a_clear_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ro");
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("new.db");
        let _guard = Immutable::set(&sub);
        let e = Queue::open(&path).expect_err("cannot create a file in a read-only directory");
        assert!(
            e.to_string().contains(&path.display().to_string()),
            "the error names the path: {e}"
        );
        assert!(!path.exists());
        drop(_guard);
        // An existing queue in a directory that became read-only: WAL needs
        // its -wal and -shm files next to it.
        drop(Queue::open(&path).unwrap());
        let _guard = Immutable::set(&sub);
        match Queue::open(&path) {
            Err(e) => assert!(e.to_string().contains(&path.display().to_string()), "{e}"),
            Ok(q) => {
                let r = q.enqueue(NewJob::new("k", "ro-dir", &1));
                eprintln!("read-only directory, existing file: open ok, enqueue {r:?}");
                if let Err(e) = r {
                    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
                }
            }
        }
    }
}

it! {
    /// An enqueue whose commit failed with an I/O error reports "outcome
    /// unknown", and retrying with the same key is always safe. The WAL
    /// file is made immutable under the open queue, so the commit's write
    /// fails with an I/O error; the error must say the outcome is unknown and
    /// that retrying with the same key is safe — and, once the disk is back, the
    /// retry with the same key must leave exactly one job.
    #[needs(Immutable)]
    fn an_io_error_at_commit_is_outcome_unknown_and_a_retry_is_safe() {
        let db = TestDb::new();
        let q = db.open();
        q.enqueue(NewJob::new("warm", "warm:1", &1)).unwrap();
        let wal = PathBuf::from(format!("{}-wal", db.path.display()));
        assert!(wal.exists(), "WAL mode leaves a -wal file while open");
        let err = {
            let _guard = Immutable::set(&wal);
            q.enqueue(NewJob::new("pay", "evt:io", &1))
                .expect_err("a commit whose WAL write fails must not report success")
        };
        eprintln!("commit error: {err}");
        assert!(err.is_outcome_unknown(), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("retrying with the same key is safe"), "{msg}");
        // The disk is back: retrying with the same key is safe and leaves one job.
        let again = q.enqueue(NewJob::new("pay", "evt:io", &1));
        if let Err(e) = again {
            // The connection may need a fresh open after the failed write.
            eprintln!("retry on the same queue failed ({e}); reopening");
            drop(q);
            db.open().enqueue(NewJob::new("pay", "evt:io", &1)).unwrap();
        }
        assert_eq!(
            db.count("SELECT count(*) FROM jobs WHERE idempotency_key = 'evt:io'"),
            1
        );
        let check: String = db
            .sql()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "the file is intact");
    }
}
