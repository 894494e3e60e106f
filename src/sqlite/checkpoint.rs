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
//! moves on. Litestream (0.3 and 0.5 alike) holds such a read transaction
//! at all times, so that no checkpoint but its own moves frames it has not
//! copied to its replica yet. Once a second it copies the new frames, lets
//! go, runs a PASSIVE checkpoint of its own (0.5 under the write lock),
//! takes its read again and writes a row, which starts the WAL over. In
//! between, an inline checkpoint after every commit copied nothing: 6,000
//! of them in one `litejob bench`, half a second of the writer's time,
//! 29–43 µs of CPU per processed job against 20–21 µs with no checkpoints
//! of litejob's at all. So once an inline checkpoint could not copy every
//! frame, the writer tries again only [`SOFT_FRAMES`] frames later, or as
//! usual once the WAL has restarted.
//!
//! Nor can litejob's checkpoints keep that WAL short, and a writer that
//! never stops wrote 30,000 frames (120 MB) within one of Litestream's
//! seconds in `litejob demo`; the file reached 100–265 MB. It keeps the size
//! it reached: a PASSIVE checkpoint never shrinks it, and it is removed
//! only when its last connection closes, which Litestream's is not. So at
//! [`PINNED_FRAMES`], with the WAL still pinned, the writer holds off
//! between two transactions until the reader lets go (a PASSIVE checkpoint
//! now and then shows the WAL copied or started over), which Litestream
//! does within its second: the file then stayed at 32–33 MB, under any
//! load, with both releases. That is what Litestream expects of an
//! application: it checkpoints, and the application lets it (0.5 takes the
//! write lock for it, and the writer holds none meanwhile). A writer that
//! would write more than that in a second waits for the rest of it. It
//! waits [`HOLD_AT_MOST`] at most: a reader still there by then is not one
//! that checkpoints (a long report, a stalled replicator), and the writer
//! writes on, holding off again only once the WAL has restarted. With no
//! reader holding on, the WAL never gets there and nothing waits.
//!
//! Durability is SQLite's own: a checkpoint syncs the WAL before it copies a
//! frame and the database file before the WAL may be reused.

use crate::core::sync::lock;
use std::cell::Cell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender, TrySendError};
use rusqlite::{Connection, OpenFlags};

/// Frames in the WAL at which the writer asks for a background checkpoint
/// (SQLite's own autocheckpoint threshold: ~4 MB with 4 KiB pages).
pub(crate) const SOFT_FRAMES: i32 = 1000;

/// Frames at which the writer checkpoints itself, so the WAL restarts even
/// when the background checkpoints never catch up with a busy writer.
pub(crate) const HARD_FRAMES: i32 = 4 * SOFT_FRAMES;

/// Frames at which the writer holds off while a reader pins the WAL
/// (~32 MB with 4 KiB pages), until the reader lets go.
pub(crate) const PINNED_FRAMES: i32 = 2 * HARD_FRAMES;

/// The longest the writer holds off for a reader: Litestream checkpoints
/// once a second, twice that is a reader that does not.
const HOLD_AT_MOST: Duration = Duration::from_secs(2);

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
    /// The WAL's frames after the last commit that wrote some: fewer after
    /// the next, and the WAL has restarted.
    last_frames: AtomicI32,
    /// False once a hold ran out with the reader still there, until the
    /// WAL restarts.
    may_hold: AtomicBool,
    hold_at_most: Duration,
    /// Holds, and the milliseconds they lasted (for tests and stats).
    holds: AtomicU64,
    held_ms: AtomicU64,
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
            last_frames: AtomicI32::new(0),
            may_hold: AtomicBool::new(true),
            hold_at_most: HOLD_AT_MOST,
            holds: AtomicU64::new(0),
            held_ms: AtomicU64::new(0),
        })
    }

    /// Called by whoever just committed on the hooked connection, outside
    /// any transaction. `busy`: other writes are waiting for the
    /// connection. See [`plan`].
    pub(crate) fn after_commit(&self, conn: &Connection, busy: bool) {
        let frames = FRAMES.with(|f| f.replace(0));
        // Only whoever holds the write connection gets here: no race.
        let mut pinned = self.pinned_below.load(Ordering::Relaxed);
        let mut may_hold = self.may_hold.load(Ordering::Relaxed);
        if frames > 0 && frames < self.last_frames.swap(frames, Ordering::Relaxed) {
            // The WAL restarted: whatever pinned it let go.
            pinned = 0;
            may_hold = true;
        }
        let due = self.next_nudge.load(Ordering::Relaxed);
        let (step, due) = plan(frames, due, busy, pinned, may_hold);
        self.next_nudge.store(due, Ordering::Relaxed);
        let inline = match step {
            Step::Nothing => false,
            Step::Inline => true,
            // Full: a nudge is already waiting; one checkpoint serves both.
            Step::Nudge => matches!(self.nudge.try_send(()), Err(TrySendError::Disconnected(()))),
            Step::Hold => {
                self.holds.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                let released = self.hold(conn, frames);
                self.held_ms
                    .fetch_add(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
                // Released, the WAL may still not restart: a reader whose
                // snapshot is the WAL's end (Litestream's, after a
                // checkpoint of its own that could not copy every frame)
                // lets a checkpoint copy all, not the WAL start over. So
                // `pinned` stays: the next commit past the limit holds off
                // again while that lasts.
                if !released {
                    log::debug!(target: "litejob",
                        "a reader has kept the WAL from a checkpoint for {:?}: writing on",
                        self.hold_at_most);
                    may_hold = false;
                    pinned = frames.saturating_add(SOFT_FRAMES);
                }
                false
            }
        };
        self.may_hold.store(may_hold, Ordering::Relaxed);
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
            let _turn = lock(&self.gate);
            match passive(conn) {
                Ok(Copied::All) => pinned = 0,
                Ok(Copied::Pinned) => pinned = frames.saturating_add(SOFT_FRAMES),
                Err(e) => log::warn!(target: "litejob", "checkpoint failed: {e}"),
            }
        }
        self.pinned_below.store(pinned, Ordering::Relaxed);
    }

    /// Waits, between two transactions, until the reader that keeps the
    /// WAL's `frames` from any checkpoint lets go: true once a checkpoint
    /// copied every frame or the WAL started over (another's checkpoint,
    /// then a write), false if the reader is still there after
    /// `hold_at_most`. Each try is a PASSIVE checkpoint, microseconds
    /// while the reader holds on, so one of Litestream's, which runs once
    /// in its second, seldom finds the checkpoint lock taken.
    fn hold(&self, conn: &Connection, frames: i32) -> bool {
        let t0 = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            let tried = {
                let _turn = lock(&self.gate);
                checkpoint_counts(conn)
            };
            match tried {
                Ok((false, log, copied)) if log < frames || copied >= log => return true,
                // Still pinned, or another checkpoint under way (perhaps
                // the one waited for).
                Ok(_) => {}
                Err(e) => {
                    log::warn!(target: "litejob", "checkpoint failed: {e}");
                    return false;
                }
            }
            if t0.elapsed() >= self.hold_at_most {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// (checkpoints by the thread, checkpoints by the writer itself).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.inline.load(Ordering::Relaxed),
        )
    }

    /// (times the writer held off for a reader, milliseconds in all).
    fn holds(&self) -> (u64, u64) {
        (
            self.holds.load(Ordering::Relaxed),
            self.held_ms.load(Ordering::Relaxed),
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
    /// Wait for the reader that pins the WAL (see [`Checkpointer::hold`]).
    Hold,
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
/// restarts every commit is past the threshold). From [`PINNED_FRAMES`]
/// on, which only a WAL pinned by a reader reaches (the checkpoints from
/// [`HARD_FRAMES`] on restart it otherwise, or another's is under way),
/// the writer holds off, unless `may_hold` is false (a hold ran out since
/// the WAL last restarted).
fn plan(frames: i32, due: i32, busy: bool, pinned_below: i32, may_hold: bool) -> (Step, i32) {
    let next = |f: i32| (f / SOFT_FRAMES + 1) * SOFT_FRAMES;
    if frames <= 0 {
        (Step::Nothing, due)
    } else if frames >= PINNED_FRAMES && may_hold {
        (Step::Hold, next(frames))
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
        let (holds, ms) = self.holds();
        if holds > 0 {
            log::debug!(target: "litejob",
                "the writer held off {holds} times for a reader pinning the WAL, {ms} ms in all");
        }
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
        let _turn = lock(&gate);
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
    let (busy, log, copied) = checkpoint_counts(conn)?;
    Ok(if !busy && copied < log {
        Copied::Pinned
    } else {
        Copied::All
    })
}

/// One PASSIVE checkpoint: (another checkpoint held the lock, frames in the
/// WAL, frames copied).
fn checkpoint_counts(conn: &Connection) -> rusqlite::Result<(bool, i32, i32)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(0)? != 0, r.get(1)?, r.get(2)?))
    })
}

#[cfg(test)]
mod tests;
