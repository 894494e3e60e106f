//! A run's start and what a light operation queues: when the apply steps
//! of the runs it started, and its light follow-ups, run, and when they
//! never do.

use std::sync::Arc;

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use super::*;

/// A light operation that looks for 'x', and queues a run writing
/// `run` — as a claim starts the jobs it takes.
fn claim_like(
    run: &'static str,
) -> impl FnOnce(&Connection, &mut Cycle) -> Result<(bool, Receiver<Result<()>>)> + Send + 'static {
    move |c: &Connection, cycle: &mut Cycle| Ok((has(c, "x")?, cycle.apply((), apply(run))))
}

#[test]
fn a_claim_sees_what_its_cycle_enqueued_and_its_runs_apply_in_that_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    // The claim is sent before the enqueue, as when a supervisor claims
    // again while a producer's enqueue is on its way.
    let (claim, enqueue) = as_one_group(&w, || {
        let claim = w.submit_light(claim_like("run"));
        let enqueue = w.submit(insert("x"));
        (claim, enqueue)
    });
    let (seen, run) = wait(claim).unwrap();
    assert!(seen, "the claim ran before the enqueue of its own cycle");
    wait(run).unwrap();
    wait(enqueue).unwrap();
    assert_eq!(rows(&w), ["run", "x"]);
}

#[test]
fn a_light_follow_up_runs_after_the_runs_queued_before_it_and_its_own_runs_after_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    let path = dir.path().join("w.db");
    // Whether a reader (another connection) sees `v` committed.
    let committed = move |v: &str| -> bool { has(&Connection::open(&path).unwrap(), v).unwrap() };
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s1, s2) = (seen.clone(), seen.clone());
    let claim = move |c: &Connection, cycle: &mut Cycle| -> Result<_> {
        insert("claim")(c)?;
        let urgent = cycle.apply((), apply("urgent"));
        let rest = cycle.follow_up_light(move |c: &Connection, cycle: &mut Cycle| {
            s1.lock()
                .unwrap()
                .push(("rest starts", committed("claim"), committed("urgent")));
            insert("rest")(c)?;
            let committed = committed.clone();
            Ok(cycle.apply((), move |c: &Connection, ()| {
                s2.lock()
                    .unwrap()
                    .push(("rest runs", committed("rest"), committed("urgent")));
                insert("rest run")(c)
            }))
        });
        Ok((urgent, rest))
    };
    let (urgent, rest) = wait(w.submit_light(claim)).unwrap();
    wait(urgent).unwrap();
    let rest_run = wait(rest).unwrap();
    wait(rest_run).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        // The rest starts in the urgent run's transaction (after the
        // claim's commit); its own run comes after that commit.
        [("rest starts", true, false), ("rest runs", true, true)]
    );
    assert_eq!(rows(&w), ["claim", "rest", "rest run", "urgent"]);
}

#[test]
fn a_failing_light_follow_up_spares_the_runs_before_it_in_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    // As two claims' follow-ups land in one transaction: a run, a
    // light one, a run, a light one that fails.
    let queue = |c: &Connection, cycle: &mut Cycle| -> Result<_> {
        insert("claim")(c)?;
        Ok((
            cycle.apply((), apply("a")),
            cycle.follow_up_light(light(insert("light ok"))),
            cycle.apply((), apply("b")),
            cycle.follow_up_light(light(half_then_fail())),
        ))
    };
    let (a, ok, b, fails) = wait(w.submit_light(queue)).unwrap();
    assert!(wait(a).is_ok() && wait(ok).is_ok());
    let b = wait(b);
    assert!(b.is_ok(), "{b:?}");
    assert!(wait(fails).is_err());
    assert_eq!(rows(&w), ["a", "b", "claim", "light ok", "taken"]);
}

#[test]
fn a_run_queued_by_an_operation_that_is_undone_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    // Queues its run, then fails.
    let failing = |c: &Connection, cycle: &mut Cycle| -> Result<Receiver<Result<()>>> {
        let run = cycle.apply((), apply("run b"));
        insert("taken")(c)?;
        Ok(run)
    };
    let (a, b) = as_one_group(&w, || {
        let a = w.submit_light(claim_like("run a"));
        // Fails after a: the light transaction, a's claim with it, is undone.
        let b = w.submit_light(failing);
        (a, b)
    });
    assert!(matches!(wait(a), Err(Error::Aborted(_))));
    assert!(wait(b).is_err());
    // Only a light operation may queue runs: a durable one is given no
    // `Cycle` to queue them with, so `w.submit(claim_like("run c"))` does
    // not compile (the writer is private, so no `compile_fail` doctest can
    // show it).
    assert_eq!(rows(&w), ["taken"]);
}

#[test]
fn an_apply_step_runs_only_if_its_start_committed() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    let start = |start: TestOp, v: &'static str| {
        w.start(false, move |c: &Connection| start(c).map(Some), apply(v))
    };
    let (a, b, c) = as_one_group(&w, || {
        let a = start(Box::new(insert("start a")), "apply a");
        // Its start fails: the light transaction (a's start with it) is undone.
        let b = start(Box::new(insert("taken")), "apply b");
        let c = start(Box::new(insert("start c")), "apply c");
        (a, b, c)
    });
    let [(a_start, a_apply), (b_start, b_apply), (c_start, c_apply)] =
        [a, b, c].map(|(s, a)| (wait(s), wait(a)));
    assert!(matches!(a_start, Err(Error::Aborted(_))), "{a_start:?}");
    assert!(matches!(a_apply, Err(Error::Aborted(_))), "{a_apply:?}");
    assert!(b_start.is_err() && matches!(b_apply, Err(Error::Aborted(_))));
    assert!(
        c_start.is_ok() && c_apply.is_ok(),
        "{c_start:?} {c_apply:?}"
    );
    assert_eq!(rows(&w), ["apply c", "start c", "taken"]);
}

#[test]
fn a_start_sent_alone_runs_in_a_cycle_of_its_own_which_no_neighbour_can_undo() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    // In one light transaction with its neighbours, the failing one after
    // it would undo its start and the one before (a suspect's neighbours
    // would share its fate, and it theirs).
    let (before, (started, applied), failing) = as_one_group(&w, || {
        let before = w.submit_light(light(insert("before")));
        let start = |c: &Connection| insert("start")(c).map(Some);
        let alone = w.start(true, start, apply("run"));
        let failing = w.submit_light(light(half_then_fail()));
        (before, alone, failing)
    });
    assert!(wait(before).is_ok());
    let (started, applied) = (wait(started), wait(applied));
    assert!(
        started.is_ok() && applied.is_ok(),
        "{started:?} {applied:?}"
    );
    assert!(wait(failing).is_err());
    assert_eq!(rows(&w), ["before", "run", "start", "taken"]);
}
