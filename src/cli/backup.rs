//! `litejob backup DEST`: a consistent copy of the queue file `--db`
//! names, taken while producers and workers run, with
//! `Queue::backup_with`. Writes the backup file only (no table).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use litejob::admin::{AnyQueue, BackupOptions, BackupProgress};
use serde::Serialize;

use super::{CliError, CliResult, Out};

/// Files smaller than this back up too fast for progress to help.
const PROGRESS_FROM_BYTES: u64 = 64 * 1024 * 1024;

/// Flags of `litejob backup`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob --db /var/lib/app/jobs.db backup /var/backups/jobs-$(date +%F).db\n  \
    litejob --db /var/lib/app/jobs.db backup /var/backups/jobs.db --force\n\n\
    One moment of the file, the application's tables with the queue's, taken while\n\
    the application runs (no write waits for it). It is written beside DEST, synced,\n\
    then renamed: a backup that fails leaves no file. An existing DEST is refused\n\
    (exit 2) unless --force. A file only: for PostgreSQL use pg_dump, or\n\
    `litejob --db postgres://… copy --to FILE`. Check a backup with `litejob verify DEST`.")]
pub struct BackupArgs {
    /// The backup file to write.
    #[arg(value_name = "DEST")]
    pub dest: PathBuf,
    /// Replace DEST if it exists.
    #[arg(long)]
    pub force: bool,
}

/// What `litejob backup --json` prints.
#[derive(Serialize)]
struct BackupOut {
    from: String,
    dest: String,
    bytes: u64,
    pages: u64,
    page_size: u64,
    replaced: bool,
    elapsed_ms: u64,
}

/// `litejob backup DEST [--force]`.
pub fn backup(db: &Path, a: &BackupArgs, json: bool, out: &mut Out) -> CliResult {
    if super::is_url(db) {
        return Err(CliError::Input(
            "backup copies a queue file, and --db names a PostgreSQL database: use pg_dump, \
             or copy the queue into a new file with `litejob --db URL copy --to FILE`"
                .into(),
        ));
    }
    // Read-only: a backup writes nothing to the queue, and a user who may
    // only read the file can take one.
    let AnyQueue::Sqlite(file) = super::verify::open_read_only(db)? else {
        return Err(CliError::Failed("backup reads a queue file".into()));
    };
    let opts = BackupOptions::default().with_overwrite(a.force);
    let t0 = Instant::now();
    let mut meter = Meter::new(std::io::stderr().is_terminal());
    let r = file.backup_with(&a.dest, &opts, |p| meter.show(p));
    meter.clear();
    let r = r?;
    let elapsed_ms = t0.elapsed().as_millis() as u64;
    if json {
        return out.json(&BackupOut {
            from: file.location().to_string(),
            dest: r.dest.display().to_string(),
            bytes: r.bytes,
            pages: r.pages,
            page_size: r.page_size,
            replaced: r.replaced,
            elapsed_ms,
        });
    }
    out.line(format!(
        "backed up {} to {} ({:.1} MB) in {:.1} s{}",
        file.location(),
        r.dest.display(),
        r.bytes as f64 / 1e6,
        elapsed_ms as f64 / 1000.0,
        if r.replaced { ", replacing it" } else { "" }
    ))
}

/// Progress on stderr, rewritten in place, for a large file on a
/// terminal.
struct Meter {
    tty: bool,
    shown: bool,
    last: Option<Instant>,
}

impl Meter {
    fn new(tty: bool) -> Meter {
        Meter {
            tty,
            shown: false,
            last: None,
        }
    }

    fn show(&mut self, p: &BackupProgress) {
        if !self.tty || p.pages_total * p.page_size < PROGRESS_FROM_BYTES {
            return;
        }
        if self.last.is_some_and(|t| t.elapsed().as_millis() < 200) {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let mb = |pages: u64| (pages * p.page_size) as f64 / 1e6;
        let pct = p.pages_done * 100 / p.pages_total.max(1);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rbackup: {pct:>3} % ({:.0} of {:.0} MB)",
            mb(p.pages_done),
            mb(p.pages_total)
        );
        let _ = err.flush();
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
