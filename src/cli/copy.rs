//! `litejob copy --to …`: moves a queue between a file and PostgreSQL,
//! either way: the file `--db` names into an empty database (`--to
//! postgres://…`), or the database `--db` names into a new file (`--to
//! FILE`), with `Queue::copy_to`. Writes the destination's tables through
//! the library only (and removes a file it created when the copy fails).

use std::path::Path;
use std::time::Instant;

use litejob::admin::{AnyQueue, CopyReport};
use litejob::postgres::Postgres;
use litejob::{Queue, QueueOptions};
use serde::Serialize;

use super::{CliError, CliResult, Out};

/// Flags of `litejob copy`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  \
    litejob --db /var/lib/app/jobs.db copy --to postgres://app:secret@db.internal/app\n  \
    litejob --db postgres://app:secret@db.internal/app copy --to /var/lib/app/jobs.db\n\n\
    Copies every job (with its output), workflow edge, ledger row, outbox row,\n\
    attempt, schedule and queue control, with their ids and keys, read in one\n\
    snapshot and written in one transaction: all of it or nothing. Into\n\
    PostgreSQL, the tables are created if missing; into a file, a new file is\n\
    created (its id counters continue past every id the database gave out). A\n\
    destination that already holds any litejob row is refused (exit 1) and\n\
    nothing is written. Stop the application first: what it writes to the\n\
    source afterwards is not copied.")]
pub struct CopyArgs {
    /// Where to copy to: a PostgreSQL database (postgres://user:password@host:port/database)
    /// when --db is a file, or a new file when --db is a PostgreSQL database.
    #[arg(long, value_name = "URL|FILE")]
    pub to: String,
}

/// What `litejob copy --json` prints: where from and to, then the rows of
/// each table.
#[derive(Serialize)]
struct CopyOut<'a> {
    from: &'a str,
    to: &'a str,
    #[serde(flatten)]
    rows: &'a CopyReport,
}

/// `litejob copy --to URL|FILE`.
pub fn copy(db: &Path, a: &CopyArgs, json: bool, out: &mut Out) -> CliResult {
    let to_database = litejob::__command::is_postgres_url(&a.to);
    match (super::is_url(db), to_database) {
        (false, true) => file_to_database(db, a, json, out),
        (true, false) => database_to_file(db, a, json, out),
        (true, true) => Err(CliError::Input(
            "copy reads a queue file into a database, or a database into a new file, and \
             --db and --to both name PostgreSQL databases: name the file with --db or --to"
                .into(),
        )),
        (false, false) => Err(CliError::Input(
            "--to is not a PostgreSQL URL: expected postgres://user:password@host:port/database \
             (a queue file is copied into another file with `litejob backup`)"
                .into(),
        )),
    }
}

/// `litejob --db FILE copy --to postgres://…`.
fn file_to_database(db: &Path, a: &CopyArgs, json: bool, out: &mut Out) -> CliResult {
    // The file first: a missing one must leave the database untouched,
    // not even given the tables.
    let AnyQueue::Sqlite(file) = super::open_existing(db)? else {
        return Err(CliError::Failed("copy reads a queue file".into()));
    };
    let dest: Queue<Postgres> = Queue::open_with(a.to.as_str(), QueueOptions::default())?;
    let t0 = Instant::now();
    let r = file.copy_to(&dest)?;
    report(file.location(), dest.location(), &r, t0, json, out)
}

/// `litejob --db postgres://… copy --to FILE`.
fn database_to_file(db: &Path, a: &CopyArgs, json: bool, out: &mut Out) -> CliResult {
    let to = Path::new(&a.to);
    if a.to.is_empty() || to.is_dir() {
        return Err(CliError::Input(format!(
            "--to {:?} is not a file to create: name the new queue file",
            a.to
        )));
    }
    // The database first, read-only: a copy writes nothing there, and an
    // unreachable server must leave no file behind.
    let url = db.to_string_lossy();
    let src: Queue<Postgres> =
        Queue::open_with(url.as_ref(), QueueOptions::default().with_read_only(true))?;
    let created = !to.exists();
    let t0 = Instant::now();
    let copied = (|| {
        let dest = Queue::open(to)?;
        let r = src.copy_to(&dest)?;
        Ok::<_, litejob::Error>((dest.location().to_string(), r))
    })();
    match copied {
        Ok((location, r)) => report(src.location(), &location, &r, t0, json, out),
        Err(e) => {
            // A file this copy created holds nothing but the empty tables:
            // gone, as if the copy had never run.
            if created {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", a.to));
                }
            }
            Err(e.into())
        }
    }
}

/// Prints what a copy moved.
fn report(
    from: &str,
    to: &str,
    r: &CopyReport,
    t0: Instant,
    json: bool,
    out: &mut Out,
) -> CliResult {
    if json {
        return out.json(&CopyOut { from, to, rows: r });
    }
    out.line(format!(
        "copied {from} to {to} in {:.1} s: {} jobs, {} ledger rows, {} outbox rows, {} attempts, \
         {} schedules, {} queue controls, {} workflow edges, {} steps",
        t0.elapsed().as_secs_f64(),
        r.jobs,
        r.processed_jobs,
        r.outbox,
        r.attempts,
        r.schedules,
        r.queues,
        r.job_dependencies,
        r.job_steps
    ))
}
