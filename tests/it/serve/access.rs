//! Who may ask and who may act: a non-loopback bind needs a token, and
//! every request then carries it (a bearer header or the login cookie);
//! actions need `--allow-actions` and the form's CSRF token, and without
//! them nothing is written; by default the queue is opened read-only: a
//! file stays byte for byte the same, a database's tables row for row,
//! and a write through the read-only queue is refused before it is sent.

use crate::backends::Runtimes;
use std::path::Path;

use litejob::admin::{AnyQueue, QueueLimits};
use litejob::{Error, NewJob, Queue, QueueOptions};

use super::{between, Server};
use crate::backends::{Engine, TestQueue};
use crate::both;
use crate::support::{litejob, litejob_ok, show, TestDb};

it! {
    fn a_non_loopback_bind_without_a_token_is_refused_with_exit_2() {
        let db = TestDb::new();
        db.open();
        for (args, says) in [
            (vec!["serve", "--bind", "0.0.0.0:0"], "--token"),
            (
                vec!["serve", "--bind", "0.0.0.0:0", "--token", "two words"],
                "printable ASCII",
            ),
            (vec!["serve", "--bind", "nowhere"], "invalid"),
        ] {
            let out = litejob(&db.path, &args);
            assert_eq!(out.status.code(), Some(2), "{}", show(&args, &out));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(says),
                "{}",
                show(&args, &out)
            );
            assert!(out.stdout.is_empty(), "{}", show(&args, &out));
        }
        let missing = db.dir.path().join("typo.db");
        let out = litejob(&missing, &["serve", "--bind", "127.0.0.1:0"]);
        assert_eq!(out.status.code(), Some(1), "{}", show(&["serve"], &out));
        assert!(!missing.exists(), "serve never creates a file");
    }
}

both! {
    fn with_a_token_every_request_needs_it(q) {
        q.open().enqueue(NewJob::new("k", "t", &1)).unwrap();
        let s = Server::on(&q.location, &["--token", "s3cret-T"]);
        for path in ["/", "/jobs", "/jobs/1", "/metrics", "/healthz", "/failures", "/schedules"] {
            assert_eq!(s.get(path).status, 401, "{path}");
            let wrong = s.request("GET", path, &[("Authorization", "Bearer nope")], "");
            assert_eq!(wrong.status, 401, "{path}");
            let right = s.request("GET", path, &[("Authorization", "Bearer s3cret-T")], "");
            assert_eq!(right.status, 200, "{path}");
        }
        assert_eq!(s.get("/login?token=nope").status, 403);
        let login = s.get("/login?token=s3cret-T");
        assert_eq!(login.status, 303);
        let cookie = login.header("Set-Cookie").unwrap().to_string();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        let pair = cookie.split(';').next().unwrap();
        assert_eq!(s.request("GET", "/", &[("Cookie", pair)], "").status, 200);
        assert_eq!(
            s.request("GET", "/", &[("Cookie", "litejob_token=nope")], "")
                .status,
            401
        );
    }
}

/// The CSRF token in a page's first action form.
fn csrf(page: &str) -> String {
    between(page, "name=\"csrf\" value=\"", "\"").to_string()
}

both! {
    fn an_action_without_the_forms_csrf_token_is_refused_and_writes_nothing(q) {
        let queue = q.open();
        let dead = queue.enqueue(NewJob::new("k", "dead", &1)).unwrap().id();
        let queued = queue.enqueue(NewJob::new("k", "queued", &1)).unwrap().id();
        drop(queue);
        q.exec(&format!(
            "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id = {dead};
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, created_at)
             VALUES ('o1', 'mail', '{{}}', 'dead', 2, {dead}, 0, 1);"
        ));
        let s = Server::on(&q.location, &["--allow-actions"]);
        let page = s.get(&format!("/jobs/{dead}")).ok();
        let token = csrf(&page);
        assert_eq!(token.len(), 32);
        let state = |id: i64| -> String {
            q.strings(&format!("SELECT state FROM jobs WHERE id = {id}")).remove(0)
        };
        let outbox_state = || -> String {
            q.strings("SELECT state FROM outbox WHERE key = 'o1'").remove(0)
        };
        let outbox_id = q.count("SELECT id FROM outbox WHERE key = 'o1'");
        for body in [
            "",
            "csrf=",
            "csrf=0123456789abcdef0123456789abcdef",
            "back=/",
        ] {
            for path in [
                format!("/jobs/{dead}/retry"),
                format!("/jobs/{queued}/cancel"),
                format!("/outbox/{outbox_id}/retry"),
            ] {
                let r = s.request("POST", &path, &[], body);
                assert_eq!(r.status, 403, "{path} {body}: {}", r.body);
            }
        }
        // A GET of an action's path changes nothing either.
        assert_eq!(s.get(&format!("/jobs/{dead}/retry")).status, 405);
        assert_eq!(
            (state(dead), state(queued), outbox_state()),
            ("dead".into(), "queued".into(), "dead".into())
        );

        let form = |back: &str| format!("csrf={token}&back={back}");
        let r = s.request(
            "POST",
            &format!("/jobs/{dead}/retry"),
            &[],
            &form(&format!("/jobs/{dead}")),
        );
        assert_eq!(r.status, 303, "{}", r.body);
        assert_eq!(
            r.header("Location").unwrap(),
            format!("/jobs/{dead}?done=retried")
        );
        assert_eq!(state(dead), "queued");
        let r = s.request(
            "POST",
            &format!("/jobs/{queued}/cancel"),
            &[],
            &form("//evil.example/"),
        );
        assert_eq!(r.status, 303);
        assert_eq!(
            r.header("Location").unwrap(),
            "/?done=cancelled",
            "never a redirect elsewhere"
        );
        assert_eq!(state(queued), "cancelled");
        assert_eq!(
            s.request("POST", &format!("/outbox/{outbox_id}/retry"), &[], &form("/outbox"))
                .status,
            303
        );
        assert_eq!(outbox_state(), "pending");
        // A refusal by the row's state is a conflict, and says why.
        let r = s.request("POST", &format!("/jobs/{queued}/cancel"), &[], &form("/"));
        assert_eq!(r.status, 409);
        assert!(
            r.body.contains("only a job that has not finished (waiting, queued or running) can be cancelled"),
            "{}",
            r.body
        );
        assert_eq!(
            s.request("POST", "/jobs/999/retry", &[], &form("/")).status,
            404
        );
    }
}

/// The paused queues, by name, as `litejob queues --json` lists them.
fn paused(q: &TestQueue) -> Vec<String> {
    let out = litejob_ok(Path::new(&q.location), &["queues", "--json"], 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["paused"] == true)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The overview's row of queue `name` (found by its escaped name).
fn queue_row<'a>(page: &'a str, name: &str) -> &'a str {
    let escaped = name
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    between(page, &format!("<tr data-queue=\"{escaped}\">"), "</tr>")
}

both! {
    /// With actions allowed the overview's buttons pause and resume a
    /// queue (one with only a controls row too, whatever its name holds),
    /// and say so; an empty name is 400, an unknown action 404.
    fn a_queue_is_paused_and_resumed_with_the_overviews_buttons(q) {
        let odd = "mail/eu <b>&\"x\"";
        let queue = q.open();
        for name in ["default", "mail", odd] {
            queue
                .enqueue(NewJob::new("k", format!("j-{name}"), &1).with_queue(name))
                .unwrap();
        }
        // A queue with a control and no job yet has a row, and a button.
        queue.admin().set_queue_limits("api", QueueLimits::new().concurrency(2))
            .unwrap();
        drop(queue);
        let s = Server::on(&q.location, &["--allow-actions"]);
        let page = s.get("/").ok();
        let token = csrf(&page);
        for name in ["api", "default", "mail"] {
            let row = queue_row(&page, name);
            assert!(
                row.contains(&format!("action=\"/queues/{name}/pause\""))
                    && row.contains(">Pause</button>")
                    && !row.contains("Resume"),
                "{row}"
            );
        }
        // The odd name is escaped on the page and percent-encoded in its
        // form's path.
        let encoded = "mail%2Feu%20%3Cb%3E%26%22x%22";
        assert!(
            queue_row(&page, odd).contains(&format!("action=\"/queues/{encoded}/pause\"")),
            "{}",
            queue_row(&page, odd)
        );
        assert!(!page.contains("<b>"), "{page}");

        let form = format!("csrf={token}&back=/");
        let r = s.request("POST", "/queues/mail/pause", &[], &form);
        assert_eq!(r.status, 303, "{}", r.body);
        assert_eq!(r.header("Location").unwrap(), "/?done=paused");
        assert_eq!(paused(q), ["mail"]);
        let page = s.get("/?done=paused").ok();
        assert!(between(&page, "id=\"flash\">", "</p>").starts_with("Paused"), "{page}");
        let row = queue_row(&page, "mail");
        assert!(
            row.contains("action=\"/queues/mail/resume\"")
                && row.contains(">Resume</button>")
                && !row.contains("Pause<"),
            "{row}"
        );
        assert!(queue_row(&page, "default").contains(">Pause</button>"));

        let r = s.request("POST", &format!("/queues/{encoded}/pause"), &[], &form);
        assert_eq!(r.status, 303, "{}", r.body);
        assert_eq!(paused(q), ["mail", odd]);

        let r = s.request("POST", "/queues/mail/resume", &[], &form);
        assert_eq!(r.status, 303, "{}", r.body);
        assert_eq!(r.header("Location").unwrap(), "/?done=resumed");
        assert_eq!(paused(q), [odd]);
        let page = s.get("/?done=resumed").ok();
        assert!(between(&page, "id=\"flash\">", "</p>").starts_with("Resumed"), "{page}");
        let row = queue_row(&page, "mail");
        assert!(
            row.contains(">Pause</button>") && !row.contains("Resume"),
            "{row}"
        );
        // A resumed queue keeps its other controls.
        let r = s.request("POST", "/queues/api/pause", &[], &form);
        assert_eq!(r.status, 303, "{}", r.body);
        let r = s.request("POST", "/queues/api/resume", &[], &form);
        assert_eq!(r.status, 303, "{}", r.body);
        assert!(queue_row(&s.get("/").ok(), "api").contains("at most 2 running"));

        // An empty name, a blank one, an action no queue has.
        for (path, status) in [
            ("/queues//pause", 400),
            ("/queues/%20/resume", 400),
            ("/queues/mail/stop", 404),
        ] {
            let r = s.request("POST", path, &[], &form);
            assert_eq!(r.status, status, "{path}: {}", r.body);
        }
        assert_eq!(paused(q), [odd]);
    }
}

/// A queue `mail` with a job, and a queue `held` paused with none: its
/// `queues` rows, to show later that nothing changed.
fn mail_and_held(q: &TestQueue) -> Vec<String> {
    let queue = q.open();
    queue
        .enqueue(NewJob::new("k", "m1", &1).with_queue("mail"))
        .unwrap();
    queue.admin().pause_queue("held").unwrap();
    queue_rows(q)
}

/// Every row of `queues`, as text.
fn queue_rows(q: &TestQueue) -> Vec<String> {
    q.strings("SELECT name || ':' || CAST(updated_at AS TEXT) FROM queues")
}

both! {
    /// A POST with a missing, empty or foreign CSRF token pauses and
    /// resumes nothing (403), and a GET of an action's path is 405.
    fn pausing_or_resuming_a_queue_without_the_forms_csrf_token_is_refused_and_changes_nothing(q) {
        let before = mail_and_held(q);
        let s = Server::on(&q.location, &["--allow-actions"]);
        assert_eq!(csrf(&s.get("/").ok()).len(), 32);
        for body in [
            "",
            "csrf=",
            "csrf=0123456789abcdef0123456789abcdef",
            "back=/",
        ] {
            for path in ["/queues/mail/pause", "/queues/held/resume", "/queues//pause"] {
                let r = s.request("POST", path, &[], body);
                assert_eq!(r.status, 403, "{path} {body}: {}", r.body);
                assert!(r.body.contains("CSRF"), "{}", r.body);
            }
        }
        // A GET of an action's path changes nothing either.
        for path in ["/queues/mail/pause", "/queues/held/resume"] {
            assert_eq!(s.get(path).status, 405, "{path}");
        }
        assert_eq!(paused(q), ["held"]);
        assert_eq!(queue_rows(q), before);
    }
}

both! {
    /// A server started without `--allow-actions` shows no buttons and
    /// refuses every pause and resume (403), writing nothing.
    fn without_allow_actions_a_queue_is_neither_paused_nor_resumed(q) {
        let before = mail_and_held(q);
        let s = Server::on(&q.location, &[]);
        let page = s.get("/").ok();
        assert!(queue_row(&page, "held").contains("paused"), "{page}");
        assert!(
            !page.contains("<form") && !page.contains("Pause<") && !page.contains("Resume<"),
            "no buttons when actions are off: {page}"
        );
        for path in ["/queues/mail/pause", "/queues/held/resume"] {
            let r = s.request("POST", path, &[], "csrf=x&back=/");
            assert_eq!(r.status, 403, "{path}: {}", r.body);
            assert!(r.body.contains("--allow-actions"), "{}", r.body);
            assert_eq!(s.get(path).status, 405, "{path}");
        }
        drop(s);
        assert_eq!(paused(q), ["held"]);
        assert_eq!(queue_rows(q), before);
    }
}

/// The database file and its WAL, as bytes.
fn contents(db: &TestDb) -> (Vec<u8>, Vec<u8>) {
    let mut wal = db.path.clone().into_os_string();
    wal.push("-wal");
    (
        std::fs::read(&db.path).unwrap(),
        std::fs::read(wal).unwrap_or_default(),
    )
}

it! {
    fn by_default_the_file_is_opened_read_only_and_never_changes() {
        let db = TestDb::new();
        let q = db.open();
        let dead = q.enqueue(NewJob::new("k", "ro-dead", &1)).unwrap().id();
        q.enqueue(NewJob::new("k", "ro-queued", &1)).unwrap();
        drop(q);
        db.sql()
            .execute(
                "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id = ?1",
                [dead],
            )
            .unwrap();
        // Another process has the file open, as the application would: the
        // server's connections then stay open between requests (on a closed
        // file each read opens its own), so their descriptors can be looked at.
        let holder = db.sql();
        holder
            .query_row("SELECT count(*) FROM jobs", [], |_| Ok(()))
            .unwrap();
        let before = contents(&db);
        let s = Server::start(&db, &[]);
        for path in [
            "/",
            "/jobs",
            "/jobs/1",
            "/keys/ro-dead",
            "/failures",
            "/outbox",
            "/metrics",
            "/healthz",
        ] {
            s.get(path).ok();
        }
        // Every file the server has open on the database is open read-only.
        let fd_dir = format!("/proc/{}/fd", s.pid());
        let mut seen = 0;
        for fd in std::fs::read_dir(&fd_dir).unwrap() {
            let fd = fd.unwrap();
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if target != db.path.canonicalize().unwrap() {
                continue;
            }
            seen += 1;
            let info = std::fs::read_to_string(format!(
                "/proc/{}/fdinfo/{}",
                s.pid(),
                fd.file_name().to_string_lossy()
            ))
            .unwrap();
            let flags = u32::from_str_radix(between(&info, "flags:\t", "\n").trim(), 8).unwrap();
            assert_eq!(flags & 0o3, 0, "the database is open for writing: {info}");
        }
        assert!(seen > 0, "no open database file found under {fd_dir}");
        let page = s.get(&format!("/jobs/{dead}")).ok();
        assert!(
            !page.contains("name=\"csrf\""),
            "no action form when actions are off"
        );
        for path in [
            format!("/jobs/{dead}/retry"),
            "/queues/default/pause".into(),
        ] {
            let r = s.request("POST", &path, &[], "csrf=x");
            assert_eq!(r.status, 403, "{path}");
            assert!(r.body.contains("--allow-actions"), "{}", r.body);
        }
        drop(s);
        assert!(contents(&db) == before, "the file changed");
        drop(holder);
    }
}

it! {
    fn a_read_only_queue_refuses_every_write_and_reads_beside_a_writer() {
        let db = TestDb::new();
        let missing = db.dir.path().join("missing.db");
        assert!(matches!(
            Queue::<litejob::sqlite::Sqlite>::open_with(
                &missing,
                QueueOptions::default().with_read_only(true)
            ),
            Err(Error::Open(_))
        ));
        assert!(!missing.exists());
        std::fs::write(db.dir.path().join("plain.db"), b"").unwrap();
        assert!(Queue::<litejob::sqlite::Sqlite>::open_with(
            db.dir.path().join("plain.db"),
            QueueOptions::default().with_read_only(true)
        )
        .is_err());

        let writer = db.open();
        writer.enqueue(NewJob::new("k", "first", &1)).unwrap();
        let ro = Queue::open_with(&db.path, QueueOptions::default().with_read_only(true)).unwrap();
        assert!(ro.is_read_only());
        assert!(matches!(
            ro.enqueue(NewJob::new("k", "x", &1)),
            Err(Error::ReadOnly(_))
        ));
        assert!(matches!(ro.admin().retry_job(1), Err(Error::ReadOnly(_))));
        assert!(matches!(ro.runtime().start(), Err(Error::ReadOnly(_))));
        assert!(matches!(ro.connect(), Err(Error::ReadOnly(_))));
        // Another connection holds the write lock: reads go on, never waiting.
        let mut lock = db.sql();
        let tx = lock
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        tx.execute("UPDATE jobs SET priority = 1", []).unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(ro.admin().stats().unwrap().jobs.total, 1);
        ro.admin().metrics().unwrap();
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "a read waited for the lock"
        );
        tx.commit().unwrap();
        // Work written by another process shows at the next read.
        let child = litejob(&db.path, &["enqueue", "k", "--key", "from-another-process"]);
        assert!(child.status.success(), "{}", show(&["enqueue"], &child));
        assert!(ro.job_by_key("from-another-process").unwrap().is_some());
        assert_eq!(ro.admin().stats().unwrap().jobs.total, 2);
    }
}

/// Every row of litejob's tables, and which tables the schema holds: what
/// a read-only server must leave as it found.
fn fingerprint(q: &TestQueue) -> Vec<String> {
    let mut out = q.strings(
        "SELECT coalesce(string_agg(relname::text, ',' ORDER BY relname), '') FROM pg_class \
         WHERE relnamespace = current_schema()::regnamespace",
    );
    let present: Vec<String> = out[0].split(',').map(str::to_string).collect();
    for table in [
        "jobs",
        "processed_jobs",
        "outbox",
        "attempts",
        "schedules",
        "queues",
        "litejob_schema",
    ] {
        if !present.iter().any(|t| t == table) {
            continue;
        }
        out.extend(q.strings(&format!(
            "SELECT coalesce(string_agg(t::text, '\n' ORDER BY t::text), '') FROM {table} t"
        )));
    }
    out
}

/// The names of a process's threads.
fn threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

/// A dead job with a dead outbox row, a queued job, a schedule.
fn repairable(q: &TestQueue) -> i64 {
    let queue = q.open();
    let dead = queue.enqueue(NewJob::new("k", "ro-dead", &1)).unwrap().id();
    queue.enqueue(NewJob::new("k", "ro-queued", &1)).unwrap();
    drop(queue);
    q.exec(&format!(
        "UPDATE jobs SET state = 'dead', finished_at = 1, last_error = 'x' WHERE id = {dead};
         INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, created_at)
         VALUES ('o1', 'mail', '{{}}', 'dead', 2, {dead}, 0, 1);
         INSERT INTO schedules (name, cron, tz, kind, payload, created_at, updated_at)
         VALUES ('nightly', '0 3 * * *', 'UTC', 'k', '{{}}', 1, 1);"
    ));
    dead
}

it! {
    #[needs(Postgres)]
    fn by_default_a_database_is_served_read_only_and_its_tables_never_change() {
        let q = TestQueue::new(Engine::Postgres);
        let dead = repairable(&q);
        let before = fingerprint(&q);
        let s = Server::on(&q.location, &[]);
        for path in [
            "/",
            "/jobs",
            &format!("/jobs/{dead}"),
            "/keys/ro-dead",
            "/failures",
            "/outbox",
            "/schedules",
            "/metrics",
            "/healthz",
        ] {
            s.get(path).ok();
        }
        let page = s.get(&format!("/jobs/{dead}")).ok();
        assert!(
            !page.contains("name=\"csrf\""),
            "no action form when actions are off"
        );
        for path in [
            format!("/jobs/{dead}/retry"),
            "/queues/default/pause".into(),
        ] {
            let r = s.request("POST", &path, &[], "csrf=x");
            assert_eq!(r.status, 403, "{path}");
            assert!(r.body.contains("--allow-actions"), "{}", r.body);
        }
        // No notifier and no async thread: nothing in the process would write.
        let names = threads(s.pid());
        assert!(
            !names.iter().any(|n| n.starts_with("litejob-pg-")),
            "{names:?}"
        );
        drop(s);
        assert_eq!(fingerprint(&q), before, "the tables changed");
        // With actions the queue is opened for writing (its notifier runs).
        let s = Server::on(&q.location, &["--allow-actions"]);
        s.get("/").ok();
        assert!(threads(s.pid()).iter().any(|n| n == "litejob-pg-noti"));
    }
}

/// Runs `litejob --db <location> <args>`, which must exit on its own: a
/// server that starts serving instead is killed after a while, and its
/// output shows it.
fn exits_within(location: &str, args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(crate::support::bin())
        .arg("--db")
        .arg(location)
        .args(args)
        .env_remove("LITEJOB_DB")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run litejob");
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < crate::support::LONG {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

it! {
    #[needs(Postgres)]
    fn serving_a_database_without_litejobs_tables_is_refused_and_creates_none() {
        let q = TestQueue::new(Engine::Postgres);
        let empty = fingerprint(&q);
        for args in [
            &["serve", "--bind", "127.0.0.1:0"][..],
            &["serve", "--bind", "127.0.0.1:0", "--allow-actions"],
        ] {
            let out = exits_within(&q.location, args);
            assert_eq!(out.status.code(), Some(1), "{}", show(args, &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("no litejob tables"), "{err}");
            assert!(
                !err.contains(":litejob@"),
                "the password is not shown: {err}"
            );
            assert!(out.stdout.is_empty(), "{}", show(args, &out));
        }
        assert_eq!(fingerprint(&q), empty, "serve created something");
    }
}

it! {
    #[needs(Postgres)]
    fn a_read_only_database_queue_refuses_every_write_before_sending_it() {
        let q = TestQueue::new(Engine::Postgres);
        let opts = QueueOptions::default;
        // No tables: refused, and none are created.
        let empty = fingerprint(&q);
        let e = AnyQueue::open_with(&q.location, opts().with_read_only(true)).unwrap_err();
        assert!(matches!(e, Error::NotADatabase(_)), "{e}");
        assert_eq!(fingerprint(&q), empty);
        let dead = repairable(&q);
        // Another version of the tables: refused untouched, newer or older.
        q.exec("UPDATE litejob_schema SET version = 99");
        let e = AnyQueue::open_with(&q.location, opts().with_read_only(true)).unwrap_err();
        assert!(matches!(e, Error::SchemaTooNew { found: 99, .. }), "{e}");
        q.exec("UPDATE litejob_schema SET version = 1");
        let e = AnyQueue::open_with(&q.location, opts().with_read_only(true)).unwrap_err();
        assert!(matches!(&e, Error::Open(m) if m.contains("older")), "{e}");
        q.exec(&format!(
            "UPDATE litejob_schema SET version = {}",
            litejob::admin::SCHEMA_VERSION
        ));
        let before = fingerprint(&q);

        let ro = AnyQueue::open_with(&q.location, opts().with_read_only(true)).unwrap();
        assert!(ro.is_read_only());
        let outbox = q.count("SELECT id FROM outbox");
        let refused = |what: &str, r: litejob::Result<()>| match r {
            Err(Error::ReadOnly(m)) => assert!(m.contains("nothing was sent"), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        };
        refused("enqueue", ro.enqueue(NewJob::new("k", "x", &1)).map(drop));
        refused(
            "enqueue_many",
            ro.enqueue_many(vec![NewJob::new("k", "y", &1)]).map(drop),
        );
        refused("retry_job", ro.admin().retry_job(dead));
        refused("cancel_job", ro.admin().cancel_job(dead + 1).map(drop));
        refused("retry_outbox", ro.admin().retry_outbox(outbox));
        refused(
            "prune",
            ro.admin()
                .prune(&litejob::admin::PruneOptions::new(
                    std::time::Duration::ZERO,
                ))
                .map(drop),
        );
        refused(
            "write",
            ro.pg().write(|tx| {
                tx.execute("DELETE FROM jobs", &[])
                    .map_err(|e| Error::Internal(e.to_string()))?;
                Ok(())
            }),
        );
        // The application's own transaction is not read-only: the queue
        // refuses to enqueue through it all the same.
        let mut app = litejob::pg::Client::connect(&q.sql_location, litejob::pg::NoTls).unwrap();
        let mut tx = app.transaction().unwrap();
        refused(
            "enqueue_in",
            ro.pg()
                .enqueue_in(&mut tx, &NewJob::new("k", "z", &1))
                .map(drop),
        );
        tx.commit().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        refused(
            "enqueue_async",
            rt.block_on(ro.enqueue_async(NewJob::new("k", "w", &1)))
                .map(drop),
        );
        refused(
            "write_async",
            rt.block_on(ro.pg().write_async(|_tx| Ok(()))),
        );
        let started = ro
            .runtime()
            .handler("k", |_tx, _v: serde_json::Value| Ok(litejob::Outcome::Done))
            .schedule("every-second", "* * * * * *", "k", &1)
            .start();
        refused("runtime", started.map(drop));
        let started = ro
            .runtime()
            .handler("k", |_tx, _v: serde_json::Value| Ok(litejob::Outcome::Done))
            .start();
        refused("runtime without schedules", started.map(drop));
        assert_eq!(
            fingerprint(&q),
            before,
            "a refused write changed the tables"
        );

        // It reads what others write, at once.
        let writer = q.open();
        writer
            .enqueue(NewJob::new("k", "from-a-writer", &1))
            .unwrap();
        assert!(ro.job_by_key("from-a-writer").unwrap().is_some());
        assert_eq!(ro.admin().stats().unwrap().jobs.total, 3);
        assert!(ro
            .admin()
            .metrics()
            .unwrap()
            .contains("litejob_jobs{queue=\"default\",kind=\"k\",state=\"queued\"} 2"));
        assert_eq!(ro.admin().schedules().unwrap().len(), 1);
    }
}
