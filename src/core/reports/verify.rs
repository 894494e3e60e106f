//! Whether a queue is sound ([`Admin::verify`](crate::admin::Admin::verify)):
//! the invariants litejob keeps across its tables ([`Invariant`]), named
//! and described once for both engines, and what one check of them found
//! ([`VerifyReport`]). Writes no table.
//!
//! Which invariants are checked, and which are not because the schema
//! already makes them impossible to break: each table's CHECK constraints
//! tie a job's or an outbox row's lease to its `running` or `sending` state
//! (so no running job lacks a lease), `current_attempt` to `running`,
//! `finished_at` to the finished states, `sent_at` to `sent`, an attempt to
//! exactly one of a job or an outbox row, and its `finished_at` to an
//! outcome other than `running`, and a workflow edge to two distinct jobs,
//! once. Those are left to the database: on a file
//! `PRAGMA integrity_check` itself reports a row that breaks a CHECK, NOT
//! NULL or UNIQUE constraint (a connection can turn CHECKs off, so the
//! rows can exist), and PostgreSQL enforces them always. The same goes for
//! the foreign keys on PostgreSQL; a file's are enforced only on
//! connections that turn them on (litejob's do, the `sqlite3` shell by
//! default does not), so a file's are checked ([`Invariant::ForeignKeys`]).
//! What no constraint can say, because it spans rows or tables, is checked
//! by a query each, in the same read snapshot: one text for both engines
//! ([`CHECKS`], in `checks.rs`).

use serde::{Serialize, Serializer};

use crate::core::options::EngineKind;

mod checks;
pub(crate) use checks::CHECKS;

/// One thing that must hold of a queue's tables. [`Invariant::ALL`] lists
/// them in the order a report gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Invariant {
    /// The storage's own check finds nothing wrong.
    IntegrityCheck,
    /// Every reference names an existing row (a file only).
    ForeignKeys,
    /// The schema is the one this litejob writes.
    SchemaVersion,
    /// A succeeded job's key is in the ledger.
    SucceededJobWithoutLedgerRow,
    /// A ledger row's job holds its key and succeeded.
    LedgerRowOfAnotherJob,
    /// An outbox row's job succeeded.
    OutboxRowOfUnsucceededJob,
    /// A running job's current run is running.
    RunningJobOnEndedRun,
    /// A running run is its job's current one.
    RunningRunNotCurrent,
    /// A sending outbox row's current attempt is running.
    SendingRowOnEndedAttempt,
    /// A running effect attempt is its row's current one.
    RunningEffectNotCurrent,
    /// A succeeded job has a run that succeeded (or found its key done).
    SucceededJobWithoutSuccessfulRun,
    /// A job with a successful run succeeded.
    SuccessfulRunOfUnsucceededJob,
    /// A sent outbox row has an attempt that sent it.
    SentRowWithoutSuccessfulSend,
    /// A waiting job still waits on a dependency that has not succeeded
    /// (the commit that finished its last one queues it).
    WaitingJobNotPromoted,
    /// A job queued, running, succeeded, or dead after a run had every
    /// dependency succeed first.
    DependentAheadOfDependency,
    /// A waiting job has no dependency that ended dead or cancelled (the
    /// commit that ended it cancels its waiting dependents).
    WaitingJobNotCancelled,
    /// No partition of a queue with a per-partition cap has more jobs
    /// running than the cap.
    PartitionOverCap,
    /// Every durable step's row belongs to a job that exists (its rows go
    /// with the job, in the same transaction).
    StepOfMissingJob,
    /// A run ended `cancelled` belongs to a cancelled job (the cancel ends
    /// both in one commit).
    CancelledRunOfUncancelledJob,
}

impl Invariant {
    /// Every invariant, in report order.
    pub const ALL: [Invariant; 19] = [
        Invariant::IntegrityCheck,
        Invariant::ForeignKeys,
        Invariant::SchemaVersion,
        Invariant::SucceededJobWithoutLedgerRow,
        Invariant::LedgerRowOfAnotherJob,
        Invariant::OutboxRowOfUnsucceededJob,
        Invariant::RunningJobOnEndedRun,
        Invariant::RunningRunNotCurrent,
        Invariant::SendingRowOnEndedAttempt,
        Invariant::RunningEffectNotCurrent,
        Invariant::SucceededJobWithoutSuccessfulRun,
        Invariant::SuccessfulRunOfUnsucceededJob,
        Invariant::SentRowWithoutSuccessfulSend,
        Invariant::WaitingJobNotPromoted,
        Invariant::DependentAheadOfDependency,
        Invariant::WaitingJobNotCancelled,
        Invariant::PartitionOverCap,
        Invariant::StepOfMissingJob,
        Invariant::CancelledRunOfUncancelledJob,
    ];

    /// Its name in reports and `--json`: what is wrong when it breaks.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::IntegrityCheck => "integrity_check",
            Invariant::ForeignKeys => "foreign_keys",
            Invariant::SchemaVersion => "schema_version",
            Invariant::SucceededJobWithoutLedgerRow => "succeeded_job_without_ledger_row",
            Invariant::LedgerRowOfAnotherJob => "ledger_row_of_another_job",
            Invariant::OutboxRowOfUnsucceededJob => "outbox_row_of_unsucceeded_job",
            Invariant::RunningJobOnEndedRun => "running_job_on_ended_run",
            Invariant::RunningRunNotCurrent => "running_run_not_current",
            Invariant::SendingRowOnEndedAttempt => "sending_row_on_ended_attempt",
            Invariant::RunningEffectNotCurrent => "running_effect_not_current",
            Invariant::SucceededJobWithoutSuccessfulRun => "succeeded_job_without_successful_run",
            Invariant::SuccessfulRunOfUnsucceededJob => "successful_run_of_unsucceeded_job",
            Invariant::SentRowWithoutSuccessfulSend => "sent_row_without_successful_send",
            Invariant::WaitingJobNotPromoted => "waiting_job_not_promoted",
            Invariant::DependentAheadOfDependency => "dependent_ahead_of_dependency",
            Invariant::WaitingJobNotCancelled => "waiting_job_not_cancelled",
            Invariant::PartitionOverCap => "partition_over_cap",
            Invariant::StepOfMissingJob => "step_of_missing_job",
            Invariant::CancelledRunOfUncancelledJob => "cancelled_run_of_uncancelled_job",
        }
    }

    /// What it says, in a sentence, when it is broken.
    pub fn description(self) -> &'static str {
        match self {
            Invariant::IntegrityCheck => {
                "the storage's own check found a fault (a file: PRAGMA integrity_check, which \
                 also checks every CHECK, NOT NULL and UNIQUE constraint; PostgreSQL: amcheck's \
                 bt_index_check of litejob's indexes, when the extension is installed)"
            }
            Invariant::ForeignKeys => {
                "a row's reference names no row (PRAGMA foreign_key_check: an outbox row's \
                 job, an attempt's job or outbox row, either job of a workflow edge, a \
                 step's job); a \
                 connection with foreign keys off, such as the sqlite3 shell's by default, \
                 can leave one"
            }
            Invariant::SchemaVersion => "the schema version is not this litejob's",
            Invariant::SucceededJobWithoutLedgerRow => {
                "a succeeded job has no processed_jobs row for its key (jobs that finished \
                 before the oldest ledger row are left out: a prune with --ledger-older-than \
                 may have removed theirs)"
            }
            Invariant::LedgerRowOfAnotherJob => {
                "a processed_jobs row names a job that holds another key or has not succeeded"
            }
            Invariant::OutboxRowOfUnsucceededJob => {
                "an outbox row belongs to a job that has not succeeded: it exists only if its \
                 job's transaction committed"
            }
            Invariant::RunningJobOnEndedRun => {
                "a running job's current_attempt names an attempt that is missing, another \
                 job's, or no longer running"
            }
            Invariant::RunningRunNotCurrent => {
                "a job's attempt is running but its job is not running it (not running, or \
                 its current_attempt is another)"
            }
            Invariant::SendingRowOnEndedAttempt => {
                "a sending outbox row's current_attempt names an attempt that is missing, \
                 another row's, or no longer running"
            }
            Invariant::RunningEffectNotCurrent => {
                "an outbox row's attempt is running but the row is not sending it (not \
                 sending, or its current_attempt is another)"
            }
            Invariant::SucceededJobWithoutSuccessfulRun => {
                "a succeeded job has no attempt that succeeded or found its key done \
                 (duplicate)"
            }
            Invariant::SuccessfulRunOfUnsucceededJob => {
                "a job that has not succeeded has an attempt that succeeded or found its key \
                 done"
            }
            Invariant::SentRowWithoutSuccessfulSend => {
                "a sent outbox row has no attempt that succeeded"
            }
            Invariant::WaitingJobNotPromoted => {
                "a waiting job has no dependency left to succeed (every one succeeded, or it \
                 has none): it should have been queued, and nothing will queue it now"
            }
            Invariant::DependentAheadOfDependency => {
                "a job queued, running, succeeded or dead after a run has a dependency that \
                 has not succeeded: it was let go before its dependencies (a cancelled job is \
                 not counted, nor a dead one that never ran)"
            }
            Invariant::WaitingJobNotCancelled => {
                "a waiting job has a dependency that ended dead or cancelled: it should have \
                 been cancelled, and it waits forever"
            }
            Invariant::PartitionOverCap => {
                "a partition of a queue has more jobs running than the queue's \
                 partition_concurrency: a claim started one past the cap (lowering the cap \
                 while a partition's jobs run also leaves it over until enough of them end)"
            }
            Invariant::StepOfMissingJob => {
                "a job_steps row names a job that does not exist: a step's rows are deleted \
                 with their job, so one was left by a delete with foreign keys off (such as \
                 the sqlite3 shell's by default), and a new job given that id would get \
                 another job's results back"
            }
            Invariant::CancelledRunOfUncancelledJob => {
                "a run ended cancelled but its job is not cancelled: the cancel of a running \
                 job ends its run and the job in one commit, and a cancelled job never runs \
                 again"
            }
        }
    }

    /// The table its example id comes from (`processed_jobs`: a key);
    /// empty when the example is no row's id.
    pub fn table(self) -> &'static str {
        match self {
            Invariant::IntegrityCheck
            | Invariant::SchemaVersion
            | Invariant::ForeignKeys
            | Invariant::PartitionOverCap => "",
            Invariant::SucceededJobWithoutLedgerRow
            | Invariant::RunningJobOnEndedRun
            | Invariant::SucceededJobWithoutSuccessfulRun
            | Invariant::SuccessfulRunOfUnsucceededJob
            | Invariant::WaitingJobNotPromoted
            | Invariant::DependentAheadOfDependency
            | Invariant::WaitingJobNotCancelled => "jobs",
            Invariant::LedgerRowOfAnotherJob => "processed_jobs",
            Invariant::OutboxRowOfUnsucceededJob
            | Invariant::SendingRowOnEndedAttempt
            | Invariant::SentRowWithoutSuccessfulSend => "outbox",
            Invariant::RunningRunNotCurrent
            | Invariant::RunningEffectNotCurrent
            | Invariant::CancelledRunOfUncancelledJob => "attempts",
            Invariant::StepOfMissingJob => "job_steps",
        }
    }

    /// Whether `engine`'s verify checks it: a file's foreign keys only;
    /// PostgreSQL enforces its own.
    pub fn checked_on(self, engine: EngineKind) -> bool {
        !(self == Invariant::ForeignKeys && engine == EngineKind::Postgres)
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Invariant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// An invariant a check found broken: how many rows break it, and one of
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Broken {
    /// Which.
    pub invariant: Invariant,
    /// Rows (or, for the storage's check, messages) that break it.
    pub count: u64,
    /// One of them: the id of a row of [`Invariant::table`] (a key for
    /// `processed_jobs`), the storage's first message, or for
    /// [`Invariant::PartitionOverCap`] the partition furthest over its cap
    /// as `queue Q, partition P: N running, cap C`, for
    /// [`Invariant::StepOfMissingJob`] `job J, step S`.
    pub example: String,
}

impl Serialize for Broken {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Broken", 5)?;
        st.serialize_field("name", self.invariant.name())?;
        st.serialize_field("description", self.invariant.description())?;
        st.serialize_field("table", self.invariant.table())?;
        st.serialize_field("count", &self.count)?;
        st.serialize_field("example", &self.example)?;
        st.end()
    }
}

/// What [`Admin::verify`](crate::admin::Admin::verify) found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The file, or the URL without its password.
    pub location: String,
    /// Which engine holds it (`"sqlite"` or `"postgres"` in JSON).
    #[serde(serialize_with = "engine_name")]
    pub engine: EngineKind,
    /// The schema version the database holds.
    pub schema_version: i64,
    /// What the storage's own check was (`PRAGMA integrity_check`,
    /// amcheck), or why it was not run.
    pub integrity: String,
    /// The invariants checked, by name.
    pub checked: Vec<Invariant>,
    /// Those broken, in the order of [`Invariant::ALL`]; empty when sound.
    pub broken: Vec<Broken>,
}

fn engine_name<S: Serializer>(e: &EngineKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(e.as_str())
}

impl VerifyReport {
    /// True when nothing is broken.
    pub fn is_sound(&self) -> bool {
        self.broken.is_empty()
    }
}

/// An engine's raw findings: a count and an example per invariant checked.
pub(crate) type Findings = Vec<(Invariant, u64, Option<String>)>;

/// The report from an engine's findings: the invariants it checked, and
/// those with rows, in [`Invariant::ALL`]'s order.
pub(crate) fn report(
    location: &str,
    engine: EngineKind,
    schema_version: i64,
    integrity: String,
    findings: Findings,
) -> VerifyReport {
    let mut checked = Vec::new();
    let mut broken = Vec::new();
    for inv in Invariant::ALL {
        let mine: Vec<_> = findings.iter().filter(|f| f.0 == inv).collect();
        if mine.is_empty() {
            continue;
        }
        checked.push(inv);
        let count: u64 = mine.iter().map(|f| f.1).sum();
        if count > 0 {
            let example = mine.iter().find_map(|f| f.2.clone()).unwrap_or_default();
            broken.push(Broken {
                invariant: inv,
                count,
                example,
            });
        }
    }
    VerifyReport {
        location: location.to_string(),
        engine,
        schema_version,
        integrity,
        checked,
        broken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_invariant_is_listed_once() {
        let names: std::collections::HashSet<_> = Invariant::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), Invariant::ALL.len());
        for i in Invariant::ALL {
            assert!(!i.description().is_empty());
        }
    }

    #[test]
    fn every_invariant_no_constraint_holds_is_checked_by_one_query() {
        let by_the_engine = [
            Invariant::IntegrityCheck,
            Invariant::ForeignKeys,
            Invariant::SchemaVersion,
        ];
        for i in Invariant::ALL {
            let queries = CHECKS.iter().filter(|(c, _)| *c == i).count();
            let expected = usize::from(!by_the_engine.contains(&i));
            assert_eq!(queries, expected, "{i}");
        }
        for (i, sql) in CHECKS {
            assert!(
                sql.starts_with("SELECT ") || sql.starts_with("WITH "),
                "{i}"
            );
        }
    }

    #[test]
    fn a_report_lists_what_was_checked_and_only_the_broken_with_an_example() {
        let r = report(
            "q.db",
            EngineKind::Sqlite,
            3,
            "PRAGMA integrity_check".into(),
            vec![
                (Invariant::OutboxRowOfUnsucceededJob, 0, None),
                (
                    Invariant::SucceededJobWithoutLedgerRow,
                    2,
                    Some("17".into()),
                ),
                (Invariant::SchemaVersion, 0, None),
            ],
        );
        assert_eq!(
            r.checked,
            [
                Invariant::SchemaVersion,
                Invariant::SucceededJobWithoutLedgerRow,
                Invariant::OutboxRowOfUnsucceededJob
            ]
        );
        assert!(!r.is_sound());
        assert_eq!(r.broken.len(), 1);
        let v = serde_json::to_value(&r.broken[0]).unwrap();
        assert_eq!(v["name"], "succeeded_job_without_ledger_row");
        assert_eq!(
            (v["count"].as_u64(), v["example"].as_str()),
            (Some(2), Some("17"))
        );
        assert_eq!(v["table"], "jobs");
    }
}
