//! Who may ask and who may act: a non-loopback bind needs a token, and
//! every request then carries it (a bearer header or the login cookie);
//! actions need `--allow-actions` and the form's CSRF token, and without
//! them nothing is written; by default the file is opened read-only and
//! stays byte for byte the same.

use litejob::{Error, NewJob, Queue};

use super::{between, Server};
use crate::support::{litejob, show, TestDb};

#[test]
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

#[test]
fn with_a_token_every_request_needs_it() {
    let db = TestDb::new();
    db.open().enqueue(NewJob::new("k", "t", &1)).unwrap();
    let s = Server::start(&db, &["--token", "s3cret-T"]);
    for path in ["/", "/jobs", "/jobs/1", "/metrics", "/healthz", "/failures"] {
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

/// The CSRF token in a page's first action form.
fn csrf(page: &str) -> String {
    between(page, "name=\"csrf\" value=\"", "\"").to_string()
}

#[test]
fn an_action_without_the_forms_csrf_token_is_refused_and_writes_nothing() {
    let db = TestDb::new();
    let q = db.open();
    let dead = q.enqueue(NewJob::new("k", "dead", &1)).unwrap().id();
    let queued = q.enqueue(NewJob::new("k", "queued", &1)).unwrap().id();
    drop(q);
    db.sql()
        .execute_batch(&format!(
            "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id = {dead};
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, created_at)
             VALUES ('o1', 'mail', '{{}}', 'dead', 2, {dead}, 0, 1);"
        ))
        .unwrap();
    let s = Server::start(&db, &["--allow-actions"]);
    let page = s.get(&format!("/jobs/{dead}")).ok();
    let token = csrf(&page);
    assert_eq!(token.len(), 32);
    let state = |id: i64| -> String {
        db.sql()
            .query_row("SELECT state FROM jobs WHERE id = ?1", [id], |r| r.get(0))
            .unwrap()
    };
    let outbox_state = || -> String {
        db.sql()
            .query_row("SELECT state FROM outbox WHERE key = 'o1'", [], |r| {
                r.get(0)
            })
            .unwrap()
    };
    for body in [
        "",
        "csrf=",
        "csrf=0123456789abcdef0123456789abcdef",
        "back=/",
    ] {
        for path in [
            format!("/jobs/{dead}/retry"),
            format!("/jobs/{queued}/cancel"),
            "/outbox/1/retry".into(),
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
        s.request("POST", "/outbox/1/retry", &[], &form("/outbox"))
            .status,
        303
    );
    assert_eq!(outbox_state(), "pending");
    // A refusal by the row's state is a conflict, and says why.
    let r = s.request("POST", &format!("/jobs/{queued}/cancel"), &[], &form("/"));
    assert_eq!(r.status, 409);
    assert!(
        r.body.contains("only a queued job can be cancelled"),
        "{}",
        r.body
    );
    assert_eq!(
        s.request("POST", "/jobs/999/retry", &[], &form("/")).status,
        404
    );
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

#[test]
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
    let r = s.request("POST", &format!("/jobs/{dead}/retry"), &[], "csrf=x");
    assert_eq!(r.status, 403);
    assert!(r.body.contains("--allow-actions"), "{}", r.body);
    drop(s);
    assert!(contents(&db) == before, "the file changed");
}

#[test]
fn a_read_only_queue_refuses_every_write_and_reads_beside_a_writer() {
    let db = TestDb::new();
    let missing = db.dir.path().join("missing.db");
    assert!(matches!(
        Queue::open_read_only(&missing),
        Err(Error::Open(_))
    ));
    assert!(!missing.exists());
    std::fs::write(db.dir.path().join("plain.db"), b"").unwrap();
    assert!(Queue::open_read_only(db.dir.path().join("plain.db")).is_err());

    let writer = db.open();
    writer.enqueue(NewJob::new("k", "first", &1)).unwrap();
    let ro = Queue::open_read_only(&db.path).unwrap();
    assert!(ro.is_read_only());
    assert!(matches!(
        ro.enqueue(NewJob::new("k", "x", &1)),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(ro.retry_job(1), Err(Error::ReadOnly(_))));
    assert!(matches!(ro.runtime().start(), Err(Error::ReadOnly(_))));
    assert!(matches!(ro.connect(), Err(Error::ReadOnly(_))));
    // Another connection holds the write lock: reads go on, never waiting.
    let mut lock = db.sql();
    let tx = lock
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("UPDATE jobs SET priority = 1", []).unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(ro.stats().unwrap().jobs.total, 1);
    ro.metrics().unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(20),
        "a read waited for the lock"
    );
    tx.commit().unwrap();
    // Work written by another process shows at the next read.
    let child = litejob(&db.path, &["enqueue", "k", "--key", "from-another-process"]);
    assert!(child.status.success(), "{}", show(&["enqueue"], &child));
    assert!(ro.job_by_key("from-another-process").unwrap().is_some());
    assert_eq!(ro.stats().unwrap().jobs.total, 2);
}
