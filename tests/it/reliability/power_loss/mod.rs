//! Power cuts, simulated: "durable by default" checked the way storage
//! engines check it (SQLite's crash tests, ALICE, CrashMonkey). A killed
//! process keeps the page cache; a power cut keeps only what a sync
//! reached. So the harness records every write and sync a litejob process
//! makes, builds the disk states a power cut could leave, and checks each.
//!
//! 1. **Record** ([`recorder`], `shim.c`). The test builds `shim.c` with
//!    `gcc -shared -fPIC` into the target directory and re-runs this test
//!    binary as a child under `LD_PRELOAD`, running one of the
//!    [`workloads`]. The shim logs, for the queue's directory, every open
//!    (and whether it created the file), write (with its data), truncate,
//!    unlink, rename, and each fsync/fdatasync of a file or of the
//!    directory, however it is made (SQLite's VFS or litejob's own handle on
//!    the WAL), in the order the effects happened, from every process into
//!    one log. The workload writes its acknowledgements (an enqueue
//!    returned, an effect started, a run or an effect was logged finished)
//!    as lines of an `acks` file in the same directory, so they sit in the
//!    log in order with the I/O.
//! 2. **Build states** ([`states`]). At cut points through the log (spread
//!    over it, right after acknowledgements, at the edges of syncs), the
//!    durable part (ALICE's model: a write is durable after a sync of its
//!    file that began after it; a creation, unlink or rename after a sync
//!    of the directory that began after it), plus prefixes and random
//!    subsets of the pending writes, torn at 512-byte sectors, plus
//!    prefixes of the pending directory operations.
//! 3. **Check each state** ([`checks`]): `integrity_check` is ok; every
//!    enqueue acknowledged before the cut is there (with FULL); every job
//!    whose completion was acknowledged is complete with its ledger row,
//!    and an effect that started has its claim committed; job success,
//!    ledger row and app row go together; an outbox row only with its
//!    job's commit; and litejob, opened on the state, with every event
//!    delivered again (a producer retries), resumes to the same final state
//!    as a run without a cut: every key once, succeeded, one ledger row,
//!    one app row, its outbox row sent. A disk state met again at a later
//!    cut is checked again against the acknowledgements made since (the
//!    rest, once per disk state).
//!
//! With NORMAL the same harness must find acknowledged commits lost (the
//! README says so) and nothing else. And it must fail when the code is
//! wrong: `LITEJOB_FAULT_SKIP_WAL_FSYNC=1` (the `fault-injection` feature)
//! makes litejob's own WAL fsync a no-op, and the FULL tests then report
//! lost acknowledged enqueues. By hand, both ways:
//!
//! ```text
//! cargo test --release power_loss                                 # passes
//! LITEJOB_FAULT_SKIP_WAL_FSYNC=1 cargo test --release power_loss  # the six FULL workloads fail
//! ```
//!
//! `the_harness_finds_the_losses_of_a_wal_fsync_made_a_no_op` runs the
//! second form for one workload and asserts the losses are found;
//! `the_harness_finds_the_losses_of_a_directory_never_synced` has the shim
//! drop every directory fsync (`LITEJOB_POWER_NO_DIRSYNC=1`), which SQLite
//! makes on litejob's behalf when a WAL is first synced.
//!
//! Debug builds (CI's `cargo test`) check fewer states per workload than
//! release builds; `LITEJOB_SOAK=1` checks many more. Linux with glibc only
//! (the shim); without gcc the tests are reported ignored (under `CI`,
//! failed). `LITEJOB_SEED` replays the states' random
//! choices; `LITEJOB_POWER_DUMP=1` prints the recorded log. Not modelled:
//! writes through `mmap` (SQLite maps only the `-shm`), descriptors
//! duplicated with `fcntl(F_DUPFD)`, and a sector written half (a sector
//! is the unit of atomicity: a pending write may persist in any subset of
//! its sectors, the pending writes in any subset, applied in log order).
//! More in `docs/power-loss.md`.

mod checks;
mod recorder;
mod states;
pub mod workloads;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use litejob::Synchronous;

use super::harness::soak;
use crate::support::Rng;
use checks::{Checker, Report, Violation};
use states::{Budget, Initial, Stats};
use workloads::Workload;

/// How many states: fewer in debug builds (CI's plain `cargo test`), many
/// more with `LITEJOB_SOAK=1`.
fn budget(w: Workload) -> Budget {
    let b = if soak() {
        Budget {
            max_cuts: 1500,
            prefixes: 8,
            subsets: 16,
        }
    } else if cfg!(debug_assertions) {
        Budget {
            max_cuts: 50,
            prefixes: 3,
            subsets: 3,
        }
    } else {
        Budget {
            max_cuts: 160,
            prefixes: 4,
            subsets: 6,
        }
    };
    // Its states are the largest (megabytes each) and slowest to resume.
    if w == Workload::Checkpoints {
        Budget {
            max_cuts: b.max_cuts / 2,
            ..b
        }
    } else {
        b
    }
}

/// The directory's files before the recording (all synced by `prepare`).
fn snapshot(dir: &Path) -> Initial {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let ino = e.metadata().unwrap().ino();
        files.push((name, ino, std::fs::read(e.path()).unwrap()));
    }
    files
}

/// Records `w` with `sync` (its children get `env` too: a fault to
/// inject), then builds and checks its states.
fn run(w: Workload, sync: Synchronous, env: &[(&str, &str)]) -> (Stats, Report) {
    let shim = recorder::shim();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("queue");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let db = dir.join("test.db");
    w.prepare(&db, sync);
    let initial = snapshot(&dir);
    let log = root.path().join("power.log");
    let mut children = w.children(sync);
    for c in &mut children {
        c.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    }
    let t0 = std::time::Instant::now();
    let recs = recorder::record(&shim, &dir, &log, &children);
    let recorded = t0.elapsed();
    if std::env::var_os("LITEJOB_POWER_DUMP").is_some() {
        eprintln!("{}", recorder::dump(&recs));
    }
    let mut checker = Checker::new(w.deliveries());
    let mut rng = Rng::seeded();
    let stats = states::build(&recs, &initial, &budget(w), &mut rng, |cut, st, d| {
        checker.check(cut, st, d)
    });
    eprintln!(
        "power loss, {} with {} {env:?}: recorded in {recorded:?}, checked in {:?}; {stats:?}\n{}",
        w.name(),
        sync.as_str(),
        t0.elapsed() - recorded,
        checker.report.summary()
    );
    (stats, checker.report)
}

/// Runs `w` with FULL and asserts that no state breaks a promise.
fn full(w: Workload) -> Stats {
    let (stats, report) = run(w, Synchronous::Full, &[]);
    let acks = w.deliveries().len();
    assert!(
        stats.markers >= acks,
        "{}: only {} acknowledgements recorded",
        w.name(),
        stats.markers
    );
    assert!(
        report.states >= 20,
        "{}: only {} states checked",
        w.name(),
        report.states
    );
    assert!(
        report.found.is_empty(),
        "{}: a power cut breaks a promise with FULL: {}",
        w.name(),
        report.summary()
    );
    stats
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_never_loses_an_acknowledged_enqueue_with_full_from_one_thread() {
        full(Workload::Single);
    }
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_never_loses_an_acknowledged_enqueue_with_full_from_eight_producers() {
        full(Workload::Producers);
    }
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_never_loses_an_acknowledged_batch_enqueue_with_full() {
        full(Workload::Batches);
    }
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_never_loses_an_acknowledged_completion_or_effect_with_full() {
        full(Workload::Backlog);
    }
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_while_the_wal_checkpoints_and_restarts_loses_nothing_acknowledged() {
        let stats = full(Workload::Checkpoints);
        assert!(
            stats.db_writes_after_wal > 0,
            "no checkpoint copied the WAL back during the recording: {stats:?}"
        );
        assert!(
            stats.wal_headers >= 2,
            "the WAL never restarted during the recording: {stats:?}"
        );
    }
}

it! {
    #[needs(Gcc)]
    fn a_power_cut_with_two_processes_writing_one_file_loses_nothing_acknowledged() {
        let stats = full(Workload::TwoProcesses);
        assert!(
            stats.wal_writers.len() >= 2,
            "only one process wrote the WAL: {stats:?}"
        );
    }
}

it! {
    /// With NORMAL nothing syncs a lone producer's commit before it returns
    /// (the syncer's background fsync serves the writer thread only): the cut
    /// right after its first acknowledgement, with only the synced data, has
    /// lost that enqueue. The harness must find it; and nothing else, in any
    /// state: no corruption, no broken invariant.
    #[needs(Gcc)]
    fn with_normal_a_power_cut_may_lose_acknowledged_commits_and_nothing_else() {
        for w in [Workload::Single, Workload::Backlog] {
            let (_, report) = run(w, Synchronous::Normal, &[]);
            let unexpected = report.unexpected(Violation::is_acknowledged_loss);
            assert!(
                unexpected.is_empty(),
                "{}: with NORMAL a power cut broke more than acknowledged ⇒ present: {}",
                w.name(),
                report.summary()
            );
            if w == Workload::Single {
                assert_losses(&report, "with NORMAL");
            }
        }
    }
}

/// Lost acknowledged enqueues in `report`, after asserting there are some.
fn assert_losses(report: &Report, why: &str) {
    assert!(
        report
            .counts
            .get("lost acknowledged enqueue")
            .copied()
            .unwrap_or(0)
            > 0,
        "{why}, yet no lost acknowledged enqueue was found: {}",
        report.summary()
    );
}

it! {
    #[needs(Gcc)]
    fn the_harness_finds_the_losses_of_a_wal_fsync_made_a_no_op() {
        let env = [("LITEJOB_FAULT_SKIP_WAL_FSYNC", "1")];
        let (_, report) = run(Workload::Single, Synchronous::Full, &env);
        assert_losses(&report, "litejob's WAL fsync was a no-op");
    }
}

it! {
    /// SQLite fsyncs the directory the first time it syncs a WAL it opened
    /// (its header, at the first frame): that is what makes the file's and
    /// the WAL's directory entries durable before anything is acknowledged.
    /// Without it, every acknowledged enqueue could vanish with its file.
    #[needs(Gcc)]
    fn the_harness_finds_the_losses_of_a_directory_never_synced() {
        let env = [("LITEJOB_POWER_NO_DIRSYNC", "1")];
        let (_, report) = run(Workload::Single, Synchronous::Full, &env);
        assert_losses(&report, "the directory was never synced");
    }
}
