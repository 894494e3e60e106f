//! The SQLite engine, the default: a queue in one file (`Queue`, opened
//! with a path), shared by the processes of one machine. A handler gets a
//! [`JobTx`], `Queue::write` a [`WriteTx`]; an application's own
//! connection opens its write transactions with [`immediate`].

// Inside, the files PostgreSQL's engine has for the same concerns: the
// store (`store`: the file's writer and its reader pool; `operations`:
// the driver's `Store` on it), the schema and its migrations, a module
// per table or concern with its named statements (`enqueue`, `claim`,
// `run`, `leases`, `ledger`, `history`, `outbox`, `controls`, `admin`,
// `reads`, `reports`, `tally`, `schedules`, `steps`, `workflow`, `copy`,
// `verify`), the transactions user code gets (`tx`), and the job pipeline
// on the writer (`pipeline/`). The file's own: its one writer thread
// (`writer/`, group commit and the WAL's fsync), its connections and
// reader pool (`db`), checkpoints (`checkpoint`), a consistent copy of
// the file (`backup`). Every queue table is written only through these,
// on the writer (a copy into a new file, on a connection of its own).

pub use db::immediate;
pub use tx::{JobTx, WriteTx};

use crate::core::options::{EngineKind, QueueOptions};
use crate::core::time::Millis;
use crate::core::validate::EnqueueRules;
use crate::driver::pipeline::{Launched, Shared};
use crate::driver::schedules::SlotTx;
use crate::error::Result;

pub(crate) mod admin;
pub(crate) mod backup;
pub(crate) mod checkpoint;
pub(crate) mod claim;
pub(crate) mod controls;
#[cfg(feature = "postgres")]
pub(crate) mod copy;
pub(crate) mod db;
pub(crate) mod enqueue;
pub(crate) mod history;
pub(crate) mod leases;
pub(crate) mod ledger;
pub(crate) mod operations;
pub(crate) mod outbox;
pub(crate) mod pipeline;
pub(crate) mod reads;
pub(crate) mod reports;
pub(crate) mod run;
pub(crate) mod schedules;
pub(crate) mod schema;
pub(crate) mod steps;
pub(crate) mod store;
pub(crate) mod tally;
pub(crate) mod tx;
pub(crate) mod verify;
pub(crate) mod workflow;
pub(crate) mod writer;

/// The SQLite engine: a queue in one file ([`crate::queue::Queue::open`]). Its
/// handlers get a [`crate::sqlite::tx::JobTx`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sqlite {}

impl crate::driver::sealed::Sealed for Sqlite {}

// The hidden items name the crate's own store and pipeline types (see
// `Engine`).
#[allow(private_interfaces, private_bounds)]
impl crate::driver::Engine for Sqlite {
    type JobTx<'a, 't>
        = tx::JobTx<'a>
    where
        't: 'a;
    type Location = std::path::Path;
    const KIND: EngineKind = EngineKind::Sqlite;
    type Store = store::SqliteStore;

    fn open(path: &std::path::Path, opts: &QueueOptions) -> Result<store::SqliteStore> {
        if opts.read_only {
            store::SqliteStore::open_read_only(path, opts)
        } else {
            store::SqliteStore::open(path, opts)
        }
    }

    fn start(shared: std::sync::Arc<Shared<Sqlite>>) -> Result<Launched> {
        pipeline::start(shared)
    }

    fn drain(
        shared: std::sync::Arc<Shared<Sqlite>>,
    ) -> Result<Box<dyn crate::driver::pipeline::DrainJobs>> {
        Ok(Box::new(pipeline::drain::drain(shared)?))
    }

    fn in_slot_tx<R, F>(
        store: &store::SqliteStore,
        rules: std::sync::Arc<EnqueueRules>,
        now: Millis,
        f: F,
    ) -> Result<(R, bool)>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn SlotTx) -> Result<R> + Send + 'static,
    {
        store.writer()?.run(move |conn| {
            tx::in_write_tx(conn, &rules, now, |tx| {
                let mut tx = tx;
                f(&mut tx)
            })
        })
    }
}

impl<P, F> crate::driver::handler::ApplyFn<Sqlite, P> for F
where
    F: Fn(
            &mut tx::JobTx<'_>,
            P,
        )
            -> std::result::Result<crate::core::handler::Outcome, crate::core::handler::HandlerError>
        + Send
        + Sync,
{
    fn call<'a, 't: 'a>(
        &self,
        tx: &mut tx::JobTx<'a>,
        p: P,
    ) -> std::result::Result<crate::core::handler::Outcome, crate::core::handler::HandlerError>
    {
        self(tx, p)
    }
}
