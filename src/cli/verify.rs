//! `litejob verify [FILE]`: the storage's own integrity check and
//! litejob's invariants on a file or a PostgreSQL database, opened
//! read-only, with `Admin::verify`. Exit 0 when sound, 1 with the list of
//! what is broken. Writes nothing.

use std::path::{Path, PathBuf};

use litejob::admin::{AnyQueue, Invariant, VerifyReport};
use litejob::QueueOptions;

use super::{cell_cut, CliResult, Out, Table};

/// Flags of `litejob verify`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob --db /var/lib/app/jobs.db verify\n  \
    litejob verify /var/backups/jobs-2026-12-01.db\n  \
    litejob --db postgres://app:secret@db.internal/app verify --json\n\n\
    Runs the storage's own check (a file: PRAGMA integrity_check and\n\
    foreign_key_check; PostgreSQL: amcheck's bt_index_check of litejob's indexes\n\
    when the extension is installed), checks the schema version, and checks\n\
    litejob's invariants across its tables, in one read snapshot. Opens read-only:\n\
    it writes nothing and works on a file the user may only read.\n\n\
    Exit status: 0 sound; 1 something is broken (each invariant with its count and\n\
    an example id), or the queue could not be read.")]
pub struct VerifyArgs {
    /// The file (or postgres:// URL) to check [default: --db].
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `litejob verify [FILE]`; returns the exit status.
pub fn verify(db: &Path, a: &VerifyArgs, json: bool, out: &mut Out) -> CliResult<i32> {
    let target = a.file.as_deref().unwrap_or(db);
    let queue = open_read_only(target)?;
    let report = queue.admin().verify()?;
    if json {
        out.json(&report)?;
    } else {
        text(&report, out)?;
    }
    Ok(if report.is_sound() { 0 } else { 1 })
}

fn text(r: &VerifyReport, out: &mut Out) -> CliResult {
    out.line(format!(
        "{} ({}, schema version {})",
        r.location,
        r.engine.as_str(),
        r.schema_version
    ))?;
    out.line(format!("  storage check: {}", r.integrity))?;
    let not_checked: Vec<&str> = Invariant::ALL
        .iter()
        .filter(|i| !r.checked.contains(i))
        .map(|i| i.name())
        .collect();
    out.line(format!(
        "  invariants checked: {}{}",
        r.checked.len(),
        if not_checked.is_empty() {
            String::new()
        } else {
            format!(
                " (not on {}: {})",
                r.engine.as_str(),
                not_checked.join(", ")
            )
        }
    ))?;
    if r.is_sound() {
        return out.line("sound: nothing is broken");
    }
    out.line(format!("BROKEN: {} invariants", r.broken.len()))?;
    let mut t = Table::new(&["INVARIANT", "COUNT", "EXAMPLE", "WHAT"]).indent(2);
    for b in &r.broken {
        let example = match b.invariant.table() {
            "jobs" => format!("job {}", b.example),
            "outbox" => format!("outbox row {}", b.example),
            "attempts" => format!("attempt {}", b.example),
            "processed_jobs" => format!("key {}", cell_cut(&b.example, 40)),
            _ => cell_cut(&b.example, 60),
        };
        t.row(vec![
            b.invariant.name().to_string(),
            b.count.to_string(),
            example,
            b.invariant.description().to_string(),
        ]);
    }
    out.table(&t)
}

/// Opens a file or a database strictly read-only, for a command that must
/// write nothing there: no schema created or migrated either (a file
/// with an older schema is refused, and says how to migrate it).
pub fn open_read_only(db: &Path) -> CliResult<AnyQueue> {
    if !super::is_url(db) {
        super::must_exist(db)?;
    }
    super::open(db, QueueOptions::default().with_read_only(true))
}
