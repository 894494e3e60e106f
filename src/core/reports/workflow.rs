//! A workflow as an operator reads it: the jobs around one job, linked by
//! their dependencies ([`Workflow`]), each with its state, and the columns
//! a drawing puts them in. Writes no table.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::core::job::JobState;

/// A job as a workflow names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Linked {
    /// Job id.
    pub id: i64,
    /// Its idempotency key.
    pub key: String,
    /// Its kind.
    pub kind: String,
    /// Its state.
    pub state: JobState,
}

/// The jobs connected to one job through dependencies, in either
/// direction, transitively ([`Admin::workflow`](crate::admin::Admin::workflow)).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Workflow {
    /// The job asked about.
    pub job_id: i64,
    /// Every job of the graph (the one asked about included), by id.
    pub jobs: Vec<Linked>,
    /// Its edges: `(job, depends_on)`.
    pub edges: Vec<(i64, i64)>,
    /// The graph is larger than the limit read: `jobs` holds its first
    /// part around the job.
    pub truncated: bool,
}

impl Workflow {
    /// The most jobs [`Admin::workflow`](crate::admin::Admin::workflow)
    /// reads around one job; past it the graph is `truncated`.
    pub const LIMIT: usize = 500;

    /// The jobs by column, left to right: a job with no dependency in the
    /// graph in column 0, any other one column right of its furthest
    /// dependency; each column by id.
    pub fn columns(&self) -> Vec<Vec<&Linked>> {
        let deps: HashMap<i64, Vec<i64>> =
            self.edges.iter().fold(HashMap::new(), |mut m, &(j, d)| {
                m.entry(j).or_default().push(d);
                m
            });
        let mut depth: HashMap<i64, usize> = HashMap::new();
        // Longest path from a root, by relaxation: at most one pass per
        // job (the graph has no cycle: enqueue refuses them).
        for _ in 0..self.jobs.len().max(1) {
            let mut changed = false;
            for j in &self.jobs {
                let d = deps
                    .get(&j.id)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| depth.get(p).map(|x| x + 1))
                    .max()
                    .unwrap_or(0);
                if depth.get(&j.id) != Some(&d) {
                    depth.insert(j.id, d);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut cols: BTreeMap<usize, Vec<&Linked>> = BTreeMap::new();
        for j in &self.jobs {
            cols.entry(depth.get(&j.id).copied().unwrap_or(0))
                .or_default()
                .push(j);
        }
        cols.into_values()
            .map(|mut c| {
                c.sort_by_key(|j| j.id);
                c
            })
            .collect()
    }
}

/// At most `limit` of the `found` jobs (up to one more than the limit,
/// the nearest to job `id`), the job itself always among them, by id;
/// and whether any was left out.
pub(crate) fn trim(mut found: Vec<Linked>, id: i64, limit: usize) -> (Vec<Linked>, bool) {
    if found.len() <= limit {
        found.sort_by_key(|j| j.id);
        return (found, false);
    }
    let asked = found
        .iter()
        .position(|j| j.id == id)
        .map(|p| found.remove(p));
    found.truncate(limit.saturating_sub(usize::from(asked.is_some())));
    found.extend(asked);
    found.sort_by_key(|j| j.id);
    (found, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64) -> Linked {
        Linked {
            id,
            key: format!("k{id}"),
            kind: "k".into(),
            state: JobState::Waiting,
        }
    }

    #[test]
    fn a_fan_out_and_fan_in_draws_in_three_columns() {
        let w = Workflow {
            job_id: 1,
            jobs: vec![job(4), job(1), job(2), job(3)],
            edges: vec![(2, 1), (3, 1), (4, 2), (4, 3)],
            truncated: false,
        };
        let ids: Vec<Vec<i64>> = w
            .columns()
            .iter()
            .map(|c| c.iter().map(|j| j.id).collect())
            .collect();
        assert_eq!(ids, vec![vec![1], vec![2, 3], vec![4]]);
    }
}
