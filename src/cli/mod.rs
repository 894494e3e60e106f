//! The `litejob` command: argument parsing (clap derive), dispatch, the one
//! function that turns failures into exit statuses, and output helpers
//! (aligned tables, JSON, broken pipes). Writes no table itself: each
//! subcommand goes through the library's `Queue`, like any application.
//!
//! Exit status: 0 success (a duplicate enqueue is a success), 1 failure,
//! 2 bad usage or bad input. Results go to stdout, logs and errors to
//! stderr as `litejob: error: ...`.

pub mod admin_cmds;
pub mod backup;
pub mod bench;
pub mod copy;
pub mod demo;
pub mod enqueue;
pub mod explain;
pub mod jobs;
pub mod outbox_cmd;
pub mod queues;
pub mod rng;
pub mod schedules;
pub mod serve;
pub mod time;
pub mod verify;
pub mod workflow;

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use litejob::admin::AnyQueue;
use litejob::{Error, JobState, OutboxState};
use serde::Serialize;

/// `litejob [--db PATH|URL] [--json] COMMAND`
#[derive(Debug, Parser)]
#[command(
    name = "litejob",
    version,
    about = "A job queue in one SQLite file (or a PostgreSQL database): inspect and repair it, enqueue, serve a dashboard, run the demo.",
    after_help = "Examples:\n  litejob init\n  litejob enqueue payment.succeeded --key evt_42 --payload '{\"cents\": 4200}'\n  litejob explain evt_42\n  litejob --db /var/lib/app/jobs.db stats --json\n  litejob --db postgres://app:secret@db.internal/app stats\n\nExit status: 0 success (a duplicate enqueue too), 1 failure, 2 bad usage or bad input."
)]
pub struct Cli {
    /// The queue: a file, or a PostgreSQL URL (postgres://user:password@host:port/database)
    /// [default: $LITEJOB_DB, else ./litejob.db].
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// Print machine-readable JSON (one document) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or migrate the queue file; print its path and schema version.
    #[command(after_help = "Example:\n  litejob --db jobs.db init")]
    Init,
    /// Enqueue one job; prints `enqueued <id>` or `duplicate <id>`.
    Enqueue(enqueue::EnqueueArgs),
    /// List jobs, newest first.
    Jobs(jobs::JobsArgs),
    /// One job with its attempts and outbox rows.
    Show(jobs::ShowArgs),
    /// Everything known for an idempotency key, and one sentence:
    /// ten events, or one event ten times?
    Explain(explain::ExplainArgs),
    /// The jobs linked to a job by their dependencies, either way, with
    /// their states: a workflow, by level.
    Workflow(workflow::WorkflowArgs),
    /// Requeue a dead job (or all dead jobs) with a renewed attempt budget.
    Retry(admin_cmds::RetryArgs),
    /// Cancel a queued or waiting job, and the jobs that depend on it.
    Cancel(admin_cmds::CancelArgs),
    /// List outbox rows; `outbox retry ID` requeues a dead one.
    Outbox(outbox_cmd::OutboxArgs),
    /// Counts per state, kind and queue; outbox counts; backlog age; file size.
    Stats(admin_cmds::StatsArgs),
    /// Every schedule (periodic job) declared on the file: cron, time zone,
    /// kind, last fired slot, next slot.
    Schedules(schedules::SchedulesArgs),
    /// Every queue: its controls (paused, cap, rate) and its queued and
    /// running jobs.
    Queues(queues::QueuesArgs),
    /// Pause or resume a queue, or set its cap and rate limit, for every
    /// process on the file.
    #[command(name = "queue")]
    QueueCmd(queues::QueueArgs),
    /// Delete finished jobs, their attempts and sent outbox rows older than DUR.
    Prune(admin_cmds::PruneArgs),
    /// Run the receipts scenario on the file: dedup at the door, exactly-once
    /// work, an outbox for the mail.
    #[command(after_help = "Example:\n  litejob --db demo.db demo --events 1000 --redeliver 3")]
    Demo(demo::DemoArgs),
    /// Serve a dashboard, Prometheus metrics and a health check over HTTP.
    Serve(serve::ServeArgs),
    /// Copy a queue file into an empty PostgreSQL database, or a database
    /// into a new file: every job, ledger row, outbox row, attempt and
    /// schedule, ids and keys kept.
    Copy(copy::CopyArgs),
    /// Take a consistent copy of the queue file while it is in use.
    Backup(backup::BackupArgs),
    /// Check the file's (or database's) integrity and litejob's invariants.
    Verify(verify::VerifyArgs),
    /// Measure enqueue and processing rates on this machine's disk.
    #[command(
        after_help = "Example:\n  litejob bench --jobs 20000 --workers 4 --json\n\n\
        Where it writes: a new file in the temporary directory ($TMPDIR, else /tmp),\n\
        litejob-bench-<pid>-<n>.db, removed when it ends. With --db it writes that file\n\
        or PostgreSQL database instead, and keeps it ($LITEJOB_DB is not read)."
    )]
    Bench(bench::BenchArgs),
}

/// Why a command did not succeed. Turned into an exit status by
/// [`exit_status`] only.
#[derive(Debug)]
pub enum CliError {
    /// A library failure.
    Lib(Error),
    /// Bad input the command itself refused (exit 2).
    Input(String),
    /// The command could not do what was asked (exit 1).
    Failed(String),
    /// Stdout was closed by the reader (`litejob jobs | head`): stop quietly.
    BrokenPipe,
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        CliError::Lib(e)
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Lib(Error::Io(e))
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        if e.io_error_kind() == Some(io::ErrorKind::BrokenPipe) {
            CliError::BrokenPipe
        } else {
            CliError::Failed(format!("writing JSON: {e}"))
        }
    }
}

/// What every subcommand returns.
pub type CliResult<T = ()> = Result<T, CliError>;

/// The one place failures become exit statuses: 2 for bad input, 1 for
/// everything else, 0 for a reader that went away.
pub fn exit_status(e: &CliError) -> i32 {
    match e {
        CliError::BrokenPipe => 0,
        CliError::Input(_) => 2,
        CliError::Failed(_) => 1,
        CliError::Lib(e) => match e {
            Error::InvalidInput(_) | Error::Unsupported(_) => 2,
            Error::Io(io) if io.kind() == io::ErrorKind::BrokenPipe => 0,
            // Schema too new, busy past the timeout, not found, a repair
            // refused by the row's state, unreadable file, I/O, and anything
            // the library adds later.
            _ => 1,
        },
    }
}

/// What to print on stderr; nothing when the reader simply went away.
fn message(e: &CliError) -> Option<String> {
    if exit_status(e) == 0 {
        return None;
    }
    match e {
        CliError::BrokenPipe => None,
        CliError::Input(m) | CliError::Failed(m) => Some(m.clone()),
        CliError::Lib(e) => Some(e.to_string()),
    }
}

/// Runs the command and returns the exit status.
pub fn main() -> i32 {
    // The library never installs a logger; the binary does. Warnings by
    // default, `RUST_LOG` to see more. Logs go to stderr.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to
            // stderr with status 2. A closed pipe is not worth a message.
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(&cli) {
        Ok(status) => status,
        Err(e) => {
            if let Some(m) = message(&e) {
                let _ = writeln!(io::stderr(), "litejob: error: {m}");
            }
            exit_status(&e)
        }
    }
}

/// The file or URL `--db`, `$LITEJOB_DB` or `./litejob.db` names.
fn db_path(cli: &Cli) -> PathBuf {
    if let Some(p) = &cli.db {
        return p.clone();
    }
    match std::env::var_os("LITEJOB_DB") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("litejob.db"),
    }
}

fn run(cli: &Cli) -> CliResult<i32> {
    let db = db_path(cli);
    let json = cli.json;
    let mut out = Out::new();
    match &cli.command {
        Command::Init => enqueue::init(&db, json, &mut out)?,
        Command::Enqueue(a) => enqueue::enqueue(&db, a, json, &mut out)?,
        Command::Jobs(a) => jobs::jobs(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Show(a) => jobs::show(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Explain(a) => explain::explain(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Workflow(a) => workflow::workflow(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Retry(a) => admin_cmds::retry(&open_existing(&db)?, a, json, &mut out)?,
        Command::Cancel(a) => admin_cmds::cancel(&open_existing(&db)?, a, json, &mut out)?,
        Command::Outbox(a) => {
            let queue = match a.action {
                Some(_) => open_existing(&db)?,
                None => open_for_reading(&db)?,
            };
            outbox_cmd::outbox(&queue, a, json, &mut out)?
        }
        Command::Stats(a) => admin_cmds::stats(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Schedules(a) => schedules::schedules(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::Queues(a) => queues::queues(&open_for_reading(&db)?, a, json, &mut out)?,
        Command::QueueCmd(a) => queues::queue_cmd(&open_existing(&db)?, a, json, &mut out)?,
        Command::Prune(a) => admin_cmds::prune(&open_existing(&db)?, a, json, &mut out)?,
        Command::Copy(a) => copy::copy(&db, a, json, &mut out)?,
        Command::Backup(a) => backup::backup(&db, a, json, &mut out)?,
        Command::Verify(a) => {
            let status = verify::verify(&db, a, json, &mut out)?;
            out.flush()?;
            return Ok(status);
        }
        Command::Demo(a) => {
            let status = demo::run(&db, a, json)?;
            out.flush()?;
            return Ok(status);
        }
        Command::Serve(a) => {
            out.flush()?;
            return serve::run(&db, a);
        }
        Command::Bench(a) => {
            let status = bench::run(cli.db.as_deref(), a, json)?;
            out.flush()?;
            return Ok(status);
        }
    }
    out.flush()?;
    Ok(0)
}

/// Whether `--db` names a PostgreSQL database rather than a file.
pub fn is_url(db: &Path) -> bool {
    db.to_str().is_some_and(litejob::__command::is_postgres_url)
}

/// Opens `--db`: a file, or a PostgreSQL database (`postgres://…`).
pub fn open(db: &Path, opts: litejob::QueueOptions) -> CliResult<AnyQueue> {
    Ok(AnyQueue::open_with(db, opts)?)
}

/// Opens the queue for a command that inspects or repairs it: a missing
/// file is an error (a typo in `--db` must not create an empty queue). A
/// PostgreSQL database without the tables gets them.
pub fn open_existing(db: &Path) -> CliResult<AnyQueue> {
    if is_url(db) {
        return open(db, litejob::QueueOptions::default());
    }
    must_exist(db)?;
    open(db, litejob::QueueOptions::default())
}

/// Opens the queue for a command that only reads it. A file is opened
/// read-only, so the command works for a user who may read the file but
/// not write it or its directory, and creates nothing there. A file
/// without the tables (empty) or with an older schema still gets them
/// from a read-write open, as from every command, when this user may
/// write the file. A PostgreSQL database opens as for [`open_existing`].
pub fn open_for_reading(db: &Path) -> CliResult<AnyQueue> {
    if is_url(db) {
        return open_existing(db);
    }
    must_exist(db)?;
    match AnyQueue::open_with(db, litejob::QueueOptions::default().with_read_only(true)) {
        Ok(q) => Ok(q),
        // What the read-only open refuses for want of tables or of a
        // migration; a file that is not SQLite's is refused again, in the
        // same words.
        Err(Error::Open(_) | Error::NotADatabase(_))
            if std::fs::OpenOptions::new().write(true).open(db).is_ok() =>
        {
            open(db, litejob::QueueOptions::default())
        }
        Err(e) => Err(e.into()),
    }
}

/// A missing file is an error, not a new queue.
fn must_exist(db: &Path) -> CliResult {
    if db.exists() {
        return Ok(());
    }
    Err(CliError::Failed(format!(
        "no queue file at {} (create it with `litejob --db {} init`, or set --db / LITEJOB_DB)",
        db.display(),
        db.display()
    )))
}

/// Buffered stdout. Every write goes through `?`, so a closed pipe ends the
/// command quietly instead of panicking like `println!` would.
pub struct Out {
    w: BufWriter<io::Stdout>,
}

impl Out {
    fn new() -> Out {
        Out {
            w: BufWriter::new(io::stdout()),
        }
    }

    /// Writes one line.
    pub fn line(&mut self, s: impl AsRef<str>) -> CliResult {
        writeln!(self.w, "{}", s.as_ref())?;
        Ok(())
    }

    /// Writes `v` as one pretty JSON document and a newline.
    pub fn json(&mut self, v: &impl Serialize) -> CliResult {
        serde_json::to_writer_pretty(&mut self.w, v)?;
        writeln!(self.w)?;
        Ok(())
    }

    /// Writes a table with its columns aligned.
    pub fn table(&mut self, t: &Table) -> CliResult {
        for line in t.render() {
            self.line(line)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> CliResult {
        self.w.flush()?;
        Ok(())
    }
}

/// Rows of text cells printed with aligned columns; the last column is not
/// padded (it holds the long values: keys, errors).
pub struct Table {
    indent: usize,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            indent: 0,
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Indents every line by `n` spaces.
    pub fn indent(mut self, n: usize) -> Table {
        self.indent = n;
        self
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// True when no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn render(&self) -> Vec<String> {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        std::iter::once(&self.header)
            .chain(&self.rows)
            .map(|r| {
                let mut line = " ".repeat(self.indent);
                for (i, c) in r.iter().enumerate().take(cols) {
                    if i + 1 < cols {
                        let pad = width[i] - c.chars().count();
                        line.push_str(c);
                        line.push_str(&" ".repeat(pad + 2));
                    } else {
                        line.push_str(c);
                    }
                }
                line.trim_end().to_string()
            })
            .collect()
    }
}

/// One line of text for a table cell: control characters (newlines in an
/// error, escape codes in a key) are shown escaped, so a row stays a row
/// and a hostile key cannot drive the terminal.
pub fn cell(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch.is_control() {
            o.extend(ch.escape_default());
        } else {
            o.push(ch);
        }
    }
    o
}

/// Like [`cell`], cut to `max` characters with an ellipsis.
pub fn cell_cut(s: &str, max: usize) -> String {
    let c = cell(s);
    if c.chars().count() <= max {
        return c;
    }
    let mut t: String = c.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A stored time for people (UTC), or `-`.
pub fn when(ms: Option<i64>) -> String {
    match ms {
        Some(ms) => time::format_millis(ms),
        None => "-".into(),
    }
}

/// A span of milliseconds for people (`850ms`, `12s`, `3h`), or `-`.
pub fn span(ms: Option<i64>) -> String {
    match ms {
        Some(ms) => time::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)),
        None => "-".into(),
    }
}

/// Parses a job state for clap (a bad one is a usage error, exit 2).
pub fn parse_job_state(s: &str) -> Result<JobState, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// Parses an outbox state for clap.
pub fn parse_outbox_state(s: &str) -> Result<OutboxState, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

#[cfg(test)]
mod tests;
