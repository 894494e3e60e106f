//! Checkpoints off the write path: the checkpointer thread copies the WAL's
//! frames back into the database file on a connection of its own, so the
//! writer thread does not stop to do it after a commit. Writes no table;
//! it moves committed pages from `<file>-wal` into `<file>`.
//!
//! Why: SQLite checkpoints from the committing connection once the WAL holds
//! 1000 frames (`wal_autocheckpoint`), inside that commit's call: it reads
//! and writes megabytes and fsyncs the WAL and the database file while
//! every caller waits, and the writer thread is litejob's bottleneck when
//! processing.
//!
//! How: the write connection gets a WAL hook instead of autocheckpoint (the
//! hook replaces it). After each commit the writer reads the WAL's frame
//! count from the hook. With no other write waiting, it checkpoints itself
//! at [`SOFT_FRAMES`], as SQLite would. With writes waiting, it nudges the
//! checkpointer instead, which runs a PASSIVE checkpoint (it copies what is
//! committed, never waits for or blocks the writer). A PASSIVE checkpoint
//! that runs beside a busy writer rarely catches up with the last commit,
//! and SQLite restarts the WAL from its start only after a checkpoint that
//! did; so at
//! [`HARD_FRAMES`] the writer checkpoints itself, between two transactions,
//! as SQLite would have — by then the checkpointer has copied most frames
//! and little is left. The WAL stays bounded, as it did.
//!
//! A reader's snapshot keeps the frames committed after it in the WAL: no
//! checkpoint copies them, and the WAL cannot restart, until that reader
//! moves on. Litestream holds such a read transaction at all times (it
//! checkpoints the WAL itself, once it has copied the frames to its
//! replica), so under it the WAL stays past [`HARD_FRAMES`] for a second
//! at a time, and an inline checkpoint after every commit copied nothing:
//! 6,000 of them in one `litejob bench`, half a second of the writer's
//! time, 29–43 µs of CPU per processed job against 20–21 µs with no
//! checkpoints of litejob's at all. So once an inline checkpoint could not
//! copy every frame, the writer tries again only [`SOFT_FRAMES`] frames
//! later, or as usual once the WAL has restarted.
//!
//! Durability is SQLite's own: a checkpoint syncs the WAL before it copies a
//! frame and the database file before the WAL may be reused.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{select, Receiver, Sender, TrySendError};
use rusqlite::{Connection, OpenFlags};

/// Frames in the WAL at which the writer asks for a background checkpoint
/// (SQLite's own autocheckpoint threshold: ~4 MB with 4 KiB pages).
pub(crate) const SOFT_FRAMES: i32 = 1000;

/// Frames at which the writer checkpoints itself, so the WAL restarts even
/// when the background checkpoints never catch up with a busy writer.
pub(crate) const HARD_FRAMES: i32 = 4 * SOFT_FRAMES;

thread_local! {
    /// The WAL's size in frames after this thread's last commit on a write
    /// connection with [`install_hook`]; 0 once read. A thread-local is the
    /// only place the hook can leave it: rusqlite's `wal_hook` takes a plain
    /// `fn`, not a closure, so the hook can carry no state of its own, and
    /// SQLite calls it on the committing thread (the writer thread, or a
    /// caller committing inline), which reads it right after that commit.
    static FRAMES: Cell<i32> = const { Cell::new(0) };
}

fn note_frames(_: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    FRAMES.with(|f| f.set(frames));
    Ok(())
}

/// Replaces `conn`'s autocheckpoint by the frame-count hook read by
/// [`Checkpointer::after_commit`].
fn install_hook(conn: &Connection) {
    conn.wal_hook(Some(note_frames));
}

/// The checkpointer thread and its nudge. Dropping it stops and joins the
/// thread (a checkpoint under way finishes first).
pub(crate) struct Checkpointer {
    nudge: Sender<()>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Checkpoints the thread ran, and the writer's own (for tests and
    /// stats).
    done: Arc<AtomicU64>,
    inline: AtomicU64,
    /// Held while either side checkpoints. A checkpoint that finds another
    /// under way gives up at once (SQLITE_BUSY), and at [`HARD_FRAMES`] the
    /// writer must not: it waits for the thread's to finish, then runs its
    /// own, so the WAL never grows past the limit by more than a commit.
    gate: Arc<Mutex<()>>,
    /// The frame count at which the next nudge is due (see [`plan`]).
    next_nudge: AtomicI32,
    /// While a reader pins the WAL: the frame count below which no inline
    /// checkpoint is tried (0: none pinned it at the last one).
    pinned_below: AtomicI32,
}

impl Checkpointer {
    /// Starts a checkpointer for the file `conn` writes, and hooks `conn`.
    /// None (SQLite's autocheckpoint stays) when the file is not in WAL mode
    /// or a second connection cannot be opened.
    pub(crate) fn start(conn: &Connection) -> Option<Checkpointer> {
        let path = conn.path().filter(|p| !p.is_empty())?.to_owned();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .ok()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return None;
        }
        let own = match Connection::open_with_flags(
            Path::new(&path),
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ) {
            Ok(c) => c,
            Err(e) => {
                log::warn!(target: "litejob", "no checkpointer connection ({e}): the writer checkpoints itself");
                return None;
            }
        };
        // Its own autocheckpoint off: it checkpoints when asked, and never
        // commits anything that would trigger one.
        let _ = own.pragma_update(None, "wal_autocheckpoint", 0);
        let (nudge, nudged) = crossbeam_channel::bounded::<()>(1);
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let done = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(Mutex::new(()));
        let (d, g) = (done.clone(), gate.clone());
        let thread = std::thread::Builder::new()
            .name("litejob-checkpointer".into())
            .spawn(move || run(own, nudged, stopped, d, g))
            .map_err(|e| log::warn!(target: "litejob", "no checkpointer thread ({e}): the writer checkpoints itself"))
            .ok()?;
        install_hook(conn);
        Some(Checkpointer {
            nudge,
            stop: Some(stop),
            thread: Some(thread),
            done,
            inline: AtomicU64::new(0),
            gate,
            next_nudge: AtomicI32::new(SOFT_FRAMES),
            pinned_below: AtomicI32::new(0),
        })
    }

    /// Called by whoever just committed on the hooked connection, outside
    /// any transaction. `busy`: other writes are waiting for the
    /// connection. See [`plan`].
    pub(crate) fn after_commit(&self, conn: &Connection, busy: bool) {
        let frames = FRAMES.with(|f| f.replace(0));
        // Only whoever holds the write connection gets here: no race.
        let mut pinned = self.pinned_below.load(Ordering::Relaxed);
        if frames > 0 && frames < pinned - SOFT_FRAMES {
            // Fewer frames than at the pinned checkpoint: the WAL
            // restarted, whatever pinned it let go.
            pinned = 0;
        }
        let due = self.next_nudge.load(Ordering::Relaxed);
        let (step, due) = plan(frames, due, busy, pinned);
        self.next_nudge.store(due, Ordering::Relaxed);
        let inline = match step {
            Step::Nothing => false,
            Step::Inline => true,
            // Full: a nudge is already waiting; one checkpoint serves both.
            Step::Nudge => matches!(self.nudge.try_send(()), Err(TrySendError::Disconnected(()))),
        };
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
            let _turn = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            match passive(conn) {
                Ok(Copied::All) => pinned = 0,
                Ok(Copied::Pinned) => pinned = frames.saturating_add(SOFT_FRAMES),
                Err(e) => log::warn!(target: "litejob", "checkpoint failed: {e}"),
            }
        }
        self.pinned_below.store(pinned, Ordering::Relaxed);
    }

    /// (checkpoints by the thread, checkpoints by the writer itself).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.inline.load(Ordering::Relaxed),
        )
    }
}

/// What to do after a commit that left `frames` in the WAL.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    /// Ask the checkpointer thread.
    Nudge,
    /// Checkpoint on the committing connection, now.
    Inline,
}

/// The step after a commit that left `frames` in the WAL, with the nudge
/// last due at `due` and no inline checkpoint below `pinned_below` (a
/// reader pins the WAL, see the module's doc); and when the next nudge is
/// due.
///
/// When no other write waits (`busy` false), past [`SOFT_FRAMES`] the
/// committer checkpoints itself, as SQLite's autocheckpoint does: nobody
/// waits behind it, and it restarts the WAL at once (with background
/// checkpoints only, a lone producer enqueueing one job per commit was
/// slower). When writes wait, the thread
/// is nudged instead: once per [`SOFT_FRAMES`] new frames, not once per
/// commit (each checkpoint costs two fsyncs, and until the WAL
/// restarts every commit is past the threshold).
fn plan(frames: i32, due: i32, busy: bool, pinned_below: i32) -> (Step, i32) {
    let next = |f: i32| (f / SOFT_FRAMES + 1) * SOFT_FRAMES;
    if frames <= 0 {
        (Step::Nothing, due)
    } else if (frames >= HARD_FRAMES || (!busy && frames >= SOFT_FRAMES)) && frames >= pinned_below
    {
        // The WAL restarts at the next write, from 0.
        (Step::Inline, SOFT_FRAMES)
    } else if frames < due - SOFT_FRAMES {
        // The WAL restarted since the last nudge.
        (Step::Nothing, next(frames))
    } else if frames >= due {
        (Step::Nudge, next(frames))
    } else {
        (Step::Nothing, due)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    conn: Connection,
    nudged: Receiver<()>,
    stopped: Receiver<()>,
    done: Arc<AtomicU64>,
    gate: Arc<Mutex<()>>,
) {
    loop {
        select! {
            recv(nudged) -> m => if m.is_err() { return },
            recv(stopped) -> _ => return,
        }
        let _turn = gate.lock().unwrap_or_else(|e| e.into_inner());
        match passive(&conn) {
            Ok(_) => {
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => log::warn!(target: "litejob", "background checkpoint failed: {e}"),
        }
    }
}

/// What a checkpoint copied.
#[derive(Debug, PartialEq, Eq)]
enum Copied {
    /// Every frame in the WAL (or it could not run: another checkpoint
    /// held the lock, which says nothing of readers).
    All,
    /// Not the frames a reader's snapshot still needs.
    Pinned,
}

/// One PASSIVE checkpoint: copies every frame it can without waiting for
/// readers or the writer.
fn passive(conn: &Connection) -> rusqlite::Result<Copied> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        let (busy, log, copied): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        Ok(if busy == 0 && copied < log {
            Copied::Pinned
        } else {
            Copied::All
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_nudge_per_thousand_frames_and_the_writer_itself_at_four_thousand() {
        let mut due = SOFT_FRAMES;
        let mut steps = Vec::new();
        for frames in [10, 999, 1000, 1010, 1999, 2500, 2600, 3999, 4000, 30, 1200] {
            let (step, d) = plan(frames, due, true, 0);
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
        assert_eq!(plan(40, 3000, true, 0), (Nothing, 1000));
        assert_eq!(plan(0, 3000, true, 0), (Nothing, 3000));
        // With no write waiting, the committer checkpoints at 1000 itself.
        assert_eq!(plan(999, 1000, false, 0), (Nothing, 1000));
        assert_eq!(plan(1000, 1000, false, 0), (Inline, 1000));
        assert_eq!(plan(2300, 3000, false, 0), (Inline, 1000));
        // Pinned by a reader below 5,000 frames: no inline checkpoint
        // before, only the nudges.
        assert_eq!(plan(4500, 4000, true, 5000), (Nudge, 5000));
        assert_eq!(plan(4600, 5000, false, 5000), (Nothing, 5000));
        assert_eq!(plan(5000, 5000, true, 5000), (Inline, 1000));
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

    #[test]
    fn while_a_reader_pins_the_wal_the_writer_checkpoints_once_per_thousand_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
        let ck = Checkpointer::start(&conn).unwrap();
        // Litestream's hold on the WAL: a read transaction kept open.
        let reader = Connection::open(&path).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM t;")
            .unwrap();
        let commit = || {
            conn.execute_batch(
                "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 32) \
                 INSERT INTO t SELECT randomblob(4000) FROM n; COMMIT;",
            )
            .unwrap();
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
}
