//! `litejob bench --backup-check`: how long an enqueue waits while the
//! file is copied, by `Queue::backup_to` and, for comparison, by SQLite's
//! `VACUUM INTO` and by nothing (3 s of the same enqueues alone), each in
//! a thread of its own while this one enqueues one job per call, back to
//! back. Writes `jobs` (the probes' enqueues) and a
//! copy of the file beside it (`<db>-backup-check`, removed).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Error, NewJob, Queue};
use serde::Serialize;

use super::scale::IDLE_KIND;
use super::Probe;

/// What one way of copying the file cost the producer.
#[derive(Debug, Clone, Serialize)]
pub struct BackupCheck {
    /// `backup` (the library's), `vacuum_into` (SQLite's `VACUUM INTO`) or
    /// `none` (no copy: the enqueues' own spread, for comparison).
    pub method: &'static str,
    /// Seconds the copy took.
    pub secs: f64,
    /// The copy's size in bytes.
    pub bytes: u64,
    /// The longest single enqueue during the copy, ms.
    pub max_enqueue_ms: f64,
    /// The 99th percentile of those enqueues, ms.
    pub p99_enqueue_ms: f64,
    /// Enqueues made meanwhile.
    pub enqueues: usize,
}

/// Copies the file both ways, one after the other, timing a producer's
/// enqueues during each copy.
pub fn backup_check(queue: &AnyQueue, run_id: &str) -> Result<Vec<BackupCheck>, Error> {
    let AnyQueue::Sqlite(file) = queue else {
        return Err(Error::InvalidInput(
            "--backup-check copies a file; on PostgreSQL use pg_dump".into(),
        ));
    };
    let dest = PathBuf::from(format!("{}-backup-check", file.location()));
    let mut checks = Vec::new();
    for method in ["none", "backup", "vacuum_into"] {
        let _ = std::fs::remove_file(&dest);
        let r = timed(file, run_id, method, &dest);
        let _ = std::fs::remove_file(&dest);
        checks.push(r?);
    }
    Ok(checks)
}

fn copy(file: &Queue, method: &str, dest: &Path) -> Result<u64, Error> {
    match method {
        "backup" => return Ok(file.backup_to(dest)?.bytes),
        "none" => {
            std::thread::sleep(Duration::from_secs(3));
            return Ok(0);
        }
        _ => {}
    }
    let conn = file.connect()?;
    conn.execute("VACUUM INTO ?1", [dest.to_string_lossy()])?;
    // A backup is one once it is on disk, as `backup_to`'s is when it
    // returns: the flush of what VACUUM INTO left in the page cache is
    // part of its cost.
    std::fs::File::open(dest)?.sync_all()?;
    Ok(std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0))
}

fn timed(
    file: &Queue,
    run_id: &str,
    method: &'static str,
    dest: &Path,
) -> Result<BackupCheck, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let copier = {
        let (file, stop, dest) = (file.clone(), stop.clone(), dest.to_path_buf());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = copy(&file, method, &dest);
            stop.store(true, Ordering::SeqCst);
            r.map(|bytes| (bytes, t0.elapsed().as_secs_f64()))
        })
    };
    let payload = Probe { t: None };
    let mut waits: Vec<Duration> = Vec::new();
    let mut failed = None;
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let key = format!("bench:{run_id}:{method}-probe:{}", waits.len());
        if let Err(e) = file.enqueue(NewJob::new(IDLE_KIND, key, &payload)) {
            failed = Some(e);
            break;
        }
        waits.push(t.elapsed());
    }
    let (bytes, secs) = copier
        .join()
        .map_err(|_| Error::Internal("backup thread panicked".into()))??;
    if let Some(e) = failed {
        return Err(e);
    }
    waits.sort_unstable();
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    Ok(BackupCheck {
        method,
        secs,
        bytes,
        max_enqueue_ms: ms(waits.last()),
        p99_enqueue_ms: ms(waits.get(waits.len() * 99 / 100)),
        enqueues: waits.len(),
    })
}
