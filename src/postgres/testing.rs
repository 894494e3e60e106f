//! Test support: a fresh schema for the PostgreSQL unit tests, on the
//! server `LITEJOB_TEST_PG` names. Writes every table's definition in it.

use super::conn::PgConn;
use super::schema;

/// A fresh schema with litejob's tables on the server `LITEJOB_TEST_PG`
/// names, for unit tests; dropped with the guard. None when the variable is
/// not set (outside CI, where it must be).
pub(crate) fn test_schema() -> Option<TestSchema> {
    let Some(base) = std::env::var("LITEJOB_TEST_PG")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "LITEJOB_TEST_PG is not set in CI: .ci/run should have started PostgreSQL"
        );
        eprintln!("LITEJOB_TEST_PG is not set: this PostgreSQL test did not run");
        return None;
    };
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "unit_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{name}");
    let t = TestSchema { base, name, url };
    schema::migrate(&mut t.connect().client).unwrap();
    Some(t)
}

/// See [`test_schema`].
pub(crate) struct TestSchema {
    base: String,
    name: String,
    /// A URL whose search path is the schema.
    pub url: String,
}

impl TestSchema {
    /// A new connection in the schema.
    pub(crate) fn connect(&self) -> PgConn {
        PgConn::new(postgres::Client::connect(&self.url, postgres::NoTls).unwrap())
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}
