//! A consistent copy of a queue file while it is in use
//! ([`Queue::backup_to`]): one moment of it, the application's tables
//! with the queue's, written to a new file. Writes no table; it writes
//! the backup file only.

use std::path::Path;

use crate::core::reports::backup::{BackupOptions, BackupProgress, BackupReport};
use crate::error::Result;
use crate::sqlite::{backup, Sqlite};

use super::Queue;

impl Queue<Sqlite> {
    /// Copies the file, as it is at one moment, to a new file at `dest`
    /// while producers and workers go on: its application tables, ledger
    /// and jobs agree as they did at that moment. Neither the writer nor
    /// a reader waits for it (it reads one snapshot, as any reader of the
    /// WAL file does); it copies in steps with short pauses, so its own
    /// disk writes hold back the writer's fsyncs only briefly.
    ///
    /// Refuses a `dest` that exists ([`crate::Error::InvalidInput`],
    /// nothing written; [`Queue::backup_with`] can replace it). The copy
    /// goes to a temporary file beside `dest`, synced, then renamed: a
    /// backup that fails leaves no file behind. A queue opened read-only
    /// can be backed up.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let queue = litejob::Queue::open(dir.path().join("app.db"))?;
    /// let report = queue.backup_to(dir.path().join("app-backup.db"))?;
    /// assert!(report.bytes > 0);
    /// # Ok::<(), litejob::Error>(())
    /// ```
    pub fn backup_to(&self, dest: impl AsRef<Path>) -> Result<BackupReport> {
        self.backup_with(dest, &BackupOptions::default(), |_| {})
    }

    /// [`Queue::backup_to`] with options (replace an existing file, the
    /// pace of the copy), calling `progress` after each step.
    pub fn backup_with(
        &self,
        dest: impl AsRef<Path>,
        opts: &BackupOptions,
        mut progress: impl FnMut(&BackupProgress),
    ) -> Result<BackupReport> {
        backup::backup_store(self.store(), dest.as_ref(), opts, &mut progress)
    }
}
