//! The server in a hostile world: clients that send half a request, or
//! pipeline requests and read no answer, hold only their own connection,
//! and the pages keep answering, with the figures of the moment, while
//! workers run on the queue (a file or a PostgreSQL database).

use crate::backends::Runtimes;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use litejob::{NewJob, Outcome};
use serde_json::Value;

use super::Server;
use crate::both;
use crate::support::{wait_until, TestDb, LONG};

it! {
    fn slow_and_greedy_clients_do_not_stall_the_others() {
        let db = TestDb::new();
        let q = db.open();
        let jobs: Vec<NewJob> = (0..500)
            .map(|i| NewJob::new("k", format!("slow-{i:04}"), &i))
            .collect();
        q.enqueue_many(jobs).unwrap();
        drop(q);
        let s = Server::start(&db, &["--timeout", "1s"]);
        // More half-sent requests than the server has handler threads.
        let mut half: Vec<TcpStream> = (0..12)
            .map(|_| {
                let mut c = TcpStream::connect(&s.addr).unwrap();
                c.write_all(b"GET /jobs HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    .unwrap();
                c
            })
            .collect();
        // Clients that pipeline requests for big pages and never read.
        let greedy: Vec<TcpStream> = (0..6)
            .map(|_| {
                let mut c = TcpStream::connect(&s.addr).unwrap();
                let one = "GET /jobs?limit=500 HTTP/1.1\r\nHost: x\r\n\r\n";
                c.write_all(one.repeat(150).as_bytes()).unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(s.get("/healthz").status, 200);
            assert_eq!(s.get("/jobs").status, 200);
        }
        // Far less than the greedy clients' answers would take to time out one
        // by one (900 answers of a second each).
        assert!(t0.elapsed() < LONG, "the others waited {:?}", t0.elapsed());
        for c in &mut half {
            let _ = c.write_all(b"1\r\n\r\n");
        }
        drop(greedy);
    }
}

both! {
    fn the_pages_keep_answering_while_workers_run_on_the_queue(q) {
        let queue = q.open();
        let s = Server::on(&q.location, &[]);
        let b = queue.runtime().poll_interval(Duration::from_millis(10));
        let b = b.handler("live", |_tx, _v: Value| Ok(Outcome::Done));
        let mut rt = b.start().unwrap();
        for round in 0..20 {
            let batch: Vec<NewJob> = (0..50)
                .map(|i| NewJob::new("live", format!("live-{round}-{i}"), &i))
                .collect();
            queue.enqueue_many(batch).unwrap();
            for path in ["/", "/jobs", "/metrics", "/failures"] {
                let r = s.get(path);
                assert_eq!(r.status, 200, "{path}: {}", r.body);
            }
        }
        wait_until("every job succeeded", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 1000
        });
        rt.stop();
        let metrics = s.get("/metrics").ok();
        assert!(
            metrics.contains("litejob_jobs{queue=\"default\",kind=\"live\",state=\"succeeded\"} 1000"),
            "{metrics}"
        );
    }
}
