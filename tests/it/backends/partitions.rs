//! Partitioned limits on both backends: a cap or a rate per partition of a
//! queue holds for every process on it, counted from the rows; a
//! partition at its limit never holds back another, and a partition with
//! thousands of jobs waiting does not starve one with a single job. The
//! processes are real (the controls' children); what ran is read back from
//! `attempts` and `jobs` with plain SQL.

use std::collections::BTreeMap;
use std::time::Duration;

use litejob::admin::{QueueLimits, Rate};
use litejob::NewJob;

use super::controls::{
    busiest_window, json, litejob, max_overlap, runs, slow_runtime, wait_succeeded, Children,
    Sampler,
};
use super::{Engine, TestQueue};
use crate::both;

/// Enqueues `per` jobs of kind `slow` in each of `partitions` partitions of
/// `queue` (`p0`, `p1`, …), the partitions interleaved, in one batch.
fn enqueue_partitioned(q: &litejob::admin::AnyQueue, queue: &str, partitions: usize, per: usize) {
    let jobs = (0..per)
        .flat_map(|i| {
            (0..partitions).map(move |p| {
                NewJob::new("slow", format!("{queue}-p{p}-{i}"), &i)
                    .with_queue(queue)
                    .with_partition(format!("p{p}"))
            })
        })
        .collect();
    q.enqueue_many(jobs).unwrap();
}

/// Every run of `queue`'s jobs by partition: `(attempt id, job id, started,
/// finished)`, in the order the runs started.
fn runs_by_partition(q: &TestQueue, queue: &str) -> BTreeMap<String, Vec<(i64, i64, i64, i64)>> {
    let mut by = BTreeMap::<String, Vec<(i64, i64, i64, i64)>>::new();
    for row in q.strings(&format!(
        "SELECT j.partition_key || ',' || a.id || ',' || j.id || ',' || a.started_at || ',' || \
         coalesce(a.finished_at, -1) FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE j.queue = '{queue}' ORDER BY a.id"
    )) {
        let f: Vec<&str> = row.split(',').collect();
        let n = |i: usize| f[i].parse::<i64>().unwrap();
        by.entry(f[0].to_string())
            .or_default()
            .push((n(1), n(2), n(3), n(4)));
    }
    by
}

both! {
    /// Three processes with four workers each; 50 partitions in a queue
    /// capped at 1 per partition and 50 in one capped at 2. A sampler
    /// reading the busiest partition every few milliseconds never sees one
    /// over its cap, no instant has more runs of a partition under way than
    /// its cap, a one-at-a-time partition's jobs start in their order, and
    /// many partitions run at once (a full one blocks no other).
    fn a_partition_cap_holds_across_three_processes_with_four_workers_each(q) {
        let queue = q.open();
        let admin = queue.admin();
        admin.set_queue_limits("one", QueueLimits::new().partition_concurrency(1)).unwrap();
        admin.set_queue_limits("two", QueueLimits::new().partition_concurrency(2)).unwrap();
        let kids = Children::spawn(q, 3, &[("SLEEP_MS", "25"), ("WORKERS", "4")]);
        let sampler = Sampler::start(
            q,
            "SELECT coalesce(max(n - cap), -1) FROM (SELECT count(*) AS n, \
             CASE queue WHEN 'one' THEN 1 ELSE 2 END AS cap FROM jobs \
             WHERE state = 'running' AND queue IN ('one', 'two') \
             GROUP BY queue, partition_key) t",
        );
        enqueue_partitioned(&queue, "one", 50, 4);
        enqueue_partitioned(&queue, "two", 50, 4);
        wait_succeeded(q, "one", 200, Some(&kids));
        wait_succeeded(q, "two", 200, Some(&kids));
        let (over, reads) = sampler.stop();
        drop(kids);
        assert!(over <= 0, "a partition ran {over} over its cap (sampled)");
        assert!(reads > 20, "only {reads} samples");
        // A run's times are its process's clock: on PostgreSQL each process
        // reads the server's through an offset it measured, a few ms off.
        let slack = if q.engine == Engine::Postgres { 20 } else { 0 };
        for (queue, cap) in [("one", 1), ("two", 2)] {
            let parts = runs_by_partition(q, queue);
            assert_eq!(parts.len(), 50, "{queue}: {parts:?}");
            for (p, runs) in &parts {
                assert_eq!(runs.len(), 4, "{queue}/{p}: {runs:?}");
                let spans: Vec<(i64, i64)> = runs.iter().map(|r| (r.2, r.3)).collect();
                let most = max_overlap(&spans, slack);
                assert!(most <= cap, "{queue}/{p}: {most} runs at once: {runs:?}");
                if cap == 1 {
                    let jobs: Vec<i64> = runs.iter().map(|r| r.1).collect();
                    let mut sorted = jobs.clone();
                    sorted.sort_unstable();
                    assert_eq!(jobs, sorted, "{queue}/{p} started out of order");
                }
            }
        }
        // Other partitions ran beside a busy one: the twelve workers were
        // used well over one at a time.
        let all = runs(q, "one");
        let busy: i64 = all.iter().map(|(s, f)| f - s).sum();
        let span = all.iter().map(|r| r.1).max().unwrap() - all.iter().map(|r| r.0).min().unwrap();
        let mean = busy as f64 / span.max(1) as f64;
        assert!(mean >= 3.0, "one-at-a-time partitions ran {mean:.2} at a time");
    }
}

both! {
    /// A partition with thousands of jobs waiting at its cap of 1, and one
    /// job of another partition enqueued after them all: the lone job
    /// starts within a few claims, not after the thousands.
    fn a_partition_with_thousands_waiting_does_not_starve_a_partition_with_one(q) {
        let queue = q.open();
        queue
            .admin()
            .set_queue_limits("shops", QueueLimits::new().partition_concurrency(1))
            .unwrap();
        for chunk in 0..5 {
            let jobs = (0..1000)
                .map(|i| {
                    NewJob::new("slow", format!("big-{chunk}-{i}"), &i)
                        .with_queue("shops")
                        .with_partition("shop:big")
                })
                .collect();
            queue.enqueue_many(jobs).unwrap();
        }
        queue
            .enqueue(NewJob::new("slow", "lone", &0).with_queue("shops").with_partition("shop:lone"))
            .unwrap();
        let mut rt = slow_runtime(q.engine, &queue, 4, Duration::from_millis(20), Duration::from_secs(5))
            .start()
            .unwrap();
        let lone = "SELECT count(*) FROM jobs WHERE idempotency_key = 'lone' AND state = 'succeeded'";
        crate::support::wait_until("the lone job ran", crate::support::LONG, || q.count(lone) == 1);
        rt.stop();
        let before = q.count(
            "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.partition_key = 'shop:big' AND a.id < \
             (SELECT min(a2.id) FROM attempts a2 JOIN jobs j2 ON j2.id = a2.job_id \
              WHERE j2.idempotency_key = 'lone')",
        );
        assert!(before <= 3, "{before} runs of the big partition started before the lone job");
    }
}

both! {
    /// Two processes share a rate of 4 starts per second in each of three
    /// partitions: no second holds more than 4 starts of one partition,
    /// and each partition reaches its rate (the others' starts do not use
    /// it up).
    fn a_partition_rate_holds_in_every_window_across_two_processes(q) {
        let queue = q.open();
        let rate = Rate::new(4, Duration::from_secs(1)).unwrap();
        queue
            .admin()
            .set_queue_limits("api", QueueLimits::new().partition_rate(rate))
            .unwrap();
        let kids = Children::spawn(q, 2, &[("SLEEP_MS", "5"), ("WORKERS", "4")]);
        enqueue_partitioned(&queue, "api", 3, 10);
        wait_succeeded(q, "api", 30, Some(&kids));
        drop(kids);
        let parts = runs_by_partition(q, "api");
        assert_eq!(parts.len(), 3);
        for (p, runs) in &parts {
            let starts: Vec<i64> = runs.iter().map(|r| r.2).collect();
            assert_eq!(starts.len(), 10);
            let busiest = busiest_window(&starts, 1000);
            assert_eq!(busiest, 4, "the busiest second of {p} held {busiest} starts: {starts:?}");
        }
    }
}

both! {
    /// The command end to end: `enqueue --partition`, `queue set
    /// --partition-concurrency/--partition-rate`, and a partition at its
    /// cap seen by `explain` (the waiting line), `queues` (the partition at
    /// its limit), `show` and `--json` (the job's partition) and `/metrics`.
    fn the_commands_set_partition_limits_and_show_a_partition_at_its_limit(q) {
        litejob(q, &["init"], 0);

        litejob(q, &["queue", "set", "api", "--create", "--partition-concurrency", "1"], 0);
        for key in ["a", "b"] {
            litejob(q, &["enqueue", "sync", "--key", key, "--queue", "api", "--partition", "shop:42"], 0);
        }
        litejob(q, &["enqueue", "sync", "--key", "c", "--queue", "api", "--partition", "shop:7"], 0);
        // Job a runs (its lease held far ahead): shop:42 is at its cap.
        q.exec(
            "UPDATE jobs SET state = 'running', lease_owner = 'elsewhere', \
             lease_expires_at = 9000000000000 WHERE idempotency_key = 'a'",
        );
        let explain = litejob(q, &["explain", "b"], 0);
        let text = String::from_utf8_lossy(&explain.stdout);
        assert!(
            text.contains("waiting: partition shop:42 of queue api is at its limit (1 running)"),
            "{text}"
        );
        let other = String::from_utf8_lossy(&litejob(q, &["explain", "c"], 0).stdout).to_string();
        assert!(!other.contains("waiting:"), "another partition is held too: {other}");
        let v = json(q, &["explain", "b"]);
        assert_eq!(v["job"]["partition"], "shop:42", "{v}");
        assert_eq!(v["queue_control"]["partitions_at_limit"][0]["key"], "shop:42", "{v}");
        let v = json(q, &["queues"]);
        let api = &v["queues"][0];
        assert_eq!((api["name"].as_str(), api["partition_concurrency"].as_i64()), (Some("api"), Some(1)), "{v}");
        assert_eq!(api["partitions_at_limit_count"], 1, "{v}");
        assert_eq!(api["partitions_at_limit"][0]["running"], 1, "{v}");
        let table = String::from_utf8_lossy(&litejob(q, &["queues"], 0).stdout).to_string();
        assert!(table.contains("1: shop:42 (1 running)"), "{table}");
        let c = q.count("SELECT id FROM jobs WHERE idempotency_key = 'c'").to_string();
        let show = String::from_utf8_lossy(&litejob(q, &["show", &c], 0).stdout).to_string();
        assert!(show.lines().any(|l| l.contains("partition") && l.contains("shop:7")), "{show}");
        // What `litejob serve` answers at /metrics.
        let metrics = q.open().admin().metrics().unwrap();
        assert!(metrics.contains("litejob_partitions_at_limit{queue=\"api\"} 1"), "{metrics}");
        // A rate per partition, then `none` clears each limit.
        let v = json(q, &["queue", "set", "api", "--partition-rate", "2/1s"]);
        assert_eq!((v["partition_rate"].as_str(), v["partition_concurrency"].as_i64()), (Some("2/1s"), Some(1)), "{v}");
        let v = json(q, &["queue", "set", "api", "--partition-concurrency", "none", "--partition-rate", "none"]);
        assert!(v["partition_rate"].is_null() && v["partition_concurrency"].is_null(), "{v}");
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0, "a queue left with no limit keeps no row");
    }
}

both! {
    /// An empty partition key, one over 200 bytes, and a partition cap or
    /// rate of 0 are refused with exit 2, and nothing is written.
    fn bad_partition_input_is_refused_and_writes_nothing(q) {

        litejob(q, &["init"], 0);
        litejob(q, &["enqueue", "sync", "--key", "ok", "--queue", "api"], 0);
        let long = "p".repeat(201);
        for bad in [
            &["enqueue", "sync", "--key", "k1", "--queue", "api", "--partition", ""][..],
            &["enqueue", "sync", "--key", "k2", "--queue", "api", "--partition", &long],
            &["queue", "set", "api", "--partition-concurrency", "0"],
            &["queue", "set", "api", "--partition-rate", "0/1s"],
            &["queue", "set", "api", "--partition-rate", "2/0s"],
        ] {
            let out = litejob(q, bad, 2);
            assert!(!out.stderr.is_empty(), "no message for {bad:?}");
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1);
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0);
        // The longest key accepted is 200 bytes.
        let longest = "p".repeat(200);
        litejob(q, &["enqueue", "sync", "--key", "k3", "--queue", "api", "--partition", &longest], 0);
    }
}
