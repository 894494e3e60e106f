//! How durable commits reach the disk ([`SyncMode`]): the fsyncs of the WAL,
//! which take turns, and the syncer thread that answers durable groups off
//! the writer thread.

use crate::core::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rusqlite::Connection;

use super::cycle::Core;
use super::op::Reply;
use crate::error::{Error, Result};

/// How a durable commit reaches the disk with `synchronous=FULL`.
pub(super) enum SyncMode {
    /// SQLite's own: the connection runs with the file's `synchronous`
    /// (NORMAL, or FULL when the WAL file could not be opened for
    /// [`SyncMode::Wal`]); every commit, light ones too, syncs as it says.
    Sqlite,
    /// Pipelined: the write connection runs with `synchronous=NORMAL` (a
    /// commit writes its WAL frames, no fsync), and litejob fsyncs the WAL
    /// file itself, through its own handle, before it answers a durable
    /// commit's callers. The writer thread hands that fsync to the syncer
    /// thread and applies the next group meanwhile; one fsync covers every
    /// commit made before it (the WAL is appended in order, and recovery
    /// keeps only a prefix whose checksums chain). Light commits are simply
    /// not synced. Nothing outside reacts to a commit before its fsync: a
    /// caller waits for it, and an effect runs only after its own claim (a
    /// later, durable commit) was synced, which covers the job's commit too.
    Wal {
        wal: std::fs::File,
        /// Set by the first failed fsync, for good: after one, Linux may have
        /// dropped the unwritten pages and report the next fsync as a
        /// success, and recovery would stop at the hole. No later commit can
        /// then be called durable (PostgreSQL's "fsyncgate" rule).
        failed: AtomicBool,
        /// Held across the check of `failed`, the fsync and the setting of
        /// `failed`: one fsync at a time. Two threads sync (the syncer, and
        /// the writer thread or an inline caller), and Linux reports a
        /// failed writeback to one fsync of a file, not to each one running
        /// then: without the turn, one could see the error while the other,
        /// covering a later commit, returned success for a WAL with a hole.
        turn: Mutex<()>,
    },
}

impl SyncMode {
    /// The mode for `conn`: with `full_sync`, litejob's own fsync of the WAL
    /// when it can open the file (and the connection then syncs nothing).
    pub(super) fn for_connection(conn: &Connection, full_sync: bool) -> Result<SyncMode> {
        if !full_sync {
            return Ok(SyncMode::Sqlite);
        }
        Ok(match open_wal(conn) {
            Some(wal) => {
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                SyncMode::Wal {
                    wal,
                    failed: AtomicBool::new(false),
                    turn: Mutex::new(()),
                }
            }
            None => {
                log::warn!(target: "litejob", "cannot open the WAL file to fsync it: every commit syncs (slower)");
                SyncMode::Sqlite
            }
        })
    }

    /// Makes every commit so far durable.
    pub(super) fn sync(&self) -> Result<()> {
        match self {
            SyncMode::Sqlite => Ok(()),
            SyncMode::Wal { wal, failed, turn } => {
                let _turn = lock(turn);
                if failed.load(Ordering::Acquire) {
                    return Err(Error::OutcomeUnknown(
                        "an earlier fsync of the WAL failed: no commit of this process can be \
                         called durable any more; restart it"
                            .into(),
                    ));
                }
                if crate::fault::skip_wal_fsync() {
                    return Ok(());
                }
                wal.sync_data().map_err(|e| {
                    failed.store(true, Ordering::Release);
                    log::error!(target: "litejob", "fsync of the WAL failed: {e}; every later durable write reports 'outcome unknown' until the process restarts");
                    Error::OutcomeUnknown(format!(
                        "the commit was written but its fsync failed ({e}); it may be lost on power loss"
                    ))
                })
            }
        }
    }
}

/// A handle of our own on the connection's WAL file, if it can be opened.
pub(super) fn open_wal(conn: &Connection) -> Option<std::fs::File> {
    conn.path()
        .filter(|p| !p.is_empty())
        .map(|p| format!("{p}-wal"))
        .and_then(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .ok()
        })
}

/// With `synchronous=NORMAL`, the syncer still fsyncs the WAL now and then
/// (at most this often), once it has answered and nothing waits: nothing
/// waits for it, but otherwise nobody syncs the WAL until a checkpoint,
/// which then flushes megabytes in one fsync — on the writer thread when it
/// checkpoints itself, or while it waits for the checkpointer at 4000
/// frames: without these syncs NORMAL processed slower than FULL, and its
/// tail latency doubled.
const BACKGROUND_WAL_SYNC_EVERY: Duration = Duration::from_millis(4);

/// The syncer thread: answers durable groups once an fsync after their
/// commit returned; one fsync for every group waiting. Ends when the writer
/// thread drops its sender.
pub(super) fn syncer_loop(core: Arc<Core>, groups: Receiver<Vec<Reply>>) {
    let mut last_background = Instant::now();
    while let Ok(first) = groups.recv() {
        let mut waiting = first;
        waiting.extend(groups.try_iter().flatten());
        core.sync_and_answer(waiting);
        if let Some(wal) = &core.background_wal {
            if groups.is_empty() && last_background.elapsed() >= BACKGROUND_WAL_SYNC_EVERY {
                // Durability is not promised here (NORMAL): a failure is
                // SQLite's to meet at the next checkpoint.
                let _ = wal.sync_data();
                last_background = Instant::now();
            }
        }
    }
}
