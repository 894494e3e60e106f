//! Counting a whole file fast: jobs per queue, kind and state (with their
//! deliveries and the oldest runnable job's due time), outbox rows per kind
//! and state, and runs per kind and outcome, each in one plain scan of its
//! table aggregated here. Used by the metrics and the dashboard's overview.
//! Writes no table.
//!
//! Why not `GROUP BY` in SQL: SQLite has no hash aggregate, so grouping a
//! million rows sorts them all first (about 0.7 s on a million jobs), where
//! the scan alone takes under 0.1 s. And runs are counted per kind with the
//! job ids of the same scan (a sorted list, looked up by binary search)
//! instead of a join that looks every attempt's job up in the table.

use std::collections::{BTreeMap, HashMap};

use rusqlite::Connection;

use crate::error::Result;
use crate::history::AttemptOutcome;
use crate::job::JobState;
use crate::outbox::OutboxState;
use crate::time::Millis;

/// Jobs of one queue and kind in one state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Group {
    /// Job rows.
    pub count: i64,
    /// Their `deliveries`, summed.
    pub deliveries: i64,
    /// The smallest `run_at` among them that has come (queued jobs only).
    pub oldest_due_run_at: Option<Millis>,
}

/// What one scan of `jobs` found.
#[derive(Debug, Default)]
pub(crate) struct JobTally {
    /// `(queue, kind) -> state -> group`; every state of a pair is present.
    pub groups: BTreeMap<(String, String), BTreeMap<JobState, Group>>,
    /// Job ids in ascending order, with `kind_of[i]` the index of their
    /// kind in `kinds`: the scan's ids come in rowid order.
    ids: Vec<i64>,
    kind_of: Vec<u32>,
    kinds: Vec<String>,
}

/// Every job row, in rowid order: a table scan with no sort.
const JOB_ROWS: &str = "SELECT id, queue, kind, state, deliveries, run_at FROM jobs";

/// Every outbox row, in rowid order.
const OUTBOX_ROWS: &str = "SELECT id, kind, state FROM outbox";

/// Every attempt row: what it ran, and how it ended.
const ATTEMPT_ROWS: &str = "SELECT job_id, outbox_id, outcome FROM attempts";

/// A text column, borrowed from the row (no allocation per row).
pub(crate) fn text<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r str> {
    Ok(row.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
}

fn state_index(s: &str) -> Option<usize> {
    JobState::ALL.iter().position(|st| st.as_str() == s)
}

/// Counts every job of the file. `now` decides which queued jobs are due.
pub(crate) fn jobs(conn: &Connection, now: Millis) -> Result<JobTally> {
    let mut queues: HashMap<String, u32> = HashMap::new();
    let mut kinds: HashMap<String, u32> = HashMap::new();
    let mut t = JobTally::default();
    // (queue, kind) index -> counts per state, in `JobState::ALL` order.
    let mut pairs: HashMap<(u32, u32), [Group; 5]> = HashMap::new();
    let mut st = conn.prepare_cached(JOB_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let q = intern(&mut queues, text(r, 1)?);
        let kind_name = text(r, 2)?;
        let k = match kinds.get(kind_name) {
            Some(&k) => k,
            None => {
                let k = kinds.len() as u32;
                kinds.insert(kind_name.to_owned(), k);
                t.kinds.push(kind_name.to_owned());
                k
            }
        };
        let Some(s) = state_index(text(r, 3)?) else {
            continue;
        };
        let g = &mut pairs.entry((q, k)).or_default()[s];
        g.count += 1;
        g.deliveries += r.get::<_, i64>(4)?;
        if JobState::ALL[s] == JobState::Queued {
            let run_at: i64 = r.get(5)?;
            if run_at <= now && g.oldest_due_run_at.map_or(true, |o| run_at < o) {
                g.oldest_due_run_at = Some(run_at);
            }
        }
        t.ids.push(id);
        t.kind_of.push(k);
    }
    let queue_names = names(queues);
    for ((q, k), groups) in pairs {
        let by_state = JobState::ALL.into_iter().zip(groups).collect();
        t.groups.insert(
            (queue_names[q as usize].clone(), t.kinds[k as usize].clone()),
            by_state,
        );
    }
    Ok(t)
}

impl JobTally {
    /// The kind of job `id`, if the scan saw it.
    fn kind_of(&self, id: i64) -> Option<&str> {
        let i = self.ids.binary_search(&id).ok()?;
        Some(&self.kinds[self.kind_of[i] as usize])
    }

    /// Every queue's groups, per state, summed over its kinds.
    pub(crate) fn by_queue(&self) -> BTreeMap<&str, BTreeMap<JobState, Group>> {
        let mut out: BTreeMap<&str, BTreeMap<JobState, Group>> = BTreeMap::new();
        for ((queue, _), states) in &self.groups {
            let q = out.entry(queue.as_str()).or_default();
            for (state, g) in states {
                let sum = q.entry(*state).or_default();
                sum.count += g.count;
                sum.deliveries += g.deliveries;
                sum.oldest_due_run_at = match (sum.oldest_due_run_at, g.oldest_due_run_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        out
    }
}

fn intern(map: &mut HashMap<String, u32>, s: &str) -> u32 {
    if let Some(&i) = map.get(s) {
        return i;
    }
    let i = map.len() as u32;
    map.insert(s.to_owned(), i);
    i
}

/// The interned names by index.
fn names(map: HashMap<String, u32>) -> Vec<String> {
    let mut v: Vec<(u32, String)> = map.into_iter().map(|(s, i)| (i, s)).collect();
    v.sort();
    v.into_iter().map(|(_, s)| s).collect()
}

/// What one scan of `outbox` found.
#[derive(Debug, Default)]
pub(crate) struct OutboxTally {
    /// kind -> state -> rows; every state of a kind is present.
    pub groups: BTreeMap<String, BTreeMap<OutboxState, i64>>,
    ids: Vec<i64>,
    kind_of: Vec<u32>,
    kinds: Vec<String>,
}

/// Counts every outbox row of the file.
pub(crate) fn outbox(conn: &Connection) -> Result<OutboxTally> {
    let mut kinds: HashMap<String, u32> = HashMap::new();
    let mut t = OutboxTally::default();
    let mut counts: HashMap<u32, [i64; 4]> = HashMap::new();
    let mut st = conn.prepare_cached(OUTBOX_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let kind_name = text(r, 1)?;
        let k = match kinds.get(kind_name) {
            Some(&k) => k,
            None => {
                let k = kinds.len() as u32;
                kinds.insert(kind_name.to_owned(), k);
                t.kinds.push(kind_name.to_owned());
                k
            }
        };
        let state = text(r, 2)?;
        if let Some(s) = OutboxState::ALL.iter().position(|x| x.as_str() == state) {
            counts.entry(k).or_default()[s] += 1;
        }
        t.ids.push(id);
        t.kind_of.push(k);
    }
    for (k, c) in counts {
        let by_state = OutboxState::ALL.into_iter().zip(c).collect();
        t.groups.insert(t.kinds[k as usize].clone(), by_state);
    }
    Ok(t)
}

impl OutboxTally {
    fn kind_of(&self, id: i64) -> Option<&str> {
        let i = self.ids.binary_search(&id).ok()?;
        Some(&self.kinds[self.kind_of[i] as usize])
    }
}

/// Every attempt outcome, in the order the metrics list them.
pub(crate) const OUTCOMES: [AttemptOutcome; 7] = [
    AttemptOutcome::Running,
    AttemptOutcome::Succeeded,
    AttemptOutcome::Failed,
    AttemptOutcome::Panicked,
    AttemptOutcome::Duplicate,
    AttemptOutcome::Abandoned,
    AttemptOutcome::Released,
];

/// Runs per kind (a job's kind, or an effect's outbox kind) and outcome,
/// with the kinds of `jobs` and `outbox`, tallied in the same snapshot. An
/// attempt whose row the scans did not see (written after them: the
/// caller's read transaction prevents that) is left out.
pub(crate) fn attempts(
    conn: &Connection,
    jobs: &JobTally,
    outbox: &OutboxTally,
) -> Result<BTreeMap<String, [i64; 7]>> {
    let mut out: BTreeMap<String, [i64; 7]> = BTreeMap::new();
    // Per kind name, without a String per row.
    let mut by_kind: HashMap<&str, [i64; 7]> = HashMap::new();
    let mut st = conn.prepare_cached(ATTEMPT_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let kind = match (r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?) {
            (Some(job), _) => jobs.kind_of(job),
            (None, Some(row)) => outbox.kind_of(row),
            (None, None) => None,
        };
        let Some(kind) = kind else { continue };
        let outcome = text(r, 2)?;
        if let Some(o) = OUTCOMES.iter().position(|x| x.as_str() == outcome) {
            by_kind.entry(kind).or_default()[o] += 1;
        }
    }
    for (k, c) in by_kind {
        out.insert(k.to_owned(), c);
    }
    Ok(out)
}
