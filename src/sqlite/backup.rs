//! A consistent copy of a live queue file ([`backup`]): SQLite's online
//! backup API, every step reading the same snapshot, into a temporary file
//! beside the destination that is synced and then renamed into place.
//! Writes no table of the queue; it writes the new file only.
//!
//! Why the backup API and not `VACUUM INTO`: both read one snapshot and
//! neither takes the write lock (the file is in WAL mode, so a reader never
//! blocks the writer). What stalls the writer is the disk: the copy's
//! writes queue in front of the WAL's fsyncs. The backup API copies pages
//! as they are, in steps, so it can pause between steps and flush what it
//! wrote a little at a time; `VACUUM INTO` rebuilds every table and index
//! in one statement and leaves all of it to be flushed at once. On a
//! million-job file of 330 MB (`litejob bench --preload 1000000
//! --backup-check`, 6 runs on a shared 2-core VM) the longest enqueue
//! during the stepped copy was 24–41 ms, as long as without a copy (10–58
//! ms); during `VACUUM INTO` and its flush, 103–162 ms.
//!
//! Why one read transaction around all steps: without it each step opens
//! its own, and SQLite restarts a backup from page 1 whenever another
//! connection wrote between two steps, which on a busy queue is always.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::core::reports::backup::{BackupOptions, BackupProgress, BackupReport};
use crate::error::{Error, Result};
use crate::sqlite::db::wal_of;
use crate::sqlite::store::SqliteStore;

/// Bytes written to the new file between two flushes of it: the kernel
/// then never holds much of the copy unwritten, and no single flush makes
/// the writer's next fsync wait long behind it (4 MiB is ~30 ms on a disk
/// that writes 140 MB/s).
const FLUSH_EVERY: u64 = 4 * 1024 * 1024;

/// How often a step that found the file locked is tried again.
const LOCKED_RETRIES: u32 = 1000;

/// Copies the queue file into a new file at `dest` on one of the store's
/// reader connections (see [`backup`]).
///
/// A queue opened read-only reads a file no process has open as an
/// immutable snapshot, without locks (see `db::connect_read_only`). That
/// is safe for a read; a backup takes longer, and a process that opens
/// the file meanwhile may checkpoint into it under the copy. So when the
/// file came into use during such a copy (its `-wal` appeared), the copy
/// is thrown away before it is published and taken again, on a
/// connection that now reads the file with its locks.
pub(crate) fn backup_store(
    store: &SqliteStore,
    dest: &Path,
    opts: &BackupOptions,
    progress: &mut dyn FnMut(&BackupProgress),
) -> Result<BackupReport> {
    let in_use = || wal_of(&store.path).exists();
    for _ in 0..3 {
        let was_in_use = in_use();
        let still = || was_in_use || !in_use();
        match store.read(|conn| backup(conn, dest, opts, progress, &still)) {
            Err(Error::Internal(m)) if m == CAME_INTO_USE => continue,
            other => return other,
        }
    }
    Err(Error::Busy(format!(
        "backup: {} kept coming into use and going out of it during the copy",
        store.path.display()
    )))
}

/// Why a copy was thrown away: see [`backup_store`].
const CAME_INTO_USE: &str = "the file came into use during an unlocked copy";

/// Copies the file `src` reads into a new file at `dest`: one snapshot of
/// it, whatever commits meanwhile. Refuses an existing `dest` unless
/// `opts.overwrite`; leaves nothing at `dest` (nor beside it) when it
/// fails. `progress` is called after each step; `still_valid`, before the
/// copy is published.
pub(crate) fn backup(
    src: &Connection,
    dest: &Path,
    opts: &BackupOptions,
    progress: &mut dyn FnMut(&BackupProgress),
    still_valid: &dyn Fn() -> bool,
) -> Result<BackupReport> {
    not_the_source(src, dest)?;
    let replaced = check_dest(dest, opts.overwrite)?;
    let tmp = Temp::beside(dest)?;
    let (pages, page_size) = copy_snapshot(src, &tmp.path, opts, progress)?;
    if !still_valid() {
        return Err(Error::Internal(CAME_INTO_USE.into()));
    }
    File::open(&tmp.path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(&tmp.path, "sync", e))?;
    let bytes = std::fs::metadata(&tmp.path).map(|m| m.len()).unwrap_or(0);
    tmp.publish(dest, opts.overwrite)?;
    Ok(BackupReport {
        dest: dest.to_path_buf(),
        pages,
        page_size,
        bytes,
        replaced,
    })
}

/// Whether `dest` exists (and may be replaced); bad input otherwise.
fn check_dest(dest: &Path, overwrite: bool) -> Result<bool> {
    if dest.as_os_str().is_empty() {
        return Err(Error::InvalidInput(
            "the backup's destination is empty".into(),
        ));
    }
    if dest.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{} is a directory: name the backup file to write",
            dest.display()
        )));
    }
    let parent = parent_of(dest);
    if !parent.is_dir() {
        return Err(Error::InvalidInput(format!(
            "{}: no such directory for the backup",
            parent.display()
        )));
    }
    let exists = dest.symlink_metadata().is_ok();
    if exists && !overwrite {
        return Err(Error::InvalidInput(format!(
            "{} already exists: nothing was written (replace it with --force)",
            dest.display()
        )));
    }
    Ok(exists)
}

/// Refuses a destination that is the queue file itself, or one of the
/// files SQLite keeps beside it: renaming a copy over either, under the
/// processes that have the file open, would corrupt it.
fn not_the_source(src: &Connection, dest: &Path) -> Result<()> {
    let Some(source) = src.path().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let source = std::fs::canonicalize(source).unwrap_or_else(|_| PathBuf::from(source));
    let named = match (std::fs::canonicalize(parent_of(dest)), dest.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => dest.to_path_buf(),
    };
    // Through a symbolic link, or another hard link to the same file.
    let resolved = std::fs::canonicalize(dest).unwrap_or_else(|_| named.clone());
    let same_file = same_inode(&source, dest);
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut beside = source.clone().into_os_string();
        beside.push(suffix);
        let beside = PathBuf::from(beside);
        if named == beside || resolved == beside || (suffix.is_empty() && same_file) {
            return Err(Error::InvalidInput(format!(
                "{} is the queue file itself{}: name another file for the backup; nothing \
                 was written",
                dest.display(),
                if suffix.is_empty() {
                    String::new()
                } else {
                    format!(" (its {suffix} file)")
                }
            )));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_inode(_: &Path, _: &Path) -> bool {
    false
}

fn parent_of(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("backup: cannot {what} {}: {e}", path.display()),
    ))
}

/// Runs the backup API from `src` into the file at `tmp`, every step in
/// one read transaction of `src`. Returns (pages, page size).
fn copy_snapshot(
    src: &Connection,
    tmp: &Path,
    opts: &BackupOptions,
    progress: &mut dyn FnMut(&BackupProgress),
) -> Result<(u64, u64)> {
    let mut to = Connection::open_with_flags(
        tmp,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // A half-written temporary file is deleted, never used: it needs no
    // journal, and it is synced once, whole, before the rename.
    to.pragma_update(None, "journal_mode", "OFF")?;
    to.pragma_update(None, "synchronous", "OFF")?;
    let own_tx = src.is_autocommit();
    if own_tx {
        src.execute_batch("BEGIN DEFERRED")?;
    }
    let r = (|| {
        // The first read starts the snapshot every step then copies from.
        src.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        let page_size: i64 = src.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let page_size = page_size as u64;
        steps(src, &mut to, tmp, page_size, opts, progress)
    })();
    if own_tx {
        let _ = src.execute_batch("COMMIT");
    }
    let pages = r?;
    to.close().map_err(|(_, e)| Error::from(e))?;
    Ok(pages)
}

fn steps(
    src: &Connection,
    to: &mut Connection,
    tmp: &Path,
    page_size: u64,
    opts: &BackupOptions,
    progress: &mut dyn FnMut(&BackupProgress),
) -> Result<(u64, u64)> {
    let file = OpenOptions::new()
        .write(true)
        .open(tmp)
        .map_err(|e| io_err(tmp, "open", e))?;
    let b = Backup::new(src, to)?;
    let per_step = opts.pages_per_step.clamp(1, i32::MAX as u32) as i32;
    let (mut locked, mut unflushed_pages) = (0u32, 0u64);
    loop {
        let step = b.step(per_step)?;
        let p = b.progress();
        let (total, left) = (p.pagecount.max(0) as u64, p.remaining.max(0) as u64);
        progress(&BackupProgress {
            pages_done: total - left.min(total),
            pages_total: total,
            page_size,
        });
        match step {
            StepResult::Done => return Ok((total, page_size)),
            StepResult::More => {
                locked = 0;
                unflushed_pages += per_step as u64;
                if unflushed_pages * page_size >= FLUSH_EVERY {
                    let t = Instant::now();
                    file.sync_data().map_err(|e| io_err(tmp, "sync", e))?;
                    unflushed_pages = 0;
                    // As long again idle: a slow disk slows the copy, not
                    // the writer, which gets at least half of it.
                    pause(t.elapsed());
                }
                pause(opts.pause);
            }
            // Only another connection of this process writing the new
            // file could lock it: wait for it, a while.
            _ => {
                locked += 1;
                if locked > LOCKED_RETRIES {
                    return Err(Error::Busy(format!(
                        "backup: {} stayed locked",
                        tmp.display()
                    )));
                }
                pause(Duration::from_millis(5));
            }
        }
    }
}

fn pause(d: Duration) {
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

/// The temporary file beside the destination; removed (with any journal
/// SQLite left beside it) unless it was published.
struct Temp {
    path: PathBuf,
    published: bool,
}

impl Temp {
    fn beside(dest: &Path) -> Result<Temp> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "backup".into());
        let nonce = (crate::core::time::now_ms() as u64) ^ (u64::from(std::process::id()) << 20);
        let path = parent_of(dest).join(format!(".{name}.litejob-backup-{nonce:x}"));
        // Created here, exclusively: never someone else's file.
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_err(&path, "create", e))?;
        Ok(Temp {
            path,
            published: false,
        })
    }

    /// Moves the file to `dest`: without `overwrite`, only if nothing took
    /// that name meanwhile (a hard link fails on an existing name).
    fn publish(mut self, dest: &Path, overwrite: bool) -> Result<()> {
        if overwrite {
            std::fs::rename(&self.path, dest).map_err(|e| io_err(dest, "write", e))?;
        } else {
            match std::fs::hard_link(&self.path, dest) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&self.path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(Error::InvalidInput(format!(
                        "{} already exists: nothing was written (replace it with --force)",
                        dest.display()
                    )));
                }
                // A file system without hard links: the check before the
                // copy stands.
                Err(_) => {
                    std::fs::rename(&self.path, dest).map_err(|e| io_err(dest, "write", e))?
                }
            }
        }
        self.published = true;
        // The new name survives a power cut once the directory is synced.
        if let Ok(d) = File::open(parent_of(dest)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        let _ = std::fs::remove_file(&self.path);
        for suffix in ["-journal", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
    }
}

#[cfg(test)]
mod tests;
