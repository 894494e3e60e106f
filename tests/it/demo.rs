//! `litejob demo` end to end, with the real binary: a rerun changes only the
//! delivery counts; SIGKILL at random moments (and at the exact step between
//! a send and its acknowledgement) never invoices twice and sends a receipt
//! twice only where the kill landed; two copies at once agree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, litejob, show, Rng, TestDb};

fn receipts_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".receipts");
    PathBuf::from(p)
}

/// Runs the demo to completion with `--json`; returns its summary.
fn demo_json(db: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json", "demo"];
    all.extend_from_slice(args);
    let out = litejob(db, &all);
    assert_eq!(out.status.code(), Some(0), "{}", show(&all, &out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&all, &out)))
}

/// The demo binary as a child, without waiting for it.
fn demo_child(db: &Path, args: &[&str], fault: Option<&str>) -> std::process::Child {
    let mut cmd = Command::new(support::bin());
    cmd.arg("--db")
        .arg(db)
        .arg("demo")
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(f) = fault {
        cmd.env("LITEJOB_FAULT", f);
    }
    cmd.spawn().expect("spawn litejob demo")
}

/// Receipt lines and how often each appears.
fn receipt_lines(db: &Path) -> HashMap<String, i64> {
    let text = std::fs::read_to_string(receipts_path(db)).expect("read receipts");
    let mut seen = HashMap::new();
    for line in text.lines() {
        *seen.entry(line.to_string()).or_default() += 1;
    }
    seen
}

/// What must hold after any number of complete or killed runs followed by
/// one complete run: one job, one invoice, one sent outbox row per event;
/// each receipt line names a real invoice and its event; each event has a
/// receipt line. Returns the receipt lines seen more than once.
fn check_finished(t: &TestDb, events: i64) -> HashMap<String, i64> {
    let c = t.sql();
    let q = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        q("SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded'"),
        events
    );
    assert_eq!(
        q("SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded' AND state = 'succeeded'"),
        events,
        "every job succeeded"
    );
    assert_eq!(
        q("SELECT count(*) FROM invoices"),
        events,
        "one invoice per event"
    );
    assert_eq!(
        q("SELECT count(DISTINCT provider_event_id) FROM invoices"),
        events
    );
    assert_eq!(q("SELECT count(*) FROM processed_jobs"), events);
    assert_eq!(
        q("SELECT count(*) FROM outbox WHERE kind = 'send_receipt' AND state = 'sent'"),
        events,
        "one receipt sent per invoice"
    );
    assert_eq!(q("SELECT count(*) FROM outbox"), events);

    let mut invoice_of: HashMap<String, i64> = HashMap::new();
    let mut st = c
        .prepare("SELECT provider_event_id, id FROM invoices")
        .unwrap();
    for row in st
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
    {
        let (e, id) = row.unwrap();
        invoice_of.insert(e, id);
    }
    let lines = receipt_lines(&t.path);
    assert_eq!(
        lines.len() as i64,
        events,
        "one distinct receipt line per invoice"
    );
    for line in lines.keys() {
        let (id, evt) = line.split_once('\t').expect("<invoice id>\\t<event id>");
        assert_eq!(
            invoice_of.get(evt).map(|i| i.to_string()).as_deref(),
            Some(id),
            "receipt {line:?} names its event's invoice"
        );
    }
    lines.into_iter().filter(|(_, n)| *n > 1).collect()
}

/// A receipt line sent `n` times needs `n - 1` attempts of its outbox row
/// cut short by a crash: a duplicate is only allowed where a kill landed
/// between the send and its acknowledgement.
fn check_duplicates_were_abandoned(t: &TestDb, dups: &HashMap<String, i64>) {
    for (line, n) in dups {
        let evt = line.split_once('\t').unwrap().1;
        let abandoned = t.count(&format!(
            "SELECT count(*) FROM attempts a JOIN outbox o ON o.id = a.outbox_id \
             WHERE o.key = 'receipt:{evt}' AND a.outcome = 'abandoned'"
        ));
        assert!(
            abandoned >= n - 1,
            "receipt {line:?} sent {n} times but only {abandoned} abandoned attempts"
        );
    }
}

#[test]
fn a_second_run_creates_no_job_invoice_or_receipt_only_deliveries_grow() {
    let t = TestDb::new();
    let args = ["--events", "100", "--redeliver", "3", "--seed", "5"];
    let first = demo_json(&t.path, &args);
    assert_eq!(first["events"], 100);
    assert_eq!(first["deliveries"], 300);
    assert_eq!(first["duplicates_absorbed"], 200);
    assert_eq!(first["jobs"], 100);
    assert_eq!(first["invoices"], 100);
    assert_eq!(first["receipts_sent"], 100);
    assert_eq!(first["receipt_lines"], 100);
    assert_eq!(first["dead"], 0);
    assert_eq!(first["this_run"]["new_jobs"], 100);
    assert!(check_finished(&t, 100).is_empty());

    let snapshot = |t: &TestDb| {
        let c = t.sql();
        let rows = |sql: &str| -> Vec<String> {
            let mut st = c.prepare(sql).unwrap();
            let v = st
                .query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            v
        };
        (
            rows("SELECT id || ' ' || idempotency_key || ' ' || state FROM jobs ORDER BY id"),
            rows("SELECT id || ' ' || provider_event_id || ' ' || amount_cents || ' ' || created_at FROM invoices ORDER BY id"),
            rows("SELECT id || ' ' || key || ' ' || state || ' ' || sent_at FROM outbox ORDER BY id"),
            rows("SELECT key || ' ' || completed_at FROM processed_jobs ORDER BY key"),
            std::fs::read_to_string(receipts_path(&t.path)).unwrap(),
        )
    };
    let before = snapshot(&t);

    let second = demo_json(&t.path, &args);
    assert_eq!(second["this_run"]["deliveries"], 300);
    assert_eq!(second["this_run"]["new_jobs"], 0, "{second}");
    assert_eq!(second["this_run"]["duplicates"], 300);
    assert_eq!(second["deliveries"], 600);
    assert_eq!(second["jobs"], 100);
    assert_eq!(second["invoices"], 100);
    assert_eq!(second["receipt_lines"], 100);
    assert_eq!(before, snapshot(&t), "nothing but delivery counts changed");
    assert_eq!(
        t.count("SELECT count(*) FROM jobs WHERE deliveries <> 6"),
        0,
        "each event delivered 3 times per run"
    );
    assert!(check_finished(&t, 100).is_empty());
}

#[test]
fn a_bad_mail_failure_rate_is_refused_before_anything_is_written() {
    let t = TestDb::new();
    let args = ["demo", "--mail-failure-rate", "1.5"];
    let out = litejob(&t.path, &args);
    assert_eq!(out.status.code(), Some(2), "{}", show(&args, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mail-failure-rate"));
    assert!(!t.path.exists() && !receipts_path(&t.path).exists());
}

#[test]
fn killed_at_random_moments_then_run_again_invoices_once_and_resends_only_where_a_kill_landed() {
    let t = TestDb::new();
    let args = ["--events", "300", "--seed", "9", "--lease", "1s"];
    let mut rng = Rng::seeded();
    let (mut sleeps, mut landed) = (Vec::new(), 0);
    for _ in 0..8 {
        let ms = 5 + rng.below(300);
        sleeps.push(ms);
        let mut child = demo_child(&t.path, &args, None);
        std::thread::sleep(Duration::from_millis(ms));
        // A run that finished before the kill is fine too.
        if child.try_wait().unwrap().is_none() {
            landed += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
    }
    let done = demo_json(&t.path, &args);
    let dups = check_finished(&t, 300);
    check_duplicates_were_abandoned(&t, &dups);
    assert_eq!(
        done["duplicate_receipt_lines"],
        dups.values().map(|n| n - 1).sum::<i64>()
    );
    assert_eq!(done["dead"], 0);
    eprintln!(
        "{landed} of {} kills landed, after {sleeps:?} ms; receipt lines sent twice: {}; abandoned effect attempts: {}",
        sleeps.len(),
        dups.len(),
        t.count("SELECT count(*) FROM attempts WHERE outbox_id IS NOT NULL AND outcome = 'abandoned'")
    );
}

#[test]
fn a_crash_between_send_and_acknowledgement_resends_exactly_that_receipt() {
    let t = TestDb::new();
    // One effect thread and no mail failures: the first send writes its
    // line, then the process aborts before recording it.
    let crash = [
        "--events",
        "50",
        "--lease",
        "1s",
        "--mail-failure-rate",
        "0",
        "--effect-workers",
        "1",
    ];
    let out = demo_child(&t.path, &crash, Some("after-effect-before-ack"))
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&crash, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at after-effect-before-ack"));
    let sent_before_crash = receipt_lines(&t.path);
    assert_eq!(sent_before_crash.len(), 1, "{sent_before_crash:?}");

    let done = demo_json(&t.path, &["--events", "50", "--lease", "1s"]);
    let dups = check_finished(&t, 50);
    assert_eq!(dups.len(), 1, "{dups:?}");
    let (line, n) = dups.iter().next().unwrap();
    assert_eq!(*n, 2);
    assert!(
        sent_before_crash.contains_key(line),
        "the duplicate is the line sent at the crash"
    );
    check_duplicates_were_abandoned(&t, &dups);
    assert_eq!(done["duplicate_receipt_lines"], 1);
}

#[test]
fn two_copies_at_once_on_one_file_finish_with_the_same_result() {
    let t = TestDb::new();
    let args = ["--events", "150", "--seed", "3"];
    let mut json = args.to_vec();
    json.insert(0, "--json");
    let spawn = || {
        Command::new(support::bin())
            .arg("--db")
            .arg(&t.path)
            .arg("--json")
            .arg("demo")
            .args(args)
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let mut new_jobs = 0;
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&json, &out));
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(s["jobs"], 150, "{s}");
        assert_eq!(s["invoices"], 150, "{s}");
        assert_eq!(s["receipts_sent"], 150, "{s}");
        assert_eq!(s["receipt_lines"], 150, "{s}");
        assert_eq!(s["duplicate_receipt_lines"], 0, "{s}");
        new_jobs += s["this_run"]["new_jobs"].as_i64().unwrap();
    }
    assert_eq!(
        new_jobs, 150,
        "each event created its job once, in one copy or the other"
    );
    assert!(check_finished(&t, 150).is_empty());
    assert_eq!(t.count("SELECT sum(deliveries) FROM jobs"), 900);
}

#[test]
fn sigterm_stops_gracefully_with_a_partial_summary_and_a_rerun_finishes() {
    let t = TestDb::new();
    let args = ["--events", "600", "--lease", "1s"];
    let child = demo_child(&t.path, &args, None);
    support::wait_until(
        "demo has invoiced something",
        Duration::from_secs(30),
        || {
            t.path.exists()
                && t.sql()
                    .query_row("SELECT count(*) FROM invoices", [], |r| r.get::<_, i64>(0))
                    .map(|n| n > 0)
                    .unwrap_or(false)
        },
    );
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert_eq!(
        t.count("SELECT count(*) FROM jobs WHERE state = 'running'"),
        0,
        "running jobs finished or were released"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM outbox WHERE state = 'sending'"),
        0,
        "running sends finished or were released"
    );

    demo_json(&t.path, &args);
    let dups = check_finished(&t, 600);
    check_duplicates_were_abandoned(&t, &dups);
}

#[test]
fn a_second_signal_exits_at_once_with_130_and_a_rerun_finishes() {
    let t = TestDb::new();
    // Every send takes 3 s, so the graceful stop has running sends to wait for.
    let args = ["--events", "20", "--lease", "1s", "--send-delay", "3s"];
    let mut child = demo_child(&t.path, &args, None);
    support::wait_until("a receipt is being sent", Duration::from_secs(30), || {
        t.path.exists()
            && t.sql()
                .query_row(
                    "SELECT count(*) FROM outbox WHERE state = 'sending'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n > 0)
                .unwrap_or(false)
    });
    let pid = child.id().to_string();
    let kill = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, pid.as_str()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    kill("-TERM");
    // The first signal is being handled (the stop waits for the sends)...
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the graceful stop waits for the running sends"
    );
    // ...and the second one exits at once.
    kill("-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "a second signal exits with 130");
    // Nothing was lost: a normal run finishes the work, each receipt once
    // (the interrupted sends had not written their line yet).
    demo_json(&t.path, &["--events", "20", "--lease", "1s"]);
    let dups = check_finished(&t, 20);
    assert!(dups.is_empty(), "{dups:?}");
}
