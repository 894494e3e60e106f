//! The crate's one way to take its own locks: a lock poisoned by a thread
//! that panicked while holding it is used as it is (the PostgreSQL worker
//! reads its `RwLock` the same way, in its own file). Every lock of the crate
//! guards state that a panic cannot leave half-changed (its holders run no
//! user code, or only after they let go), so giving up the state would lose
//! more than it saves. Writes no table.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks `m`, whatever a panicking holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `c` with `g`, whatever a panicking holder left.
pub(crate) fn wait<'a, T>(c: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    c.wait(g).unwrap_or_else(|e| e.into_inner())
}
