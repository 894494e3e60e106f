//! Leases: renewing this process's (`renew_leases`, the heartbeat) and
//! taking back expired ones (`reap`), through the `Store` verbs of the same
//! names. Both engines' pipelines keep their leases with these. Writes no
//! table itself.

use crate::core::time::Millis;
use crate::driver::pipeline::Shared;
use crate::driver::{Engine, Store};

/// Renews the leases of every job and effect this process holds, until
/// `until`, in one light commit.
pub(crate) fn renew_leases<E: Engine>(s: &Shared<E>, until: Millis) {
    let (jobs, effects) = s.in_flight.leased();
    if jobs.is_empty() && effects.is_empty() {
        return;
    }
    if let Err(e) = s.store.renew_leases(&s.owner, &jobs, &effects, until) {
        super::pipeline::log_failure("lease renewal", &e);
    }
}

/// Takes back jobs and effects whose lease expired (their holder died or
/// stalled).
pub(crate) fn reap<E: Engine>(s: &Shared<E>) {
    let b = s.store.as_ref();
    match b.reap(b.now(), s.cfg.max_abandoned) {
        Ok((j, o)) => {
            if j > 0 || o > 0 {
                log::info!(target: "litejob", "took back {j} jobs and {o} effects whose lease expired");
                s.notify();
                s.notify_outbox();
            }
        }
        Err(e) => super::pipeline::log_failure("reaping expired leases", &e),
    }
}
