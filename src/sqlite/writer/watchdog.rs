//! The transaction budget: a thread that interrupts an operation running
//! past it, so a handler that hangs inside its transaction cannot hold the
//! write lock forever.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rusqlite::Connection;

use crate::error::Result;

/// The watchdog thread; dropping it stops and joins the thread.
pub(super) struct Watchdog {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watches `op_started` (milliseconds since `epoch` when the current op
    /// started, 0 when idle) and interrupts `conn` when an op runs longer
    /// than `budget`, counting each op it stops in `interrupts`.
    pub(super) fn start(
        conn: &Connection,
        budget: Duration,
        epoch: Instant,
        op_started: &Arc<AtomicI64>,
        interrupts: &Arc<AtomicU64>,
    ) -> Result<Watchdog> {
        let handle = conn.get_interrupt_handle();
        let started = op_started.clone();
        // sqlite3_interrupt only stops a statement running at that
        // instant; an apply step that hangs in Rust between short
        // statements would never be stopped. So the watchdog also
        // marks the op as over budget (-1) and the next statement
        // the op runs (checked every few VM steps) is interrupted.
        // The period must stay below the length of a one-row INSERT
        // (about 10 steps; SQLite checks at the end of a step only
        // once the statement ran that many): with 1000 a handler
        // looping over short statements was never stopped (test
        // reliability::locks::handler_hanging_inside_its_transaction).
        // The callback is one relaxed atomic load.
        let over = op_started.clone();
        conn.progress_handler(
            8,
            Some(move || {
                over.load(Ordering::Relaxed) == -1
                    && over
                        .compare_exchange(-1, 0, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
            }),
        )?;
        let count = interrupts.clone();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let tick = (budget / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let t = std::thread::Builder::new()
            .name("litejob-watchdog".into())
            .spawn(move || loop {
                match stop_rx.recv_timeout(tick) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let s = started.load(Ordering::Acquire);
                if s > 0 {
                    let ran = epoch.elapsed().as_millis() as i64 - s;
                    // Only if that op is still the one running: an
                    // interrupt that arrived after it finished would
                    // hit the next op or the COMMIT.
                    if ran > budget.as_millis() as i64
                        && started
                            .compare_exchange(s, -1, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    {
                        log::warn!(target: "litejob",
                            "a write ran {ran} ms, past its budget of {} ms: interrupting it", budget.as_millis());
                        // Counted before either interrupt can land (this
                        // one, or the progress handler's), so the op that
                        // it stops always sees the count move.
                        count.fetch_add(1, Ordering::Release);
                        handle.interrupt();
                    }
                }
            })?;
        Ok(Watchdog {
            stop: Some(stop_tx),
            thread: Some(t),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
