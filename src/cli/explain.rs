//! `litejob explain KEY`: everything known for one idempotency key, under
//! one sentence answering "ten events, or one event ten times?". Reads only.

use litejob::admin::{self, Explanation};
use litejob::Queue;

use super::jobs::{print_attempts, print_outbox};
use super::{cell, cell_cut, when, CliResult, Out, Table};

/// Flags of `litejob explain`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob explain evt_42\n  \
    litejob explain evt_42 --json\n\n\
    The first line answers the question, e.g.\n  \
    1 event, delivered 10 times, run once, send_receipt sent once")]
pub struct ExplainArgs {
    /// The producer's idempotency key.
    pub key: String,
}

/// `litejob explain KEY`. An unknown key is an answer ("no job has this
/// key"), not a failure: exit 0.
pub fn explain(queue: &Queue, a: &ExplainArgs, json: bool, out: &mut Out) -> CliResult {
    let now = litejob::time::now_ms();
    let key = a.key.clone();
    let e = queue.read(|c| admin::explain(c, &key, now))?;
    if json {
        return out.json(&e);
    }
    print(&e, out)
}

fn print(e: &Explanation, out: &mut Out) -> CliResult {
    out.line(&e.summary)?;
    out.line("")?;
    let mut t = Table::new(&["key", &cell(&e.key)]);
    t.row(vec!["deliveries".into(), e.deliveries.to_string()]);
    match &e.job {
        Some(j) => {
            t.row(vec![
                "job".into(),
                format!(
                    "{} ({}, queue {}), {}",
                    j.id,
                    cell(&j.kind),
                    cell(&j.queue),
                    j.state
                ),
            ]);
            t.row(vec![
                "attempts".into(),
                format!(
                    "{} of {} charged, {} abandoned",
                    j.attempts, j.max_attempts, j.abandoned
                ),
            ]);
            t.row(vec!["created".into(), when(Some(j.created_at))]);
            t.row(vec!["finished".into(), when(j.finished_at)]);
            if let Some(err) = &j.last_error {
                t.row(vec!["last error".into(), cell_cut(err, 200)]);
            }
        }
        None => t.row(vec!["job".into(), "none".into()]),
    }
    t.row(vec![
        "ledger".into(),
        match &e.ledger {
            Some(l) => format!(
                "work committed at {}{}",
                when(Some(l.completed_at)),
                l.job_id.map_or(String::new(), |id| format!(" by job {id}"))
            ),
            None => "no row: the work has not committed".into(),
        },
    ]);
    out.table(&t)?;
    if let Some(j) = &e.job {
        out.line("")?;
        print_attempts(&format!("attempts of job {}", j.id), &e.attempts, out)?;
        print_outbox(&e.outbox, out)?;
    }
    Ok(())
}
