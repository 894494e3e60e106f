//! A file's side of `verify` ([`verify`]): SQLite's own checks (`PRAGMA
//! integrity_check`, `PRAGMA foreign_key_check`), the schema version, and
//! the core's query for each cross-table invariant of
//! [`crate::core::reports::verify`], all in one read snapshot. Writes no
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
        for (inv, sql) in verify::CHECKS {
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
