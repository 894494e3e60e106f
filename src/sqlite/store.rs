//! A queue in a SQLite file ([`SqliteStore`]): it owns the file's one
//! writer and its reader pool (the driver's store on them is in
//! `operations`); opened read-only, it has no writer. Writes nothing
//! itself: every write is an operation sent to its writer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::Connection;

use crate::core::options::{QueueOptions, Synchronous};
use crate::core::time::Clock;
use crate::driver::ABORTED_RETRIES;
use crate::error::{Error, Result};
use crate::sqlite::db::{self, ConnConfig, Pool};
use crate::sqlite::writer::{Writer, WriterConfig};

/// A queue file: the write connection (inside its [`Writer`]) and the
/// reader pool.
pub struct SqliteStore {
    pub(crate) path: PathBuf,
    /// The path as text, for messages and `Store::location`.
    pub(crate) location: String,
    pub(crate) conn_cfg: ConnConfig,
    pub(crate) pool: Pool,
    /// `None` for a file opened read-only: no write connection, no thread.
    pub(super) writer: Option<Arc<Writer>>,
    /// Where every stored time is read (the system's clock, or a test's).
    pub(crate) clock: Clock,
    /// What must live as long as the file and go after it: a test's
    /// temporary directory (see `litejob::testing::temp_queue`).
    pub(crate) keep: std::sync::OnceLock<Box<dyn Send + Sync>>,
}

impl SqliteStore {
    /// Opens (creating and migrating) the file at `path`.
    pub(crate) fn open(path: &Path, opts: &QueueOptions) -> Result<SqliteStore> {
        let conn_cfg = ConnConfig {
            synchronous: opts.synchronous,
            busy_timeout: opts.busy_timeout,
        };
        let conn = db::open_file(path, &conn_cfg)?;
        let pool = db::pool(path, &conn_cfg, opts.pool_size.max(1))?;
        let writer = Writer::spawn(
            conn,
            WriterConfig {
                max_batch: opts.max_group,
                full_sync: opts.synchronous == Synchronous::Full,
                op_budget: opts.transaction_budget,
            },
        )?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            location: path.display().to_string(),
            conn_cfg,
            pool,
            writer: Some(Arc::new(writer)),
            clock: opts.clock.clone(),
            keep: Default::default(),
        })
    }

    /// Opens an existing file for reading only (see
    /// [`QueueOptions::read_only`]): no writer, a pool of read-only
    /// connections.
    pub(crate) fn open_read_only(path: &Path, opts: &QueueOptions) -> Result<SqliteStore> {
        let conn_cfg = ConnConfig {
            synchronous: opts.synchronous,
            busy_timeout: opts.busy_timeout,
        };
        // One connection first, so a missing or foreign file is refused
        // here and not at the first read.
        drop(db::open_read_only(path, &conn_cfg)?);
        let pool = db::read_only_pool(path, &conn_cfg, opts.pool_size.max(1))?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            location: path.display().to_string(),
            conn_cfg,
            pool,
            writer: None,
            clock: opts.clock.clone(),
            keep: Default::default(),
        })
    }

    /// The writer, or [`Error::ReadOnly`] for a file opened read-only:
    /// every write asks this first, so nothing is sent anywhere.
    pub(crate) fn writer(&self) -> Result<&Arc<Writer>> {
        self.writer.as_ref().ok_or_else(|| {
            Error::ReadOnly(format!(
                "{} was opened read-only: nothing was written",
                self.path.display()
            ))
        })
    }

    /// Runs `f` on a pooled, read-only connection.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let conn = self.pool.get()?;
        f(&conn)
    }

    /// Runs `f` on the writer; an `Aborted` (another write in the group
    /// rolled the transaction back) is retried, since nothing was written.
    pub(crate) fn write_retrying<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: Fn(&Connection) -> Result<R> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        let mut tries = 0;
        loop {
            let g = f.clone();
            match self.writer()?.run(move |c| g(c)) {
                Err(Error::Aborted(_)) if tries < ABORTED_RETRIES => tries += 1,
                other => return other,
            }
        }
    }
}
