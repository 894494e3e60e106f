//! Workflows under kills, on a file and on PostgreSQL: small workflows
//! (fan-out and fan-in in one `enqueue_many`, chains, some with a step
//! that discards itself), dependents enqueued later on older keys, and
//! redeliveries, while worker children are SIGKILLed at random moments
//! and aborted at the run's announced fault points; then a clean child,
//! and the checks in plain SQL: every workflow complete, no step run
//! before its dependencies succeeded, each step's work committed once.
//!
//! The children are `backends::child::backend_child` in mode `workflows`,
//! with [`runtime`]'s handlers. Each step records, in its own transaction
//! (so only with its run), what it saw of its dependencies: their outputs
//! (`tx.dependency_output`, table `wf_runs`) and their states (table
//! `wf_seen`); a step with a prepare step also records, before its
//! transaction, the states its queue reads then (the starts file), so a
//! run cut short by a kill is checked too.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Backoff, HandlerError, JobContext, NewJob, Outcome};
use serde_json::{json, Value};

use super::harness::{kill, soak, wait_timeout};
use crate::backends::child::{append_line, Env, Files, BUSY};
use crate::backends::{AppTx, Runtimes, TestBuilder};
use crate::both;
use crate::support::Rng;

/// The app tables the steps write in their transactions.
const TABLES: &str = "CREATE TABLE wf_runs (key TEXT NOT NULL, outputs TEXT NOT NULL); \
     CREATE TABLE wf_seen (key TEXT NOT NULL, dep TEXT NOT NULL, state TEXT NOT NULL)";

/// The job fault points of a run (the effects' are not on this path),
/// those around the commit that queues a job's dependents first.
const RUN_POINTS: &[&str] = &[
    "after-complete-commit",
    "before-complete-commit",
    "after-claim-commit",
    "after-start-commit",
    "in-handler",
];

/// A step's dependencies, from its payload `{"deps": [...]}`.
fn deps_of(payload: &Value) -> Vec<String> {
    payload["deps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// What a step finishes with (its dependents read it).
fn output_of(key: &str) -> String {
    format!("out:{key}")
}

/// In the step's transaction: one `wf_runs` row with each dependency's
/// output as `tx.dependency_output` reads it (`none` for none), and one
/// `wf_seen` row per dependency with its state as this transaction reads
/// it.
fn record(tx: &mut AppTx<'_, '_, '_>, deps: &[String]) -> Result<(), HandlerError> {
    let key = tx.job().key.clone();
    let mut outputs = Vec::with_capacity(deps.len());
    for d in deps {
        let out: Option<String> = tx.dependency_output(d)?;
        outputs.push(format!("{d}={}", out.as_deref().unwrap_or("none")));
    }
    let outputs = outputs.join(",");
    match tx {
        AppTx::Sqlite(t) => {
            t.execute(
                "INSERT INTO wf_runs (key, outputs) VALUES (?1, ?2)",
                (&key, &outputs),
            )?;
            t.execute(
                "INSERT INTO wf_seen (key, dep, state) SELECT ?1, idempotency_key, state \
                 FROM jobs WHERE idempotency_key IN (SELECT value FROM json_each(?2))",
                (&key, serde_json::to_string(deps)?),
            )?;
        }
        AppTx::Postgres(t) => {
            t.execute(
                "INSERT INTO wf_runs (key, outputs) VALUES ($1, $2)",
                &[&key, &outputs],
            )?;
            t.execute(
                "INSERT INTO wf_seen (key, dep, state) SELECT $1, idempotency_key, state \
                 FROM jobs WHERE idempotency_key = ANY($2)",
                &[&key, &deps.to_vec()],
            )?;
        }
    }
    Ok(())
}

/// The workflow children's handlers, on either engine (kinds):
/// - `step`: a prepare step that appends `key<TAB>dep=state,…` (the
///   dependencies' states its queue reads, committed) to the starts file,
///   then [`record`] and `done_with("out:<key>")`;
/// - `inline`: the same with no prepare step (on a file the writer runs it
///   in its claim's cycle);
/// - `broken`: `step`'s prepare and record, then it discards itself: it
///   ends `dead`, its rows rolled back, its dependents cancelled.
///
/// A kill is never a step's third strike here: every step but `broken`
/// must succeed.
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
    let starts = files.starts.clone();
    let reader = queue.clone();
    let prepare = move |ctx: &JobContext, p: Value| -> Result<Vec<String>, HandlerError> {
        let deps = deps_of(&p);
        let mut seen = Vec::with_capacity(deps.len());
        for d in &deps {
            let state = reader
                .job_by_key(d)?
                .map_or("missing".to_string(), |j| j.state.to_string());
            seen.push(format!("{d}={state}"));
        }
        append_line(&starts, &format!("{}\t{}", ctx.key, seen.join(",")));
        Ok(deps)
    };
    queue
        .runtime()
        .workers(workers)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        .grace_period(Duration::from_secs(5))
        .backoff(quick)
        .max_abandoned(1_000)
        .handler_with_prepare("step", prepare.clone(), |tx, deps: Vec<String>| {
            record(tx, &deps)?;
            Outcome::done_with(&output_of(&tx.job().key))
        })
        .handler("inline", |tx, p: Value| {
            record(tx, &deps_of(&p))?;
            Outcome::done_with(&output_of(&tx.job().key))
        })
        .handler_with_prepare("broken", prepare, |tx, deps: Vec<String>| {
            record(tx, &deps)?;
            Ok(Outcome::Discard("made to fail".into()))
        })
}

/// A job of the test's workflows, as enqueued.
#[derive(Debug, Clone)]
struct Node {
    key: String,
    kind: &'static str,
    deps: Vec<String>,
}

impl Node {
    fn job(&self) -> NewJob {
        NewJob::new(self.kind, self.key.as_str(), &json!({ "deps": self.deps }))
            .with_depends_on(self.deps.iter().cloned())
    }
}

/// Workflow number `n` of shape `n % 4`, its healthy steps `step` or
/// `inline` at random:
/// 0. a diamond: `a` → {`b`, `c`} → `d`;
/// 1. a chain of five;
/// 2. a fan-in: five parts → `m` → `n`;
/// 3. a broken step: `a` → `x` (broken) → `y` (also after `a`) → `z`,
///    beside `s` → `t`, which succeed.
fn workflow(n: usize, rng: &mut Rng) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut add = |name: &str, deps: &[&str], broken: bool, rng: &mut Rng| {
        let kind = match (broken, rng.below(2)) {
            (true, _) => "broken",
            (false, 0) => "step",
            (false, _) => "inline",
        };
        nodes.push(Node {
            key: format!("wf{n}-{name}"),
            kind,
            deps: deps.iter().map(|d| format!("wf{n}-{d}")).collect(),
        });
    };
    match n % 4 {
        0 => {
            add("a", &[], false, rng);
            add("b", &["a"], false, rng);
            add("c", &["a"], false, rng);
            add("d", &["b", "c"], false, rng);
        }
        1 => {
            add("c0", &[], false, rng);
            for i in 1..5 {
                add(
                    &format!("c{i}"),
                    &[format!("c{}", i - 1).as_str()],
                    false,
                    rng,
                );
            }
        }
        2 => {
            let parts: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
            for p in &parts {
                add(p, &[], false, rng);
            }
            add(
                "m",
                &parts.iter().map(String::as_str).collect::<Vec<_>>(),
                false,
                rng,
            );
            add("n", &["m"], false, rng);
        }
        _ => {
            add("a", &[], false, rng);
            add("x", &["a"], true, rng);
            add("y", &["x", "a"], false, rng);
            add("z", &["y"], false, rng);
            add("s", &[], false, rng);
            add("t", &["s"], false, rng);
        }
    }
    // Dependents listed before their dependencies: the batch orders them.
    nodes.reverse();
    nodes
}

/// Spawns a workflow child.
fn spawn(env: &Env, vars: &[(&str, String)]) -> Child {
    let mut all = vec![("LITEJOB_BCHILD_MODE", "workflows".to_string())];
    all.extend(vars.iter().map(|(k, v)| (*k, v.clone())));
    env.spawn(&all)
}

/// What the kills were, and how many late dependents had to wait.
#[derive(Debug, Default)]
struct Kills {
    sigkills: usize,
    aborts: usize,
    late_waiting: usize,
}

/// The parent's enqueues: every node whose enqueue returned, and each
/// workflow as it was enqueued (for redeliveries).
struct Producer {
    q: AnyQueue,
    nodes: Vec<Node>,
    batches: Vec<Vec<Node>>,
    /// Late dependents that went in `waiting` (a dependency unfinished).
    late_waiting: usize,
}

impl Producer {
    /// Two new workflows, a dependent of older keys, a redelivery.
    fn round(&mut self, round: usize, rng: &mut Rng) {
        for _ in 0..2 {
            let wf = workflow(self.batches.len(), rng);
            let got = self
                .q
                .enqueue_many(wf.iter().map(Node::job).collect())
                .expect("enqueue a workflow");
            assert!(got.iter().all(|e| !e.is_duplicate()), "{got:?}");
            self.nodes.extend(wf.iter().cloned());
            self.batches.push(wf);
        }
        // A dependent of older keys, whatever they are by now (succeeded,
        // running under a child, waiting, dead or cancelled): half of them
        // among the latest, likely to end while it is enqueued.
        let all = self.nodes.len() as u64;
        let deps: Vec<String> = (0..1 + rng.below(2))
            .map(|_| {
                let i = match rng.below(2) {
                    0 => all - 1 - rng.below(all.min(12)),
                    _ => rng.below(all),
                };
                self.nodes[i as usize].key.clone()
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let late = Node {
            key: format!("late-{round}"),
            kind: if rng.below(2) == 0 { "step" } else { "inline" },
            deps,
        };
        let got = self
            .q
            .enqueue(late.job())
            .expect("enqueue a late dependent");
        assert!(!got.is_duplicate());
        let now = self.q.job_by_key(&late.key).unwrap().expect("the late job");
        if now.state == litejob::JobState::Waiting {
            self.late_waiting += 1;
        }
        self.nodes.push(late);
        // A redelivery of an older workflow: a duplicate of each job.
        let again = &self.batches[rng.below(self.batches.len() as u64) as usize];
        let got = self
            .q
            .enqueue_many(again.iter().map(Node::job).collect())
            .expect("redeliver a workflow");
        assert!(got.iter().all(|e| e.is_duplicate()), "{got:?}");
    }
}

/// Round after round, a child is killed: SIGKILLed at a random moment
/// while the round's enqueues go in, or (one round in three, after them)
/// aborted at a run's fault point, the points in turn. Returns every node
/// whose enqueue returned.
fn enqueue_and_kill(env: &Env, rounds: usize, rng: &mut Rng) -> (Vec<Node>, Kills) {
    let mut p = Producer {
        q: env.q.open(),
        nodes: Vec::new(),
        batches: Vec::new(),
        late_waiting: 0,
    };
    let mut kills = Kills::default();
    for round in 0..rounds {
        if round % 3 == 2 {
            p.round(round, rng);
            // Aborts just before and just after the commit that queues
            // the dependents come in every run.
            let point = RUN_POINTS[(round / 3) % RUN_POINTS.len()];
            let mut c = spawn(
                env,
                &[
                    ("LITEJOB_BCHILD_UNTIL", "idle".into()),
                    ("LITEJOB_FAULT", format!("{point}:{}", 1 + rng.below(3))),
                ],
            );
            let st = wait_timeout(&mut c, Duration::from_secs(20)).unwrap_or_else(|| kill(&mut c));
            if st.signal().is_some() {
                kills.aborts += 1;
            }
        } else {
            let mut c = spawn(env, &[("LITEJOB_BCHILD_UNTIL", "forever".into())]);
            std::thread::sleep(Duration::from_millis(rng.below(150)));
            p.round(round, rng);
            std::thread::sleep(Duration::from_millis(30 + rng.below(400)));
            if kill(&mut c).signal().is_some() {
                kills.sigkills += 1;
            }
        }
    }
    kills.late_waiting = p.late_waiting;
    (p.nodes, kills)
}

/// Every job `key` depends on, directly or through others.
fn ancestors(by_key: &HashMap<&str, &Node>, key: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut todo = vec![key.to_string()];
    while let Some(k) = todo.pop() {
        for d in &by_key[k.as_str()].deps {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
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

/// The starts file: per key, the dependency states each prepare step read.
fn starts(path: &Path) -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let (key, seen) = line.split_once('\t').unwrap_or((line, ""));
        m.entry(key.to_string()).or_default().push(seen.to_string());
    }
    m
}

/// What the checks counted.
#[derive(Debug, Default)]
struct Figures {
    jobs: usize,
    succeeded: usize,
    cancelled: usize,
    broken: usize,
    /// Prepare steps started (several for a run that a kill cut short).
    prepares: usize,
    /// Runs recorded `abandoned` (kills during a run).
    abandoned_runs: i64,
}

/// After the clean child, in plain SQL: nothing left waiting, queued or
/// running; each job ended as its workflow says (succeeded; `dead` for a
/// broken step; cancelled, never run, naming a dependency that ended dead
/// or cancelled, for whatever is after a broken step); each succeeded
/// step committed once (one ledger row, one `wf_runs` row) with its
/// output, after reading every dependency's output and seeing each
/// succeeded in its transaction; every prepare step (killed runs' too)
/// saw its dependencies succeeded; the edges are the enqueued ones.
// Long: one check after another, each with its message.
fn check(env: &Env, nodes: &[Node]) -> Figures {
    let q = &env.q;
    let mut f = Figures::default();
    assert_eq!(q.count(BUSY), 0, "work left after the clean run");
    let unfinished = q.strings(
        "SELECT idempotency_key || ' ' || state FROM jobs \
         WHERE state IN ('waiting', 'queued', 'running')",
    );
    assert!(unfinished.is_empty(), "unfinished jobs: {unfinished:?}");
    let by_key: HashMap<&str, &Node> = nodes.iter().map(|n| (n.key.as_str(), n)).collect();
    let jobs = rows_by_key(
        env,
        "SELECT idempotency_key || '|' || state || '|' || coalesce(output, '') || '|' || \
         (SELECT count(*) FROM attempts a WHERE a.job_id = j.id) || '|' || \
         (SELECT count(*) FROM job_dependencies d WHERE d.job_id = j.id) || '|' || \
         coalesce(last_error, '') FROM jobs j",
    );
    let runs = rows_by_key(env, "SELECT key || '|' || outputs FROM wf_runs");
    let seen = rows_by_key(env, "SELECT key || '|' || dep || '|' || state FROM wf_seen");
    let ledger = rows_by_key(env, "SELECT key FROM processed_jobs");
    let prepared = starts(&env.files.starts);
    let state_of = |key: &str| -> String { jobs[key][0][0].clone() };
    for node in nodes {
        let key = node.key.as_str();
        let j = &jobs.get(key).unwrap_or_else(|| panic!("job {key} lost"))[0];
        let (state, output) = (j[0].as_str(), j[1].as_str());
        let attempts: i64 = j[2].parse().unwrap();
        let edges: usize = j[3].parse().unwrap();
        let error = j[4..].join("|");
        f.jobs += 1;
        assert_eq!(edges, node.deps.len(), "job {key}: its edges");
        let runs_of = runs.get(key).map_or(0, Vec::len);
        let ledger_of = ledger.get(key).map_or(0, Vec::len);
        let ancestry = ancestors(&by_key, key);
        let after_broken = ancestry.iter().any(|a| by_key[a.as_str()].kind == "broken");
        for s in prepared.get(key).into_iter().flatten() {
            f.prepares += 1;
            let all_succeeded = s.is_empty()
                || s.split(',')
                    .all(|d| d.ends_with(&format!("={}", litejob::JobState::Succeeded)));
            assert!(
                all_succeeded,
                "job {key} started before its dependencies succeeded: {s}"
            );
        }
        if node.kind == "broken" {
            assert_eq!(state, "dead", "broken step {key}: {error}");
            assert!(error.contains("made to fail"), "broken step {key}: {error}");
            assert_eq!((runs_of, ledger_of), (0, 0), "broken step {key}: its rows");
            f.broken += 1;
        } else if after_broken {
            assert_eq!(
                state, "cancelled",
                "job {key}, after a broken step: {error}"
            );
            let cause = error
                .split_once("its dependency \"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(k, _)| k.to_string())
                .unwrap_or_else(|| panic!("job {key}: its reason names no dependency: {error}"));
            assert!(
                ancestry.contains(&cause),
                "job {key} cancelled by {cause}, not one of its dependencies: {error}"
            );
            let cause_state = state_of(&cause);
            assert!(
                matches!(cause_state.as_str(), "dead" | "cancelled")
                    && error.contains(&format!("ended {cause_state}")),
                "job {key} cancelled by {cause}, which ended {cause_state}: {error}"
            );
            assert_eq!(
                (runs_of, ledger_of, attempts),
                (0, 0, 0),
                "cancelled job {key} ran"
            );
            f.cancelled += 1;
        } else {
            assert_eq!(state, "succeeded", "job {key}: {error}");
            assert_eq!(
                output,
                serde_json::to_string(&output_of(key)).unwrap(),
                "job {key}: its output"
            );
            assert_eq!(
                (runs_of, ledger_of),
                (1, 1),
                "job {key}: its work's rows and ledger rows"
            );
            let expected: Vec<String> = node
                .deps
                .iter()
                .map(|d| format!("{d}={}", output_of(d)))
                .collect();
            assert_eq!(
                runs[key][0][0],
                expected.join(","),
                "job {key}: its dependencies' outputs, as its transaction read them"
            );
            let mut saw: Vec<String> = seen
                .get(key)
                .into_iter()
                .flatten()
                .map(|r| format!("{}={}", r[0], r[1]))
                .collect();
            saw.sort();
            let mut want: Vec<String> =
                node.deps.iter().map(|d| format!("{d}=succeeded")).collect();
            want.sort();
            assert_eq!(
                saw, want,
                "job {key}: its dependencies' states, as its transaction read them"
            );
            f.succeeded += 1;
        }
    }
    assert_eq!(q.count("SELECT count(*) FROM jobs"), nodes.len() as i64);
    assert_eq!(
        q.count("SELECT count(*) FROM wf_runs"),
        q.count("SELECT count(*) FROM processed_jobs"),
        "work rows == ledger rows"
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

both! {
    /// Workflows (diamonds, chains, fan-ins, broken steps, later
    /// dependents of older keys, redeliveries) while worker children are
    /// SIGKILLed and aborted at the run's fault points, 48 times in CI
    /// (400 with `LITEJOB_SOAK=1`): afterwards every workflow is complete,
    /// no step started or committed before its dependencies succeeded,
    /// each step's work committed once.
    #[not_pooled("its children run on child::Env's own schema, reached directly, and look \
                  for idleness with a plain client on litejob's URL, which cannot pass \
                  `options` through a pooler")]
    fn killed_workers_leave_every_workflow_complete_each_step_once_after_its_dependencies(q) {
        let env = Env::new(q.engine);
        env.q.exec(TABLES);
        let mut rng = Rng::seeded();
        let t0 = Instant::now();
        let rounds = if soak() { 400 } else { 48 };
        let (nodes, kills) = enqueue_and_kill(&env, rounds, &mut rng);
        env.run_clean_with(&[("LITEJOB_BCHILD_MODE", "workflows".into())]);
        let f = check(&env, &nodes);
        eprintln!(
            "workflows on {:?}: {} SIGKILLs and {} aborts at fault points in {:?}; \
             {} late dependents went in waiting; {f:?}",
            q.engine,
            kills.sigkills,
            kills.aborts,
            t0.elapsed(),
            kills.late_waiting
        );
        let stderr = env.stderr_text();
        let hits: Vec<String> = RUN_POINTS
            .iter()
            .map(|p| format!("{p}={}", stderr.matches(&format!("litejob-fault: aborting at {p}\n")).count()))
            .collect();
        eprintln!("workflows on {:?}: aborts per fault point: {}", q.engine, hits.join(" "));
        assert!(kills.sigkills + kills.aborts >= rounds * 2 / 3, "{kills:?}");
        assert!(f.abandoned_runs > 0, "no kill ever landed during a run");
        assert!(f.cancelled > 0 && f.broken > 0 && f.succeeded > 0, "{f:?}");
    }
}
