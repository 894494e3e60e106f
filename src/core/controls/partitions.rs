//! A queue's partitions under its partition limits: the room one
//! partition has, and which are at their limit. Writes no table.

use serde::Serialize;

use super::{room_under, Limits, Load};

/// The most partitions at their limit a [`QueueControl`](super::QueueControl) lists.
pub const PARTITIONS_LISTED: usize = 20;

/// A partition of a queue that a claim would skip now: its cap or its rate
/// is full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PartitionAtLimit {
    /// The partition key.
    pub key: String,
    /// Its jobs `running` (claimed or started).
    pub running: i64,
    /// Its starts in the partition rate's window; None without one.
    pub started_in_window: Option<i64>,
}

/// How many more jobs of one partition a claim may take: under the
/// partition cap, its free slots (`load.running` counts every running job
/// of the partition, whatever its lease: one whose lease ran out still
/// runs until it is reaped, and one at a time means one); under the
/// partition rate, the starts left in its window once its claimed jobs
/// are counted. None when the queue has no limit per partition.
pub(crate) fn partition_room(limits: &Limits, load: &Load) -> Option<usize> {
    if !limits.partitioned() {
        return None;
    }
    Some(room_under(
        limits.partition_concurrency,
        limits.partition_rate,
        load,
    ))
}

/// The room of a partition nothing of which runs or started in the window.
pub(crate) fn empty_partition_room(limits: &Limits) -> usize {
    partition_room(limits, &Load::default()).unwrap_or(usize::MAX)
}

/// The partitions at their limit among `loads` (each partition's load),
/// the busiest first, at most `listed` of them, and how many there are.
pub(crate) fn partitions_at_limit(
    limits: &Limits,
    loads: std::collections::HashMap<String, Load>,
    listed: usize,
) -> (Vec<PartitionAtLimit>, i64) {
    let mut full: Vec<PartitionAtLimit> = loads
        .into_iter()
        .filter(|(_, load)| partition_room(limits, load) == Some(0))
        .map(|(key, load)| PartitionAtLimit {
            key,
            running: load.running,
            started_in_window: limits.partition_rate.map(|_| load.started),
        })
        .collect();
    let count = full.len() as i64;
    full.sort_by(|a, b| b.running.cmp(&a.running).then_with(|| a.key.cmp(&b.key)));
    full.truncate(listed);
    (full, count)
}
