//! What a scheduler writes in one transaction, on either engine: its
//! schedule's row and its slots' jobs. Each engine implements it on its
//! own write transaction. Writes no table itself.

use crate::core::job::{Enqueued, NewJob};
use crate::core::schedule::{Declaration, Declared, ScheduleRow};
use crate::core::time::Millis;
use crate::error::Result;

/// The writes a scheduler makes in one transaction, on either backend: its
/// row (through the table's store) and its slots' jobs (through the normal
/// enqueue path).
pub(crate) trait SlotTx {
    /// The row of the schedule `name`, if there is one.
    fn schedule(&mut self, name: &str) -> Result<Option<ScheduleRow>>;
    /// Writes the declaration `d` to its row, a new one or the existing
    /// one (its slots fired are kept).
    fn write_declaration(&mut self, d: &Declared, now: Millis) -> Result<()>;
    /// Records that `slot` fired and `next` comes after it, unless the row
    /// records `slot` or a later one already; true when the row changed.
    fn fired(&mut self, name: &str, slot: Millis, next: Option<Millis>) -> Result<bool>;
    /// Records the next slot a start computed.
    fn set_next(&mut self, name: &str, next: Option<Millis>) -> Result<()>;
    /// Enqueues a slot's job in this transaction.
    fn enqueue(&mut self, job: NewJob) -> Result<Enqueued>;

    /// Declares `d` at a start, as the core decides from its row: written
    /// when new or changed. Says what was there.
    fn declare(&mut self, d: &Declared, now: Millis) -> Result<Declaration> {
        let found = Declaration::of(self.schedule(&d.schedule.name)?, d);
        if found.writes() {
            self.write_declaration(d, now)?;
        }
        Ok(found)
    }
}
