//! Every run is a log line: with `RUST_LOG=litejob=info`, each attempt row
//! of a job or an effect has its "finished" line naming the same job or
//! outbox row, kind, key, attempt of its budget and outcome, with its
//! duration, so "ten events or one event ten times?" can be answered from
//! the log as from the `attempts` table.

use std::collections::BTreeMap;
use std::process::Command;

use super::Db;
use crate::backends::TestQueue;
use crate::both;
use crate::support::{bin, show};

/// The `key=value` fields of a log line (values without spaces).
fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// `(id, attempt, outcome)` of every run the table holds, for jobs
/// (`job_id`) or effects (`outbox_id`).
fn runs(q: &TestQueue, of: &str) -> Vec<String> {
    let mut rows = q.strings(&format!(
        "SELECT CAST({of} AS TEXT) || ' ' || CAST(attempt AS TEXT) || ' ' || outcome \
         FROM attempts WHERE {of} IS NOT NULL"
    ));
    rows.sort();
    rows
}

both! {
    fn every_run_of_a_job_or_an_effect_is_one_log_line_with_its_attempt_and_outcome(q) {
        // Receipts fail half the time, so effects run more than once.
        let dir = tempfile::tempdir().unwrap();
        let receipts = dir.path().join("receipts");
        let args = [
            "demo", "--events", "12", "--redeliver", "2", "--workers", "2",
            "--mail-failure-rate", "0.5", "--receipts", receipts.to_str().unwrap(),
        ];
        let out = Command::new(bin())
            .arg("--db")
            .arg(q.db())
            .args(args)
            .env("RUST_LOG", "litejob=info")
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
        let log = String::from_utf8_lossy(&out.stderr);
        let mut logged = BTreeMap::<&str, Vec<String>>::new();
        for line in log.lines() {
            let (what, id) = if line.contains("] job finished ") {
                ("job_id", "job_id")
            } else if line.contains("] effect finished ") {
                ("outbox_id", "outbox_id")
            } else {
                continue;
            };
            let f = fields(line);
            for field in ["kind", "key", "attempt", "outcome", "duration_ms"] {
                assert!(f.contains_key(field), "no {field} in: {line}");
            }
            let attempt = f["attempt"].split_once('/').expect("attempt N/M").0;
            logged
                .entry(what)
                .or_default()
                .push(format!("{} {attempt} {}", f[id], f["outcome"]));
        }
        for of in ["job_id", "outbox_id"] {
            let mut lines = logged.remove(of).unwrap_or_default();
            lines.sort();
            let rows = runs(q, of);
            assert!(!rows.is_empty(), "no {of} runs recorded");
            assert_eq!(lines, rows, "{of}: the log's runs against the attempts table\n{log}");
        }
        assert!(
            runs(q, "outbox_id").len() > 12,
            "no receipt was retried: the test did not run an effect twice"
        );
    }
}
