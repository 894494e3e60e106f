//! Workflows' decisions, engine-free: the order a batch's jobs go in so
//! each dependency is there before its dependents (a cycle refused), the
//! state a dependent starts in, and what a cancelled dependent's
//! `last_error` says. Writes no table (each engine's `workflow` module
//! writes `jobs` and `job_dependencies`).

use std::collections::HashMap;

use crate::core::job::JobState;
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::error::{Error, Result};

/// The order to insert a batch in: every job after the batch's jobs it
/// depends on, otherwise as given. A key that is twice in the batch counts
/// as its first job (the second is a delivery of it). A cycle among the
/// batch's jobs is refused, naming its keys.
pub(crate) fn batch_order(jobs: &[ValidJob]) -> Result<Vec<usize>> {
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        first.entry(j.key.as_str()).or_insert(i);
    }
    // Depth-first, iteratively (a chain of thousands must not overflow the
    // stack): 0 unvisited, 1 on the path, 2 placed.
    let mut mark = vec![0u8; jobs.len()];
    let mut order = Vec::with_capacity(jobs.len());
    for root in 0..jobs.len() {
        if mark[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = 1;
        while let Some(top) = stack.len().checked_sub(1) {
            let (at, next) = stack[top];
            let deps = &jobs[at].depends_on;
            if next < deps.len() {
                let dep = deps[next].as_str();
                stack[top].1 += 1;
                let Some(&d) = first.get(dep) else { continue };
                match mark[d] {
                    0 => {
                        mark[d] = 1;
                        stack.push((d, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|&(i, _)| i == d).unwrap_or(0);
                        let mut keys: Vec<&str> = stack[from..]
                            .iter()
                            .map(|&(i, _)| jobs[i].key.as_str())
                            .collect();
                        keys.push(dep);
                        return Err(Error::invalid(format!(
                            "the batch's dependencies make a cycle: {}; nothing was enqueued",
                            keys.iter()
                                .map(|k| format!("{k:?}"))
                                .collect::<Vec<_>>()
                                .join(" needs ")
                        )));
                    }
                    _ => {}
                }
            } else {
                mark[at] = 2;
                order.push(at);
                stack.pop();
            }
        }
    }
    Ok(order)
}

/// How a new job with dependencies starts, from its dependencies' states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Every dependency succeeded already: it can run.
    Queued,
    /// Some have not finished: it waits for them.
    Waiting,
    /// One ended without success: it never runs, with this reason.
    Cancelled(String),
}

impl Start {
    /// The new job's row as it starts at `now`: its state, `finished_at`
    /// (a cancelled job is finished) and `last_error` (why it was
    /// cancelled).
    pub(crate) fn columns(self, now: Millis) -> (JobState, Option<Millis>, Option<String>) {
        match self {
            Start::Queued => (JobState::Queued, None, None),
            Start::Waiting => (JobState::Waiting, None, None),
            Start::Cancelled(why) => (JobState::Cancelled, Some(now), Some(why)),
        }
    }
}

/// The start of a job whose dependencies are `deps` (key, job id, state).
pub(crate) fn start(deps: &[(String, i64, JobState)]) -> Start {
    if let Some((key, id, state)) = deps
        .iter()
        .find(|(_, _, s)| matches!(s, JobState::Dead | JobState::Cancelled))
    {
        return Start::Cancelled(cancelled_by(key, *id, *state));
    }
    if deps.iter().all(|(_, _, s)| *s == JobState::Succeeded) {
        Start::Queued
    } else {
        Start::Waiting
    }
}

/// The `last_error` of a job cancelled because a job it depends on
/// (directly or through others) ended `state`.
pub(crate) fn cancelled_by(key: &str, id: i64, state: JobState) -> String {
    format!("cancelled: its dependency {key:?} (job {id}) ended {state}")
}

/// A dependency's output decoded as the dependent asks.
pub(crate) fn decode_output<T: serde::de::DeserializeOwned>(key: &str, json: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| {
        Error::invalid(format!(
            "the output of dependency {key:?} does not decode as the type asked for: {e}"
        ))
    })
}

/// The refusal of a dependency key no job has.
pub(crate) fn missing(job_key: &str, dep: &str) -> Error {
    Error::invalid(format!(
        "job {job_key:?} depends on {dep:?}, which is no job's key (enqueue it first, or in \
         the same batch); nothing was enqueued"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: &str, deps: &[&str]) -> ValidJob {
        ValidJob {
            kind: "k".into(),
            key: key.into(),
            payload: "{}".into(),
            queue: "default".into(),
            priority: 0,
            run_at: 0,
            max_attempts: 2,
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            partition: None,
            timeout_ms: None,
        }
    }

    #[test]
    fn a_new_dependent_waits_runs_or_is_cancelled_as_its_dependencies_ended() {
        let dep = |state| {
            vec![
                ("a".to_string(), 7, JobState::Succeeded),
                ("b".into(), 8, state),
            ]
        };
        assert_eq!(
            start(&dep(JobState::Succeeded)).columns(5),
            (JobState::Queued, None, None)
        );
        assert_eq!(
            start(&dep(JobState::Running)).columns(5),
            (JobState::Waiting, None, None)
        );
        assert_eq!(
            start(&dep(JobState::Dead)).columns(5),
            (
                JobState::Cancelled,
                Some(5),
                Some(r#"cancelled: its dependency "b" (job 8) ended dead"#.into())
            )
        );
    }

    #[test]
    fn a_batch_goes_in_with_each_dependency_before_its_dependents() {
        let jobs = [
            job("merge", &["a", "b"]),
            job("a", &[]),
            job("mail", &["merge"]),
            job("b", &["a"]),
        ];
        let order = batch_order(&jobs).unwrap();
        let pos = |k: &str| order.iter().position(|&i| jobs[i].key == k).unwrap();
        assert_eq!(order.len(), 4);
        assert!(pos("a") < pos("b") && pos("b") < pos("merge") && pos("merge") < pos("mail"));
    }

    #[test]
    fn a_cycle_in_a_batch_is_refused_naming_its_keys() {
        let jobs = [job("x", &["z"]), job("y", &["x"]), job("z", &["y"])];
        let e = batch_order(&jobs).unwrap_err().to_string();
        assert!(e.contains("cycle"), "{e}");
        for k in ["\"x\"", "\"y\"", "\"z\""] {
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn a_long_chain_is_ordered_without_recursion() {
        let keys: Vec<String> = (0..50_000).map(|i| format!("k{i}")).collect();
        let jobs: Vec<ValidJob> = (0..50_000)
            .rev()
            .map(|i| {
                let deps: Vec<&str> = if i > 0 { vec![&keys[i - 1]] } else { vec![] };
                job(&keys[i], &deps)
            })
            .collect();
        let order = batch_order(&jobs).unwrap();
        assert_eq!(jobs[order[0]].key, "k0");
        assert_eq!(jobs[order[49_999]].key, "k49999");
    }

    #[test]
    fn a_dependent_starts_cancelled_queued_or_waiting_by_its_dependencies() {
        let dep = |s| ("a".to_string(), 1, s);
        assert_eq!(start(&[dep(JobState::Succeeded)]), Start::Queued);
        assert_eq!(
            start(&[dep(JobState::Succeeded), dep(JobState::Running)]),
            Start::Waiting
        );
        assert_eq!(
            start(&[dep(JobState::Queued), dep(JobState::Dead)]),
            Start::Cancelled("cancelled: its dependency \"a\" (job 1) ended dead".into())
        );
    }
}
