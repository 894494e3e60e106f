//! Durable steps, decided once for both engines: what `ctx.step(name, ..)`
//! does (a recorded step's value back without its call, an unrecorded one
//! called and recorded before its value is handed on), which names are
//! allowed, the cap on a result, and the row a step is read back as
//! ([`JobStep`]). The engines only store and read rows (`job_steps`,
//! through [`StepLog`]). Writes no table.

use crate::core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::core::handler::{HandlerError, JobContext};
use crate::core::time::Millis;
use crate::error::{Error, Result};

/// The longest step name, in bytes (the table's CHECK says the same).
pub(crate) const MAX_STEP_NAME_BYTES: usize = 200;

/// One durable step of a job, as `job_steps` holds it: what `explain`,
/// `show`, `--json` and the job page list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobStep {
    /// The step's name, as the handler called `ctx.step(name, ..)`.
    pub name: String,
    /// The charged attempt (1-based) whose call of the step was recorded.
    pub attempt: i64,
    /// The step's result, as JSON text.
    pub output: String,
    /// When the call began (ms since the Unix epoch).
    pub started_at: Millis,
    /// When its result was recorded.
    pub finished_at: Millis,
    /// The later attempts that got the recorded result back instead of
    /// calling the step, oldest first.
    pub reused_in: Vec<i64>,
}

impl JobStep {
    /// "step charge recorded in attempt 1, reused in attempt 2": whether a
    /// step's call was repeated, in one line.
    pub fn summary(&self) -> String {
        let mut s = format!("step {} recorded in attempt {}", self.name, self.attempt);
        match self.reused_in.as_slice() {
            [] => s.push_str(", not reused"),
            [one] => s.push_str(&format!(", reused in attempt {one}")),
            many => {
                let list: Vec<String> = many.iter().map(|a| a.to_string()).collect();
                s.push_str(&format!(", reused in attempts {}", list.join(", ")));
            }
        }
        s
    }
}

/// A step's result to record, fenced on its run.
pub(crate) struct StepRecord<'a> {
    pub job_id: i64,
    /// The run's `attempts.id`: the record commits only while the job is
    /// still running on it (`jobs.current_attempt`).
    pub run_id: i64,
    pub name: &'a str,
    pub attempt: i64,
    pub output: &'a str,
    pub started_at: Millis,
    pub finished_at: Millis,
}

/// What a run's steps need of its engine: read a job's recorded steps,
/// record one durably, mark some as reused. Each engine's store implements
/// it (`job_steps` is the only table it writes).
pub(crate) trait StepLog: Send + Sync {
    /// The clock a step's times are read from.
    fn now(&self) -> Millis;
    /// The job's recorded steps.
    fn recorded(&self, job_id: i64) -> Result<Vec<JobStep>>;
    /// Records a step's result and commits it durably; false when the run
    /// no longer holds its job (nothing was written).
    fn record(&self, step: &StepRecord<'_>) -> Result<bool>;
    /// Appends `attempt` to the `reused_in` of the named steps.
    fn mark_reused(&self, job_id: i64, attempt: i64, names: &[String]) -> Result<()>;
}

/// A run's steps: where they are recorded, and what this run did with them.
/// Shared by the clones of its [`JobContext`].
#[derive(Clone, Default)]
pub(crate) struct Steps(Option<Arc<StepRun>>);

pub(crate) struct StepRun {
    log: Arc<dyn StepLog>,
    run_id: i64,
    max_bytes: usize,
    state: Mutex<StepState>,
}

#[derive(Default)]
struct StepState {
    /// Only a prepare step may call steps (its run is outside any
    /// transaction; an apply step reads them with `tx.step_output`).
    open: bool,
    /// The job's recorded steps (name → attempt and output), read at the
    /// run's first step: a run without steps reads nothing.
    recorded: Option<HashMap<String, String>>,
    /// The names this run called or reused.
    used: HashSet<String>,
    /// The names this run got back from an earlier attempt.
    reused: Vec<String>,
}

impl std::fmt::Debug for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Steps(recorded)"
        } else {
            "Steps(none)"
        })
    }
}

impl Steps {
    /// A run's steps, recorded through `log` under its attempt row `run_id`.
    pub(crate) fn new(log: Arc<dyn StepLog>, run_id: i64, max_bytes: usize) -> Steps {
        Steps(Some(Arc::new(StepRun {
            log,
            run_id,
            max_bytes,
            state: Mutex::new(StepState::default()),
        })))
    }

    fn state(run: &StepRun) -> MutexGuard<'_, StepState> {
        lock(&run.state)
    }

    /// The prepare step begins: steps may be called.
    pub(crate) fn open(&self) {
        if let Some(run) = &self.0 {
            Self::state(run).open = true;
        }
    }

    /// The prepare step ended: no more steps. Marks the steps this run got
    /// back as reused in `attempt` (one write, only when there were any).
    pub(crate) fn close(&self, job_id: i64, attempt: i64) {
        let Some(run) = &self.0 else { return };
        let reused = {
            let mut st = Self::state(run);
            st.open = false;
            std::mem::take(&mut st.reused)
        };
        if !reused.is_empty() {
            if let Err(e) = run.log.mark_reused(job_id, attempt, &reused) {
                log::warn!(target: "litejob", job_id = job_id;
                    "could not mark steps {reused:?} as reused in attempt {attempt}: {e}");
            }
        }
    }
}

/// A step whose result is over the cap: the same call would give a value
/// too large again, so its job is discarded rather than retried (and the
/// step called again).
#[derive(Debug)]
pub(crate) struct StepTooLarge(pub String);

impl std::fmt::Display for StepTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StepTooLarge {}

/// Why `name` cannot name a step, if it cannot.
pub(crate) fn check_step_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("a step name is empty".into());
    }
    if name.len() > MAX_STEP_NAME_BYTES {
        return Err(format!(
            "step name is {} bytes, over the limit of {MAX_STEP_NAME_BYTES}",
            name.len()
        ));
    }
    if name.contains('\0') {
        return Err(format!("step name {name:?} contains a NUL byte"));
    }
    Ok(())
}

/// `reused_in` as stored (a JSON array of attempt numbers, or NULL).
pub(crate) fn parse_reused(stored: Option<&str>) -> Vec<i64> {
    stored
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// A recorded step's output as `T`.
pub(crate) fn decode_step<T: DeserializeOwned>(name: &str, json: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| {
        Error::InvalidInput(format!(
            "step {name}'s recorded result does not decode as {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

impl JobContext {
    /// A durable step of this job's prepare step: `f` runs once per job and
    /// step name. Its value is committed to `job_steps` before `step`
    /// returns it; a later run of the same job (a retry, or a rerun after a
    /// crash) gets the recorded value back and `f` is not called.
    ///
    /// `f` gets the step's key, `"<job key>/<step name>"`: hand it to a
    /// provider that deduplicates (an `Idempotency-Key` header), since a
    /// call whose result was not recorded (a crash in between) is made
    /// again. Steps are at least once; the apply step stays exactly once.
    ///
    /// Steps are named, not positional: code may add or reorder steps
    /// between runs. An error of `f` fails the run (retried by the job's
    /// rules, the error recorded in `attempts`), and so does a name used
    /// twice in one run, a call outside a prepare step, or a result that
    /// cannot be recorded. A result over the queue's payload limit (1 MiB
    /// by default) discards the job. The apply step reads results with
    /// `tx.step_output(name)`.
    ///
    /// ```
    /// # use litejob::{NewJob, Outcome, Queue};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let queue = Queue::open(dir.path().join("q.db")).unwrap();
    /// let runtime = queue.runtime().handler_with_prepare(
    ///     "order.paid",
    ///     |ctx, cents: i64| {
    ///         let charge: String = ctx.step("charge", |key| {
    ///             // e.g. a payment API called with Idempotency-Key: key
    ///             Ok::<_, String>(format!("ch_{key}_{cents}"))
    ///         })?;
    ///         Ok(charge)
    ///     },
    ///     |tx, charge: String| {
    ///         tx.execute("CREATE TABLE IF NOT EXISTS charges (id TEXT)", [])?;
    ///         tx.execute("INSERT INTO charges VALUES (?1)", [charge])?;
    ///         Ok(Outcome::Done)
    ///     },
    /// );
    /// # drop(runtime);
    /// ```
    pub fn step<T, E, F>(&self, name: &str, f: F) -> std::result::Result<T, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        F: FnOnce(&str) -> std::result::Result<T, E>,
    {
        check_step_name(name)?;
        let Some(run) = &self.steps.0 else {
            return Err("ctx.step is for a job's run; this context has no steps".into());
        };
        {
            let mut st = Steps::state(run);
            if !st.open {
                return Err(format!(
                    "step {name}: ctx.step is called in a prepare step only \
                     (an apply step reads a step's result with tx.step_output)"
                )
                .into());
            }
            if !st.used.insert(name.to_string()) {
                return Err(format!("step {name} was called twice in one run").into());
            }
            if st.recorded.is_none() {
                let rows = run
                    .log
                    .recorded(self.id)
                    .map_err(|e| format!("step {name}: the job's steps could not be read: {e}"))?;
                st.recorded = Some(rows.into_iter().map(|s| (s.name, s.output)).collect());
            }
            if let Some(json) = st.recorded.as_ref().and_then(|r| r.get(name)).cloned() {
                st.reused.push(name.to_string());
                return Ok(decode_step(name, &json)?);
            }
        }
        // Unlocked while user code runs: it may call other steps.
        let key = format!("{}/{name}", self.key);
        let started_at = run.log.now();
        let value = f(&key).map_err(|e| format!("step {name} failed: {}", e.into()))?;
        let json = serde_json::to_string(&value)
            .map_err(|e| format!("step {name}'s result cannot be serialized to JSON: {e}"))?;
        if json.len() > run.max_bytes {
            return Err(Box::new(StepTooLarge(format!(
                "discarded: step {name}'s result is {} bytes, over the limit of {} bytes",
                json.len(),
                run.max_bytes
            ))));
        }
        if !Steps::state(run).open {
            // Its run was let go of meanwhile (timed out, or its job
            // cancelled): nothing of it may be recorded any more.
            return Err(format!(
                "step {name}'s result was not recorded: its run was stopped (timed out, or its \
                 job cancelled) while the step ran"
            )
            .into());
        }
        let record = StepRecord {
            job_id: self.id,
            run_id: run.run_id,
            name,
            attempt: self.attempt,
            output: &json,
            started_at,
            finished_at: run.log.now(),
        };
        match run.log.record(&record) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "step {name}'s result was not recorded: this run no longer holds job {} \
                     (its lease was lost)",
                    self.id
                )
                .into())
            }
            Err(e) => return Err(format!("step {name}'s result was not recorded: {e}").into()),
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_says_where_a_step_was_recorded_and_reused() {
        let mut s = JobStep {
            name: "charge".into(),
            attempt: 1,
            output: "\"ch_1\"".into(),
            started_at: 0,
            finished_at: 1,
            reused_in: vec![],
        };
        assert_eq!(s.summary(), "step charge recorded in attempt 1, not reused");
        s.reused_in = vec![2];
        assert_eq!(
            s.summary(),
            "step charge recorded in attempt 1, reused in attempt 2"
        );
        s.reused_in = vec![2, 3];
        assert_eq!(
            s.summary(),
            "step charge recorded in attempt 1, reused in attempts 2, 3"
        );
    }

    #[test]
    fn step_names_are_checked() {
        assert!(check_step_name("charge").is_ok());
        assert!(check_step_name("").is_err());
        assert!(check_step_name(&"x".repeat(200)).is_ok());
        assert!(check_step_name(&"x".repeat(201)).is_err());
        assert!(check_step_name("a\0b").is_err());
    }
}
