//! The server down for twenty seconds under load, with real parts: a
//! throwaway cluster of the test's own, stopped (`pg_ctl stop -m fast`)
//! while a child process (this test binary, [`workload`]: a runtime with
//! four workers and an effect, and a producer) works on it, then started
//! again on the same port. Measured from outside while it is down: the
//! child's `connect(2)` calls (strace) and its CPU (`/proc`). A process
//! that waits for its server must not hammer it, nor burn a core: a few
//! attempts a second in all, threads asleep in between. Once the server is
//! back the work resumes within about one step of the reconnection's
//! backoff, and afterwards every job whose enqueue returned Ok is there
//! and succeeded, none run twice, every outbox row sent.
//!
//! The workload and its checks serve the failover tests too
//! (`failover.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::pg::{Client, NoTls};
use litejob::postgres::Postgres;
use litejob::{Backoff, NewJob, Outcome, Queue, QueueOptions};
use serde_json::{json, Value};

use crate::backends::child::append_line;
use crate::reliability::harness::{self_exe, tail, wait_timeout};
use crate::suite::cluster;
use crate::support::now_ms;

/// Plain SQL on one server, as an operator would run it: one connection,
/// opened again when it broke (the server restarted).
pub(super) struct Sql {
    url: String,
    client: Option<Client>,
}

impl Sql {
    pub(super) fn new(url: &str) -> Sql {
        Sql {
            url: url.to_string(),
            client: None,
        }
    }

    fn with<R>(
        &mut self,
        mut f: impl FnMut(&mut Client) -> Result<R, litejob::pg::Error>,
    ) -> Result<R, litejob::pg::Error> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(Client::connect(&self.url, NoTls)?);
        }
        let c = self.client.as_mut().expect("just connected");
        match f(c) {
            Err(_) if c.is_closed() => {
                let c = self.client.insert(Client::connect(&self.url, NoTls)?);
                f(c)
            }
            other => other,
        }
    }

    /// A single integer, or the error (the server away, the table not
    /// there yet).
    pub(super) fn try_count(&mut self, sql: &str) -> Result<i64, litejob::pg::Error> {
        self.with(|c| c.query_one(sql, &[]))
            .map(|r| r.get::<_, Option<i64>>(0).unwrap_or(0))
    }

    /// A single integer from `sql`.
    pub(super) fn count(&mut self, sql: &str) -> i64 {
        self.try_count(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// One text column of every row of `sql`.
    pub(super) fn strings(&mut self, sql: &str) -> Vec<String> {
        self.with(|c| c.query(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
    }

    pub(super) fn exec(&mut self, sql: &str) {
        self.with(|c| c.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Jobs queued or running and outbox rows pending or sending.
const BUSY: &str = "SELECT (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')) \
     + (SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending'))";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

child! {
    /// The workload, on the database `LITEJOB_WL_DB`, with its files in
    /// `LITEJOB_WL_DIR`: a runtime (four workers, two effect threads) runs
    /// `work` jobs (a prepare step of 10 ms, then the row `(key)` in the app
    /// table `app_rows` and the outbox row `mail:<key>`; the `mail` effect
    /// appends its row's key to `effects`); the backlog
    /// (`LITEJOB_WL_BACKLOG` jobs `b-<i>`) is enqueued first, then a
    /// producer enqueues `p-<i>` every 10 ms until the file `quiet`
    /// appears. Each enqueue's answer is a line: `ok` gets
    /// `key<TAB>ms` (when it returned, ms since the epoch), `failed` gets
    /// `transient<TAB>took ms<TAB>ms<TAB>message`. Once the producer has
    /// stopped it writes `quiet.done`; when `stop` appears the runtime
    /// stops and the process exits.
    fn workload() {
        let _ = env_logger::builder()
            .parse_env(env_logger::Env::default().default_filter_or("litejob=warn"))
            .try_init();
        let dir = PathBuf::from(var("LITEJOB_WL_DIR"));
        let url = var("LITEJOB_WL_DB");
        let backlog: usize = var("LITEJOB_WL_BACKLOG").parse().expect("a number");
        let queue = Queue::<Postgres>::open_with(url.as_str(), QueueOptions::default())
            .expect("workload: open the queue");
        let effects = dir.join("effects");
        let quick = Backoff::default()
            .with_base(Duration::from_millis(20))
            .with_max(Duration::from_millis(200))
            .with_jitter(0.0);
        let mut rt = queue
            .runtime()
            .workers(4)
            .effect_workers(2)
            .poll_interval(Duration::from_millis(100))
            .backoff(quick)
            .effect_backoff(quick)
            .outbox_max_retries(50)
            .handler_with_prepare(
                "work",
                |ctx, _: Value| {
                    std::thread::sleep(Duration::from_millis(10));
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&key])?;
                    tx.outbox("mail", &format!("mail:{key}"), &key)?;
                    Ok(Outcome::Done)
                },
            )
            .effect("mail", move |e, _key: String| {
                append_line(&effects, &e.key);
                Ok(())
            })
            .start()
            .expect("workload: start the runtime");
        let (ok, failed) = (dir.join("ok"), dir.join("failed"));
        let jobs = (0..backlog)
            .map(|i| NewJob::new("work", format!("b-{i}"), &json!({})))
            .collect();
        queue.enqueue_many(jobs).expect("workload: enqueue the backlog");
        let answered = now_ms();
        for i in 0..backlog {
            append_line(&ok, &format!("b-{i}\t{answered}"));
        }
        let quiet = Arc::new(AtomicBool::new(false));
        let producer = {
            let (queue, quiet) = (queue.clone(), quiet.clone());
            std::thread::Builder::new()
                .name("test-producer".into())
                .spawn(move || {
                    let mut i = 0;
                    while !quiet.load(Ordering::SeqCst) {
                        let key = format!("p-{i}");
                        i += 1;
                        let t0 = Instant::now();
                        let r = queue.enqueue(NewJob::new("work", key.as_str(), &json!({})));
                        let took = t0.elapsed().as_millis();
                        match r {
                            Ok(_) => append_line(&ok, &format!("{key}\t{}", now_ms())),
                            Err(e) => append_line(
                                &failed,
                                &format!(
                                    "{}\t{took}\t{}\t{}",
                                    e.is_transient(),
                                    now_ms(),
                                    e.to_string().replace(['\n', '\t'], " ")
                                ),
                            ),
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                })
                .unwrap()
        };
        while !dir.join("quiet").exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
        quiet.store(true, Ordering::SeqCst);
        producer.join().expect("workload: the producer panicked");
        std::fs::write(dir.join("quiet.done"), b"").unwrap();
        while !dir.join("stop").exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
        rt.stop();
        eprintln!("workload: stopped");
    }
}

/// An enqueue that failed, as the workload recorded it.
#[derive(Debug)]
pub(super) struct Failure {
    pub transient: bool,
    /// How long the call took before it failed.
    pub took_ms: u64,
    /// When it failed, ms since the epoch.
    pub at_ms: i64,
    pub message: String,
}

/// The [`workload`] child and its files.
pub(super) struct Workload {
    dir: tempfile::TempDir,
    child: Child,
    finished: bool,
}

impl Workload {
    /// Creates the app table on `url` and starts the child on it.
    pub(super) fn start(url: &str, backlog: usize) -> Workload {
        Sql::new(url).exec("CREATE TABLE IF NOT EXISTS app_rows (key text NOT NULL)");
        let dir = tempfile::tempdir().unwrap();
        let err = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("stderr"))
            .unwrap();
        let mut cmd = Command::new(self_exe());
        crate::suite::as_child(&mut cmd, "postgres::down::workload")
            .env("LITEJOB_WL_DB", url)
            .env("LITEJOB_WL_DIR", dir.path())
            .env("LITEJOB_WL_BACKLOG", backlog.to_string())
            .env("RUST_LOG", "litejob=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(err));
        let child = cmd.spawn().expect("spawn the workload");
        Workload {
            dir,
            child,
            finished: false,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The last lines of the child's stderr.
    pub(super) fn stderr(&self) -> String {
        tail(&std::fs::read_to_string(self.file("stderr")).unwrap_or_default())
    }

    /// How many lines of the child's stderr contain `text`.
    pub(super) fn stderr_lines_with(&self, text: &str) -> usize {
        std::fs::read_to_string(self.file("stderr"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }

    /// Panics, with the child's stderr, if it has exited.
    pub(super) fn assert_alive(&mut self, when: &str) {
        if let Some(st) = self.child.try_wait().unwrap() {
            panic!("the workload exited {when} ({st}):\n{}", self.stderr());
        }
    }

    /// Keys whose enqueue returned Ok, with when it returned.
    pub(super) fn acknowledged(&self) -> Vec<(String, i64)> {
        std::fs::read_to_string(self.file("ok"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (k, ms) = l.split_once('\t')?;
                Some((k.to_string(), ms.parse().ok()?))
            })
            .collect()
    }

    /// Enqueues acknowledged at or after `ms`.
    pub(super) fn acknowledged_since(&self, ms: i64) -> usize {
        self.acknowledged().iter().filter(|(_, t)| *t >= ms).count()
    }

    /// Enqueues that failed.
    pub(super) fn failures(&self) -> Vec<Failure> {
        std::fs::read_to_string(self.file("failed"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(4, '\t');
                Some(Failure {
                    transient: f.next()? == "true",
                    took_ms: f.next()?.parse().ok()?,
                    at_ms: f.next()?.parse().ok()?,
                    message: f.next()?.to_string(),
                })
            })
            .collect()
    }

    /// Effect calls, by outbox key.
    fn effect_calls(&self) -> HashMap<String, i64> {
        let mut m = HashMap::new();
        for l in std::fs::read_to_string(self.file("effects"))
            .unwrap_or_default()
            .lines()
        {
            *m.entry(l.to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Waits until `f` holds of the workload (checked every 50 ms) for at most `timeout`;
    /// how long it took. Panics with the child's stderr on a timeout or if
    /// the child exits meanwhile.
    pub(super) fn wait(
        &mut self,
        label: &str,
        timeout: Duration,
        mut f: impl FnMut(&Workload) -> bool,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            if f(self) {
                return t0.elapsed();
            }
            self.assert_alive(&format!("while waiting for: {label}"));
            assert!(
                t0.elapsed() <= timeout,
                "timed out after {timeout:?} waiting for: {label}\nthe workload's stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the producer, waits until every job and outbox row on `sql`
    /// is done, stops the runtime; the child must exit 0.
    pub(super) fn finish(&mut self, sql: &mut Sql) {
        std::fs::write(self.file("quiet"), b"").unwrap();
        let done = self.file("quiet.done");
        self.wait("the producer stops", Duration::from_secs(120), |_| {
            done.exists()
        });
        self.wait(
            "every job and outbox row done",
            Duration::from_secs(180),
            |_| sql.try_count(BUSY).is_ok_and(|n| n == 0),
        );
        std::fs::write(self.file("stop"), b"").unwrap();
        let st = wait_timeout(&mut self.child, Duration::from_secs(60)).unwrap_or_else(|| {
            let _ = self.child.kill();
            panic!("the workload did not stop:\n{}", self.stderr())
        });
        self.finished = true;
        assert!(
            st.success(),
            "the workload failed ({st}):\n{}",
            self.stderr()
        );
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What [`check`] counted (printed with the test's output).
#[derive(Debug, Default)]
#[allow(dead_code)]
pub(super) struct Figures {
    pub jobs: i64,
    /// Enqueues that returned Ok.
    pub acknowledged: usize,
    pub failed_enqueues: usize,
    /// Effect calls beyond the first (an acknowledgement lost with the
    /// connection: the effect ran, its `sent` did not commit).
    pub repeated_effects: i64,
    /// Runs recorded `abandoned` (their lease ran out).
    pub abandoned_runs: i64,
    /// Claims given back uncharged.
    pub released_runs: i64,
}

/// After the workload finished, in plain SQL on `sql`: every key whose
/// enqueue returned Ok has its job, and every job succeeded; one app row
/// and one ledger row per job (no run counted twice); no job with two
/// succeeded runs, no attempt left running; one outbox row per job, sent,
/// its effect called at least once and at most once per attempt; every
/// failed enqueue failed with a transient error; no panic in the child.
pub(super) fn check(sql: &mut Sql, w: &Workload) -> Figures {
    let ok = w.acknowledged();
    let failures = w.failures();
    let jobs: HashSet<String> = sql
        .strings("SELECT idempotency_key FROM jobs")
        .into_iter()
        .collect();
    let lost: Vec<&str> = ok
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !jobs.contains(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "{} jobs whose enqueue returned Ok are missing: {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
    let unfinished = sql.strings(
        "SELECT idempotency_key || ' ' || state || ' ' || coalesce(last_error, '') FROM jobs \
         WHERE state <> 'succeeded' ORDER BY id LIMIT 20",
    );
    assert!(
        unfinished.is_empty(),
        "jobs that did not succeed: {unfinished:?}"
    );
    let n = jobs.len() as i64;
    let doubled = sql
        .strings("SELECT key FROM app_rows GROUP BY key HAVING count(*) > 1 ORDER BY key LIMIT 20");
    assert!(
        doubled.is_empty(),
        "a key's work committed twice: {doubled:?}"
    );
    assert_eq!(
        sql.count("SELECT count(*) FROM app_rows"),
        n,
        "one app row per job"
    );
    assert_eq!(
        sql.count("SELECT count(*) FROM processed_jobs"),
        n,
        "one ledger row per job"
    );
    assert_eq!(
        sql.count(
            "SELECT count(*) FROM processed_jobs p WHERE NOT EXISTS \
             (SELECT 1 FROM app_rows a WHERE a.key = p.key)"
        ),
        0,
        "a ledger row without its work"
    );
    assert_eq!(
        sql.count(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE job_id IS NOT NULL \
             AND outcome = 'succeeded' GROUP BY job_id HAVING count(*) > 1) d"
        ),
        0,
        "a job with two succeeded runs"
    );
    assert_eq!(
        sql.count("SELECT count(*) FROM attempts WHERE outcome = 'running'"),
        0,
        "an attempt left running"
    );
    let outbox: HashMap<String, (String, i64)> = sql
        .strings("SELECT key || '|' || state || '|' || attempts FROM outbox")
        .into_iter()
        .map(|l| {
            let mut p = l.split('|');
            let key = p.next().unwrap().to_string();
            let state = p.next().unwrap().to_string();
            (key, (state, p.next().unwrap().parse().unwrap()))
        })
        .collect();
    assert_eq!(outbox.len() as i64, n, "one outbox row per job");
    let calls = w.effect_calls();
    let mut repeated = 0;
    for k in &jobs {
        let key = format!("mail:{k}");
        let (state, attempts) = outbox
            .get(&key)
            .unwrap_or_else(|| panic!("job {k}: no outbox row"));
        assert_eq!(state, "sent", "outbox row {key}");
        let c = calls.get(&key).copied().unwrap_or(0);
        assert!(
            c >= 1 && c <= *attempts,
            "outbox row {key}: its effect was called {c} times for {attempts} recorded attempts"
        );
        repeated += c - 1;
    }
    let stray: Vec<&String> = calls.keys().filter(|k| !outbox.contains_key(*k)).collect();
    assert!(
        stray.is_empty(),
        "effects called for no outbox row: {stray:?}"
    );
    let for_good: Vec<&Failure> = failures.iter().filter(|f| !f.transient).collect();
    assert!(
        for_good.is_empty(),
        "{} enqueues failed with an error that is not transient, the first: {:?}",
        for_good.len(),
        for_good.first()
    );
    assert_eq!(w.stderr_lines_with("panicked"), 0, "{}", w.stderr());
    Figures {
        jobs: n,
        acknowledged: ok.len(),
        failed_enqueues: failures.len(),
        repeated_effects: repeated,
        abandoned_runs: sql.count(
            "SELECT count(*) FROM attempts WHERE job_id IS NOT NULL AND outcome = 'abandoned'",
        ),
        released_runs: sql.count("SELECT count(*) FROM attempts WHERE outcome = 'released'"),
    }
}

/// One thread's or the whole process's user and system time, in clock
/// ticks, from a `stat` file of `/proc`; and its name.
fn ticks(stat: &Path) -> Option<(String, u64)> {
    let text = std::fs::read_to_string(stat).ok()?;
    let (head, rest) = text.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    // After the name: state (field 3), …, utime (14), stime (15).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// Each thread's ticks, by thread id.
fn thread_ticks(pid: u32) -> HashMap<String, (String, u64)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_string_lossy().into_owned();
            Some((tid, ticks(&e.path().join("stat"))?))
        })
        .collect()
}

/// The kernel's clock ticks a second (`getconf CLK_TCK`).
fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The CPU process `pid` used over the next `d`, all threads together,
/// as a share of one core; and the threads that used any, by name.
pub(super) fn cpu_share(pid: u32, d: Duration) -> (f64, BTreeMap<String, f64>) {
    let stat = PathBuf::from(format!("/proc/{pid}/stat"));
    let (_, before) = ticks(&stat).expect("the process's /proc stat");
    let threads_before = thread_ticks(pid);
    let t0 = Instant::now();
    std::thread::sleep(d);
    let (_, after) = ticks(&stat).expect("the process's /proc stat");
    let elapsed = t0.elapsed().as_secs_f64() * ticks_per_second();
    let mut by_name = BTreeMap::new();
    for (tid, (name, t)) in thread_ticks(pid) {
        let b = threads_before.get(&tid).map_or(0, |(_, b)| *b);
        if t > b {
            *by_name.entry(name).or_insert(0.0) += (t - b) as f64 / elapsed * 100.0;
        }
    }
    ((after - before) as f64 / elapsed * 100.0, by_name)
}

/// The `connect(2)` calls of process `pid`, all threads, over the next
/// `d`, traced by strace; and by thread name.
pub(super) fn connect_calls(pid: u32, d: Duration) -> (usize, BTreeMap<String, usize>) {
    crate::suite::Need::Strace.require();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace");
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=connect", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace");
    std::thread::sleep(d);
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let st = wait_timeout(&mut strace, Duration::from_secs(30)).unwrap_or_else(|| {
        let _ = strace.kill();
        panic!("strace did not detach")
    });
    let trace = std::fs::read_to_string(&out).unwrap_or_default();
    if !st.success() && trace.is_empty() {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(strace.stderr.as_mut().unwrap(), &mut err);
        panic!("strace -p {pid} failed ({st}): {err}");
    }
    let names = thread_ticks(pid);
    let mut by_name = BTreeMap::new();
    let mut n = 0;
    for l in trace.lines() {
        let Some((tid, call)) = l.split_once(' ') else {
            continue;
        };
        if !call.trim_start().starts_with("connect(") {
            continue;
        }
        n += 1;
        let name = names
            .get(tid)
            .map_or_else(|| format!("thread {tid}"), |(name, _)| name.clone());
        *by_name.entry(name).or_insert(0) += 1;
    }
    (n, by_name)
}

it! {
    /// A server down for 20 s under load (a restart, a crash, a network
    /// cut that refuses connections): while it is down the process makes
    /// at most a few connection attempts a second in all and uses almost
    /// no CPU; enqueues fail at once with a transient error; once it is
    /// back the work resumes within about one backoff step, and nothing
    /// whose enqueue returned Ok is lost or run twice.
    #[needs(PostgresBinaries, Strace)]
    fn a_server_down_for_20_s_is_waited_for_quietly_and_the_work_resumes_when_it_returns() {
        let c = cluster::start().unwrap_or_else(|e| panic!("{e}"));
        let mut sql = Sql::new(&c.url);
        let mut w = Workload::start(&c.url, 200);
        w.wait("the workload is under way", Duration::from_secs(60), |_| {
            sql.try_count("SELECT count(*) FROM app_rows")
                .is_ok_and(|n| n >= 300)
        });
        let pid = w.pid();
        let down_ms = now_ms();
        c.stop_server("fast").unwrap_or_else(|e| panic!("{e}"));
        let down_at = Instant::now();
        // The threads have met the closed connections and gone to waiting.
        std::thread::sleep(Duration::from_secs(2));
        w.assert_alive("while the server was down");
        let (cpu, cpu_threads) = cpu_share(pid, Duration::from_secs(5));
        let window = Duration::from_secs(5);
        let (connects, connect_threads) = connect_calls(pid, window);
        let connects_per_s = connects as f64 / window.as_secs_f64();
        w.assert_alive("while the server was down");
        std::thread::sleep(Duration::from_secs(20).saturating_sub(down_at.elapsed()));
        // The port was free a moment ago; a connection attempt of the
        // process's own may hold it for an instant (a TCP connect to
        // oneself), so the start is tried again.
        let mut started = c.start_server();
        for _ in 0..10 {
            if started.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            started = c.start_server();
        }
        started.unwrap_or_else(|e| panic!("{e}"));
        let up_ms = now_ms();
        let down_for = down_at.elapsed();
        let minute = Duration::from_secs(60);
        let resumed = w.wait("a job finishes after the server is back", minute, |_| {
            sql.try_count(&format!("SELECT count(*) FROM jobs WHERE finished_at >= {up_ms}"))
                .is_ok_and(|n| n > 0)
        });
        let enqueued = w.wait("an enqueue returns Ok after the server is back", minute, |w| {
            w.acknowledged_since(up_ms) > 0
        });
        w.wait("20 enqueues return Ok after the server is back", minute, |w| {
            w.acknowledged_since(up_ms) >= 20
        });
        w.finish(&mut sql);
        let during: Vec<Failure> = w
            .failures()
            .into_iter()
            .filter(|f| f.at_ms >= down_ms && f.at_ms <= up_ms)
            .collect();
        let slowest = during.iter().map(|f| f.took_ms).max().unwrap_or(0);
        eprintln!(
            "down for {down_for:?}: {connects} connect calls in {window:?} \
             ({connects_per_s:.1}/s), by thread: {connect_threads:?}; CPU {cpu:.1} % of a core, \
             by thread: {cpu_threads:?}; {} enqueues failed while down, the slowest after \
             {slowest} ms; back: a job finished {resumed:?} and an enqueue returned Ok \
             {enqueued:?} after the server was",
            during.len()
        );
        if let Some(f) = during.first() {
            eprintln!("down: the first failed enqueue said: {}", f.message);
        }
        let f = check(&mut sql, &w);
        eprintln!("down: {f:?}");
        let mut wrong = Vec::new();
        if connects_per_s > 5.0 {
            wrong.push(format!(
                "{connects_per_s:.1} connection attempts a second while the server was down \
                 (at most 5 expected), by thread: {connect_threads:?}"
            ));
        }
        if cpu > 5.0 {
            wrong.push(format!(
                "{cpu:.1} % of a core used while the server was down (below 5 % expected), \
                 by thread: {cpu_threads:?}"
            ));
        }
        if during.is_empty() {
            wrong.push("no enqueue failed while the server was down".into());
        }
        if slowest > 5_000 {
            wrong.push(format!(
                "an enqueue took {slowest} ms to fail while the server was down (a transient \
                 error at once expected)"
            ));
        }
        if let Some(f) = during.iter().find(|f| !f.message.contains("database server")) {
            wrong.push(format!("an enqueue failed with an unclear message: {}", f.message));
        }
        for (what, d) in [("a job finished", resumed), ("an enqueue returned Ok", enqueued)] {
            if d > Duration::from_secs(10) {
                wrong.push(format!(
                    "{what} only {d:?} after the server was back (within 10 s expected)"
                ));
            }
        }
        c.stop();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
