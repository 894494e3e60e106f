//! The tables a copy moves, their columns and types: the one place that
//! names them. Both engines' reads (`SELECT … ORDER BY`), both engines'
//! inserts and the batches between them are derived from [`TABLES`], so a
//! new column of a copied table is one line here (its name and type, on
//! both engines' schemas). Writes no table.

use super::Ty::{Bool, Int, OptInt, OptText, Text};
use super::{col, Table};

/// Every copied table, in the order a copy moves them: the rows that name
/// a job (workflow edges, steps' results) after every job, so the
/// destination's foreign keys hold at each insert.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "jobs",
        order_by: "id",
        count: |r| &mut r.jobs,
        columns: &[
            col("id", Int),
            col("queue", Text),
            col("kind", Text),
            col("idempotency_key", Text),
            col("payload", Text),
            col("state", Text),
            col("priority", Int),
            col("run_at", Int),
            col("attempts", Int),
            col("max_attempts", Int),
            col("abandoned", Int),
            col("deliveries", Int),
            col("last_error", OptText),
            col("created_at", Int),
            col("finished_at", OptInt),
            col("lease_owner", OptText),
            col("lease_expires_at", OptInt),
            col("current_attempt", OptInt),
            col("output", OptText),
            col("partition_key", OptText),
            col("timeout_ms", OptInt),
        ],
    },
    Table {
        name: "processed_jobs",
        order_by: "key",
        count: |r| &mut r.processed_jobs,
        columns: &[
            col("key", Text),
            col("completed_at", Int),
            col("job_id", OptInt),
        ],
    },
    Table {
        name: "outbox",
        order_by: "id",
        count: |r| &mut r.outbox,
        columns: &[
            col("id", Int),
            col("key", Text),
            col("kind", Text),
            col("payload", Text),
            col("state", Text),
            col("attempts", Int),
            col("max_attempts", Int),
            col("job_id", OptInt),
            col("next_attempt_at", Int),
            col("last_error", OptText),
            col("created_at", Int),
            col("sent_at", OptInt),
            col("lease_owner", OptText),
            col("lease_expires_at", OptInt),
            col("current_attempt", OptInt),
        ],
    },
    Table {
        name: "attempts",
        order_by: "id",
        count: |r| &mut r.attempts,
        columns: &[
            col("id", Int),
            col("job_id", OptInt),
            col("outbox_id", OptInt),
            col("attempt", Int),
            col("key", Text),
            col("worker", Text),
            col("started_at", Int),
            col("finished_at", OptInt),
            col("outcome", Text),
            col("error", OptText),
        ],
    },
    Table {
        name: "schedules",
        order_by: "name",
        count: |r| &mut r.schedules,
        columns: &[
            col("name", Text),
            col("cron", Text),
            col("tz", Text),
            col("kind", Text),
            col("payload", Text),
            col("queue", Text),
            col("priority", Int),
            col("max_retries", OptInt),
            col("catch_up", Text),
            col("catch_up_window_ms", OptInt),
            col("last_slot_at", OptInt),
            col("next_slot_at", OptInt),
            col("created_at", Int),
            col("updated_at", Int),
        ],
    },
    Table {
        name: "queues",
        order_by: "name",
        count: |r| &mut r.queues,
        columns: &[
            col("name", Text),
            col("paused", Bool),
            col("concurrency", OptInt),
            col("rate_limit", OptInt),
            col("rate_window_ms", OptInt),
            col("updated_at", Int),
            col("partition_concurrency", OptInt),
            col("partition_rate_limit", OptInt),
            col("partition_rate_window_ms", OptInt),
        ],
    },
    Table {
        name: "queue_starts",
        order_by: "queue, started_at, partition_key",
        count: |r| &mut r.queue_starts,
        columns: &[
            col("queue", Text),
            col("started_at", Int),
            // NULL: a start the queue's own rate counts (a job without a
            // partition).
            col("partition_key", OptText),
        ],
    },
    Table {
        name: "job_dependencies",
        order_by: "job_id, depends_on",
        count: |r| &mut r.job_dependencies,
        // `job_id` runs only after `depends_on` succeeded.
        columns: &[col("job_id", Int), col("depends_on", Int)],
    },
    Table {
        name: "job_steps",
        order_by: "job_id, name",
        count: |r| &mut r.job_steps,
        columns: &[
            col("job_id", Int),
            col("name", Text),
            col("attempt", Int),
            col("output", Text),
            col("started_at", Int),
            col("finished_at", Int),
            col("reused_in", OptText),
        ],
    },
];
