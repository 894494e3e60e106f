//! What a scheduler writes in one transaction, on either engine: its
//! schedule's row and its slots' jobs. Each engine implements it on its
//! own write transaction. Writes no table itself.

use crate::core::job::{Enqueued, NewJob};
use crate::core::schedule::{Declaration, Declared};
use crate::core::time::Millis;
use crate::error::Result;

/// The writes a scheduler makes in one transaction, on either backend: its
/// row (through the table's store) and its slots' jobs (through the normal
/// enqueue path).
pub(crate) trait SlotTx {
    /// Writes the declaration .
    fn declare(&mut self, d: &Declared, now: Millis) -> Result<Declaration>;
    /// Records a fired slot .
    fn fired(&mut self, name: &str, slot: Millis, next: Option<Millis>) -> Result<bool>;
    /// Records the next slot .
    fn set_next(&mut self, name: &str, next: Option<Millis>) -> Result<()>;
    /// Enqueues a slot's job in this transaction.
    fn enqueue(&mut self, job: NewJob) -> Result<Enqueued>;
}
