//! Shared test helpers: a temporary queue file, waiting for a condition
//! without fixed sleeps, running the real `litejob` binary, the wall clock
//! in the file's unit, and the seeds and random numbers of randomized tests
//! (printed, and replayed with `LITEJOB_SEED=…`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use litejob::{Queue, QueueOptions};

/// A temporary directory holding one queue file; removed on drop.
pub struct TestDb {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl TestDb {
    pub fn new() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("test.db");
        TestDb { dir, path }
    }

    pub fn open(&self) -> Queue {
        Queue::open(&self.path).expect("open queue")
    }

    pub fn open_with(&self, opts: QueueOptions) -> Queue {
        Queue::open_with(&self.path, opts).expect("open queue")
    }

    /// A plain rusqlite connection, as an operator's SQL would see the file.
    pub fn sql(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.path).expect("open sql");
        c.busy_timeout(Duration::from_secs(30)).unwrap();
        c
    }

    /// `SELECT count(*) ...` or any single-integer query.
    pub fn count(&self, sql: &str) -> i64 {
        self.sql()
            .query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// The wall clock in milliseconds since the Unix epoch, the unit of every
/// `*_at` column.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// The seed of a randomized test: `LITEJOB_SEED` when set (to replay a
/// failure), otherwise a new one. Printed either way: cargo shows a failing
/// test's output, so the failure names the command line that replays it.
pub fn seed() -> u64 {
    let seed = match std::env::var("LITEJOB_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("LITEJOB_SEED={s:?} is not a number")),
        Err(_) => {
            use std::sync::atomic::{AtomicU64, Ordering};
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mix = nanos
                ^ (u64::from(std::process::id()) << 32)
                ^ COUNTER.fetch_add(1, Ordering::Relaxed);
            Rng::new(mix).next_u64()
        }
    };
    eprintln!("seed: LITEJOB_SEED={seed}");
    seed
}

/// A proptest configuration whose cases come from [`seed`] (so they are
/// printed and replayable like every other randomized test's), with
/// `cases` cases. Persisted regressions still run first.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed()),
        ..proptest::test_runner::Config::default()
    }
}

/// The tests' own small random source (SplitMix64): fast, seedable, and
/// the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator that replays `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator from [`seed`] (printed, or `LITEJOB_SEED`).
    pub fn seeded() -> Rng {
        Rng::new(seed())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// How long a test waits for something the runtime should do soon.
pub const LONG: Duration = Duration::from_secs(20);

/// Backoff short enough that retries happen within a test.
pub fn tiny_backoff() -> litejob::Backoff {
    litejob::Backoff::default()
        .with_base(Duration::from_millis(10))
        .with_max(Duration::from_millis(20))
        .with_jitter(0.0)
}

/// Waits until job `id` is in `state`.
pub fn wait_state(q: &impl JobById, id: i64, state: litejob::JobState) {
    wait_until(&format!("job {id} {state}"), LONG, || {
        q.job_by_id(id).state == state
    });
}

/// A queue a test can read a job of, on either engine.
pub trait JobById {
    fn job_by_id(&self, id: i64) -> litejob::Job;
}

impl<E: litejob::Engine> JobById for litejob::Queue<E> {
    fn job_by_id(&self, id: i64) -> litejob::Job {
        self.job(id).unwrap().unwrap()
    }
}

impl JobById for litejob::admin::AnyQueue {
    fn job_by_id(&self, id: i64) -> litejob::Job {
        self.job(id).unwrap().unwrap()
    }
}

/// Polls `f` until it returns true, panicking with `label` after `timeout`.
pub fn wait_until(label: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {label}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The real binary built by cargo for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_litejob"))
}

/// Runs the real binary on `db` with `args`; returns its output.
pub fn litejob(db: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob")
}

/// Prints a command's output, for failure messages.
pub fn show(args: &[&str], out: &Output) -> String {
    format!(
        "litejob {}\nstatus: {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the binary and asserts its exit status; returns stdout.
pub fn litejob_ok(db: &Path, args: &[&str], status: i32) -> String {
    let out = litejob(db, args);
    assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the real `sqlite3` shell on `db` with `sql`; returns stdout.
pub fn sqlite3(db: &Path, sql: &str) -> String {
    crate::suite::Need::Sqlite3.require();
    let out = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("run sqlite3");
    assert!(
        out.status.success(),
        "sqlite3 {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
