//! `/metrics` parses as the Prometheus text format and every sample is
//! what plain SQL counts in the file; the backlog's age counts from when a
//! job became due; `/healthz` says whether the file can be read.

use std::collections::BTreeMap;

use litejob::{NewJob, Queue};

use super::Server;
use crate::support::{now_ms, TestDb};

/// One sample: its family, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parser of the text exposition format, strict about what litejob
/// writes: every sample's family was announced by `# HELP` and `# TYPE`
/// (gauge or counter) first, label values are quoted with `\\`, `\"` and
/// `\n` escapes, values are numbers.
fn parse(text: &str) -> Vec<Sample> {
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(kind == "gauge" || kind == "counter", "{line}");
            typed.insert(name.to_string(), kind.to_string());
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "stray line {line:?}"
        );
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(
            typed.contains_key(name) && helped.iter().any(|h| h == name),
            "{name} undeclared"
        );
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next().unwrap();
                match c {
                    '}' => {
                        rest = &r[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        assert_eq!(chars.next().unwrap().1, '"', "{line}");
                        let mut v = String::new();
                        loop {
                            match chars.next().unwrap().1 {
                                '\\' => match chars.next().unwrap().1 {
                                    'n' => v.push('\n'),
                                    c @ ('\\' | '"') => v.push(c),
                                    c => panic!("bad escape \\{c} in {line}"),
                                },
                                '"' => break,
                                c => v.push(c),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), v);
                    }
                    c => key.push(c),
                }
            }
        }
        let value: f64 = rest
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("value in {line:?}"));
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn metrics_parse_and_match_what_sql_counts_in_the_file() {
    let db = TestDb::new();
    let q = db.open();
    for i in 0..40 {
        let queue = ["default", "mail \"urgent\""][i % 2];
        let kind = ["a", "b\\c", "d"][i % 3];
        q.enqueue(NewJob::new(kind, format!("m{i}"), &i).with_queue(queue))
            .unwrap();
    }
    for i in 0..5 {
        q.enqueue(NewJob::new("a", format!("m{i}"), &i)).unwrap();
    }
    drop(q);
    db.sql()
        .execute_batch(
            "UPDATE jobs SET state = 'succeeded', attempts = 1, finished_at = 9 WHERE id % 4 = 0;
             UPDATE jobs SET state = 'dead', finished_at = 9, last_error = 'x' WHERE id % 5 = 0 AND state = 'queued';
             INSERT INTO processed_jobs (key, completed_at, job_id) SELECT idempotency_key, 9, id FROM jobs WHERE state = 'succeeded';
             INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome)
               SELECT id, 1, idempotency_key, 'w', 1, 2, CASE state WHEN 'dead' THEN 'failed' ELSE 'succeeded' END
               FROM jobs WHERE state IN ('succeeded', 'dead');
             INSERT INTO outbox (key, kind, payload, state, attempts, job_id, next_attempt_at, created_at, sent_at)
               SELECT 'o' || id, 'mail', '{}', CASE WHEN id % 8 = 0 THEN 'sent' ELSE 'pending' END, 1, id, 0, 1,
                      CASE WHEN id % 8 = 0 THEN 2 END FROM jobs WHERE state = 'succeeded';
             INSERT INTO attempts (outbox_id, attempt, key, worker, started_at, finished_at, outcome)
               SELECT id, 1, key, 'w', 1, 2, 'succeeded' FROM outbox WHERE state = 'sent';",
        )
        .unwrap();
    let s = Server::start(&db, &[]);
    let reply = s.get("/metrics");
    assert!(reply
        .header("Content-Type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let samples = parse(&reply.ok());

    let c = db.sql();
    let mut st = c
        .prepare("SELECT queue, kind FROM jobs GROUP BY 1, 2")
        .unwrap();
    let pairs: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(pairs.len(), 6);
    for (queue, kind) in &pairs {
        for state in ["queued", "running", "succeeded", "dead", "cancelled"] {
            let want: i64 = c
                .query_row(
                    "SELECT count(*) FROM jobs WHERE queue = ?1 AND kind = ?2 AND state = ?3",
                    (queue, kind, state),
                    |r| r.get(0),
                )
                .unwrap();
            let got = value(
                &samples,
                "litejob_jobs",
                &[("queue", queue), ("kind", kind), ("state", state)],
            );
            assert_eq!(got, Some(want as f64), "{queue} {kind} {state}");
        }
    }
    for state in ["pending", "sending", "sent", "dead"] {
        let want = db.count(&format!(
            "SELECT count(*) FROM outbox WHERE state = '{state}'"
        ));
        assert_eq!(
            value(
                &samples,
                "litejob_outbox",
                &[("kind", "mail"), ("state", state)]
            ),
            Some(want as f64)
        );
    }
    let runs = |kind: &str, outcome: &str| {
        db.count(&format!(
            "SELECT count(*) FROM attempts a LEFT JOIN jobs j ON j.id = a.job_id \
             LEFT JOIN outbox o ON o.id = a.outbox_id \
             WHERE coalesce(j.kind, o.kind) = '{}' AND a.outcome = '{outcome}'",
            kind.replace('\'', "''")
        )) as f64
    };
    for kind in ["a", "b\\c", "d", "mail"] {
        for outcome in ["succeeded", "failed", "running"] {
            assert_eq!(
                value(
                    &samples,
                    "litejob_attempts",
                    &[("kind", kind), ("outcome", outcome)]
                ),
                Some(runs(kind, outcome)),
                "{kind} {outcome}"
            );
        }
    }
    let deliveries = db.count("SELECT sum(deliveries) FROM jobs") as f64;
    assert_eq!(
        value(&samples, "litejob_deliveries_total", &[]),
        Some(deliveries)
    );
    assert_eq!(
        value(&samples, "litejob_duplicate_deliveries_total", &[]),
        Some(5.0)
    );
    let ledger = db.count("SELECT count(*) FROM processed_jobs") as f64;
    assert_eq!(value(&samples, "litejob_ledger_rows", &[]), Some(ledger));
    let file = std::fs::metadata(&db.path).unwrap().len() as f64;
    assert!(value(&samples, "litejob_file_bytes", &[]).unwrap() > 0.0 && file > 0.0);
    assert!(value(&samples, "litejob_wal_bytes", &[]).is_some());
    for queue in ["default", "mail \"urgent\""] {
        assert!(value(
            &samples,
            "litejob_oldest_queued_age_seconds",
            &[("queue", queue)]
        )
        .is_some());
    }
    // An application gets the same families from the library.
    let lib = parse(&Queue::open_read_only(&db.path).unwrap().metrics().unwrap());
    let names = |v: &[Sample]| {
        v.iter()
            .map(|s| s.name.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(names(&lib), names(&samples));
}

#[test]
fn the_backlog_age_counts_from_when_a_job_became_due() {
    let db = TestDb::new();
    let q = db.open();
    let late = q
        .enqueue(NewJob::new("k", "late", &1).with_queue("slow"))
        .unwrap()
        .id();
    q.enqueue(
        NewJob::new("k", "later", &1)
            .with_queue("scheduled")
            .with_delay(std::time::Duration::from_secs(3600)),
    )
    .unwrap();
    drop(q);
    // Due two minutes ago, created a day ago: the wait is two minutes.
    let now = now_ms();
    db.sql()
        .execute(
            "UPDATE jobs SET run_at = ?1, created_at = ?2 WHERE id = ?3",
            (now - 120_000, now - 86_400_000, late),
        )
        .unwrap();
    let s = Server::start(&db, &[]);
    let samples = parse(&s.get("/metrics").ok());
    let slow = value(
        &samples,
        "litejob_oldest_queued_age_seconds",
        &[("queue", "slow")],
    )
    .unwrap();
    assert!((120.0..200.0).contains(&slow), "{slow}");
    let scheduled = value(
        &samples,
        "litejob_oldest_queued_age_seconds",
        &[("queue", "scheduled")],
    );
    assert_eq!(scheduled, Some(0.0), "a job due in an hour is not late");
}

#[test]
fn healthz_is_200_while_the_file_reads_and_503_once_it_is_gone() {
    let db = TestDb::new();
    db.open().enqueue(NewJob::new("k", "h", &1)).unwrap();
    let s = Server::start(&db, &[]);
    let r = s.get("/healthz");
    assert_eq!(r.status, 200, "{}", r.body);
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    let r = s.get("/healthz");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("gone"), "{}", r.body);
}
