//! Child processes on either backend, standing in for several machines'
//! processes on one database: this test binary run again as the child
//! entry point `backend_child`, on the database `LITEJOB_BCHILD_DB`. A
//! child either enqueues a set of keys as fast as it can once a start
//! file appears (dedup races), or runs a runtime with the crash tests'
//! handlers (or, with `LITEJOB_BCHILD_MODE=workflows` or `steps`, the
//! workflow or durable-step crash test's) until the queue is idle or killed. The parent checks
//! the invariants with plain SQL afterwards ([`check_invariants`]).

use crate::backends::{Runtimes, TestBuilder};
use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Backoff, Enqueued, NewJob, Outcome, QueueOptions};
use serde_json::{json, Value};

use super::{Engine, TestQueue};
use crate::reliability::harness::{self_exe, tail, wait_timeout};

/// Appends one line in one `write(2)` with `O_APPEND`: lines from several
/// processes never mix.
pub(crate) fn append_line(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(format!("{line}\n").as_bytes()).expect("append");
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_u64(name: &str, default: u64) -> u64 {
    env(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

child! {
    /// The child's entry point.
    fn backend_child() {
        let db = env("LITEJOB_BCHILD_DB").expect("LITEJOB_BCHILD_DB");
        let _ = env_logger::builder()
            .parse_env(env_logger::Env::default().default_filter_or("litejob=warn"))
            .try_init();
        let queue = AnyQueue::open_with(&db, QueueOptions::default()).expect("child: open");
        match env("LITEJOB_BCHILD_MODE").as_deref() {
            Some("enqueue") => enqueue_child(&queue),
            Some("workflows") => work_child(&queue, crate::reliability::workflows::runtime),
            Some("steps") => work_child(&queue, crate::reliability::steps::runtime),
            _ => work_child(&queue, runtime),
        }
    }
}

/// Waits for the start file, then enqueues `work` jobs with the keys
/// `<prefix>-0 .. <prefix>-<n-1>`, one call each, in an order of its own;
/// writes `key<TAB>new|dup<TAB>id` per answer to the answers file.
fn enqueue_child(queue: &AnyQueue) {
    let go = PathBuf::from(env("LITEJOB_BCHILD_GO").expect("start file"));
    let prefix = env("LITEJOB_BCHILD_PREFIX").expect("prefix");
    let n = env_u64("LITEJOB_BCHILD_KEYS", 200);
    let mut rng = crate::support::Rng::new(env_u64("LITEJOB_BCHILD_SEED", 1));
    let mut order: Vec<u64> = (0..n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let t0 = Instant::now();
    while !go.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "child: no start file"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut out = String::new();
    for i in order {
        let key = format!("{prefix}-{i}");
        let r = loop {
            match queue.enqueue(NewJob::new("work", key.as_str(), &json!({ "k": key }))) {
                // Busy past the timeout under eight writers: the key makes
                // a retry safe, and it counts as another delivery.
                Err(e) if e.is_busy() => continue,
                other => break other.expect("child: enqueue"),
            }
        };
        let (what, id) = match r {
            Enqueued::New(id) => ("new", id),
            Enqueued::Duplicate(id) => ("dup", id),
        };
        out.push_str(&format!("{key}\t{what}\t{id}\n"));
    }
    std::fs::write(env("LITEJOB_BCHILD_OUT").expect("answers file"), out).unwrap();
}

/// The files a work child shares with the parent.
#[derive(Debug, Clone)]
pub struct Files {
    /// One line per prepare step started (the job's key).
    pub starts: PathBuf,
    /// One line per effect call (the outbox row's key).
    pub effects: PathBuf,
    /// The children's stderr, appended.
    pub stderr: PathBuf,
}

/// The handlers, on either backend:
/// - `work`: a prepare step (its start recorded), then the row `(key)` in
///   the app table `effects` and the outbox row `mail:<key>`;
/// - `quick`: the same with no prepare step (its start recorded inside
///   the transaction);
/// - `doomed`: writes its row, then discards itself: must end `dead` with
///   no row;
/// - the `mail` effect records its call.
pub fn runtime(queue: &AnyQueue, files: &Files, lease: Duration, workers: usize) -> TestBuilder {
    let quick = Backoff::default()
        .with_base(Duration::from_millis(20))
        .with_max(Duration::from_millis(200))
        .with_jitter(0.0);
    let effects = files.effects.clone();
    let b = queue
        .runtime()
        .workers(workers)
        .effect_workers(2)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        .grace_period(Duration::from_secs(5))
        .backoff(quick)
        .effect_backoff(quick)
        .outbox_max_retries(50)
        .effect("mail", move |e, _key: String| {
            append_line(&effects, &e.key);
            Ok(())
        });
    let (s1, s2, s3) = (
        files.starts.clone(),
        files.starts.clone(),
        files.starts.clone(),
    );
    let start = move |path: &Path, key: &str| append_line(path, key);
    match b {
        TestBuilder::Sqlite(b) => TestBuilder::Sqlite(
            b.handler_with_prepare(
                "work",
                move |ctx, _: Value| {
                    together(true);
                    start(&s1, &ctx.key);
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.execute("INSERT INTO effects (key) VALUES (?1)", [&key])?;
                    tx.outbox("mail", &format!("mail:{key}"), &key)?;
                    Ok(Outcome::Done)
                },
            )
            .handler("quick", move |tx, _: Value| {
                let key = tx.job().key.clone();
                together(false);
                start(&s2, &key);
                tx.execute("INSERT INTO effects (key) VALUES (?1)", [&key])?;
                tx.outbox("mail", &format!("mail:{key}"), &key)?;
                Ok(Outcome::Done)
            })
            .handler_with_prepare(
                "doomed",
                move |ctx, _: Value| {
                    start(&s3, &ctx.key);
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.execute("INSERT INTO effects (key) VALUES (?1)", [&key])?;
                    Ok(Outcome::Discard("made to fail".into()))
                },
            ),
        ),
        TestBuilder::Postgres(b) => TestBuilder::Postgres(
            b.handler_with_prepare(
                "work",
                move |ctx, _: Value| {
                    together(true);
                    start(&s1, &ctx.key);
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.execute("INSERT INTO effects (key) VALUES ($1)", &[&key])?;
                    tx.outbox("mail", &format!("mail:{key}"), &key)?;
                    Ok(Outcome::Done)
                },
            )
            .handler("quick", move |tx, _: Value| {
                let key = tx.job().key.clone();
                together(false);
                start(&s2, &key);
                tx.execute("INSERT INTO effects (key) VALUES ($1)", &[&key])?;
                tx.outbox("mail", &format!("mail:{key}"), &key)?;
                Ok(Outcome::Done)
            })
            .handler_with_prepare(
                "doomed",
                move |ctx, _: Value| {
                    start(&s3, &ctx.key);
                    Ok(ctx.key.clone())
                },
                |tx, key: String| {
                    tx.execute("INSERT INTO effects (key) VALUES ($1)", &[&key])?;
                    Ok(Outcome::Discard("made to fail".into()))
                },
            ),
        ),
    }
}

/// With `LITEJOB_BCHILD_TOGETHER=<file>`, each process writes its pid to
/// the file at its first run, and a `work` run's prepare step (outside the
/// job's transaction) waits, 60 s at most, until two processes have: one
/// process cannot drain the backlog before the other one runs a job,
/// however much later that one was started or scheduled. A process holds
/// at most two claims in flight, far fewer than such a backlog.
fn together(wait: bool) {
    static ARRIVED: std::sync::Once = std::sync::Once::new();
    let Some(file) = env("LITEJOB_BCHILD_TOGETHER") else {
        return;
    };
    ARRIVED.call_once(|| append_line(Path::new(&file), &std::process::id().to_string()));
    let t0 = Instant::now();
    while wait && t0.elapsed() < Duration::from_secs(60) {
        let arrived = std::fs::read_to_string(&file).unwrap_or_default();
        if arrived.lines().count() >= 2 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Jobs queued or running and outbox rows pending or sending.
pub const BUSY: &str = "SELECT (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')) \
     + (SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending'))";

/// Runs the handlers `build` registers (the crash tests' [`runtime`], or
/// another mode's) until the queue is idle (`LITEJOB_BCHILD_UNTIL=idle`)
/// or forever (until killed).
fn work_child(queue: &AnyQueue, build: fn(&AnyQueue, &Files, Duration, usize) -> TestBuilder) {
    let files = Files {
        starts: env("LITEJOB_BCHILD_STARTS").expect("starts").into(),
        effects: env("LITEJOB_BCHILD_EFFECTS").expect("effects").into(),
        stderr: PathBuf::new(),
    };
    let lease = Duration::from_millis(env_u64("LITEJOB_BCHILD_LEASE_MS", 800));
    let workers = env_u64("LITEJOB_BCHILD_WORKERS", 2) as usize;
    let forever = env("LITEJOB_BCHILD_UNTIL").as_deref() == Some("forever");
    let mut rt = build(queue, &files, lease, workers)
        .start()
        .expect("child: start");
    let db = env("LITEJOB_BCHILD_DB").unwrap();
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if forever {
            continue;
        }
        if busy(&db) == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "child: not idle after 300 s"
        );
    }
    rt.stop();
    eprintln!("child: idle, exiting");
}

/// [`BUSY`] on the database at `location`.
fn busy(location: &str) -> i64 {
    if litejob::__command::is_postgres_url(location) {
        let mut c = litejob::pg::Client::connect(location, litejob::pg::NoTls).expect("connect");
        c.query_one(BUSY, &[]).expect("busy").get(0)
    } else {
        let c = rusqlite::Connection::open(location).expect("open");
        c.busy_timeout(Duration::from_secs(30)).unwrap();
        c.query_row(BUSY, [], |r| r.get(0)).expect("busy")
    }
}

/// A crash test's database and the files its children share.
pub struct Env {
    pub q: TestQueue,
    pub files: Files,
    _dir: tempfile::TempDir,
}

impl Env {
    /// A fresh database on `engine` with the app table.
    pub fn new(engine: Engine) -> Env {
        let q = TestQueue::new(engine);
        drop(q.open());
        q.exec("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL)");
        let dir = tempfile::tempdir().unwrap();
        let files = Files {
            starts: dir.path().join("starts.txt"),
            effects: dir.path().join("effects.txt"),
            stderr: dir.path().join("children.stderr"),
        };
        Env {
            q,
            files,
            _dir: dir,
        }
    }

    /// A work child with extra environment variables (`LITEJOB_FAULT`,
    /// `LITEJOB_BCHILD_UNTIL`, …).
    pub fn spawn(&self, vars: &[(&str, String)]) -> Child {
        let err = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.files.stderr)
            .unwrap();
        let mut cmd = child_command(&self.q.location);
        cmd.env("LITEJOB_BCHILD_STARTS", &self.files.starts)
            .env("LITEJOB_BCHILD_EFFECTS", &self.files.effects)
            .stdout(Stdio::null())
            .stderr(Stdio::from(err));
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn child")
    }

    /// The children's stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.files.stderr).unwrap_or_default()
    }

    /// Runs a clean child until the queue is idle; it must exit 0.
    pub fn run_clean(&self) {
        self.run_clean_with(&[]);
    }

    /// [`Env::run_clean`] with more variables (another mode's handlers).
    pub fn run_clean_with(&self, vars: &[(&str, String)]) {
        let mut all = vec![("LITEJOB_BCHILD_UNTIL", "idle".to_string())];
        all.extend(vars.iter().map(|(k, v)| (*k, v.clone())));
        let mut c = self.spawn(&all);
        let st = wait_timeout(&mut c, Duration::from_secs(180)).unwrap_or_else(|| {
            let _ = c.kill();
            panic!(
                "the clean child did not finish:\n{}",
                tail(&self.stderr_text())
            )
        });
        assert!(
            st.success(),
            "the clean child failed ({st:?}):\n{}",
            tail(&self.stderr_text())
        );
    }
}

/// This test binary, to run only [`backend_child`] on `location`.
pub fn child_command(location: &str) -> Command {
    let mut cmd = Command::new(self_exe());
    crate::suite::as_child(&mut cmd, "backends::child::backend_child")
        .env("LITEJOB_BCHILD_DB", location)
        .env("RUST_LOG", "litejob=warn")
        .env_remove("LITEJOB_BCHILD_MODE")
        .stdin(Stdio::null());
    cmd
}

fn count_lines(path: &Path) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for l in std::fs::read_to_string(path).unwrap_or_default().lines() {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

/// What [`check_invariants`] counted.
#[derive(Debug, Default)]
pub struct Figures {
    pub jobs: i64,
    pub succeeded: i64,
    /// Effect calls beyond the first (kills between an effect and its ack).
    pub repeated_effects: i64,
    /// Runs recorded `abandoned` (kills during a run).
    pub abandoned_runs: i64,
    /// Healthy jobs that ended `dead` after three unlucky kills.
    pub falsely_poisoned: i64,
}

/// After a final clean run, in plain SQL: every key whose enqueue returned
/// has one job; each succeeded job has one ledger row and one app row
/// (app rows == ledger rows), one outbox row, sent, whose effect ran at
/// least once and at most once per attempt; a dead job left no row; no
/// outbox row without its job's ledger row; no job with two succeeded
/// runs; no attempt left running; a prepare step started only for a
/// recorded run.
pub fn check_invariants(env: &Env, enqueued: &[String]) -> Figures {
    let q = &env.q;
    let mut f = Figures::default();
    assert_eq!(q.count(BUSY), 0, "work left after the clean run");
    let starts = count_lines(&env.files.starts);
    let calls = count_lines(&env.files.effects);
    let rows = |sql: &str| -> HashMap<String, Vec<String>> {
        let mut m: HashMap<String, Vec<String>> = HashMap::new();
        for line in q.strings(sql) {
            let mut parts = line.split('|').map(str::to_string);
            let key = parts.next().unwrap();
            m.insert(key, parts.collect());
        }
        m
    };
    let jobs = rows(
        "SELECT idempotency_key || '|' || kind || '|' || state || '|' || abandoned || '|' || \
         (SELECT count(*) FROM attempts a WHERE a.job_id = j.id) || '|' || coalesce(last_error, '') \
         FROM jobs j",
    );
    let per_key = |sql: &str| -> HashMap<String, i64> {
        let mut m = HashMap::new();
        for line in q.strings(sql) {
            let (k, n) = line.rsplit_once('|').unwrap();
            m.insert(k.to_string(), n.parse().unwrap());
        }
        m
    };
    let app = per_key("SELECT key || '|' || count(*) FROM effects GROUP BY key");
    let ledger = per_key("SELECT key || '|' || count(*) FROM processed_jobs GROUP BY key");
    let outbox = rows("SELECT key || '|' || state || '|' || attempts FROM outbox");
    for key in enqueued {
        let j = jobs.get(key).unwrap_or_else(|| panic!("job {key} lost"));
        let (kind, state, abandoned) = (&j[0], &j[1], &j[2]);
        let runs: i64 = j[3].parse().unwrap();
        let err = j[4..].join("|");
        f.jobs += 1;
        let started = starts.get(key).copied().unwrap_or(0);
        assert!(
            started <= runs,
            "job {key}: its handler started {started} times but {runs} runs are recorded"
        );
        let app_rows = app.get(key).copied().unwrap_or(0);
        let ledger_rows = ledger.get(key).copied().unwrap_or(0);
        match (kind.as_str(), state.as_str()) {
            ("work" | "quick", "succeeded") => {
                f.succeeded += 1;
                assert_eq!(
                    (app_rows, ledger_rows),
                    (1, 1),
                    "job {key}: app and ledger rows"
                );
                let o = outbox
                    .get(&format!("mail:{key}"))
                    .unwrap_or_else(|| panic!("job {key}: no outbox row"));
                assert_eq!(o[0], "sent", "job {key}: its outbox row");
                let attempts: i64 = o[1].parse().unwrap();
                let n = calls.get(&format!("mail:{key}")).copied().unwrap_or(0);
                assert!(
                    n >= 1 && n <= attempts,
                    "job {key}: effect called {n} times for {attempts} attempts"
                );
                f.repeated_effects += n - 1;
            }
            ("work" | "quick", "dead") => {
                assert!(
                    err.contains("abandoned 3 times") && abandoned.parse::<i64>().unwrap() >= 3,
                    "job {key} dead for another reason than a poison pill: {err}"
                );
                assert_eq!((app_rows, ledger_rows), (0, 0), "dead job {key}");
                f.falsely_poisoned += 1;
            }
            ("doomed", "dead") => {
                assert_eq!((app_rows, ledger_rows), (0, 0), "dead job {key}");
            }
            _ => panic!("job {key} of kind {kind} ended {state}: {err}"),
        }
    }
    assert_eq!(
        q.count("SELECT count(*) FROM effects"),
        q.count("SELECT count(*) FROM processed_jobs"),
        "app rows == ledger rows"
    );
    assert_eq!(
        q.count(
            "SELECT count(*) FROM outbox o WHERE NOT EXISTS \
             (SELECT 1 FROM processed_jobs p WHERE 'mail:' || p.key = o.key)"
        ),
        0,
        "outbox rows without their job's ledger row"
    );
    assert_eq!(
        q.count(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE job_id IS NOT NULL AND outcome = 'succeeded' \
             GROUP BY job_id HAVING count(*) > 1) d"
        ),
        0,
        "a job with two succeeded runs"
    );
    assert_eq!(
        q.count("SELECT count(*) FROM attempts WHERE outcome = 'running'"),
        0
    );
    f.abandoned_runs =
        q.count("SELECT count(*) FROM attempts WHERE job_id IS NOT NULL AND outcome = 'abandoned'");
    let stderr = env.stderr_text();
    let panics: Vec<&str> = stderr.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "panics in the children:\n{}",
        panics.join("\n")
    );
    f
}

/// Enqueues `n` jobs of `kind` with keys `<prefix>-<from..>` in one batch;
/// returns the keys.
pub fn enqueue_n(q: &AnyQueue, kind: &str, prefix: &str, from: usize, n: usize) -> Vec<String> {
    let keys: Vec<String> = (from..from + n).map(|i| format!("{prefix}-{i}")).collect();
    let jobs = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            NewJob::new(kind, k.clone(), &json!({ "k": k })).with_priority(i as i64 % 3 - 1)
        })
        .collect();
    let r = q.enqueue_many(jobs).expect("enqueue batch");
    assert!(r.iter().all(|e| !e.is_duplicate()));
    keys
}
