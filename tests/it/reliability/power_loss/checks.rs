//! What must hold in every state a power cut may leave: the file opens and
//! `integrity_check` is ok; what was acknowledged before the cut is there;
//! the job, its ledger row, its app row and its outbox row were committed
//! together or not at all; and litejob, opened on the state, with every
//! event delivered again (a producer retries; it is always safe), resumes
//! to the final state of a run without a cut: every key once, succeeded,
//! one ledger row, one app row, its outbox row sent.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use litejob::{NewJob, Queue, QueueOptions};
use rusqlite::{Connection, OpenFlags};

use super::states::{Cut, Digest, State};
use super::workloads::{create_app_table, drained, runtime};

/// A broken promise found in a state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    /// The file does not open, or `integrity_check` is not ok.
    Corrupt(String),
    /// An enqueue that had returned before the cut is not in the file.
    LostEnqueue(String),
    /// A run acknowledged before the cut (its effect started, or the
    /// runtime logged it) is not complete with its ledger row.
    LostCompletion(String),
    /// An effect started before the cut, but its row's claim is not in the
    /// file (the attempt would go unrecorded).
    LostEffectClaim(String),
    /// An effect acknowledged before the cut is not `sent`.
    LostSent(String),
    /// A ledger row whose job did not succeed, or the reverse.
    LedgerWithoutSuccess(String),
    SuccessWithoutLedger(String),
    /// App rows (the handler's own SQL) not one per ledger row.
    AppRowMismatch(String),
    /// An outbox row whose job's transaction is not committed.
    OrphanOutbox(String),
    /// A job no workload delivered.
    Phantom(String),
    /// litejob could not resume the work on the state.
    ResumeFailed(String),
    /// The work resumed, to another final state than a run without a cut.
    FinalDiffers(String),
}

impl Violation {
    /// A loss of something acknowledged: allowed with NORMAL only.
    pub fn is_acknowledged_loss(&self) -> bool {
        matches!(
            self,
            Violation::LostEnqueue(_)
                | Violation::LostCompletion(_)
                | Violation::LostEffectClaim(_)
                | Violation::LostSent(_)
        )
    }

    fn kind(&self) -> &'static str {
        match self {
            Violation::Corrupt(_) => "corrupt",
            Violation::LostEnqueue(_) => "lost acknowledged enqueue",
            Violation::LostCompletion(_) => "lost acknowledged completion",
            Violation::LostEffectClaim(_) => "effect started without its claim",
            Violation::LostSent(_) => "lost acknowledged effect",
            Violation::LedgerWithoutSuccess(_) => "ledger row without success",
            Violation::SuccessWithoutLedger(_) => "success without ledger row",
            Violation::AppRowMismatch(_) => "app rows not one per ledger row",
            Violation::OrphanOutbox(_) => "outbox row without its job's commit",
            Violation::Phantom(_) => "job nobody delivered",
            Violation::ResumeFailed(_) => "resume failed",
            Violation::FinalDiffers(_) => "final state differs",
        }
    }
}

/// What the checks found over all states.
#[derive(Default)]
pub struct Report {
    pub states: usize,
    /// (violation, where) — the first few of each kind are kept whole.
    pub found: Vec<(Violation, String)>,
    pub counts: BTreeMap<&'static str, usize>,
    /// States in which at least one acknowledged thing was lost.
    pub states_with_losses: usize,
    /// Acknowledged things lost, over all states.
    pub losses: usize,
}

impl Report {
    fn add(&mut self, v: Vec<Violation>, cut: &Cut, state: &State) {
        self.states += 1;
        if v.iter().any(Violation::is_acknowledged_loss) {
            self.states_with_losses += 1;
        }
        for v in v {
            self.losses += usize::from(v.is_acknowledged_loss());
            let n = self.counts.entry(v.kind()).or_insert(0);
            *n += 1;
            if *n <= 3 {
                let at = format!(
                    "cut before record {}/{} after {} acks, {}",
                    cut.pos,
                    cut.of,
                    cut.markers.len(),
                    state.how
                );
                self.found.push((v, at));
            }
        }
    }

    /// Violations of the kinds `allowed` does not let through (the first
    /// few of each kind).
    pub fn unexpected(&self, allowed: impl Fn(&Violation) -> bool) -> Vec<&(Violation, String)> {
        self.found.iter().filter(|(v, _)| !allowed(v)).collect()
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} states checked, {} with acknowledged losses ({} in all); ",
            self.states, self.states_with_losses, self.losses
        );
        if self.counts.is_empty() {
            s.push_str("no violation");
        }
        for (k, n) in &self.counts {
            s.push_str(&format!("{k}: {n}; "));
        }
        for (v, at) in &self.found {
            s.push_str(&format!("\n  {v:?} at {at}"));
        }
        s
    }
}

/// Checks states into scratch directories under `root` (tmpfs when there
/// is one: the states are many, and their fsyncs prove nothing).
pub struct Checker {
    root: tempfile::TempDir,
    deliveries: Vec<NewJob>,
    /// Per disk state: its rows (None if corrupt) and what it broke
    /// whatever was acknowledged; so a state met again after more
    /// acknowledgements is only checked against them.
    seen: HashMap<Digest, (Option<Tables>, Vec<Violation>)>,
    pub report: Report,
}

fn scratch_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A row of the final state, per key: (job rows, job state, ledger rows,
/// app rows, outbox state).
type Final = BTreeMap<String, (i64, String, i64, i64, String)>;

impl Checker {
    pub fn new(deliveries: Vec<NewJob>) -> Checker {
        Checker {
            root: scratch_root(),
            deliveries,
            seen: HashMap::new(),
            report: Report::default(),
        }
    }

    /// Checks one state against the acknowledgements before its cut,
    /// noting what it found in the report.
    pub fn check(&mut self, cut: &Cut, state: &State, digest: Digest) {
        if !self.seen.contains_key(&digest) {
            let checked = self.check_files(state);
            self.seen.insert(digest, checked);
        }
        let (tables, fixed) = &self.seen[&digest];
        let mut v = fixed.clone();
        if let Some(t) = tables {
            v.extend(self.acknowledged(t, cut.markers));
        }
        self.report.add(v, cut, state);
    }

    /// What does not depend on the acknowledgements: integrity, the rows'
    /// invariants, the resumed work.
    fn check_files(&self, state: &State) -> (Option<Tables>, Vec<Violation>) {
        let dir = self.root.path().join("state");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        for (name, content) in &state.files {
            std::fs::write(dir.join(name), content).unwrap();
        }
        let db = dir.join("test.db");
        let (tables, mut v) = if db.exists() {
            self.invariants(&db)
        } else {
            (Some(Tables::default()), Vec::new())
        };
        // A corrupt file is not resumed: litejob refuses it, or worse.
        if tables.is_some() {
            v.extend(self.resume(&db));
        }
        let _ = std::fs::remove_dir_all(&dir);
        (tables, v)
    }

    fn invariants(&self, db: &Path) -> (Option<Tables>, Vec<Violation>) {
        let corrupt = |why: String| (None, vec![Violation::Corrupt(why)]);
        let conn = match Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE) {
            Ok(c) => c,
            Err(e) => return corrupt(format!("open: {e}")),
        };
        let integrity = conn
            .prepare("PRAGMA integrity_check")
            .and_then(|mut st| {
                st.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .map(|rows| rows.join("; "));
        match integrity {
            Ok(s) if s == "ok" => {}
            Ok(s) => return corrupt(s),
            Err(e) => return corrupt(format!("integrity_check: {e}")),
        }
        let t = match Tables::read(&conn) {
            Ok(t) => t,
            Err(e) => return corrupt(format!("reading the tables: {e}")),
        };
        let mut v = Vec::new();
        for (key, state) in &t.jobs {
            let ledger = t.ledger.contains_key(key);
            if !self.deliveries.iter().any(|j| j.key() == key) {
                v.push(Violation::Phantom(key.clone()));
            }
            if state == "succeeded" && !ledger {
                v.push(Violation::SuccessWithoutLedger(key.clone()));
            }
        }
        for key in t.ledger.keys() {
            if t.jobs.get(key).map(String::as_str) != Some("succeeded") {
                v.push(Violation::LedgerWithoutSuccess(key.clone()));
            }
        }
        for key in t.jobs.keys() {
            let want = i64::from(t.ledger.contains_key(key));
            let got = t.app.get(key).copied().unwrap_or(0);
            if got != want {
                v.push(Violation::AppRowMismatch(format!(
                    "{key}: {got} app rows, {want} ledger rows"
                )));
            }
        }
        for okey in t.outbox.keys() {
            let key = okey.strip_prefix("mail:").unwrap_or(okey);
            if !t.ledger.contains_key(key) {
                v.push(Violation::OrphanOutbox(okey.clone()));
            }
        }
        (Some(t), v)
    }

    /// What the markers before the cut promise.
    fn acknowledged(&self, t: &Tables, markers: &[String]) -> Vec<Violation> {
        let mut v = Vec::new();
        let complete = |key: &str| {
            t.jobs.get(key).map(String::as_str) == Some("succeeded") && t.ledger.contains_key(key)
        };
        for m in markers {
            let (what, key) = m.split_once(' ').unwrap_or((m, ""));
            match what {
                "enq" if !t.jobs.contains_key(key) && !t.ledger.contains_key(key) => {
                    v.push(Violation::LostEnqueue(key.into()))
                }
                "done" if !complete(key) => v.push(Violation::LostCompletion(key.into())),
                "effect" => {
                    let job = key.strip_prefix("mail:").unwrap_or(key);
                    if !complete(job) {
                        v.push(Violation::LostCompletion(job.into()));
                    }
                    match t.outbox.get(key) {
                        Some((state, attempts))
                            if *attempts >= 1 && (state == "sending" || state == "sent") => {}
                        other => v.push(Violation::LostEffectClaim(format!("{key}: {other:?}"))),
                    }
                }
                "sent" if t.outbox.get(key).map(|o| o.0.as_str()) != Some("sent") => {
                    v.push(Violation::LostSent(key.into()))
                }
                _ => {}
            }
        }
        v
    }

    /// Opens the state in litejob, delivers every job again, runs the
    /// runtime until the queue is drained, and compares the final state
    /// with the one a run without a cut ends in.
    fn resume(&self, db: &Path) -> Vec<Violation> {
        let total = self.deliveries.len();
        let q = match Queue::open_with(db, QueueOptions::default()) {
            Ok(q) => q,
            Err(e) => return vec![Violation::ResumeFailed(format!("open: {e}"))],
        };
        create_app_table(&q);
        for chunk in self.deliveries.chunks(50) {
            if let Err(e) = q.enqueue_many(chunk.to_vec()) {
                return vec![Violation::ResumeFailed(format!("enqueue again: {e}"))];
            }
        }
        let mut rt = runtime(&q, None, Duration::from_millis(200))
            .start()
            .expect("start the runtime");
        let t0 = Instant::now();
        let mut v = Vec::new();
        while !drained(&q, total) {
            if t0.elapsed() > Duration::from_secs(60) {
                v.push(Violation::ResumeFailed("not drained after 60 s".into()));
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        rt.stop();
        drop(q);
        let got = match final_state(db) {
            Ok(f) => f,
            Err(e) => return vec![Violation::ResumeFailed(format!("read the end: {e}"))],
        };
        let want: Final = self
            .deliveries
            .iter()
            .map(|j| {
                let row = (1, "succeeded".to_string(), 1, 1, "sent".to_string());
                (j.key().to_string(), row)
            })
            .collect();
        if got != want {
            let diff: Vec<String> = want
                .iter()
                .filter(|(k, w)| got.get(*k) != Some(w))
                .map(|(k, _)| format!("{k}: {:?}", got.get(k)))
                .chain(
                    got.keys()
                        .filter(|k| !want.contains_key(*k))
                        .map(|k| format!("{k}: extra")),
                )
                .take(5)
                .collect();
            v.push(Violation::FinalDiffers(diff.join(", ")));
        }
        v
    }
}

/// The rows the invariants look at.
#[derive(Default)]
struct Tables {
    /// key → state
    jobs: HashMap<String, String>,
    /// key → job id
    ledger: HashMap<String, i64>,
    /// key → app rows
    app: HashMap<String, i64>,
    /// outbox key → (state, attempts)
    outbox: HashMap<String, (String, i64)>,
}

impl Tables {
    /// Reads them; a table missing (the schema not yet committed) reads as
    /// empty.
    fn read(c: &Connection) -> rusqlite::Result<Tables> {
        let has = |t: &str| -> rusqlite::Result<bool> {
            c.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [t],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        let mut t = Tables::default();
        if has("jobs")? {
            let mut st = c.prepare("SELECT idempotency_key, state FROM jobs")?;
            t.jobs = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
        }
        if has("processed_jobs")? {
            let mut st = c.prepare("SELECT key, coalesce(job_id, 0) FROM processed_jobs")?;
            t.ledger = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
        }
        if has("app_rows")? {
            let mut st = c.prepare("SELECT key, count(*) FROM app_rows GROUP BY key")?;
            t.app = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
        }
        if has("outbox")? {
            let mut st = c.prepare("SELECT key, state, attempts FROM outbox")?;
            t.outbox = st
                .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?
                .collect::<rusqlite::Result<_>>()?;
        }
        Ok(t)
    }
}

fn final_state(db: &Path) -> rusqlite::Result<Final> {
    let c = Connection::open(db)?;
    let mut st = c.prepare(
        "SELECT j.idempotency_key, count(*), max(j.state), \
                (SELECT count(*) FROM processed_jobs p WHERE p.key = j.idempotency_key), \
                (SELECT count(*) FROM app_rows a WHERE a.key = j.idempotency_key), \
                coalesce((SELECT group_concat(o.state) FROM outbox o \
                          WHERE o.key = 'mail:' || j.idempotency_key), '') \
         FROM jobs j GROUP BY j.idempotency_key",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?),
        ))
    })?;
    rows.collect()
}
