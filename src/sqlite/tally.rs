//! Counting a whole file for the metrics and the dashboard's overview: one
//! plain scan of each table aggregated here into the core's
//! [`crate::core::reports::tally::Tally`], and the last hour's runs read
//! from the newest attempt back. PostgreSQL fills the same figures with
//! `GROUP BY` queries (`postgres::tally`). Writes no table.
//!
//! Why not `GROUP BY` in SQL on the file: SQLite has no hash aggregate, so
//! grouping a million rows sorts them all first, where one scan does not;
//! and runs are counted per kind with the kinds of the job ids the same
//! scan saw (an array indexed by id) instead of a join that looks every
//! attempt's job up in the table (docs/performance-notes.md has the
//! figures).

use rusqlite::Connection;

use crate::core::job::JobState;
use crate::core::outbox::OutboxState;
use crate::core::reports::overview::{Activity, ActivityCount};
use crate::core::reports::tally::Group;
use crate::core::reports::tally::Runs;
use crate::core::reports::tally::Tally;
use crate::core::reports::tally::OUTCOMES;
use crate::core::time::Millis;
use crate::error::Result;

/// The kind of every row a scan of `jobs` or `outbox` saw, by id, for the
/// scan of `attempts`.
#[derive(Debug, Default)]
struct Kinds {
    kind_of: KindOf,
    kinds: Vec<String>,
}

/// The number of ledger rows (SQLite counts them from its smallest index).
const LEDGER_ROWS: &str = "SELECT count(*) FROM processed_jobs";

/// Attempts newest first, to read back only as far as the last hour: ids
/// grow with `started_at` (an attempt row is written when its run starts).
const RECENT_ATTEMPTS: &str =
    "SELECT started_at, finished_at, outcome FROM attempts WHERE job_id IS NOT NULL \
     ORDER BY id DESC";

/// Counts the whole file (the caller holds one read transaction), runs
/// too when asked; the sizes are the caller's to fill.
pub(crate) fn tally(conn: &Connection, now: Millis, runs: Runs) -> Result<Tally> {
    let mut t = Tally::default();
    let job_kinds = jobs(conn, now, &mut t)?;
    let outbox_kinds = outbox(conn, &mut t)?;
    if runs == Runs::Counted {
        attempts(conn, &job_kinds, &outbox_kinds, &mut t)?;
    }
    t.ledger_rows = conn
        .prepare_cached(LEDGER_ROWS)?
        .query_row([], |r| r.get(0))?;
    Ok(t)
}

/// The last hour's runs per minute (see [`ActivityCount`]), read from the
/// newest attempt back.
pub(crate) fn activity(conn: &Connection, now: Millis) -> Result<Activity> {
    let mut a = ActivityCount::new(now);
    let mut st = conn.prepare_cached(RECENT_ATTEMPTS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        if !a.add(r.get(0)?, r.get(1)?, text(r, 2)?) {
            break;
        }
    }
    Ok(a.finish())
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

/// A text column's bytes, borrowed and not checked for UTF-8 (the names
/// they are compared with are; a name is kept only once checked).
fn bytes<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> Result<&'r [u8]> {
    Ok(row.get_ref(i)?.as_bytes().map_err(rusqlite::Error::from)?)
}

fn state_index(s: &[u8]) -> Option<usize> {
    JobState::ALL
        .iter()
        .position(|st| st.as_str().as_bytes() == s)
}

/// Counts every job of the file into `t`. `now` decides which queued jobs
/// are due.
fn jobs(conn: &Connection, now: Millis, t: &mut Tally) -> Result<Kinds> {
    let (mut queues, mut kinds) = (Names::default(), Names::default());
    // [queue][kind] -> counts per state, in `JobState::ALL` order.
    let mut pairs: Vec<Vec<Option<[Group; JobState::ALL.len()]>>> = Vec::new();
    let mut ids = Vec::new();
    let mut st = conn.prepare_cached(JOB_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let q = queues.index(bytes(r, 1)?)?;
        let k = kinds.index(bytes(r, 2)?)?;
        let Some(s) = state_index(bytes(r, 3)?) else {
            continue;
        };
        if pairs.len() <= q {
            pairs.resize_with(q + 1, Vec::new);
        }
        if pairs[q].len() <= k {
            pairs[q].resize_with(k + 1, || None);
        }
        let g = &mut pairs[q][k].get_or_insert_with(Default::default)[s];
        g.count += 1;
        g.deliveries += r.get::<_, i64>(4)?;
        if JobState::ALL[s] == JobState::Queued {
            let run_at: i64 = r.get(5)?;
            if run_at <= now && g.oldest_due_run_at.is_none_or(|o| run_at < o) {
                g.oldest_due_run_at = Some(run_at);
            }
        }
        ids.push((id, k as u32));
    }
    for (q, by_kind) in pairs.into_iter().enumerate() {
        for (k, groups) in by_kind.into_iter().enumerate() {
            let Some(groups) = groups else { continue };
            for (state, g) in JobState::ALL.into_iter().zip(groups) {
                t.add_jobs(&queues.0[q], &kinds.0[k], state, g);
            }
        }
    }
    Ok(Kinds {
        kind_of: KindOf::new(ids),
        kinds: kinds.0,
    })
}

/// Names seen in a scan, numbered in order of appearance. A scan meets few
/// distinct queues and kinds: a look at the last one and a walk over the
/// rest cost less per row than hashing the text.
#[derive(Debug, Default)]
struct Names(Vec<String>, usize);

impl Names {
    fn index(&mut self, s: &[u8]) -> Result<usize> {
        if self.0.get(self.1).is_some_and(|n| n.as_bytes() == s) {
            return Ok(self.1);
        }
        let i = match self.0.iter().position(|n| n.as_bytes() == s) {
            Some(i) => i,
            None => {
                let name = std::str::from_utf8(s).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        0,
                        rusqlite::types::Type::Text,
                        e.into(),
                    )
                })?;
                self.0.push(name.to_owned());
                self.0.len() - 1
            }
        };
        self.1 = i;
        Ok(i)
    }
}

/// The kind of each id of a scan: indexed directly when the ids are dense
/// (the usual case: ids are never reused and are pruned oldest first),
/// else by binary search over the ids, which come sorted from the scan.
#[derive(Debug, Default)]
struct KindOf {
    first: i64,
    dense: Vec<u32>,
    sparse: Vec<(i64, u32)>,
}

impl KindOf {
    const NONE: u32 = u32::MAX;

    fn new(ids: Vec<(i64, u32)>) -> KindOf {
        let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
            return KindOf::default();
        };
        let span = (last.0 - first.0 + 1) as usize;
        if span > 4 * ids.len() + 1024 {
            return KindOf {
                first: 0,
                dense: Vec::new(),
                sparse: ids,
            };
        }
        let mut dense = vec![KindOf::NONE; span];
        for (id, k) in &ids {
            dense[(id - first.0) as usize] = *k;
        }
        KindOf {
            first: first.0,
            dense,
            sparse: Vec::new(),
        }
    }

    fn get(&self, id: i64) -> Option<usize> {
        let k = if self.sparse.is_empty() {
            let i = usize::try_from(id - self.first).ok()?;
            *self.dense.get(i)?
        } else {
            let i = self.sparse.binary_search_by_key(&id, |e| e.0).ok()?;
            self.sparse[i].1
        };
        (k != KindOf::NONE).then_some(k as usize)
    }
}

/// Counts every outbox row of the file into `t`.
fn outbox(conn: &Connection, t: &mut Tally) -> Result<Kinds> {
    let mut kinds = Names::default();
    let mut counts: Vec<[i64; 4]> = Vec::new();
    let mut ids = Vec::new();
    let mut st = conn.prepare_cached(OUTBOX_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let k = kinds.index(bytes(r, 1)?)?;
        let state = bytes(r, 2)?;
        if counts.len() <= k {
            counts.resize(k + 1, [0; 4]);
        }
        if let Some(s) = OutboxState::ALL
            .iter()
            .position(|x| x.as_str().as_bytes() == state)
        {
            counts[k][s] += 1;
        }
        ids.push((id, k as u32));
    }
    for (k, c) in counts.into_iter().enumerate() {
        for (state, n) in OutboxState::ALL.into_iter().zip(c) {
            t.add_outbox(&kinds.0[k], state, n);
        }
    }
    Ok(Kinds {
        kind_of: KindOf::new(ids),
        kinds: kinds.0,
    })
}

/// Runs per kind (a job's kind, or an effect's outbox kind) and outcome,
/// with the kinds of `jobs` and `outbox`, tallied in the same snapshot, into
/// `t`. An attempt whose row the scans did not see (written after them: the
/// caller's read transaction prevents that) is left out.
fn attempts(conn: &Connection, jobs: &Kinds, outbox: &Kinds, t: &mut Tally) -> Result<()> {
    let mut of_jobs = vec![[0i64; 7]; jobs.kinds.len()];
    let mut of_effects = vec![[0i64; 7]; outbox.kinds.len()];
    let mut st = conn.prepare_cached(ATTEMPT_ROWS)?;
    let mut rows = st.query([])?;
    while let Some(r) = rows.next()? {
        let counts = match (r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?) {
            (Some(job), _) => jobs.kind_of.get(job).map(|k| &mut of_jobs[k]),
            (None, Some(row)) => outbox.kind_of.get(row).map(|k| &mut of_effects[k]),
            (None, None) => None,
        };
        let Some(counts) = counts else { continue };
        let outcome = bytes(r, 2)?;
        if let Some(o) = OUTCOMES
            .iter()
            .position(|x| x.as_str().as_bytes() == outcome)
        {
            counts[o] += 1;
        }
    }
    let named = jobs.kinds.iter().zip(of_jobs);
    for (kind, c) in named.chain(outbox.kinds.iter().zip(of_effects)) {
        for (outcome, n) in OUTCOMES.into_iter().zip(c) {
            t.add_runs(kind, outcome, n);
        }
    }
    Ok(())
}
