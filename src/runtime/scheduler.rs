//! The scheduler: at a runtime's start it writes each declared schedule to
//! its row and fires the missed slots its catch-up policy asks for; then its
//! thread (`litejob-scheduler`, only in a runtime that declares schedules)
//! sleeps until the next slot and fires it.
//!
//! A firing is one write on the queue's writer: the slot's job through the
//! normal enqueue ([`WriteTx::enqueue`]: validation, dedup, a duplicate
//! counted in `deliveries`) and the row moved forward, in one transaction.
//! Another process that fires the same slot gets a duplicate and leaves the
//! row as it is. Nothing is read or written while no slot is due: the next
//! slot is kept in memory. A failed firing (a busy lock, a full disk) is
//! logged and tried again every second until it succeeds; its slots are
//! not skipped. Writes `jobs` and `schedules` through `WriteTx::enqueue`
//! and the schedule store only.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::core::job::Enqueued;
use crate::core::schedule::slots::{self, format_slot};
use crate::core::schedule::Declaration;
use crate::core::schedule::{Declared, Schedule};
use crate::core::time::Millis;
use crate::core::validate::EnqueueRules;
use crate::driver::schedules::SlotTx;
use crate::driver::{Engine, ABORTED_RETRIES};
use crate::error::{Error, Result};
use crate::queue::Queue;

/// The longest the thread sleeps between two looks at the clock, so a slot
/// is never late by more than this after the wall clock is set forward.
const MAX_SLEEP_MS: i64 = 1_000;

/// A gap this long between two looks means the process did not run (a
/// suspended machine, a stopped process): the slots it slept through are
/// missed ones, which follow the catch-up policy.
const STALL_MS: i64 = 60_000;

/// How long a failed firing waits before it is tried again.
const RETRY_MS: i64 = 1_000;

/// A failing firing is logged at most this often.
const WARN_EVERY_MS: i64 = 60_000;

/// Checks every declaration before anything is written: its expression, time
/// zone and payload, a name declared once, a handler in this runtime for
/// its kind, a queue this runtime claims from, a job the queue accepts, and
/// a slot still to come.
pub(crate) fn check(
    schedules: &[Schedule],
    kinds: &HashSet<&str>,
    queues: Option<&[String]>,
    rules: &EnqueueRules,
    now: Millis,
) -> Result<Vec<Declared>> {
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(schedules.len());
    for s in schedules {
        let d = s.declared()?;
        let refuse = |m: String| Err(Error::invalid(format!("schedule {:?}: {m}", s.name)));
        if !names.insert(s.name.clone()) {
            return refuse("declared twice in one runtime".into());
        }
        if !kinds.contains(s.kind.as_str()) {
            return refuse(format!(
                "this runtime has no handler for its kind {:?}: register one with .handler(..)",
                s.kind
            ));
        }
        if let Some(q) = queues.filter(|q| !q.contains(&s.queue)) {
            return refuse(format!(
                "its jobs go to queue {:?}, which this runtime does not claim from ({q:?})",
                s.queue
            ));
        }
        let Some(next) = d.slots.next_after(now) else {
            return refuse(format!(
                "cron expression {:?} has no slot to come in time zone {}",
                s.cron, s.tz
            ));
        };
        crate::core::validate::validate_parts(&d.job(next), rules, now).map_err(|e| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("schedule {:?}: {m}", s.name)),
            other => other,
        })?;
        out.push(d);
    }
    Ok(out)
}

/// A declared schedule, as the thread keeps it between two firings.
#[derive(Debug)]
pub(crate) struct Armed {
    d: Arc<Declared>,
    /// The next slot to fire; `None` when the expression has no more.
    next: Option<Millis>,
    /// After a failed firing: not tried again before this.
    retry_at: Option<Millis>,
    /// Since when firings fail, and when that was last logged.
    failing: Option<(Millis, Millis)>,
    /// The slots due are missed ones (a stall came before them), until
    /// they are fired.
    catching_up: bool,
}

/// What a start did for one schedule, for its log line.
struct Started {
    found: Declaration,
    fired: Vec<(Millis, Enqueued)>,
    next: Option<Millis>,
}

/// Writes each declaration to its row and fires, for the slots missed since
/// the row's next slot, what its catch-up policy asks (skipping any slot the
/// row records as fired), all in one transaction. Returns the schedules
/// armed with their next slot after `now`.
pub(crate) fn declare<E: Engine>(
    queue: &Queue<E>,
    decls: Vec<Declared>,
    now: Millis,
) -> Result<Vec<Armed>> {
    let decls: Vec<Arc<Declared>> = decls.into_iter().map(Arc::new).collect();
    let in_tx = decls.clone();
    let started = in_transaction(queue, move |tx| {
        in_tx
            .iter()
            .map(|d| declare_one(tx, d, now))
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(decls
        .into_iter()
        .zip(started)
        .map(|(d, st)| {
            log_start(&d, &st);
            Armed {
                next: st.next,
                d,
                retry_at: None,
                failing: None,
                catching_up: false,
            }
        })
        .collect())
}

/// [`declare`] for one schedule, inside the start's transaction.
fn declare_one(tx: &mut dyn SlotTx, d: &Declared, now: Millis) -> Result<Started> {
    let name = &d.schedule.name;
    let found = tx.declare(d, now)?;
    let (from, last) = found
        .before()
        .map_or((None, None), |r| (r.next_slot_at, r.last_slot_at));
    let missed = slots::catch_up(&d.slots, &d.schedule.catch_up, from, now);
    let mut fired = Vec::with_capacity(missed.len());
    for s in missed.into_iter().filter(|&s| last.is_none_or(|l| s > l)) {
        fired.push((s, tx.enqueue(d.job(s))?));
    }
    let next = d.slots.next_after(now);
    if let Some(&(s, _)) = fired.last() {
        tx.fired(name, s, next)?;
    }
    tx.set_next(name, next)?;
    Ok(Started { found, fired, next })
}

fn log_start(d: &Declared, st: &Started) {
    let s = &d.schedule;
    let next = st.next.map_or("none".into(), format_slot);
    match &st.found {
        Declaration::New => log::info!(target: "litejob",
            "schedule {:?} declared: cron {:?} in {}, kind {}; next slot {next}", s.name, s.cron, s.tz, s.kind),
        Declaration::Same(_) => log::info!(target: "litejob",
            "schedule {:?}: cron {:?} in {}, kind {}; next slot {next}", s.name, s.cron, s.tz, s.kind),
        Declaration::Changed(_, changes) => log::warn!(target: "litejob",
            "schedule {:?} declared differently before; this declaration replaces it (the last start wins): {}; next slot {next}",
            s.name, changes.join(", ")),
    }
    if !st.fired.is_empty() {
        log::info!(target: "litejob", "schedule {:?}: caught up {} missed slot(s) ({}): {}",
            s.name, st.fired.len(), s.catch_up.as_str(), describe(&st.fired));
    }
}

/// `2026-12-01T06:00:00Z job 7, …` (the first and last few of a long list).
fn describe(fired: &[(Millis, Enqueued)]) -> String {
    let one = |(s, e): &(Millis, Enqueued)| match e {
        Enqueued::New(id) => format!("{} job {id}", format_slot(*s)),
        Enqueued::Duplicate(id) => format!("{} job {id} (duplicate)", format_slot(*s)),
    };
    if fired.len() <= 6 {
        return fired.iter().map(one).collect::<Vec<_>>().join(", ");
    }
    let (head, tail) = (&fired[..3], &fired[fired.len() - 3..]);
    format!(
        "{}, …, {}",
        head.iter().map(one).collect::<Vec<_>>().join(", "),
        tail.iter().map(one).collect::<Vec<_>>().join(", ")
    )
}

impl Armed {
    /// When it next wants to look at the clock.
    fn wake_at(&self) -> Option<Millis> {
        let next = self.next?;
        Some(self.retry_at.map_or(next, |r| r.max(next)))
    }

    /// One look at `now`: fires the due slots, if any. `stalled`: the thread
    /// did not run for a while before this look.
    pub(crate) fn turn<E: Engine>(&mut self, queue: &Queue<E>, now: Millis, stalled: bool) {
        let Some(next) = self.next else { return };
        // A stall that ended before the next slot missed nothing.
        self.catching_up |= stalled && next <= now;
        if now < next || self.retry_at.is_some_and(|r| now < r) {
            return;
        }
        let s = &self.d.schedule;
        let due = slots::due(&self.d.slots, &s.catch_up, next, now, self.catching_up);
        let after = self.d.slots.next_after(now);
        match fire(queue, &self.d, due, after) {
            Ok(fired) => {
                if let Some((since, _)) = self.failing.take() {
                    log::info!(target: "litejob", "schedule {:?} fires again (it failed for {} ms)", s.name, now - since);
                }
                for (slot, e) in &fired {
                    let key = crate::core::schedule::slot_key(&s.name, *slot);
                    match e {
                        Enqueued::New(id) => {
                            log::info!(target: "litejob", job_id = *id, key = key.as_str();
                            "schedule {:?} fired slot {} as job {id}", s.name, format_slot(*slot))
                        }
                        Enqueued::Duplicate(id) => {
                            log::debug!(target: "litejob", job_id = *id, key = key.as_str();
                            "schedule {:?}: slot {} was fired already (job {id})", s.name, format_slot(*slot))
                        }
                    }
                }
                if after.is_none() {
                    log::warn!(target: "litejob", "schedule {:?}: cron {:?} has no more slots", s.name, s.cron);
                }
                self.next = after;
                self.retry_at = None;
                self.catching_up = false;
            }
            Err(e) => {
                let (since, warned) = self.failing.unwrap_or((now, now - WARN_EVERY_MS));
                if now - warned >= WARN_EVERY_MS {
                    log::warn!(target: "litejob", "schedule {:?}: firing slot {} failed ({e}); trying again every second",
                        s.name, format_slot(next));
                    self.failing = Some((since, now));
                } else {
                    self.failing = Some((since, warned));
                }
                self.retry_at = Some(now + RETRY_MS);
            }
        }
    }
}

/// Enqueues the jobs of `due` and moves the row forward to the last of
/// them, `next` coming after it, in one transaction. With no slot to fire
/// (missed ones the policy skips), only the row's next slot is written.
fn fire<E: Engine>(
    queue: &Queue<E>,
    d: &Arc<Declared>,
    due: Vec<Millis>,
    next: Option<Millis>,
) -> Result<Vec<(Millis, Enqueued)>> {
    let due = Arc::new(due);
    let mut tries = 0;
    loop {
        let (d, due) = (d.clone(), due.clone());
        let r = in_transaction(queue, move |tx| {
            let name = &d.schedule.name;
            let mut out = Vec::with_capacity(due.len());
            for &s in due.iter() {
                out.push((s, tx.enqueue(d.job(s))?));
            }
            match due.last() {
                Some(&s) => {
                    tx.fired(name, s, next)?;
                }
                None => tx.set_next(name, next)?,
            }
            Ok(out)
        });
        match r {
            // Rolled back with a neighbour in its group: nothing was
            // written, so at once again.
            Err(Error::Aborted(_)) if tries < ABORTED_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// The scheduler thread's body: looks at the clock, fires what is due,
/// sleeps until the next slot (at most a second) or the stop.
pub(crate) fn scheduler_loop<E: Engine>(
    queue: Queue<E>,
    mut armed: Vec<Armed>,
    stop: Receiver<()>,
) {
    let clock = |q: &Queue<E>| q.now();
    let mut awake = clock(&queue);
    loop {
        let now = clock(&queue);
        let stalled = now - awake > STALL_MS;
        if stalled {
            log::warn!(target: "litejob", "the scheduler did not run for {} s (suspended?): slots missed meanwhile follow their catch-up policy",
                (now - awake) / 1000);
        }
        for a in &mut armed {
            a.turn(&queue, now, stalled);
        }
        awake = clock(&queue);
        let wait = armed
            .iter()
            .filter_map(Armed::wake_at)
            .min()
            .map_or(MAX_SLEEP_MS, |t| (t - awake).clamp(0, MAX_SLEEP_MS));
        match stop.recv_timeout(Duration::from_millis(wait as u64)) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests;

/// Runs `f` in one write transaction of `queue`'s engine, and wakes this
/// process's workers when it enqueued a new job.
pub(crate) fn in_transaction<E, R, F>(queue: &Queue<E>, f: F) -> Result<R>
where
    E: Engine,
    R: Send + 'static,
    F: FnOnce(&mut dyn SlotTx) -> Result<R> + Send + 'static,
{
    let (r, enqueued) = E::in_slot_tx(queue.store(), queue.inner.rules.clone(), queue.now(), f)?;
    if enqueued {
        queue.notify();
    }
    Ok(r)
}
