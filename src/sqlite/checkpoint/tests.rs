//! The checkpoint plan and the checkpointer against real WAL files.

use super::*;

#[test]
fn one_nudge_per_thousand_frames_and_the_writer_itself_at_four_thousand() {
    let mut due = SOFT_FRAMES;
    let mut steps = Vec::new();
    for frames in [10, 999, 1000, 1010, 1999, 2500, 2600, 3999, 4000, 30, 1200] {
        let (step, d) = plan(frames, due, true, 0, true);
        due = d;
        steps.push((frames, step));
    }
    use Step::*;
    assert_eq!(
        steps,
        [
            (10, Nothing),
            (999, Nothing),
            (1000, Nudge),
            (1010, Nothing),
            (1999, Nothing),
            (2500, Nudge),
            (2600, Nothing),
            (3999, Nudge),
            (4000, Inline),
            (30, Nothing),
            (1200, Nudge),
        ]
    );
    // A restart noticed late (the nudge was due at 3000, the WAL now
    // holds 40 frames) starts counting again from there.
    assert_eq!(plan(40, 3000, true, 0, true), (Nothing, 1000));
    assert_eq!(plan(0, 3000, true, 0, true), (Nothing, 3000));
    // With no write waiting, the committer checkpoints at 1000 itself.
    assert_eq!(plan(999, 1000, false, 0, true), (Nothing, 1000));
    assert_eq!(plan(1000, 1000, false, 0, true), (Inline, 1000));
    assert_eq!(plan(2300, 3000, false, 0, true), (Inline, 1000));
    // Pinned by a reader below 5,000 frames: no inline checkpoint
    // before, only the nudges.
    assert_eq!(plan(4500, 4000, true, 5000, true), (Nudge, 5000));
    assert_eq!(plan(4600, 5000, false, 5000, true), (Nothing, 5000));
    assert_eq!(plan(5000, 5000, true, 5000, true), (Inline, 1000));
    // Still pinned at 8,000 frames: the writer holds off; and no more
    // once a hold ran out, until the WAL restarts.
    assert_eq!(plan(8000, 8000, true, 6000, true), (Hold, 9000));
    assert_eq!(plan(8000, 8000, false, 6000, true), (Hold, 9000));
    assert_eq!(plan(8100, 9000, true, 9100, false), (Nothing, 9000));
    assert_eq!(plan(9100, 9000, true, 9100, false), (Inline, 1000));
    // Not known to be pinned (the last checkpoint found another under
    // way): a hold too, whose first checkpoint says.
    assert_eq!(plan(8000, 8000, true, 0, true), (Hold, 9000));
}

#[test]
fn the_thread_checkpoints_and_the_wal_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
    let ck = Checkpointer::start(&conn).expect("a WAL file on disk gets a checkpointer");
    let wal = dir.path().join("q.db-wal");
    let mut biggest = 0;
    // 300 commits of ~33 frames: ~10,000 frames in all, the WAL would
    // reach ~40 MB if nothing checkpointed.
    for _ in 0..300 {
        conn.execute_batch(
            "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 32) \
             INSERT INTO t SELECT randomblob(4000) FROM n; COMMIT;",
        )
        .unwrap();
        ck.after_commit(&conn, true);
        biggest = biggest.max(std::fs::metadata(&wal).unwrap().len());
    }
    let limit = (HARD_FRAMES as u64 + 2 * 40) * (4096 + 24) + 32;
    assert!(
        biggest <= limit,
        "WAL reached {biggest} bytes (limit {limit})"
    );
    let (background, inline) = ck.counts();
    assert!(background > 0, "the thread never checkpointed");
    assert!(
        background + inline >= 2,
        "{background} + {inline} checkpoints"
    );
    drop(ck);
    let n: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 300 * 32);
}

/// ~33 frames in one transaction.
fn commit_33_frames(conn: &Connection) {
    conn.execute_batch(
        "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 32) \
         INSERT INTO t SELECT randomblob(4000) FROM n; COMMIT;",
    )
    .unwrap();
}

#[test]
fn while_a_reader_pins_the_wal_the_writer_checkpoints_once_per_thousand_frames() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
    let mut ck = Checkpointer::start(&conn).unwrap();
    // A reader that never lets go: the one hold runs out soon.
    ck.hold_at_most = Duration::from_millis(50);
    // Litestream's hold on the WAL: a read transaction kept open.
    let reader = Connection::open(&path).unwrap();
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM t;")
        .unwrap();
    let commit = || {
        commit_33_frames(&conn);
        // A lone writer, with no other write waiting: the case that
        // checkpoints inline from 1,000 frames on.
        ck.after_commit(&conn, false);
    };
    // ~10,000 frames, all pinned: an inline checkpoint after each
    // commit from the 30th on would be some 270.
    for _ in 0..300 {
        commit();
    }
    let (_, inline) = ck.counts();
    assert!(
        (5..=15).contains(&inline),
        "{inline} inline checkpoints while the WAL was pinned"
    );
    assert_eq!(
        ck.holds().0,
        1,
        "the writer holds off once, then writes on until the WAL restarts"
    );
    // The reader lets go: the next inline checkpoint copies it all and
    // the WAL starts over.
    reader.execute_batch("COMMIT").unwrap();
    for _ in 0..40 {
        commit();
    }
    let log: i64 = conn
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
        .unwrap();
    assert!(log < 2000, "the WAL did not restart: {log} frames");
}

/// Litestream's way with the WAL: a read transaction held at all
/// times, let go every `every` for a checkpoint of its own, then a
/// write that starts the WAL over.
fn replicator(path: &Path, every: Duration, stop: Receiver<()>) -> JoinHandle<u32> {
    let open = || {
        let c = Connection::open(path).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        c
    };
    let (read, write) = (open(), open());
    write
        .execute_batch("CREATE TABLE IF NOT EXISTS seq (n INTEGER)")
        .unwrap();
    std::thread::spawn(move || {
        let hold = || {
            read.execute_batch("BEGIN; SELECT count(*) FROM seq;")
                .unwrap()
        };
        let mut copied_all = 0;
        hold();
        loop {
            let stopped = stop.recv_timeout(every).is_ok();
            read.execute_batch("COMMIT").unwrap();
            if stopped {
                return copied_all;
            }
            let (_, log, copied) = checkpoint_counts(&read).unwrap();
            copied_all += u32::from(copied == log);
            hold();
            write.execute_batch("INSERT INTO seq VALUES (1)").unwrap();
        }
    })
}

#[test]
fn beside_a_replicator_that_checkpoints_itself_the_writer_keeps_the_wal_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
    let ck = Checkpointer::start(&conn).unwrap();
    let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
    let replicating = replicator(&path, Duration::from_millis(200), stopped);
    let wal = dir.path().join("q.db-wal");
    let mut biggest = 0;
    // ~30,000 frames: 120 MB of WAL with nothing holding off.
    for _ in 0..900 {
        commit_33_frames(&conn);
        ck.after_commit(&conn, true);
        biggest = biggest.max(std::fs::metadata(&wal).unwrap().len());
    }
    stop.send(()).unwrap();
    let copied_all = replicating.join().unwrap();
    let limit = (PINNED_FRAMES as u64 + 2 * 40) * (4096 + 24) + 32;
    assert!(
        biggest <= limit,
        "WAL reached {biggest} bytes (limit {limit})"
    );
    let (holds, _) = ck.holds();
    assert!(
        holds >= 2,
        "{holds} holds, {copied_all} full checkpoints by the replicator"
    );
    drop(ck);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 900 * 32);
}
