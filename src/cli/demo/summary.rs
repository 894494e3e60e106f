//! What the demo did, counted in plain SQL over its keys and the receipts
//! file read back, for people and for `--json`. Reads only.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use litejob::admin::AnyQueue;
use litejob::Error;
use serde::Serialize;

use super::{file, postgres, DemoArgs, PaymentEvent};

/// What `litejob demo` prints; with `--json`, this object. Counts are for
/// the demo's event ids and cumulative over runs on the same file, except
/// `this_run`.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Summary {
    /// Distinct events (`--events`).
    pub(super) events: u64,
    /// Enqueues seen for the events' keys (`sum(jobs.deliveries)`).
    pub(super) deliveries: i64,
    /// Deliveries that created nothing: `deliveries - jobs`.
    pub(super) duplicates_absorbed: i64,
    /// Job rows for the events' keys.
    pub(super) jobs: i64,
    /// Invoices for the events.
    pub(super) invoices: i64,
    /// Outbox rows `sent`.
    pub(super) receipts_sent: i64,
    /// Lines in the receipts file.
    pub(super) receipt_lines: i64,
    /// Receipt lines beyond the first for the same invoice: a kill landed
    /// between a send and its acknowledgement.
    pub(super) duplicate_receipt_lines: i64,
    /// Runs beyond the first, of jobs and of receipt sends.
    pub(super) retries: i64,
    /// Receipt sends that failed (the simulated mail outage).
    pub(super) failed_sends: i64,
    /// Jobs and outbox rows `dead`.
    pub(super) dead: i64,
    /// Deliveries made by this run, and what they did.
    pub(super) this_run: ThisRun,
    /// True when a signal cut the run short.
    pub(super) interrupted: bool,
    /// The database file, or the PostgreSQL URL without its password.
    pub(super) db: String,
    /// The receipts file.
    pub(super) receipts: String,
    /// Wall-clock time of this run.
    pub(super) elapsed_ms: u64,
}

/// This process's deliveries.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct ThisRun {
    pub(super) deliveries: u64,
    pub(super) new_jobs: u64,
    pub(super) duplicates: u64,
}

/// The summary's counts, in plain SQL over the demo's keys (the event
/// ids), and the receipts file read back.
pub(super) fn summarize(
    queue: &AnyQueue,
    events: &[PaymentEvent],
    receipts: &Path,
) -> Result<Summary, Error> {
    let keys: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let counts: [i64; 7] = match queue {
        AnyQueue::Sqlite(q) => file::summary(q, &keys)?,
        AnyQueue::Postgres(q) => postgres::summary(q, &keys)?,
        _ => {
            return Err(Error::Unsupported(
                "an engine this demo does not know".into(),
            ))
        }
    };
    let [jobs, deliveries, invoices, receipts_sent, dead, retries, failed_sends] = counts;
    let mut s = Summary {
        jobs,
        deliveries,
        invoices,
        receipts_sent,
        dead,
        retries,
        failed_sends,
        ..Summary::default()
    };
    s.duplicates_absorbed = s.deliveries - s.jobs;
    let text = std::fs::read_to_string(receipts)?;
    let mut seen: HashMap<&str, i64> = HashMap::new();
    for line in text.lines() {
        *seen.entry(line).or_default() += 1;
    }
    s.receipt_lines = seen.values().sum();
    s.duplicate_receipt_lines = seen.values().map(|n| n - 1).sum();
    Ok(s)
}

/// Prints the summary for people. A closed pipe (`litejob demo | head`) is
/// not an error.
pub(super) fn print_summary(s: &Summary, args: &DemoArgs) {
    let mut out = format!(
        "litejob demo{}: a payment provider delivered {} events {} times each, shuffled; {} workers\n",
        if s.interrupted {
            " (interrupted, partial)"
        } else {
            ""
        },
        s.events,
        args.redeliver,
        args.workers
    );
    let mut line = |label: &str, value: i64, note: String| {
        let l = format!("  {label:<20} {value:>8}   {note}");
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line("events", s.events as i64, String::new());
    line(
        "deliveries",
        s.deliveries,
        format!(
            "enqueues seen, all runs (this run: {})",
            s.this_run.deliveries
        ),
    );
    line(
        "duplicates absorbed",
        s.duplicates_absorbed,
        "deliveries that created no job".into(),
    );
    line(
        "invoices",
        s.invoices,
        "rows in `invoices`, one per event".into(),
    );
    line(
        "receipts sent",
        s.receipts_sent,
        format!("{} lines in {}", s.receipt_lines, s.receipts),
    );
    if s.duplicate_receipt_lines > 0 {
        line(
            "receipts sent twice",
            s.duplicate_receipt_lines,
            "a crash landed between a send and its acknowledgement".into(),
        );
    }
    line(
        "retries",
        s.retries,
        format!("runs beyond the first ({} failed sends)", s.failed_sends),
    );
    line("dead", s.dead, "jobs and receipts out of attempts".into());
    let shell = if litejob::__command::is_postgres_url(&s.db) {
        // The URL is shown without its password: put it back to run these.
        format!("psql '{}' -c", s.db)
    } else {
        format!("sqlite3 {}", s.db)
    };
    out.push_str(&format!(
        "Run it again: only the delivery counts grow. Then look closer:\n  \
         litejob --db '{db}' explain evt_000001\n  \
         litejob --db '{db}' stats\n  \
         {shell} 'SELECT * FROM key_summary LIMIT 5'\n",
        db = s.db
    ));
    print_out(&out);
}

pub(super) fn print_out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
