//! Wake-ups and the clock on PostgreSQL. The notifier thread sends
//! `NOTIFY` for this process's enqueues and outbox rows, coalesced and
//! off the producers' path (a `NOTIFY` takes a database-wide lock at
//! commit: sent from every producer's transaction it would serialize their
//! commits); the listener, a runtime's thread, turns the notifications of
//! every process into wake-ups of its workers. A lost notification (a
//! pooler that drops them, a broken connection) only costs a poll
//! interval. The notifier also keeps the offset of the server's clock,
//! the one every lease is measured on. Writes no table.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use postgres::fallible_iterator::FallibleIterator;

use super::conn::{read_err, PgConn, Session};
use crate::core::time::{now_ms, Millis};
use crate::error::{Error, Result};

/// The channel enqueues notify.
pub(crate) const JOBS_CHANNEL: &str = "litejob_jobs";
/// The channel committed outbox rows notify.
pub(crate) const OUTBOX_CHANNEL: &str = "litejob_outbox";

/// Opens a notification's transaction behind a transaction pooler: one
/// that does not wait for its WAL flush. A simple query of several
/// statements (one round trip), never prepared.
const QUIET_TRANSACTION: &str = "START TRANSACTION; SET LOCAL synchronous_commit = off;";

/// How often the clock's offset is measured again.
const CLOCK_EVERY: Duration = Duration::from_secs(5);

/// At most one notification per channel this often: one wakes a listener,
/// whose workers then claim until the queue is empty, so a burst needs no
/// more. Under a stream of enqueues a NOTIFY per enqueue was a second
/// transaction on the server for each one, a large part of a producer's
/// rate; the price is that another process's idle worker hears of work up
/// to this much later.
const NOTIFY_EVERY: Duration = Duration::from_millis(10);

/// The server's clock: this machine's plus a measured offset. Machines'
/// clocks differ; every lease, retry time and timestamp is measured on
/// the one clock they share, to within half a round trip.
#[derive(Default)]
pub(crate) struct Clock {
    offset_ms: AtomicI64,
    /// When it was last measured, on this machine's clock.
    measured_at: AtomicI64,
    /// A test's clock, which the server's never overrides.
    test: Option<crate::core::time::Clock>,
}

impl Clock {
    /// The server's clock, or `test`'s if it is a test's.
    pub(crate) fn new(test: &crate::core::time::Clock) -> Clock {
        Clock {
            test: test.is_manual().then(|| test.clone()),
            ..Clock::default()
        }
    }

    /// Now on the server's clock (or the test's), in ms since the epoch.
    pub(crate) fn now(&self) -> Millis {
        match &self.test {
            Some(test) => test.now(),
            None => now_ms() + self.offset_ms.load(Ordering::Relaxed),
        }
    }

    /// Measures the offset: the server's time against the middle of the
    /// round trip that read it.
    pub(crate) fn measure(&self, c: &mut PgConn) -> Result<()> {
        if self.test.is_some() {
            return Ok(());
        }
        let t0 = now_ms();
        // One round trip, as a simple query: behind a transaction pooler a
        // statement of the extended protocol takes three (its transaction
        // opened, run, committed), and the offset is only as good as the
        // round trip is short.
        let answer = c
            .client
            .simple_query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            .map_err(read_err)?;
        let server: i64 = answer
            .iter()
            .find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
                _ => None,
            })
            .ok_or_else(|| Error::Internal("the server's clock answered no number".into()))?;
        let t1 = now_ms();
        self.offset_ms
            .store(server - (t0 + t1) / 2, Ordering::Relaxed);
        self.measured_at.store(t1, Ordering::Relaxed);
        Ok(())
    }

    /// Measures the offset again if the last measure is older than
    /// [`CLOCK_EVERY`]: for a store with no notifier thread to do it.
    pub(crate) fn refresh(&self, c: &mut PgConn) -> Result<()> {
        let age = now_ms() - self.measured_at.load(Ordering::Relaxed);
        if age.unsigned_abs() >= CLOCK_EVERY.as_millis() as u64 {
            self.measure(c)?;
        }
        Ok(())
    }
}

/// What the notifier is asked to announce.
#[derive(Clone, Copy)]
enum Signal {
    Jobs,
    Outbox,
}

/// The notifier thread's handle: dropping it ends and joins the thread
/// (once the [`NotifyHandle`]s lent to async writes are gone too).
pub(crate) struct Notifier {
    tx: Option<Sender<Signal>>,
    thread: Option<JoinHandle<()>>,
}

/// A sender of wake-ups, lent to a write running on another thread.
#[derive(Clone)]
pub(crate) struct NotifyHandle(Sender<Signal>);

impl NotifyHandle {
    /// New jobs committed.
    pub(crate) fn jobs(&self) {
        let _ = self.0.try_send(Signal::Jobs);
    }
}

impl Notifier {
    pub(crate) fn start(session: Session, clock: Arc<Clock>) -> Result<Notifier> {
        // Bounded: signals that wait are announced together anyway.
        let (tx, rx) = crossbeam_channel::bounded(64);
        let thread = std::thread::Builder::new()
            .name("litejob-pg-notifier".into())
            .spawn(move || notifier_loop(session, clock, rx))
            .map_err(Error::Io)?;
        Ok(Notifier {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// A notifier with no thread, for a store that never writes: its
    /// signals go nowhere.
    pub(crate) fn none() -> Notifier {
        Notifier {
            tx: None,
            thread: None,
        }
    }

    /// A sender for a write that runs on another thread.
    pub(crate) fn handle(&self) -> Option<NotifyHandle> {
        self.tx.clone().map(NotifyHandle)
    }

    /// New jobs committed: wake the workers of every process.
    pub(crate) fn jobs(&self) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(Signal::Jobs);
        }
    }

    /// New outbox rows committed: wake the effect threads of every process.
    pub(crate) fn outbox(&self) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(Signal::Outbox);
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn notifier_loop(session: Session, clock: Arc<Clock>, rx: Receiver<Signal>) {
    let mut conn: Option<PgConn> = None;
    let mut next_clock = Instant::now() + CLOCK_EVERY;
    let mut quiet_until = Instant::now();
    loop {
        let first = match rx.recv_timeout(next_clock.saturating_duration_since(Instant::now())) {
            Ok(s) => Some(s),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if first.is_some() {
            // Sent one a moment ago: this one goes out with whatever else
            // comes meanwhile.
            std::thread::sleep(quiet_until.saturating_duration_since(Instant::now()));
        }
        let (mut jobs, mut outbox) = (false, false);
        for s in first.into_iter().chain(rx.try_iter()) {
            match s {
                Signal::Jobs => jobs = true,
                Signal::Outbox => outbox = true,
            }
        }
        if !matches!(&conn, Some(c) if !c.client.is_closed() && !c.stale) {
            conn = session.connect().ok().and_then(|mut c| {
                // A notification lost in a crash costs a poll: never wait
                // for the WAL flush of one (behind a transaction pooler,
                // said in each notification's transaction instead).
                if c.pooled() {
                    return Some(c);
                }
                c.client
                    .batch_execute("SET synchronous_commit = off")
                    .ok()
                    .map(|_| c)
            });
        }
        let Some(c) = conn.as_mut() else {
            // The server is out of reach: the pollers find the work, and
            // this thread tries again when the next attempt is due (never
            // in a loop: see `reach`).
            next_clock = Instant::now() + session.reach.retry_in();
            continue;
        };
        let mut sql = String::new();
        if jobs {
            sql.push_str(&format!("NOTIFY {JOBS_CHANNEL};"));
        }
        if outbox {
            sql.push_str(&format!("NOTIFY {OUTBOX_CHANNEL};"));
        }
        if !sql.is_empty() {
            if c.pooled() {
                // One round trip, one transaction: nothing of it outlives
                // it on the pooler's server session.
                sql = format!("{QUIET_TRANSACTION} {sql} COMMIT");
            }
            if c.client.batch_execute(&sql).is_err() {
                // A standby refuses NOTIFY: after a failover the next
                // connection finds the primary.
                conn = None;
                continue;
            }
            quiet_until = Instant::now() + NOTIFY_EVERY;
        }
        if Instant::now() >= next_clock {
            if clock.measure(c).is_err() {
                conn = None;
            }
            next_clock = Instant::now() + CLOCK_EVERY;
        }
    }
}

/// A runtime's listener: holds a connection that `LISTEN`s to both
/// channels and calls `wake_jobs` / `wake_outbox` for each notification,
/// reconnecting after a failure; returns when `stop` fires.
pub(crate) fn listen_loop(
    session: &Session,
    stop: &Receiver<()>,
    poll: Duration,
    wake_jobs: impl Fn(),
    wake_outbox: impl Fn(),
) {
    let mut conn: Option<PgConn> = None;
    loop {
        if !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty)) {
            return;
        }
        let c = match conn.take() {
            Some(c) if !c.client.is_closed() => conn.insert(c),
            _ => {
                // A standby refuses LISTEN: after a failover the next
                // connection finds the primary.
                let fresh = session.connect().ok().and_then(|mut c| {
                    c.client
                        .batch_execute(&format!("LISTEN {JOBS_CHANNEL}; LISTEN {OUTBOX_CHANNEL}"))
                        .ok()
                        .map(|_| c)
                });
                let Some(fresh) = fresh else {
                    let wait = session
                        .reach
                        .retry_in()
                        .max(poll.min(Duration::from_millis(200)));
                    let _ = stop.recv_timeout(wait);
                    continue;
                };
                // Work may have been announced while nobody listened.
                wake_jobs();
                wake_outbox();
                conn.insert(fresh)
            }
        };
        // Short waits, so a stop is seen quickly.
        let mut notes = c.client.notifications();
        let first = notes.timeout_iter(Duration::from_millis(100)).next();
        let broken = first.is_err();
        if let Ok(Some(n)) = first {
            let (mut jobs, mut outbox) =
                (n.channel() == JOBS_CHANNEL, n.channel() == OUTBOX_CHANNEL);
            // The ones already here, without waiting for more.
            let mut pending = notes.iter();
            while let Ok(Some(n)) = pending.next() {
                jobs |= n.channel() == JOBS_CHANNEL;
                outbox |= n.channel() == OUTBOX_CHANNEL;
            }
            if jobs {
                wake_jobs();
            }
            if outbox {
                wake_outbox();
            }
        }
        drop(notes);
        if broken {
            conn = None;
        }
    }
}
