//! A file's side of `verify` ([`verify`]): SQLite's own checks (`PRAGMA
//! integrity_check`, `PRAGMA foreign_key_check`), the schema version, and
//! one query per invariant of [`crate::core::reports::verify`] (the file's
//! own and the core's shared ones), all in one read snapshot. Writes no
//! table.

use rusqlite::Connection;

use crate::core::options::EngineKind;
use crate::core::reports::verify::{self, Findings, Invariant, VerifyReport};
use crate::error::Result;
use crate::sqlite::reports::in_snapshot;
use crate::sqlite::schema;
use crate::sqlite::store::SqliteStore;

/// At most 100 messages: a badly damaged file can have millions, and the
/// first few say what is wrong.
const INTEGRITY_CHECK: &str = "PRAGMA integrity_check(100)";

/// Each cross-table invariant as `SELECT count(*), <an example id as text>`.
const CHECKS: [(Invariant, &str); 13] = [
    (
        Invariant::SucceededJobWithoutLedgerRow,
        // A ledger prune deletes the oldest rows first, and a run's ledger
        // row is completed at its job's finished_at: a job finished after
        // the oldest row still there cannot have lost its row to a prune.
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j \
         WHERE j.state = 'succeeded' \
           AND j.finished_at > (SELECT min(completed_at) FROM processed_jobs) \
           AND NOT EXISTS (SELECT 1 FROM processed_jobs p WHERE p.key = j.idempotency_key)",
    ),
    (
        Invariant::LedgerRowOfAnotherJob,
        "SELECT count(*), min(p.key) FROM processed_jobs p JOIN jobs j ON j.id = p.job_id \
         WHERE j.idempotency_key <> p.key OR j.state <> 'succeeded'",
    ),
    (
        Invariant::OutboxRowOfUnsucceededJob,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o JOIN jobs j ON j.id = o.job_id \
         WHERE j.state <> 'succeeded'",
    ),
    (
        Invariant::RunningJobOnEndedRun,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j \
         LEFT JOIN attempts a ON a.id = j.current_attempt \
         WHERE j.state = 'running' AND j.current_attempt IS NOT NULL \
           AND (a.id IS NULL OR a.job_id IS NOT j.id OR a.outcome <> 'running')",
    ),
    (
        Invariant::RunningRunNotCurrent,
        "SELECT count(*), CAST(min(a.id) AS TEXT) FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.outcome = 'running' \
           AND (j.state <> 'running' OR j.current_attempt IS NOT a.id)",
    ),
    (
        Invariant::SendingRowOnEndedAttempt,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o \
         LEFT JOIN attempts a ON a.id = o.current_attempt \
         WHERE o.state = 'sending' AND o.current_attempt IS NOT NULL \
           AND (a.id IS NULL OR a.outbox_id IS NOT o.id OR a.outcome <> 'running')",
    ),
    (
        Invariant::RunningEffectNotCurrent,
        "SELECT count(*), CAST(min(a.id) AS TEXT) FROM attempts a \
         JOIN outbox o ON o.id = a.outbox_id \
         WHERE a.outcome = 'running' \
           AND (o.state <> 'sending' OR o.current_attempt IS NOT a.id)",
    ),
    (
        Invariant::SucceededJobWithoutSuccessfulRun,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state = 'succeeded' \
           AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id \
                           AND (a.outcome = 'succeeded' OR a.outcome = 'duplicate'))",
    ),
    (
        Invariant::SuccessfulRunOfUnsucceededJob,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state <> 'succeeded' \
           AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id \
                       AND (a.outcome = 'succeeded' OR a.outcome = 'duplicate'))",
    ),
    (
        Invariant::SentRowWithoutSuccessfulSend,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o WHERE o.state = 'sent' \
           AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.outbox_id = o.id \
                           AND a.outcome = 'succeeded')",
    ),
    (
        Invariant::WaitingJobNotPromoted,
        // A waiting job without any edge counts too: only a dependency's
        // end moves a waiting job, so it would wait forever.
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state = 'waiting' \
           AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on \
                           WHERE d.job_id = j.id AND p.state <> 'succeeded')",
    ),
    (
        Invariant::DependentAheadOfDependency,
        // From the edges, which are few beside the jobs. Not counted: a
        // cancelled dependent (a dependency's end cancels it, and an
        // operator may cancel it any time), and a dead one without a run
        // (it never started, so nothing ran early).
        "SELECT count(DISTINCT d.job_id), CAST(min(d.job_id) AS TEXT) FROM job_dependencies d \
         JOIN jobs j ON j.id = d.job_id JOIN jobs p ON p.id = d.depends_on \
         WHERE p.state <> 'succeeded' \
           AND (j.state = 'queued' OR j.state = 'running' OR j.state = 'succeeded' \
                OR (j.state = 'dead' AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id)))",
    ),
    (
        Invariant::WaitingJobNotCancelled,
        "SELECT count(DISTINCT d.job_id), CAST(min(d.job_id) AS TEXT) FROM job_dependencies d \
         JOIN jobs j ON j.id = d.job_id JOIN jobs p ON p.id = d.depends_on \
         WHERE j.state = 'waiting' AND (p.state = 'dead' OR p.state = 'cancelled')",
    ),
];

/// The file's report, on one of its reader connections.
pub(crate) fn report(store: &SqliteStore) -> Result<VerifyReport> {
    let (version, how, findings) = store.read(verify)?;
    Ok(verify::report(
        &store.location,
        EngineKind::Sqlite,
        version,
        how,
        findings,
    ))
}

/// Checks the file `conn` reads, in one snapshot: (its schema version,
/// what its integrity check was, the findings).
fn verify(conn: &Connection) -> Result<(i64, String, Findings)> {
    in_snapshot(conn, |conn| {
        let mut findings: Findings = Vec::new();
        let messages = integrity(conn)?;
        findings.push((
            Invariant::IntegrityCheck,
            messages.len() as u64,
            messages.into_iter().next(),
        ));
        let (n, example) = foreign_keys(conn)?;
        findings.push((Invariant::ForeignKeys, n, example));
        let version = schema::read_version(conn)?;
        let wrong = version != schema::SCHEMA_VERSION;
        findings.push((
            Invariant::SchemaVersion,
            u64::from(wrong),
            wrong.then(|| version.to_string()),
        ));
        for (inv, sql) in CHECKS.into_iter().chain(verify::SHARED_CHECKS) {
            let (n, example): (i64, Option<String>) =
                conn.query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
            findings.push((inv, n as u64, example));
        }
        let how = "SQLite's integrity_check (its first 100 messages at most) and \
                   foreign_key_check"
            .to_string();
        Ok((version, how, findings))
    })
}

/// `PRAGMA integrity_check`'s messages; none when it says `ok`.
fn integrity(conn: &Connection) -> Result<Vec<String>> {
    let mut st = conn.prepare(INTEGRITY_CHECK)?;
    let lines = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(lines.into_iter().filter(|l| l != "ok").collect())
}

/// Rows whose foreign key names no row, and one as `<table> <rowid>`.
fn foreign_keys(conn: &Connection) -> Result<(u64, Option<String>)> {
    let mut st = conn.prepare("PRAGMA foreign_key_check")?;
    let mut rows = st.query([])?;
    let (mut n, mut example) = (0u64, None);
    while let Some(r) = rows.next()? {
        n += 1;
        if example.is_none() {
            let table: String = r.get(0)?;
            let rowid: Option<i64> = r.get(1)?;
            let parent: String = r.get(2)?;
            example = Some(format!(
                "{table} {} (names no row of {parent})",
                rowid.map_or("?".into(), |id| id.to_string())
            ));
        }
    }
    Ok((n, example))
}
