//! The driver's store on a file: every queue operation of
//! [`SqliteStore`], each a call into the module that owns its table's
//! statements, a write sent to the writer, a read on a pooled connection.
//! Writes every queue table through those modules, on the writer.

use std::sync::Arc;

use rusqlite::Connection;

use crate::core::attempt::Attempt;
use crate::core::controls::{QueueControl, QueueLimits};
use crate::core::job::{Enqueued, Job, JobFilter, JobState};
use crate::core::options::EngineKind;
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::reports::failures::Failures;
use crate::core::reports::overview;
use crate::core::reports::overview::Overview;
use crate::core::reports::stats::{Explanation, JobDetail, Stats};
use crate::core::reports::tally::{Runs, Tally};
use crate::core::reports::verify::VerifyReport;
use crate::core::reports::workflow::Workflow;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::driver::reply::{Deliver, Sink};
use crate::driver::ABORTED_RETRIES;
use crate::driver::{PruneWhat, Store};
use crate::error::Result;
use crate::sqlite::admin;
use crate::sqlite::claim;
use crate::sqlite::controls::{self};
use crate::sqlite::enqueue::{self};
use crate::sqlite::history::{self};
use crate::sqlite::leases;
use crate::sqlite::ledger;
use crate::sqlite::outbox::{self};
use crate::sqlite::reads;
use crate::sqlite::reports::{self};
use crate::sqlite::schema;
use crate::sqlite::steps;
use crate::sqlite::store::SqliteStore;
use crate::sqlite::tally::{self};

/// A list of names as the JSON array the SQL's `json_each` reads.
fn json_list(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".into())
}

impl Store for SqliteStore {
    fn kind(&self) -> EngineKind {
        EngineKind::Sqlite
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    fn writable(&self) -> Result<()> {
        self.writer().map(|_| ())
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn schema_version(&self) -> Result<i64> {
        self.read(schema::read_version)
    }

    fn verify(&self) -> Result<VerifyReport> {
        crate::sqlite::verify::report(self)
    }

    fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued> {
        self.write_retrying(move |conn| enqueue::insert(conn, &job, now))
    }

    fn enqueue_many(&self, jobs: Vec<ValidJob>, now: Millis) -> Result<Vec<Enqueued>> {
        let jobs = Arc::new(jobs);
        self.write_retrying(move |conn| enqueue::insert_many(conn, &jobs, now))
    }

    fn enqueue_async(&self, job: ValidJob, now: Millis, reply: Deliver<Enqueued>) {
        let writer = match self.writer() {
            Ok(w) => w,
            Err(e) => return reply.put(Err(e)),
        };
        let insert = move |conn: &Connection| {
            let e = enqueue::insert(conn, &job, now)?;
            Ok((e, !e.is_duplicate()))
        };
        writer.submit_retrying(Arc::new(insert), ABORTED_RETRIES, reply);
    }

    fn enqueue_many_async(&self, jobs: Vec<ValidJob>, now: Millis, reply: Deliver<Vec<Enqueued>>) {
        let writer = match self.writer() {
            Ok(w) => w,
            Err(e) => return reply.put(Err(e)),
        };
        let insert = move |conn: &Connection| {
            let r = enqueue::insert_many(conn, &jobs, now)?;
            let created = r.iter().any(|e| !e.is_duplicate());
            Ok((r, created))
        };
        writer.submit_retrying(Arc::new(insert), ABORTED_RETRIES, reply);
    }

    fn job(&self, id: i64) -> Result<Option<Job>> {
        self.read(|c| reads::job(c, id))
    }

    fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.read(|c| reads::job_by_key(c, key))
    }

    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.read(|c| reads::jobs(c, filter))
    }

    fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.read(|c| history::for_job(c, job_id))
    }

    fn steps(&self, job_id: i64) -> Result<Vec<crate::core::steps::JobStep>> {
        self.read(|c| steps::of_job(c, job_id))
    }

    fn record_step(&self, step: &crate::core::steps::StepRecord<'_>) -> Result<bool> {
        let (job_id, run_id, attempt) = (step.job_id, step.run_id, step.attempt);
        let (name, output) = (step.name.to_string(), step.output.to_string());
        let (started_at, finished_at) = (step.started_at, step.finished_at);
        self.write_retrying(move |c| {
            steps::record(
                c,
                &crate::core::steps::StepRecord {
                    job_id,
                    run_id,
                    name: &name,
                    attempt,
                    output: &output,
                    started_at,
                    finished_at,
                },
            )
        })
    }

    fn mark_steps_reused(&self, job_id: i64, attempt: i64, names: &[String]) -> Result<()> {
        let names = names.to_vec();
        self.write_retrying(move |c| steps::mark_reused(c, job_id, attempt, &names))
    }

    fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.read(|c| history::for_outbox(c, outbox_id))
    }

    fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::for_job(c, job_id))
    }

    fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::list(c, state, limit))
    }

    fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        self.read(|c| outbox::list_page(c, state, before, after, limit))
    }

    fn stats(&self, now: Millis) -> Result<Stats> {
        let mut stats = self.read(|c| reports::in_snapshot(c, |c| reports::stats(c, now)))?;
        (stats.file_bytes, stats.wal_bytes) = reports::file_sizes(&self.path);
        stats.path = self.path.clone();
        Ok(stats)
    }

    fn job_detail(&self, id: i64) -> Result<Option<JobDetail>> {
        self.read(|c| reports::in_snapshot(c, |c| reports::job_detail(c, id)))
    }

    fn explain(&self, key: &str) -> Result<Explanation> {
        self.read(|c| reports::in_snapshot(c, |c| reports::explain(c, key)))
    }

    fn workflow(&self, key: &str, limit: usize) -> Result<Option<Workflow>> {
        self.read(|c| reports::in_snapshot(c, |c| reports::workflow(c, key, limit)))
    }

    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.read(crate::sqlite::schedules::list)
    }

    fn queue_controls(&self, now: Millis) -> Result<Vec<QueueControl>> {
        self.read(|c| reports::in_snapshot(c, |c| controls::list(c, now)))
    }

    fn queue_control(&self, queue: &str, now: Millis) -> Result<Option<QueueControl>> {
        self.read(|c| reports::in_snapshot(c, |c| controls::of_queue(c, queue, now)))
    }

    fn change_queue(
        &self,
        queue: &str,
        paused: Option<bool>,
        limits: &QueueLimits,
        now: Millis,
    ) -> Result<()> {
        crate::core::controls::check_change(queue, limits)?;
        let (queue, limits) = (queue.to_string(), limits.clone());
        self.writer()?
            .run(move |conn| controls::change(conn, &queue, paused, &limits, now).map(|_| ()))
    }

    fn tally(&self, now: Millis) -> Result<Tally> {
        let mut t =
            self.read(|c| reports::in_snapshot(c, |c| tally::tally(c, now, Runs::Counted)))?;
        (t.file_bytes, t.wal_bytes) = reports::file_sizes(&self.path);
        Ok(t)
    }

    fn overview(&self, now: Millis) -> Result<Overview> {
        let (mut t, activity, schedules) = self.read(|c| {
            reports::in_snapshot(c, |c| {
                Ok((
                    tally::tally(c, now, Runs::Skipped)?,
                    tally::activity(c, now)?,
                    crate::sqlite::schedules::list(c)?,
                ))
            })
        })?;
        (t.file_bytes, t.wal_bytes) = reports::file_sizes(&self.path);
        Ok(overview::assemble(now, t, activity, schedules))
    }

    fn failures(&self, limit: u32) -> Result<Failures> {
        self.read(|c| reports::in_snapshot(c, |c| reports::failures(c, limit)))
    }

    fn retry_job(&self, id: i64, now: Millis) -> Result<()> {
        self.writer()?
            .run(move |conn| admin::retry_job(conn, id, now))
    }

    fn retry_dead_batch(
        &self,
        kind: Option<&str>,
        after: i64,
        limit: i64,
        now: Millis,
    ) -> Result<Vec<i64>> {
        let kind = kind.map(str::to_owned);
        self.writer()?
            .run(move |conn| admin::retry_dead_batch(conn, kind.as_deref(), after, limit, now))
    }

    fn cancel_job(&self, id: i64, now: Millis) -> Result<JobState> {
        self.writer()?
            .run(move |conn| admin::cancel_job(conn, id, now))
    }

    fn retry_outbox(&self, outbox_id: i64, now: Millis) -> Result<()> {
        self.writer()?
            .run(move |conn| admin::retry_outbox(conn, outbox_id, now))
    }

    fn prune_batch(&self, what: PruneWhat, before: Millis, limit: i64) -> Result<(usize, usize)> {
        self.writer()?.run(move |conn| match what {
            PruneWhat::Jobs { failed_before } => {
                admin::prune_jobs(conn, before, failed_before, limit)
            }
            PruneWhat::Outbox => admin::prune_outbox(conn, before, limit),
            PruneWhat::Ledger => Ok((ledger::prune(conn, before, limit)?, 0)),
        })
    }

    fn any_to_claim(
        &self,
        kinds: &[String],
        queues: Option<&[String]>,
        now: Millis,
    ) -> Result<bool> {
        let (kinds, queues) = (json_list(kinds), queues.map(json_list));
        self.read(|c| claim::any_due(c, &kinds, queues.as_deref(), now))
    }

    fn run_states(&self, ids: &[i64]) -> Result<Vec<(i64, JobState, Option<i64>)>> {
        let ids = serde_json::to_string(ids).unwrap_or_default();
        self.read(|c| reads::run_states(c, &ids))
    }

    fn renew_leases(
        &self,
        owner: &str,
        jobs: &[i64],
        effects: &[i64],
        until: Millis,
    ) -> Result<()> {
        let owner = owner.to_string();
        let jobs = (!jobs.is_empty()).then(|| serde_json::to_string(jobs).unwrap_or_default());
        let effects =
            (!effects.is_empty()).then(|| serde_json::to_string(effects).unwrap_or_default());
        self.writer()?.run_light(move |conn| {
            if let Some(ids) = &jobs {
                leases::renew_leases(conn, &owner, ids, until)?;
            }
            if let Some(ids) = &effects {
                outbox::renew_leases(conn, &owner, ids, until)?;
            }
            Ok(())
        })
    }

    fn reap(&self, now: Millis, max_abandoned: i64) -> Result<(usize, usize)> {
        if !self.read(|c| leases::any_expired(c, now))? {
            return Ok((0, 0));
        }
        self.writer()?.run_light(move |conn| {
            Ok((
                leases::reap(conn, now, max_abandoned)?,
                outbox::reap(conn, now)?,
            ))
        })
    }

    fn release_job(
        &self,
        id: i64,
        owner: &str,
        attempt: Option<i64>,
        why: &str,
        now: Millis,
    ) -> Result<bool> {
        let (owner, why) = (owner.to_string(), why.to_string());
        self.writer()?
            .run(move |conn| leases::release(conn, id, &owner, attempt, &why, now))
    }

    fn claim_effect(
        &self,
        kinds: &[String],
        owner: &str,
        worker: &str,
        lease_until: Millis,
        now: Millis,
    ) -> Result<Option<ClaimedEffect>> {
        let (kinds, owner, worker) = (json_list(kinds), owner.to_string(), worker.to_string());
        self.writer()?
            .run(move |conn| outbox::claim(conn, &kinds, &owner, &worker, lease_until, now))
    }

    fn ack_effect(
        &self,
        outbox_id: i64,
        attempt_id: i64,
        result: &EffectResult,
        now: Millis,
    ) -> Result<Option<OutboxState>> {
        let result = result.clone();
        self.writer()?
            .run(move |conn| outbox::ack(conn, outbox_id, attempt_id, &result, now))
    }

    fn release_effect(&self, outbox_id: i64, attempt_id: i64, now: Millis) -> Result<bool> {
        self.writer()?
            .run(move |conn| outbox::release(conn, outbox_id, attempt_id, now))
    }
}
