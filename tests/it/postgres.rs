//! What only PostgreSQL has: a server that can be out of reach, refuse a
//! login or go away mid-run, notifications a pooler may drop, a
//! transaction pooler in front of it (pgbouncer), several
//! machines' processes on one database (real child processes here), and
//! the move of a queue file into a database (`litejob copy`).
//!
//! The server is the shared suite's (`backends`): `LITEJOB_TEST_PG`, or a
//! cluster the test process starts. Each test gets a schema of its own.
//! Without a server the tests are reported ignored (under `CI`, failed).

mod connect;
mod contention;
pub(crate) mod copy;
mod crash;
mod down;
mod failover;
mod outage;
mod pooler;
pub(crate) mod proxy;
mod tls;
mod wakeups;

use crate::backends::{Engine, TestQueue};

/// A fresh schema on the test server (the test declares
/// `#[needs(Postgres)]`).
pub fn pg() -> TestQueue {
    TestQueue::new(Engine::Postgres)
}
