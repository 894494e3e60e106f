//! The crate's one way to take its own locks, the command's included: a
//! lock poisoned by a thread that panicked while holding it is used as it
//! is. Every lock of the crate
//! guards state that a panic cannot leave half-changed (its holders run no
//! user code, or only after they let go), so giving up the state would lose
//! more than it saves. Writes no table.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};

/// Locks `m`, whatever a panicking holder left.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `c` with `g`, whatever a panicking holder left.
pub fn wait<'a, T>(c: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    c.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// Reads `l`, whatever a panicking writer left.
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
