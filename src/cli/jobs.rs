//! `litejob jobs` and `litejob show`: list jobs, and one job with its
//! attempts and outbox rows. Reads only; writes no table.

use std::io::Write;

use litejob::admin::{AnyQueue, EngineKind, JobDetail, Linked, OutboxEntry};
use litejob::{Attempt, Job, JobFilter, JobState};
use serde::Serialize;

use super::time::exact_duration;
use super::{cell, cell_cut, span, when, CliError, CliResult, Out, Table};

/// Flags of `litejob jobs`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob jobs --state dead\n  \
    litejob jobs --kind payment.succeeded --limit 20 --json\n  \
    litejob jobs --limit 20 --after 4711\n\n\
    A full page says on stderr how many jobs match and the --after of the next page.")]
pub struct JobsArgs {
    /// Only jobs in this state: waiting, queued, running, succeeded, dead,
    /// cancelled.
    #[arg(long, value_parser = super::parse_job_state)]
    pub state: Option<JobState>,
    /// Only jobs of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs in this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Only the jobs listed after job ID (older ones): the next page after
    /// a page that ends with it.
    #[arg(long, value_name = "ID")]
    pub after: Option<i64>,
}

#[derive(Serialize)]
struct JobList<'a> {
    jobs: &'a [Job],
}

/// `litejob jobs`.
pub fn jobs(queue: &AnyQueue, a: &JobsArgs, json: bool, out: &mut Out) -> CliResult {
    let mut filter = JobFilter::default().with_state(a.state).with_limit(a.limit);
    if let Some(kind) = &a.kind {
        filter = filter.with_kind(kind);
    }
    if let Some(q) = &a.queue {
        filter = filter.with_queue(q);
    }
    if let Some(id) = a.after {
        filter = filter.with_before(id);
    }
    let list = queue.jobs(&filter)?;
    if json {
        out.json(&JobList { jobs: &list })?;
    } else {
        print_jobs(&list, out)?;
    }
    // A full page may hide more: say so, on stderr (stdout stays the list
    // or the one JSON document), after the list.
    match list.last() {
        Some(last) if list.len() == a.limit as usize => {
            let (total, more) = count(queue, a, last.id)?;
            if more > 0 {
                out.flush()?;
                let _ = writeln!(
                    std::io::stderr(),
                    "{} of {} jobs shown, {} more after these (--limit N, or --after {} for \
                     the next page)",
                    thousands(list.len() as i64),
                    thousands(total),
                    thousands(more),
                    last.id
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// How many jobs the filters match (without `--after`), and how many of
/// them the list has after job `last`: one statement, so one snapshot.
fn count(queue: &AnyQueue, a: &JobsArgs, last: i64) -> CliResult<(i64, i64)> {
    let state = a.state.map(|s| s.as_str());
    let filters = [
        ("state", state),
        ("kind", a.kind.as_deref()),
        ("queue", a.queue.as_deref()),
    ];
    let postgres = queue.engine() == EngineKind::Postgres;
    // Only the filters given, so the statement is the plainest the
    // planner can get; `last` is the first parameter.
    let mut sql = if postgres {
        "SELECT count(*), count(*) FILTER (WHERE id < $1) FROM jobs WHERE true".to_string()
    } else {
        "SELECT count(*), coalesce(sum(id < ?1), 0) FROM jobs WHERE 1".to_string()
    };
    let mut values: Vec<&str> = Vec::new();
    for (column, value) in filters {
        if let Some(v) = value {
            values.push(v);
            let n = values.len() + 1;
            sql.push_str(&if postgres {
                format!(" AND {column} = ${n}")
            } else {
                format!(" AND {column} = ?{n}")
            });
        }
    }
    match queue {
        AnyQueue::Postgres(q) => {
            let mut params: Vec<&(dyn litejob::pg::types::ToSql + Sync)> = vec![&last];
            params.extend(
                values
                    .iter()
                    .map(|v| v as &(dyn litejob::pg::types::ToSql + Sync)),
            );
            Ok(q.read(|c| {
                let row = c.query_one(&sql, &params)?;
                Ok((row.try_get(0)?, row.try_get(1)?))
            })?)
        }
        AnyQueue::Sqlite(q) => {
            let mut params: Vec<&dyn litejob::rusqlite::ToSql> = vec![&last];
            params.extend(values.iter().map(|v| v as &dyn litejob::rusqlite::ToSql));
            Ok(q.read(|c| {
                Ok(c.query_row(&sql, params.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?)
            })?)
        }
        _ => Err(CliError::Failed(
            "an engine this command does not know".into(),
        )),
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

fn print_jobs(list: &[Job], out: &mut Out) -> CliResult {
    let mut t = Table::new(&[
        "ID", "STATE", "KIND", "QUEUE", "PRI", "ATTEMPTS", "DELIV", "CREATED", "RUN_AT", "KEY",
    ]);
    for j in list {
        t.row(vec![
            j.id.to_string(),
            j.state.to_string(),
            cell_cut(&j.kind, 32),
            cell_cut(&j.queue, 16),
            j.priority.to_string(),
            format!("{}/{}", j.attempts, j.max_attempts),
            j.deliveries.to_string(),
            when(Some(j.created_at)),
            match j.state {
                JobState::Queued | JobState::Running => when(Some(j.run_at)),
                _ => "-".into(),
            },
            cell(&j.idempotency_key),
        ]);
    }
    if t.is_empty() {
        return out.line("no jobs");
    }
    out.table(&t)
}

/// Flags of `litejob show`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  litejob show 42\n  litejob show 42 --json")]
pub struct ShowArgs {
    /// The job id.
    pub id: i64,
}

/// The `--json` document: the library's detail, and the dependencies a
/// waiting job still waits for.
#[derive(Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    detail: &'a JobDetail,
    waiting_on: Vec<&'a Linked>,
}

/// `litejob show ID`.
pub fn show(queue: &AnyQueue, a: &ShowArgs, json: bool, out: &mut Out) -> CliResult {
    let id = a.id;
    let detail = queue
        .admin()
        .job_detail(id)?
        .ok_or_else(|| CliError::Failed(format!("no job with id {id}")))?;
    if json {
        return out.json(&Shown {
            detail: &detail,
            waiting_on: super::workflow::waiting_on(&detail.job, &detail.dependencies),
        });
    }
    print_detail(&detail, out)
}

/// The human form of a job with its dependencies, attempts and outbox
/// rows.
pub fn print_detail(d: &JobDetail, out: &mut Out) -> CliResult {
    print_job(&d.job, &d.dependencies, &d.dependents, out)?;
    out.line("")?;
    print_attempts(&format!("attempts of job {}", d.job.id), &d.attempts, out)?;
    print_steps(&d.steps, out)?;
    print_outbox(&d.outbox, out)
}

/// A job's durable steps, one line each ("step charge recorded in attempt
/// 1, reused in attempt 2") with when, how long and the result; nothing
/// for a job without steps.
pub fn print_steps(steps: &[litejob::JobStep], out: &mut Out) -> CliResult {
    if steps.is_empty() {
        return Ok(());
    }
    out.line("")?;
    out.line("steps:")?;
    for s in steps {
        out.line(format!(
            "  {}: at {}, took {}, result {}",
            cell(&s.summary()),
            when(Some(s.started_at)),
            span(Some(s.finished_at - s.started_at)),
            cell_cut(&s.output, 200)
        ))?;
    }
    Ok(())
}

fn print_job(j: &Job, dependencies: &[Linked], dependents: &[Linked], out: &mut Out) -> CliResult {
    let mut t = Table::new(&["job", &j.id.to_string()]);
    let mut field = |k: &str, v: String| t.row(vec![k.to_string(), v]);
    field("key", cell(&j.idempotency_key));
    field("kind", cell(&j.kind));
    field("queue", cell(&j.queue));
    if let Some(p) = &j.partition {
        field("partition", cell(p));
    }
    if let Some(ms) = j.timeout_ms {
        field("timeout", exact_duration(ms));
    }
    field("state", j.state.to_string());
    field("priority", j.priority.to_string());
    field(
        "attempts",
        format!(
            "{} of {} charged, {} abandoned",
            j.attempts, j.max_attempts, j.abandoned
        ),
    );
    field("deliveries", j.deliveries.to_string());
    field("created", when(Some(j.created_at)));
    field("run at", when(Some(j.run_at)));
    field("finished", when(j.finished_at));
    if let Some(owner) = &j.lease_owner {
        field(
            "lease",
            format!("{} until {}", cell(owner), when(j.lease_expires_at)),
        );
    }
    field(
        "last error",
        j.last_error.as_deref().map_or("-".into(), cell),
    );
    field("payload", cell_cut(&j.payload, 200));
    field(
        "output",
        j.output.as_deref().map_or("-".into(), |o| cell_cut(o, 200)),
    );
    for row in super::workflow::link_rows(j, dependencies, dependents) {
        t.row(row);
    }
    out.table(&t)
}

/// An attempt table under a title, or a line saying there is none.
pub fn print_attempts(title: &str, attempts: &[Attempt], out: &mut Out) -> CliResult {
    if attempts.is_empty() {
        return out.line(format!("{title}: none"));
    }
    out.line(format!("{title}:"))?;
    let indent = title.len() - title.trim_start().len() + 2;
    let mut t = Table::new(&["#", "STARTED", "TOOK", "OUTCOME", "WORKER", "ERROR"]).indent(indent);
    for a in attempts {
        t.row(vec![
            a.attempt.to_string(),
            when(Some(a.started_at)),
            span(a.finished_at.map(|f| f - a.started_at)),
            a.outcome.to_string(),
            cell(&a.worker),
            a.error.as_deref().map_or("-".into(), |e| cell_cut(e, 200)),
        ]);
    }
    out.table(&t)
}

/// The outbox rows a job wrote, each followed by its attempts.
pub fn print_outbox(rows: &[OutboxEntry], out: &mut Out) -> CliResult {
    if rows.is_empty() {
        return out.line("outbox rows: none");
    }
    for o in rows {
        let r = &o.row;
        out.line("")?;
        out.line(format!(
            "outbox {}: {} {} ({} of {} attempts), key {}, created {}, sent {}",
            r.id,
            cell(&r.kind),
            r.state,
            r.attempts,
            r.max_attempts,
            cell(&r.key),
            when(Some(r.created_at)),
            when(r.sent_at),
        ))?;
        if let Some(e) = &r.last_error {
            out.line(format!("  last error: {}", cell_cut(e, 200)))?;
        }
        print_attempts(&format!("  attempts of outbox {}", r.id), &o.attempts, out)?;
    }
    Ok(())
}
