//! Queue controls on both backends: a queue paused, capped or rate-limited
//! (through the library or the command) holds for every process on the
//! queue. The processes are real: this test binary re-run as children
//! (`controls_child`), each with its own runtime, on one file or one
//! database; what ran is read back from `attempts` and `jobs` with plain
//! SQL.

use crate::backends::{Runtimes, TestBuilder};
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use litejob::admin::{AnyQueue, QueueLimits, Rate};
use litejob::pg::{Client, NoTls};
use litejob::{Error, HandlerError, JobContext, NewJob, Outcome, QueueOptions};
use serde_json::Value;

use super::{Engine, TestQueue};
use crate::both;
use crate::reliability::harness::{kill, self_exe, tail};
use crate::support::{bin, now_ms, show, wait_until, LONG};

/// How often the runtimes here look for other processes' work and read
/// the controls again.
const POLL: Duration = Duration::from_millis(50);

it! {
    /// The child: a runtime with `LITEJOB_CONTROLS_WORKERS` workers (4) for
    /// kind `slow`, whose prepare step sleeps `LITEJOB_CONTROLS_SLEEP_MS`
    /// (100) and whose apply step does nothing, leased for
    /// `LITEJOB_CONTROLS_LEASE_MS` (5000). It announces itself in the ready
    /// file and runs until it is killed. Does nothing in a normal test run.
    fn controls_child() {
        let Ok(location) = std::env::var("LITEJOB_CONTROLS_DB") else {
            return;
        };
        let var = |k: &str, d: u64| -> u64 {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let _ = env_logger::builder()
            .parse_env(env_logger::Env::default().default_filter_or("litejob=warn"))
            .try_init();
        let engine = if litejob::__command::is_postgres_url(&location) {
            Engine::Postgres
        } else {
            Engine::Sqlite
        };
        let q = AnyQueue::open_with(&location, QueueOptions::default()).expect("child: open");
        let _rt = slow_runtime(
            engine,
            &q,
            var("LITEJOB_CONTROLS_WORKERS", 4) as usize,
            Duration::from_millis(var("LITEJOB_CONTROLS_SLEEP_MS", 100)),
            Duration::from_millis(var("LITEJOB_CONTROLS_LEASE_MS", 5000)),
        )
        .start()
        .expect("child: start");
        let ready = std::env::var("LITEJOB_CONTROLS_READY").expect("ready file");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(ready)
            .expect("ready file");
        std::io::Write::write_all(&mut f, format!("{}\n", std::process::id()).as_bytes()).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// A runtime whose `slow` handler sleeps `sleep` in its prepare step
/// (outside any transaction, workers in parallel) and applies nothing.
pub(super) fn slow_runtime(
    engine: Engine,
    q: &AnyQueue,
    workers: usize,
    sleep: Duration,
    lease: Duration,
) -> TestBuilder {
    let b = q
        .runtime()
        .workers(workers)
        .lease(lease)
        .poll_interval(POLL)
        // Small batches: on PostgreSQL a worker's batch is claim_ahead jobs,
        // run one after another.
        .claim_ahead(match engine {
            Engine::Sqlite => 4,
            Engine::Postgres => 2,
        })
        .grace_period(Duration::from_secs(5));
    let prepare = move |_: &JobContext, _: Value| -> Result<(), HandlerError> {
        std::thread::sleep(sleep);
        Ok(())
    };
    let _ = engine;
    b.handler_with_prepare("slow", prepare, |_tx, ()| Ok(Outcome::Done))
}

/// Child processes on the test's queue, killed on drop.
pub(super) struct Children {
    kids: Vec<Child>,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Children {
    /// Starts `n` children (with `vars` set, `SLEEP_MS` etc. without the
    /// prefix) and waits until each has its runtime running.
    pub(super) fn spawn(q: &TestQueue, n: usize, vars: &[(&str, &str)]) -> Children {
        let dir = tempfile::tempdir().unwrap();
        let (stderr, ready) = (dir.path().join("stderr"), dir.path().join("ready"));
        let kids = (0..n)
            .map(|_| {
                let err = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&stderr)
                    .unwrap();
                let mut cmd = Command::new(self_exe());
                cmd.args([
                    "--exact",
                    "backends::controls::controls_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("LITEJOB_CONTROLS_DB", &q.location)
                .env("LITEJOB_CONTROLS_READY", &ready)
                .env("RUST_LOG", "litejob=warn")
                .env_remove("LITEJOB_FAULT");
                for (k, v) in vars {
                    cmd.env(format!("LITEJOB_CONTROLS_{k}"), v);
                }
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::from(err))
                    .spawn()
                    .expect("spawn child")
            })
            .collect();
        let c = Children {
            kids,
            stderr,
            _dir: dir,
        };
        wait_until(&format!("{n} children ready"), LONG, || {
            c.check();
            std::fs::read_to_string(&ready)
                .unwrap_or_default()
                .lines()
                .count()
                >= n
        });
        c
    }

    /// Fails the test with the children's stderr if one of them failed.
    pub(super) fn check(&self) {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(
            !text.contains("panicked"),
            "a child failed:\n{}",
            tail(&text)
        );
    }

    fn pid(&self, i: usize) -> u32 {
        self.kids[i].id()
    }

    fn kill(&mut self, i: usize) {
        kill(&mut self.kids[i]);
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// Enqueues `n` jobs of kind `slow` in `queue`, in one batch.
fn enqueue(q: &AnyQueue, queue: &str, n: usize) {
    let jobs = (0..n)
        .map(|i| NewJob::new("slow", format!("{queue}-{i}"), &i).with_queue(queue))
        .collect();
    q.enqueue_many(jobs).unwrap();
}

/// Waits until `n` jobs of `queue` succeeded.
pub(super) fn wait_succeeded(q: &TestQueue, queue: &str, n: i64, kids: Option<&Children>) {
    let sql = format!("SELECT count(*) FROM jobs WHERE queue = '{queue}' AND state = 'succeeded'");
    wait_until(&format!("{n} jobs of {queue} succeeded"), LONG, || {
        if let Some(k) = kids {
            k.check();
        }
        q.count(&sql) >= n
    });
}

/// `(started_at, finished_at)` of every run of `queue`'s jobs, by start.
pub(super) fn runs(q: &TestQueue, queue: &str) -> Vec<(i64, i64)> {
    q.strings(&format!(
        "SELECT a.started_at || ',' || coalesce(a.finished_at, -1) FROM attempts a \
         JOIN jobs j ON j.id = a.job_id WHERE j.queue = '{queue}' ORDER BY a.started_at"
    ))
    .iter()
    .map(|s| {
        let (a, b) = s.split_once(',').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    })
    .collect()
}

/// The most runs under way at one instant, a run taking `[start, end)`
/// shortened by `slack` ms at each end.
pub(super) fn max_overlap(runs: &[(i64, i64)], slack: i64) -> usize {
    let mut events: Vec<(i64, i32)> = runs
        .iter()
        .filter(|&&(s, f)| f - s > 2 * slack)
        .flat_map(|&(s, f)| [(s + slack, 1), (f - slack, -1)])
        .collect();
    // Ends before starts at the same instant.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// The mean number of runs under way from the first start to the last end.
fn mean_concurrency(runs: &[(i64, i64)]) -> f64 {
    let busy: i64 = runs.iter().map(|(s, f)| f - s).sum();
    let first = runs.iter().map(|r| r.0).min().unwrap();
    let last = runs.iter().map(|r| r.1).max().unwrap();
    busy as f64 / (last - first).max(1) as f64
}

/// The most starts inside any window of `window_ms` (`[t, t + window)`).
pub(super) fn busiest_window(starts: &[i64], window_ms: i64) -> usize {
    let mut s = starts.to_vec();
    s.sort_unstable();
    (0..s.len())
        .map(|i| s[i..].iter().take_while(|&&t| t < s[i] + window_ms).count())
        .max()
        .unwrap_or(0)
}

/// Reads one count again and again, on one connection of its own, until
/// stopped; answers the largest it saw and how many reads it made.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(i64, usize)>,
}

impl Sampler {
    pub(super) fn start(q: &TestQueue, sql: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, location, sql, flag) = (
            q.engine,
            q.sql_location.clone(),
            sql.to_string(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut read: Box<dyn FnMut() -> i64> = match engine {
                Engine::Sqlite => {
                    let c = rusqlite::Connection::open_with_flags(
                        &location,
                        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                    )
                    .unwrap();
                    c.busy_timeout(Duration::from_secs(5)).unwrap();
                    Box::new(move || c.query_row(&sql, [], |r| r.get(0)).unwrap())
                }
                Engine::Postgres => {
                    let mut c = Client::connect(&location, NoTls).unwrap();
                    let st = c.prepare(&sql).unwrap();
                    Box::new(move || c.query_one(&st, &[]).unwrap().get(0))
                }
            };
            let (mut most, mut reads) = (0, 0);
            while !flag.load(Ordering::SeqCst) {
                most = most.max(read());
                reads += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (most, reads)
        });
        Sampler { stop, thread }
    }

    pub(super) fn stop(self) -> (i64, usize) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// How many runs each process (pid) made.
fn runs_per_process(q: &TestQueue, queue: &str) -> std::collections::BTreeMap<String, usize> {
    let mut per = std::collections::BTreeMap::new();
    for w in q.strings(&format!(
        "SELECT a.worker FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.queue = '{queue}'"
    )) {
        *per.entry(w.split('/').next().unwrap_or("").to_string())
            .or_default() += 1;
    }
    per
}

both! {
    /// Three processes with four workers each, one queue capped at 2: a
    /// sampler reading the running count every few milliseconds never
    /// sees more than 2, no instant has more than 2 runs under way, and
    /// the cap is used: about 2 at a time.
    fn a_cap_holds_across_three_processes_with_four_workers_each(q) {
        let queue = q.open();
        queue.admin().set_queue_limits("capped", QueueLimits::new().concurrency(2)).unwrap();
        let kids = Children::spawn(q, 3, &[("SLEEP_MS", "120"), ("WORKERS", "4")]);
        let sampler = Sampler::start(
            q,
            "SELECT count(*) FROM jobs WHERE queue = 'capped' AND state = 'running'",
        );
        enqueue(&queue, "capped", 24);
        wait_succeeded(q, "capped", 24, Some(&kids));
        let (seen, reads) = sampler.stop();
        drop(kids);
        let runs = runs(q, "capped");
        eprintln!("runs per process: {:?}", runs_per_process(q, "capped"));
        assert!(seen <= 2, "{seen} jobs of the capped queue running at once (sampled)");
        assert!(reads > 100, "only {reads} samples");
        assert_eq!(runs.len(), 24, "{runs:?}");
        // A run's times are its process's clock: the file's processes share
        // the machine's; on PostgreSQL each process reads the server's
        // through an offset it measured, a few ms off another's. (The
        // sampler above reads the database's own view, exactly.)
        let slack = if q.engine == Engine::Postgres { 20 } else { 0 };
        let most = max_overlap(&runs, slack);
        assert!(most <= 2, "{most} runs at once: {runs:?}");
        let mean = mean_concurrency(&runs);
        // Behind a transaction pooler each claim takes a few round trips
        // more, so a freed slot waits longer for its next run.
        let used = if q.pooled { 1.3 } else { 1.5 };
        assert!(mean >= used, "the cap of 2 was used {mean:.2} at a time: {runs:?}");
    }
}

both! {
    /// Two processes share a rate of 20 starts per second over several
    /// seconds: no window of one second holds more than 20 starts, and
    /// the rate is reached.
    fn a_rate_holds_in_every_window_across_two_processes(q) {
        let queue = q.open();
        let rate = Rate::new(20, Duration::from_secs(1)).unwrap();
        queue.admin().set_queue_limits("rated", QueueLimits::new().rate(rate)).unwrap();
        let kids = Children::spawn(q, 2, &[("SLEEP_MS", "5"), ("WORKERS", "4")]);
        enqueue(&queue, "rated", 70);
        wait_succeeded(q, "rated", 70, Some(&kids));
        drop(kids);
        let starts: Vec<i64> = runs(q, "rated").iter().map(|r| r.0).collect();
        eprintln!("runs per process: {:?}", runs_per_process(q, "rated"));
        assert_eq!(starts.len(), 70);
        let busiest = busiest_window(&starts, 1000);
        assert_eq!(busiest, 20, "the busiest second held {busiest} starts: {starts:?}");
    }
}

/// Runs the real binary on the test's queue; checks its exit status.
pub(super) fn litejob(q: &TestQueue, args: &[&str], status: i32) -> Output {
    let out = Command::new(bin())
        .arg("--db")
        .arg(&q.location)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob");
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    out
}

pub(super) fn json(q: &TestQueue, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_slice(&litejob(q, &a, 0).stdout).unwrap()
}

both! {
    /// `litejob queue pause` during a backlog: once it took effect (one
    /// poll interval), none of the queue's jobs starts, while the runs
    /// under way finish; `queue resume` picks the backlog up.
    fn a_pause_stops_new_starts_and_a_resume_picks_up(q) {
        let queue = q.open();
        let mut rt = slow_runtime(q.engine, &queue, 2, Duration::from_millis(60), Duration::from_secs(5))
            .start()
            .unwrap();
        enqueue(&queue, "p", 40);
        wait_succeeded(q, "p", 4, None);
        litejob(q, &["queue", "pause", "p"], 0);
        // One poll interval, and a margin for the clocks (on PostgreSQL a
        // run's start is the server's time as its process estimates it).
        let in_effect = now_ms() + POLL.as_millis() as i64 + 100;
        std::thread::sleep(Duration::from_millis(800));
        let late = q.count(&format!(
            "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.queue = 'p' AND a.started_at > {in_effect}"
        ));
        assert_eq!(late, 0, "runs started after the pause took effect");
        // The runs under way when it came finished; the rest wait.
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE queue = 'p' AND state = 'running'"), 0);
        let waiting = q.count(
            "SELECT count(*) FROM jobs WHERE queue = 'p' AND kind = 'slow' AND state = 'queued'",
        );
        assert!(waiting > 0, "the backlog ran out before the pause");
        // Enqueues still succeed (a kind nobody handles: it stays queued).
        queue.enqueue(NewJob::new("nobody", "p-late", &0).with_queue("p")).unwrap();
        let resumed_at = now_ms();
        litejob(q, &["queue", "resume", "p"], 0);
        wait_succeeded(q, "p", 40, None);
        let after = q.count(&format!(
            "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.queue = 'p' AND a.started_at >= {resumed_at}"
        ));
        assert_eq!(after, waiting, "the resumed backlog");
        rt.stop();
    }
}

both! {
    /// A process holding a capped queue's slots is SIGKILLed: nobody
    /// takes them while its leases last, and they come back once the
    /// leases expire (another process then runs the queue's jobs).
    fn a_killed_processs_slots_come_back_when_its_leases_expire(q) {
        let queue = q.open();
        queue.admin().set_queue_limits("capped", QueueLimits::new().concurrency(2)).unwrap();
        let mut kids = Children::spawn(q, 1, &[("SLEEP_MS", "60000"), ("LEASE_MS", "1500")]);
        enqueue(&queue, "capped", 4);
        let running = "SELECT count(*) FROM jobs WHERE queue = 'capped' AND state = 'running'";
        wait_until("the child holds both slots", LONG, || q.count(running) == 2);
        let pid = kids.pid(0);
        kids.kill(0);
        // No renewal after the kill: the leases end here.
        let expires = q.count(
            "SELECT min(lease_expires_at) FROM jobs WHERE queue = 'capped' AND state = 'running'",
        );
        assert!(q.strings("SELECT lease_owner FROM jobs WHERE state = 'running'")
            .iter()
            .all(|o| o.starts_with(&format!("{pid}-"))));
        let mut rt = slow_runtime(q.engine, &queue, 4, Duration::from_millis(20), Duration::from_secs(5))
            .start()
            .unwrap();
        wait_succeeded(q, "capped", 4, None);
        rt.stop();
        let me = std::process::id();
        let first = q.count(&format!(
            "SELECT min(a.started_at) FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.queue = 'capped' AND a.worker LIKE '{me}/%'"
        ));
        assert!(first > expires, "a run started at {first}, before the first lease ended at {expires}");
        let mine = q.count(&format!(
            "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id \
             WHERE j.queue = 'capped' AND a.worker LIKE '{me}/%' AND a.outcome = 'succeeded'"
        ));
        assert_eq!(mine, 4, "all four ran here, the killed process's two after their leases");
    }
}

both! {
    /// The command refuses a cap of 0, a negative one, garbage, a rate of
    /// no starts or an empty window, and `set` with nothing to set: exit 2,
    /// nothing written. A queue with no jobs yet takes controls with
    /// `--create`; `queues --json` shows them; clearing every one leaves no
    /// row.
    fn the_queue_commands_refuse_bad_values_and_write_nothing(q) {
        litejob(q, &["init"], 0);
        for bad in [
            &["queue", "set", "mail", "--concurrency", "0"][..],
            &["queue", "set", "mail", "--concurrency", "-1"],
            &["queue", "set", "mail", "--concurrency", "two"],
            &["queue", "set", "mail", "--rate", "5/0s"],
            &["queue", "set", "mail", "--rate", "0/1s"],
            &["queue", "set", "mail", "--rate", "-5/1s"],
            &["queue", "set", "mail", "--rate", "5"],
            &["queue", "set", "mail", "--rate", "5/1x"],
            &["queue", "set", "mail", "--rate", "5/1s", "--concurrency", "0"],
            &["queue", "set", "mail"],
            &["queue", "pause", ""],
            &["queue", "pause"],
        ] {
            litejob(q, bad, 2);
        }
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0);
        litejob(q, &["queue", "pause", "mail", "--create"], 0);
        litejob(q, &["queue", "set", "mail", "--concurrency", "3", "--rate", "100/1m"], 0);
        litejob(q, &["enqueue", "send", "--key", "k1", "--queue", "other"], 0);
        let v = json(q, &["queues"]);
        let all = v["queues"].as_array().unwrap();
        assert_eq!(all.len(), 2, "{v}");
        let mail = &all[0];
        assert_eq!(mail["name"], "mail");
        assert_eq!(mail["paused"], true);
        assert_eq!(mail["concurrency"], 3);
        assert_eq!(mail["rate"], "100/1m");
        assert_eq!(mail["rate_limit"], 100);
        assert_eq!(mail["rate_window_ms"], 60_000);
        assert_eq!(mail["started_in_window"], 0);
        assert_eq!((mail["queued"].as_i64(), mail["running"].as_i64()), (Some(0), Some(0)));
        assert!(mail["updated_at"].is_i64());
        let other = &all[1];
        assert_eq!((other["name"].as_str(), other["queued"].as_i64()), (Some("other"), Some(1)));
        assert_eq!((other["paused"].as_bool(), other["rate"].is_null()), (Some(false), true));
        // A limit not named is kept; `none` clears one.
        let set = json(q, &["queue", "set", "mail", "--concurrency", "none"]);
        assert_eq!((set["concurrency"].is_null(), set["rate"].as_str()), (true, Some("100/1m")));
        litejob(q, &["queue", "resume", "mail"], 0);
        litejob(q, &["queue", "set", "mail", "--rate", "none"], 0);
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0);
    }
}

both! {
    /// The library's controls: a cap of 0 refused with nothing written; an
    /// enqueue to a paused queue succeeds and its job waits, which
    /// `explain` says and `stats` shows.
    fn a_paused_queue_takes_enqueues_and_explain_says_why_its_job_waits(q) {
        let queue = q.open();
        let e = queue.admin().set_queue_limits("mail", QueueLimits::new().concurrency(0)).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0);
        queue.admin().pause_queue("mail").unwrap();
        queue.admin().set_queue_limits("mail", QueueLimits::new().concurrency(2))
            .unwrap();
        queue
            .enqueue(NewJob::new("slow", "evt_1", &1).with_queue("mail"))
            .unwrap();
        let mut rt = slow_runtime(q.engine, &queue, 2, Duration::ZERO, Duration::from_secs(5))
            .start()
            .unwrap();
        std::thread::sleep(POLL * 4);
        let e = queue.admin().explain("evt_1").unwrap();
        assert_eq!(e.job.as_ref().unwrap().state, litejob::JobState::Queued);
        let c = e.queue_control.expect("the queue's controls");
        assert!(c.paused && c.concurrency == Some(2));
        let text = String::from_utf8(litejob(q, &["explain", "evt_1"], 0).stdout).unwrap();
        assert!(text.contains("waiting: queue mail is paused"), "{text}");
        assert!(text.contains("at most 2 running"), "{text}");
        let v = json(q, &["explain", "evt_1"]);
        assert!(v["waiting"].as_str().unwrap().contains("paused"), "{v}");
        assert_eq!(v["queue_control"]["concurrency"], 2);
        let s = queue.admin().stats().unwrap();
        assert_eq!(s.queue_controls.len(), 1);
        assert_eq!((s.queue_controls[0].queued, s.queue_controls[0].paused), (1, true));
        let stats = String::from_utf8(litejob(q, &["stats"], 0).stdout).unwrap();
        assert!(stats.contains("mail paused; at most 2 running"), "{stats}");
        assert_eq!(json(q, &["stats"])["queue_controls"][0]["name"], "mail");
        queue.admin().resume_queue("mail").unwrap();
        wait_succeeded(q, "mail", 1, None);
        assert!(queue.admin().explain("evt_1").unwrap().queue_control.is_some());
        rt.stop();
    }
}

both! {
    /// A database as the previous version left it (schema 2, before queue
    /// controls) is migrated when opened: its jobs are kept and the
    /// controls work on it.
    fn a_version_2_database_gains_the_queue_controls_and_keeps_its_jobs(q) {
        let (full, marker) = match q.engine {
            Engine::Sqlite => (include_str!("../../../schema.sql"), "\n-- queues: the controls"),
            Engine::Postgres => (include_str!("../../../postgres.sql"), "\n-- queues: the controls"),
        };
        let v2 = &full[..full.find(marker).expect("the queue controls' section")];
        let insert = "INSERT INTO jobs (kind, idempotency_key, payload, run_at, created_at) \
                      VALUES ('slow', 'from-v2', '{}', 0, 0);";
        match q.engine {
            Engine::Sqlite => q.exec(&format!("{v2}\nPRAGMA user_version = 2;\n{insert}")),
            Engine::Postgres => q.exec(&format!(
                "{v2}\nINSERT INTO litejob_schema (version) VALUES (2);\n{insert}"
            )),
        }
        let queue = q.open();
        assert_eq!(queue.schema_version().unwrap(), litejob::admin::SCHEMA_VERSION);
        assert!(queue.job_by_key("from-v2").unwrap().is_some());
        queue.admin().pause_queue("default").unwrap();
        let all = queue.admin().queue_controls().unwrap();
        assert_eq!((all.len(), all[0].paused, all[0].queued), (1, true, 1));
    }
}
