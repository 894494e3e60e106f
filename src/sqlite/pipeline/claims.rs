//! The claim the supervisor sends to the writer: what it takes, and the
//! apply-only runs it starts itself in the same writer cycle. Writes `jobs`
//! and `attempts` (through the claim module), on the writer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::core::backoff::Rng;
use crate::core::time::Millis;
use crate::driver::Store;
use crate::error::Result;
use crate::sqlite::claim::{self, Claimed};
use crate::sqlite::writer;

use super::pending::Run;
use super::start::{apply_in, Worked};
use super::Pipe;

/// What a claim took.
pub(crate) struct Taken {
    /// Jobs for the workers to start (handlers with a prepare step, and
    /// suspects, which run alone).
    pub(crate) claimed: Vec<Claimed>,
    /// Apply-only runs the claim started itself: their apply steps run on
    /// the writer in the claim's own cycle; a worker sees their end (logs
    /// it, lets go of the job).
    pub(crate) runs: Vec<Run>,
    /// When the claim took jobs of a better priority than the rest, it
    /// started only those: the rest (how many) are started by a light
    /// follow-up in the cycle's next transaction, which hands their runs
    /// to the workers itself.
    pub(crate) later: Option<usize>,
    /// When a full rate frees a start (see [`claim::Batch::frees_at`]).
    pub(crate) frees_at: Option<Millis>,
}

/// Whether a claim may find work: unless `more_known` (the last claim
/// filled its batch), looks through a reader, since an idle poll must not
/// write.
pub(crate) fn any_to_claim(s: &Arc<Pipe>, more_known: bool) -> Result<bool> {
    if more_known {
        return Ok(true);
    }
    let b = s.store.as_ref();
    b.any_to_claim(&s.kinds, s.cfg.queues.as_deref(), b.now())
}

/// Sends a claim of up to `n` jobs to the writer. Always through its
/// thread, never inline on the supervisor's (as a lone blocked caller's
/// write would be): inline, the supervisor would also apply the runs it
/// started and fsync them before it could claim again, while the writer
/// thread sat idle. Its answer comes at its light commit.
///
/// An apply-only job (its handler has no prepare step, the common case) is
/// started by the claim itself, in the same light transaction, and its
/// apply step queued to run right after that commit, in the same writer
/// cycle ([`writer::Cycle::apply`]). Enqueues are applied before claims in a
/// cycle, so a high-priority job enqueued while a backlog runs waits about
/// one writer cycle, not three (its enqueue's, its claim's and its
/// start's). Its handler runs on the writer thread, but its attempt row
/// names a logical worker, the workers in turn: the writer is an
/// implementation detail, and a worker, whichever is free, only sees its end.
/// `idle`: the workers free to start a job now, as many as the claim may
/// take of a capped or rate-limited queue's jobs for them (see
/// [`claim::claim_batch`]).
// Long: the claim's whole light transaction is one closure, so its
// writes and the follow-ups it queues read in the order they happen.
pub(crate) fn submit_claim(
    s: &Arc<Pipe>,
    n: usize,
    idle: usize,
    lease_ms: i64,
    rng: &mut Rng,
) -> Receiver<Result<Taken>> {
    let sh = s.clone();
    let seed = rng.next_u64();
    s.writer.submit_light(move |conn, cycle| {
        let now = sh.now();
        // Stopping: whatever is claimed goes back through the buffer.
        let start_here = !sh.stopping.load(Ordering::SeqCst) && sh.max_in_flight > 0;
        let ask = claim::ClaimAsk {
            kinds: &sh.kinds,
            queues_json: sh.queues_json.as_deref(),
            limit: n,
            for_workers: idle,
            owner: &sh.owner,
            lease_until: now + lease_ms,
            now,
        };
        let batch = claim::claim_batch(conn, &ask, |c, split, ahead| {
            let Some(handler) = sh.handlers.get(&c.kind) else {
                return claim::Take::Claim;
            };
            if !start_here || handler.has_prepare() || c.abandoned > 0 {
                claim::Take::Claim
            } else {
                // Its handler runs on the writer; its attempt names the
                // worker it is counted against.
                let worker = sh.logical_worker();
                let w = (handler.clone(), worker.clone());
                if split && !ahead {
                    claim::Take::Later(w, worker)
                } else {
                    claim::Take::Start(w, worker)
                }
            }
        })?;
        if batch.held_back {
            sh.slot_wanted.store(true, Ordering::SeqCst);
        }
        let mut rng = Rng::seeded(seed);
        let mut taken = Taken {
            claimed: Vec::new(),
            runs: Vec::new(),
            later: None,
            frees_at: batch.frees_at,
        };
        for (c, started) in batch.taken {
            match started {
                Some((st, w)) => {
                    let unit = rng.unit();
                    taken.runs.push(apply_in(cycle, &sh, c, st, w, unit, now));
                }
                None => taken.claimed.push(c),
            }
        }
        if !batch.later.is_empty() {
            let (count, sh) = (batch.later.len(), sh.clone());
            // Counted against max_in_flight until the follow-up has
            // counted its runs (it may run before the supervisor hears
            // of the claim: the balance may dip below 0 meanwhile).
            sh.later_reserved.fetch_add(count as i64, Ordering::SeqCst);
            let _ = cycle.follow_up_light(move |conn, cycle| {
                let started = start_later(conn, cycle, &sh, batch.later, lease_ms, &mut rng);
                sh.later_reserved.fetch_sub(count as i64, Ordering::SeqCst);
                let runs = started.inspect_err(|e| {
                    log::warn!(target: "litejob", "starting the rest of a claim failed: {e}");
                })?;
                // Handed over here, not by the supervisor when this
                // commits (one wake-up of it less per cycle): if this
                // transaction is undone, the runs' apply steps never run
                // and their workers hear `Aborted`.
                let taken = Taken {
                    claimed: Vec::new(),
                    runs,
                    later: None,
                    frees_at: None,
                };
                count_in_flight(&sh, &taken);
                for run in taken.runs {
                    // Never waited for here, on the writer thread (its
                    // answer needs this thread): with no worker left to
                    // receive it (the runtime is gone), it is dropped.
                    let _ = sh.runs_tx.send(run);
                }
                Ok(())
            });
            taken.later = Some(count);
        }
        Ok(taken)
    })
}

/// Starts the jobs a split claim left queued (see [`claim::Take::Later`]),
/// unless the runtime is stopping (they stay queued then), and hands them
/// to their apply steps.
fn start_later(
    conn: &rusqlite::Connection,
    cycle: &mut writer::Cycle,
    sh: &Arc<Pipe>,
    later: Vec<(Claimed, Worked, String)>,
    lease_ms: i64,
    rng: &mut Rng,
) -> Result<Vec<Run>> {
    if sh.stopping.load(Ordering::SeqCst) {
        return Ok(Vec::new());
    }
    let now = sh.now();
    let mut runs = Vec::with_capacity(later.len());
    let mut starts = claim::Starts::new(conn)?;
    for (c, w, worker) in later {
        if let Some(st) = starts.start(&c, &sh.owner, now + lease_ms, &worker, now)? {
            let unit = rng.unit();
            runs.push(apply_in(cycle, sh, c, st, w, unit, now));
        }
    }
    Ok(runs)
}

/// Counts what a claim took in flight (its leases are renewed, and a stop
/// gives back what is left), before any worker can hear of it and finish.
pub(crate) fn count_in_flight(s: &Arc<Pipe>, taken: &Taken) {
    s.in_flight.claimed(
        taken.claimed.iter().map(|c| c.id),
        taken.runs.iter().map(|r| (r.ctx.id, r.attempt_id)),
    );
}
