//! The producer's rules: what an enqueue checks before anything is
//! written (names, JSON, payload size, retries) and the job it then hands
//! an engine ([`ValidJob`]). Writes no table.

use crate::core::job::NewJob;
use crate::core::time::Millis;
use crate::error::{Error, Result};

/// The limits and defaults enqueue checks against.
#[derive(Debug, Clone)]
pub(crate) struct EnqueueRules {
    pub max_payload_bytes: usize,
    pub default_max_retries: u32,
    pub kind_max_retries: std::collections::HashMap<String, u32>,
}

/// Longest kind, key or queue name accepted.
pub(crate) const MAX_NAME_BYTES: usize = 1024;
/// Largest `max_retries` accepted.
pub(crate) const MAX_RETRIES_LIMIT: u32 = 10_000;

/// A job that passed validation: ready to insert.
#[derive(Debug, Clone)]
pub(crate) struct ValidJob {
    pub kind: String,
    pub key: String,
    pub payload: String,
    pub queue: String,
    pub priority: i64,
    pub run_at: Millis,
    pub max_attempts: i64,
    /// The keys it waits for (distinct, none its own).
    pub depends_on: Vec<String>,
    /// Its partition of the queue (`jobs.partition_key`).
    pub partition: Option<String>,
    /// How long one run may take, in ms (`jobs.timeout_ms`).
    pub timeout_ms: Option<i64>,
}

/// A timeout as `jobs.timeout_ms` stores it: whole milliseconds, a part
/// of one counted as one (so a timeout never reads as zero), at most what
/// the column holds.
pub(crate) fn timeout_ms(t: std::time::Duration) -> i64 {
    let ms = t.as_nanos().div_ceil(1_000_000);
    i64::try_from(ms).unwrap_or(i64::MAX).max(1)
}

/// Longest partition key accepted (`jobs.partition_key`, a CHECK too).
pub(crate) const MAX_PARTITION_BYTES: usize = 200;

/// Refuses an empty partition key, one over [`MAX_PARTITION_BYTES`], or one
/// holding a NUL or the unit separator (which joins a queue and a
/// partition in a claim's list of full partitions).
pub(crate) fn check_partition(p: &str) -> Result<()> {
    if p.is_empty() {
        return Err(Error::invalid("a partition key must not be empty"));
    }
    if p.len() > MAX_PARTITION_BYTES {
        return Err(Error::invalid(format!(
            "partition key is {} bytes, longer than the limit of {MAX_PARTITION_BYTES}",
            p.len()
        )));
    }
    if p.contains(['\0', '\u{1f}']) {
        return Err(Error::invalid(
            "a partition key must not contain a NUL or a unit separator (0x1f)",
        ));
    }
    Ok(())
}

/// Refuses an empty name, one over the length limit, or one holding a NUL.
pub(crate) fn check_name(what: &str, s: &str) -> Result<()> {
    if s.trim().is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format!(
            "{what} is {} bytes, longer than the limit of {MAX_NAME_BYTES}",
            s.len()
        )));
    }
    if s.contains('\0') {
        return Err(Error::invalid(format!(
            "{what} must not contain a NUL byte"
        )));
    }
    Ok(())
}

/// [`validate`] for a job the caller owns: the strings move instead of
/// being copied.
pub(crate) fn validate_owned(job: NewJob, rules: &EnqueueRules, now: Millis) -> Result<ValidJob> {
    let (run_at, max_attempts) = validate_parts(&job, rules, now)?;
    Ok(into_valid(job, run_at, max_attempts))
}

/// A checked job (see [`validate_parts`]) as a `ValidJob`, moving its strings.
pub(crate) fn into_valid(job: NewJob, run_at: Millis, max_attempts: i64) -> ValidJob {
    ValidJob {
        timeout_ms: job.timeout.map(timeout_ms),
        kind: job.kind,
        key: job.key,
        payload: job.payload.unwrap_or_default(),
        queue: job.queue,
        priority: job.priority,
        run_at,
        max_attempts,
        depends_on: distinct(job.depends_on),
        partition: job.partition,
    }
}

/// The keys in their first order, each once.
fn distinct(keys: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.into_iter()
        .filter(|k| seen.insert(k.clone()))
        .collect()
}

/// Most dependencies one job may name: a fan-in wider than this is a
/// sign of a mistake (and each dependency is a row its enqueue writes).
pub(crate) const MAX_DEPENDENCIES: usize = 10_000;

/// Checks everything that can be checked before touching the file.
pub(crate) fn validate(job: &NewJob, rules: &EnqueueRules, now: Millis) -> Result<ValidJob> {
    let (run_at, max_attempts) = validate_parts(job, rules, now)?;
    Ok(ValidJob {
        timeout_ms: job.timeout.map(timeout_ms),
        kind: job.kind.clone(),
        key: job.key.clone(),
        payload: job.payload.clone().unwrap_or_default(),
        queue: job.queue.clone(),
        priority: job.priority,
        run_at,
        max_attempts,
        depends_on: distinct(job.depends_on.clone()),
        partition: job.partition.clone(),
    })
}

/// The checks; returns `(run_at, max_attempts)`.
pub(crate) fn validate_parts(
    job: &NewJob,
    rules: &EnqueueRules,
    now: Millis,
) -> Result<(Millis, i64)> {
    check_name("kind", &job.kind)?;
    check_name("key", &job.key)?;
    check_name("queue", &job.queue)?;
    if let Some(p) = &job.partition {
        check_partition(p)?;
    }
    if job.timeout.is_some_and(|t| t.is_zero()) {
        return Err(Error::invalid(
            "a job's timeout must be longer than zero (leave it out for none)",
        ));
    }
    let payload = match &job.payload {
        Ok(p) => p,
        Err(e) => {
            return Err(Error::invalid(format!(
                "payload cannot be serialized to JSON: {e}"
            )))
        }
    };
    if payload.len() > rules.max_payload_bytes {
        return Err(Error::invalid(format!(
            "payload is {} bytes, over the limit of {} bytes",
            payload.len(),
            rules.max_payload_bytes
        )));
    }
    if !job.payload_is_serde_output {
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(payload) {
            return Err(Error::invalid(format!("payload is not valid JSON: {e}")));
        }
    }
    let retries = job
        .max_retries
        .or_else(|| rules.kind_max_retries.get(&job.kind).copied())
        .unwrap_or(rules.default_max_retries);
    if retries > MAX_RETRIES_LIMIT {
        return Err(Error::invalid(format!(
            "max_retries {retries} is over the limit of {MAX_RETRIES_LIMIT}"
        )));
    }
    if job.depends_on.len() > MAX_DEPENDENCIES {
        return Err(Error::invalid(format!(
            "job {:?} depends on {} jobs, over the limit of {MAX_DEPENDENCIES}",
            job.key,
            job.depends_on.len()
        )));
    }
    for k in &job.depends_on {
        check_name("dependency key", k)?;
        if *k == job.key {
            return Err(Error::invalid(format!(
                "job {:?} depends on itself",
                job.key
            )));
        }
    }
    let run_at = match (job.run_at, job.delay) {
        (Some(at), _) => at,
        (None, Some(d)) => now.saturating_add(d.as_millis().min(i64::MAX as u128 / 2) as i64),
        (None, None) => now,
    };
    Ok((run_at, retries as i64 + 1))
}
