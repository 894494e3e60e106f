//! Every page in a real browser (headless Chromium, Debian's `chromium`),
//! served from a queue file and from a PostgreSQL database: it loads with
//! no message on the console (no script, no blocked resource, no broken
//! markup), the elements a person looks for are there, and a screenshot of
//! each is saved under the target directory
//! (`<target>/tmp/serve-screenshots/<engine>-<page>.png`). Without a
//! browser the test is reported ignored (under `CI`, failed).

use crate::backends::{Runtimes, TestBuilder};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use litejob::{NewJob, Outcome};
use serde_json::Value;

use super::Server;
use crate::backends::Engine;
use crate::both;
use crate::support::{tiny_backoff, wait_until, LONG};

/// The browser (`LITEJOB_CHROMIUM` names another one than `chromium`).
fn chromium() -> PathBuf {
    crate::suite::Need::Chromium.require();
    PathBuf::from(crate::suite::chromium_name())
}

/// Runs headless Chromium on `url` with `what` (`--dump-dom` or
/// `--screenshot=…`); returns (stdout, stderr).
fn browse(browser: &Path, url: &str, what: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(what)
        .arg(url)
        .output()
        .expect("run chromium");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where the screenshots go.
fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The handlers of the browser's queue, for `engine`: payments write an
/// outbox row, some digests are discarded, ticks (a schedule's) succeed.
fn handlers(_engine: Engine, b: TestBuilder) -> TestBuilder {
    let discard = |v: &Value| v["n"].as_i64().unwrap() % 4 == 1;
    b.handler("payment.succeeded", |tx, v: Value| {
        tx.outbox("send_receipt", &format!("receipt:{}", v["n"]), &v["n"])?;
        Ok(Outcome::Done)
    })
    .handler("send_digest", move |_tx, v: Value| {
        if discard(&v) {
            return Ok(Outcome::Discard("smtp 451: mailbox <busy>".into()));
        }
        Ok(Outcome::Done)
    })
    .handler("tick", |_tx, _v: Value| Ok(Outcome::Done))
}

both! {
    #[needs(Chromium)]
    fn every_page_loads_in_a_browser_without_console_messages_and_with_its_parts(q) {
    let browser = chromium();
    let queue = q.open();
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| {
            let kind = ["payment.succeeded", "send_digest", "thumbnail"][i % 3];
            NewJob::new(
                kind,
                format!("evt_{i:04}"),
                &serde_json::json!({"n": i, "note": "<script>x</script>"}),
            )
            .with_queue(["default", "mail"][i % 2])
            .with_max_retries(0)
        })
        .collect();
    queue.enqueue_many(jobs).unwrap();
    let b = queue
        .runtime()
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(10));
    let mut rt = handlers(q.engine, b)
        .effect("send_receipt", |_e, n: i64| {
            if n % 2 == 0 {
                Err("provider 503".into())
            } else {
                Ok(())
            }
        })
        .outbox_max_retries(0)
        .schedule("heartbeat", "* * * * * *", "tick", &serde_json::json!({}))
        .start()
        .unwrap();
    wait_until("the runnable jobs and effects are done, a slot fired", LONG, || {
        q.count(
            "SELECT count(*) FROM jobs WHERE state IN ('queued', 'running') AND kind IN ('payment.succeeded', 'send_digest')",
        ) == 0
            && q.count("SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')") == 0
            && q.count("SELECT count(*) FROM jobs WHERE kind = 'tick' AND state = 'succeeded'") > 0
    });
    rt.stop();
    let dead = q.count("SELECT min(id) FROM jobs WHERE state = 'dead'");
    let s = Server::on(&q.location, &["--allow-actions"]);
    let base = format!("http://{}", s.addr);
    let pages = [
        (
            "overview",
            "/".to_string(),
            vec![
                "id=\"queues\"",
                "<svg class=\"chart\"",
                "id=\"card-dead\"",
                "id=\"outbox\"",
                "id=\"schedules-section\"",
            ],
        ),
        (
            "jobs",
            "/jobs?limit=20".into(),
            vec!["id=\"filters\"", "id=\"jobs\"", "id=\"older\""],
        ),
        (
            "job",
            format!("/jobs/{dead}"),
            vec![
                "id=\"attempts\"",
                "<svg class=\"timeline\"",
                "name=\"csrf\"",
                "id=\"ledger\"",
            ],
        ),
        (
            "key",
            "/keys/evt_0000".into(),
            vec!["id=\"sentence\"", "id=\"outbox-rows\""],
        ),
        (
            "failures",
            "/failures".into(),
            vec![
                "id=\"dead-jobs\"",
                "smtp 451: mailbox &lt;busy&gt;",
                "provider 503",
            ],
        ),
        ("outbox", "/outbox".into(), vec!["id=\"outbox\"", "Retry"]),
        (
            "schedules",
            "/schedules".into(),
            vec!["<tr data-name=\"heartbeat\">", "class=\"slot last\"", "<code>* * * * * *</code>"],
        ),
    ];
    // The pooled case runs beside the direct one: a file of its own.
    let engine = match (q.engine, q.pooled) {
        (Engine::Sqlite, _) => "sqlite",
        (Engine::Postgres, false) => "postgres",
        (Engine::Postgres, true) => "postgres-pooled",
    };
    let dir = shots();
    for (name, path, parts) in &pages {
        let url = format!("{base}{path}");
        let (dom, log) = browse(&browser, &url, "--dump-dom");
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(
            console.is_empty(),
            "{name}: console messages:\n{}",
            console.join("\n")
        );
        assert!(!log.contains("Page load failed"), "{name}: {log}");
        for part in parts {
            assert!(
                dom.contains(part),
                "{name}: {part:?} missing from the page the browser built:\n{dom}"
            );
        }
        assert!(
            !dom.contains("<script"),
            "{name}: a script element in the page"
        );
        let png = dir.join(format!("{engine}-{name}.png"));
        let _ = std::fs::remove_file(&png);
        let (_, log) = browse(&browser, &url, &format!("--screenshot={}", png.display()));
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(
            size > 5_000,
            "{name}: no screenshot at {} ({size} bytes):\n{log}",
            png.display()
        );
    }
}
}

both! {
    /// The workflow on a job's page, as the browser builds it: a node per
    /// job of the graph, each a link to that job's page, and no console
    /// message; the screenshot shows the picture.
    #[needs(Chromium)]
    fn a_job_page_draws_its_workflow_with_a_linked_node_per_job(q) {
        let browser = chromium();
        let ids = crate::serve::workflow::fan_in(q);
        let s = Server::on(&q.location, &[]);
        let url = format!("http://{}/jobs/{}", s.addr, ids[2]);
        let (dom, log) = browse(&browser, &url, "--dump-dom");
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "console messages:\n{}", console.join("\n"));
        let svg = crate::serve::workflow::picture(&dom);
        let linked: Vec<i64> = svg
            .split("<a href=\"/jobs/")
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
            .collect();
        assert_eq!(linked, ids[..4], "a node per job of the workflow, x apart:\n{svg}");
        assert_eq!(svg.matches("<rect").count(), 4, "{svg}");
        let engine = match (q.engine, q.pooled) {
            (Engine::Sqlite, _) => "sqlite",
            (Engine::Postgres, false) => "postgres",
            (Engine::Postgres, true) => "postgres-pooled",
        };
        let png = shots().join(format!("{engine}-workflow.png"));
        let _ = std::fs::remove_file(&png);
        let (_, log) = browse(&browser, &url, &format!("--screenshot={}", png.display()));
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(size > 5_000, "no screenshot at {} ({size} bytes):\n{log}", png.display());
    }
}

both! {
    /// A job's steps on its page, in a browser: a row per step with the
    /// attempt that recorded it and those that reused it, its result
    /// escaped, and no console message.
    #[needs(Chromium)]
    fn a_job_page_lists_its_steps_with_their_attempts_and_escaped_results(q) {
        let browser = chromium();
        let (order, plain) = crate::cli::steps::jobs_with_and_without_steps(q);
        let s = Server::on(&q.location, &[]);
        let (dom, log) = browse(&browser, &format!("http://{}/jobs/{order}", s.addr), "--dump-dom");
        let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
        assert!(console.is_empty(), "console messages:\n{}", console.join("\n"));
        let steps = crate::serve::between(&dom, "<section id=\"steps\">", "</section>");
        let row = |name: &str| {
            crate::serve::strip_tags(crate::serve::between(steps, &format!("data-step=\"{name}\""), "</tr>"))
        };
        let charge = row("charge");
        assert!(charge.contains("attempt 1") && charge.contains("attempt 2"), "{charge}");
        assert!(charge.contains("order:1/charge"), "{charge}");
        assert!(row("book").contains("not reused"), "{steps}");
        assert!(steps.contains("&lt;b&gt;order:1/charge&lt;/b&gt;"), "the result is escaped: {steps}");
        let (dom, _) = browse(&browser, &format!("http://{}/jobs/{plain}", s.addr), "--dump-dom");
        assert!(!dom.contains("id=\"steps\""), "a job without steps has no steps section");
    }
}
