//! A real `litestream replicate` follows a file while the demo runs on it;
//! once the demo is done and Litestream has made its last sync (it syncs
//! once more when it stops on SIGTERM), `litestream restore` gives back a
//! file with every row the demo committed, which verifies.
//!
//! Litestream is the binary `$LITESTREAM` names, else `litestream` on the
//! PATH (`.ci/run` installs v0.3.13 from npm's
//! `@flydotio/litestream-linux-x64`). Missing, the test fails under `CI`
//! and says it did not run elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{assert_verifies, json, DemoRows};
use crate::support::show;

/// The `litestream` binary to run (the test declares the need).
fn litestream() -> PathBuf {
    crate::suite::Need::Litestream.require();
    PathBuf::from(crate::suite::litestream_name())
}

/// `litestream replicate` with a config file naming `db` and a file
/// replica in `replica`, as docs/operating.md sets it up.
fn replicate(bin: &Path, dir: &Path, db: &Path, replica: &Path) -> Child {
    let config = dir.join("litestream.yml");
    std::fs::write(
        &config,
        format!(
            "dbs:\n  - path: {}\n    replicas:\n      - type: file\n        path: {}\n",
            db.display(),
            replica.display()
        ),
    )
    .unwrap();
    Command::new(bin)
        .arg("replicate")
        .arg("-config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start litestream replicate")
}

/// Stops Litestream with SIGTERM (its last sync runs then) and waits for
/// it; returns its log.
fn stop(mut child: Child) -> String {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("litestream did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Lines of `sql` over a file, for comparing two files row for row.
fn lines(file: &Path, sql: &str) -> Vec<String> {
    let c = rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let mut st = c.prepare(sql).unwrap();
    let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| r.unwrap()).collect()
}

it! {
    #[needs(Litestream)]
    fn a_litestream_restore_holds_all_of_the_demos_work_and_verifies() {
        let bin = litestream();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.db");
        let replica = dir.path().join("replica");
        super::run(&db, &["init"], 0);
        let ls = replicate(&bin, dir.path(), &db, &replica);

        let events = 3000;
        let summary = json(&db, &["demo", "--events", &events.to_string()], 0);
        assert_eq!(summary["invoices"], events, "{summary}");
        assert_eq!(summary["receipts_sent"], events, "{summary}");
        let log = stop(ls);
        assert!(
            !log.contains("ERROR"),
            "litestream reported an error:\n{log}"
        );
        // One generation: nothing litejob did made Litestream lose its place
        // in the WAL and start over from a snapshot.
        let generations = std::fs::read_dir(replica.join("generations"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(generations, 1, "litestream's log:\n{log}");

        let restored = dir.path().join("restored.db");
        let out = Command::new(&bin)
            .arg("restore")
            .arg("-o")
            .arg(&restored)
            .arg(format!("file://{}", replica.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            show(&["(litestream) restore"], &out)
        );
        let got = DemoRows::of(&restored);
        got.assert_one_moment("the restored file");
        assert_eq!(got, DemoRows::of(&db), "the restored file holds every row");
        assert_eq!((got.succeeded, got.invoices), (events, events));
        for sql in [
            "SELECT CAST(id AS TEXT) || ' ' || idempotency_key || ' ' || state || ' ' || \
             CAST(deliveries AS TEXT) FROM jobs ORDER BY id",
            "SELECT key || ' ' || CAST(job_id AS TEXT) FROM processed_jobs ORDER BY key",
            "SELECT provider_event_id || ' ' || CAST(amount_cents AS TEXT) FROM invoices ORDER BY id",
            "SELECT key || ' ' || state FROM outbox ORDER BY id",
        ] {
            assert_eq!(lines(&restored, sql), lines(&db, sql), "{sql}");
        }
        assert_verifies(&restored);
    }
}
