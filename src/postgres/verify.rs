//! PostgreSQL's side of `verify` ([`verify`]): amcheck's `bt_index_check`
//! of litejob's indexes when the extension is installed in the database,
//! the schema version, and the core's query for each cross-table invariant
//! of [`crate::core::reports::verify`], all in one read-only REPEATABLE
//! READ snapshot. Writes no table.
//!
//! Nothing more of the storage is checked: PostgreSQL has no
//! `integrity_check`, and its data checksums (when the cluster has them)
//! are verified on every read already. The CHECK constraints and foreign
//! keys the file's check covers are enforced by the server at every write.

use postgres::error::SqlState;
use postgres::Transaction;

use super::conn::{read_err, Col, PgConn};
use super::reports::in_snapshot;
use super::store::PgStore;
use crate::core::options::EngineKind;
use crate::core::reports::verify::{self, Findings, Invariant, VerifyReport};
use crate::error::Result;

/// Where amcheck is installed, if it is.
const AMCHECK: &str = "SELECT n.nspname FROM pg_extension e \
     JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'";

/// The B-tree indexes of litejob's tables in the schema the session uses.
const INDEXES: &str = "SELECT c.oid::regclass::text FROM pg_index i \
     JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid \
     JOIN pg_am am ON am.oid = c.relam \
     WHERE t.relnamespace = current_schema()::regnamespace AND am.amname = 'btree' \
       AND t.relname IN ('jobs', 'processed_jobs', 'outbox', 'attempts', 'schedules', 'queues', \
                         'queue_starts', 'job_dependencies', 'litejob_schema') \
     ORDER BY 1";

/// The database's report, on a pooled connection.
pub(crate) fn report(store: &PgStore) -> Result<VerifyReport> {
    let (version, how, findings) = store.with_conn(true, verify)?;
    Ok(verify::report(
        &store.location,
        EngineKind::Postgres,
        version,
        how,
        findings,
    ))
}

/// Checks the database, in one snapshot: (its schema version, what its
/// integrity check was, the findings).
fn verify(c: &mut PgConn) -> Result<(i64, String, Findings)> {
    in_snapshot(c, |tx| {
        let mut findings: Findings = Vec::new();
        let (how, messages) = amcheck(tx)?;
        findings.push((
            Invariant::IntegrityCheck,
            messages.len() as u64,
            messages.into_iter().next(),
        ));
        let version: i64 = tx
            .query_one("SELECT coalesce(max(version), 0) FROM litejob_schema", &[])
            .map_err(read_err)?
            .col(0)?;
        let wrong = version != crate::core::SCHEMA_VERSION;
        findings.push((
            Invariant::SchemaVersion,
            u64::from(wrong),
            wrong.then(|| version.to_string()),
        ));
        for (inv, sql) in verify::CHECKS {
            let r = tx.query_one(sql, &[]).map_err(read_err)?;
            let (n, example): (i64, Option<String>) = (r.col(0)?, r.col(1)?);
            findings.push((inv, n as u64, example));
        }
        Ok((version, how, findings))
    })
}

/// amcheck's verdict on each index: (what was done, the corruption it
/// reported). Each index is checked under a savepoint, so a fault found in
/// one does not end the snapshot; anything but a report of corruption
/// (no permission, an index dropped meanwhile) says the check did not run.
fn amcheck(tx: &mut Transaction<'_>) -> Result<(String, Vec<String>)> {
    let Some(row) = tx.query_opt(AMCHECK, &[]).map_err(read_err)? else {
        return Ok((
            "none: amcheck is not installed in this database (CREATE EXTENSION amcheck \
             adds bt_index_check of litejob's indexes)"
                .into(),
            Vec::new(),
        ));
    };
    let schema: String = row.col(0)?;
    // Built, not a literal statement: the function lives in whichever
    // schema the extension was installed in, so it cannot be prepared
    // where amcheck is missing (the source check prepares every literal).
    let function = format!(
        "\"{}\".bt_index_check($1::text::regclass)",
        schema.replace('"', "\"\"")
    );
    let check = ["SELECT ", &function].concat();
    let indexes: Vec<String> = tx
        .query(INDEXES, &[])
        .map_err(read_err)?
        .iter()
        .map(|r| r.col(0))
        .collect::<Result<_>>()?;
    let mut corrupt = Vec::new();
    for index in &indexes {
        let mut sp = tx.transaction().map_err(read_err)?;
        match sp.query(check.as_str(), &[index]) {
            Ok(_) => sp.commit().map_err(read_err)?,
            Err(e) if e.code() == Some(&SqlState::INDEX_CORRUPTED) => {
                corrupt.push(format!("{index}: {}", db_message(&e)));
                drop(sp);
            }
            Err(e) => {
                drop(sp);
                return Ok((
                    format!("none: amcheck could not check {index}: {}", db_message(&e)),
                    corrupt,
                ));
            }
        }
    }
    Ok((
        format!(
            "amcheck: bt_index_check of {} indexes of litejob's tables",
            indexes.len()
        ),
        corrupt,
    ))
}

fn db_message(e: &postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}
