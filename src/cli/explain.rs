//! `litejob explain KEY`: everything known for one idempotency key, under
//! one sentence answering "ten events, or one event ten times?". Reads only.

use litejob::admin::{AnyQueue, Explanation, LedgerEntry, Linked, OutboxEntry, QueueControl};
use litejob::{Attempt, AttemptOutcome, Job, JobState, OutboxState};
use serde::Serialize;

use super::jobs::{print_attempts, print_outbox, print_steps};
use super::time::{exact_duration, format_duration, format_millis, now_ms};
use super::workflow::{describe, link_rows, list, waiting_on};
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

/// The `--json` document: the library's explanation with the sentence in
/// second place.
#[derive(Serialize)]
struct Explained<'a> {
    key: &'a str,
    summary: &'a str,
    deliveries: i64,
    job: &'a Option<Job>,
    attempts: &'a [Attempt],
    steps: &'a [litejob::JobStep],
    ledger: &'a Option<LedgerEntry>,
    outbox: &'a [OutboxEntry],
    queue_control: &'a Option<QueueControl>,
    waiting: Option<String>,
    dependencies: &'a [Linked],
    dependents: &'a [Linked],
    waiting_on: Vec<&'a Linked>,
    /// The key's work committed (the ledger has it) but its job row was
    /// pruned, and with it the delivery count: `deliveries` is 0 then.
    job_pruned: bool,
}

/// `litejob explain KEY`. An unknown key is an answer ("no job has this
/// key"), not a failure: exit 0.
pub fn explain(queue: &AnyQueue, a: &ExplainArgs, json: bool, out: &mut Out) -> CliResult {
    let e = queue.admin().explain(&a.key)?;
    let summary = summarize(
        e.job.as_ref(),
        &e.attempts,
        e.ledger.as_ref(),
        &e.outbox,
        now_ms(),
    );
    let waiting = waiting_on_dependencies(&e).or_else(|| waiting_on_controls(&e, now_ms()));
    if json {
        return out.json(&Explained {
            key: &e.key,
            summary: &summary,
            deliveries: e.deliveries,
            job: &e.job,
            attempts: &e.attempts,
            steps: &e.steps,
            ledger: &e.ledger,
            outbox: &e.outbox,
            queue_control: &e.queue_control,
            waiting,
            dependencies: &e.dependencies,
            dependents: &e.dependents,
            waiting_on: e
                .job
                .as_ref()
                .map_or_else(Vec::new, |j| waiting_on(j, &e.dependencies)),
            job_pruned: e.job.is_none() && e.ledger.is_some(),
        });
    }
    print(&e, &summary, waiting.as_deref(), out)
}

/// Which dependencies the key's job, waiting, still waits for.
fn waiting_on_dependencies(e: &Explanation) -> Option<String> {
    let pending = waiting_on(e.job.as_ref()?, &e.dependencies);
    let (first, hint) = (
        pending.first()?,
        format!(" (litejob workflow {})", cell(&e.key)),
    );
    let total = e.dependencies.len();
    Some(match pending.len() {
        1 if total == 1 => format!("waiting: for its dependency {}", describe(first)),
        n if n == total => format!(
            "waiting: for its {n} dependencies: {}",
            list(&pending, &hint)
        ),
        n => format!(
            "waiting: for {n} of its {total} dependencies: {}",
            list(&pending, &hint)
        ),
    })
}

/// Why the key's job, queued and due, waits on its queue's controls.
fn waiting_on_controls(e: &Explanation, now: i64) -> Option<String> {
    let j = e.job.as_ref()?;
    if j.state != JobState::Queued || j.run_at > now {
        return None;
    }
    super::queues::waiting(e.queue_control.as_ref()?, j.partition.as_deref())
        .map(|w| format!("waiting: {w}"))
}

fn print(e: &Explanation, summary: &str, waiting: Option<&str>, out: &mut Out) -> CliResult {
    out.line(summary)?;
    if let Some(w) = waiting {
        out.line(w)?;
    }
    out.line("")?;
    let mut t = Table::new(&["key", &cell(&e.key)]);
    match (&e.job, &e.ledger) {
        // The delivery count went with the job row; only the ledger knows
        // the key now.
        (None, Some(l)) => t.row(vec![
            "job".into(),
            format!("pruned; its {} (ledger)", committed(l)),
        ]),
        _ => t.row(vec!["deliveries".into(), e.deliveries.to_string()]),
    }
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
            if let Some(ms) = j.timeout_ms {
                t.row(vec!["timeout".into(), exact_duration(ms)]);
            }
            if let Some(q) = &e.queue_control {
                t.row(vec!["queue control".into(), super::queues::describe(q)]);
            }
            t.row(vec!["created".into(), when(Some(j.created_at))]);
            t.row(vec!["finished".into(), when(j.finished_at)]);
            if let Some(err) = &j.last_error {
                t.row(vec!["last error".into(), cell_cut(err, 200)]);
            }
            if let Some(o) = &j.output {
                t.row(vec!["output".into(), cell_cut(o, 200)]);
            }
            for row in link_rows(j, &e.dependencies, &e.dependents) {
                t.row(row);
            }
        }
        None if e.ledger.is_some() => {}
        None => t.row(vec!["job".into(), "none".into()]),
    }
    if e.job.is_some() || e.ledger.is_none() {
        t.row(vec![
            "ledger".into(),
            match &e.ledger {
                Some(l) => committed(l),
                None => "no row: the work has not committed".into(),
            },
        ]);
    }
    out.table(&t)?;
    if let Some(j) = &e.job {
        out.line("")?;
        print_attempts(&format!("attempts of job {}", j.id), &e.attempts, out)?;
        print_steps(&e.steps, out)?;
        print_outbox(&e.outbox, out)?;
    }
    Ok(())
}

/// `work committed at <time> by job <id>`.
fn committed(l: &LedgerEntry) -> String {
    format!(
        "work committed at {}{}",
        when(Some(l.completed_at)),
        l.job_id.map_or(String::new(), |id| format!(" by job {id}"))
    )
}

/// "once", "twice", "3 times".
fn times(n: i64) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

fn plural(n: i64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The one sentence on top of `explain`: how many events, how many
/// deliveries, how many runs and what became of them, and each effect.
/// `now` is used for "scheduled in ..." phrases.
pub fn summarize(
    job: Option<&Job>,
    attempts: &[Attempt],
    ledger: Option<&LedgerEntry>,
    outbox: &[OutboxEntry],
    now: i64,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (job, ledger) {
        (None, None) => return "no job has this key".into(),
        (None, Some(l)) => {
            parts.push("1 event".into());
            parts.push("its job row was pruned".into());
            parts.push(format!(
                "work committed once at {}",
                format_millis(l.completed_at)
            ));
        }
        (Some(j), _) => {
            parts.push("1 event".into());
            parts.push(format!("delivered {}", times(j.deliveries)));
            parts.push(run_phrase(j, attempts, ledger.is_some(), now));
        }
    }
    for o in outbox {
        parts.push(outbox_phrase(o));
    }
    parts.join(", ")
}

fn run_phrase(job: &Job, attempts: &[Attempt], committed: bool, now: i64) -> String {
    if attempts.is_empty() {
        return match job.state {
            JobState::Queued if job.run_at > now => format!(
                "not run yet (scheduled in {})",
                format_duration(std::time::Duration::from_millis((job.run_at - now) as u64))
            ),
            JobState::Queued => "not run yet".into(),
            JobState::Waiting => "waiting for its dependencies".into(),
            JobState::Running => "claimed, about to run".into(),
            JobState::Succeeded => "succeeded".into(),
            JobState::Dead => "dead without a run".into(),
            JobState::Cancelled => "cancelled before it ran".into(),
        };
    }
    let n = attempts.len() as i64;
    let only_success = n == 1 && attempts[0].outcome == AttemptOutcome::Succeeded;
    let mut s = if only_success {
        "run once".to_string()
    } else {
        // Outcomes in a fixed order, so the sentence reads the same each time.
        let order = [
            AttemptOutcome::Failed,
            AttemptOutcome::Panicked,
            AttemptOutcome::Abandoned,
            AttemptOutcome::Released,
            AttemptOutcome::Snoozed,
            AttemptOutcome::Cancelled,
            AttemptOutcome::Duplicate,
            AttemptOutcome::Succeeded,
            AttemptOutcome::Running,
        ];
        let breakdown: Vec<String> = order
            .iter()
            .filter_map(|o| {
                let c = attempts.iter().filter(|a| a.outcome == *o).count();
                (c > 0).then(|| format!("{c} {o}"))
            })
            .collect();
        format!("run {} ({})", times(n), breakdown.join(", "))
    };
    let snoozed = attempts.last().map(|a| a.outcome) == Some(AttemptOutcome::Snoozed);
    if job.state == JobState::Queued && snoozed {
        let left = std::time::Duration::from_millis(job.run_at.saturating_sub(now).max(0) as u64);
        s.push_str(&format!(
            ", snoozed: runs again in {}",
            format_duration(left)
        ));
        return s;
    }
    let cancelled_running = attempts.last().map(|a| a.outcome) == Some(AttemptOutcome::Cancelled);
    let tail = match job.state {
        JobState::Succeeded if only_success => "",
        JobState::Succeeded if committed => ", work committed once",
        JobState::Succeeded => ", succeeded",
        JobState::Queued => ", waiting to retry",
        JobState::Waiting => ", waiting for its dependencies",
        JobState::Running => ", running now",
        JobState::Dead => ", dead",
        JobState::Cancelled if cancelled_running => ", cancelled while running",
        JobState::Cancelled => ", cancelled",
    };
    s.push_str(tail);
    s
}

fn outbox_phrase(o: &OutboxEntry) -> String {
    let kind = &o.row.kind;
    let n = (o.attempts.len() as i64).max(o.row.attempts);
    match o.row.state {
        OutboxState::Sent if n <= 1 => format!("{kind} sent once"),
        OutboxState::Sent => format!("{kind} sent after {}", plural(n, "attempt")),
        OutboxState::Pending if n == 0 => format!("{kind} not sent yet"),
        OutboxState::Pending => format!("{kind} not sent yet ({} failed)", plural(n, "attempt")),
        OutboxState::Sending => format!("{kind} being sent now"),
        OutboxState::Dead => format!("{kind} dead after {}, not sent", plural(n, "attempt")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use litejob::OutboxRow;

    fn job(state: JobState, deliveries: i64) -> Job {
        Job {
            id: 1,
            queue: "default".into(),
            kind: "k".into(),
            idempotency_key: "evt".into(),
            payload: "{}".into(),
            state,
            priority: 0,
            run_at: 0,
            attempts: 1,
            max_attempts: 2,
            abandoned: 0,
            deliveries,
            last_error: None,
            created_at: 0,
            finished_at: None,
            lease_owner: None,
            lease_expires_at: None,
            current_attempt: None,
            output: None,
            partition: None,
            timeout_ms: None,
        }
    }

    fn attempt(outcome: AttemptOutcome) -> Attempt {
        Attempt {
            id: 1,
            job_id: Some(1),
            outbox_id: None,
            attempt: 1,
            key: "evt".into(),
            worker: "1/w".into(),
            started_at: 0,
            finished_at: Some(1),
            outcome,
            error: None,
        }
    }

    fn receipt(state: OutboxState, attempts: usize) -> OutboxEntry {
        OutboxEntry {
            row: OutboxRow {
                id: 1,
                key: "receipt:evt".into(),
                kind: "send_receipt".into(),
                payload: "{}".into(),
                state,
                attempts: attempts as i64,
                max_attempts: 2,
                job_id: Some(1),
                next_attempt_at: 0,
                last_error: None,
                created_at: 0,
                sent_at: None,
            },
            attempts: vec![attempt(AttemptOutcome::Succeeded); attempts],
        }
    }

    #[test]
    fn the_sentence_answers_ten_events_or_one_event_ten_times() {
        let ledger = LedgerEntry {
            key: "evt".into(),
            completed_at: 0,
            job_id: Some(1),
        };
        assert_eq!(
            summarize(
                Some(&job(JobState::Succeeded, 10)),
                &[attempt(AttemptOutcome::Succeeded)],
                Some(&ledger),
                &[receipt(OutboxState::Sent, 1)],
                0
            ),
            "1 event, delivered 10 times, run once, send_receipt sent once"
        );
        assert_eq!(
            summarize(
                Some(&job(JobState::Succeeded, 1)),
                &[
                    attempt(AttemptOutcome::Failed),
                    attempt(AttemptOutcome::Succeeded)
                ],
                Some(&ledger),
                &[],
                0
            ),
            "1 event, delivered once, run twice (1 failed, 1 succeeded), work committed once"
        );
        assert_eq!(
            summarize(Some(&job(JobState::Queued, 2)), &[], None, &[], 0),
            "1 event, delivered twice, not run yet"
        );
        assert_eq!(summarize(None, &[], None, &[], 0), "no job has this key");
        assert!(summarize(None, &[], Some(&ledger), &[], 0).contains("pruned"));
        assert_eq!(
            outbox_phrase(&receipt(OutboxState::Dead, 2)),
            "send_receipt dead after 2 attempts, not sent"
        );
    }

    #[test]
    fn a_job_cancelled_while_running_says_so() {
        let cancelled = job(JobState::Cancelled, 1);
        let runs = [
            attempt(AttemptOutcome::Failed),
            attempt(AttemptOutcome::Cancelled),
        ];
        assert_eq!(
            summarize(Some(&cancelled), &runs, None, &[], 0),
            "1 event, delivered once, run twice (1 failed, 1 cancelled), cancelled while running"
        );
    }

    #[test]
    fn a_snoozed_job_says_when_it_runs_again() {
        let mut later = job(JobState::Queued, 1);
        later.run_at = 300_000;
        let snoozed = attempt(AttemptOutcome::Snoozed);
        assert_eq!(
            summarize(Some(&later), &[snoozed.clone(), snoozed], None, &[], 0),
            "1 event, delivered once, run twice (2 snoozed), snoozed: runs again in 5m"
        );
    }
}
