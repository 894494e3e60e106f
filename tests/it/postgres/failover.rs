//! A failover with real parts: a primary and its synchronous standby
//! (`suite::standby`), a process working on the URL that names both
//! (`target_session_attrs=read-write`), the primary's postmaster SIGKILLed
//! midway and the standby promoted a second later. The process rides
//! through: its threads find the new primary on their own, and on it
//! every job whose enqueue returned Ok is there and succeeded, none ran
//! twice, every outbox row was sent (an effect repeated only where its
//! acknowledgement was lost with the old primary, within its recorded
//! attempts), and `litejob verify` finds nothing broken. Then the same
//! with the real `litejob demo`, which must finish with status 0.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::down::{check, Sql, Workload};
use crate::reliability::harness::{tail, wait_timeout};
use crate::suite::standby::Pair;
use crate::support::{self, now_ms};

/// `litejob --db <url> verify` must exit 0.
fn verify(url: &str) {
    let out = Command::new(support::bin())
        .args(["--db", url, "verify"])
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob verify");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        support::show(&["verify"], &out)
    );
}

/// Kills the primary, waits a second, promotes the standby; returns when
/// the new primary takes writes (ms since the epoch).
fn fail_over(pair: &Pair) -> i64 {
    pair.kill_primary();
    std::thread::sleep(Duration::from_secs(1));
    pair.promote();
    now_ms()
}

it! {
    /// Workers, effects and a producer on the URL naming a primary and its
    /// standby: the primary dies mid-run, the standby is promoted; the
    /// process carries on on the new primary by itself, and loses nothing
    /// it was told was committed, nor runs anything twice.
    #[needs(PostgresBinaries)]
    fn a_runtime_rides_through_a_failover_and_loses_no_acknowledged_job() {
        let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
        let url = pair.url();
        let mut old = Sql::new(&pair.primary.url);
        let mut w = Workload::start(&url, 200);
        w.wait("the workload is under way", Duration::from_secs(60), |_| {
            old.try_count("SELECT count(*) FROM app_rows")
                .is_ok_and(|n| n >= 300)
        });
        drop(old);
        let killed = Instant::now();
        let promoted_ms = fail_over(&pair);
        let promoted_after = killed.elapsed();
        let mut sql = Sql::new(&pair.standby.url);
        let resumed = w.wait(
            "a job finishes on the new primary",
            Duration::from_secs(60),
            |_| {
                sql.try_count(&format!(
                    "SELECT count(*) FROM jobs WHERE finished_at >= {promoted_ms}"
                ))
                .is_ok_and(|n| n > 0)
            },
        );
        let enqueued = w.wait(
            "an enqueue returns Ok on the new primary",
            Duration::from_secs(60),
            |w| w.acknowledged_since(promoted_ms) > 0,
        );
        w.wait(
            "20 enqueues return Ok on the new primary",
            Duration::from_secs(60),
            |w| w.acknowledged_since(promoted_ms) >= 20,
        );
        w.finish(&mut sql);
        let failures = w.failures();
        eprintln!(
            "failover: promoted {promoted_after:?} after the kill; a job finished {resumed:?} and \
             an enqueue returned Ok {enqueued:?} after the promotion; {} enqueues failed{}",
            failures.len(),
            failures
                .first()
                .map_or(String::new(), |f| format!(", the first: {}", f.message))
        );
        let f = check(&mut sql, &w);
        eprintln!("failover: {f:?}");
        verify(&url);
        pair.stop();
    }
}

/// The lines of a receipts file and how often each appears.
fn lines_of(path: &Path) -> HashMap<String, i64> {
    let mut seen = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        *seen.entry(line.to_string()).or_default() += 1;
    }
    seen
}

/// What a finished demo leaves, in plain SQL: one job, succeeded, one
/// invoice, one ledger row and one sent outbox row per event; one receipt
/// line per invoice, naming it and its event, sent more than once only
/// within its outbox row's recorded attempts. Returns the lines sent more
/// than once.
fn check_demo(sql: &mut Sql, receipts: &Path, events: i64) -> usize {
    let mut q = |s: &str| sql.count(s);
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
    assert_eq!(
        q("SELECT count(*) FROM processed_jobs"),
        events,
        "one ledger row per event"
    );
    assert_eq!(
        q("SELECT count(*) FROM outbox WHERE kind = 'send_receipt' AND state = 'sent'"),
        events,
        "every receipt sent"
    );
    assert_eq!(q("SELECT count(*) FROM outbox"), events);
    assert_eq!(
        q(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE job_id IS NOT NULL \
           AND outcome = 'succeeded' GROUP BY job_id HAVING count(*) > 1) d"
        ),
        0,
        "a job with two succeeded runs"
    );
    let invoice_of: HashMap<String, String> = sql
        .strings("SELECT provider_event_id || ' ' || id FROM invoices")
        .into_iter()
        .map(|l| {
            let (e, id) = l.split_once(' ').unwrap();
            (e.to_string(), id.to_string())
        })
        .collect();
    let attempts: HashMap<String, i64> = sql
        .strings("SELECT key || ' ' || attempts FROM outbox")
        .into_iter()
        .map(|l| {
            let (k, n) = l.split_once(' ').unwrap();
            (k.to_string(), n.parse().unwrap())
        })
        .collect();
    let lines = lines_of(receipts);
    assert_eq!(
        lines.len() as i64,
        events,
        "one distinct receipt line per invoice"
    );
    let mut repeated = 0;
    for (line, n) in &lines {
        let (id, evt) = line.split_once('\t').expect("<invoice id>\\t<event id>");
        assert_eq!(
            invoice_of.get(evt).map(String::as_str),
            Some(id),
            "receipt {line:?} names its event's invoice"
        );
        let tries = attempts
            .get(&format!("receipt:{evt}"))
            .copied()
            .unwrap_or(0);
        assert!(
            *n <= tries,
            "receipt {line:?} sent {n} times for {tries} recorded attempts"
        );
        if *n > 1 {
            repeated += 1;
        }
    }
    repeated
}

it! {
    /// `litejob demo` on the URL naming a primary and its standby finishes
    /// with status 0 though the primary dies midway and the standby is
    /// promoted: every event invoiced once, every receipt sent.
    #[needs(PostgresBinaries)]
    fn litejob_demo_finishes_across_a_failover() {
        let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
        let url = pair.url();
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let events = 4000;
        let mut demo = Command::new(support::bin())
            .args(["--db", &url, "--json", "demo", "--events", &events.to_string()])
            // No failed sends of its own: a receipt left unsent is then the
            // failover's doing, never a send that ran out of its attempts.
            .args(["--mail-failure-rate", "0"])
            .arg("--receipts")
            .arg(&receipts)
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .expect("spawn litejob demo");
        let output = || {
            format!(
                "stdout:\n{}\nstderr:\n{}",
                tail(&std::fs::read_to_string(dir.path().join("stdout")).unwrap_or_default()),
                tail(&std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default())
            )
        };
        let mut old = Sql::new(&pair.primary.url);
        let t0 = Instant::now();
        loop {
            if old.try_count("SELECT count(*) FROM invoices").is_ok_and(|n| n >= 200) {
                break;
            }
            if let Some(st) = demo.try_wait().unwrap() {
                panic!("the demo ended ({st}) before the failover:\n{}", output());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "the demo made no progress:\n{}",
                output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let invoiced = old.try_count("SELECT count(*) FROM invoices").unwrap_or(0);
        drop(old);
        fail_over(&pair);
        let st = wait_timeout(&mut demo, Duration::from_secs(300)).unwrap_or_else(|| {
            let _ = demo.kill();
            panic!("the demo did not finish after the failover:\n{}", output())
        });
        assert!(
            st.success(),
            "the demo failed across the failover ({st}):\n{}",
            output()
        );
        let mut sql = Sql::new(&pair.standby.url);
        assert!(
            invoiced < events,
            "the demo was done ({invoiced} invoices) before the failover"
        );
        let repeated = check_demo(&mut sql, &receipts, events);
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("stdout")).unwrap(),
        )
        .unwrap_or_else(|e| panic!("the demo's summary: {e}\n{}", output()));
        assert_eq!(summary["dead"], 0, "{summary}");
        eprintln!(
            "demo failover: {invoiced} of {events} events invoiced at the kill; {repeated} \
             receipts sent again after a lost acknowledgement"
        );
        verify(&url);
        pair.stop();
    }
}
