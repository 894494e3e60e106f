//! The cross-table invariants of `verify`, each one statement whose text
//! both engines run as it is: `SELECT count(*), <an example as text>`,
//! written in the SQL the two share (`CAST(… AS TEXT)`, `IS DISTINCT
//! FROM`, `IN` lists). Writes no table.

use super::Invariant;

/// Every invariant a query checks, in report order.
pub(crate) const CHECKS: [(Invariant, &str); 16] = [
    (
        Invariant::SucceededJobWithoutLedgerRow,
        // A ledger prune deletes the oldest rows first, and a run's ledger
        // row is completed at its job's finished_at: a job finished after
        // the oldest row still there cannot have lost its row to a prune.
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j \
         WHERE j.state = 'succeeded' \
           AND j.finished_at > (SELECT min(completed_at) FROM processed_jobs) \
           AND NOT EXISTS (SELECT 1 FROM processed_jobs p WHERE p.key = j.idempotency_key)",
    ),
    (
        Invariant::LedgerRowOfAnotherJob,
        "SELECT count(*), min(p.key) FROM processed_jobs p JOIN jobs j ON j.id = p.job_id \
         WHERE j.idempotency_key <> p.key OR j.state <> 'succeeded'",
    ),
    (
        Invariant::OutboxRowOfUnsucceededJob,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o JOIN jobs j ON j.id = o.job_id \
         WHERE j.state <> 'succeeded'",
    ),
    (
        Invariant::RunningJobOnEndedRun,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j \
         LEFT JOIN attempts a ON a.id = j.current_attempt \
         WHERE j.state = 'running' AND j.current_attempt IS NOT NULL \
           AND (a.id IS NULL OR a.job_id IS DISTINCT FROM j.id OR a.outcome <> 'running')",
    ),
    (
        Invariant::RunningRunNotCurrent,
        "SELECT count(*), CAST(min(a.id) AS TEXT) FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.outcome = 'running' \
           AND (j.state <> 'running' OR j.current_attempt IS DISTINCT FROM a.id)",
    ),
    (
        Invariant::SendingRowOnEndedAttempt,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o \
         LEFT JOIN attempts a ON a.id = o.current_attempt \
         WHERE o.state = 'sending' AND o.current_attempt IS NOT NULL \
           AND (a.id IS NULL OR a.outbox_id IS DISTINCT FROM o.id OR a.outcome <> 'running')",
    ),
    (
        Invariant::RunningEffectNotCurrent,
        "SELECT count(*), CAST(min(a.id) AS TEXT) FROM attempts a \
         JOIN outbox o ON o.id = a.outbox_id \
         WHERE a.outcome = 'running' \
           AND (o.state <> 'sending' OR o.current_attempt IS DISTINCT FROM a.id)",
    ),
    (
        Invariant::SucceededJobWithoutSuccessfulRun,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state = 'succeeded' \
           AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id \
                           AND a.outcome IN ('succeeded', 'duplicate'))",
    ),
    (
        Invariant::SuccessfulRunOfUnsucceededJob,
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state <> 'succeeded' \
           AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id \
                       AND a.outcome IN ('succeeded', 'duplicate'))",
    ),
    (
        Invariant::SentRowWithoutSuccessfulSend,
        "SELECT count(*), CAST(min(o.id) AS TEXT) FROM outbox o WHERE o.state = 'sent' \
           AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.outbox_id = o.id \
                           AND a.outcome = 'succeeded')",
    ),
    (
        Invariant::WaitingJobNotPromoted,
        // A waiting job without any edge counts too: only a dependency's
        // end moves a waiting job, so it would wait forever.
        "SELECT count(*), CAST(min(j.id) AS TEXT) FROM jobs j WHERE j.state = 'waiting' \
           AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on \
                           WHERE d.job_id = j.id AND p.state <> 'succeeded')",
    ),
    (
        Invariant::DependentAheadOfDependency,
        // From the edges, which are few beside the jobs. Not counted: a
        // cancelled dependent (a dependency's end cancels it, and an
        // operator may cancel it any time), and a dead one without a run
        // (it never started, so nothing ran early).
        "SELECT count(DISTINCT d.job_id), CAST(min(d.job_id) AS TEXT) FROM job_dependencies d \
         JOIN jobs j ON j.id = d.job_id JOIN jobs p ON p.id = d.depends_on \
         WHERE p.state <> 'succeeded' \
           AND (j.state IN ('queued', 'running', 'succeeded') \
                OR (j.state = 'dead' AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = j.id)))",
    ),
    (
        Invariant::WaitingJobNotCancelled,
        "SELECT count(DISTINCT d.job_id), CAST(min(d.job_id) AS TEXT) FROM job_dependencies d \
         JOIN jobs j ON j.id = d.job_id JOIN jobs p ON p.id = d.depends_on \
         WHERE j.state = 'waiting' AND p.state IN ('dead', 'cancelled')",
    ),
    (
        Invariant::PartitionOverCap,
        // Counted per partition, not per job: the cap is a partition's, and
        // one over by three is one fault. Jobs without a partition are
        // outside every partition's cap (a claim never counts them in one).
        PARTITIONS_OVER_CAP,
    ),
    (Invariant::StepOfMissingJob, STEPS_OF_MISSING_JOBS),
    (
        Invariant::CancelledRunOfUncancelledJob,
        // The example is the run's attempt id.
        "SELECT count(*), CAST(min(a.id) AS TEXT) FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.outcome = 'cancelled' AND j.state <> 'cancelled'",
    ),
];

/// The example is `job J, step S`: a step's row has no id of its own.
const STEPS_OF_MISSING_JOBS: &str = "WITH orphans AS ( \
         SELECT s.job_id, s.name FROM job_steps s \
         WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = s.job_id)) \
     SELECT (SELECT count(*) FROM orphans), \
            (SELECT 'job ' || CAST(job_id AS TEXT) || ', step ' || name \
             FROM orphans ORDER BY job_id, name LIMIT 1)";

const PARTITIONS_OVER_CAP: &str = "WITH crowded AS ( \
         SELECT j.queue, j.partition_key, count(*) AS running, \
                q.partition_concurrency AS cap \
         FROM jobs j JOIN queues q ON q.name = j.queue \
         WHERE j.state = 'running' AND j.partition_key IS NOT NULL \
           AND q.partition_concurrency IS NOT NULL \
         GROUP BY j.queue, j.partition_key, q.partition_concurrency \
         HAVING count(*) > q.partition_concurrency) \
     SELECT (SELECT count(*) FROM crowded), \
            (SELECT 'queue ' || queue || ', partition ' || partition_key || ': ' \
                    || CAST(running AS TEXT) || ' running, cap ' || CAST(cap AS TEXT) \
             FROM crowded ORDER BY running - cap DESC, queue, partition_key LIMIT 1)";
