//! What a backup of a queue file is asked ([`BackupOptions`]), how far it
//! got ([`BackupProgress`]) and what it wrote ([`BackupReport`]). Writes
//! no table.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// How [`Queue::backup_with`](crate::Queue::backup_with) copies a file.
///
/// ```
/// let opts = litejob::admin::BackupOptions::default().with_overwrite(true);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BackupOptions {
    /// Replace a file already at the destination (default false: an
    /// existing destination is refused with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput), untouched).
    pub overwrite: bool,
    /// Pages copied per step (default 1024: 4 MiB with 4 KiB pages).
    pub pages_per_step: u32,
    /// Pause after each step (default 2 ms): the copy shares the disk with
    /// the writer's fsyncs, and the pauses leave it room.
    pub pause: Duration,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            overwrite: false,
            pages_per_step: 1024,
            pause: Duration::from_millis(2),
        }
    }
}

impl BackupOptions {
    /// Replaces a file already at the destination.
    pub fn with_overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Sets the pages copied per step (at least 1).
    pub fn with_pages_per_step(mut self, pages: u32) -> Self {
        self.pages_per_step = pages.max(1);
        self
    }

    /// Sets the pause after each step.
    pub fn with_pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }
}

/// How far a backup got, after each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupProgress {
    /// Pages copied so far.
    pub pages_done: u64,
    /// Pages in the snapshot being copied.
    pub pages_total: u64,
    /// Bytes per page.
    pub page_size: u64,
}

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BackupReport {
    /// The file written.
    pub dest: PathBuf,
    /// Pages copied (the whole snapshot).
    pub pages: u64,
    /// Bytes per page.
    pub page_size: u64,
    /// The backup's size in bytes.
    pub bytes: u64,
    /// Whether a file at the destination was replaced.
    pub replaced: bool,
}
