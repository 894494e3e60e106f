//! Test-only fault injection: named points where the process aborts when the
//! environment asks for it, so crash tests can kill the real binary at an
//! exact step. Writes no table.
//!
//! Compiled in only with the `fault-injection` feature, which the tests turn
//! on. Then `LITEJOB_FAULT=after-claim-commit` aborts the first time that
//! point is reached and `LITEJOB_FAULT=in-handler:3` the third time; unset, a
//! point costs one relaxed atomic load. Without the feature a point is an
//! empty function: a normal build never reads the variable, never aborts and
//! never writes to stderr.
//!
//! One switch breaks the code on purpose, so the power-loss tests can show
//! they catch a missing fsync: `LITEJOB_FAULT_SKIP_WAL_FSYNC=1` turns
//! litejob's own fsync of the WAL (with `synchronous=FULL`) into a no-op.

/// The points every run passes, in order: crash tests that kill a queue's
/// runs at each of them name these.
#[cfg(feature = "fault-injection")]
pub const POINTS: &[&str] = &[
    "after-claim-commit",
    "after-start-commit",
    "in-handler",
    "before-complete-commit",
    "after-complete-commit",
    "after-effect-before-ack",
    "after-ack-commit",
];

/// The points only a run that calls `ctx.step` passes: around the write
/// of each step's result, between its closure returning and `step`
/// returning.
#[cfg(feature = "fault-injection")]
pub const STEP_POINTS: &[&str] = &["before-step-record", "after-step-record"];

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    struct Plan {
        point: String,
        nth: u64,
        hits: AtomicU64,
    }

    fn plan() -> Option<&'static Plan> {
        static PLAN: OnceLock<Option<Plan>> = OnceLock::new();
        PLAN.get_or_init(|| {
            let v = std::env::var("LITEJOB_FAULT").ok()?;
            let (point, nth) = match v.split_once(':') {
                Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
                None => (v, 1),
            };
            Some(Plan {
                point,
                nth: nth.max(1),
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
    }

    /// Aborts the process here if `LITEJOB_FAULT` names this point (and this
    /// is the n-th hit). Announces itself on stderr first.
    pub fn point(name: &str) {
        if let Some(p) = plan() {
            if p.point == name && p.hits.fetch_add(1, Ordering::Relaxed) + 1 == p.nth {
                eprintln!("litejob-fault: aborting at {name}");
                std::process::abort();
            }
        }
    }
}

#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use armed::point;

/// Whether litejob's own fsync of the WAL is to be skipped
/// (`LITEJOB_FAULT_SKIP_WAL_FSYNC=1`): a durable caller is then answered
/// with its commit only in the page cache, the bug the power-loss tests
/// must catch. Read once.
#[cfg(feature = "fault-injection")]
pub fn skip_wal_fsync() -> bool {
    static SKIP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIP.get_or_init(|| {
        let skip = std::env::var("LITEJOB_FAULT_SKIP_WAL_FSYNC").as_deref() == Ok("1");
        if skip {
            eprintln!("litejob-fault: the WAL fsync is a no-op");
        }
        skip
    })
}

/// Without the `fault-injection` feature the WAL is always fsynced.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn skip_wal_fsync() -> bool {
    false
}

/// A crash point; without the `fault-injection` feature it does nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn point(_name: &str) {}
