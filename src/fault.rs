//! Test-only fault injection: named points where the process aborts when the
//! environment asks for it, so crash tests can kill the real binary at an
//! exact step. Writes no table.
//!
//! `LITEJOB_FAULT=after-claim-commit` aborts the first time that point is
//! reached; `LITEJOB_FAULT=in-handler:3` the third time. Unset, a point costs
//! one relaxed atomic load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The points crash tests can name.
pub const POINTS: &[&str] = &[
    "after-claim-commit",
    "after-start-commit",
    "in-handler",
    "before-complete-commit",
    "after-complete-commit",
    "after-effect-before-ack",
    "after-ack-commit",
];

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

/// Aborts the process here if `LITEJOB_FAULT` names this point (and this is
/// the n-th hit). Announces itself on stderr first.
#[doc(hidden)]
pub fn point(name: &str) {
    if let Some(p) = plan() {
        if p.point == name && p.hits.fetch_add(1, Ordering::Relaxed) + 1 == p.nth {
            eprintln!("litejob-fault: aborting at {name}");
            std::process::abort();
        }
    }
}
