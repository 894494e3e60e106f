//! The workloads a recorded child runs, what each delivers, and the
//! acknowledgements it writes to the `acks` file as it goes:
//!
//! - `enq KEY`: the enqueue of KEY returned to its caller;
//! - `effect OKEY`: the effect of outbox row OKEY started (so the job that
//!   wrote it completed, and the row's claim committed);
//! - `done KEY`: the runtime logged that KEY's run succeeded;
//! - `sent OKEY`: the runtime logged that OKEY's effect was acknowledged.
//!
//! Each line is one write(2) into the watched directory, so the recorder
//! logs it in order with the I/O that came before it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use litejob::{NewJob, Outcome, Queue, QueueOptions, RuntimeBuilder, Synchronous};

use super::states::ACKS;

/// What the recorded children do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One thread enqueues one job at a time into a file it creates.
    Single,
    /// Eight threads enqueue at once.
    Producers,
    /// One thread enqueues batches (`enqueue_many`).
    Batches,
    /// The runtime works off a backlog enqueued before the recording; every
    /// run writes an app row and an outbox row, whose effect runs after.
    Backlog,
    /// A producer of large jobs beside the runtime: the WAL passes the
    /// checkpoint threshold, is copied back and restarts, more than once.
    Checkpoints,
    /// Two processes on one file at once, each enqueueing and running jobs.
    TwoProcesses,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Single => "single",
            Workload::Producers => "producers",
            Workload::Batches => "batches",
            Workload::Backlog => "backlog",
            Workload::Checkpoints => "checkpoints",
            Workload::TwoProcesses => "two-processes",
        }
    }

    fn from_name(s: &str) -> Workload {
        [
            Workload::Single,
            Workload::Producers,
            Workload::Batches,
            Workload::Backlog,
            Workload::Checkpoints,
            Workload::TwoProcesses,
        ]
        .into_iter()
        .find(|w| w.name() == s)
        .unwrap_or_else(|| panic!("no workload {s:?}"))
    }

    /// Every job the workload delivers, in the order a producer would
    /// deliver them again after a cut.
    pub fn deliveries(self) -> Vec<NewJob> {
        let keys: Vec<String> = match self {
            Workload::Single => (0..30).map(|i| format!("s-{i}")).collect(),
            Workload::Producers => (0..PRODUCERS)
                .flat_map(|t| (0..6).map(move |i| format!("p-{t}-{i}")))
                .collect(),
            Workload::Batches => (0..6)
                .flat_map(|b| (0..8).map(move |i| format!("b-{b}-{i}")))
                .collect(),
            Workload::Backlog => (0..40).map(|i| format!("j-{i}")).collect(),
            Workload::Checkpoints => (0..CHECKPOINT_JOBS).map(|i| format!("c-{i}")).collect(),
            Workload::TwoProcesses => ["a", "b"]
                .into_iter()
                .flat_map(|r| (0..24).map(move |i| format!("{r}-{i}")))
                .collect(),
        };
        keys.iter()
            .enumerate()
            .map(|(i, k)| {
                // Both handler shapes: apply-only (run in the claim's own
                // cycle) and prepare + apply (started by a worker).
                let kind = if i % 2 == 0 { "work" } else { "prep" };
                let payload = if self == Workload::Checkpoints {
                    serde_json::json!({ "k": k, "pad": "x".repeat(12_000) })
                } else {
                    serde_json::json!({ "k": k })
                };
                NewJob::new(kind, k.clone(), &payload)
            })
            .collect()
    }

    /// Whether the workload's runtime runs jobs (and so acknowledges
    /// completions and effects).
    pub fn runs_jobs(self) -> bool {
        matches!(
            self,
            Workload::Backlog | Workload::Checkpoints | Workload::TwoProcesses
        )
    }

    /// Prepares the file before the recording, unless the workload creates
    /// it: schema, the app table, the backlog. The queue is closed after,
    /// so only the database file is left, and synced.
    pub fn prepare(self, db: &Path, sync: Synchronous) {
        if self == Workload::Single {
            return;
        }
        let q = Queue::open_with(db, options(sync)).expect("prepare: open");
        create_app_table(&q);
        if self == Workload::Backlog {
            q.enqueue_many(self.deliveries()).expect("prepare: backlog");
        }
        drop(q);
        File::open(db).unwrap().sync_all().unwrap();
        File::open(db.parent().unwrap())
            .unwrap()
            .sync_all()
            .unwrap();
    }

    /// The children's extra environment, one entry per child.
    pub fn children(self, sync: Synchronous) -> Vec<Vec<(String, String)>> {
        let roles: &[&str] = if self == Workload::TwoProcesses {
            &["a", "b"]
        } else {
            &["-"]
        };
        roles
            .iter()
            .map(|r| {
                vec![
                    ("LITEJOB_POWER_WORKLOAD".into(), self.name().into()),
                    ("LITEJOB_POWER_SYNC".into(), sync.as_str().into()),
                    ("LITEJOB_POWER_ROLE".into(), r.to_string()),
                ]
            })
            .collect()
    }
}

const PRODUCERS: usize = 8;
const CHECKPOINT_JOBS: usize = 90;

/// The options of every queue the harness opens on a recorded file.
pub fn options(sync: Synchronous) -> QueueOptions {
    QueueOptions::default().with_synchronous(sync)
}

/// The app table the handlers write a row into, in their transaction.
pub fn create_app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS app_rows (key TEXT NOT NULL)")?;
        Ok(())
    })
    .expect("create the app table");
}

/// The acknowledgements file: one line, one write(2).
pub struct Acks(Mutex<File>);

impl Acks {
    fn open(dir: &Path) -> Acks {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(ACKS))
            .expect("open the acks file");
        Acks(Mutex::new(f))
    }

    pub fn ack(&self, line: &str) {
        let mut f = self.0.lock().unwrap();
        f.write_all(format!("{line}\n").as_bytes())
            .expect("write an ack");
    }
}

/// The handlers of the workloads' kinds: `work` (apply only) and `prep`
/// (prepare, then apply) both write an app row and an outbox row `mail:KEY`
/// in their transaction; the `mail` effect acknowledges its start when
/// `acks` is given.
pub fn runtime(q: &Queue, acks: Option<Arc<Acks>>, lease: Duration) -> RuntimeBuilder {
    q.runtime()
        .workers(2)
        .effect_workers(2)
        .lease(lease)
        .poll_interval(Duration::from_millis(10))
        .outbox_max_retries(5)
        .handler("work", |tx, _p: serde_json::Value| {
            let key = tx.job().key.clone();
            apply(tx, key)
        })
        .handler_with_prepare(
            "prep",
            |ctx, _p: serde_json::Value| Ok(ctx.key.clone()),
            apply,
        )
        .effect("mail", move |e, _key: String| {
            if let Some(a) = &acks {
                a.ack(&format!("effect {}", e.key));
            }
            Ok(())
        })
}

fn apply(
    tx: &mut litejob::sqlite::JobTx<'_>,
    key: String,
) -> Result<Outcome, litejob::HandlerError> {
    tx.execute("INSERT INTO app_rows (key) VALUES (?1)", [&key])?;
    tx.outbox("mail", &format!("mail:{key}"), &key)?;
    Ok(Outcome::Done)
}

/// Whether every job of `total` succeeded and every effect was sent.
pub fn drained(q: &Queue, total: usize) -> bool {
    q.read(|c| {
        Ok(c.query_row(
            "SELECT (SELECT count(*) FROM jobs WHERE state = 'succeeded') = ?1 \
               AND (SELECT count(*) FROM outbox WHERE state = 'sent') = ?1",
            [total as i64],
            |r| r.get(0),
        )?)
    })
    .expect("read the queue")
}

/// Writes `done KEY` and `sent OKEY` when the runtime logs them; prints
/// warnings and errors.
struct MarkerLog;

static LOG_ACKS: OnceLock<Arc<Acks>> = OnceLock::new();

impl log::Log for MarkerLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target() == "litejob"
    }

    fn log(&self, r: &log::Record) {
        if r.target() != "litejob" {
            return;
        }
        let kv = |k: &str| {
            r.key_values()
                .get(log::kv::Key::from_str(k))
                .map(|v| v.to_string())
                .unwrap_or_default()
        };
        let msg = r.args().to_string();
        let acks = LOG_ACKS.get();
        match (msg.as_str(), acks) {
            ("job finished", Some(a)) if kv("outcome") == "succeeded" => {
                a.ack(&format!("done {}", kv("key")))
            }
            ("effect finished", Some(a)) if kv("state") == "sent" => {
                a.ack(&format!("sent {}", kv("key")))
            }
            _ if r.level() <= log::Level::Warn => eprintln!("{}: {msg}", r.level()),
            _ => {}
        }
    }

    fn flush(&self) {}
}

/// The recorded child: runs the workload named by `LITEJOB_POWER_WORKLOAD`
/// on `db`, with `LITEJOB_POWER_SYNC`, as `LITEJOB_POWER_ROLE`.
pub fn child(db: &Path) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"));
    let w = Workload::from_name(&var("LITEJOB_POWER_WORKLOAD"));
    let sync: Synchronous = var("LITEJOB_POWER_SYNC").parse().unwrap();
    let role = var("LITEJOB_POWER_ROLE");
    let acks = Arc::new(Acks::open(db.parent().unwrap()));
    let _ = LOG_ACKS.set(acks.clone());
    let _ = log::set_logger(&MarkerLog);
    log::set_max_level(log::LevelFilter::Info);
    let q = Queue::open_with(db, options(sync)).expect("child: open");
    let jobs = w.deliveries();
    let total = jobs.len();
    let enqueue_one = |q: &Queue, job: NewJob| {
        let key = job.key().to_string();
        q.enqueue(job).expect("child: enqueue");
        acks.ack(&format!("enq {key}"));
    };
    let mut rt = w.runs_jobs().then(|| {
        runtime(&q, Some(acks.clone()), Duration::from_secs(1))
            .start()
            .expect("child: start the runtime")
    });
    match w {
        Workload::Single | Workload::Checkpoints => {
            for job in jobs {
                enqueue_one(&q, job);
            }
        }
        Workload::Producers => {
            let mut per: Vec<Vec<NewJob>> = (0..PRODUCERS).map(|_| Vec::new()).collect();
            for (i, job) in jobs.into_iter().enumerate() {
                per[i / (total / PRODUCERS)].push(job);
            }
            std::thread::scope(|s| {
                for mine in per {
                    let (q, enqueue_one) = (q.clone(), &enqueue_one);
                    s.spawn(move || mine.into_iter().for_each(|j| enqueue_one(&q, j)));
                }
            });
        }
        Workload::Batches => {
            let mut jobs = jobs.into_iter().peekable();
            while jobs.peek().is_some() {
                let batch: Vec<NewJob> = jobs.by_ref().take(8).collect();
                let keys: Vec<String> = batch.iter().map(|j| j.key().to_string()).collect();
                q.enqueue_many(batch).expect("child: enqueue a batch");
                for k in keys {
                    acks.ack(&format!("enq {k}"));
                }
            }
        }
        Workload::Backlog => {}
        Workload::TwoProcesses => {
            for job in jobs.into_iter().filter(|j| j.key().starts_with(&role)) {
                enqueue_one(&q, job);
            }
        }
    }
    if let Some(rt) = &mut rt {
        let t0 = Instant::now();
        while !drained(&q, total) {
            assert!(
                t0.elapsed() < Duration::from_secs(240),
                "child: not drained"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        rt.stop();
    }
    drop(q);
    println!("power-loss child done");
}
