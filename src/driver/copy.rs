//! The receiving side of a copy between two databases: where a table's
//! batches of rows go, in the destination's one transaction. Writes no
//! table itself (the destination engine does).

use crate::core::copy::{
    AttemptRows, DependencyRows, JobRows, LedgerRows, OutboxRows, QueueRows, QueueStartRows,
    ScheduleRows, StepRows,
};
use crate::error::Result;

/// Takes a copy's rows, table by table, a batch at a time; every row keeps
/// its id and key.
pub(crate) trait CopySink {
    /// A batch of jobs.
    fn jobs(&mut self, r: &JobRows) -> Result<()>;
    /// A batch of ledger rows.
    fn ledger(&mut self, r: &LedgerRows) -> Result<()>;
    /// A batch of outbox rows.
    fn outbox(&mut self, r: &OutboxRows) -> Result<()>;
    /// A batch of attempts.
    fn attempts(&mut self, r: &AttemptRows) -> Result<()>;
    /// A batch of schedules.
    fn schedules(&mut self, r: &ScheduleRows) -> Result<()>;
    /// A batch of queue controls.
    fn queues(&mut self, r: &QueueRows) -> Result<()>;
    /// A batch of rate-limited queues' starts.
    fn queue_starts(&mut self, r: &QueueStartRows) -> Result<()>;
    /// A batch of workflow edges; sent after every job, so both ends of
    /// each are in the destination already (its foreign keys hold at
    /// every insert).
    fn dependencies(&mut self, r: &DependencyRows) -> Result<()>;
    /// A batch of durable steps' results; sent after every job, as their
    /// rows name their job.
    fn steps(&mut self, r: &StepRows) -> Result<()>;
}
