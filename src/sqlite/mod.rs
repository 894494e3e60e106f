//! The SQLite engine: a queue in one file, its one writer thread and its
//! reader pool, and its own job pipeline on that writer.

pub(crate) mod admin;
pub(crate) mod checkpoint;
pub(crate) mod claim;
pub(crate) mod controls;
pub(crate) mod db;
pub(crate) mod enqueue;
pub(crate) mod history;
pub(crate) mod ledger;
pub(crate) mod outbox;
pub(crate) mod pipeline;
pub(crate) mod reads;
pub(crate) mod reports;
pub(crate) mod run;
pub(crate) mod schedules;
pub(crate) mod schema;
#[cfg(test)]
mod sql_check;
pub(crate) mod store;
pub(crate) mod tally;
pub(crate) mod tx;
pub(crate) mod writer;

/// The SQLite engine: a queue in one file ([`crate::Queue::open`]). Its
/// handlers get a [`crate::JobTx`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sqlite {}

impl crate::driver::sealed::Sealed for Sqlite {}

impl crate::driver::Engine for Sqlite {
    type JobTx<'a, 't>
        = tx::JobTx<'a>
    where
        't: 'a;
    const KIND: crate::driver::BackendKind = crate::driver::BackendKind::Sqlite;
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
