//! "An enqueue that returned survives a power cut", checked at the system-call
//! level: a power cut keeps only what an fsync reached, so the WAL frames that
//! carry a job must have been followed by an fsync of the WAL before its
//! enqueue returned. The child enqueues alone (the caller commits on its own
//! thread) and from several threads (the writer thread commits, the syncer
//! thread fsyncs and answers) under `strace`, and the trace is checked.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use litejob::{NewJob, Queue};

use super::harness::{tail, wait_timeout};
use crate::support::TestDb;

const ALONE: usize = 10;
const THREADS: usize = 4;
const PER_THREAD: usize = 25;

/// The child: enqueues `durable-*` keys and appends `returned <key>` to the
/// file `returned` (one write(2) each) as soon as each enqueue returned.
pub fn child(db: &Path, returned: &Path) {
    use std::io::Write;
    let q = Queue::open(db).expect("child: open");
    // Enqueues `key` and notes (after it returned) that it returned.
    let enqueue = |q: &Queue, f: &mut std::fs::File, key: &str| {
        q.enqueue(NewJob::new("work", key, &serde_json::json!({})))
            .expect("enqueue");
        f.write_all(format!("returned {key}\n").as_bytes())
            .expect("write returned");
    };
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(returned)
            .expect("open returned")
    };
    let mut f = open();
    for i in 0..ALONE {
        enqueue(&q, &mut f, &format!("durable-alone-{i}"));
    }
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (q, open, enqueue) = (q.clone(), &open, &enqueue);
            s.spawn(move || {
                let mut f = open();
                for i in 0..PER_THREAD {
                    enqueue(&q, &mut f, &format!("durable-{t}-{i}"));
                }
            });
        }
    });
    println!("enqueue-threads done");
}

/// One system call from the trace: when it started and ended (line numbers),
/// on which file, with which bytes.
struct Call {
    pid: String,
    name: String,
    path: String,
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

/// Decodes `strace -xx` escapes (`\x2f` for every byte) up to the first
/// character that is not one.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < b.len() && b[i] == b'\\' && b[i + 1] == b'x' {
        let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
        out.push(u8::from_str_radix(h, 16).unwrap());
        i += 4;
    }
    out
}

/// The first string argument (`"\x..\x.."`) of a `strace -xx` line.
fn hex_string(line: &str) -> Vec<u8> {
    match line.find("\"\\x") {
        Some(open) => unescape(&line[open + 1..]),
        None => Vec::new(),
    }
}

/// Parses `strace -f -y -xx` output into calls, pairing `<unfinished ...>`
/// lines with their `<... resumed>` lines per thread.
fn parse(trace: &str) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for (n, line) in trace.lines().enumerate() {
        let (pid, rest) = line
            .trim_start()
            .split_once(char::is_whitespace)
            .unwrap_or(("", line));
        let rest = rest.trim_start();
        if rest.starts_with("<...") {
            if let Some(i) = open.remove(pid) {
                calls[i].end = n;
            }
            continue;
        }
        let Some(paren) = rest.find('(') else {
            continue;
        };
        let name = rest[..paren].to_string();
        let path = rest[paren..]
            .split_once('<')
            .and_then(|(_, p)| p.split_once('>'))
            .map(|(p, _)| String::from_utf8_lossy(&unescape(p)).into_owned())
            .unwrap_or_default();
        calls.push(Call {
            pid: pid.to_string(),
            name,
            path,
            bytes: hex_string(rest),
            start: n,
            end: n,
        });
        if rest.contains("<unfinished ...>") {
            open.insert(pid.to_string(), calls.len() - 1);
        }
    }
    calls
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

it! {
    // Long: one traced run, then the trace read call by call.
    #[needs(Strace)]
    fn an_enqueue_returns_only_after_an_fsync_of_the_wal_frames_holding_its_job() {
        let db = TestDb::new();
        drop(db.open());
        let dir = db.path.parent().unwrap();
        let (trace_path, returned) = (dir.join("trace"), dir.join("returned"));
        let mut strace = Command::new("strace");
        strace
            .args(["-f", "-y", "-xx", "-s", "65536"])
            .args(["-e", "trace=pwrite64,pwritev,fsync,fdatasync,write"])
            .arg("-o")
            .arg(&trace_path)
            // Not /proc/self/exe: strace would resolve that to itself.
            .arg(std::env::current_exe().unwrap());
        let mut c = super::harness::child_args(&mut strace)
            .env("LITEJOB_CHILD_DB", &db.path)
            .env("LITEJOB_CHILD_MODE", "enqueue-threads")
            .env("LITEJOB_CHILD_RETURNED", &returned)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let st = wait_timeout(&mut c, Duration::from_secs(120)).unwrap_or_else(|| {
            let _ = c.kill();
            panic!("the traced child is stuck")
        });
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            st.success() && stdout.contains("enqueue-threads done"),
            "child failed ({st:?}):\n{}\n{}",
            tail(&stdout),
            tail(&String::from_utf8_lossy(&out.stderr))
        );
        let trace = std::fs::read_to_string(&trace_path).unwrap();
        let calls = parse(&trace);
        let wal = |c: &&Call| c.path.ends_with("-wal");
        let syncs: Vec<&Call> = calls
            .iter()
            .filter(wal)
            .filter(|c| c.name == "fsync" || c.name == "fdatasync")
            .collect();
        let frames: Vec<&Call> = calls
            .iter()
            .filter(wal)
            .filter(|c| c.name.starts_with("pwrite"))
            .collect();
        let returns: Vec<(String, usize)> = calls
            .iter()
            .filter(|c| c.name == "write" && c.path.ends_with("returned"))
            .map(|c| {
                let text = String::from_utf8_lossy(&c.bytes);
                let key = text.trim().strip_prefix("returned ").unwrap().to_string();
                (key, c.start)
            })
            .collect();
        assert_eq!(
            returns.len(),
            ALONE + THREADS * PER_THREAD,
            "every enqueue's return is in the trace"
        );
        for (key, returned_at) in &returns {
            let first = frames
                .iter()
                .position(|f| contains(&f.bytes, key.as_bytes()))
                .unwrap_or_else(|| panic!("no WAL frame holds {key}"));
            // Its commit ends with the frame whose 24-byte header carries the
            // database size (non-zero only in a commit frame), then that
            // frame's page: both written by the same thread after this frame.
            let pid = &frames[first].pid;
            let mut commit_header_seen = false;
            let mut committed = None;
            for f in frames[first..].iter().filter(|f| &f.pid == pid) {
                if commit_header_seen {
                    committed = Some(f.end);
                    break;
                }
                commit_header_seen = f.bytes.len() == 24 && f.bytes[4..8] != [0, 0, 0, 0];
            }
            let committed =
                committed.unwrap_or_else(|| panic!("{key}: no commit frame after its frames"));
            assert!(
                frames[first].start < *returned_at,
                "{key}: its frames were written after its enqueue returned"
            );
            assert!(
                syncs
                    .iter()
                    .any(|s| s.start > committed && s.end < *returned_at),
                "{key}: its enqueue returned (trace line {}) with no fsync of the WAL \
             between its commit (trace line {}) and the return",
                returned_at + 1,
                committed + 1
            );
        }
    }
}
