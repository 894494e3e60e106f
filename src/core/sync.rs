//! The crate's one way to take its own locks, the command's included: a
//! lock poisoned by a thread that panicked while holding it is used as it
//! is. Every lock of the crate
//! guards state that a panic cannot leave half-changed (its holders run no
//! user code, or only after they let go), so giving up the state would lose
//! more than it saves. Writes no table.

use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(feature = "postgres")]
use std::sync::{RwLock, RwLockReadGuard};
#[cfg(feature = "postgres")]
use std::time::Duration;

/// Locks `m`, whatever a panicking holder left.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `c` with `g`, whatever a panicking holder left.
pub fn wait<'a, T>(c: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    c.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// Waits on `c` with `g` for at most `d`, whatever a panicking holder
/// left.
#[cfg(feature = "postgres")]
pub fn wait_timeout<'a, T>(c: &Condvar, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    c.wait_timeout(g, d).unwrap_or_else(|e| e.into_inner()).0
}

/// Reads `l`, whatever a panicking writer left.
#[cfg(feature = "postgres")]
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
