//! The PostgreSQL engine: a queue in a database that several machines
//! share (`Queue<Postgres>`, opened with a URL). The same tables as the
//! file (`postgres.sql`), the same guarantees: dedup at the door by the
//! unique key, the ledger row first in a run's transaction, claims with
//! `FOR UPDATE SKIP LOCKED` fenced on the attempt, leases on the server's
//! clock, `LISTEN/NOTIFY` wake-ups with polling as the fallback. A handler
//! gets a [`PgJobTx`]; `Queue::write` a [`PgWriteTx`].
//!
//! ```no_run
//! use litejob::postgres::Postgres;
//! use litejob::{Queue, QueueOptions};
//! let queue = Queue::<Postgres>::open_with("postgres://app@db/app", QueueOptions::default())?;
//! # Ok::<(), litejob::Error>(())
//! ```

// Inside, the files the file's engine has for the same concerns: the
// store (`store`: the pool and the notifier thread; `operations`: the
// driver's `Store` on it), the schema and its migrations, a module per
// table or concern with its named statements (`enqueue`, `claim`, `run`,
// `leases`, `ledger`, `history`, `outbox`, `controls` (also the claim of
// a limited queue under its row's lock), `admin`, `reads`, `reports`,
// `tally`, `schedules`, `steps`, `workflow`, `copy`, `verify`), the
// transactions user code gets (`tx`), and the workers (`pipeline/`, which
// claim for themselves). PostgreSQL's own: `session` (how connections
// open), `conn` (a connection), `stmt` (its statements), `pool`,
// `errors`, `reach` (one thread tries while the server is away),
// `pooler`, `tls`, `group` (concurrent enqueues in one statement),
// `notify` (wake-ups and the server's clock). Every queue table is
// written only through these.

pub(crate) mod admin;
pub(crate) mod claim;
pub(crate) mod conn;
pub(crate) mod controls;
pub(crate) mod copy;
pub(crate) mod enqueue;
pub(crate) mod errors;
pub(crate) mod group;
pub(crate) mod history;
pub(crate) mod leases;
pub(crate) mod ledger;
pub(crate) mod notify;
pub(crate) mod operations;
pub(crate) mod outbox;
pub(crate) mod pipeline;
pub(crate) mod pool;
pub(crate) mod pooler;
pub(crate) mod reach;
pub(crate) mod reads;
pub(crate) mod reports;
pub(crate) mod run;
pub(crate) mod schedules;
pub(crate) mod schema;
pub(crate) mod session;
pub(crate) mod steps;
pub(crate) mod stmt;
pub(crate) mod store;
pub(crate) mod tally;
pub(crate) mod tls;
pub(crate) mod tx;
pub(crate) mod verify;
pub(crate) mod workflow;

use crate::core::options::{EngineKind, QueueOptions};
use crate::core::time::Millis;
use crate::core::validate::EnqueueRules;
use crate::driver::pipeline::{Launched, Shared};
use crate::driver::schedules::SlotTx;
use crate::error::Result;

pub use tx::{PgJobTx, PgWriteTx};

/// The PostgreSQL engine: a queue in a database that several machines
/// share (`Queue<Postgres>`, opened with a URL). Its handlers get a
/// [`PgJobTx`], which derefs to a `postgres::Transaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Postgres {}

impl crate::driver::sealed::Sealed for Postgres {}

// The hidden items name the crate's own store and pipeline types (see
// `Engine`).
#[allow(private_interfaces, private_bounds)]
impl crate::driver::Engine for Postgres {
    type JobTx<'a, 't>
        = tx::PgJobTx<'a, 't>
    where
        't: 'a;
    type Location = str;
    const KIND: EngineKind = EngineKind::Postgres;
    type Store = store::PgStore;

    fn open(url: &str, opts: &QueueOptions) -> Result<store::PgStore> {
        if opts.read_only {
            store::PgStore::open_read_only(url, opts)
        } else {
            store::PgStore::open(url, opts)
        }
    }

    fn start(shared: std::sync::Arc<Shared<Postgres>>) -> Result<Launched> {
        pipeline::start(shared)
    }

    fn drain(
        shared: std::sync::Arc<Shared<Postgres>>,
    ) -> Result<Box<dyn crate::driver::pipeline::DrainJobs>> {
        Ok(Box::new(pipeline::drain(shared)))
    }

    fn in_slot_tx<R, F>(
        store: &store::PgStore,
        rules: std::sync::Arc<EnqueueRules>,
        now: Millis,
        f: F,
    ) -> Result<(R, bool)>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn SlotTx) -> Result<R> + Send + 'static,
    {
        store.writable()?;
        store.handle().write(&rules, now, |tx| f(tx))
    }
}

impl<P, F> crate::driver::handler::ApplyFn<Postgres, P> for F
where
    F: Fn(
            &mut tx::PgJobTx<'_, '_>,
            P,
        )
            -> std::result::Result<crate::core::handler::Outcome, crate::core::handler::HandlerError>
        + Send
        + Sync,
{
    fn call<'a, 't: 'a>(
        &self,
        tx: &mut tx::PgJobTx<'a, 't>,
        p: P,
    ) -> std::result::Result<crate::core::handler::Outcome, crate::core::handler::HandlerError>
    {
        self(tx, p)
    }
}

// Inline rather than a file of its own: the SQL check of the sources
// leaves out only the SQL inside `#[cfg(test)] mod` blocks, and this
// module's schema statements are built at run time.
#[cfg(test)]
mod testing {
    //! Test support: a fresh schema for the PostgreSQL unit tests, on the
    //! server `LITEJOB_TEST_PG` names. Writes every table's definition in it.

    use super::conn::PgConn;
    use super::schema;

    /// A fresh schema with litejob's tables on the server `LITEJOB_TEST_PG`
    /// names, for unit tests; dropped with the guard. The tests that call it
    /// are ignored unless the variable was set when they were built.
    pub(crate) fn test_schema() -> TestSchema {
        let base = pg_base();
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
        schema::migrate(&mut t.connect()).unwrap();
        t
    }

    /// The server `LITEJOB_TEST_PG` names.
    pub(crate) fn pg_base() -> String {
        std::env::var("LITEJOB_TEST_PG")
            .ok()
            .filter(|u| !u.is_empty())
            .expect("LITEJOB_TEST_PG was set when the tests were built and is not now")
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
            PgConn::direct(postgres::Client::connect(&self.url, postgres::NoTls).unwrap())
        }
    }

    impl Drop for TestSchema {
        fn drop(&mut self) {
            if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
            }
        }
    }
}

#[cfg(test)]
pub(crate) use testing::{pg_base, test_schema};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::SCHEMA_VERSION;
    use crate::error::Error;
    use store::PgStore;

    /// Under `CI` the PostgreSQL unit tests run: built without a server
    /// named, they are reported ignored, and CI must not pass on that.
    #[test]
    #[cfg(not(litejob_test_pg))]
    fn under_ci_the_postgres_unit_tests_are_built_with_a_server() {
        assert!(
            std::env::var_os("CI").is_none(),
            "LITEJOB_TEST_PG was not set when the tests were built under CI: \
             .ci/run should have started PostgreSQL"
        );
    }

    #[test]
    #[cfg_attr(
        not(litejob_test_pg),
        ignore = "needs PostgreSQL: LITEJOB_TEST_PG=postgres://… when the tests are built"
    )]
    fn a_read_only_stores_sessions_have_the_server_refuse_any_write() {
        let base = pg_base();
        let schema = format!("read_only_{}", std::process::id());
        let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            ))
            .unwrap();
        // Dropped however the test ends.
        struct Cleanup(String, String);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                if let Ok(mut c) = postgres::Client::connect(&self.0, postgres::NoTls) {
                    let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.1));
                }
            }
        }
        let _cleanup = Cleanup(base.clone(), schema.clone());
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        drop(PgStore::open(&url, &QueueOptions::default()).unwrap());
        let store = PgStore::open_read_only(&url, &QueueOptions::default()).unwrap();
        // Past the library's own checks, straight to a pooled connection:
        // the session refuses, and the refusal reads as ReadOnly.
        let insert = store.with_conn(false, |c| {
            c.execute(
                "INSERT INTO litejob_schema (version) VALUES ($1)",
                &[&SCHEMA_VERSION],
            )
        });
        assert!(matches!(&insert, Err(Error::ReadOnly(_))), "{insert:?}");
        let in_tx = store.with_conn(false, |c| {
            let mut tx = c.begin().map_err(conn::read_err)?;
            tx.batch_execute("DELETE FROM litejob_schema")
                .map_err(conn::write_err)?;
            tx.commit().map_err(conn::write_err)
        });
        assert!(matches!(&in_tx, Err(Error::ReadOnly(_))), "{in_tx:?}");
        let rows: i64 = admin
            .query_one(
                &format!("SELECT count(*) FROM {schema}.litejob_schema"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(rows, 1);
    }

    /// A botched manual migration (a NOT NULL dropped and a NULL written,
    /// a column's type changed) leaves rows the library cannot read: the
    /// reads of them answer an error that names the row and the column,
    /// and the process goes on.
    #[test]
    #[cfg_attr(
        not(litejob_test_pg),
        ignore = "needs PostgreSQL: LITEJOB_TEST_PG=postgres://… when the tests are built"
    )]
    fn a_row_the_library_cannot_read_is_an_error_naming_row_and_column() {
        use crate::core::job::JobFilter;
        use crate::driver::Store;
        let schema = test_schema();
        let store = PgStore::open(&schema.url, &QueueOptions::default()).unwrap();
        let mut c = schema.connect();
        let mut alter = |sql: &str| c.client.batch_execute(sql).unwrap();
        alter(
            "INSERT INTO jobs (id, kind, idempotency_key, payload, run_at, created_at) \
             VALUES (42, 'k', 'a', '{}', 0, 0)",
        );
        assert_eq!(store.job(42).unwrap().unwrap().priority, 0);

        alter(
            "ALTER TABLE jobs ALTER COLUMN priority DROP NOT NULL; \
             UPDATE jobs SET priority = NULL WHERE id = 42",
        );
        let unreadable = |r: Result<()>, words: &[&str]| {
            let e = r.unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, Error::Internal(_)), "{msg}");
            for w in words {
                assert!(msg.contains(w), "{w:?} not in {msg:?}");
            }
        };
        let null = ["jobs row 42", "column 6 (priority)", "NULL"];
        unreadable(store.job(42).map(drop), &null);
        unreadable(store.job_by_key("a").map(drop), &null);
        unreadable(store.jobs(&JobFilter::default()).map(drop), &null);
        unreadable(store.job_detail(42).map(drop), &null);
        unreadable(store.explain("a").map(drop), &null);

        alter(
            "UPDATE jobs SET priority = 0 WHERE id = 42; \
             ALTER TABLE jobs ALTER COLUMN current_attempt TYPE text",
        );
        // A process started after that migration (the connections of one
        // running through it keep their prepared statements, which the
        // server refuses once a result type changed).
        drop(store);
        let store = PgStore::open(&schema.url, &QueueOptions::default()).unwrap();
        unreadable(
            store.job(42).map(drop),
            &["jobs row 42", "column 17 (current_attempt)", "text"],
        );
        // The store still serves what it can read.
        assert!(store.stats(store.now()).is_ok());
    }
}
