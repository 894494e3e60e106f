//! `litejob init` and `litejob enqueue`: create or migrate the file, and the
//! producer side from the shell. Writes `jobs` through `Queue::enqueue`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use litejob::{NewJob, QueueOptions};
use serde::Serialize;

use super::{CliError, CliResult, Out};

/// Flags of `litejob enqueue`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob enqueue payment.succeeded --key evt_42 --payload '{\"cents\": 4200}'\n  \
    litejob enqueue digest --key digest:2026-11-29 --queue mail --delay 1h --max-retries 3\n  \
    litejob enqueue fetch_feed --key feed:42 --timeout 30s\n  \
    litejob enqueue import --key import:7 --payload-file import.json --run-at '2026-11-29 08:00:00'\n  \
    litejob enqueue report --key report:7 --depends-on import:7 --depends-on fx:2026-11-29\n\n\
    Prints `enqueued <id>`, or `duplicate <id>` when the key was seen before (exit 0 both).\n\
    With --depends-on the job waits (state waiting) until those jobs succeeded; a key that\n\
    is no job's is refused (exit 2) and nothing is written.")]
pub struct EnqueueArgs {
    /// The job's kind: which handler runs it.
    pub kind: String,
    /// The producer's idempotency key (unique: a second enqueue is a duplicate).
    #[arg(long)]
    pub key: String,
    /// The payload as JSON text [default: {}].
    #[arg(long, value_name = "JSON", conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the JSON payload from a file (`-` for stdin).
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
    /// The queue it goes to.
    #[arg(long, default_value = "default")]
    pub queue: String,
    /// Smaller runs first; may be negative.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// The partition of its queue the queue's partition limits count it
    /// in (`shop:42`; 1 to 200 bytes).
    #[arg(long, value_name = "KEY")]
    pub partition: Option<String>,
    /// Do not run before this long from now (`30s`, `15m`, `12h`, `7d`).
    #[arg(long, value_name = "DUR", value_parser = super::time::parse_duration, conflicts_with = "run_at")]
    pub delay: Option<Duration>,
    /// Do not run before this time: `2026-11-29 08:00:00` (UTC),
    /// `2026-11-29T08:00:00+01:00`, `2026-11-29`, or `@<unix seconds>`.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub run_at: Option<SystemTime>,
    /// How many times a failed run is retried [default: 1, or the kind's].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_retries: Option<i64>,
    /// How long one run may take (`30s`, `500ms`, `5m`): past it the run
    /// fails timed out [default: the runtime's timeout for its kind].
    #[arg(long, value_name = "DUR", value_parser = super::time::parse_duration)]
    pub timeout: Option<Duration>,
    /// Run only after the job of this key succeeded (repeatable); until
    /// then it is `waiting`. If that job ends dead or cancelled, this one
    /// is cancelled.
    #[arg(long = "depends-on", value_name = "KEY")]
    pub depends_on: Vec<String>,
}

#[derive(Serialize)]
struct InitReport {
    path: PathBuf,
    schema_version: i64,
}

/// `litejob init`: creates or migrates the file.
pub fn init(db: &Path, json: bool, out: &mut Out) -> CliResult {
    let queue = super::open(db, QueueOptions::default())?;
    let version = queue.schema_version()?;
    let path = if super::is_url(db) {
        PathBuf::from(queue.location())
    } else {
        std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf())
    };
    if json {
        out.json(&InitReport {
            path,
            schema_version: version,
        })
    } else {
        out.line(format!(
            "{}: litejob queue, schema version {version}",
            path.display()
        ))
    }
}

#[derive(Serialize)]
struct EnqueueReport {
    id: i64,
    duplicate: bool,
}

/// `litejob enqueue`. Input is checked (by the library's own rules) before
/// the file is opened, so bad input writes nothing, not even a new file.
pub fn enqueue(db: &Path, a: &EnqueueArgs, json: bool, out: &mut Out) -> CliResult {
    let opts = QueueOptions::default();
    let payload = match (&a.payload, &a.payload_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => read_payload_file(f, opts.max_payload_bytes)?,
        (None, None) => "{}".to_string(),
    };
    let mut job = NewJob::from_json(&a.kind, &a.key, payload)
        .with_queue(&a.queue)
        .with_priority(a.priority);
    if let Some(p) = &a.partition {
        job = job.with_partition(p);
    }
    if let Some(n) = a.max_retries {
        let n = u32::try_from(n).map_err(|_| {
            CliError::Input(format!(
                "--max-retries must be a whole number from 0 up, not {n}"
            ))
        })?;
        job = job.with_max_retries(n);
    }
    if let Some(d) = a.delay {
        job = job.with_delay(d);
    }
    if let Some(t) = a.timeout {
        job = job.with_timeout(t);
    }
    if let Some(t) = a.run_at {
        job = job.with_run_at(t);
    }
    if !a.depends_on.is_empty() {
        job = job.with_depends_on(a.depends_on.iter().cloned());
    }
    opts.check(&job)?;
    no_queue_no_dependency(db, a)?;
    let queue = super::open(db, opts)?;
    let r = queue.enqueue(job)?;
    if json {
        out.json(&EnqueueReport {
            id: r.id(),
            duplicate: r.is_duplicate(),
        })
    } else if r.is_duplicate() {
        out.line(format!("duplicate {}", r.id()))
    } else {
        out.line(format!("enqueued {}", r.id()))
    }
}

/// A dependency names a job, so on a file that does not exist yet every
/// `--depends-on` key is missing: refused here, before the open would
/// create the file (the library refuses it too, but only once the file is
/// there). A database's tables are the library's to check.
fn no_queue_no_dependency(db: &Path, a: &EnqueueArgs) -> CliResult {
    match a.depends_on.first() {
        Some(dep) if !super::is_url(db) && !db.exists() => Err(CliError::Input(format!(
            "job {:?} depends on {dep:?}, which is no job's key: there is no queue at {} yet; \
             nothing was enqueued",
            a.key,
            db.display()
        ))),
        _ => Ok(()),
    }
}

/// Reads at most `limit + 1` bytes, so a huge file is refused without being
/// read whole into memory. The file is the user's input: one that cannot be
/// opened is bad input (exit 2), like a payload that is not JSON.
fn read_payload_file(f: &Path, limit: usize) -> CliResult<String> {
    let stdin = f == Path::new("-");
    let name = if stdin {
        "stdin".to_string()
    } else {
        f.display().to_string()
    };
    let mut buf = Vec::new();
    let read = if stdin {
        std::io::stdin()
            .lock()
            .take(limit as u64 + 1)
            .read_to_end(&mut buf)
    } else {
        if f.is_dir() {
            return Err(CliError::Input(format!(
                "--payload-file {name} is a directory, not a file"
            )));
        }
        let file = std::fs::File::open(f)
            .map_err(|e| CliError::Input(format!("--payload-file: cannot open {name}: {e}")))?;
        file.take(limit as u64 + 1).read_to_end(&mut buf)
    };
    read.map_err(|e| CliError::Failed(format!("cannot read the payload from {name}: {e}")))?;
    if buf.len() > limit {
        return Err(CliError::Input(format!(
            "the payload in {name} is over the limit of {limit} bytes"
        )));
    }
    String::from_utf8(buf)
        .map_err(|_| CliError::Input(format!("the payload in {name} is not UTF-8 text")))
}

/// Parses `--run-at`: `YYYY-MM-DD[( |T)HH:MM[:SS[.fff]]][Z|±HH:MM]` (UTC
/// unless an offset is given) or `@<unix seconds>`.
// Long: a parser that reads the text left to right, one field at a time.
pub fn parse_time(s: &str) -> Result<SystemTime, String> {
    let bad = || {
        format!(
            "bad time {s:?}: use 2026-11-29 08:00:00 (UTC), 2026-11-29T08:00:00+01:00, \
             2026-11-29 or @<unix seconds>"
        )
    };
    let s = s.trim();
    if let Some(secs) = s.strip_prefix('@') {
        let n: u64 = secs.parse().map_err(|_| bad())?;
        if n > 100_000 * 365 * 86_400 {
            return Err(bad());
        }
        return Ok(UNIX_EPOCH + Duration::from_secs(n));
    }
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let part = s.get(from..from + len).ok_or_else(bad)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse().map_err(|_| bad())
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return Err(bad());
    }
    let (mut h, mut mi, mut sec, mut ms) = (0, 0, 0, 0);
    let mut i = 10;
    if b.len() > i && (b[i] == b' ' || b[i] == b'T') {
        h = num(i + 1, 2)?;
        if b.get(i + 3) != Some(&b':') {
            return Err(bad());
        }
        mi = num(i + 4, 2)?;
        i += 6;
        if b.get(i) == Some(&b':') {
            sec = num(i + 1, 2)?;
            i += 3;
            if b.get(i) == Some(&b'.') {
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    return Err(bad());
                }
                let frac = &s[i + 1..i + 1 + digits];
                let padded: String = frac.chars().chain("000".chars()).take(3).collect();
                ms = padded.parse().map_err(|_| bad())?;
                i += 1 + digits;
            }
        }
        if h > 23 || mi > 59 || sec > 60 {
            return Err(bad());
        }
    }
    let mut offset_min = 0i64;
    match &s[i..] {
        "" | "Z" | "z" => {}
        rest if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            if rest.as_bytes()[3] != b':' {
                return Err(bad());
            }
            let oh = num(i + 1, 2)?;
            let om = num(i + 4, 2)?;
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            offset_min = (oh * 60 + om) * if rest.starts_with('-') { -1 } else { 1 };
        }
        _ => return Err(bad()),
    }
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    let total_ms = secs * 1000 + ms;
    if total_ms >= 0 {
        Ok(UNIX_EPOCH + Duration::from_millis(total_ms as u64))
    } else {
        Ok(UNIX_EPOCH - Duration::from_millis(total_ms.unsigned_abs()))
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's days-from-civil algorithm (the inverse of the one in
// `super::time`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        parse_time(s)
            .unwrap()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    #[test]
    fn run_at_reads_like_people_write_it() {
        assert_eq!(ms("1970-01-01"), 0);
        assert_eq!(ms("2026-12-01 00:00:00"), 1_796_083_200_000);
        assert_eq!(ms("2026-12-01T00:00:00Z"), 1_796_083_200_000);
        assert_eq!(ms("2026-12-01T01:00:00+01:00"), 1_796_083_200_000);
        assert_eq!(ms("2026-12-01 00:00:00.5"), 1_796_083_200_500);
        assert_eq!(ms("2026-12-01 00:00"), 1_796_083_200_000);
        assert_eq!(ms("@1796083200"), 1_796_083_200_000);
        for bad in [
            "",
            "tomorrow",
            "2026-13-01",
            "2026-02-30",
            "2026-12-01 25:00",
            "2026-12-01 10:00 UTC",
            "2026-12-01T10:00:00+0100",
            "@-5",
            "@99999999999999999999",
            "２０２６-12-01",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
