//! `litejob copy --to postgres://…`: moves the queue file `--db` names into
//! an empty PostgreSQL database, with `Queue::copy_to`. Writes the
//! destination's tables through the library only.

use std::path::Path;
use std::time::Instant;

use litejob::admin::AnyQueue;
use litejob::postgres::Postgres;
use litejob::{Queue, QueueOptions};
use serde::Serialize;

use super::{CliError, CliResult, Out};

/// Flags of `litejob copy`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  \
    litejob --db /var/lib/app/jobs.db copy --to postgres://app:secret@db.internal/app\n\n\
    Copies every job, ledger row, outbox row, attempt and schedule of the file,\n\
    with their ids and keys, in one PostgreSQL transaction: all of it or nothing.\n\
    The database's tables are created if missing; a database that already holds\n\
    any litejob row is refused (exit 1) and nothing is written. Stop the\n\
    application first: what it writes to the file afterwards is not copied.")]
pub struct CopyArgs {
    /// The PostgreSQL database to copy into: postgres://user:password@host:port/database.
    #[arg(long, value_name = "URL")]
    pub to: String,
}

/// What `litejob copy --json` prints.
#[derive(Serialize)]
struct CopyOut {
    from: String,
    to: String,
    jobs: u64,
    processed_jobs: u64,
    outbox: u64,
    attempts: u64,
    schedules: u64,
    queues: u64,
    queue_starts: u64,
}

/// `litejob copy --to URL`.
pub fn copy(db: &Path, a: &CopyArgs, json: bool, out: &mut Out) -> CliResult {
    if super::is_url(db) {
        return Err(CliError::Input(
            "copy reads a queue file, and --db names a PostgreSQL database: name the file \
             with --db and the database with --to"
                .into(),
        ));
    }
    if !litejob::admin::is_postgres_url(&a.to) {
        return Err(CliError::Input(
            "--to is not a PostgreSQL URL: expected postgres://user:password@host:port/database"
                .into(),
        ));
    }
    // The file first: a missing one must leave the database untouched,
    // not even given the tables.
    let AnyQueue::Sqlite(file) = super::open_existing(db)? else {
        return Err(CliError::Failed("copy reads a queue file".into()));
    };
    let dest: Queue<Postgres> = Queue::open_with(a.to.as_str(), QueueOptions::default())?;
    let t0 = Instant::now();
    let r = file.copy_to(&dest)?;
    if json {
        return out.json(&CopyOut {
            from: file.location().to_string(),
            to: dest.location().to_string(),
            jobs: r.jobs,
            processed_jobs: r.processed_jobs,
            outbox: r.outbox,
            attempts: r.attempts,
            schedules: r.schedules,
            queues: r.queues,
            queue_starts: r.queue_starts,
        });
    }
    out.line(format!(
        "copied {} to {} in {:.1} s: {} jobs, {} ledger rows, {} outbox rows, {} attempts, \
         {} schedules, {} queue controls",
        file.location(),
        dest.location(),
        t0.elapsed().as_secs_f64(),
        r.jobs,
        r.processed_jobs,
        r.outbox,
        r.attempts,
        r.schedules,
        r.queues
    ))
}
