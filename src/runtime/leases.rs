//! Leases: renewing this process's (the heartbeat) and taking back expired
//! ones (reaping).

use std::sync::Arc;

use crate::claim;
use crate::error::Result;
use crate::outbox;
use crate::time::{now_ms, Millis};

use super::Shared;

/// Renews the leases of every job and effect this process holds, until
/// `until`, in one light commit.
pub(super) fn heartbeat(s: &Arc<Shared>, until: Millis) {
    let (jobs, effects) = s.in_flight.leased();
    if jobs.is_empty() && effects.is_empty() {
        return;
    }
    let owner = s.owner.clone();
    let r = s.queue.writer().run_light(move |conn| {
        if !jobs.is_empty() {
            claim::heartbeat(
                conn,
                &owner,
                &serde_json::to_string(&jobs).unwrap_or_default(),
                until,
            )?;
        }
        if !effects.is_empty() {
            outbox::heartbeat(
                conn,
                &owner,
                &serde_json::to_string(&effects).unwrap_or_default(),
                until,
            )?;
        }
        Ok(())
    });
    if let Err(e) = r {
        log::warn!(target: "litejob", "lease renewal failed: {e}");
    }
}

/// Takes back jobs and effects whose lease expired (their holder died or
/// stalled); looks through a reader first, since an idle check must not
/// write.
pub(super) fn reap(s: &Arc<Shared>) {
    let now = now_ms();
    let any: Result<bool> = s.queue.read(|c| {
        Ok(c.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_expires_at < ?1) \
                 OR EXISTS (SELECT 1 FROM outbox WHERE state = 'sending' AND lease_expires_at < ?1)",
        )?
        .query_row([now], |r| r.get(0))?)
    });
    match any {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            log::warn!(target: "litejob", "lease check failed: {e}");
            return;
        }
    }
    let max_abandoned = s.cfg.max_abandoned;
    match s.queue.writer().run_light(move |conn| {
        let now = now_ms();
        Ok((
            claim::reap_expired(conn, now, max_abandoned)?,
            outbox::reap_expired(conn, now)?,
        ))
    }) {
        Ok((j, o)) => {
            if j > 0 || o > 0 {
                log::info!(target: "litejob", "took back {j} jobs and {o} effects whose lease expired");
                s.queue.notify();
                s.queue.notify_outbox();
            }
        }
        Err(e) => log::warn!(target: "litejob", "reaping expired leases failed: {e}"),
    }
}
