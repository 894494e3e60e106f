//! The writer's behaviour through its handle: what a failure undoes, and
//! when queued follow-up work runs (`starts`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use super::op::Durability;
use super::sync::SyncMode;
use super::{wait, Cycle, Writer, WriterConfig};
use crate::error::{Error, Result};

mod starts;

fn writer(dir: &tempfile::TempDir) -> Writer {
    let path = dir.path().join("w.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v TEXT NOT NULL UNIQUE);")
        .unwrap();
    Writer::spawn(
        conn,
        WriterConfig {
            max_batch: 512,
            full_sync: true,
            op_budget: None,
        },
    )
    .unwrap()
}

fn insert(v: &'static str) -> impl FnOnce(&Connection) -> Result<()> + Send + 'static {
    move |c: &Connection| {
        c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
        Ok(())
    }
}

/// [`insert`] as the apply step of a run started with nothing to hand it.
fn apply(v: &'static str) -> impl FnOnce(&Connection, ()) -> Result<()> + Send + 'static {
    move |c: &Connection, ()| insert(v)(c)
}

/// Whether `c` sees the row `v`. (The SQL of the tests on table `t` stays
/// in this file, which the check of the sources' SQL leaves out.)
fn has(c: &Connection, v: &str) -> rusqlite::Result<bool> {
    c.query_row("SELECT EXISTS (SELECT 1 FROM t WHERE v = ?1)", [v], |r| {
        r.get(0)
    })
}

fn rows(w: &Writer) -> Vec<String> {
    let c = w.core.lock();
    let mut st = c.prepare("SELECT v FROM t ORDER BY v").unwrap();
    let v = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    v
}

type TestOp = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// Whatever `submit` sends reaches the writer thread as one group: the
/// connection is held while it is queued behind a first, empty operation.
fn as_one_group<T>(w: &Writer, submit: impl FnOnce() -> T) -> T {
    let held = w.core.lock();
    let first = w.submit_light(|_, _| Ok(()));
    std::thread::sleep(Duration::from_millis(50));
    let sent = submit();
    drop(held);
    let _ = wait(first);
    sent
}

/// An operation that writes a row ('half'), then fails on the unique
/// 'taken' row: what it wrote must not survive.
fn half_then_fail() -> impl FnOnce(&Connection) -> Result<()> + Send + 'static {
    |c: &Connection| {
        c.execute("INSERT INTO t (v) VALUES ('half')", [])?;
        c.execute("INSERT INTO t (v) VALUES ('taken')", [])?;
        Ok(())
    }
}

/// Sends `f` as an operation of the given class.
fn submit_with(w: &Writer, durability: Durability, f: TestOp) -> Receiver<Result<()>> {
    match durability {
        Durability::Durable => w.submit(f),
        Durability::Light => w.submit_light(move |c, _| f(c)),
    }
}

/// `f` as a light operation's body that queues nothing.
fn light(
    f: impl FnOnce(&Connection) -> Result<()> + Send + 'static,
) -> impl FnOnce(&Connection, &mut Cycle) -> Result<()> + Send + 'static {
    move |c: &Connection, _: &mut Cycle| f(c)
}

/// Runs `ops` as one group of the writer thread.
fn one_group(w: &Writer, durability: Durability, ops: Vec<TestOp>) -> Vec<Result<()>> {
    let rx: Vec<_> = as_one_group(w, || {
        ops.into_iter()
            .map(|f| submit_with(w, durability, f))
            .collect()
    });
    rx.into_iter().map(wait).collect()
}

#[test]
fn a_failing_light_operation_undoes_its_transaction_and_the_next_ones_commit() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    let r = one_group(
        &w,
        Durability::Light,
        vec![
            Box::new(insert("a")),
            // No savepoint: its half goes with the whole transaction.
            Box::new(half_then_fail()),
            Box::new(insert("b")),
            Box::new(insert("c")),
        ],
    );
    assert!(matches!(r[0], Err(Error::Aborted(_))), "{:?}", r[0]);
    assert!(
        r[1].is_err() && !matches!(r[1], Err(Error::Aborted(_))),
        "{:?}",
        r[1]
    );
    assert!(r[2].is_ok() && r[3].is_ok(), "{r:?}");
    assert_eq!(rows(&w), ["b", "c", "taken"]);
}

#[test]
fn a_failing_light_operation_leaves_the_durable_ones_of_its_transaction_alone() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    let (a, failing, b, durable) = as_one_group(&w, || {
        let light = |f: TestOp| submit_with(&w, Durability::Light, f);
        let a = light(Box::new(insert("a")));
        let failing = light(Box::new(half_then_fail()));
        let b = light(Box::new(insert("b")));
        // Sent last, applied first: durable operations lead the cycle.
        let durable = w.submit(insert("enqueued"));
        (a, failing, b, durable)
    });
    assert!(matches!(wait(a), Err(Error::Aborted(_))));
    let failing = wait(failing);
    assert!(
        failing.is_err() && !matches!(failing, Err(Error::Aborted(_))),
        "{failing:?}"
    );
    assert!(wait(b).is_ok());
    assert!(wait(durable).is_ok());
    assert_eq!(rows(&w), ["b", "enqueued", "taken"]);
}

#[test]
fn a_failing_durable_operation_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    let r = one_group(
        &w,
        Durability::Durable,
        vec![
            Box::new(insert("a")),
            Box::new(half_then_fail()),
            Box::new(|_: &Connection| panic!("an operation panics")),
            Box::new(insert("b")),
        ],
    );
    assert!(r[0].is_ok() && r[3].is_ok(), "{r:?}");
    assert!(r[1].is_err() && r[2].is_err(), "{r:?}");
    assert_eq!(rows(&w), ["a", "b", "taken"]);
}

#[test]
fn an_operation_alone_in_its_group_runs_without_a_savepoint_and_still_fails_whole() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    let r = one_group(&w, Durability::Durable, vec![Box::new(half_then_fail())]);
    assert!(r[0].is_err(), "{r:?}");
    // Its first row went with the transaction, and the writer goes on.
    w.run(insert("after")).unwrap();
    assert_eq!(rows(&w), ["after", "taken"]);
}

#[test]
fn a_self_isolated_operation_is_trusted_when_it_fails_and_never_half_committed_when_it_panics() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    // A clean failure (it wrote nothing): its neighbours commit.
    let (a, clean, b) = as_one_group(&w, || {
        (
            w.submit(insert("a")),
            w.submit_apply(|_: &Connection| -> Result<()> {
                Err(Error::LeaseLost {
                    job_id: 1,
                    detail: "lost, wrote nothing".into(),
                })
            }),
            w.submit(insert("b")),
        )
    });
    assert!(wait(a).is_ok() && wait(b).is_ok());
    assert!(matches!(wait(clean), Err(Error::LeaseLost { .. })));
    assert_eq!(rows(&w), ["a", "b", "taken"]);
    // A panic after a write: the writer cannot tell what it left, so
    // nothing of its transaction commits; later operations do.
    let (c, panicked, d) = as_one_group(&w, || {
        (
            w.submit(insert("c")),
            w.submit_apply(|conn: &Connection| -> Result<()> {
                conn.execute("INSERT INTO t (v) VALUES ('half a run')", [])?;
                panic!("a bug after the first write")
            }),
            w.submit(insert("d")),
        )
    });
    assert!(matches!(wait(c), Err(Error::Aborted(_))));
    assert!(wait(panicked).is_err());
    assert!(wait(d).is_ok());
    assert_eq!(rows(&w), ["a", "b", "d", "taken"]);
}

#[test]
fn a_self_isolated_operation_that_could_not_undo_its_writes_ends_the_whole_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("taken")).unwrap();
    // It wrote, then says it could not undo that: nothing of its
    // transaction commits, its neighbour before it included; its caller
    // learns it was aborted; later operations go on.
    let (a, half, b) = as_one_group(&w, || {
        (
            w.submit(insert("a")),
            w.submit_apply(|conn: &Connection| -> Result<()> {
                conn.execute("INSERT INTO t (v) VALUES ('half a run')", [])?;
                Err(Error::HalfWritten("its rollback failed".into()))
            }),
            w.submit(insert("b")),
        )
    });
    assert!(matches!(wait(a), Err(Error::Aborted(_))));
    assert!(matches!(wait(half), Err(Error::Aborted(_))));
    assert!(wait(b).is_ok());
    assert_eq!(rows(&w), ["b", "taken"]);
}

#[test]
fn after_a_failed_fsync_no_durable_write_is_called_durable() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    w.run(insert("before")).unwrap();
    let SyncMode::Wal { failed, .. } = &w.core.sync else {
        panic!("a file queue syncs its WAL itself");
    };
    // What a failed sync_data() leaves behind.
    failed.store(true, Ordering::Release);
    for v in ["inline", "queued"] {
        let r = if v == "inline" {
            w.run(insert("inline"))
        } else {
            wait(w.submit(insert("queued")))
        };
        assert!(matches!(r, Err(Error::OutcomeUnknown(_))), "{v}: {r:?}");
    }
    // Light writes never claimed durability: still answered.
    w.run_light(insert("light")).unwrap();
    // Producers blocked together, whose groups the writer thread syncs
    // itself rather than the syncer: none is called durable either.
    let (mut rounds, n) = (0, AtomicUsize::new(0));
    while w.core.direct_syncs.load(Ordering::Relaxed) == 0 {
        rounds += 1;
        assert!(rounds <= 200, "no group was synced by the writer thread");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..3 {
                        let v = format!("together {}", n.fetch_add(1, Ordering::Relaxed));
                        let r = w.run(move |c: &Connection| {
                            c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
                            Ok(())
                        });
                        assert!(matches!(r, Err(Error::OutcomeUnknown(_))), "{r:?}");
                    }
                });
            }
        });
    }
}

#[test]
fn an_aborted_retrying_operation_is_sent_again_whether_or_not_anyone_waits() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(&dir);
    let add = |v: &'static str| {
        Arc::new(move |c: &Connection| -> Result<()> {
            c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
            Ok(())
        })
    };
    let panics_after_a_write = |conn: &Connection| -> Result<()> {
        conn.execute("INSERT INTO t (v) VALUES ('half a run')", [])?;
        panic!("a bug after the first write")
    };
    let (tx, waited) = super::op::channel();
    // Its caller went away (a dropped future): the retry must not need it.
    let (tx_alone, gone) = super::op::channel();
    drop(gone);
    let panicked = as_one_group(&w, || {
        w.submit_retrying(add("waited for"), 5, tx);
        w.submit_retrying(add("nobody waits"), 5, tx_alone);
        // Rolls the whole transaction back: the two above learn `Aborted`.
        w.submit_apply(panics_after_a_write)
    });
    assert!(wait(panicked).is_err());
    assert!(wait(waited).is_ok());
    let t0 = std::time::Instant::now();
    while rows(&w).len() < 2 {
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", rows(&w));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(rows(&w), ["nobody waits", "waited for"]);
    // With no retry left, the caller gets the `Aborted`.
    let (tx, rx) = super::op::channel();
    let panicked = as_one_group(&w, || {
        w.submit_retrying(add("no retry"), 0, tx);
        w.submit_apply(panics_after_a_write)
    });
    assert!(wait(panicked).is_err());
    assert!(matches!(wait(rx), Err(Error::Aborted(_))));
    assert_eq!(rows(&w), ["nobody waits", "waited for"]);
}
