//! The guarantees under faults: a returned enqueue is never lost, a key's
//! work commits at most once, an outbox row exists iff its job committed and
//! its effect repeats only where a process died between effect and
//! acknowledgement, completion is fenced, bad files and bad input are
//! refused, and a held write lock makes work wait.
//!
//! Crash tests re-run this test binary as a child process (the child entry
//! point `child_worker` below, on the file `LITEJOB_CHILD_DB`), SIGKILL it at
//! random moments or make it abort at an announced fault point
//! (`LITEJOB_FAULT=point:n`), then run a last clean child to completion and
//! check the invariants with plain SQL ([`harness::check_invariants`]).
//!
//! `workflows` kills workers mid-workflow, on a file and on PostgreSQL
//! (its children are `backends::child`'s, in mode `workflows`); `steps`
//! kills workers around durable steps' records, on both engines too (mode
//! `steps`).
//!
//! Power cuts are simulated in `power_loss`: children recorded under an
//! `LD_PRELOAD` shim, and the disk states a cut may leave, each checked.
//!
//! The CI form of every test is short; `LITEJOB_SOAK=1` runs the heavy ones
//! longer.

mod crash;
mod durable;
mod files;
pub(crate) mod harness;
mod input;
mod locks;
mod model;
mod power_loss;
pub(crate) mod steps;
pub(crate) mod workflows;

child! {
    /// Entry point of the child processes.
    fn child_worker() {
        harness::child_main();
    }
}
