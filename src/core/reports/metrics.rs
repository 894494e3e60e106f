//! The queue's metrics in the Prometheus text format ([`Admin::metrics`](crate::admin::Admin::metrics)),
//! computed from the database when asked, so they cover every process that
//! works on it: jobs per queue, kind and state; outbox rows per kind and
//! state; the backlog's age per queue; deliveries and duplicates; runs per
//! kind and outcome; the ledger; the storage's size. Writes no table.
//!
//! The backend counts it all in one snapshot, so the figures agree with
//! each other ([`crate::sqlite::tally`]: one scan per table of the file, `GROUP BY`
//! queries on PostgreSQL); the text is written here, the same for both.

use std::fmt::Write as _;

use crate::core::job::JobState;
use crate::core::options::EngineKind;
use crate::core::outbox::OutboxState;
use crate::core::reports::tally::{Tally, OUTCOMES};
use crate::core::time::Millis;

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

/// The metrics' text: every family in turn, from one tally.
pub(crate) fn render(t: &Tally, now: Millis, engine: EngineKind) -> String {
    let mut o = String::new();
    jobs(&mut o, t);
    outbox(&mut o, t);
    backlog_and_deliveries(&mut o, t, now);
    attempts(&mut o, t);
    storage(&mut o, t, engine);
    o
}

/// `litejob_partitions_at_limit{queue}`: of each queue with partition
/// limits in `controls`, how many partitions are at their limit.
pub(crate) fn partitions_at_limit(
    o: &mut String,
    controls: &[crate::core::controls::QueueControl],
) {
    family(
        o,
        "litejob_partitions_at_limit",
        "gauge",
        "Partitions of the queue at their cap or rate: a claim skips their jobs now.",
    );
    for q in controls {
        if q.partition_concurrency.is_some() || q.partition_rate.is_some() {
            let _ = writeln!(
                o,
                "litejob_partitions_at_limit{{queue=\"{}\"}} {}",
                label(&q.name),
                q.partitions_at_limit_count
            );
        }
    }
}

fn jobs(o: &mut String, t: &Tally) {
    family(
        o,
        "litejob_jobs",
        "gauge",
        "Jobs in the queue, by queue, kind and state.",
    );
    for ((queue, kind), states) in &t.jobs {
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
}

fn outbox(o: &mut String, t: &Tally) {
    family(
        o,
        "litejob_outbox",
        "gauge",
        "Outbox rows in the queue, by kind and state.",
    );
    for (kind, states) in &t.outbox {
        for state in OutboxState::ALL {
            let n = states.get(&state).copied().unwrap_or(0);
            let _ = writeln!(
                o,
                "litejob_outbox{{kind=\"{}\",state=\"{state}\"}} {n}",
                label(kind)
            );
        }
    }
}

/// Each queue's backlog age, and the deliveries over all job rows.
fn backlog_and_deliveries(o: &mut String, t: &Tally, now: Millis) {
    family(
        o,
        "litejob_oldest_queued_age_seconds",
        "gauge",
        "How long the longest-waiting runnable job of the queue has been due (0: none is).",
    );
    let by_queue = t.by_queue();
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
        o,
        "litejob_deliveries_total",
        "counter",
        "Enqueues seen for the job rows in the queue (first deliveries and duplicates).",
    );
    let _ = writeln!(o, "litejob_deliveries_total {deliveries}");
    family(
        o,
        "litejob_duplicate_deliveries_total",
        "counter",
        "Enqueues of a key that already had a job: absorbed, nothing created.",
    );
    let _ = writeln!(
        o,
        "litejob_duplicate_deliveries_total {}",
        deliveries - rows
    );
}

fn attempts(o: &mut String, t: &Tally) {
    family(
        o,
        "litejob_attempts",
        "gauge",
        "Runs in the attempt history, by the job's or effect's kind and outcome.",
    );
    for (kind, counts) in &t.runs {
        for (outcome, n) in OUTCOMES.iter().zip(counts) {
            let _ = writeln!(
                o,
                "litejob_attempts{{kind=\"{}\",outcome=\"{outcome}\"}} {n}",
                label(kind)
            );
        }
    }
}

/// The ledger, and the storage's size (what it means differs by engine).
fn storage(o: &mut String, t: &Tally, engine: EngineKind) {
    family(
        o,
        "litejob_ledger_rows",
        "gauge",
        "Keys in the processed_jobs ledger: work that committed.",
    );
    let _ = writeln!(o, "litejob_ledger_rows {}", t.ledger_rows);
    let (file_help, wal_help) = match engine {
        EngineKind::Sqlite => (
            "Size of the queue file in bytes.",
            "Size of the queue file's write-ahead log (<file>-wal) in bytes.",
        ),
        EngineKind::Postgres => (
            "Size of litejob's tables on the PostgreSQL server (rows, indexes, TOAST) in bytes.",
            "0 on PostgreSQL: the server's write-ahead log belongs to the whole cluster.",
        ),
    };
    family(o, "litejob_file_bytes", "gauge", file_help);
    let _ = writeln!(o, "litejob_file_bytes {}", t.file_bytes);
    family(o, "litejob_wal_bytes", "gauge", wal_help);
    let _ = writeln!(o, "litejob_wal_bytes {}", t.wal_bytes);
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
