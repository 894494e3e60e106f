//! [`RuntimeBuilder::drain`]: the builder's handlers, effects and schedules
//! run in the calling thread until nothing is due at the queue's clock, for
//! tests. The same transactions, ledger and outbox as the runtime's
//! threads; writes what they write, through the engine's drain.

use std::sync::Arc;

use crate::core::backoff::Rng;
use crate::core::job::JobState;
use crate::core::lifecycle::RunEnd;
use crate::core::outbox::OutboxState;
use crate::driver::pipeline::worker_name;
use crate::driver::Engine;
use crate::error::Result;

use super::effects::{claim, perform};
use super::{arm, shared, RuntimeBuilder};

/// What [`RuntimeBuilder::drain`] ran: one count per run or effect attempt
/// it recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// Runs whose work committed (the handler said `Done`).
    pub succeeded: usize,
    /// Runs that failed or panicked with attempts left: their job is
    /// queued again, due at its backoff (or `RetryAfter`) time.
    pub retried: usize,
    /// Runs that snoozed (`Outcome::Snooze`): their job is queued again,
    /// due after the snooze, its attempt given back.
    pub snoozed: usize,
    /// Runs that failed or panicked on their last attempt: their job is
    /// `dead`.
    pub dead: usize,
    /// Runs the handler discarded (`Outcome::Discard`, or a payload that
    /// does not decode): their job is `dead` whatever its attempts left.
    pub discarded: usize,
    /// Runs that found their key in the ledger: the work was done before,
    /// the handler was not called.
    pub duplicates: usize,
    /// Effects performed that returned `Ok` (their rows are `sent`).
    pub effects_sent: usize,
    /// Effect attempts that failed or panicked (their rows wait for a
    /// retry, or are `failed` once out of attempts).
    pub effects_failed: usize,
}

impl Drained {
    /// Counts a job's run.
    fn run(&mut self, end: &RunEnd) {
        let n = match (end.state, end.outcome) {
            (_, crate::AttemptOutcome::Duplicate) => &mut self.duplicates,
            (_, crate::AttemptOutcome::Snoozed) => &mut self.snoozed,
            (JobState::Succeeded, _) => &mut self.succeeded,
            (JobState::Queued, _) => &mut self.retried,
            (_, _) if end.discarded => &mut self.discarded,
            _ => &mut self.dead,
        };
        *n += 1;
    }

    /// Jobs run and effects performed, all outcomes together.
    pub fn total(&self) -> usize {
        self.succeeded
            + self.retried
            + self.snoozed
            + self.dead
            + self.discarded
            + self.duplicates
            + self.effects_sent
            + self.effects_failed
    }
}

impl<E: Engine> RuntimeBuilder<E> {
    /// Runs, in the calling thread, every job and effect due at the
    /// queue's clock, and fires the schedules' due slots, until nothing is
    /// due; then returns what ran. For tests: with a
    /// [`ManualClock`](crate::testing::ManualClock) a job due in ten
    /// minutes runs in the drain after the test advanced the clock ten
    /// minutes, with no sleep and no poll.
    ///
    /// Each job goes through the runtime's own path: the claim, the run's
    /// start, the ledger and the handler's writes in one transaction, the
    /// outbox; each effect is claimed, called and acknowledged as the
    /// effect threads do. The builder's worker count and poll interval do
    /// not matter here; its backoff, lease and outbox retries do. A job a
    /// run enqueues, or a retry due at once, runs in the same drain.
    ///
    /// An error is a schedule that cannot be declared, or a run or effect
    /// whose end could not be recorded (its job or row went back,
    /// uncharged).
    pub fn drain(mut self) -> Result<Drained> {
        let mut armed = arm(&mut self)?;
        let queue = self.queue.clone();
        // Never sent to: nothing of a drain waits for a stop.
        let (_stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let s = Arc::new(shared(self, stop_rx));
        let mut jobs = E::drain(s.clone())?;
        let worker = worker_name();
        let mut rng = Rng::from_entropy();
        let mut drained = Drained::default();
        loop {
            let now = queue.now();
            for a in &mut armed {
                a.turn(&queue, now, false);
            }
            let ends = if s.kinds.is_empty() {
                Vec::new()
            } else {
                jobs.run_due()?
            };
            ends.iter().for_each(|e| drained.run(e));
            let mut performed = 0;
            while !s.effects.is_empty() {
                let Some(c) = claim(&s, &worker)? else { break };
                let Some(effect) = s.effects.get(&c.row.kind).cloned() else {
                    // Cannot happen: the claim asks only for these kinds.
                    break;
                };
                let p = perform(&s, &worker, &mut rng, c, effect.as_ref());
                performed += 1;
                match (p.sent, p.acked?) {
                    (true, Some(OutboxState::Sent)) => drained.effects_sent += 1,
                    (false, Some(_)) => drained.effects_failed += 1,
                    _ => {}
                }
            }
            if ends.is_empty() && performed == 0 {
                return Ok(drained);
            }
        }
    }
}
