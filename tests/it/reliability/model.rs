//! A state-machine property test: enqueue / run (claim, complete, fail,
//! panic) / crash (a process that died after claiming or starting a job,
//! its lease expired) / prune, against a simple model, with the invariants
//! checked after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use litejob::Backoff;
use litejob::{Enqueued, NewJob, Outcome, Queue};

use crate::support::{wait_until, TestDb};

#[derive(Debug, Clone)]
enum Op {
    Enqueue { key: u8, kind: u8 },
    Run,
    Crash { started: bool },
    Prune,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..10, 0u8..3).prop_map(|(key, kind)| Op::Enqueue { key, kind }),
        2 => Just(Op::Run),
        2 => any::<bool>().prop_map(|started| Op::Crash { started }),
        1 => Just(Op::Prune),
    ]
}

const KINDS: [&str; 3] = ["ok", "fail", "panic"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Queued,
    /// A dead process holds it (lease expired); `started`: it had begun a run.
    Ghost {
        started: bool,
    },
    Succeeded,
    Dead,
}

#[derive(Debug, Clone)]
struct MJob {
    id: i64,
    kind: &'static str,
    st: St,
    attempts: i64,
    abandoned: i64,
}

#[derive(Default, Debug)]
struct Model {
    jobs: BTreeMap<String, MJob>,
    ledger: BTreeSet<String>,
}

fn start(q: &Queue) -> litejob::Runtime {
    let zero = Backoff::default()
        .with_base(Duration::ZERO)
        .with_max(Duration::ZERO)
        .with_jitter(0.0);
    let effect = |tx: &litejob::sqlite::JobTx<'_>| -> rusqlite::Result<usize> {
        tx.execute("INSERT INTO effects (key) VALUES (?1)", [&tx.job().key])
    };
    q.runtime()
        .workers(1)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10))
        .backoff(zero)
        .handler("ok", move |tx, _: serde_json::Value| {
            effect(tx)?;
            Ok(Outcome::Done)
        })
        .handler("fail", move |tx, _: serde_json::Value| {
            effect(tx)?;
            Ok(Outcome::Retry("made to fail".into()))
        })
        .handler("panic", move |tx, _: serde_json::Value| {
            effect(tx)?;
            panic!("deliberate panic in a handler")
        })
        .start()
        .unwrap()
}

// Long: one arm per operation of the model, each with its expectation.
fn step(db: &TestDb, q: &Queue, m: &mut Model, op: &Op) {
    let c = db.sql();
    match *op {
        Op::Enqueue { key, kind } => {
            let key = format!("k{key}");
            let kind = KINDS[kind as usize];
            let r = q.enqueue(NewJob::new(kind, key.clone(), &0)).unwrap();
            match (m.jobs.get(&key), m.ledger.contains(&key)) {
                (Some(j), _) => assert_eq!(r, Enqueued::Duplicate(j.id), "{key}"),
                (None, true) => assert!(r.is_duplicate(), "{key}: ledger says duplicate"),
                (None, false) => {
                    let Enqueued::New(id) = r else {
                        panic!("{key}: expected new, got {r:?}")
                    };
                    m.jobs.insert(
                        key,
                        MJob {
                            id,
                            kind,
                            st: St::Queued,
                            attempts: 0,
                            abandoned: 0,
                        },
                    );
                }
            }
        }
        Op::Crash { started } => {
            let Some((key, j)) = m.jobs.iter_mut().find(|(_, j)| j.st == St::Queued) else {
                return;
            };
            c.execute(
                "UPDATE jobs SET state = 'running', lease_owner = 'ghost', lease_expires_at = 1 WHERE id = ?1",
                [j.id],
            )
            .unwrap();
            if started {
                c.execute(
                    "INSERT INTO attempts (job_id, attempt, key, worker, started_at) \
                     SELECT id, attempts + 1, idempotency_key, 'ghost/1', 1 FROM jobs WHERE id = ?1",
                    [j.id],
                )
                .unwrap();
                let aid = c.last_insert_rowid();
                c.execute(
                    "UPDATE jobs SET attempts = attempts + 1, current_attempt = ?2 WHERE id = ?1",
                    [j.id, aid],
                )
                .unwrap();
                j.attempts += 1;
            }
            let _ = key;
            j.st = St::Ghost { started };
        }
        Op::Run => {
            let mut rt = start(q);
            wait_until("quiescent", Duration::from_secs(30), || {
                db.count(
                    "SELECT count(*) FROM jobs WHERE state = 'running' \
                     OR (state = 'queued' AND run_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER))",
                ) == 0
            });
            rt.stop();
            for (key, j) in m.jobs.iter_mut() {
                if let St::Ghost { started } = j.st {
                    if started {
                        j.attempts -= 1;
                        j.abandoned += 1;
                        j.st = if j.abandoned >= 3 {
                            St::Dead
                        } else {
                            St::Queued
                        };
                    } else {
                        j.st = St::Queued;
                    }
                }
                if j.st == St::Queued {
                    if j.kind == "ok" {
                        j.st = St::Succeeded;
                        j.attempts += 1;
                        m.ledger.insert(key.clone());
                    } else {
                        j.st = St::Dead;
                        j.attempts = 2;
                    }
                }
            }
        }
        Op::Prune => {
            c.execute_batch(
                "BEGIN IMMEDIATE; \
                 DELETE FROM attempts WHERE job_id IN (SELECT id FROM jobs WHERE finished_at IS NOT NULL); \
                 DELETE FROM jobs WHERE finished_at IS NOT NULL; COMMIT",
            )
            .unwrap();
            m.jobs
                .retain(|_, j| matches!(j.st, St::Queued | St::Ghost { .. }));
        }
    }
}

fn check(db: &TestDb, m: &Model, after: &Op) {
    let c = db.sql();
    assert_eq!(
        db.count("SELECT count(*) FROM jobs"),
        m.jobs.len() as i64,
        "after {after:?}: job count"
    );
    for (key, j) in &m.jobs {
        let (id, kind, state, attempts, abandoned): (i64, String, String, i64, i64) = c
            .query_row(
                "SELECT id, kind, state, attempts, abandoned FROM jobs WHERE idempotency_key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        let want = match j.st {
            St::Queued => "queued",
            St::Ghost { .. } => "running",
            St::Succeeded => "succeeded",
            St::Dead => "dead",
        };
        assert_eq!(
            (id, kind.as_str(), state.as_str(), attempts, abandoned),
            (j.id, j.kind, want, j.attempts, j.abandoned),
            "after {after:?}: job {key}"
        );
        let runs: i64 = c
            .query_row(
                "SELECT count(*) FROM attempts WHERE job_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert!(
            runs >= attempts,
            "job {key}: {runs} runs recorded, {attempts} charged"
        );
    }
    let ledger: BTreeSet<String> = c
        .prepare("SELECT key FROM processed_jobs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(ledger, m.ledger, "after {after:?}: ledger");
    let effects: BTreeMap<String, i64> = c
        .prepare("SELECT key, count(*) FROM effects GROUP BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let want: BTreeMap<String, i64> = m.ledger.iter().map(|k| (k.clone(), 1)).collect();
    assert_eq!(
        effects, want,
        "after {after:?}: in-transaction effects = ledger, once each"
    );
    let running = db.count("SELECT count(*) FROM attempts WHERE outcome = 'running'");
    let ghosts = m
        .jobs
        .values()
        .filter(|j| j.st == St::Ghost { started: true })
        .count() as i64;
    assert_eq!(running, ghosts, "after {after:?}: attempts left running");
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

it! {
    fn runs_crashes_and_prunes_agree_with_a_model_of_the_queue() {
        let mut runner = TestRunner::new(Config {
            failure_persistence: None,
            ..crate::support::proptest_config(20)
        });
        runner
            .run(&proptest::collection::vec(op(), 1..30), |ops| {
                let db = TestDb::new();
                let q = db.open();
                q.write(|tx| {
                    tx.execute_batch("CREATE TABLE effects (key TEXT NOT NULL)")?;
                    Ok(())
                })
                .unwrap();
                let mut m = Model::default();
                for op in &ops {
                    step(&db, &q, &mut m, op);
                    check(&db, &m, op);
                }
                Ok(())
            })
            .unwrap();
    }
}
