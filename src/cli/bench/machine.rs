//! The machine under `litejob bench`: how long an fsync of its disk and a
//! thread wake-up take, and the process's CPU time and peak memory. Writes
//! no table (a scratch file beside the queue file, removed).

use litejob::__command::{lock, wait};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use litejob::Error;

/// Median time of a 4 KiB overwrite plus `fdatasync` of a scratch file
/// beside `db` (same file system), in µs. Overwrites, as the WAL is once it
/// has wrapped: an append also syncs the file's new size.
pub fn fsync_probe(db: &Path) -> Result<f64, Error> {
    use std::io::{Seek, SeekFrom};
    let path = PathBuf::from(format!("{}-fsync-probe", db.display()));
    let io = |e: std::io::Error| Error::Open(format!("{}: {e}", path.display()));
    let run = || -> Result<f64, Error> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let page = [0x5au8; 4096];
        f.write_all(&page).map_err(io)?;
        f.sync_all().map_err(io)?;
        let mut times: Vec<f64> = (0..200)
            .map(|_| {
                let t = Instant::now();
                f.seek(SeekFrom::Start(0))?;
                f.write_all(&page)?;
                f.sync_data()?;
                Ok(t.elapsed().as_secs_f64() * 1e6)
            })
            .collect::<std::io::Result<_>>()
            .map_err(io)?;
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    let r = run();
    let _ = std::fs::remove_file(&path);
    r
}

/// Mean round trip of two threads waking each other through a mutex and
/// condvar, in µs. On a virtual machine a wake across CPUs can cost tens of
/// µs (the idle virtual CPU must be woken by the host).
pub fn wake_probe() -> f64 {
    const ROUNDS: u64 = 2000;
    let pair = Arc::new((Mutex::new(0u64), std::sync::Condvar::new()));
    let other = pair.clone();
    let echo = std::thread::spawn(move || {
        let (m, c) = &*other;
        let mut n = lock(m);
        // Odd: the main thread's turn is over, answer it.
        while *n < 2 * ROUNDS {
            if *n % 2 == 1 {
                *n += 1;
                c.notify_one();
            } else {
                n = wait(c, n);
            }
        }
    });
    let (m, c) = &*pair;
    let t = Instant::now();
    let mut n = lock(m);
    for _ in 0..ROUNDS {
        *n += 1;
        c.notify_one();
        while *n % 2 == 1 {
            n = wait(c, n);
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    drop(n);
    let _ = echo.join();
    us
}

/// CPU time so far of this process's live threads, in nanoseconds (the
/// first field of each /proc/self/task/*/schedstat); 0 without /proc.
pub fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Peak resident memory of this process (VmHWM), in KiB; 0 where
/// /proc/self/status is not available.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
