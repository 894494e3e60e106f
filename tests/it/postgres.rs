//! What only PostgreSQL has: a server that can be out of reach, refuse a
//! login or go away mid-run, notifications a pooler may drop, several
//! machines' processes on one database (real child processes here), and
//! the move of a queue file into a database (`litejob copy`).
//!
//! The server is the one `LITEJOB_TEST_PG` names, as for the shared suite
//! (`backends`): each test gets a schema of its own. Without the variable
//! a test says so and passes, unless `CI` is set, where it fails.

mod connect;
mod contention;
mod copy;
mod crash;
mod outage;
pub(crate) mod proxy;
mod wakeups;

use crate::backends::{Engine, TestQueue};

/// A fresh schema on the test server, or None (with a note) outside CI
/// when no server is configured.
pub fn pg() -> Option<TestQueue> {
    TestQueue::new(Engine::Postgres)
}
