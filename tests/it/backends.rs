//! The behaviour suite both backends share: every test written with
//! `both!` (here in `backends/`, and across `enqueue/`, `runtime/`,
//! `outbox.rs` and `cli/`) runs once on a SQLite file and once on
//! PostgreSQL, through the public API and the real binary, and checks the
//! database with plain SQL; and once more on PostgreSQL through a
//! transaction pooler (pgbouncer, `suite::pgbouncer`), where litejob's URL
//! goes through the pooler while the test's own SQL connects directly.
//! This file is its support: the test's queue, its SQL on either engine,
//! and handlers written once for both.
//!
//! PostgreSQL is the server `LITEJOB_TEST_PG` names (a URL to a database
//! the tests may create schemas in), or else the throwaway cluster the test
//! process starts (`suite::cluster`); each test gets a schema of its own,
//! dropped afterwards. Where neither can be had, the PostgreSQL half of a
//! test is reported ignored, with why (under `CI` it fails).

mod admin;
mod cancel;
pub(crate) mod child;
mod controls;
mod faults;
mod migrations;
mod partitions;
mod processes;
mod schedules;
mod timeouts;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use litejob::admin::AnyQueue;
use litejob::pg::{Client, NoTls};
use litejob::postgres::Postgres;
use litejob::sqlite::Sqlite;
use litejob::{EffectContext, HandlerError, JobContext, Outcome, QueueOptions, RuntimeBuilder};
use serde_json::Value;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The server the PostgreSQL tests use. Panics when there is none: a test
/// that uses PostgreSQL declares `#[needs(Postgres)]`, and is ignored (or,
/// under `CI`, failed) before it starts when the server is missing.
pub fn pg_base_url() -> &'static str {
    crate::suite::Need::Postgres.require();
    crate::suite::cluster::base_url().expect("checked")
}

/// A queue location for one test: a file in a temporary directory, or a
/// PostgreSQL schema of its own (dropped on drop).
pub struct TestQueue {
    pub engine: Engine,
    /// `--db`: the file's path, or the URL naming the schema (through the
    /// pooler when [`TestQueue::pooled`]).
    pub location: String,
    /// Whether `location` goes through a transaction pooler (pgbouncer in
    /// `pool_mode = transaction`, in front of the same server).
    pub pooled: bool,
    /// Where plain SQL connects (the test's checks, an application's own
    /// connection, another program's): `location`, except through a
    /// pooler, where it is the server's own URL naming the same schema (a
    /// plain client cannot pass the URL's `options` through pgbouncer).
    pub sql_location: String,
    _dir: Option<tempfile::TempDir>,
    schema: Option<(String, String)>,
    /// The connection [`TestQueue::exec`] and the reads use on PostgreSQL,
    /// opened once.
    pg: Mutex<Option<Client>>,
}

impl TestQueue {
    /// A fresh location on `engine`.
    pub fn new(engine: Engine) -> TestQueue {
        // The library's log lines, with `RUST_LOG`, under the test's output.
        let _ = env_logger::builder()
            .parse_env(env_logger::Env::default().default_filter_or("litejob=off"))
            .is_test(true)
            .try_init();
        match engine {
            Engine::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let location = dir.path().join("test.db").display().to_string();
                TestQueue {
                    engine,
                    sql_location: location.clone(),
                    location,
                    pooled: false,
                    _dir: Some(dir),
                    schema: None,
                    pg: Mutex::new(None),
                }
            }
            Engine::Postgres => TestQueue::on_postgres(false),
        }
    }

    /// A fresh PostgreSQL schema that litejob reaches through the tests'
    /// transaction pooler (the test declares `#[needs(Pgbouncer)]`); the
    /// test's own SQL still connects directly.
    pub fn through_pooler() -> TestQueue {
        TestQueue::on_postgres(true)
    }

    fn on_postgres(pooled: bool) -> TestQueue {
        let base = pg_base_url().to_string();
        static N: AtomicU64 = AtomicU64::new(0);
        let schema = format!(
            "t_{}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            crate::support::Rng::new(crate::support::now_ms() as u64).next_u64() % 100_000
        );
        let mut c = Client::connect(&base, NoTls)
            .unwrap_or_else(|e| panic!("the test server {base} does not answer: {e}"));
        c.batch_execute(&format!("CREATE SCHEMA {schema}")).unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let sql_location = format!("{base}{sep}options=-csearch_path%3D{schema}");
        let location = if pooled {
            crate::suite::pgbouncer::pooled_url_for(&sql_location)
        } else {
            sql_location.clone()
        };
        TestQueue {
            engine: Engine::Postgres,
            location,
            pooled,
            sql_location,
            _dir: None,
            schema: Some((base, schema)),
            pg: Mutex::new(None),
        }
    }

    /// Opens the queue with the default options.
    pub fn open(&self) -> AnyQueue {
        self.open_with(QueueOptions::default())
    }

    /// Opens the queue with `opts`.
    pub fn open_with(&self, opts: QueueOptions) -> AnyQueue {
        AnyQueue::open_with(&self.location, opts).expect("open queue")
    }

    /// Runs `sql` (statements without results) as an operator would.
    pub fn exec(&self, sql: &str) {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                c.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
                c.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Engine::Postgres => {
                if let Err(e) = self.pg(|c| c.batch_execute(sql)) {
                    // Out of a transaction the statements left open, which
                    // would hold its locks.
                    let _ = self.pg(|c| c.batch_execute("ROLLBACK"));
                    panic!("{sql}: {e}");
                }
            }
        }
    }

    /// A single integer from `sql` (`SELECT count(*) ...`), as plain SQL
    /// reads it; the SQL must read the same on both engines.
    pub fn count(&self, sql: &str) -> i64 {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                c.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
                c.query_row(sql, [], |r| r.get(0))
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
            Engine::Postgres => {
                let r = self
                    .pg(|c| c.query_one(sql, &[]))
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                // count(*) is bigint; a sum may be numeric.
                r.try_get::<_, i64>(0)
                    .or_else(|_| r.try_get::<_, Option<i64>>(0).map(|v| v.unwrap_or(0)))
                    .unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
        }
    }

    /// One text column of every row of `sql`.
    pub fn strings(&self, sql: &str) -> Vec<String> {
        match self.engine {
            Engine::Sqlite => {
                let c = rusqlite::Connection::open(&self.location).unwrap();
                let mut st = c.prepare(sql).unwrap();
                let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
                rows.collect::<rusqlite::Result<_>>().unwrap()
            }
            Engine::Postgres => self
                .pg(|c| c.query(sql, &[]))
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect(),
        }
    }

    /// Runs `f` on the test's own connection to the schema, opened the
    /// first time; once more on a new one if it turns out closed (the
    /// server restarted).
    fn pg<R>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<R, litejob::pg::Error>,
    ) -> Result<R, litejob::pg::Error> {
        let mut slot = self.pg.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = Some(Client::connect(&self.sql_location, NoTls)?);
        }
        let c = slot.as_mut().expect("just connected");
        match f(c) {
            Err(_) if c.is_closed() => {
                let c = slot.insert(Client::connect(&self.sql_location, NoTls)?);
                f(c)
            }
            other => other,
        }
    }

    /// Whether anything of the queue was created: the file, or a table in
    /// the schema.
    pub fn created(&self) -> bool {
        match self.engine {
            Engine::Sqlite => std::path::Path::new(&self.location).exists(),
            Engine::Postgres => {
                self.count(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema()",
                ) > 0
            }
        }
    }

    /// How far a time litejob stored may lie outside the test's own clock
    /// readings around it, in ms: none on a file; on PostgreSQL times are
    /// on the server's clock, which litejob knows to within half a round
    /// trip and the server's rounding to the millisecond.
    pub fn clock_slack_ms(&self) -> i64 {
        match self.engine {
            Engine::Sqlite => 0,
            Engine::Postgres => 2,
        }
    }

    /// Creates the application's own table `app_rows`, which
    /// [`app_handler`] writes.
    pub fn create_app_table(&self) {
        self.exec("CREATE TABLE IF NOT EXISTS app_rows (key TEXT NOT NULL, note TEXT)");
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        // Closed first: the schema is dropped from another connection.
        if let Ok(mut c) = self.pg.lock() {
            c.take();
        }
        if let Some((base, schema)) = &self.schema {
            if let Ok(mut c) = Client::connect(base, NoTls) {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            }
        }
    }
}

/// A job's transaction on either engine, as the suite's handlers use it:
/// the application's row, an outbox row, a statement of its own.
pub enum AppTx<'a, 'b, 't> {
    Sqlite(&'a mut litejob::sqlite::JobTx<'b>),
    Postgres(&'a mut litejob::postgres::PgJobTx<'b, 't>),
}

impl AppTx<'_, '_, '_> {
    /// The job this transaction runs.
    pub fn job(&self) -> &JobContext {
        match self {
            AppTx::Sqlite(t) => t.job(),
            AppTx::Postgres(t) => t.job(),
        }
    }

    /// Inserts the job's key and `note` into `app_rows`: it commits only
    /// with the run.
    pub fn record(&mut self, note: &str) -> Result<(), HandlerError> {
        self.insert_row(Some(note))
    }

    fn insert_row(&mut self, note: Option<&str>) -> Result<(), HandlerError> {
        let key = self.job().key.clone();
        match self {
            AppTx::Sqlite(t) => {
                t.execute(
                    "INSERT INTO app_rows (key, note) VALUES (?1, ?2)",
                    (&key, note),
                )?;
            }
            AppTx::Postgres(t) => {
                t.execute(
                    "INSERT INTO app_rows (key, note) VALUES ($1, $2)",
                    &[&key, &note],
                )?;
            }
        }
        Ok(())
    }

    /// The recorded result of the job's step `name` (`tx.step_output`).
    pub fn step_output<T: serde::de::DeserializeOwned>(
        &mut self,
        name: &str,
    ) -> litejob::Result<Option<T>> {
        match self {
            AppTx::Sqlite(t) => t.step_output(name),
            AppTx::Postgres(t) => t.step_output(name),
        }
    }

    /// Runs `sql` (statements without results) in the job's transaction.
    pub fn batch(&mut self, sql: &str) -> Result<(), HandlerError> {
        match self {
            AppTx::Sqlite(t) => t.execute_batch(sql)?,
            AppTx::Postgres(t) => t.batch_execute(sql)?,
        }
        Ok(())
    }

    /// Adds an outbox row (see `JobTx::outbox`).
    pub fn outbox(
        &mut self,
        kind: &str,
        key: &str,
        payload: &impl serde::Serialize,
    ) -> litejob::Result<(i64, bool)> {
        match self {
            AppTx::Sqlite(t) => t.outbox(kind, key, payload),
            AppTx::Postgres(t) => t.outbox(kind, key, payload),
        }
    }

    /// A dependency's result (see `JobTx::dependency_output`).
    pub fn dependency_output<T: serde::de::DeserializeOwned>(
        &mut self,
        key: &str,
    ) -> litejob::Result<Option<T>> {
        match self {
            AppTx::Sqlite(t) => t.dependency_output(key),
            AppTx::Postgres(t) => t.dependency_output(key),
        }
    }
}

/// A runtime builder on either engine, as the suite's tests build their
/// runtimes: the settings go to the engine's own builder, and a handler
/// written once against [`AppTx`] gets the engine's transaction.
pub enum TestBuilder {
    Sqlite(RuntimeBuilder<Sqlite>),
    Postgres(RuntimeBuilder<Postgres>),
}

/// The same call on whichever builder it is.
macro_rules! each {
    ($self:expr, $b:ident => $e:expr) => {
        match $self {
            TestBuilder::Sqlite($b) => TestBuilder::Sqlite($e),
            TestBuilder::Postgres($b) => TestBuilder::Postgres($e),
        }
    };
}

impl TestBuilder {
    pub fn workers(self, n: usize) -> Self {
        each!(self, b => b.workers(n))
    }
    pub fn effect_workers(self, n: usize) -> Self {
        each!(self, b => b.effect_workers(n))
    }
    pub fn lease(self, d: std::time::Duration) -> Self {
        each!(self, b => b.lease(d))
    }
    pub fn poll_interval(self, d: std::time::Duration) -> Self {
        each!(self, b => b.poll_interval(d))
    }
    pub fn retention(self, keep: litejob::Retention) -> Self {
        each!(self, b => b.retention(keep.clone()))
    }
    pub fn grace_period(self, d: std::time::Duration) -> Self {
        each!(self, b => b.grace_period(d))
    }
    pub fn max_abandoned(self, n: u32) -> Self {
        each!(self, b => b.max_abandoned(n))
    }
    pub fn backoff(self, x: litejob::Backoff) -> Self {
        each!(self, b => b.backoff(x))
    }
    pub fn effect_backoff(self, x: litejob::Backoff) -> Self {
        each!(self, b => b.effect_backoff(x))
    }
    pub fn outbox_max_retries(self, n: u32) -> Self {
        each!(self, b => b.outbox_max_retries(n))
    }
    pub fn claim_ahead(self, n: usize) -> Self {
        each!(self, b => b.claim_ahead(n))
    }
    pub fn job_timeout(self, d: std::time::Duration) -> Self {
        each!(self, b => b.job_timeout(d))
    }
    pub fn kind_timeout(self, kind: &str, d: std::time::Duration) -> Self {
        each!(self, b => b.kind_timeout(kind, d))
    }
    pub fn queues<I: IntoIterator<Item = S>, S: Into<String>>(self, queues: I) -> Self {
        each!(self, b => b.queues(queues))
    }
    pub fn effect<T, F>(self, kind: impl Into<String>, f: F) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(&EffectContext, T) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        each!(self, b => b.effect(kind, f))
    }
    pub fn schedule(
        self,
        name: impl Into<String>,
        cron: impl Into<String>,
        kind: impl Into<String>,
        payload: &impl serde::Serialize,
    ) -> Self {
        each!(self, b => b.schedule(name, cron, kind, payload))
    }
    pub fn schedule_with(self, s: litejob::Schedule) -> Self {
        each!(self, b => b.schedule_with(s))
    }
    pub fn start(self) -> litejob::Result<litejob::Runtime> {
        match self {
            TestBuilder::Sqlite(b) => b.start(),
            TestBuilder::Postgres(b) => b.start(),
        }
    }
    pub fn drain(self) -> litejob::Result<litejob::Drained> {
        match self {
            TestBuilder::Sqlite(b) => b.drain(),
            TestBuilder::Postgres(b) => b.drain(),
        }
    }
    /// Registers the handler of `kind`, written once for both engines.
    pub fn handler<T, F>(self, kind: &str, f: F) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(&mut AppTx<'_, '_, '_>, T) -> Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        match self {
            TestBuilder::Sqlite(b) => {
                TestBuilder::Sqlite(b.handler(kind, move |tx, p: T| f(&mut AppTx::Sqlite(tx), p)))
            }
            TestBuilder::Postgres(b) => TestBuilder::Postgres(
                b.handler(kind, move |tx, p: T| f(&mut AppTx::Postgres(tx), p)),
            ),
        }
    }
    /// [`TestBuilder::handler`] with a prepare step, run outside the job's
    /// transaction.
    pub fn handler_with_prepare<T, P, Prep, App>(
        self,
        kind: &str,
        prepare: Prep,
        apply: App,
    ) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        P: Send + 'static,
        Prep: Fn(&JobContext, T) -> Result<P, HandlerError> + Send + Sync + 'static,
        App: Fn(&mut AppTx<'_, '_, '_>, P) -> Result<Outcome, HandlerError> + Send + Sync + 'static,
    {
        match self {
            TestBuilder::Sqlite(b) => {
                TestBuilder::Sqlite(b.handler_with_prepare(kind, prepare, move |tx, p: P| {
                    apply(&mut AppTx::Sqlite(tx), p)
                }))
            }
            TestBuilder::Postgres(b) => {
                TestBuilder::Postgres(b.handler_with_prepare(kind, prepare, move |tx, p: P| {
                    apply(&mut AppTx::Postgres(tx), p)
                }))
            }
        }
    }
    /// Which engine it builds for.
    pub fn engine(&self) -> Engine {
        match self {
            TestBuilder::Sqlite(_) => Engine::Sqlite,
            TestBuilder::Postgres(_) => Engine::Postgres,
        }
    }
}

/// `runtime()` on a queue of either engine, for the suite; and the queue
/// as its engine's own, for what differs between them (the application's
/// transactions).
pub trait Runtimes {
    fn runtime(&self) -> TestBuilder;
    /// The queue on a file (the test runs on SQLite).
    fn file(&self) -> &litejob::Queue<Sqlite>;
    /// The queue on PostgreSQL (the test runs on PostgreSQL).
    fn pg(&self) -> &litejob::Queue<Postgres>;
}

impl Runtimes for AnyQueue {
    fn runtime(&self) -> TestBuilder {
        match self {
            AnyQueue::Sqlite(q) => TestBuilder::Sqlite(q.runtime()),
            AnyQueue::Postgres(q) => TestBuilder::Postgres(q.runtime()),
            _ => unreachable!("an engine the suite does not know"),
        }
    }
    fn file(&self) -> &litejob::Queue<Sqlite> {
        match self {
            AnyQueue::Sqlite(q) => q,
            _ => panic!("the queue is not a file"),
        }
    }
    fn pg(&self) -> &litejob::Queue<Postgres> {
        match self {
            AnyQueue::Postgres(q) => q,
            _ => panic!("the queue is not on PostgreSQL"),
        }
    }
}

/// Registers on `b` the handler of `kind`, written once for both engines.
pub fn handler<T, F>(b: TestBuilder, kind: &str, f: F) -> TestBuilder
where
    T: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&mut AppTx<'_, '_, '_>, T) -> Result<Outcome, HandlerError> + Send + Sync + 'static,
{
    b.handler(kind, f)
}

/// [`handler`] with a prepare step, run outside the job's transaction.
pub fn handler_with_prepare<T, P, Prep, App>(
    b: TestBuilder,
    kind: &str,
    prepare: Prep,
    apply: App,
) -> TestBuilder
where
    T: serde::de::DeserializeOwned + Send + 'static,
    P: Send + 'static,
    Prep: Fn(&JobContext, T) -> Result<P, HandlerError> + Send + Sync + 'static,
    App: Fn(&mut AppTx<'_, '_, '_>, P) -> Result<Outcome, HandlerError> + Send + Sync + 'static,
{
    b.handler_with_prepare(kind, prepare, apply)
}

/// Registers on `b` the handler of `kind` for `engine`: inside the job's
/// transaction it inserts the job's key into `app_rows`, then returns what
/// `decide` says. The row commits only with the run.
pub fn app_handler(
    engine: Engine,
    b: TestBuilder,
    kind: &str,
    decide: impl Fn(&JobContext, &Value) -> Result<Outcome, HandlerError> + Send + Sync + 'static,
) -> TestBuilder {
    assert_eq!(engine, b.engine(), "the queue is not on {engine:?}");
    handler(b, kind, move |tx, p: Value| {
        tx.insert_row(None)?;
        decide(tx.job(), &p)
    })
}

/// A handler that writes its row and says `Done`.
pub fn done(_: &JobContext, _: &Value) -> Result<Outcome, HandlerError> {
    Ok(Outcome::Done)
}

/// Declares a test that runs once per backend: `both! { fn name(q) { .. } }`
/// makes `name::sqlite`, `name::postgres` and `name::postgres_pooled` (on
/// PostgreSQL, litejob's URL through the tests' transaction pooler), each
/// handing the body a fresh [`TestQueue`]. `#[needs(..)]` after the doc
/// comment adds needs to every case (the PostgreSQL ones need PostgreSQL
/// anyway, the pooled one pgbouncer too). `#[not_pooled("why")]` after
/// that makes no pooled case, for a test that cannot run through a
/// transaction pooler; the reason stays in the source.
#[macro_export]
macro_rules! both {
    (
        $(#[doc = $doc:literal])*
        $(#[needs($($need:ident),+ $(,)?)])?
        $(#[not_pooled($why:literal)])?
        fn $name:ident($q:ident) $body:block
    ) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn test_body($q: &$crate::backends::TestQueue) $body
            fn sqlite() {
                test_body(&$crate::backends::TestQueue::new($crate::backends::Engine::Sqlite))
            }
            fn postgres() {
                test_body(&$crate::backends::TestQueue::new($crate::backends::Engine::Postgres))
            }
            $crate::register_test!(sqlite, [$($($need),+)?]);
            $crate::register_test!(postgres, [$($($need),+ ,)? Postgres]);
            $crate::both!(@pooled [$($why)?] [$($($need),+)?]);
        }
    };
    (@pooled [] [$($need:ident),*]) => {
        fn postgres_pooled() {
            test_body(&$crate::backends::TestQueue::through_pooler())
        }
        $crate::register_test!(postgres_pooled, [$($need,)* Postgres, Pgbouncer]);
    };
    (@pooled [$why:literal] [$($need:ident),*]) => {
        /// Why this test has no case through a transaction pooler.
        #[allow(dead_code)]
        const NOT_POOLED: &str = $why;
    };
}
