//! What the crash tests share: the child process's handlers, spawning and
//! killing children, and the invariants checked with plain SQL afterwards.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use litejob::Backoff;
use litejob::{JobFilter, NewJob, Outcome, Queue, RuntimeBuilder};

use crate::support::TestDb;

/// The job kinds the child handles:
/// - `work`: writes a row `(key)` into the app table `effects` and an outbox
///   row `mail:<key>` in its transaction;
/// - `slow`: the same after sleeping `slow_ms` in its prepare step (outside
///   the transaction);
/// - `doomed`: writes its effect row, then discards itself (made to fail:
///   must end `dead` with no effect row);
/// - `crash`: aborts the process (a poison pill);
/// - `quick`: what `work` does, with no prepare step: the claim starts it
///   and the writer runs it in the claim's own cycle (split when the batch
///   mixes priorities); it appends its key to the starts file from inside
///   its transaction.
///
/// Every prepare step first appends the key to the starts file; the `mail`
/// effect appends `mail:<key>` to the effects file.
#[derive(Debug, Clone)]
pub struct Handlers {
    pub starts: PathBuf,
    pub effects: PathBuf,
    pub slow_ms: u64,
    pub lease: Duration,
    pub workers: usize,
}

fn append_line(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // One write(2) with O_APPEND: lines from several processes never mix.
    f.write_all(format!("{line}\n").as_bytes())
        .expect("append line");
}

fn prepare_start(starts: &Path, key: &str) {
    append_line(starts, key);
}

/// A runtime builder with the test handlers (used by the child and by
/// in-process runtimes).
pub fn runtime(queue: &Queue, h: &Handlers) -> RuntimeBuilder {
    let (s1, s2, s3, s4, s5) = (
        h.starts.clone(),
        h.starts.clone(),
        h.starts.clone(),
        h.starts.clone(),
        h.starts.clone(),
    );
    let effects = h.effects.clone();
    let slow_ms = h.slow_ms;
    let quick = Backoff::default()
        .with_base(Duration::from_millis(20))
        .with_max(Duration::from_millis(200))
        .with_jitter(0.0);
    queue
        .runtime()
        .workers(h.workers)
        .effect_workers(2)
        .lease(h.lease)
        .poll_interval(Duration::from_millis(50))
        .grace_period(Duration::from_secs(5))
        .backoff(quick)
        .effect_backoff(quick)
        .outbox_max_retries(50)
        .handler_with_prepare(
            "work",
            move |ctx, _p: serde_json::Value| {
                prepare_start(&s1, &ctx.key);
                Ok(ctx.key.clone())
            },
            apply_work,
        )
        .handler_with_prepare(
            "slow",
            move |ctx, _p: serde_json::Value| {
                prepare_start(&s2, &ctx.key);
                std::thread::sleep(Duration::from_millis(slow_ms));
                Ok(ctx.key.clone())
            },
            apply_work,
        )
        .handler_with_prepare(
            "doomed",
            move |ctx, _p: serde_json::Value| {
                prepare_start(&s3, &ctx.key);
                Ok(ctx.key.clone())
            },
            |tx, key: String| {
                tx.execute("INSERT INTO effects (key) VALUES (?1)", [&key])?;
                Ok(Outcome::Discard("made to fail".into()))
            },
        )
        .handler_with_prepare(
            "crash",
            move |ctx, _p: serde_json::Value| -> Result<(), litejob::HandlerError> {
                prepare_start(&s4, &ctx.key);
                eprintln!("child: crash job {} aborts the process", ctx.key);
                std::process::abort();
            },
            |_tx, ()| Ok(Outcome::Done),
        )
        .handler("quick", move |tx, _p: serde_json::Value| {
            let key = tx.job().key.clone();
            prepare_start(&s5, &key);
            apply_work(tx, key)
        })
        .effect("mail", move |e, _key: String| {
            append_line(&effects, &e.key);
            Ok(())
        })
}

fn apply_work(
    tx: &mut litejob::sqlite::JobTx<'_>,
    key: String,
) -> Result<Outcome, litejob::HandlerError> {
    tx.execute("INSERT INTO effects (key) VALUES (?1)", [&key])?;
    tx.outbox("mail", &format!("mail:{key}"), &key)?;
    Ok(Outcome::Done)
}

/// The app table the handlers write; created by the parent.
pub fn create_app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL)")?;
        Ok(())
    })
    .expect("create effects table");
}

/// Is there anything left to do (queued or running jobs, pending or sending
/// outbox rows)?
pub fn busy_count(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')) + \
                (SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending'))",
        [],
        |r| r.get(0),
    )
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The child process, on the file `LITEJOB_CHILD_DB`.
pub fn child_main() {
    let db = std::env::var("LITEJOB_CHILD_DB").expect("LITEJOB_CHILD_DB");
    if std::env::var("LITEJOB_CHILD_MODE").as_deref() == Ok("power-loss") {
        // Before any logger: it installs its own, which acknowledges runs.
        super::power_loss::workloads::child(Path::new(&db));
        return;
    }
    let _ = env_logger::builder()
        .parse_env(env_logger::Env::default().default_filter_or("litejob=warn"))
        .try_init();
    if std::env::var("LITEJOB_CHILD_MODE").as_deref() == Ok("probe") {
        probe(Path::new(&db));
        return;
    }
    if std::env::var("LITEJOB_CHILD_MODE").as_deref() == Ok("enqueue-threads") {
        let returned = std::env::var("LITEJOB_CHILD_RETURNED").expect("returned file");
        super::durable::child(Path::new(&db), Path::new(&returned));
        return;
    }
    let h = Handlers {
        starts: std::env::var("LITEJOB_CHILD_STARTS")
            .expect("starts")
            .into(),
        effects: std::env::var("LITEJOB_CHILD_EFFECTS")
            .expect("effects")
            .into(),
        slow_ms: env_u64("LITEJOB_CHILD_SLOW_MS", 0),
        lease: Duration::from_millis(env_u64("LITEJOB_CHILD_LEASE_MS", 800)),
        workers: env_u64("LITEJOB_CHILD_WORKERS", 2) as usize,
    };
    let forever = std::env::var("LITEJOB_CHILD_UNTIL").as_deref() == Ok("forever");
    let queue = Queue::open(&db).expect("child: open queue");
    let mut rt = runtime(&queue, &h).start().expect("child: start runtime");
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if forever {
            continue;
        }
        let busy = queue.read(|c| Ok(busy_count(c)?)).expect("child: read");
        if busy == 0 {
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

/// Opens a (possibly damaged) file and runs a few operations, printing each
/// result; it must never panic.
fn probe(db: &Path) {
    let q = match Queue::open(db) {
        Ok(q) => q,
        Err(e) => {
            println!("probe: open refused: {e:?} / {e}");
            println!("probe done");
            return;
        }
    };
    println!("probe: opened");
    println!("probe: schema_version {:?}", q.schema_version());
    let r = q.enqueue(NewJob::new("work", "probe-key", &serde_json::json!({})));
    println!("probe: enqueue {r:?}");
    let jobs = q.jobs(&JobFilter::default().with_limit(1000));
    println!("probe: jobs {:?}", jobs.as_ref().map(|j| j.len()));
    println!("probe: job 1 {:?}", q.job(1).map(|j| j.map(|j| j.state)));
    println!("probe: attempts {:?}", q.attempts(1).map(|a| a.len()));
    println!("probe: outbox {:?}", q.outbox(None, 100).map(|o| o.len()));
    let dir = tempfile::tempdir().expect("tempdir");
    let h = Handlers {
        starts: dir.path().join("starts"),
        effects: dir.path().join("effects"),
        slow_ms: 0,
        lease: Duration::from_millis(500),
        workers: 2,
    };
    let _ = q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL)")?;
        Ok(())
    });
    match runtime(&q, &h).start() {
        Ok(mut rt) => {
            std::thread::sleep(Duration::from_millis(1500));
            println!("probe: runtime stopped {:?}", rt.stop());
        }
        Err(e) => println!("probe: runtime refused: {e}"),
    }
    println!("probe done");
}

/// The files a crash test's children share.
pub struct Env {
    pub db: TestDb,
    pub starts: PathBuf,
    pub effects: PathBuf,
    pub stderr: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let db = TestDb::new();
        let starts = db.dir.path().join("starts.txt");
        let effects = db.dir.path().join("effects.txt");
        let stderr = db.dir.path().join("children.stderr");
        let q = db.open();
        create_app_table(&q);
        drop(q);
        Env {
            db,
            starts,
            effects,
            stderr,
        }
    }

    pub fn handlers(&self, lease: Duration) -> Handlers {
        Handlers {
            starts: self.starts.clone(),
            effects: self.effects.clone(),
            slow_ms: 0,
            lease,
            workers: 2,
        }
    }

    /// Spawns a child worker with extra environment variables.
    pub fn spawn(&self, vars: &[(&str, String)]) -> Child {
        spawn_child(
            &self.db.path,
            &self.starts,
            &self.effects,
            &self.stderr,
            vars,
        )
    }

    /// All the children's stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Runs a clean child until the queue is idle; it must exit 0.
    pub fn run_clean(&self) {
        let mut c = self.spawn(&[("LITEJOB_CHILD_UNTIL", "idle".into())]);
        let st = wait_timeout(&mut c, Duration::from_secs(180)).unwrap_or_else(|| {
            let _ = c.kill();
            panic!(
                "the clean child did not finish in 180 s:\n{}",
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

pub fn spawn_child(
    db: &Path,
    starts: &Path,
    effects: &Path,
    stderr: &Path,
    vars: &[(&str, String)],
) -> Child {
    let err = OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr)
        .expect("stderr file");
    let mut cmd = Command::new(self_exe());
    child_args(&mut cmd)
        .env_remove("LITEJOB_CHILD_MODE")
        .env("LITEJOB_CHILD_DB", db)
        .env("LITEJOB_CHILD_STARTS", starts)
        .env("LITEJOB_CHILD_EFFECTS", effects)
        .env("RUST_LOG", "litejob=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err));
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// This test binary. `/proc/self/exe` still runs it when cargo rebuilt
/// (replaced) the file meanwhile, which happens on a shared target dir.
/// Makes `cmd` (this test binary, run directly or under a tracer) run only
/// the child entry point, with no fault point inherited.
pub fn child_args(cmd: &mut Command) -> &mut Command {
    crate::suite::as_child(cmd, "reliability::child_worker")
}

pub fn self_exe() -> PathBuf {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if proc_exe.exists() {
        proc_exe
    } else {
        std::env::current_exe().expect("current_exe")
    }
}

/// Waits for a child for at most `d`.
pub fn wait_timeout(c: &mut Child, d: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().expect("try_wait") {
            return Some(st);
        }
        if t0.elapsed() > d {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs a child and reaps it.
pub fn kill(c: &mut Child) -> ExitStatus {
    let _ = c.kill();
    c.wait().expect("wait killed child")
}

pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub fn soak() -> bool {
    std::env::var("LITEJOB_SOAK").as_deref() == Ok("1")
}

fn count_lines(path: &Path) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for l in std::fs::read_to_string(path).unwrap_or_default().lines() {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

/// What the invariant check counted.
#[derive(Debug, Default)]
pub struct Figures {
    pub jobs: i64,
    pub succeeded: i64,
    pub dead_made_to_fail: i64,
    /// Healthy jobs that ended `dead` as poison pills (3 unlucky kills).
    pub falsely_poisoned: i64,
    /// Effect calls beyond the first, per outbox row (kills between an
    /// effect and its acknowledgement).
    pub repeated_effects: i64,
    /// Runs recorded `abandoned` (kills during a run).
    pub abandoned_runs: i64,
}

/// Checks the invariants after a final clean run, with plain SQL: no
/// returned enqueue lost, no key's work committed twice, an effect repeated
/// only where a kill landed, no attempt left running.
/// `enqueued`: every key whose enqueue returned.
// Long: every invariant of the file, one SQL check after another.
pub fn check_invariants(env: &Env, enqueued: &[String]) -> Figures {
    let c = env.db.sql();
    let mut f = Figures::default();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok", "integrity_check");
    assert_eq!(busy_count(&c).unwrap(), 0, "work left after the clean run");
    let starts = count_lines(&env.starts);
    let calls = count_lines(&env.effects);
    // lost = 0: every returned enqueue has its job.
    let mut st = c
        .prepare("SELECT id, kind, state, coalesce(last_error, ''), abandoned FROM jobs WHERE idempotency_key = ?1")
        .unwrap();
    for key in enqueued {
        let (id, kind, state, err, abandoned): (i64, String, String, String, i64) = st
            .query_row([key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap_or_else(|e| panic!("job {key} lost: {e}"));
        f.jobs += 1;
        let effect_rows: i64 = c
            .query_row("SELECT count(*) FROM effects WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .unwrap();
        let ledger: i64 = c
            .query_row(
                "SELECT count(*) FROM processed_jobs WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap();
        let attempt_rows: i64 = c
            .query_row(
                "SELECT count(*) FROM attempts WHERE job_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        let started = starts.get(key).copied().unwrap_or(0);
        assert!(
            started <= attempt_rows,
            "job {key}: handler started {started} times but only {attempt_rows} runs recorded"
        );
        match (kind.as_str(), state.as_str()) {
            ("work" | "slow" | "quick", "succeeded") => {
                f.succeeded += 1;
                assert_eq!(effect_rows, 1, "job {key}: in-transaction effect rows");
                assert_eq!(ledger, 1, "job {key}: ledger rows");
                let (oattempts, ostate): (i64, String) = c
                    .query_row(
                        "SELECT attempts, state FROM outbox WHERE key = ?1",
                        [format!("mail:{key}")],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap_or_else(|e| panic!("job {key}: no outbox row: {e}"));
                let n = calls.get(&format!("mail:{key}")).copied().unwrap_or(0);
                assert_eq!(ostate, "sent", "job {key}: outbox state");
                assert!(
                    n >= 1 && n <= oattempts,
                    "job {key}: effect called {n} times for {oattempts} attempts"
                );
                f.repeated_effects += n - 1;
            }
            ("work" | "slow" | "quick", "dead") => {
                assert!(
                    err.contains("abandoned 3 times") && abandoned >= 3,
                    "job {key} dead for another reason than 3 abandoned runs: {err}"
                );
                assert_eq!(effect_rows, 0, "dead job {key}: effect rows");
                f.falsely_poisoned += 1;
            }
            ("doomed" | "crash", "dead") => {
                assert_eq!(effect_rows, 0, "dead job {key}: effect rows");
                assert_eq!(ledger, 0, "dead job {key}: ledger rows");
                f.dead_made_to_fail += 1;
            }
            _ => panic!("job {key} of kind {kind} ended {state}: {err}"),
        }
    }
    // Outbox rows exist only for committed jobs.
    let orphans: i64 = c
        .query_row(
            "SELECT count(*) FROM outbox o WHERE NOT EXISTS \
             (SELECT 1 FROM processed_jobs p WHERE 'mail:' || p.key = o.key)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "outbox rows without a committed job");
    let dup_effects: i64 = c
        .query_row(
            "SELECT count(*) FROM (SELECT key FROM effects GROUP BY key HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        dup_effects, 0,
        "keys whose in-transaction work committed twice"
    );
    let running: i64 = c
        .query_row(
            "SELECT count(*) FROM attempts WHERE outcome = 'running'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(running, 0, "attempts left 'running' after the clean run");
    f.abandoned_runs = c
        .query_row(
            "SELECT count(*) FROM attempts WHERE job_id IS NOT NULL AND outcome = 'abandoned'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let stderr = env.stderr_text();
    let panics: Vec<&str> = stderr.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "panics in the children:\n{}",
        panics.join("\n")
    );
    f
}

/// Enqueues `n` jobs of `kind` with keys `<prefix>-<i>`; returns the keys.
/// `n` apply-only `quick` jobs of priorities -1, 0 and 1 in turn, so claims
/// take batches of mixed priorities and split them.
pub fn enqueue_quick(q: &Queue, from: usize, n: usize) -> Vec<String> {
    let keys: Vec<String> = (from..from + n).map(|i| format!("q-{i}")).collect();
    let jobs = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            NewJob::new("quick", k.clone(), &serde_json::json!({ "k": k }))
                .with_priority(i as i64 % 3 - 1)
        })
        .collect();
    let r = q.enqueue_many(jobs).expect("enqueue batch");
    assert!(r.iter().all(|e| !e.is_duplicate()));
    keys
}

pub fn enqueue_n(q: &Queue, kind: &str, prefix: &str, from: usize, n: usize) -> Vec<String> {
    let keys: Vec<String> = (from..from + n).map(|i| format!("{prefix}-{i}")).collect();
    let jobs = keys
        .iter()
        .map(|k| NewJob::new(kind, k.clone(), &serde_json::json!({ "k": k })))
        .collect();
    let r = q.enqueue_many(jobs).expect("enqueue batch");
    assert!(r.iter().all(|e| !e.is_duplicate()));
    keys
}
