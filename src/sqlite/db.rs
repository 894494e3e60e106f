//! Connections to the queue file: opening, pragmas, the reader pool, and the
//! `BEGIN IMMEDIATE` rule. Writes nothing but the pragmas and the schema.

use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use crate::core::options::Synchronous;
use crate::error::{Error, Result};
use crate::sqlite::schema;

/// The per-connection settings every connection to the file gets.
#[derive(Debug, Clone)]
pub(crate) struct ConnConfig {
    pub synchronous: Synchronous,
    pub busy_timeout: Duration,
}

/// Applies the per-connection pragmas. WAL is a property of the file and is
/// set once in [`open_file`]; these must be set on every connection.
pub(crate) fn configure(conn: &Connection, cfg: &ConnConfig) -> rusqlite::Result<()> {
    // An explicit, long busy timeout: another process (or a sqlite3 shell in
    // a transaction) holding the write lock for a few seconds makes us wait,
    // not fail. rusqlite's default is 5 s.
    conn.busy_timeout(cfg.busy_timeout)?;
    conn.pragma_update(None, "synchronous", cfg.synchronous.as_str())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Keep the page cache modest: RSS must stay small with a million jobs.
    conn.pragma_update(None, "cache_size", -8192)?;
    Ok(())
}

fn open_err(path: &Path, e: impl Into<Error>) -> Error {
    match e.into() {
        e @ Error::SchemaTooNew { .. } => e,
        Error::NotADatabase(m) => Error::NotADatabase(format!("{}: {m}", path.display())),
        Error::Busy(m) => Error::Busy(format!("{}: {m}", path.display())),
        Error::StorageFull(m) => Error::StorageFull(format!("{}: {m}", path.display())),
        other => Error::Open(format!("cannot open {}: {other}", path.display())),
    }
}

/// Opens (creating if needed) the queue file: refuses a newer schema without
/// touching the file, switches it to WAL, migrates it, and returns a
/// configured connection.
pub(crate) fn open_file(path: &Path, cfg: &ConnConfig) -> Result<Connection> {
    if path.is_dir() {
        return Err(Error::Open(format!(
            "cannot open {}: it is a directory",
            path.display()
        )));
    }
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_err(path, e))?;
    conn.busy_timeout(cfg.busy_timeout)
        .map_err(|e| open_err(path, e))?;
    // SQLite silently falls back to read-only when the file cannot be
    // written (permissions, immutable attribute): refuse now, naming the
    // path, rather than fail at the first write with a bare "readonly".
    // Before the first read: reading a WAL file creates its -wal and -shm
    // files, which a connection that may not write the file would leave
    // behind.
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| open_err(path, e))?
    {
        return Err(Error::Open(format!(
            "cannot open {}: the file is read-only (check its permissions and attributes); \
             litejob needs to write it",
            path.display()
        )));
    }
    // Read the version before any write (WAL switch included), so a newer
    // file is refused untouched.
    schema::check_not_newer(&conn).map_err(|e| open_err(path, e))?;
    let mode = switch_to_wal(&conn, cfg.busy_timeout).map_err(|e| open_err(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Open(format!(
            "cannot open {}: could not switch to WAL mode (journal_mode is {mode})",
            path.display()
        )));
    }
    configure(&conn, cfg).map_err(|e| open_err(path, e))?;
    schema::migrate(&mut conn).map_err(|e| open_err(path, e))?;
    Ok(conn)
}

/// `PRAGMA journal_mode=WAL`, retried while another connection holds a
/// lock. Leaving rollback mode needs an exclusive lock, and SQLite takes it
/// by upgrading the pragma's own read lock, which never waits for the busy
/// handler (waiting there could deadlock): two processes opening a new file
/// at the same moment saw "database is locked" at once
/// (demo::two_copies_at_once_on_one_file_finish_with_the_same_result).
fn switch_to_wal(conn: &Connection, patience: Duration) -> rusqlite::Result<String> {
    let give_up = std::time::Instant::now() + patience;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Opens one more connection to a file that [`open_file`] already prepared.
pub(crate) fn connect(path: &Path, cfg: &ConnConfig) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_err(path, e))?;
    configure(&conn, cfg).map_err(|e| open_err(path, e))?;
    Ok(conn)
}

/// Opens an existing queue file for reading only
/// ([`crate::QueueOptions::with_read_only`]): it never creates, migrates or
/// writes the file (nor a file beside it), and refuses one that is
/// missing, is not a litejob file, or whose schema is not this binary's.
pub(crate) fn open_read_only(path: &Path, cfg: &ConnConfig) -> Result<Connection> {
    if !path.is_file() {
        return Err(Error::Open(format!(
            "cannot open {}: no such file (a read-only open never creates one)",
            path.display()
        )));
    }
    let conn = connect_read_only(path).map_err(|e| open_err(path, e))?;
    configure_read_only(&conn, cfg).map_err(|e| open_err(path, e))?;
    let found = schema::check_not_newer(&conn).map_err(|e| read_only_err(path, e))?;
    if found == 0 {
        return Err(Error::NotADatabase(format!(
            "{}: not a litejob queue file (it has no litejob schema)",
            path.display()
        )));
    }
    if found < schema::SCHEMA_VERSION {
        return Err(Error::Open(format!(
            "cannot open {} read-only: its schema is version {found}, older than this \
             litejob's {}; open it once read-write (`litejob init`) to migrate it",
            path.display(),
            schema::SCHEMA_VERSION
        )));
    }
    Ok(conn)
}

fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// The `-wal` file beside `path`.
pub(crate) fn wal_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// One read-only connection to the file.
///
/// While a process has a WAL file open, its `-wal` and `-shm` files exist,
/// and a reader uses them, even ones it may not write. When there is no
/// `-wal` file, nothing has the file open and every commit is in the file
/// itself; but a reader opened as usual would create the two files, which
/// fails in a directory it may not write and elsewhere leaves files the
/// reader owns, which the application's own user may then be unable to
/// write. So it reads such a file as an immutable snapshot (`immutable=1`:
/// no lock, no file created). Such a connection serves one read: SQLite
/// never looks at an immutable file again, so a connection kept would miss
/// every later commit (the reader pool drops it when it comes back).
fn connect_read_only(path: &Path) -> rusqlite::Result<Connection> {
    if !wal_of(path).exists() {
        if let Some(uri) = immutable_uri(path) {
            return Connection::open_with_flags(
                uri,
                read_only_flags() | OpenFlags::SQLITE_OPEN_URI,
            );
        }
    }
    Connection::open_with_flags(path, read_only_flags())
}

/// `file:<path>?immutable=1`, the path percent-encoded; None for a path
/// that is not UTF-8 (it is then opened the usual way).
fn immutable_uri(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    // An absolute path gets an empty authority, so one that starts with
    // `//` is not read as a host.
    let mut uri = String::from(if text.starts_with('/') {
        "file://"
    } else {
        "file:"
    });
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    Some(uri)
}

/// True for a connection opened as an immutable snapshot: it reports the
/// rollback journal mode, the file's WAL being ignored.
fn is_snapshot(conn: &Connection) -> bool {
    conn.pragma_query_value(None, "journal_mode", |r| r.get::<_, String>(0))
        .map_or(true, |mode| !mode.eq_ignore_ascii_case("wal"))
}

/// The pragmas of a read-only connection. Closing it must never checkpoint
/// (a checkpoint writes the database file), whatever SQLite would do for
/// the last connection to close.
fn configure_read_only(conn: &Connection, cfg: &ConnConfig) -> rusqlite::Result<()> {
    conn.busy_timeout(cfg.busy_timeout)?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    conn.pragma_update(None, "query_only", true)?;
    conn.pragma_update(None, "cache_size", -8192)?;
    Ok(())
}

/// A read-only open's error, with the likely cause when SQLite could not
/// open the `-shm`/`-wal` files beside a WAL file.
fn read_only_err(path: &Path, e: Error) -> Error {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen)
        || e.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly)
    {
        return Error::Open(format!(
            "cannot read {}: a reader of a WAL file needs its -wal and -shm files, which \
             exist or can be created beside it (is the directory writable?): {e}",
            path.display()
        ));
    }
    open_err(path, e)
}

/// The reader pool's connection manager: r2d2_sqlite's, plus one rule — a
/// connection given back inside an open transaction is broken and dropped,
/// so the pool never hands one out mid-transaction.
#[derive(Debug)]
pub(crate) enum Manager {
    /// A writable file's readers: r2d2_sqlite's manager.
    Readers(Box<SqliteConnectionManager>),
    /// A queue opened read-only: connections from [`connect_read_only`].
    ReadOnly(PathBuf, ConnConfig),
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = rusqlite::Error;

    fn connect(&self) -> rusqlite::Result<Connection> {
        match self {
            Manager::Readers(m) => m.connect(),
            Manager::ReadOnly(path, cfg) => {
                let conn = connect_read_only(path)?;
                configure_read_only(&conn, cfg)?;
                Ok(conn)
            }
        }
    }

    fn is_valid(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        // A snapshot opened just before a writer opened the file would
        // miss the writer's commits.
        let stale = match self {
            Manager::ReadOnly(path, _) => wal_of(path).exists() && is_snapshot(conn),
            Manager::Readers(_) => false,
        };
        if conn.is_autocommit() && !stale {
            Ok(())
        } else {
            Err(rusqlite::Error::InvalidQuery)
        }
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        !conn.is_autocommit() || (matches!(self, Manager::ReadOnly(..)) && is_snapshot(conn))
    }
}

/// A pool of reader connections.
pub(crate) type Pool = r2d2::Pool<Manager>;

pub(crate) fn pool(path: &Path, cfg: &ConnConfig, size: u32) -> Result<Pool> {
    let cfg = cfg.clone();
    let manager = SqliteConnectionManager::file(path)
        .with_flags(OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        // Readers never write: every write of the library goes through the
        // writer, and a write slipped into `Queue::read` fails at once
        // instead of taking the lock behind the writer's back.
        .with_init(move |c| {
            configure(c, &cfg)?;
            c.pragma_update(None, "query_only", true)
        });
    build_pool(Manager::Readers(Box::new(manager)), size)
}

/// A pool of connections opened with `SQLITE_OPEN_READONLY`, for a queue
/// opened read-only: SQLite itself refuses any write on them.
pub(crate) fn read_only_pool(path: &Path, cfg: &ConnConfig, size: u32) -> Result<Pool> {
    build_pool(Manager::ReadOnly(path.to_path_buf(), cfg.clone()), size)
}

fn build_pool(manager: Manager, size: u32) -> Result<Pool> {
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(0))
        .test_on_check_out(true)
        .connection_timeout(Duration::from_secs(60))
        .build(manager)
        .map_err(|e| Error::Pool(e.to_string()))
}

/// Begins a write transaction with `BEGIN IMMEDIATE`. A deferred transaction
/// that later upgrades to a writer fails at once with SQLITE_BUSY_SNAPSHOT
/// when another process wrote in between, whatever the busy timeout; taking
/// the write lock up front makes it wait instead.
pub fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>> {
    Ok(conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?)
}

/// Classify a SQLite error into the variants users act on.
pub(crate) fn from_sqlite(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match e.sqlite_error_code() {
        Some(DatabaseBusy) | Some(DatabaseLocked) => Error::Busy(format!(
            "database busy: another connection held the write lock past the busy timeout \
             (another process, or a sqlite3 shell with an open transaction?): {e}"
        )),
        Some(DiskFull) => Error::StorageFull(format!(
            "storage full: the disk or the database's page limit is full; nothing was written: {e}"
        )),
        Some(NotADatabase) => Error::NotADatabase(format!("not a SQLite database: {e}")),
        Some(OperationInterrupted) => Error::Interrupted(format!(
            "the write ran past its transaction time budget and was rolled back: {e}"
        )),
        Some(DatabaseCorrupt) => Error::NotADatabase(format!("the database file is corrupt: {e}")),
        _ => Error::Sqlite(e),
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        from_sqlite(e)
    }
}
