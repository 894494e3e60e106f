//! Whether the server can be reached, shared by every connection a queue
//! opens: after a failed connection attempt, the next one waits out an
//! exponential backoff with jitter, and only one thread tries at a time.
//! Writes nothing.
//!
//! Why: a queue's threads (workers, the notifier, the listener, the
//! pool's producers) each reconnected on their own, at once and in a
//! loop, so a server that stayed down cost a core and thousands of
//! refused connections a second, and every process hammered it together
//! when it came back. Now one attempt per backoff step stands for the
//! whole process; a caller that asks in between is told at once that the
//! server is out of reach (nothing is sent), and a thread that loops asks
//! [`Reach::retry_in`] how long to sleep.

use crate::core::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::backoff::{Backoff, Rng};
use crate::error::Error;

/// The delay after the first failure.
const FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two attempts: the server's return is seen at
/// most this much (and a little jitter) late.
pub(crate) const CAP: Duration = Duration::from_secs(2);

/// The backoff between attempts.
fn policy() -> Backoff {
    Backoff::default()
        .with_base(FIRST)
        .with_max(CAP)
        .with_jitter(0.25)
}

/// The shared state: see the module's doc.
#[derive(Debug)]
pub(crate) struct Reach {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Failed attempts since the last success (0: reachable).
    failures: u32,
    /// No attempt before this, once one failed.
    next_try: Instant,
    /// An attempt is under way on some thread.
    trying: bool,
    /// Since when the server has been out of reach.
    down_since: Option<Instant>,
    /// The last attempt's error.
    last_error: String,
    rng: Rng,
}

/// The transient error of a call refused while the server is out of reach.
fn refusal(s: &State, location: &str) -> Error {
    let now = Instant::now();
    let wait = s.next_try.saturating_duration_since(now);
    let down = s
        .down_since
        .map_or(Duration::ZERO, |d| now.saturating_duration_since(d));
    Error::Connection(format!(
        "{location}: cannot reach the database server (out of reach for {:.1} s, {} failed \
         attempts, the last: {}); nothing was sent, the next attempt is in {} ms: retry later",
        down.as_secs_f64(),
        s.failures,
        s.last_error,
        wait.as_millis()
    ))
}

/// What a thread about to connect may do.
pub(crate) enum Admit {
    /// Try: report the outcome with [`Reach::succeeded`] or
    /// [`Reach::failed`] (or [`Reach::gave_up`] when the attempt said
    /// nothing about the server).
    Try,
    /// Do not: the server was out of reach a moment ago; the error says
    /// so, and when the next attempt is due.
    Refused(Error),
}

impl Default for Reach {
    fn default() -> Self {
        Reach {
            state: Mutex::new(State {
                failures: 0,
                next_try: Instant::now(),
                trying: false,
                down_since: None,
                last_error: String::new(),
                rng: Rng::from_entropy(),
            }),
        }
    }
}

impl Reach {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// May this thread open a connection now?
    pub(crate) fn admit(&self, location: &str) -> Admit {
        let mut s = self.lock();
        if s.failures == 0 {
            return Admit::Try;
        }
        if s.trying || Instant::now() < s.next_try {
            return Admit::Refused(refusal(&s, location));
        }
        s.trying = true;
        Admit::Try
    }

    /// The error a caller gets while the server is out of reach, or None
    /// when it is not.
    pub(crate) fn down_error(&self, location: &str) -> Option<Error> {
        let s = self.lock();
        (s.failures > 0).then(|| refusal(&s, location))
    }

    /// The attempt connected.
    pub(crate) fn succeeded(&self, location: &str) {
        let mut s = self.lock();
        s.trying = false;
        if s.failures > 0 {
            let down = s.down_since.map_or(0.0, |d| d.elapsed().as_secs_f64());
            log::warn!(
                target: "litejob",
                "{location}: the database server answers again, after {down:.1} s and {} failed \
                 attempts",
                s.failures
            );
        }
        s.failures = 0;
        s.down_since = None;
    }

    /// The attempt could not reach the server.
    pub(crate) fn failed(&self, location: &str, error: &str) {
        let mut s = self.lock();
        s.trying = false;
        s.failures = s.failures.saturating_add(1);
        let unit = s.rng.unit();
        let delay = policy().delay(s.failures, unit);
        s.next_try = Instant::now() + delay;
        s.last_error = error.to_string();
        if s.down_since.is_none() {
            s.down_since = Some(Instant::now());
            log::warn!(
                target: "litejob",
                "{location}: cannot reach the database server ({error}); connection attempts \
                 back off, to one every {} s at most",
                CAP.as_secs()
            );
        }
    }

    /// The attempt ended without telling whether the server is there (a
    /// refused login, say): the next thread may try.
    pub(crate) fn gave_up(&self) {
        self.lock().trying = false;
    }

    /// How long a thread that loops should wait before it tries again:
    /// until the next attempt is due (another thread's, perhaps), at least
    /// a few ms so that a loop never spins.
    pub(crate) fn retry_in(&self) -> Duration {
        let s = self.lock();
        let floor = Duration::from_millis(20);
        if s.failures == 0 {
            return floor;
        }
        if s.trying {
            // Another thread's attempt may take up to the connect timeout.
            return Duration::from_millis(100);
        }
        s.next_try
            .saturating_duration_since(Instant::now())
            .max(floor)
    }

    /// True while the server is out of reach as far as this process knows.
    pub(crate) fn is_down(&self) -> bool {
        self.lock().failures > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_failure_only_one_attempt_is_admitted_per_backoff_step() {
        let r = Reach::default();
        assert!(matches!(r.admit("db"), Admit::Try));
        r.failed("db", "Connection refused");
        // Within the step every caller is refused at once, with why.
        match r.admit("db") {
            Admit::Refused(Error::Connection(m)) => {
                assert!(m.contains("Connection refused"), "{m}");
                assert!(m.contains("nothing was sent"), "{m}");
            }
            _ => panic!("admitted within the backoff step"),
        }
        assert!(r.is_down());
        let wait = r.retry_in();
        assert!(wait <= FIRST.mul_f64(1.3), "{wait:?}");
        std::thread::sleep(wait + Duration::from_millis(5));
        // Once it is due, one thread tries; the others are refused while it
        // does.
        assert!(matches!(r.admit("db"), Admit::Try));
        assert!(matches!(r.admit("db"), Admit::Refused(_)));
        r.succeeded("db");
        assert!(!r.is_down());
        assert!(matches!(r.admit("db"), Admit::Try));
    }

    #[test]
    fn the_wait_doubles_to_a_cap_of_a_few_seconds() {
        let r = Reach::default();
        let mut last = Duration::ZERO;
        for n in 1..=12 {
            r.failed("db", "refused");
            let wait = r.retry_in();
            assert!(wait <= CAP.mul_f64(1.26), "attempt {n}: {wait:?}");
            if n <= 3 {
                assert!(
                    wait >= last.mul_f64(0.5),
                    "attempt {n}: {wait:?} after {last:?}"
                );
            }
            last = wait;
        }
        assert!(last >= CAP.mul_f64(0.74), "{last:?}");
    }
}
