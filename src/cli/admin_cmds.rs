//! `litejob retry`, `cancel`, `stats` and `prune`: repair and inspect the
//! queue. Writes `jobs`, `attempts`, `outbox` and (when asked)
//! `processed_jobs` through the `Queue`'s operator methods.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::ArgGroup;
use litejob::admin::{AnyQueue, JobCounts, OutboxCounts, PruneOptions};
use litejob::JobState;
use serde::Serialize;

use super::{cell, span, CliResult, Out, Table};

/// Rows per write transaction of `litejob prune`, the library's default.
const BATCH: usize = 1000;

/// Flags of `litejob retry`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    group(ArgGroup::new("what").required(true).args(["id", "dead"])),
    after_help = "Examples:\n  \
    litejob retry 42\n  \
    litejob retry --dead --kind payment.succeeded\n\n\
    A retried job starts over: attempts 0, state queued, runnable now."
)]
pub struct RetryArgs {
    /// The dead job to requeue.
    pub id: Option<i64>,
    /// Requeue every dead job.
    #[arg(long, conflicts_with = "id")]
    pub dead: bool,
    /// With --dead: only jobs of this kind.
    #[arg(long, requires = "dead")]
    pub kind: Option<String>,
}

#[derive(Serialize)]
struct Retried {
    retried: usize,
    ids: Vec<i64>,
}

/// `litejob retry ID | --dead [--kind K]`.
pub fn retry(queue: &AnyQueue, a: &RetryArgs, json: bool, out: &mut Out) -> CliResult {
    if let Some(id) = a.id {
        // A job that is not dead is refused by the library, whose error
        // says so (exit 1).
        queue.admin().retry_job(id)?;
        if json {
            return out.json(&Retried {
                retried: 1,
                ids: vec![id],
            });
        }
        return out.line(format!("job {id} requeued"));
    }
    let n = queue.admin().retry_dead_jobs(a.kind.as_deref())?;
    if json {
        return out.json(&Retried {
            retried: n,
            ids: Vec::new(),
        });
    }
    let what = match &a.kind {
        Some(k) => format!(" of kind {}", cell(k)),
        None => String::new(),
    };
    out.line(format!("requeued {n} dead job{}{what}", plural(n)))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Flags of `litejob cancel`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  litejob cancel 42\n\n\
    A waiting, queued or running job can be cancelled; a finished one is refused (exit 1).\n\
    A running job is cancelled at once: its run's attempt ends cancelled and its work can\n\
    no longer commit; the process running it sees the cancel within its poll interval\n\
    (ctx.is_cancelled()). The jobs that depend on it, directly or through others, are\n\
    cancelled with it.")]
pub struct CancelArgs {
    /// The waiting, queued or running job to cancel.
    pub id: i64,
}

#[derive(Serialize)]
struct Cancelled {
    id: i64,
    state: &'static str,
    dependents_cancelled: usize,
}

/// `litejob cancel ID`.
pub fn cancel(queue: &AnyQueue, a: &CancelArgs, json: bool, out: &mut Out) -> CliResult {
    let id = a.id;
    let before = unfinished_dependents(queue, id)?;
    let was = queue.admin().cancel_job(id)?;
    // The library cancels them in the cancel's own transaction; read
    // again to count the ones it took (not those cancelled before).
    let after = unfinished_dependents(queue, id)?;
    let n = before.len() - before.iter().filter(|d| after.contains(d)).count();
    if json {
        return out.json(&Cancelled {
            id,
            state: "cancelled",
            dependents_cancelled: n,
        });
    }
    let running = if was == JobState::Running {
        " while running (its work will not commit; its run stops at its next check)"
    } else {
        ""
    };
    match n {
        0 => out.line(format!("job {id} cancelled{running}")),
        1 => out.line(format!(
            "job {id} cancelled{running}, and 1 job that depends on it"
        )),
        n => out.line(format!(
            "job {id} cancelled{running}, and {n} jobs that depend on it"
        )),
    }
}

/// The ids of the jobs that depend on job `id`, directly or through
/// others, and have not finished (within the workflow the library reads).
fn unfinished_dependents(queue: &AnyQueue, id: i64) -> CliResult<Vec<i64>> {
    let Some(job) = queue.job(id)? else {
        return Ok(Vec::new());
    };
    let Some(w) = queue.admin().workflow(&job.idempotency_key)? else {
        return Ok(Vec::new());
    };
    let mut found = vec![id];
    let mut i = 0;
    while let Some(&at) = found.get(i) {
        for &(job, dep) in &w.edges {
            if dep == at && !found.contains(&job) {
                found.push(job);
            }
        }
        i += 1;
    }
    // A job with an unfinished dependency is waiting, nothing else.
    let open = |j: &i64| {
        w.jobs
            .iter()
            .any(|l| l.id == *j && l.state == JobState::Waiting)
    };
    Ok(found.into_iter().skip(1).filter(open).collect())
}

/// Flags of `litejob stats`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  litejob stats\n  litejob stats --json")]
pub struct StatsArgs {}

/// `litejob stats`.
pub fn stats(queue: &AnyQueue, _a: &StatsArgs, json: bool, out: &mut Out) -> CliResult {
    let s = queue.admin().stats()?;
    if json {
        return out.json(&s);
    }
    let mut t = Table::new(&["file", &cell(&s.path.display().to_string())]);
    t.row(vec![
        "size".into(),
        format!(
            "{}, WAL {}, schema version {}",
            bytes(s.file_bytes),
            bytes(s.wal_bytes),
            s.schema_version
        ),
    ]);
    let j = &s.jobs;
    t.row(vec![
        "jobs".into(),
        format!(
            "{} in all: {} waiting, {} queued, {} running, {} succeeded, {} dead, {} cancelled",
            j.total, j.waiting, j.queued, j.running, j.succeeded, j.dead, j.cancelled
        ),
    ]);
    t.row(vec![
        "backlog".into(),
        match s.oldest_queued_age_ms {
            None => "empty".into(),
            Some(age) => format!(
                "{} queued, {} due now; oldest queued {} ago{}",
                j.queued,
                s.queued_due,
                span(Some(age)),
                s.oldest_due_wait_ms.map_or(String::new(), |w| format!(
                    ", longest due wait {}",
                    span(Some(w))
                ))
            ),
        },
    ]);
    let o = &s.outbox;
    t.row(vec![
        "outbox".into(),
        format!(
            "{} in all: {} pending, {} sending, {} sent, {} dead",
            o.total, o.pending, o.sending, o.sent, o.dead
        ),
    ]);
    t.row(vec![
        "ledger".into(),
        format!("{} keys whose work committed", s.ledger_rows),
    ]);
    t.row(vec![
        "schedules".into(),
        format!("{} (litejob schedules lists them)", s.schedules),
    ]);
    t.row(vec![
        "controls".into(),
        if s.queue_controls.is_empty() {
            "none: every queue runs freely".into()
        } else {
            s.queue_controls
                .iter()
                .map(|q| format!("{} {}", cell(&q.name), super::queues::describe(q)))
                .collect::<Vec<_>>()
                .join(", ")
        },
    ]);
    out.table(&t)?;
    job_counts("by kind", "KIND", &s.by_kind, out)?;
    job_counts("by queue", "QUEUE", &s.by_queue, out)?;
    outbox_counts(&s.outbox_by_kind, out)
}

fn job_counts(title: &str, col: &str, m: &BTreeMap<String, JobCounts>, out: &mut Out) -> CliResult {
    if m.is_empty() {
        return Ok(());
    }
    out.line("")?;
    out.line(format!("jobs {title}:"))?;
    let mut t = Table::new(&[
        "TOTAL",
        "WAITING",
        "QUEUED",
        "RUNNING",
        "SUCCEEDED",
        "DEAD",
        "CANCELLED",
        col,
    ])
    .indent(2);
    for (name, c) in m {
        t.row(vec![
            c.total.to_string(),
            c.waiting.to_string(),
            c.queued.to_string(),
            c.running.to_string(),
            c.succeeded.to_string(),
            c.dead.to_string(),
            c.cancelled.to_string(),
            cell(name),
        ]);
    }
    out.table(&t)
}

fn outbox_counts(m: &BTreeMap<String, OutboxCounts>, out: &mut Out) -> CliResult {
    if m.is_empty() {
        return Ok(());
    }
    out.line("")?;
    out.line("outbox by kind:")?;
    let mut t = Table::new(&["TOTAL", "PENDING", "SENDING", "SENT", "DEAD", "KIND"]).indent(2);
    for (name, c) in m {
        t.row(vec![
            c.total.to_string(),
            c.pending.to_string(),
            c.sending.to_string(),
            c.sent.to_string(),
            c.dead.to_string(),
            cell(name),
        ]);
    }
    out.table(&t)
}

fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else if f < KIB * KIB * KIB {
        format!("{:.1} MiB", f / (KIB * KIB))
    } else {
        format!("{:.1} GiB", f / (KIB * KIB * KIB))
    }
}

/// Flags of `litejob prune`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob prune --older-than 7d\n  \
    litejob prune --older-than 30d --ledger-older-than 90d\n\n\
    Deletes succeeded, dead and cancelled jobs finished more than DUR ago, with their\n\
    attempts, and outbox rows sent more than DUR ago, 1000 rows per transaction.\n\
    The ledger (processed_jobs) is kept, so a re-delivered key stays a duplicate,\n\
    unless --ledger-older-than is given.")]
pub struct PruneArgs {
    /// Age of the finished history to delete (`12h`, `7d`, `0s` for all).
    #[arg(long, value_name = "DUR", value_parser = super::time::parse_duration)]
    pub older_than: Duration,
    /// Also delete ledger rows older than this (re-enqueueing such a key
    /// creates a new job).
    #[arg(long, value_name = "DUR", value_parser = super::time::parse_duration)]
    pub ledger_older_than: Option<Duration>,
    /// Rows per write transaction.
    #[arg(long, default_value_t = BATCH, hide = true)]
    pub batch: usize,
}

/// `litejob prune`.
pub fn prune(queue: &AnyQueue, a: &PruneArgs, json: bool, out: &mut Out) -> CliResult {
    let r = queue.admin().prune(
        &PruneOptions::new(a.older_than)
            .with_ledger_older_than(a.ledger_older_than)
            .with_batch(a.batch),
    )?;
    if json {
        return out.json(&r);
    }
    out.line(format!(
        "pruned {} jobs ({} attempts), {} sent outbox rows ({} attempts), {} ledger rows{}",
        r.jobs,
        r.job_attempts,
        r.outbox,
        r.outbox_attempts,
        r.ledger,
        if a.ledger_older_than.is_none() {
            " (ledger kept)"
        } else {
            ""
        }
    ))
}
