//! The writer thread's loop: it takes what waits in the channel (waiting a
//! moment for blocked producers), sorts it into a cycle (an operation that
//! must run alone into one of its own) and runs it, and decides who
//! fsyncs. Writes no table itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::cycle::Core;
use super::op::{Durability, Op, Reply};
use super::sync::SyncMode;

/// The writer thread: runs cycles until every sender of `receiver` is gone,
/// then logs its statistics.
pub(super) fn writer_loop(
    core: Arc<Core>,
    receiver: Receiver<Op>,
    max_batch: usize,
    syncer: Sender<Vec<Reply>>,
) {
    let mut w = WriterThread {
        core,
        syncer,
        max_batch,
        durable: Vec::with_capacity(max_batch),
        light: Vec::with_capacity(max_batch),
        stats: Stats::default(),
        last_blocking: 0,
        last_cycle: Duration::ZERO,
        last_only_blocking: false,
    };
    while let Ok(first) = receiver.recv() {
        w.round(&receiver, first);
    }
    w.log_stats();
}

/// The writer thread's state between rounds.
struct WriterThread {
    core: Arc<Core>,
    syncer: Sender<Vec<Reply>>,
    max_batch: usize,
    // A cycle's first transaction: durable operations, then light ones
    // (see [`Core::cycle`]); the apply steps of the runs the light ones
    // start follow in the cycle's next transaction.
    durable: Vec<Op>,
    light: Vec<Op>,
    stats: Stats,
    /// Blocked callers answered by the last cycle.
    last_blocking: usize,
    /// How long the last cycle took.
    last_cycle: Duration,
    /// The last cycle held only blocked callers' operations (producers, not
    /// workers): see [`WriterThread::sync_directly`].
    last_only_blocking: bool,
}

/// What the writer did, logged when it stops.
#[derive(Default)]
struct Stats {
    cycles: u64,
    light: u64,
    durable: u64,
    busy: Duration,
}

impl WriterThread {
    /// One round: takes `first` and what follows it, and runs it as one
    /// cycle (more when an operation must run alone).
    fn round(&mut self, receiver: &Receiver<Op>, first: Op) {
        let t0 = Instant::now();
        let (taken, blocking) = self.take(receiver, first, t0);
        self.stats.light += self.light.len() as u64;
        self.stats.durable += self.durable.len() as u64;
        if self.has_work() {
            self.stats.cycles += 1;
            let t1 = Instant::now();
            let direct = self.sync_directly(taken, blocking);
            self.run_pending(taken, direct);
            self.last_cycle = t1.elapsed();
        }
        self.core.queued.fetch_sub(taken, Ordering::AcqRel);
        self.last_blocking = blocking;
        self.last_only_blocking = blocking == taken;
        self.stats.busy += t0.elapsed();
    }

    /// Takes `first` and the operations waiting behind it, up to
    /// `max_batch`, sorting them into the next cycle; how many it took, and
    /// how many of those came from blocked callers.
    fn take(&mut self, receiver: &Receiver<Op>, first: Op, t0: Instant) -> (usize, usize) {
        let gather_until = t0 + (self.last_cycle / 2).min(Duration::from_micros(500));
        let mut taken = 0;
        let mut next = Some(first);
        let mut blocking = 0;
        while let Some(op) = next.take() {
            taken += 1;
            blocking += op.blocking as usize;
            self.sort(op, taken);
            if taken < self.max_batch {
                next = receiver.try_recv().ok();
                if next.is_none() && self.last_blocking > 2 && blocking < self.last_blocking {
                    // The last group answered more blocked callers (several
                    // producers): they are likely sending their next
                    // operations right now, woken by their answers. Wait a
                    // moment for them rather than commit a small group and
                    // leave them to the next fsync; at most half the last
                    // cycle's time, and 0.5 ms. Pipelined operations
                    // (workers' runs) never make the writer wait.
                    let left = gather_until.saturating_duration_since(Instant::now());
                    if !left.is_zero() {
                        next = receiver.recv_timeout(left).ok();
                    }
                }
            }
        }
        (taken, blocking)
    }

    /// Puts `op` in the next cycle; one that must run alone (a suspect's
    /// start) runs now, in a cycle of its own with the apply step it queues,
    /// after what came before it.
    fn sort(&mut self, op: Op, taken: usize) {
        if op.alone {
            if self.has_work() {
                self.stats.cycles += 1;
                self.run_pending(taken, false);
            }
            self.stats.cycles += 1;
            self.run_cycle(&mut vec![op], taken, false);
            return;
        }
        match op.kind.durability() {
            Durability::Light => self.light.push(op),
            Durability::Durable => self.durable.push(op),
        }
    }

    fn has_work(&self) -> bool {
        !self.light.is_empty() || !self.durable.is_empty()
    }

    /// Whether the writer fsyncs and answers this cycle itself: only
    /// blocked callers, in this cycle and the last, and nothing else
    /// waiting (producers, no worker). Handing the fsync to the syncer puts
    /// a thread wake-up on every caller's path while the writer has nothing
    /// to do meanwhile: these callers come back only once answered.
    /// Workers' operations (pipelined) keep the
    /// syncer, so the writer goes on applying during the fsync, and so does
    /// NORMAL, whose syncer also syncs the WAL in the background. If
    /// operations arrive during the commit, the syncer takes the fsync after
    /// all. A group the syncer is still syncing is no matter: each group is
    /// answered after an fsync that began after its own commit, and the two
    /// fsyncs take turns (see `SyncMode::Wal::turn`).
    fn sync_directly(&self, taken: usize, blocking: usize) -> bool {
        matches!(self.core.sync, SyncMode::Wal { .. })
            && blocking == taken
            && self.last_only_blocking
            && self.core.queued.load(Ordering::Acquire) <= taken
            && self.syncer.is_empty()
    }

    /// Runs the cycle gathered so far.
    fn run_pending(&mut self, taken: usize, direct: bool) {
        let mut first = std::mem::take(&mut self.durable);
        first.append(&mut self.light);
        self.run_cycle(&mut first, taken, direct);
        // The buffer keeps its capacity for the next cycle.
        self.durable = first;
    }

    /// Runs one cycle; `direct`: the writer fsyncs it itself rather than
    /// the syncer (see [`WriterThread::sync_directly`]).
    fn run_cycle(&self, first: &mut Vec<Op>, taken: usize, direct: bool) {
        let core = &self.core;
        let conn = core.lock();
        let unsynced = core.cycle(&conn, first, (!direct).then_some(&self.syncer), taken);
        drop(conn);
        if unsynced.is_empty() {
            return;
        }
        // Operations that arrived meanwhile (a worker's run) should not
        // wait for this fsync: the syncer takes it after all.
        if core.queued.load(Ordering::Acquire) > taken {
            if let Err(e) = self.syncer.send(unsynced) {
                core.sync_and_answer(e.0);
            }
            return;
        }
        core.direct_syncs.fetch_add(1, Ordering::Relaxed);
        core.sync_and_answer(unsynced);
    }

    fn log_stats(&self) {
        let s = &self.stats;
        let (bg, inline) = self
            .core
            .checkpointer
            .as_ref()
            .map_or((0, 0), |c| c.counts());
        log::debug!(target: "litejob",
            "writer: {} cycles ({} synced by the writer), {} light ops, {} durable ops, busy {:?}, \
             checkpoints {bg} in the background and {inline} inline",
            s.cycles,
            self.core.direct_syncs.load(Ordering::Relaxed),
            s.light,
            s.durable,
            s.busy
        );
    }
}
