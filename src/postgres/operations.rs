//! The driver's store on PostgreSQL: every queue operation of
//! [`PgStore`], each a call into the module that owns its table's
//! statements. Writes every queue table through those modules.

use crate::core::attempt::Attempt;
use crate::core::controls::{QueueControl, QueueLimits};
use crate::core::job::{Enqueued, Job, JobFilter, JobState};
use crate::core::options::EngineKind;
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxRow, OutboxState};
use crate::core::reports::failures::Failures;
use crate::core::reports::overview::Overview;
use crate::core::reports::stats::{Explanation, JobDetail, Stats};
use crate::core::reports::tally::Tally;
use crate::core::reports::verify::VerifyReport;
use crate::core::reports::workflow::Workflow;
use crate::core::schedule::ScheduleRow;
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::driver::reply::Deliver;
use crate::driver::{PruneWhat, Store};
use crate::error::Result;
use crate::postgres::conn::{autocommit, read_err};

use super::{
    admin, claim, controls, enqueue, history, leases, outbox, reads, reports, schedules, schema,
    tally,
};

use super::store::PgStore;

impl Store for PgStore {
    fn kind(&self) -> EngineKind {
        EngineKind::Postgres
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn writable(&self) -> Result<()> {
        PgStore::writable(self)
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn schema_version(&self) -> Result<i64> {
        let _ = self.schema_version;
        self.with_conn(true, schema::read_version)
    }

    fn verify(&self) -> Result<VerifyReport> {
        super::verify::report(self)
    }

    fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued> {
        self.writable()?;
        let r = self.enqueues.enqueue(job, now)?;
        if !r.is_duplicate() {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn enqueue_many(&self, jobs: Vec<ValidJob>, now: Millis) -> Result<Vec<Enqueued>> {
        self.writable()?;
        let r = self.with_conn(true, |c| enqueue::insert_many(c, &jobs, now))?;
        if r.iter().any(|e| !e.is_duplicate()) {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn enqueue_async(&self, job: ValidJob, now: Millis, reply: Deliver<Enqueued>) {
        self.offload(reply, move |h| {
            let e = h.enqueue(&job, now)?;
            Ok((e, !e.is_duplicate()))
        });
    }

    fn enqueue_many_async(&self, jobs: Vec<ValidJob>, now: Millis, reply: Deliver<Vec<Enqueued>>) {
        self.offload(reply, move |h| {
            let r = h.enqueue_many(&jobs, now)?;
            let created = r.iter().any(|e| !e.is_duplicate());
            Ok((r, created))
        });
    }

    fn job(&self, id: i64) -> Result<Option<Job>> {
        self.with_conn(true, |c| reads::job(c, id))
    }

    fn job_by_key(&self, key: &str) -> Result<Option<Job>> {
        self.with_conn(true, |c| reads::job_by_key(c, key))
    }

    fn jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        self.with_conn(true, |c| reads::jobs(c, filter))
    }

    fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>> {
        self.with_conn(true, |c| history::for_job(c, job_id))
    }

    fn steps(&self, job_id: i64) -> Result<Vec<crate::core::steps::JobStep>> {
        self.with_conn(true, |c| super::steps::of_job(c, job_id))
    }

    fn record_step(&self, step: &crate::core::steps::StepRecord<'_>) -> Result<bool> {
        // Not retried on a lost connection: the insert may have committed,
        // and a second one would fail on its key (the step runs again).
        self.with_conn(false, |c| super::steps::record(c, step))
    }

    fn mark_steps_reused(&self, job_id: i64, attempt: i64, names: &[String]) -> Result<()> {
        self.with_conn(true, |c| {
            super::steps::mark_reused(c, job_id, attempt, names)
        })
    }

    fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.with_conn(true, |c| history::for_outbox(c, outbox_id))
    }

    fn outbox_for_job(&self, job_id: i64) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| outbox::for_job(c, job_id))
    }

    fn outbox(&self, state: Option<OutboxState>, limit: u32) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| outbox::list(c, state, limit))
    }

    fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        self.with_conn(true, |c| outbox::list_page(c, state, before, after, limit))
    }

    fn stats(&self, now: Millis) -> Result<Stats> {
        let version = self.schema_version()?;
        let mut s = self.with_conn(true, |c| reports::stats(c, now, version))?;
        s.schedules =
            self.with_conn(true, |c| autocommit!(c, read_err, |c| schedules::count(c)))?;
        s.path = self.location.clone().into();
        Ok(s)
    }

    fn job_detail(&self, id: i64) -> Result<Option<JobDetail>> {
        self.with_conn(true, |c| reports::job_detail(c, id))
    }

    fn explain(&self, key: &str) -> Result<Explanation> {
        self.with_conn(true, |c| reports::explain(c, key))
    }

    fn workflow(&self, key: &str, limit: usize) -> Result<Option<Workflow>> {
        self.with_conn(true, |c| reports::workflow(c, key, limit))
    }

    fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.with_conn(true, |c| autocommit!(c, read_err, |c| schedules::list(c)))
    }

    fn queue_controls(&self, now: Millis) -> Result<Vec<QueueControl>> {
        self.with_conn(true, |c| controls::list(c, now))
    }

    fn queue_control(&self, queue: &str, now: Millis) -> Result<Option<QueueControl>> {
        self.with_conn(true, |c| controls::of_queue(c, queue, now))
    }

    fn change_queue(
        &self,
        queue: &str,
        paused: Option<bool>,
        limits: &QueueLimits,
        now: Millis,
    ) -> Result<()> {
        crate::core::controls::check_change(queue, limits)?;
        // The same change twice leaves the same row: safe to repeat.
        self.with_conn(true, |c| controls::change(c, queue, paused, limits, now))?;
        self.controls.forget();
        // Other processes' workers look again (a resumed queue's jobs are
        // theirs to take once their cache of the controls is read again).
        self.notifier.jobs();
        Ok(())
    }

    fn tally(&self, now: Millis) -> Result<Tally> {
        self.with_conn(true, |c| {
            self.refresh_clock(c)?;
            tally::tally(c, now)
        })
    }

    fn overview(&self, now: Millis) -> Result<Overview> {
        self.with_conn(true, |c| {
            self.refresh_clock(c)?;
            tally::overview(c, now)
        })
    }

    fn failures(&self, limit: u32) -> Result<Failures> {
        self.with_conn(true, |c| reports::failures(c, limit))
    }

    fn retry_job(&self, id: i64, now: Millis) -> Result<()> {
        self.writable()?;
        self.with_conn(false, |c| admin::retry_job(c, id, now))?;
        self.notifier.jobs();
        Ok(())
    }

    fn retry_dead_batch(
        &self,
        kind: Option<&str>,
        after: i64,
        limit: i64,
        now: Millis,
    ) -> Result<Vec<i64>> {
        self.writable()?;
        let ids = self.with_conn(false, |c| {
            admin::retry_dead_batch(c, kind, after, limit, now)
        })?;
        if !ids.is_empty() {
            self.notifier.jobs();
        }
        Ok(ids)
    }

    fn cancel_job(&self, id: i64, now: Millis) -> Result<JobState> {
        self.writable()?;
        self.with_conn(false, |c| admin::cancel_job(c, id, now))
    }

    fn retry_outbox(&self, outbox_id: i64, now: Millis) -> Result<()> {
        self.writable()?;
        self.with_conn(false, |c| admin::retry_outbox(c, outbox_id, now))?;
        self.notifier.outbox();
        Ok(())
    }

    fn prune_batch(&self, what: PruneWhat, before: Millis, limit: i64) -> Result<(usize, usize)> {
        self.writable()?;
        self.with_conn(false, |c| admin::prune_batch(c, what, before, limit))
    }

    fn any_to_claim(
        &self,
        kinds: &[String],
        queues: Option<&[String]>,
        now: Millis,
    ) -> Result<bool> {
        self.with_conn(true, |c| claim::any_due(c, kinds, queues, now))
    }

    fn run_states(&self, ids: &[i64]) -> Result<Vec<(i64, JobState, Option<i64>)>> {
        self.with_conn(true, |c| reads::run_states(c, ids))
    }

    fn renew_leases(
        &self,
        owner: &str,
        jobs: &[i64],
        effects: &[i64],
        until: Millis,
    ) -> Result<()> {
        self.writable()?;
        self.with_conn(true, |c| {
            if !jobs.is_empty() {
                leases::renew_leases(c, owner, jobs, until)?;
            }
            if !effects.is_empty() {
                outbox::renew_leases(c, owner, effects, until)?;
            }
            Ok(())
        })
    }

    fn reap(&self, now: Millis, max_abandoned: i64) -> Result<(usize, usize)> {
        self.writable()?;
        let r = self.with_conn(false, |c| {
            if !leases::any_expired(c, now)? {
                return Ok((0, 0));
            }
            Ok((leases::reap(c, now, max_abandoned)?, outbox::reap(c, now)?))
        })?;
        if r.0 > 0 {
            self.notifier.jobs();
        }
        if r.1 > 0 {
            self.notifier.outbox();
        }
        Ok(r)
    }

    fn release_job(
        &self,
        id: i64,
        owner: &str,
        attempt: Option<i64>,
        why: &str,
        now: Millis,
    ) -> Result<bool> {
        self.writable()?;
        let r = self.with_conn(true, |c| leases::release(c, id, owner, attempt, why, now))?;
        if r {
            self.notifier.jobs();
        }
        Ok(r)
    }

    fn claim_effect(
        &self,
        kinds: &[String],
        owner: &str,
        worker: &str,
        lease_until: Millis,
        now: Millis,
    ) -> Result<Option<ClaimedEffect>> {
        self.writable()?;
        self.with_conn(false, |c| {
            outbox::claim(c, kinds, owner, worker, lease_until, now)
        })
    }

    fn ack_effect(
        &self,
        outbox_id: i64,
        attempt_id: i64,
        result: &EffectResult,
        now: Millis,
    ) -> Result<Option<OutboxState>> {
        self.writable()?;
        // Fenced on the attempt: repeating an ack that committed changes
        // nothing more.
        self.with_conn(true, |c| outbox::ack(c, outbox_id, attempt_id, result, now))
    }

    fn release_effect(&self, outbox_id: i64, attempt_id: i64, now: Millis) -> Result<bool> {
        self.writable()?;
        self.with_conn(true, |c| outbox::release(c, outbox_id, attempt_id, now))
    }

    fn release_lost_effect_claims(
        &self,
        owner: &str,
        worker: &str,
        performed: &[i64],
        now: Millis,
    ) -> Result<usize> {
        let n = self.with_conn(true, |c| {
            outbox::release_lost_claims(c, owner, worker, performed, now)
        })?;
        if n > 0 {
            self.notifier.outbox();
        }
        Ok(n as usize)
    }
}
