//! The pages show what the queue holds, on a file and on PostgreSQL alike:
//! the overview's counts are the SQL counts, the job list filters and pages
//! by id, a job and a key show their whole story, failures group by error,
//! the schedules page lists each schedule with links to its slots' keys,
//! everything from the database is shown as text, and bad requests get
//! their status.

use crate::backends::{Runtimes, TestBuilder};
use std::path::Path;
use std::time::Duration;

use litejob::{JobState, NewJob, Outcome};
use serde_json::Value;

use super::{between, numbers, strip_tags, Server};
use crate::backends::{Engine, TestQueue};
use crate::both;
use crate::support::{litejob_ok, tiny_backoff, wait_until, LONG};

/// Jobs in three queues and two kinds, some of them dead or cancelled.
fn mixed_queue(q: &TestQueue) {
    let queue = q.open();
    for i in 0..30 {
        let name = ["default", "mail", "billing"][i % 3];
        let kind = ["send_receipt", "make_pdf"][i % 2];
        queue
            .enqueue(NewJob::new(kind, format!("k{i:03}"), &i).with_queue(name))
            .unwrap();
    }
    drop(queue);
    q.exec(
        "UPDATE jobs SET state = 'dead', finished_at = 1, last_error = 'smtp 451' WHERE id % 7 = 0;
         UPDATE jobs SET state = 'cancelled', finished_at = 1 WHERE id % 11 = 0 AND state = 'queued';",
    );
}

/// The ids `sql` selects (`CAST(id AS TEXT) AS t`, which both engines
/// read; PostgreSQL would name the column `id`, and sort by the text).
fn sql_ids(q: &TestQueue, sql: &str) -> Vec<i64> {
    q.strings(sql).iter().map(|s| s.parse().unwrap()).collect()
}

both! {
    fn the_overview_shows_the_counts_the_queue_holds(q) {
        mixed_queue(q);
        q.exec(
            "INSERT INTO processed_jobs (key, completed_at, job_id) \
             SELECT idempotency_key, 9, id FROM jobs WHERE id % 5 = 1",
        );
        let s = Server::on(&q.location, &[]);
        let page = s.get("/").ok();
        for queue in ["default", "mail", "billing"] {
            let row = between(&page, &format!("<tr data-queue=\"{queue}\">"), "</tr>");
            let want: Vec<i64> = JobState::ALL
                .iter()
                .map(|st| {
                    q.count(&format!(
                        "SELECT count(*) FROM jobs WHERE queue = '{queue}' AND state = '{st}'"
                    ))
                })
                .collect();
            assert_eq!(numbers(row)[..want.len()], want[..], "{queue}: {row}");
        }
        let dead = q.count("SELECT count(*) FROM jobs WHERE state = 'dead'");
        let card = strip_tags(between(
            &page,
            "id=\"card-dead\"><a href=\"/jobs?state=dead\"><div class=\"n\">",
            "</div>",
        ));
        assert_eq!(card.trim(), dead.to_string());
        assert!(page.contains("<svg class=\"chart\""), "{page}");
        let ledger = q.count("SELECT count(*) FROM processed_jobs");
        assert!(ledger > 0);
        let storage = between(&page, "id=\"file\"", "</section>");
        assert!(storage.contains(&format!("<dd>{ledger} keys whose work committed")), "{storage}");
        // No schedule: no section for them.
        assert!(!page.contains("id=\"schedules-section\""), "{page}");
    }
}

both! {
    fn the_overview_shows_each_queues_controls(q) {
    mixed_queue(q);
    let queue = q.open();
    queue.admin().pause_queue("mail").unwrap();
    queue.admin().set_queue_limits("billing", litejob::admin::QueueLimits::new().concurrency(2))
        .unwrap();
    // A control may come before a queue's first job: the queue has a row.
    let rate = litejob::admin::Rate::new(100, std::time::Duration::from_secs(60)).unwrap();
    queue.admin().set_queue_limits("api", litejob::admin::QueueLimits::new().rate(rate))
        .unwrap();
    let s = Server::on(&q.location, &[]);
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

both! {
    fn the_job_list_filters_and_pages_by_id(q) {
        let queue = q.open();
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
        queue.enqueue_many(jobs).unwrap();
        let s = Server::on(&q.location, &[]);

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
            let want = sql_ids(
                q,
                &format!("SELECT CAST(id AS TEXT) AS t FROM jobs WHERE {filter} ORDER BY id DESC LIMIT 50"),
            );
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
}

/// A handler of `pay` for `engine` that asks for a retry the first time,
/// then writes an outbox row and succeeds.
fn payer(_engine: Engine, b: TestBuilder) -> TestBuilder {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let first = move || calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
    b.handler("pay", move |tx, _v: Value| {
        if first() {
            return Ok(Outcome::Retry("card network timeout".into()));
        }
        tx.outbox("send_receipt", "receipt:story", &"mail me")?;
        Ok(Outcome::Done)
    })
}

/// A job that fails once, then succeeds and writes an outbox row whose
/// effect succeeds; returns its id.
fn run_a_story(q: &TestQueue, key: &str) -> i64 {
    let queue = q.open();
    let id = queue
        .enqueue(NewJob::new("pay", key, &serde_json::json!({"cents": 4200})).with_max_retries(2))
        .unwrap()
        .id();
    queue
        .enqueue(NewJob::new("pay", key, &serde_json::json!({"cents": 4200})))
        .unwrap();
    let b = queue
        .runtime()
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(10));
    let mut rt = payer(q.engine, b)
        .effect("send_receipt", |_e, _v: String| Ok(()))
        .start()
        .unwrap();
    wait_until("the job and its effect are done", LONG, || {
        q.count("SELECT count(*) FROM outbox WHERE state = 'sent'") == 1
    });
    rt.stop();
    id
}

both! {
    fn a_job_page_and_its_key_page_show_the_whole_story(q) {
        let id = run_a_story(q, "evt_story");
        let s = Server::on(&q.location, &[]);
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
        // The overview's last hour: the failed run and the one that
        // succeeded (an effect's attempt is not a job run).
        let overview = s.get("/").ok();
        let card = |id: &str| strip_tags(between(&overview, &format!("id=\"{id}\">"), "</div>"));
        assert_eq!((card("card-done"), card("card-failed")), ("1".into(), "1".into()));

        let explain: Value = serde_json::from_str(&litejob_ok(
            Path::new(&q.location),
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
}

both! {
    fn failures_group_dead_jobs_and_outbox_rows_by_last_error(q) {
        mixed_queue(q);
        q.exec(
            "UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id IN (1, 3);
             UPDATE jobs SET last_error = 'pdf renderer crashed' WHERE id IN (1, 3, 7);
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, last_error, created_at)
             VALUES ('o1', 'send_receipt', '{}', 'dead', 2, 1, 0, 'smtp 550 rejected', 5);",
        );
        let s = Server::on(&q.location, &[]);
        let page = s.get("/failures").ok();
        let jobs = between(&page, "id=\"dead-jobs\"", "</section>");
        let groups: Vec<String> = jobs
            .split("<tr><td class=\"num\">")
            .skip(1)
            .map(|r| {
                let n = strip_tags(&r[..r.find("</td>").unwrap()]);
                format!("{n}|{}", strip_tags(between(r, "<pre class=\"error\">", "</pre>")))
            })
            .collect();
        let want = q.strings(
            "SELECT CAST(count(*) AS TEXT) || '|' || last_error FROM jobs WHERE state = 'dead' \
             GROUP BY last_error, kind ORDER BY count(*) DESC, max(id) DESC",
        );
        // The largest group is not the newest: sorted by size first.
        assert_eq!(want[0], "3|pdf renderer crashed", "{want:?}");
        assert_eq!(groups, want);
        assert!(between(&page, "id=\"dead-outbox\"", "</section>").contains("smtp 550 rejected"));
    }
}

/// Percent-encodes a path segment as the pages do.
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A handler of `tick` for `engine` that succeeds.
fn ticker(_engine: Engine, b: TestBuilder) -> TestBuilder {
    b.handler("tick", |_tx, _v: Value| Ok(Outcome::Done))
}

both! {
    fn the_schedules_page_lists_each_schedule_with_its_slots_linked_to_their_keys(q) {
        let queue = q.open();
        let empty = Server::on(&q.location, &[]);
        assert!(empty.get("/schedules").ok().contains("No schedule is declared"));
        drop(empty);
        let mut rt = ticker(q.engine, queue.runtime().poll_interval(Duration::from_millis(10)))
            .schedule("digest", "* * * * * *", "tick", &serde_json::json!({}))
            .start()
            .unwrap();
        wait_until("a slot fired and its job ran", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE kind = 'tick' AND state = 'succeeded'") >= 1
        });
        rt.stop();
        let s = Server::on(&q.location, &[]);
        let page = s.get("/schedules").ok();
        let row = between(&page, "<tr data-name=\"digest\">", "</tr>");
        assert!(row.contains("<code>* * * * * *</code>") && row.contains("<td>UTC</td>"), "{row}");
        assert!(row.contains("href=\"/jobs?kind=tick\""), "{row}");
        // The last slot links to the key of the job it fired (the newest:
        // a slot's job and its row's move commit together).
        let last_key = q.strings(
            "SELECT idempotency_key FROM jobs WHERE kind = 'tick' ORDER BY id DESC LIMIT 1",
        );
        let link = format!("/keys/{}", pct(&last_key[0]));
        assert!(row.contains(&format!("<a href=\"{link}\" class=\"slot last\">")), "{link}: {row}");
        let key_page = s.get(&link).ok();
        assert!(key_page.contains(&last_key[0]), "{key_page}");
        // Each slot shows its time in UTC (the key's) and how long ago or
        // how soon; the next one links to the key it will have, a second on.
        let slots: Vec<(String, &str)> = row
            .split("<a href=\"/keys/")
            .skip(1)
            .map(|a| {
                let key = a[..a.find('"').unwrap()].replace("%3A", ":");
                (key, between(a, "<time datetime=\"", "\""))
            })
            .collect();
        assert_eq!(slots.len(), 2, "{row}");
        for (key, datetime) in &slots {
            let slot = key.rsplit_once("digest:").unwrap().1;
            assert_eq!(datetime[..19], slot[..19], "{key} shown as {datetime}");
        }
        assert!(row.contains("<small class=\"ago\">"), "{row}");
        assert_eq!(slots[0].0, last_key[0]);
        let secs = |key: &str| -> i64 {
            key.rsplit(':').next().unwrap().trim_end_matches('Z').parse().unwrap()
        };
        assert_eq!((secs(&slots[0].0) + 1) % 60, secs(&slots[1].0), "{slots:?}");
        // The overview lists it too, and the navigation leads here.
        let overview = s.get("/").ok();
        let section = between(&overview, "id=\"schedules-section\"", "</section>");
        assert!(section.contains("<tr data-name=\"digest\">") && section.contains(&link), "{section}");
        assert!(overview.contains("<a href=\"/schedules\""), "{overview}");
    }
}

both! {
    fn what_comes_from_the_database_is_shown_as_text(q) {
        let evil = "<script>alert(1)</script>";
        let queue = q.open();
        let id = queue
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
        drop(queue);
        q.exec(&format!(
            "UPDATE jobs SET state = 'dead', finished_at = 1, last_error = 'boom {evil}' WHERE id = {id};
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, last_error, created_at)
             VALUES ('o{evil}', 'o{evil}', '{{}}', 'dead', 2, {id}, 0, 'o{evil}', 5);
             INSERT INTO schedules (name, cron, tz, kind, payload, created_at, updated_at, last_slot_at, next_slot_at)
             VALUES ('s{evil}', '* * * * *{evil}', 'UTC{evil}', 'k{evil}', '{{}}', 1, 1, 60000, 120000);"
        ));
        let s = Server::on(&q.location, &[]);
        let key = "key%22%3E%3Cimg%20src%3Dx%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
        for path in [
            "/",
            "/jobs",
            &format!("/jobs/{id}"),
            &format!("/keys/{key}"),
            "/failures",
            "/outbox",
            "/schedules",
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
}

both! {
    fn bad_requests_get_their_status_and_a_plain_message(q) {
        mixed_queue(q);
        let s = Server::on(&q.location, &[]);
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
        assert_eq!(s.request("PUT", "/schedules", &[], "").status, 405);
        assert_eq!(s.request("DELETE", "/jobs/1", &[], "").status, 405);
        assert_eq!(s.request("POST", "/nope", &[], "").status, 404);
    }
}
