//! The recorder's Rust half: builds `shim.c` with `gcc`, runs workload
//! children under it (`LD_PRELOAD`), and reads the log they leave.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::super::harness::{child_args, self_exe, tail, wait_timeout};

/// One logged change or sync, in the order it took effect.
#[derive(Debug, Clone)]
pub enum Op {
    /// A process loaded the shim and started recording.
    Hello,
    /// A file of the directory was opened; `created`: by this very open.
    Open {
        name: String,
        ino: u64,
        created: bool,
    },
    /// `data` written at `off`.
    Write {
        ino: u64,
        off: u64,
        data: Vec<u8>,
    },
    /// The file's size set to `size`.
    Trunc {
        ino: u64,
        size: u64,
    },
    /// `fallocate` of `len` bytes at `off` (`mode` 0: extend the size).
    Falloc {
        ino: u64,
        mode: u8,
        off: u64,
        len: u64,
    },
    Unlink {
        name: String,
    },
    Rename {
        from: String,
        to: String,
    },
    /// A sync of a file (`dir` false, its inode) or of the directory.
    SyncBegin {
        dir: bool,
        ino: u64,
        serial: u64,
    },
    /// Its end; `ok`: it returned success.
    SyncEnd {
        dir: bool,
        ino: u64,
        serial: u64,
        ok: bool,
    },
    /// A change the model cannot follow (a directory removed, a file moved
    /// in or out): the builder refuses the log.
    Unmodelled {
        what: String,
    },
}

/// A record: which process and thread, and what.
#[derive(Debug, Clone)]
pub struct Rec {
    pub pid: u32,
    pub tid: u32,
    pub op: Op,
}

const HEADER: usize = 48;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

/// Parses the shim's log (see the record layout in `shim.c`).
pub fn parse(log: &[u8]) -> Vec<Rec> {
    let mut recs = Vec::new();
    let mut at = 0;
    while at < log.len() {
        assert!(at + HEADER <= log.len(), "log cut inside a header at {at}");
        let h = &log[at..at + HEADER];
        let len = u32_at(h, 0) as usize;
        let (kind, target) = (h[4], h[5]);
        let (pid, tid) = (u32_at(h, 8), u32_at(h, 12));
        let ino = u64_at(h, 16);
        let (a, b) = (u64_at(h, 24), u64_at(h, 32));
        let (nlen, dlen) = (u32_at(h, 40) as usize, u32_at(h, 44) as usize);
        assert_eq!(len, HEADER + nlen + dlen, "bad record length at {at}");
        assert!(at + len <= log.len(), "log cut inside a record at {at}");
        let name_bytes = &log[at + HEADER..at + HEADER + nlen];
        let name = || String::from_utf8_lossy(name_bytes).into_owned();
        let data = &log[at + HEADER + nlen..at + len];
        let op = match kind {
            0 => Op::Hello,
            1 => Op::Open {
                name: name(),
                ino,
                created: a == 1,
            },
            2 => Op::Write {
                ino,
                off: a,
                data: data.to_vec(),
            },
            3 => Op::Trunc { ino, size: a },
            4 => Op::Falloc {
                ino,
                mode: target,
                off: a,
                len: b,
            },
            5 => Op::Unlink { name: name() },
            6 => {
                let mut parts = name_bytes.splitn(2, |&c| c == 0);
                let from = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
                let to = String::from_utf8_lossy(parts.next().unwrap_or(&[])).into_owned();
                Op::Rename { from, to }
            }
            7 => Op::SyncBegin {
                dir: target == 1,
                ino,
                serial: a,
            },
            8 => Op::SyncEnd {
                dir: target == 1,
                ino,
                serial: a,
                ok: b == 0,
            },
            9 => Op::Unmodelled {
                what: name().replace('\0', " -> "),
            },
            k => panic!("unknown record kind {k} at {at}"),
        };
        recs.push(Rec { pid, tid, op });
        at += len;
    }
    recs
}

/// The log as text, one record a line, data shown by length only (what
/// `LITEJOB_POWER_DUMP=1` prints).
pub fn dump(recs: &[Rec]) -> String {
    let mut names = std::collections::HashMap::new();
    let mut out = String::new();
    for (i, r) in recs.iter().enumerate() {
        let name = |ino: &u64| {
            names
                .get(ino)
                .cloned()
                .unwrap_or_else(|| format!("ino {ino}"))
        };
        let what = match &r.op {
            Op::Open { name, ino, created } => {
                names.insert(*ino, name.clone());
                format!("open {name}{}", if *created { " (created)" } else { "" })
            }
            Op::Write { ino, off, data } => {
                let text = if name(ino) == super::states::ACKS {
                    String::from_utf8_lossy(data).trim().to_string()
                } else {
                    format!("{} bytes", data.len())
                };
                format!("write {} @{off}: {text}", name(ino))
            }
            Op::Trunc { ino, size } => format!("truncate {} to {size}", name(ino)),
            Op::SyncBegin { dir, ino, serial } => format!(
                "sync begin #{serial} {}",
                if *dir { "<dir>".into() } else { name(ino) }
            ),
            Op::SyncEnd {
                dir,
                ino,
                serial,
                ok,
            } => format!(
                "sync end #{serial} {}{}",
                if *dir { "<dir>".into() } else { name(ino) },
                if *ok { "" } else { " FAILED" }
            ),
            other => format!("{other:?}"),
        };
        out.push_str(&format!("{i:6} {}/{} {what}\n", r.pid, r.tid));
    }
    out
}

/// The compiled shim, built once per test process into the target
/// directory (the test declares `#[needs(Gcc)]`).
pub fn shim() -> PathBuf {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(build_shim).clone()
}

fn build_shim() -> PathBuf {
    crate::suite::Need::Gcc.require();
    let src = include_str!("shim.c");
    // FNV-1a: the file name follows the source, so a changed shim is
    // rebuilt and test processes running at once share a finished one.
    let hash = src.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("power-loss-shim-{hash:016x}.so"));
    if out.exists() {
        return out;
    }
    let pid = std::process::id();
    let c = dir.join(format!("power-loss-shim-{hash:016x}-{pid}.c"));
    let tmp = dir.join(format!("power-loss-shim-{hash:016x}-{pid}.so"));
    std::fs::write(&c, src).unwrap();
    let built = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&c)
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("run gcc");
    let _ = std::fs::remove_file(&c);
    assert!(
        built.status.success(),
        "the power-loss shim does not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// Runs one child per entry of `children` (its extra environment), all at
/// once, each under the shim with the watched directory `dir` and the log
/// `log`, until they exit (they must exit 0); their output goes to
/// `child-N.out` beside the log. Returns the parsed log; fails if a child
/// never loaded the shim.
pub fn record(shim: &Path, dir: &Path, log: &Path, children: &[Vec<(String, String)>]) -> Vec<Rec> {
    let mut running = Vec::new();
    for (i, vars) in children.iter().enumerate() {
        let out = log.with_file_name(format!("child-{i}.out"));
        let out = std::fs::File::create(&out).unwrap();
        let mut cmd = Command::new(self_exe());
        child_args(&mut cmd)
            .env("LD_PRELOAD", shim)
            .env("LITEJOB_POWER_DIR", dir)
            .env("LITEJOB_POWER_LOG", log)
            .env("LITEJOB_CHILD_MODE", "power-loss")
            .env("LITEJOB_CHILD_DB", dir.join("test.db"))
            .env("RUST_LOG", "litejob=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out));
        for (k, v) in vars {
            cmd.env(k, v);
        }
        running.push((i, cmd.spawn().expect("spawn a recorded child")));
    }
    let mut pids = Vec::new();
    for (i, mut c) in running {
        let st = wait_timeout(&mut c, Duration::from_secs(300)).unwrap_or_else(|| {
            let _ = c.kill();
            panic!("recorded child {i} did not finish in 300 s")
        });
        pids.push(c.id());
        let out = log.with_file_name(format!("child-{i}.out"));
        assert!(
            st.success(),
            "recorded child {i} failed ({st:?}):\n{}",
            tail(&std::fs::read_to_string(out).unwrap_or_default())
        );
    }
    let recs = parse(&std::fs::read(log).unwrap_or_default());
    for pid in pids {
        assert!(
            recs.iter()
                .any(|r| r.pid == pid && matches!(r.op, Op::Hello)),
            "child {pid} never loaded the recorder (LD_PRELOAD={}): nothing was recorded",
            shim.display()
        );
    }
    recs
}
