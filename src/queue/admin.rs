//! The operator's handle on a queue ([`Admin`], from
//! [`crate::queue::Queue::admin`]): reports, repairs and queue controls, the same
//! on both engines, each through the engine's store. Writes `jobs`,
//! `outbox`, `attempts`, `processed_jobs` (prune) and `queues` through the
//! store only.

use std::sync::Arc;
use std::time::Duration;

use crate::core::attempt::Attempt;
use crate::core::job::JobState;
use crate::core::outbox::{OutboxRow, OutboxState};
use crate::core::time::Millis;
use crate::driver::wake::{Waiters, Wakers};
use crate::driver::Store;
use crate::error::Result;

use crate::core::controls::{QueueControl, QueueLimits};
use crate::core::reports::failures::Failures;
use crate::core::reports::metrics::render;
use crate::core::reports::overview::Overview;
use crate::core::reports::prune::PruneOptions;
use crate::core::reports::prune::PruneReport;
use crate::core::reports::stats::Explanation;
use crate::core::reports::stats::JobDetail;
use crate::core::reports::stats::Stats;
use crate::core::reports::verify::VerifyReport;
use crate::core::reports::workflow::Workflow;
use crate::core::schedule::ScheduleRow;
use crate::driver::PruneWhat;

/// What an operator does with a queue, on either engine: look at it
/// (counts, one job's story, everything about a key, the overview, what
/// failed, metrics, schedules, queue controls) and repair it (retry,
/// cancel, prune, pause, limit). Cheap to clone; it shares the queue's
/// store. The command and the dashboard are built on it.
#[derive(Clone)]
pub struct Admin {
    store: Arc<dyn Store>,
    job_wake: Arc<Wakers>,
    outbox_wake: Arc<Wakers>,
    done_wake: Arc<Waiters>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("location", &self.store.location())
            .finish()
    }
}

impl Admin {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        job_wake: Arc<Wakers>,
        outbox_wake: Arc<Wakers>,
        done_wake: Arc<Waiters>,
    ) -> Admin {
        Admin {
            store,
            job_wake,
            outbox_wake,
            done_wake,
        }
    }

    fn now(&self) -> Millis {
        self.store.now()
    }

    /// Wakes this process's idle workers: a repair may have made work.
    fn notify(&self) {
        self.job_wake.wake();
    }

    fn notify_outbox(&self) {
        self.outbox_wake.wake();
    }

    /// A page of outbox rows, newest first, optionally in one state: ids
    /// below `before` (the next, older page), or the `limit` ids just above
    /// `after` (the page before); the newest without either.
    pub fn outbox_page(
        &self,
        state: Option<OutboxState>,
        before: Option<i64>,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>> {
        self.store.outbox_page(state, before, after, limit)
    }

    /// Every attempt of an outbox row's effect, oldest first.
    pub fn outbox_attempts(&self, outbox_id: i64) -> Result<Vec<Attempt>> {
        self.store.outbox_attempts(outbox_id)
    }
    /// Pauses `queue` for every process on the file (or database): nothing
    /// new of it starts, from each process's next claim (at the latest one
    /// poll interval later); its running jobs finish and enqueues still
    /// succeed. A queue may be paused before its first job.
    pub fn pause_queue(&self, queue: &str) -> Result<()> {
        self.change_queue(queue, Some(true), &QueueLimits::new())
    }

    /// Lifts a pause; its cap and rate, if any, stay in force.
    pub fn resume_queue(&self, queue: &str) -> Result<()> {
        self.change_queue(queue, Some(false), &QueueLimits::new())
    }

    /// Changes `queue`'s cap and rate limit (a limit `limits` does not name
    /// is kept), in force for every process from its next claim. A cap of
    /// 0 is refused with [`crate::error::Error::InvalidInput`] and nothing is written.
    pub fn set_queue_limits(&self, queue: &str, limits: QueueLimits) -> Result<()> {
        self.change_queue(queue, None, &limits)
    }

    /// Every queue that has jobs or controls, by name: its controls, its
    /// queued and running jobs, the starts in its rate's window.
    pub fn queue_controls(&self) -> Result<Vec<QueueControl>> {
        let now = self.now();
        self.store.queue_controls(now)
    }

    fn change_queue(&self, queue: &str, paused: Option<bool>, limits: &QueueLimits) -> Result<()> {
        let now = self.now();
        self.store.change_queue(queue, paused, limits, now)?;
        // A resumed or widened queue may have work for this process's
        // workers now.
        self.notify();
        Ok(())
    }
    /// Counts jobs and outbox rows per state, kind and queue, the backlog's
    /// age, the ledger, and the file's size.
    pub fn stats(&self) -> Result<Stats> {
        let now = self.now();
        self.store.stats(now)
    }

    /// One job with its runs and the outbox rows it wrote; `None` when there
    /// is no job with this id.
    pub fn job_detail(&self, id: i64) -> Result<Option<JobDetail>> {
        self.store.job_detail(id)
    }

    /// The workflow around the job of `key`: every job linked to it
    /// through dependencies, either way, transitively, with their states
    /// and the edges between them (at most [`Workflow::LIMIT`] jobs, the
    /// nearest; `truncated` says when there were more). `None` when no job
    /// has the key (a job with no dependency is a workflow of one).
    pub fn workflow(&self, key: &str) -> Result<Option<Workflow>> {
        self.store.workflow(key, Workflow::LIMIT)
    }

    /// Everything known about one idempotency key: its deliveries, its job
    /// (unless none was enqueued or it was pruned), every run, the ledger
    /// row, the outbox rows with their attempts, the controls in force on
    /// the job's queue, and the jobs it depends on and that depend on it.
    pub fn explain(&self, key: &str) -> Result<Explanation> {
        let mut e = self.store.explain(key)?;
        if let Some(job) = &e.job {
            let now = self.now();
            e.queue_control = self.store.queue_control(&job.queue, now)?;
        }
        Ok(e)
    }
    /// Jobs per queue and state with each queue's backlog age, the last
    /// hour's runs per minute, the outbox, the schedules, the ledger and the
    /// storage's size, in one read snapshot. Reads every job and outbox row
    /// once.
    pub fn overview(&self) -> Result<Overview> {
        let now = self.now();
        let mut o = self.store.overview(now)?;
        o.controls = self
            .store
            .queue_controls(now)?
            .into_iter()
            .filter(QueueControl::in_force)
            .collect();
        Ok(o)
    }
    /// Dead jobs and dead outbox rows grouped by last error and kind, the
    /// largest groups first, at most `limit` groups of each.
    pub fn failures(&self, limit: u32) -> Result<Failures> {
        self.store.failures(limit)
    }
    /// The queue's metrics as Prometheus text (exposition format 0.0.4),
    /// for an application that serves `/metrics` from its own HTTP server
    /// (`litejob serve` serves the same text). The families:
    ///
    /// - `litejob_jobs{queue,kind,state}` (gauge): job rows, every state of
    ///   each queue and kind present, zeros included;
    /// - `litejob_outbox{kind,state}` (gauge): outbox rows;
    /// - `litejob_oldest_queued_age_seconds{queue}` (gauge): how long the
    ///   longest-waiting runnable job of the queue has been due (since its
    ///   `run_at`: a job scheduled for later is not late), 0 when none is;
    /// - `litejob_deliveries_total` and `litejob_duplicate_deliveries_total`
    ///   (counters): enqueues seen over the job rows in the queue, and those
    ///   that were duplicates (a prune lowers them: Prometheus reads that as
    ///   a counter reset);
    /// - `litejob_attempts{kind,outcome}` (gauge): runs in the attempt
    ///   history, by the job's or the effect's kind;
    /// - `litejob_partitions_at_limit{queue}` (gauge): of each queue with
    ///   partition limits, the partitions a claim would skip now.
    /// - `litejob_ledger_rows`, `litejob_file_bytes`, `litejob_wal_bytes`
    ///   (gauges). On PostgreSQL `litejob_file_bytes` is the size of
    ///   litejob's tables on the server (`pg_total_relation_size`: rows,
    ///   indexes, TOAST) and `litejob_wal_bytes` is 0 (the server's log is
    ///   the whole cluster's, not the queue's).
    ///
    /// It reads every row of `jobs`, `outbox` and `attempts` once: about
    /// half a second for a million jobs with their runs in a file on a
    /// small VPS, about a second on PostgreSQL on the same machine (where
    /// joining each run to its job's kind is most of it).
    pub fn metrics(&self) -> Result<String> {
        let now = self.now();
        let t = self.store.tally(now)?;
        let mut text = render(&t, now, self.store.kind());
        crate::core::reports::metrics::partitions_at_limit(
            &mut text,
            &self.store.queue_controls(now)?,
        );
        Ok(text)
    }
    /// Requeues one dead job with a renewed attempt budget, runnable now.
    /// [`crate::error::Error::NotFound`] when there is no such job; [`crate::error::Error::WrongState`]
    /// when it is not dead (nothing changes).
    pub fn retry_job(&self, id: i64) -> Result<()> {
        let now = self.now();
        self.store.retry_job(id, now)?;
        self.notify();
        Ok(())
    }

    /// Requeues every dead job (of `kind`, if given) with a renewed attempt
    /// budget, a bounded batch per write transaction so the write lock is
    /// never held long. Only jobs dead when a batch runs are touched; the
    /// walk goes by id, so a job that dies again meanwhile is not retried
    /// twice. Returns how many were requeued.
    pub fn retry_dead_jobs(&self, kind: Option<&str>) -> Result<usize> {
        let (now, batch) = (self.now(), crate::core::reports::prune::BATCH as i64);
        let mut after = 0i64;
        let mut total = 0usize;
        loop {
            let ids = self.store.retry_dead_batch(kind, after, batch, now)?;
            total += ids.len();
            if let Some(max) = ids.iter().max() {
                after = *max;
                self.notify();
            }
            if (ids.len() as i64) < batch {
                return Ok(total);
            }
        }
    }

    /// Cancels a job that has not finished: it will not run (again), nor
    /// will any job that depends on it, directly or through others (each
    /// cancelled with `last_error` naming this one), in the same
    /// transaction. Returns the state it was cancelled from.
    ///
    /// A running job is `cancelled` at once in the database too: its run's
    /// attempt ends `cancelled`, and that run can no longer commit (its
    /// end is fenced on its attempt, as for a lost lease). The process
    /// running it learns of the cancel within its poll interval: the
    /// handler's `ctx.is_cancelled()` turns true, and a prepare step with
    /// a timeout is let go of (its worker freed); other user code finishes
    /// on its own, its result dropped.
    ///
    /// [`crate::error::Error::NotFound`] when there is no such job;
    /// [`crate::error::Error::WrongState`] when it finished (nothing is
    /// left to cancel).
    pub fn cancel_job(&self, id: i64) -> Result<JobState> {
        let now = self.now();
        let was = self.store.cancel_job(id, now)?;
        self.done_wake.wake();
        Ok(was)
    }

    /// Requeues a dead outbox row with a fresh attempt budget, due now.
    /// [`crate::error::Error::NotFound`] when there is no such row; [`crate::error::Error::WrongState`]
    /// when it is not dead (nothing changes).
    pub fn retry_outbox(&self, outbox_id: i64) -> Result<()> {
        let now = self.now();
        self.store.retry_outbox(outbox_id, now)?;
        // Effect threads of this process pick it up now, not at their next poll.
        self.notify_outbox();
        Ok(())
    }

    /// Deletes finished history in bounded batches (one write transaction
    /// per batch), so even a prune of millions of rows holds the write lock
    /// only briefly at a time and workers keep going in between. A finished
    /// job whose outbox rows are not all sent yet is kept, so
    /// [`Admin::explain`] can still link the pending effect to its job.
    pub fn prune(&self, opts: &PruneOptions) -> Result<PruneReport> {
        self.prune_while(opts, &|| true)
    }

    /// [`Admin::prune`], stopping between two batches once `go_on` says no
    /// (a runtime's retention pass, when the runtime stops).
    pub(crate) fn prune_while(
        &self,
        opts: &PruneOptions,
        go_on: &dyn Fn() -> bool,
    ) -> Result<PruneReport> {
        let now = self.now();
        let before = |d: Duration| now.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64);
        let batch = opts.batch.max(1) as i64;
        let finished_before = before(opts.older_than);
        let mut report = PruneReport::default();
        // Jobs first: their outbox rows outlive them (job_id becomes NULL),
        // and their attempts go in the same transaction.
        let failed_before = before(opts.failed_older_than.unwrap_or(opts.older_than));
        let mut steps = vec![
            (PruneWhat::Jobs { failed_before }, finished_before),
            (PruneWhat::Outbox, finished_before),
        ];
        if let Some(d) = opts.ledger_older_than {
            steps.push((PruneWhat::Ledger, before(d)));
        }
        for (what, before) in steps {
            loop {
                let (rows, attempts) = self.store.prune_batch(what, before, batch)?;
                report.transactions += 1;
                match what {
                    PruneWhat::Jobs { .. } => {
                        report.jobs += rows;
                        report.job_attempts += attempts;
                    }
                    PruneWhat::Outbox => {
                        report.outbox += rows;
                        report.outbox_attempts += attempts;
                    }
                    PruneWhat::Ledger => report.ledger += rows,
                }
                if (rows as i64) < batch {
                    break;
                }
                if !go_on() {
                    return Ok(report);
                }
            }
        }
        Ok(report)
    }
    /// Checks that the queue is sound, in one read snapshot, writing
    /// nothing (it works on a queue opened read-only): the storage's own
    /// check (`PRAGMA integrity_check` on a file; amcheck on PostgreSQL
    /// when it is installed), the schema version, and litejob's invariants
    /// across its tables ([`crate::admin::Invariant`]): a succeeded job's
    /// key in the ledger, an outbox row only of a job that succeeded, a
    /// running job on a running attempt, attempts' outcomes that agree
    /// with their jobs' and outbox rows' states. It reads every row of
    /// `jobs`, `outbox` and `attempts` a few times.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.store.verify()
    }

    /// Every schedule declared on this queue (by any process), by name.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.store.schedules()
    }
}
