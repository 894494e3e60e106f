//! The pages show what the file holds: the overview's counts are the SQL
//! counts, the job list filters and pages by id, a job and a key show their
//! whole story, failures group by error, everything from the file is shown
//! as text, and bad requests get their status.

use std::time::Duration;

use litejob::{JobState, NewJob, Outcome, Queue};
use serde_json::Value;

use super::{between, numbers, strip_tags, Server};
use crate::support::{litejob_ok, tiny_backoff, wait_until, TestDb, LONG};

/// Jobs in three queues and two kinds, some of them dead or cancelled.
fn mixed_file(db: &TestDb) {
    let q = db.open();
    for i in 0..30 {
        let queue = ["default", "mail", "billing"][i % 3];
        let kind = ["send_receipt", "make_pdf"][i % 2];
        q.enqueue(NewJob::new(kind, format!("k{i:03}"), &i).with_queue(queue))
            .unwrap();
    }
    let c = db.sql();
    c.execute_batch(
        "UPDATE jobs SET state = 'dead', finished_at = 1, last_error = 'smtp 451' WHERE id % 7 = 0;
         UPDATE jobs SET state = 'cancelled', finished_at = 1 WHERE id % 11 = 0 AND state = 'queued';",
    )
    .unwrap();
}

#[test]
fn the_overview_shows_the_counts_the_file_holds() {
    let db = TestDb::new();
    mixed_file(&db);
    let s = Server::start(&db, &[]);
    let page = s.get("/").ok();
    for queue in ["default", "mail", "billing"] {
        let row = between(&page, &format!("<tr data-queue=\"{queue}\">"), "</tr>");
        let want: Vec<i64> = JobState::ALL
            .iter()
            .map(|st| {
                db.count(&format!(
                    "SELECT count(*) FROM jobs WHERE queue = '{queue}' AND state = '{st}'"
                ))
            })
            .collect();
        assert_eq!(numbers(row)[..5], want[..], "{queue}: {row}");
    }
    let dead = db.count("SELECT count(*) FROM jobs WHERE state = 'dead'");
    let card = strip_tags(between(
        &page,
        "id=\"card-dead\"><a href=\"/jobs?state=dead\"><div class=\"n\">",
        "</div>",
    ));
    assert_eq!(card.trim(), dead.to_string());
    assert!(page.contains("<svg class=\"chart\""), "{page}");
}

#[test]
fn the_overview_shows_each_queues_controls() {
    let db = TestDb::new();
    mixed_file(&db);
    let q = db.open();
    q.pause_queue("mail").unwrap();
    q.set_queue_limits("billing", litejob::QueueLimits::new().concurrency(2))
        .unwrap();
    // A control may come before a queue's first job: the queue has a row.
    let rate = litejob::Rate::new(100, std::time::Duration::from_secs(60)).unwrap();
    q.set_queue_limits("api", litejob::QueueLimits::new().rate(rate))
        .unwrap();
    let s = Server::start(&db, &[]);
    let page = s.get("/").ok();
    let row = |queue: &str| {
        strip_tags(between(
            &page,
            &format!("<tr data-queue=\"{queue}\">"),
            "</tr>",
        ))
    };
    assert!(row("mail").contains("paused"), "{}", row("mail"));
    assert!(
        row("billing").contains("at most 2 running"),
        "{}",
        row("billing")
    );
    assert!(
        row("api").contains("at most 100 starts per 1m"),
        "{}",
        row("api")
    );
    assert!(!row("default").contains("paused"), "{}", row("default"));
}

/// The ids in the jobs table of a page, in order.
fn ids(page: &str) -> Vec<i64> {
    page.split("<tr data-id=\"")
        .skip(1)
        .map(|r| r[..r.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// The `href` of the link with this id, unescaped.
fn href(page: &str, id: &str) -> Option<String> {
    let start = page.find(&format!("id=\"{id}\""))?;
    let tag_start = page[..start].rfind('<')?;
    let tag = &page[tag_start..start];
    Some(between(tag, "href=\"", "\"").replace("&amp;", "&"))
}

#[test]
fn the_job_list_filters_and_pages_by_id() {
    let db = TestDb::new();
    let q = db.open();
    let jobs: Vec<NewJob> = (1..=120)
        .map(|i| {
            let kind = if i % 2 == 0 { "even" } else { "odd" };
            NewJob::new(
                kind,
                format!("{}-{i:04}", if i <= 60 { "old" } else { "new" }),
                &i,
            )
            .with_queue(if i % 3 == 0 { "three" } else { "default" })
        })
        .collect();
    q.enqueue_many(jobs).unwrap();
    let s = Server::start(&db, &[]);

    let first = s.get("/jobs").ok();
    assert_eq!(ids(&first), (71..=120).rev().collect::<Vec<_>>());
    assert!(href(&first, "newer").is_none());
    let second = s.get(&href(&first, "older").unwrap()).ok();
    assert_eq!(ids(&second), (21..=70).rev().collect::<Vec<_>>());
    let third = s.get(&href(&second, "older").unwrap()).ok();
    assert_eq!(ids(&third), (1..=20).rev().collect::<Vec<_>>());
    assert!(href(&third, "older").is_none(), "the last page");
    let back = s.get(&href(&third, "newer").unwrap()).ok();
    assert_eq!(ids(&back), (21..=70).rev().collect::<Vec<_>>());

    let sql_ids = |filter: &str| -> Vec<i64> {
        let c = db.sql();
        let mut st = c
            .prepare(&format!(
                "SELECT id FROM jobs WHERE {filter} ORDER BY id DESC LIMIT 50"
            ))
            .unwrap();
        let rows = st.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    for (query, filter) in [
        ("kind=even", "kind = 'even'"),
        ("queue=three", "queue = 'three'"),
        ("key=old-", "idempotency_key LIKE 'old-%'"),
        (
            "kind=odd&queue=three&key=new",
            "kind = 'odd' AND queue = 'three' AND idempotency_key LIKE 'new%'",
        ),
        ("state=queued&limit=7", "state = 'queued' AND id > 113"),
    ] {
        let want = sql_ids(filter);
        assert_eq!(ids(&s.get(&format!("/jobs?{query}")).ok()), want, "{query}");
    }
    let filtered = s.get("/jobs?kind=even&limit=10").ok();
    let older = href(&filtered, "older").unwrap();
    assert!(
        older.contains("kind=even") && older.contains("before=102"),
        "{older}"
    );
    assert_eq!(
        ids(&s.get(&older).ok()),
        (82..=100).rev().step_by(2).collect::<Vec<_>>()
    );
    assert!(s.get("/jobs?state=dead").ok().contains("No job matches."));
}

/// A job that fails once, then succeeds and writes an outbox row whose
/// effect succeeds; returns its id.
fn run_a_story(db: &TestDb, key: &str) -> i64 {
    let q = Queue::open(&db.path).unwrap();
    let id = q
        .enqueue(NewJob::new("pay", key, &serde_json::json!({"cents": 4200})).with_max_retries(2))
        .unwrap()
        .id();
    q.enqueue(NewJob::new("pay", key, &serde_json::json!({"cents": 4200})))
        .unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let mut rt = q
        .runtime()
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(10))
        .handler("pay", move |tx, _v: Value| {
            if c.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Ok(Outcome::Retry("card network timeout".into()));
            }
            tx.outbox("send_receipt", "receipt:story", &"mail me")?;
            Ok(Outcome::Done)
        })
        .effect("send_receipt", |_e, _v: String| Ok(()))
        .start()
        .unwrap();
    wait_until("the job and its effect are done", LONG, || {
        db.count("SELECT count(*) FROM outbox WHERE state = 'sent'") == 1
    });
    rt.stop();
    id
}

#[test]
fn a_job_page_and_its_key_page_show_the_whole_story() {
    let db = TestDb::new();
    let id = run_a_story(&db, "evt_story");
    let s = Server::start(&db, &[]);
    let page = s.get(&format!("/jobs/{id}")).ok();
    let attempts = between(&page, "id=\"attempts\"", "</section>");
    assert!(
        attempts.contains("s-failed") && attempts.contains("card network timeout"),
        "{attempts}"
    );
    assert!(attempts.contains("s-succeeded"), "{attempts}");
    assert!(
        page.contains("&quot;cents&quot;: 4200"),
        "the payload, pretty"
    );
    assert!(between(&page, "id=\"ledger\"", "</section>").contains("Work committed"));
    let outbox = between(&page, "id=\"outbox-rows\"", "</section>");
    assert!(
        outbox.contains("receipt:story") && outbox.contains("s-sent"),
        "{outbox}"
    );
    assert!(page.contains("<dt>deliveries</dt><dd>2</dd>"), "{page}");

    let explain: Value = serde_json::from_str(&litejob_ok(
        &db.path,
        &["explain", "evt_story", "--json"],
        0,
    ))
    .unwrap();
    let key_page = s.get("/keys/evt_story").ok();
    let sentence = strip_tags(between(&key_page, "id=\"sentence\">", "</p>"));
    assert_eq!(sentence, explain["summary"].as_str().unwrap());
    assert!(key_page.contains("card network timeout"));
    assert_eq!(s.get("/keys/never-seen").status, 404);
}

#[test]
fn failures_group_dead_jobs_and_outbox_rows_by_last_error() {
    let db = TestDb::new();
    mixed_file(&db);
    db.sql()
        .execute_batch(
            "UPDATE jobs SET last_error = 'pdf renderer crashed' WHERE id IN (7, 14);
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, last_error, created_at)
             VALUES ('o1', 'send_receipt', '{}', 'dead', 2, 1, 0, 'smtp 550 rejected', 5);",
        )
        .unwrap();
    let s = Server::start(&db, &[]);
    let page = s.get("/failures").ok();
    let jobs = between(&page, "id=\"dead-jobs\"", "</section>");
    let groups: Vec<(i64, String)> = jobs
        .split("<tr><td class=\"num\">")
        .skip(1)
        .map(|r| {
            let n = strip_tags(&r[..r.find("</td>").unwrap()]).parse().unwrap();
            (n, strip_tags(between(r, "<pre class=\"error\">", "</pre>")))
        })
        .collect();
    let c = db.sql();
    let mut st = c
        .prepare(
            "SELECT count(*), last_error FROM jobs WHERE state = 'dead' \
             GROUP BY last_error, kind ORDER BY 1 DESC, max(id) DESC",
        )
        .unwrap();
    let want: Vec<(i64, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(groups, want);
    assert!(between(&page, "id=\"dead-outbox\"", "</section>").contains("smtp 550 rejected"));
}

#[test]
fn what_comes_from_the_file_is_shown_as_text() {
    let db = TestDb::new();
    let evil = "<script>alert(1)</script>";
    let q = db.open();
    let id = q
        .enqueue(
            NewJob::new(
                format!("kind{evil}"),
                format!("key\"><img src=x>{evil}"),
                &serde_json::json!({ "x": evil }),
            )
            .with_queue(format!("q{evil}")),
        )
        .unwrap()
        .id();
    db.sql()
        .execute(
            "UPDATE jobs SET state = 'dead', finished_at = 1, last_error = ?1 WHERE id = ?2",
            (format!("boom {evil}"), id),
        )
        .unwrap();
    db.sql()
        .execute(
            "INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, last_error, created_at) \
             VALUES (?1, ?1, '{}', 'dead', 2, ?2, 0, ?1, 5)",
            (format!("o{evil}"), id),
        )
        .unwrap();
    let s = Server::start(&db, &[]);
    let key = "key%22%3E%3Cimg%20src%3Dx%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
    for path in [
        "/",
        "/jobs",
        &format!("/jobs/{id}"),
        &format!("/keys/{key}"),
        "/failures",
        "/outbox",
    ] {
        let page = s.get(path).ok();
        assert!(
            !page.contains("<script") && !page.contains("<img"),
            "{path}: {page}"
        );
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}: {page}"
        );
    }
    // And nothing could run anyway: no script is allowed on any page.
    let csp = s
        .get("/")
        .header("Content-Security-Policy")
        .unwrap()
        .to_string();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
}

#[test]
fn bad_requests_get_their_status_and_a_plain_message() {
    let db = TestDb::new();
    mixed_file(&db);
    let s = Server::start(&db, &[]);
    let long = format!("/jobs?key={}", "a".repeat(5000));
    for (path, status) in [
        ("/nope", 404),
        ("/jobs/abc", 400),
        ("/jobs/0", 400),
        ("/jobs/-3", 400),
        ("/jobs/9999", 404),
        ("/jobs?state=lost", 400),
        ("/jobs?limit=0", 400),
        ("/jobs?before=x", 400),
        ("/outbox?state=gone", 400),
        ("/jobs?kind=%zz", 400),
        (long.as_str(), 414),
    ] {
        let r = s.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(r.body.contains("id=\"error\""), "{path}: {}", r.body);
    }
    assert_eq!(s.request("PUT", "/", &[], "").status, 405);
    assert_eq!(s.request("DELETE", "/jobs/1", &[], "").status, 405);
    assert_eq!(s.request("POST", "/nope", &[], "").status, 404);
}
