//! The jobs and effects this process holds a lease on.

use std::collections::HashMap;

/// Jobs and effects this process holds a lease on: renewed by the
/// supervisor, released at shutdown.
#[derive(Default)]
pub(super) struct InFlight {
    /// job id → the running attempt (None: claimed, not started).
    pub(super) jobs: HashMap<i64, Option<i64>>,
    /// outbox id → attempt id.
    pub(super) effects: HashMap<i64, i64>,
}
