//! `/metrics` parses as the Prometheus text format and every sample is
//! what plain SQL counts in the queue, a file or a PostgreSQL database;
//! the backlog's age counts from when a job became due; `/healthz` says
//! whether the queue can be read (the file is there; the server answers).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{NewJob, QueueOptions};

use super::Server;
use crate::backends::{Engine, TestQueue};
use crate::both;
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

both! {
    fn metrics_parse_and_match_what_sql_counts_in_the_queue(q) {
        let queue = q.open();
        for i in 0..40 {
            let name = ["default", "mail \"urgent\""][i % 2];
            let kind = ["a", "b\\c", "d"][i % 3];
            queue
                .enqueue(NewJob::new(kind, format!("m{i}"), &i).with_queue(name))
                .unwrap();
        }
        for i in 0..5 {
            queue.enqueue(NewJob::new("a", format!("m{i}"), &i)).unwrap();
        }
        drop(queue);
        q.exec(
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
        );
        let tables = || {
            q.count(
                "SELECT CAST(sum(pg_total_relation_size(c)) AS BIGINT) FROM \
                 unnest(ARRAY['jobs', 'processed_jobs', 'outbox', 'attempts', 'schedules']) AS t(n), \
                 LATERAL (SELECT to_regclass(t.n) AS c) x",
            ) as f64
        };
        let tables_before = (q.engine == Engine::Postgres).then(tables);
        let s = Server::on(&q.location, &[]);
        let reply = s.get("/metrics");
        assert!(reply
            .header("Content-Type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"));
        let samples = parse(&reply.ok());

        // Quoted for SQL: the names hold a double quote and a backslash.
        let lit = |v: &str| format!("'{}'", v.replace('\'', "''"));
        let pairs: Vec<(String, String)> = q
            .strings("SELECT queue || '|' || kind FROM jobs GROUP BY queue, kind")
            .iter()
            .map(|p| {
                let (a, b) = p.split_once('|').unwrap();
                (a.to_string(), b.to_string())
            })
            .collect();
        assert_eq!(pairs.len(), 6);
        for (queue, kind) in &pairs {
            for state in ["waiting", "queued", "running", "succeeded", "dead", "cancelled"] {
                let want = q.count(&format!(
                    "SELECT count(*) FROM jobs WHERE queue = {} AND kind = {} AND state = '{state}'",
                    lit(queue),
                    lit(kind)
                ));
                let got = value(
                    &samples,
                    "litejob_jobs",
                    &[("queue", queue), ("kind", kind), ("state", state)],
                );
                assert_eq!(got, Some(want as f64), "{queue} {kind} {state}");
            }
        }
        for state in ["pending", "sending", "sent", "dead"] {
            let want = q.count(&format!(
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
            q.count(&format!(
                "SELECT count(*) FROM attempts a LEFT JOIN jobs j ON j.id = a.job_id \
                 LEFT JOIN outbox o ON o.id = a.outbox_id \
                 WHERE coalesce(j.kind, o.kind) = {} AND a.outcome = '{outcome}'",
                lit(kind)
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
        assert!(runs("a", "succeeded") > 0.0 && runs("mail", "succeeded") > 0.0);
        let deliveries = q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs") as f64;
        assert_eq!(
            value(&samples, "litejob_deliveries_total", &[]),
            Some(deliveries)
        );
        assert_eq!(
            value(&samples, "litejob_duplicate_deliveries_total", &[]),
            Some(5.0)
        );
        let ledger = q.count("SELECT count(*) FROM processed_jobs") as f64;
        assert_eq!(value(&samples, "litejob_ledger_rows", &[]), Some(ledger));
        let size = value(&samples, "litejob_file_bytes", &[]).unwrap();
        let wal = value(&samples, "litejob_wal_bytes", &[]).unwrap();
        match q.engine {
            Engine::Sqlite => {
                let file = std::fs::metadata(&q.location).unwrap().len() as f64;
                assert!(size > 0.0 && file > 0.0, "{size} {file}");
            }
            Engine::Postgres => {
                // The tables' size on the server, as PostgreSQL reports it
                // (autovacuum may add a map to a table meanwhile: it only
                // grows); no log of the queue's own.
                let (before, after) = (tables_before.unwrap(), tables());
                assert!(before <= size && size <= after, "{before} <= {size} <= {after}");
                assert_eq!(wal, 0.0);
            }
        }
        for queue in ["default", "mail \"urgent\""] {
            assert!(value(
                &samples,
                "litejob_oldest_queued_age_seconds",
                &[("queue", queue)]
            )
            .is_some());
        }
        // An application gets the same families from the library.
        let ro = AnyQueue::open_with(&q.location, QueueOptions::default().with_read_only(true)).unwrap();
        let lib = parse(&ro.admin().metrics().unwrap());
        let names = |v: &[Sample]| {
            v.iter()
                .map(|s| s.name.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(names(&lib), names(&samples));
    }
}

both! {
    fn the_backlog_age_counts_from_when_a_job_became_due(q) {
        let queue = q.open();
        let late = queue
            .enqueue(NewJob::new("k", "late", &1).with_queue("slow"))
            .unwrap()
            .id();
        queue
            .enqueue(
                NewJob::new("k", "later", &1)
                    .with_queue("scheduled")
                    .with_delay(std::time::Duration::from_secs(3600)),
            )
            .unwrap();
        drop(queue);
        // Due two minutes ago, created a day ago: the wait is two minutes.
        let now = now_ms();
        q.exec(&format!(
            "UPDATE jobs SET run_at = {}, created_at = {} WHERE id = {late}",
            now - 120_000,
            now - 86_400_000
        ));
        let s = Server::on(&q.location, &[]);
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
}

it! {
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
}

/// A TCP relay in front of the PostgreSQL server that the test can cut and
/// restore: to its clients, a server that goes away and comes back.
struct Relay {
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Relays connections to `listen` (`127.0.0.1:0`: any port) to
    /// `target`; returns it and the address it listens on.
    fn start(listen: &str, target: &str) -> (Relay, String) {
        let listener = TcpListener::bind(listen).expect("bind the relay");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (st, ss, target) = (stop.clone(), streams.clone(), target.to_string());
        let accept = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut all = ss.lock().unwrap();
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
                all.extend([client, server]);
            }
            // The listener goes with the thread: new connections are refused.
        });
        (
            Relay {
                stop,
                streams,
                accept: Some(accept),
            },
            addr,
        )
    }

    /// Cuts every connection and stops listening.
    fn cut(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            t.join().unwrap();
        }
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

it! {
    #[needs(Postgres)]
    fn healthz_is_503_while_the_database_server_is_out_of_reach_and_200_again_after() {
        let q = TestQueue::new(Engine::Postgres);
        q.open().enqueue(NewJob::new("k", "h", &1)).unwrap();
        // The server's host:port in the URL, reached through the relay instead.
        let authority = q
            .location
            .split('@')
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        let (relay, addr) = Relay::start("127.0.0.1:0", authority);
        let url = q.location.replacen(authority, &addr, 1);
        let s = Server::on(&url, &[]);
        let r = s.get("/healthz");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains("schema version"), "{}", r.body);
        s.get("/").ok();

        relay.cut();
        let t0 = Instant::now();
        let r = s.get("/healthz");
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(r.body.starts_with("unhealthy:"), "{}", r.body);
        eprintln!("503 after {:?}", t0.elapsed());
        // A page says the same: the server is unavailable.
        assert_eq!(s.get("/").status, 503);

        // The server is back on the same address: healthy again within one
        // step of the queue's reconnection backoff (2 s at most, and its
        // jitter), never hammered meanwhile.
        let (relay, _) = Relay::start(&addr, authority);
        let back = Instant::now();
        let mut r = s.get("/healthz");
        while r.status != 200 && back.elapsed() < Duration::from_secs(5) {
            assert_eq!(r.status, 503, "{}", r.body);
            std::thread::sleep(Duration::from_millis(100));
            r = s.get("/healthz");
        }
        assert_eq!(r.status, 200, "{}", r.body);
        eprintln!("200 again {:?} after the server's return", back.elapsed());
        relay.cut();
    }
}
