//! `litejob workflow KEY`: the graph of jobs around one job, linked by
//! their dependencies, each with its state; and the dependency lines `show`
//! and `explain` print (what a job depends on, what it still waits on,
//! what depends on it). Reads only; writes no table.

use std::collections::HashMap;

use litejob::admin::{AnyQueue, Linked, Workflow};
use litejob::{Job, JobState};
use serde::Serialize;

use super::{cell, cell_cut, CliError, CliResult, Out, Table};

/// Flags of `litejob workflow`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob workflow report-7:merge\n  \
    litejob workflow report-7:merge --json\n\n\
    One row per job of the graph, by level: a job with no dependency in the graph\n\
    is at level 0, any other one level right of its furthest dependency. NEEDS lists\n\
    the ids of the jobs it depends on; > marks the job asked about.")]
pub struct WorkflowArgs {
    /// The idempotency key of any job of the workflow.
    pub key: String,
}

/// A job of the `--json` document.
#[derive(Serialize)]
struct Node<'a> {
    #[serde(flatten)]
    job: &'a Linked,
    level: usize,
}

/// An edge of the `--json` document: `job` runs after `depends_on`.
#[derive(Serialize)]
struct Edge {
    job: i64,
    depends_on: i64,
}

/// The `--json` document.
#[derive(Serialize)]
struct Graph<'a> {
    key: &'a str,
    job_id: i64,
    jobs: Vec<Node<'a>>,
    edges: Vec<Edge>,
    truncated: bool,
}

/// `litejob workflow KEY`. A key no job has is a failure (exit 1), as an
/// unknown id is for `show`: there is no graph to print.
pub fn workflow(queue: &AnyQueue, a: &WorkflowArgs, json: bool, out: &mut Out) -> CliResult {
    let w = queue
        .admin()
        .workflow(&a.key)?
        .ok_or_else(|| CliError::Failed(format!("no job has the key {:?}", a.key)))?;
    let columns = w.columns();
    if json {
        let jobs = columns
            .iter()
            .enumerate()
            .flat_map(|(level, c)| c.iter().map(move |j| Node { job: j, level }))
            .collect();
        return out.json(&Graph {
            key: &a.key,
            job_id: w.job_id,
            jobs,
            edges: w
                .edges
                .iter()
                .map(|&(job, depends_on)| Edge { job, depends_on })
                .collect(),
            truncated: w.truncated,
        });
    }
    print_graph(&w, &columns, out)
}

fn print_graph(w: &Workflow, columns: &[Vec<&Linked>], out: &mut Out) -> CliResult {
    let asked = w.jobs.iter().find(|j| j.id == w.job_id);
    let name = asked.map_or(String::new(), |j| format!(" ({})", cell(&j.key)));
    if w.edges.is_empty() {
        out.line(format!(
            "job {}{name} has no dependencies and no dependents: a workflow of one",
            w.job_id
        ))?;
    } else {
        let links = match w.edges.len() {
            1 => "1 dependency".to_string(),
            n => format!("{n} dependencies"),
        };
        out.line(format!(
            "{} jobs linked by {links} around job {}{name}, marked >",
            w.jobs.len(),
            w.job_id
        ))?;
    }
    out.line("")?;
    let mut needs: HashMap<i64, Vec<i64>> = HashMap::new();
    for &(job, dep) in &w.edges {
        needs.entry(job).or_default().push(dep);
    }
    let mut t = Table::new(&["", "LEVEL", "ID", "STATE", "KIND", "NEEDS", "KEY"]);
    for (level, column) in columns.iter().enumerate() {
        for j in column {
            let mut deps = needs.remove(&j.id).unwrap_or_default();
            deps.sort_unstable();
            let deps: Vec<String> = deps.iter().map(i64::to_string).collect();
            t.row(vec![
                if j.id == w.job_id { ">" } else { "" }.into(),
                level.to_string(),
                j.id.to_string(),
                j.state.to_string(),
                cell_cut(&j.kind, 32),
                if deps.is_empty() {
                    "-".into()
                } else {
                    cell_cut(&deps.join(","), 40)
                },
                cell(&j.key),
            ]);
        }
    }
    out.table(&t)?;
    if w.truncated {
        out.line("")?;
        out.line(format!(
            "truncated: the workflow has more than {} jobs; these are the \
             nearest to job {}",
            Workflow::LIMIT,
            w.job_id
        ))?;
    }
    Ok(())
}

/// Links listed by name before the rest are counted.
const LISTED: usize = 5;

/// The dependencies of `job` it still waits for: none unless it is
/// `waiting`, else those that have not succeeded.
pub fn waiting_on<'a>(job: &Job, dependencies: &'a [Linked]) -> Vec<&'a Linked> {
    if job.state != JobState::Waiting {
        return Vec::new();
    }
    dependencies
        .iter()
        .filter(|d| d.state != JobState::Succeeded)
        .collect()
}

/// `"b" (job 2, running)`.
pub fn describe(l: &Linked) -> String {
    format!("{:?} (job {}, {})", l.key, l.id, l.state)
}

/// The first few links by name, then how many more: `"a" (job 1,
/// succeeded), "b" (job 2, running)`, or `…, and 7 more`.
pub fn list(links: &[&Linked], more_hint: &str) -> String {
    let named: Vec<String> = links.iter().take(LISTED).map(|l| describe(l)).collect();
    let mut s = named.join(", ");
    if links.len() > LISTED {
        s.push_str(&format!(", and {} more{more_hint}", links.len() - LISTED));
    }
    s
}

/// The rows `show` and `explain` add to a job's table: what it depends
/// on, what it still waits on, what depends on it. None for a job outside
/// any workflow.
pub fn link_rows(job: &Job, dependencies: &[Linked], dependents: &[Linked]) -> Vec<Vec<String>> {
    let hint = format!(" (litejob workflow {})", cell(&job.idempotency_key));
    let mut rows = Vec::new();
    if !dependencies.is_empty() {
        let all: Vec<&Linked> = dependencies.iter().collect();
        rows.push(vec![
            "depends on".into(),
            format!("{}: {}", all.len(), list(&all, &hint)),
        ]);
    }
    let waiting = waiting_on(job, dependencies);
    if !waiting.is_empty() {
        rows.push(vec!["waiting on".into(), list(&waiting, &hint)]);
    }
    if !dependents.is_empty() {
        let all: Vec<&Linked> = dependents.iter().collect();
        // The library reads the first thousand dependents only.
        let count = if all.len() >= 1000 {
            format!("{}+", all.len())
        } else {
            all.len().to_string()
        };
        rows.push(vec![
            "dependents".into(),
            format!("{count}: {}", list(&all, &hint)),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linked(id: i64, state: JobState) -> Linked {
        Linked {
            id,
            key: format!("k{id}"),
            kind: "k".into(),
            state,
        }
    }

    #[test]
    fn a_long_list_names_the_first_few_and_counts_the_rest() {
        let links: Vec<Linked> = (1..=8).map(|i| linked(i, JobState::Queued)).collect();
        let refs: Vec<&Linked> = links.iter().collect();
        let s = list(&refs, " (see more)");
        assert!(s.starts_with("\"k1\" (job 1, queued), \"k2\""), "{s}");
        assert!(
            s.ends_with("\"k5\" (job 5, queued), and 3 more (see more)"),
            "{s}"
        );
        assert_eq!(list(&refs[..1], "!"), "\"k1\" (job 1, queued)");
    }
}
