//! Durable steps under kills, on a file and on PostgreSQL: jobs whose
//! prepare step calls three steps (`charge`, `book`, `invoice`), some runs
//! failing at a step or between two, while worker children are aborted at
//! every announced fault point (the two around a step's record among
//! them, each at its first and at a later hit) and SIGKILLed at random
//! moments; then a clean child, and the checks: every job succeeded once,
//! and each step's result, as the job used it, is the one its last call
//! returned: once a step's result was recorded, it was never called again.
//!
//! The children are `backends::child::backend_child` in mode `steps`, with
//! [`runtime`]'s handlers. Each step's call first appends
//! `<job key>/<step> <nonce> <attempt>` to the calls log (the effects file
//! of [`Files`], fsynced), with a fresh random nonce, and returns the
//! nonce: a call the log shows after the recorded one would be a recorded
//! step called again.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Backoff, HandlerError, JobContext, NewJob, Outcome};
use serde_json::{json, Value};

use super::harness::{kill, soak, wait_timeout};
use crate::backends::child::{Env, Files, BUSY};
use crate::backends::{AppTx, Runtimes, TestBuilder};
use crate::both;
use crate::support::Rng;

/// The steps of a job, in the order its prepare step calls them.
const STEPS: [&str; 3] = ["charge", "book", "invoice"];

/// The app's table: the results the apply step read with
/// `tx.step_output`, one row per committed run.
const TABLE: &str = "CREATE TABLE step_runs (key TEXT NOT NULL, charge TEXT NOT NULL, \
     book TEXT NOT NULL, invoice TEXT NOT NULL)";

/// Appends `line` to the calls log in one `write(2)` with `O_APPEND`, and
/// fsyncs it before the step goes on.
fn log_call(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(format!("{line}\n").as_bytes())
        .expect("append to the calls log");
    f.sync_data().expect("fsync the calls log");
}

/// A fresh nonce: 64 random bits from a generator seeded once per process
/// (from the clock and the pid), so no two calls share one.
fn nonce() -> String {
    static RNG: OnceLock<Mutex<Rng>> = OnceLock::new();
    let rng = RNG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Mutex::new(Rng::new(nanos ^ (u64::from(std::process::id()) << 40)))
    });
    let n = rng.lock().unwrap_or_else(|e| e.into_inner()).next_u64();
    format!("{n:016x}")
}

/// A draw fixed by the job, what is decided and the attempt: whether a
/// run fails there is the same in every process.
fn draw(key: &str, what: &str, attempt: i64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain([0]).chain(what.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Rng::new(h ^ (attempt as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64()
}

/// The prepare step: the three steps in order, each call logged before it
/// returns its nonce. In the first three attempts, a step's call fails now
/// and then after it was logged (a call never recorded, made again by the
/// retry), and a run fails now and then between `book` and `invoice` (its
/// recorded steps handed back to the retry).
fn prepare(ctx: &JobContext, calls: &Path) -> Result<Vec<String>, HandlerError> {
    let mut used = Vec::with_capacity(STEPS.len());
    for step in STEPS {
        let value: String = ctx.step(step, |key| {
            let n = nonce();
            log_call(calls, &format!("{key} {n} {}", ctx.attempt));
            if ctx.attempt <= 3 && draw(&ctx.key, step, ctx.attempt).is_multiple_of(7) {
                return Err(format!("{step}: the provider timed out"));
            }
            Ok(n)
        })?;
        used.push(value);
        if step == "book"
            && ctx.attempt <= 3
            && draw(&ctx.key, "between", ctx.attempt).is_multiple_of(6)
        {
            return Err("made to fail between book and invoice".into());
        }
    }
    Ok(used)
}

/// The apply step: one `step_runs` row with each step's result as
/// `tx.step_output` reads it, an outbox row (so the effect's fault points
/// are reached too), and the results the prepare step used as the job's
/// output.
fn apply(tx: &mut AppTx<'_, '_, '_>, used: Vec<String>) -> Result<Outcome, HandlerError> {
    let key = tx.job().key.clone();
    let mut read = Vec::with_capacity(STEPS.len());
    for step in STEPS {
        let out: Option<String> = tx.step_output(step)?;
        read.push(out.unwrap_or_else(|| "none".into()));
    }
    match tx {
        AppTx::Sqlite(t) => {
            t.execute(
                "INSERT INTO step_runs (key, charge, book, invoice) VALUES (?1, ?2, ?3, ?4)",
                (&key, &read[0], &read[1], &read[2]),
            )?;
        }
        AppTx::Postgres(t) => {
            t.execute(
                "INSERT INTO step_runs (key, charge, book, invoice) VALUES ($1, $2, $3, $4)",
                &[&key, &read[0], &read[1], &read[2]],
            )?;
        }
    }
    tx.outbox("receipt", &format!("receipt:{key}"), &key)?;
    Outcome::done_with(&used)
}

/// The step children's handlers, on either engine: kind `steps` (its
/// prepare step [`prepare`], its apply step [`apply`]) and the `receipt`
/// effect, which does nothing. A kill is never a job's last strike here.
pub(crate) fn runtime(
    queue: &AnyQueue,
    files: &Files,
    lease: Duration,
    workers: usize,
) -> TestBuilder {
    let quick = Backoff::default()
        .with_base(Duration::from_millis(20))
        .with_max(Duration::from_millis(200))
        .with_jitter(0.0);
    let calls = files.effects.clone();
    queue
        .runtime()
        .workers(workers)
        .effect_workers(1)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        .grace_period(Duration::from_secs(5))
        .backoff(quick)
        .effect_backoff(quick)
        .max_abandoned(1_000)
        .effect("receipt", |_, _: String| Ok(()))
        .handler_with_prepare("steps", move |ctx, _: Value| prepare(ctx, &calls), apply)
}

/// Enqueues `n` step jobs, keys `s-<from..>`; returns the keys.
fn enqueue(q: &AnyQueue, from: usize, n: usize) -> Vec<String> {
    let keys: Vec<String> = (from..from + n).map(|i| format!("s-{i}")).collect();
    let jobs = keys
        .iter()
        .map(|k| NewJob::new("steps", k.as_str(), &json!({})).with_max_retries(100))
        .collect();
    let got = q.enqueue_many(jobs).expect("enqueue step jobs");
    assert!(got.iter().all(|e| !e.is_duplicate()), "{got:?}");
    keys
}

/// Spawns a step child.
fn spawn(env: &Env, vars: &[(&str, String)]) -> std::process::Child {
    let mut all = vec![("LITEJOB_BCHILD_MODE", "steps".to_string())];
    all.extend(vars.iter().map(|(k, v)| (*k, v.clone())));
    env.spawn(&all)
}

/// Children aborted at a fault point and SIGKILLed.
#[derive(Debug, Default)]
struct Kills {
    aborts: usize,
    sigkills: usize,
}

/// Every fault point at its first hit and at a later one, and `random`
/// SIGKILLs after random sleeps, in a random order; a few new jobs before
/// each child (during it, for a SIGKILLed one). Returns every key enqueued.
fn enqueue_and_kill(env: &Env, random: usize, rng: &mut Rng) -> (Vec<String>, Kills) {
    let q = env.q.open();
    let mut keys = enqueue(&q, 0, 20);
    let points = litejob::fault::STEP_POINTS
        .iter()
        .chain(litejob::fault::POINTS);
    let mut plan: Vec<Option<String>> = points
        .flat_map(|p| {
            [
                Some(format!("{p}:1")),
                Some(format!("{p}:{}", 2 + rng.below(3))),
            ]
        })
        .collect();
    plan.extend((0..random).map(|_| None));
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut kills = Kills::default();
    for fault in plan {
        let next = keys.len();
        match fault {
            Some(point) => {
                keys.extend(enqueue(&q, next, 4));
                let mut c = spawn(
                    env,
                    &[
                        ("LITEJOB_BCHILD_UNTIL", "idle".into()),
                        ("LITEJOB_FAULT", point),
                    ],
                );
                let st =
                    wait_timeout(&mut c, Duration::from_secs(30)).unwrap_or_else(|| kill(&mut c));
                if st.signal().is_some() {
                    kills.aborts += 1;
                }
            }
            None => {
                let mut c = spawn(env, &[("LITEJOB_BCHILD_UNTIL", "forever".into())]);
                std::thread::sleep(Duration::from_millis(rng.below(200)));
                keys.extend(enqueue(&q, next, 4));
                std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
                if kill(&mut c).signal().is_some() {
                    kills.sigkills += 1;
                }
            }
        }
    }
    (keys, kills)
}

/// Rows of `sql` (one text column, fields joined with `|`) by their first
/// field.
fn rows_by_key(env: &Env, sql: &str) -> HashMap<String, Vec<Vec<String>>> {
    let mut m: HashMap<String, Vec<Vec<String>>> = HashMap::new();
    for line in env.q.strings(sql) {
        let mut fields = line.split('|').map(str::to_string);
        let key = fields.next().unwrap();
        m.entry(key).or_default().push(fields.collect());
    }
    m
}

/// The calls log: per `<job key>/<step>`, each call's nonce, in the order
/// of the calls.
fn calls(path: &Path) -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(step), Some(nonce)) = (parts.next(), parts.next()) else {
            panic!("a line of the calls log is not `<key>/<step> <nonce> ..`: {line:?}");
        };
        m.entry(step.to_string())
            .or_default()
            .push(nonce.to_string());
    }
    m
}

/// What the checks counted.
#[derive(Debug, Default)]
struct Figures {
    jobs: usize,
    /// Step calls logged.
    calls: usize,
    /// Calls beyond the first of a step: each one's predecessor was never
    /// recorded (it failed, or its process died before its record).
    repeated_calls: usize,
    /// Steps handed back to a later run without their call.
    reused_steps: i64,
    /// Runs recorded `abandoned` (kills during a run).
    abandoned_runs: i64,
}

/// After the clean child: nothing left to do; every job succeeded, with
/// one run, one ledger row and one `step_runs` row; each of its steps
/// recorded once, with the nonce its last logged call returned, which the
/// apply step read and the prepare step used; no call logged but of an
/// enqueued job's step; no nonce twice.
fn check(env: &Env, keys: &[String]) -> Figures {
    let q = &env.q;
    let mut f = Figures::default();
    assert_eq!(q.count(BUSY), 0, "work left after the clean run");
    let jobs = rows_by_key(
        env,
        "SELECT idempotency_key || '|' || state || '|' || coalesce(output, '') || '|' || \
         coalesce(last_error, '') FROM jobs",
    );
    let app = rows_by_key(
        env,
        "SELECT key || '|' || charge || '|' || book || '|' || invoice FROM step_runs",
    );
    let ledger = rows_by_key(env, "SELECT key FROM processed_jobs");
    let recorded = rows_by_key(
        env,
        "SELECT j.idempotency_key || '/' || s.name || '|' || s.output \
         FROM job_steps s JOIN jobs j ON j.id = s.job_id",
    );
    let logged = calls(&env.files.effects);
    let mut nonces = HashSet::new();
    for (step, list) in &logged {
        f.calls += list.len();
        f.repeated_calls += list.len() - 1;
        for n in list {
            assert!(nonces.insert(n.clone()), "nonce {n} logged twice ({step})");
        }
    }
    let expected: HashSet<String> = keys
        .iter()
        .flat_map(|k| STEPS.iter().map(move |s| format!("{k}/{s}")))
        .collect();
    let strays: Vec<&String> = logged.keys().filter(|s| !expected.contains(*s)).collect();
    assert!(strays.is_empty(), "calls of steps no job has: {strays:?}");
    for key in keys {
        let j = &jobs.get(key).unwrap_or_else(|| panic!("job {key} lost"))[0];
        let (state, output, error) = (&j[0], &j[1], j[2..].join("|"));
        assert_eq!(state, "succeeded", "job {key}: {error}");
        assert_eq!(
            ledger.get(key).map_or(0, Vec::len),
            1,
            "job {key}: ledger rows"
        );
        let rows = app.get(key).map_or(&[][..], Vec::as_slice);
        assert_eq!(rows.len(), 1, "job {key}: step_runs rows {rows:?}");
        let mut used = Vec::new();
        for (i, step) in STEPS.iter().enumerate() {
            let name = format!("{key}/{step}");
            let rec = recorded.get(&name).map_or(&[][..], Vec::as_slice);
            assert_eq!(rec.len(), 1, "step {name}: its job_steps rows");
            let rec: String = serde_json::from_str(&rec[0][0]).expect("a step's output");
            let list = logged
                .get(&name)
                .unwrap_or_else(|| panic!("step {name} recorded {rec} but no call was logged"));
            let last = list.last().unwrap();
            assert!(
                *last == rec,
                "step {name}: {}; its calls' nonces, in order: {list:?}",
                match list.iter().position(|n| *n == rec) {
                    Some(at) => format!(
                        "called again after its result {rec} was recorded (call {} of {}, the \
                         last returned {last})",
                        at + 1,
                        list.len()
                    ),
                    None => format!("its recorded result {rec} is no call's"),
                }
            );
            assert_eq!(
                rows[0][i], rec,
                "step {name}: the apply step read another result than the recorded one"
            );
            used.push(rec);
        }
        assert_eq!(
            *output,
            serde_json::to_string(&used).unwrap(),
            "job {key}: the prepare step used other results than the recorded ones"
        );
        f.jobs += 1;
    }
    assert_eq!(q.count("SELECT count(*) FROM jobs"), keys.len() as i64);
    assert_eq!(
        q.count("SELECT count(*) FROM step_runs"),
        keys.len() as i64,
        "step_runs rows"
    );
    assert_eq!(
        q.count(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE job_id IS NOT NULL \
             AND outcome = 'succeeded' GROUP BY job_id HAVING count(*) > 1) d"
        ),
        0,
        "a job with two succeeded runs"
    );
    assert_eq!(
        q.count("SELECT count(*) FROM attempts WHERE outcome = 'running'"),
        0,
        "attempts left running"
    );
    f.reused_steps =
        q.count("SELECT count(*) FROM job_steps WHERE reused_in IS NOT NULL AND reused_in <> '[]'");
    f.abandoned_runs =
        q.count("SELECT count(*) FROM attempts WHERE job_id IS NOT NULL AND outcome = 'abandoned'");
    let stderr = env.stderr_text();
    let panics: Vec<&str> = stderr.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "panics in the children:\n{}",
        panics.join("\n")
    );
    let report = env.q.open().admin().verify().expect("verify");
    assert!(report.is_sound(), "verify: {:?}", report.broken);
    f
}

both! {
    /// Jobs of three durable steps, some runs failing at a step, while
    /// worker children are aborted at every fault point (around each
    /// step's record too) and SIGKILLed at random (12 times in CI, 300
    /// with `LITEJOB_SOAK=1`): afterwards every job succeeded once, and
    /// each step's result, as the job used it, is the one its last call
    /// returned: a recorded step is never called again, and a call is
    /// repeated only when it was not recorded.
    #[not_pooled("its children run on child::Env's own schema, reached directly, and look \
                  for idleness with a plain client on litejob's URL, which cannot pass \
                  `options` through a pooler")]
    fn kills_around_steps_never_call_a_recorded_step_again(q) {
        let env = Env::new(q.engine);
        env.q.exec(TABLE);
        let mut rng = Rng::seeded();
        let t0 = Instant::now();
        let (keys, kills) = enqueue_and_kill(&env, if soak() { 300 } else { 12 }, &mut rng);
        env.run_clean_with(&[("LITEJOB_BCHILD_MODE", "steps".into())]);
        let f = check(&env, &keys);
        let stderr = env.stderr_text();
        let hits: Vec<(&str, usize)> = litejob::fault::STEP_POINTS
            .iter()
            .chain(litejob::fault::POINTS)
            .map(|p| (*p, stderr.matches(&format!("litejob-fault: aborting at {p}\n")).count()))
            .collect();
        eprintln!(
            "steps on {:?}: {} aborts at fault points and {} SIGKILLs in {:?}; aborts per \
             point: {hits:?}; {f:?}",
            q.engine,
            kills.aborts,
            kills.sigkills,
            t0.elapsed()
        );
        let missed: Vec<&str> = hits.iter().filter(|(_, n)| *n == 0).map(|(p, _)| *p).collect();
        assert!(missed.is_empty(), "fault points never reached: {missed:?}");
        assert!(f.repeated_calls > 0, "no step call was ever repeated: {f:?}");
        assert!(f.reused_steps > 0, "no recorded step was ever handed back: {f:?}");
        assert!(f.abandoned_runs > 0, "no kill ever landed during a run: {f:?}");
    }
}
