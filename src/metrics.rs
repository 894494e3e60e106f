//! The queue's metrics in the Prometheus text format ([`Queue::metrics`]),
//! computed from the file when asked, so they cover every process that works
//! on it: jobs per queue, kind and state; outbox rows per kind and state;
//! the backlog's age per queue; deliveries and duplicates; runs per kind and
//! outcome; the ledger; the file's size. Writes no table.
//!
//! All of it is read in one read transaction, so the figures agree with
//! each other; the counting itself is [`crate::tally`]'s (one scan per
//! table, no sort).

use std::fmt::Write as _;

use rusqlite::Connection;

use crate::error::Result;
use crate::inspect::{file_sizes, in_snapshot};
use crate::job::JobState;
use crate::outbox::OutboxState;
use crate::queue::Queue;
use crate::tally::{self, OUTCOMES};
use crate::time::{now_ms, Millis};

/// The number of ledger rows (SQLite counts them from its smallest index).
const LEDGER_ROWS: &str = "SELECT count(*) FROM processed_jobs";

impl Queue {
    /// The queue's metrics as Prometheus text (exposition format 0.0.4),
    /// for an application that serves `/metrics` from its own HTTP server
    /// (`litejob serve` serves the same text). The families:
    ///
    /// - `litejob_jobs{queue,kind,state}` (gauge): job rows, every state of
    ///   each queue and kind present, zeros included;
    /// - `litejob_outbox{kind,state}` (gauge): outbox rows;
    /// - `litejob_oldest_queued_age_seconds{queue}` (gauge): how long the
    ///   longest-waiting runnable job of the queue has been due (since its
    ///   `run_at`: a job scheduled for later is not late), 0 when none is;
    /// - `litejob_deliveries_total` and `litejob_duplicate_deliveries_total`
    ///   (counters): enqueues seen over the job rows in the file, and those
    ///   that were duplicates (a prune lowers them: Prometheus reads that as
    ///   a counter reset);
    /// - `litejob_attempts{kind,outcome}` (gauge): runs in the attempt
    ///   history, by the job's or the effect's kind;
    /// - `litejob_ledger_rows`, `litejob_file_bytes`, `litejob_wal_bytes`
    ///   (gauges).
    ///
    /// It reads every row of `jobs`, `outbox` and `attempts` once (about
    /// half a second for a million jobs with their runs on a small VPS).
    pub fn metrics(&self) -> Result<String> {
        let now = now_ms();
        let mut text = self.read(|conn| in_snapshot(conn, |c| render(c, now)))?;
        let (file, wal) = file_sizes(self.path());
        family(
            &mut text,
            "litejob_file_bytes",
            "gauge",
            "Size of the queue file in bytes.",
        );
        let _ = writeln!(text, "litejob_file_bytes {file}");
        family(
            &mut text,
            "litejob_wal_bytes",
            "gauge",
            "Size of the queue file's write-ahead log (<file>-wal) in bytes.",
        );
        let _ = writeln!(text, "litejob_wal_bytes {wal}");
        Ok(text)
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format spells it: backslash, double quote
/// and newline escaped.
fn label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// Seconds, as the text format writes a float.
fn seconds(ms: Millis) -> String {
    format!("{:.3}", ms.max(0) as f64 / 1000.0)
}

fn render(conn: &Connection, now: Millis) -> Result<String> {
    let jobs = tally::jobs(conn, now)?;
    let outbox = tally::outbox(conn)?;
    let runs = tally::attempts(conn, &jobs, &outbox)?;
    let ledger: i64 = conn
        .prepare_cached(LEDGER_ROWS)?
        .query_row([], |r| r.get(0))?;

    let mut o = String::new();
    family(
        &mut o,
        "litejob_jobs",
        "gauge",
        "Jobs in the file, by queue, kind and state.",
    );
    for ((queue, kind), states) in &jobs.groups {
        for state in JobState::ALL {
            let n = states.get(&state).map_or(0, |g| g.count);
            let _ = writeln!(
                o,
                "litejob_jobs{{queue=\"{}\",kind=\"{}\",state=\"{state}\"}} {n}",
                label(queue),
                label(kind)
            );
        }
    }
    family(
        &mut o,
        "litejob_outbox",
        "gauge",
        "Outbox rows in the file, by kind and state.",
    );
    for (kind, states) in &outbox.groups {
        for state in OutboxState::ALL {
            let n = states.get(&state).copied().unwrap_or(0);
            let _ = writeln!(
                o,
                "litejob_outbox{{kind=\"{}\",state=\"{state}\"}} {n}",
                label(kind)
            );
        }
    }
    family(
        &mut o,
        "litejob_oldest_queued_age_seconds",
        "gauge",
        "How long the longest-waiting runnable job of the queue has been due (0: none is).",
    );
    let by_queue = jobs.by_queue();
    for (queue, states) in &by_queue {
        let due = states
            .get(&JobState::Queued)
            .and_then(|g| g.oldest_due_run_at);
        let _ = writeln!(
            o,
            "litejob_oldest_queued_age_seconds{{queue=\"{}\"}} {}",
            label(queue),
            seconds(due.map_or(0, |t| now - t))
        );
    }
    let (rows, deliveries) = by_queue
        .values()
        .flat_map(|s| s.values())
        .fold((0, 0), |(r, d), g| (r + g.count, d + g.deliveries));
    family(
        &mut o,
        "litejob_deliveries_total",
        "counter",
        "Enqueues seen for the job rows in the file (first deliveries and duplicates).",
    );
    let _ = writeln!(o, "litejob_deliveries_total {deliveries}");
    family(
        &mut o,
        "litejob_duplicate_deliveries_total",
        "counter",
        "Enqueues of a key that already had a job: absorbed, nothing created.",
    );
    let _ = writeln!(
        o,
        "litejob_duplicate_deliveries_total {}",
        deliveries - rows
    );
    family(
        &mut o,
        "litejob_attempts",
        "gauge",
        "Runs in the attempt history, by the job's or effect's kind and outcome.",
    );
    for (kind, counts) in &runs {
        for (outcome, n) in OUTCOMES.iter().zip(counts) {
            let _ = writeln!(
                o,
                "litejob_attempts{{kind=\"{}\",outcome=\"{outcome}\"}} {n}",
                label(kind)
            );
        }
    }
    family(
        &mut o,
        "litejob_ledger_rows",
        "gauge",
        "Keys in the processed_jobs ledger: work that committed.",
    );
    let _ = writeln!(o, "litejob_ledger_rows {ledger}");
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_what_the_text_format_requires() {
        assert_eq!(label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label("two\nlines"), "two\\nlines");
        assert_eq!(seconds(1500), "1.500");
        assert_eq!(seconds(-5), "0.000");
    }
}
