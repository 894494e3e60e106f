//! The reading commands (and `verify`, `backup`) on a queue file the user
//! may only read, in a directory the user may not write: they work,
//! whether or not a process has the file open, and no command (a failing
//! one included) leaves a `-wal` or `-shm` file behind.
//!
//! The commands run as a user without write permission: as `nobody`
//! through `setpriv` when the tests run as root (root may write anything),
//! as the tests' own user otherwise.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::run_jobs;
use crate::backends::{Engine, TestQueue};
use crate::serve::Server;
use crate::support::{bin, show};

/// How the reading user's commands are started: through `setpriv` (the
/// tests run as root), or directly.
struct Reader {
    prefix: Vec<&'static str>,
}

impl Reader {
    /// The reader: this process's own user when file permissions stop
    /// it, else `nobody` through `setpriv` (the tests run as root).
    fn new() -> Reader {
        if crate::suite::permissions_apply() {
            return Reader { prefix: Vec::new() };
        }
        crate::suite::Need::Unprivileged.require();
        Reader {
            prefix: vec![
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
            ],
        }
    }

    /// The command line `litejob --db <db> <args>` as the reader.
    fn command(&self, db: &Path, args: &[&str]) -> Command {
        let mut cmd = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.arg("--db")
            .arg(db)
            .args(args)
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT");
        cmd
    }

    fn run(&self, db: &Path, args: &[&str]) -> Output {
        self.command(db, args).output().expect("run litejob")
    }

    /// Runs `args`, asserts `status`, returns stdout.
    fn ok(&self, db: &Path, args: &[&str], status: i32) -> String {
        let out = self.run(db, args);
        assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, db: &Path, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.ok(db, &all, 0);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: {e}\n{out}"))
    }
}

/// The names in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A file with a finished job (its attempt and ledger row) and a queued
/// one, closed (no `-wal`, no `-shm`), read-only, in its own directory.
fn read_only_file() -> (TestQueue, std::path::PathBuf) {
    let q = TestQueue::new(Engine::Sqlite);
    super::init(&q);
    super::ok(&q, &["enqueue", "k", "--key", "done"], 0);
    run_jobs(&q, "k");
    super::ok(
        &q,
        &["enqueue", "later", "--key", "queued", "--queue", "mail"],
        0,
    );
    let db = std::path::PathBuf::from(&q.location);
    let dir = db.parent().unwrap().to_path_buf();
    assert_eq!(files(&dir), ["test.db"], "the file is not closed");
    chmod(&db, 0o444);
    (q, dir)
}

it! {
    /// Every reading command, `serve` included, works on a closed file in a
    /// directory the user may not write; nothing is created beside it; a
    /// command that fails (a write, a missing id) leaves nothing behind
    /// either.
    #[needs(Unprivileged)]
    fn reading_commands_work_on_a_file_the_user_may_only_read() {
        let (q, dir) = read_only_file();
        let db = Path::new(&q.location);
        let reader = Reader::new();
        chmod(&dir, 0o555);
        let bytes = std::fs::read(db).unwrap();
        let v = reader.json(db, &["stats"]);
        assert_eq!(v["jobs"]["total"], 2, "{v}");
        let v = reader.json(db, &["jobs"]);
        assert_eq!(v["jobs"].as_array().unwrap().len(), 2, "{v}");
        let v = reader.json(db, &["explain", "done"]);
        assert!(v["ledger"].is_object(), "{v}");
        let id = v["job"]["id"].to_string();
        assert_eq!(reader.json(db, &["show", &id])["job"]["state"], "succeeded");
        reader.json(db, &["outbox"]);
        reader.json(db, &["schedules"]);
        let v = reader.json(db, &["queues"]);
        assert_eq!(v["queues"].as_array().unwrap().len(), 2, "{v}");
        for args in [vec!["stats"], vec!["jobs"], vec!["explain", "done"]] {
            reader.ok(db, &args, 0);
        }
        // verify, and a backup into a directory the reader may write.
        let v = reader.json(db, &["verify"]);
        assert_eq!(v["broken"], serde_json::json!([]), "{v}");
        let backups = tempfile::tempdir().unwrap();
        chmod(backups.path(), 0o777);
        let backup = backups.path().join("b.db");
        reader.ok(db, &["backup", backup.to_str().unwrap()], 0);
        assert_eq!(files(backups.path()), ["b.db"]);
        assert!(
            std::fs::read(db).unwrap() == bytes,
            "a read changed the file"
        );
        {
            let server = Server::spawn(reader.command(db, &["serve", "--bind", "127.0.0.1:0"]));
            for page in ["/healthz", "/", "/jobs", "/metrics", "/keys/done"] {
                let r = server.get(page);
                assert_eq!(r.status, 200, "{page}: {}", r.body);
            }
            assert!(
                std::fs::read(db).unwrap() == bytes,
                "a read changed the file"
            );
            {
                let server = Server::spawn(reader.command(db, &["serve", "--bind", "127.0.0.1:0"]));
                for page in ["/healthz", "/", "/jobs", "/metrics", "/keys/done"] {
                    let r = server.get(page);
                    assert_eq!(r.status, 200, "{page}: {}", r.body);
                }
                // A process that writes and closes the file meanwhile (no -wal
                // left): the next page shows its job.
                let r = server.get("/keys/later-on");
                assert!(r.body.contains("no job has this key"), "{}", r.body);
                chmod(db, 0o644);
                super::ok(&q, &["enqueue", "k", "--key", "later-on"], 0);
                chmod(db, 0o444);
                assert_eq!(files(&dir), ["test.db"]);
                let r = server.get("/keys/later-on");
                assert_eq!(r.status, 200, "{}", r.body);
                assert!(!r.body.contains("no job has this key"), "{}", r.body);
            }
            // Failing commands: a write, and a read of a missing row.
            let out = reader.run(db, &["enqueue", "k", "--key", "new"]);
            assert_eq!(out.status.code(), Some(1), "{}", show(&["enqueue"], &out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("read-only"),
                "{}",
                show(&["enqueue"], &out)
            );
            reader.ok(db, &["show", "999"], 1);
            assert_eq!(
                files(&dir),
                ["test.db"],
                "a command left files beside the queue"
            );

            // In a directory the user may write, a read creates nothing either,
            // and a refused write leaves nothing behind.
            chmod(&dir, 0o777);
            reader.json(db, &["stats"]);
            reader.ok(db, &["enqueue", "k", "--key", "new"], 1);
            reader.ok(db, &["queue", "pause", "mail"], 1);
            assert_eq!(
                files(&dir),
                ["test.db"],
                "a command left files beside the queue"
            );
            chmod(&dir, 0o755);
            assert_eq!(q.count("SELECT count(*) FROM jobs"), 3);
        }
    }
}

it! {
    /// While a process has the file open (its `-wal` and `-shm` files exist,
    /// the reader may not write them, and a commit sits in the WAL only), the
    /// reading commands see that commit; and once it closed the file, they
    /// read the file alone again.
    #[needs(Unprivileged)]
    fn reading_commands_see_what_a_running_process_committed() {
        let (q, dir) = read_only_file();
        let db = Path::new(&q.location);
        let reader = Reader::new();
        chmod(db, 0o644);
        let queue = q.open();
        queue
            .enqueue(litejob::NewJob::new("k", "in-the-wal", &1))
            .unwrap();
        chmod(&dir, 0o555);
        assert!(dir.join("test.db-wal").exists() && dir.join("test.db-shm").exists());
        let v = reader.json(db, &["explain", "in-the-wal"]);
        assert_eq!(v["job"]["state"], "queued", "{v}");
        assert_eq!(reader.json(db, &["stats"])["jobs"]["total"], 3);
        drop(queue);
        assert_eq!(
            files(&dir),
            ["test.db"],
            "the process did not close the file"
        );
        assert_eq!(reader.json(db, &["stats"])["jobs"]["total"], 3);
        chmod(&dir, 0o755);
    }
}

it! {
    /// A closed file is read through a `file:` URI: a name with the URI's own
    /// characters in it (`?`, `#`, `%`, a space) still names that file.
    fn a_closed_file_with_uri_characters_in_its_name_reads() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a ?b#c%20d.db");
        crate::support::litejob_ok(&db, &["enqueue", "k", "--key", "odd"], 0);
        assert_eq!(files(dir.path()), ["a ?b#c%20d.db"]);
        let out = crate::support::litejob_ok(&db, &["explain", "odd", "--json"], 0);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["job"]["state"], "queued", "{v}");
        assert_eq!(files(dir.path()), ["a ?b#c%20d.db"]);
    }
}
