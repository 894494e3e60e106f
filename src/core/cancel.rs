//! A run's stop signal, decided once for both engines: its timeout (a
//! budget the run's own code spends, prepare step then apply step), and
//! whether the run was stopped (timed out, its job cancelled by an
//! operator, its lease lost). Shared by the clones of the run's
//! [`JobContext`](crate::JobContext) (`ctx.is_cancelled()`), the worker
//! that waits on its prepare step, and the runtime's watcher. Writes no
//! table.
//!
//! Timeouts are measured on the process's monotonic clock (`Instant`),
//! not the queue's: they bound how long code runs, not when a job is due.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::core::sync::lock;

/// Why a run was stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Its timeout ran out.
    TimedOut,
    /// An operator cancelled its job while it ran.
    Cancelled,
    /// Its job no longer runs under this run's attempt for another reason
    /// (its lease expired and the job was taken back).
    Lost,
}

impl Stop {
    fn code(self) -> u8 {
        match self {
            Stop::TimedOut => 1,
            Stop::Cancelled => 2,
            Stop::Lost => 3,
        }
    }

    fn from_code(c: u8) -> Option<Stop> {
        match c {
            1 => Some(Stop::TimedOut),
            2 => Some(Stop::Cancelled),
            3 => Some(Stop::Lost),
            _ => None,
        }
    }
}

/// No deadline (none set, or the run waits between its steps).
const NONE: u64 = u64::MAX;

/// A run's timeout and stop. The deadline runs while the run's code does:
/// from the run's start through its prepare step, paused while the run
/// waits for its turn in the engine (the file's writer, a PostgreSQL
/// batch's other prepare steps), running again through its apply step
/// with what was left.
pub(crate) struct RunSignal {
    timeout: Option<Duration>,
    /// What the deadline is counted from.
    origin: Instant,
    /// The deadline, in ns after `origin`; [`NONE`] while there is none.
    deadline_ns: AtomicU64,
    /// The budget left while paused, in ns.
    left_ns: AtomicU64,
    /// 0 while the run goes on, else [`Stop::code`].
    stop: AtomicU8,
    /// The prepare step ended ([`RunSignal::pause`]): a stop from outside
    /// no longer changes what the run does (its end is fenced).
    past_prepare: AtomicBool,
    /// Dropped at the stop: a worker waiting on the run's prepare step
    /// selects on `woken`. Only a run with a timeout has them (only such
    /// a run's prepare step runs on a thread of its own).
    wake: Mutex<Option<Sender<()>>>,
    woken: Option<Receiver<()>>,
}

impl std::fmt::Debug for RunSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSignal")
            .field("timeout", &self.timeout)
            .field("stopped", &self.stopped())
            .finish()
    }
}

impl RunSignal {
    /// A run starting now, with `timeout` for its code.
    pub(crate) fn new(timeout: Option<Duration>) -> RunSignal {
        let origin = Instant::now();
        let (wake, woken) = match timeout {
            Some(_) => {
                let (tx, rx) = crossbeam_channel::bounded(0);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        RunSignal {
            timeout,
            origin,
            deadline_ns: AtomicU64::new(timeout.map_or(NONE, nanos)),
            left_ns: AtomicU64::new(0),
            stop: AtomicU8::new(0),
            past_prepare: AtomicBool::new(false),
            wake: Mutex::new(wake),
            woken,
        }
    }

    /// The run's timeout, if it has one.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// When the step under way must end, if it has a deadline.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.deadline_ns.load(Ordering::Acquire) {
            NONE => None,
            ns => Some(self.origin + Duration::from_nanos(ns)),
        }
    }

    /// Why the run was stopped, if it was.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        Stop::from_code(self.stop.load(Ordering::Acquire))
    }

    /// Whether the run's code should stop: stopped, or past its deadline.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.stopped().is_some() || self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Stops the run for `why`, unless it was stopped already; wakes a
    /// worker waiting on it. Returns whether this call stopped it.
    pub(crate) fn stop(&self, why: Stop) -> bool {
        let first = self
            .stop
            .compare_exchange(0, why.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if first {
            lock(&self.wake).take();
        }
        first
    }

    /// Ready (disconnected) once the run is stopped; `None` for a run
    /// without a timeout.
    pub(crate) fn woken(&self) -> Option<&Receiver<()>> {
        self.woken.as_ref()
    }

    /// The prepare step ended: the deadline pauses, keeping what is left,
    /// while the run waits for its apply step.
    pub(crate) fn pause(&self) {
        self.past_prepare.store(true, Ordering::Release);
        if let Some(d) = self.deadline() {
            let left = d.saturating_duration_since(Instant::now());
            self.left_ns.store(nanos(left), Ordering::Release);
            self.deadline_ns.store(NONE, Ordering::Release);
        }
    }

    /// Whether the prepare step ended (see [`RunSignal::pause`]).
    pub(crate) fn past_prepare(&self) -> bool {
        self.past_prepare.load(Ordering::Acquire)
    }

    /// The apply step starts: the deadline runs again with what the
    /// prepare step left (all of it when it never paused). False when
    /// nothing is left: the apply step must not start.
    pub(crate) fn resume(&self) -> bool {
        if self.timeout.is_none() {
            return true;
        }
        if self.deadline_ns.load(Ordering::Acquire) == NONE {
            let left = Duration::from_nanos(self.left_ns.load(Ordering::Acquire));
            if left.is_zero() {
                return false;
            }
            let at = self.origin.elapsed() + left;
            self.deadline_ns.store(nanos(at), Ordering::Release);
        }
        !self.overran()
    }

    /// Whether the deadline of the step under way has passed.
    pub(crate) fn overran(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// The error of a run past its timeout ("timed out after 30s"); the
    /// run is stopped for it.
    pub(crate) fn timed_out(&self) -> String {
        self.stop(Stop::TimedOut);
        crate::core::lifecycle::timed_out(self.timeout.unwrap_or_default())
    }
}

/// How long a run may take: its job's own timeout (`jobs.timeout_ms`),
/// else its kind's, else the runtime's default; none when none is set.
pub(crate) fn run_timeout(
    job_ms: Option<i64>,
    kind: Option<Duration>,
    default: Option<Duration>,
) -> Option<Duration> {
    job_ms
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms as u64))
        .or(kind)
        .or(default)
        .filter(|t| !t.is_zero())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NONE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_timeout_beats_its_kinds_which_beats_the_default() {
        let (kind, default) = (Some(Duration::from_secs(5)), Some(Duration::from_secs(60)));
        assert_eq!(
            run_timeout(Some(300), kind, default),
            Some(Duration::from_millis(300))
        );
        assert_eq!(run_timeout(None, kind, default), kind);
        assert_eq!(run_timeout(None, None, default), default);
        assert_eq!(run_timeout(None, None, None), None);
    }

    #[test]
    fn a_run_without_a_timeout_has_no_deadline_and_stops_only_when_told() {
        let s = RunSignal::new(None);
        assert!(s.deadline().is_none() && s.woken().is_none());
        s.pause();
        assert!(s.resume() && !s.overran() && !s.is_cancelled());
        assert!(s.stop(Stop::Cancelled));
        assert!(!s.stop(Stop::Lost), "the first reason stays");
        assert_eq!(s.stopped(), Some(Stop::Cancelled));
        assert!(s.is_cancelled());
    }

    #[test]
    fn the_deadline_pauses_between_the_steps_and_runs_on_with_what_was_left() {
        let s = RunSignal::new(Some(Duration::from_secs(3600)));
        let first = s.deadline().unwrap();
        s.pause();
        assert!(s.deadline().is_none(), "no deadline while the run waits");
        assert!(!s.is_cancelled());
        assert!(s.resume());
        let again = s.deadline().unwrap();
        assert!(again >= first, "the wait was not charged to the run");
        assert!(!s.overran());
    }

    #[test]
    fn a_spent_budget_refuses_the_apply_step_and_wakes_the_waiter_at_the_stop() {
        let s = RunSignal::new(Some(Duration::from_nanos(1)));
        std::thread::sleep(Duration::from_millis(2));
        assert!(s.is_cancelled() && s.overran());
        s.pause();
        assert!(!s.resume(), "nothing left for the apply step");
        let woken = s.woken().unwrap().clone();
        assert_eq!(
            woken.try_recv(),
            Err(crossbeam_channel::TryRecvError::Empty)
        );
        s.stop(Stop::TimedOut);
        assert!(matches!(
            woken.recv_timeout(Duration::from_secs(5)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ));
    }
}
