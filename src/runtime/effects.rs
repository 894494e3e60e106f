//! The effect threads: claim one outbox row, call its effect outside any
//! transaction, acknowledge it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::select;

use crate::core::backoff::Rng;
use crate::core::handler::{panic_message, EffectContext};
use crate::core::outbox::{ClaimedEffect, EffectResult, OutboxState};
use crate::driver::handler::ErasedEffect;
use crate::error::Result;
use crate::fault;

use crate::driver::pipeline::{sleep_or_stop, worker_name, Shared};
use crate::driver::{Engine, Store};

/// An effect thread's body: claims one outbox row at a time and performs
/// it; with nothing to claim, waits for an enqueue's wake-up or the poll.
pub(crate) fn effect_loop<E: Engine>(s: Arc<Shared<E>>) {
    let stop = s.stop.clone();
    let worker = worker_name();
    let mut rng = Rng::from_entropy();
    let wake = s.outbox_wake.clone();
    // Set by a failed claim: one that may have committed without its
    // answer reaching us holds a row nobody performs.
    let mut unsure = false;
    // Attempts whose effect ran but whose ack could not be recorded: their
    // rows are still under our name, and must not be given back as never
    // performed (their lease runs out, and they count as abandoned).
    let mut unacked: Vec<i64> = Vec::new();
    loop {
        if s.stopping.load(Ordering::SeqCst) {
            return;
        }
        if unsure {
            let b = s.store.as_ref();
            match b.release_lost_effect_claims(&s.owner, &worker, &unacked, b.now()) {
                Ok(n) => {
                    unsure = false;
                    if n > 0 {
                        log::info!(target: "litejob", "gave back {n} outbox rows whose claim's answer was lost");
                    }
                }
                Err(e) => {
                    crate::driver::pipeline::log_failure("outbox claim", &e);
                    sleep_or_stop(&stop, Duration::from_millis(200));
                    continue;
                }
            }
        }
        let c = match claim(&s, &worker) {
            Ok(Some(c)) => c,
            Ok(None) => {
                select! {
                    recv(stop) -> _ => return,
                    recv(wake) -> _ => {},
                    default(s.cfg.poll_interval) => {},
                }
                continue;
            }
            Err(e) => {
                crate::driver::pipeline::log_failure("outbox claim", &e);
                unsure = e.is_outcome_unknown();
                sleep_or_stop(&stop, Duration::from_millis(200));
                continue;
            }
        };
        let Some(effect) = s.effects.get(&c.row.kind).cloned() else {
            // Cannot happen (the claim asks only for our kinds), but never
            // leave a row `sending` under a lease nobody works on.
            let b = s.store.as_ref();
            let _ = b.release_effect(c.row.id, c.attempt_id, b.now());
            continue;
        };
        let attempt = c.attempt_id;
        if perform(&s, &worker, &mut rng, c, effect.as_ref())
            .acked
            .is_err()
        {
            // Bounded: only the recent ones can still be under our lease.
            if unacked.len() == 64 {
                unacked.remove(0);
            }
            unacked.push(attempt);
        }
    }
}

/// Claims the next due outbox row of this runtime's kinds, under a lease.
pub(crate) fn claim<E: Engine>(s: &Arc<Shared<E>>, worker: &str) -> Result<Option<ClaimedEffect>> {
    let lease_ms = s.cfg.lease.as_millis() as i64;
    let b = s.store.as_ref();
    let now = b.now();
    b.claim_effect(&s.effect_kinds, &s.owner, worker, now + lease_ms, now)
}

/// How a performed effect's attempt ended.
pub(crate) struct Performed {
    /// The effect returned `Ok`.
    pub(crate) sent: bool,
    /// The row's state its ack recorded (`None`: the lease was lost), or
    /// why the ack could not be recorded.
    pub(crate) acked: Result<Option<OutboxState>>,
}

/// Performs a claimed row's effect, outside any transaction, and
/// acknowledges it; counted in flight meanwhile, so its lease is renewed.
pub(crate) fn perform<E: Engine>(
    s: &Arc<Shared<E>>,
    worker: &str,
    rng: &mut Rng,
    c: ClaimedEffect,
    effect: &dyn ErasedEffect,
) -> Performed {
    s.in_flight.effect_started(c.row.id, c.attempt_id);
    let ctx = EffectContext {
        id: c.row.id,
        kind: c.row.kind.clone(),
        key: c.row.key.clone(),
        job_id: c.row.job_id,
        attempt: c.row.attempts,
        max_attempts: c.row.max_attempts,
    };
    let attempt_str = format!("{}/{}", ctx.attempt, ctx.max_attempts);
    log::info!(target: "litejob", outbox_id = ctx.id, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt_str.as_str(), worker = worker; "effect started");
    let t0 = Instant::now();
    let called = catch_unwind(AssertUnwindSafe(|| effect.call(&ctx, &c.row.payload)));
    fault::point("after-effect-before-ack");
    let retry_at = s.store.as_ref().now()
        + s.cfg
            .effect_backoff
            .delay(ctx.attempt as u32, rng.unit())
            .as_millis() as i64;
    let result = match called {
        Ok(Ok(())) => EffectResult::Sent,
        Ok(Err(error)) => EffectResult::Failed {
            error,
            panicked: false,
            retry_at,
        },
        Err(p) => EffectResult::Failed {
            error: panic_message(p.as_ref()),
            panicked: true,
            retry_at,
        },
    };
    let (outcome, err) = match &result {
        EffectResult::Sent => ("succeeded", String::new()),
        EffectResult::Failed {
            error, panicked, ..
        } => (if *panicked { "panicked" } else { "failed" }, error.clone()),
    };
    let (oid, aid) = (c.row.id, c.attempt_id);
    let acked = ack_with_retry(s, oid, aid, result);
    fault::point("after-ack-commit");
    s.in_flight.effect_ended(oid);
    let ms = t0.elapsed().as_millis() as u64;
    let state = match &acked {
        Ok(Some(st)) => st.as_str().to_string(),
        Ok(None) => "lease lost".into(),
        Err(e) => format!("not recorded: {e}"),
    };
    log::info!(target: "litejob", outbox_id = oid, kind = ctx.kind.as_str(), key = ctx.key.as_str(),
        attempt = attempt_str.as_str(), outcome = outcome, state = state.as_str(), duration_ms = ms,
        error = err.as_str(); "effect finished");
    Performed {
        sent: outcome == "succeeded",
        acked,
    }
}

/// Acknowledges an effect attempt, retrying transient failures while the
/// lease lasts: an effect that ran must not be run again just because the
/// disk was briefly full.
fn ack_with_retry<E: Engine>(
    s: &Arc<Shared<E>>,
    oid: i64,
    aid: i64,
    result: EffectResult,
) -> Result<Option<OutboxState>> {
    let give_up = Instant::now() + s.cfg.lease;
    let mut delay = Duration::from_millis(50);
    let b = s.store.as_ref();
    loop {
        match b.ack_effect(oid, aid, &result, b.now()) {
            Err(e) if e.is_transient() && Instant::now() < give_up => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}
