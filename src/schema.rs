//! The schema: embeds `schema.sql`, reads and checks `PRAGMA user_version`,
//! and migrates an older file. Writes every table's definition, no rows.

use rusqlite::Connection;

use crate::error::{Error, Result};

/// The whole current schema, as shipped in `schema.sql` at the repository root.
pub(crate) const SCHEMA_SQL: &str = include_str!("../schema.sql");

/// The schema version this binary writes and understands (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// Steps from an older version: `MIGRATIONS[i]` takes version `i + 1` to
/// `i + 2`. A new file (version 0) gets `SCHEMA_SQL` in one go instead. When
/// the schema changes, edit `schema.sql`, add the step here and bump
/// `SCHEMA_VERSION`; the test `migrations_reach_schema_sql` checks both agree.
const MIGRATIONS: &[&str] = &[];

/// Reads `PRAGMA user_version` without writing anything.
pub(crate) fn read_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Refuses a file whose schema is newer than this binary, before anything
/// is written to it.
pub(crate) fn check_not_newer(conn: &Connection) -> Result<i64> {
    let found = read_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < 0 {
        return Err(Error::NotADatabase(format!(
            "user_version {found} is not a litejob schema version"
        )));
    }
    Ok(found)
}

/// Brings the file to `SCHEMA_VERSION`. Runs in one `BEGIN IMMEDIATE`
/// transaction so two processes opening a new file at once cannot both
/// create it; the version is read again under the lock.
pub(crate) fn migrate(conn: &mut Connection) -> Result<i64> {
    if read_version(conn)? == SCHEMA_VERSION {
        return Ok(SCHEMA_VERSION);
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let found = check_not_newer(&tx)?;
    if found == 0 {
        tx.execute_batch(SCHEMA_SQL)?;
    } else {
        for step in &MIGRATIONS[(found - 1) as usize..] {
            tx.execute_batch(step)?;
        }
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_reach_schema_sql() {
        assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION - 1);
        let mut c = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut c).unwrap(), SCHEMA_VERSION);
        assert_eq!(read_version(&c).unwrap(), SCHEMA_VERSION);
        // Migrating twice is a no-op.
        assert_eq!(migrate(&mut c).unwrap(), SCHEMA_VERSION);
    }
}
