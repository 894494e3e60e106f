//! `litejob demo`: the receipts scenario, built from the public
//! library API only, as an application would use it. A simulated payment
//! provider redelivers `payment.succeeded` events; the job handler records
//! one invoice per event and an outbox row; the effect appends one receipt
//! line to a file. Writes the app table `invoices` and the receipts file;
//! `jobs`, `outbox` and `attempts` only through the library.
//!
//! Read it as the reference example: the producer enqueues with the
//! provider's event id as the idempotency key, the handler does its SQL and
//! records the side effect in the same transaction, and the side effect runs
//! after commit with its own retries. On PostgreSQL (`--db postgres://…`)
//! the same scenario runs with the app's SQL in PostgreSQL's dialect and
//! the handler registered with `pg_handler`: everything else is the same
//! code.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::sqlite::JobTx;
use litejob::{Backoff, Enqueued, Error, NewJob, Outcome, QueueOptions};
use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};

use super::rng::{below, Rng};
use super::time::parse_duration;

mod postgres;

/// The job kind the provider's webhook enqueues.
const JOB_KIND: &str = "payment.succeeded";
/// The outbox kind the job writes.
const EFFECT_KIND: &str = "send_receipt";

/// The app's own table. `provider_event_id` UNIQUE is the app's last line of
/// defence; litejob's ledger already makes a second insert unreachable.
const CREATE_INVOICES: &str = "\
CREATE TABLE IF NOT EXISTS invoices (
    id                INTEGER PRIMARY KEY,
    provider_event_id TEXT    NOT NULL UNIQUE,
    amount_cents      INTEGER NOT NULL,
    created_at        INTEGER NOT NULL -- ms since the Unix epoch, like litejob's tables
);";

/// Where the receipts go when `--db` is a PostgreSQL URL (there is no file
/// to put them beside): the current directory.
const PG_RECEIPTS: &str = "litejob-demo.receipts";

/// Flags of `litejob demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Distinct payment events the provider sends.
    #[arg(long, default_value_t = 1000)]
    pub events: u64,
    /// How many times the provider delivers each event (shuffled).
    #[arg(long, default_value_t = 3)]
    pub redeliver: u32,
    /// Seed of the amounts and the delivery order: the same seed delivers the
    /// same events in the same order.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Job worker threads.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// File the receipts are "mailed" to (default: `<db>.receipts` beside
    /// a file; `./litejob-demo.receipts` for a PostgreSQL URL).
    #[arg(long)]
    pub receipts: Option<PathBuf>,
    /// Chance that one receipt send fails (a transient error, retried).
    #[arg(long, default_value_t = 0.1)]
    pub mail_failure_rate: f64,
    /// Lease of a running job or effect; after a crash, another process
    /// takes the work back once it expires.
    #[arg(long, default_value = "30s", value_parser = parse_duration, hide = true)]
    pub lease: Duration,
    /// Effect (receipt sending) threads.
    #[arg(long, default_value_t = 2, hide = true)]
    pub effect_workers: usize,
    /// A slow mail provider: each send takes this long (for tests of a
    /// shutdown that has to wait for running sends).
    #[arg(long, default_value = "0ms", value_parser = parse_duration, hide = true)]
    pub send_delay: Duration,
}

/// One webhook delivery from the provider: the job's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PaymentEvent {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    amount_cents: i64,
}

/// What the receipt effect needs: the outbox row's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    invoice_id: i64,
    event_id: String,
}

/// What `litejob demo` prints; with `--json`, this object. Counts are for
/// the demo's event ids and cumulative over runs on the same file, except
/// `this_run`.
#[derive(Debug, Clone, Default, Serialize)]
struct Summary {
    /// Distinct events (`--events`).
    events: u64,
    /// Enqueues seen for the events' keys (`sum(jobs.deliveries)`).
    deliveries: i64,
    /// Deliveries that created nothing: `deliveries - jobs`.
    duplicates_absorbed: i64,
    /// Job rows for the events' keys.
    jobs: i64,
    /// Invoices for the events.
    invoices: i64,
    /// Outbox rows `sent`.
    receipts_sent: i64,
    /// Lines in the receipts file.
    receipt_lines: i64,
    /// Receipt lines beyond the first for the same invoice: a kill landed
    /// between a send and its acknowledgement.
    duplicate_receipt_lines: i64,
    /// Runs beyond the first, of jobs and of receipt sends.
    retries: i64,
    /// Receipt sends that failed (the simulated mail outage).
    failed_sends: i64,
    /// Jobs and outbox rows `dead`.
    dead: i64,
    /// Deliveries made by this run, and what they did.
    this_run: ThisRun,
    /// True when a signal cut the run short.
    interrupted: bool,
    /// The database file, or the PostgreSQL URL without its password.
    db: String,
    /// The receipts file.
    receipts: String,
    /// Wall-clock time of this run.
    elapsed_ms: u64,
}

/// This process's deliveries.
#[derive(Debug, Clone, Default, Serialize)]
struct ThisRun {
    deliveries: u64,
    new_jobs: u64,
    duplicates: u64,
}

/// Runs the demo on the file or the PostgreSQL database at `db`; returns
/// the exit status.
pub fn run(db: &Path, args: &DemoArgs, json: bool) -> Result<i32, Error> {
    let lease = check_args(args)?;
    let location = db.to_string_lossy().into_owned();
    let on_postgres = litejob::admin::is_postgres_url(&location);
    let receipts = args.receipts.clone().unwrap_or_else(|| {
        if on_postgres {
            return PathBuf::from(PG_RECEIPTS);
        }
        let mut p = db.as_os_str().to_owned();
        p.push(".receipts");
        PathBuf::from(p)
    });
    let t0 = Instant::now();
    let signals = install_signal_handler();

    let queue = AnyQueue::open_with(&location, QueueOptions::default())?;
    create_invoices(&queue)?;
    // Created up front so that an empty run still has a file to count.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&receipts)?;

    let mut runtime = start_runtime(&queue, args, lease, &receipts)?;

    let events: Vec<PaymentEvent> = (1..=args.events).map(|i| event(args.seed, i)).collect();
    let order = delivery_order(args.events as usize, args.redeliver, args.seed);

    let this_run = Arc::new(Counters::default());
    let produced = deliver_until_done(&queue, &events, &order, &signals, &this_run);
    runtime.stop();
    let interrupted = produced?;

    let mut s = summarize(&queue, &events, &receipts)?;
    s.events = args.events;
    s.this_run = this_run.snapshot();
    s.interrupted = interrupted;
    s.db = match &queue {
        AnyQueue::Postgres(q) => q.location().to_string(),
        _ => db.display().to_string(),
    };
    s.receipts = receipts.display().to_string();
    s.elapsed_ms = t0.elapsed().as_millis() as u64;
    if json {
        let text = serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))?;
        print_out(&format!("{text}\n"));
    } else {
        print_summary(&s, args);
    }
    Ok(0)
}

/// Refuses flags out of range before anything is written; the lease.
fn check_args(args: &DemoArgs) -> Result<Duration, Error> {
    if !(0.0..=1.0).contains(&args.mail_failure_rate) {
        return Err(Error::InvalidInput(format!(
            "--mail-failure-rate {} is not a probability: use a number from 0.0 to 1.0",
            args.mail_failure_rate
        )));
    }
    if args.redeliver == 0 {
        return Err(Error::InvalidInput("--redeliver must be at least 1".into()));
    }
    if args.workers == 0 {
        return Err(Error::InvalidInput("--workers must be at least 1".into()));
    }
    if args.effect_workers == 0 {
        return Err(Error::InvalidInput(
            "--effect-workers must be at least 1".into(),
        ));
    }
    Ok(args.lease)
}

/// Delivers every event in `order` from four producer threads (the
/// provider sends webhooks concurrently; each delivery is one enqueue, as
/// an HTTP endpoint would do it) and waits until no work is left, showing
/// progress on a terminal. True when a signal cut it short.
fn deliver_until_done(
    queue: &AnyQueue,
    events: &[PaymentEvent],
    order: &[usize],
    signals: &AtomicUsize,
    this_run: &Counters,
) -> Result<bool, Error> {
    let progress = std::io::stderr().is_terminal();
    let next = AtomicUsize::new(0);
    let produced = std::thread::scope(|scope| {
        let producers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| -> Result<(), Error> {
                    loop {
                        if signals.load(Ordering::SeqCst) > 0 {
                            return Ok(());
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&e) = order.get(i) else {
                            return Ok(());
                        };
                        this_run.record(deliver(queue, &events[e])?);
                    }
                })
            })
            .collect();
        let mut last_progress = Instant::now();
        loop {
            if signals.load(Ordering::SeqCst) > 0 {
                break;
            }
            let producing = producers.iter().any(|p| !p.is_finished());
            let left = work_left(queue)?;
            if progress && last_progress.elapsed() >= Duration::from_millis(250) {
                last_progress = Instant::now();
                show_progress(queue, this_run, order.len(), left)?;
            }
            if !producing && left == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for p in producers {
            p.join()
                .map_err(|_| Error::Internal("a producer thread panicked".into()))??;
        }
        Ok(signals.load(Ordering::SeqCst) > 0)
    });
    if progress {
        eprint!("\r\x1b[K");
    }
    produced
}

/// One line of progress on stderr, rewritten in place.
fn show_progress(
    queue: &AnyQueue,
    this_run: &Counters,
    deliveries: usize,
    left: i64,
) -> Result<(), Error> {
    let done = progress(queue)?;
    eprint!(
        "\rdemo: {}/{} deliveries, {} invoices, {} receipts sent, {} waiting   ",
        this_run.deliveries.load(Ordering::Relaxed),
        deliveries,
        done.0,
        done.1,
        left
    );
    Ok(())
}

/// Creates `invoices` if it is missing. The app's SQL is the only part of
/// the demo that differs between a file and a PostgreSQL database.
fn create_invoices(queue: &AnyQueue) -> Result<(), Error> {
    match queue {
        AnyQueue::Sqlite(q) => q.write(|tx| Ok(tx.execute_batch(CREATE_INVOICES)?)),
        AnyQueue::Postgres(q) => postgres::create_invoices(q),
        _ => Err(Error::Unsupported(
            "an engine this demo does not know".into(),
        )),
    }
}

/// Invoices, and receipts sent.
fn progress(queue: &AnyQueue) -> Result<(i64, i64), Error> {
    match queue {
        AnyQueue::Sqlite(q) => q.read(|c| {
            Ok(c.query_row(
                "SELECT (SELECT count(*) FROM invoices), \
                            (SELECT count(*) FROM outbox WHERE kind = ?1 AND state = 'sent')",
                [EFFECT_KIND],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )?)
        }),
        AnyQueue::Postgres(q) => postgres::progress(q),
        _ => Err(Error::Unsupported(
            "an engine this demo does not know".into(),
        )),
    }
}

/// Registers the job handler and the receipt effect, and starts the workers.
fn start_runtime(
    queue: &AnyQueue,
    args: &DemoArgs,
    lease: Duration,
    receipts: &Path,
) -> Result<litejob::Runtime, Error> {
    let failure_rate = args.mail_failure_rate;
    let send_delay = args.send_delay;
    let mail_rng = Mutex::new(Rng::from_entropy());
    let receipts = receipts.to_path_buf();
    let effect = move |_effect: &litejob::EffectContext, r: Receipt| {
        std::thread::sleep(send_delay);
        let fail = mail_rng.lock().unwrap_or_else(|p| p.into_inner()).unit() < failure_rate;
        if fail {
            return Err("mail provider unavailable (simulated), nothing sent".into());
        }
        send_receipt(&receipts, &r)?;
        Ok(())
    };
    match queue {
        AnyQueue::Sqlite(q) => {
            configure(q.runtime().handler(JOB_KIND, record_invoice), args, lease)
                .effect(EFFECT_KIND, effect)
                .start()
        }
        AnyQueue::Postgres(q) => configure(
            q.runtime().handler(JOB_KIND, postgres::record_invoice),
            args,
            lease,
        )
        .effect(EFFECT_KIND, effect)
        .start(),
        _ => Err(Error::Unsupported(
            "an engine this demo does not know".into(),
        )),
    }
}

/// The demo's runtime settings, the same on both engines.
fn configure<E: litejob::Engine>(
    runtime: litejob::RuntimeBuilder<E>,
    args: &DemoArgs,
    lease: Duration,
) -> litejob::RuntimeBuilder<E> {
    runtime
        .workers(args.workers)
        .effect_workers(args.effect_workers)
        .lease(lease)
        // Short, so retries and another copy's work are picked up quickly.
        .poll_interval(Duration::from_millis(100))
        .backoff(
            Backoff::default()
                .with_base(Duration::from_millis(50))
                .with_max(Duration::from_secs(1))
                .with_jitter(0.25),
        )
        // Six attempts in all: at a 10 % failure rate a receipt ends dead
        // about once in a million.
        .outbox_max_retries(5)
        .effect_backoff(
            Backoff::default()
                .with_base(Duration::from_millis(10))
                .with_max(Duration::from_millis(200))
                .with_jitter(0.25),
        )
}

/// The job handler: one invoice and one receipt to send, in the job's
/// transaction. It runs at most once per event id (litejob's ledger), and the
/// `ON CONFLICT` is what the app would write without litejob.
fn record_invoice(tx: &mut JobTx<'_>, ev: PaymentEvent) -> Result<Outcome, litejob::HandlerError> {
    let invoice_id: Option<i64> = tx
        .query_row(
            "INSERT INTO invoices (provider_event_id, amount_cents, created_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (provider_event_id) DO NOTHING RETURNING id",
            (&ev.id, ev.amount_cents, tx.now()),
            |r| r.get(0),
        )
        .optional()?;
    let Some(invoice_id) = invoice_id else {
        // Already invoiced: nothing to do, and above all no second receipt.
        return Ok(Outcome::Done);
    };
    tx.outbox(
        EFFECT_KIND,
        &format!("receipt:{}", ev.id),
        &Receipt {
            invoice_id,
            event_id: ev.id,
        },
    )?;
    Ok(Outcome::Done)
}

/// "Mails" a receipt: one line appended in one write, then made durable, so
/// that a crash leaves either the whole line or none of it.
fn send_receipt(path: &Path, r: &Receipt) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(format!("{}\t{}\n", r.invoice_id, r.event_id).as_bytes())?;
    f.flush()?;
    f.sync_data()
}

/// Event number `i` (1-based): the same id and amount for the same seed.
fn event(seed: u64, i: u64) -> PaymentEvent {
    let mut rng = Rng::seeded(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    PaymentEvent {
        id: format!("evt_{i:06}"),
        event_type: JOB_KIND.into(),
        amount_cents: 100 + below(&mut rng, 49_901) as i64,
    }
}

/// Every event index `redeliver` times, shuffled (Fisher–Yates) by `seed`.
fn delivery_order(events: usize, redeliver: u32, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..redeliver).flat_map(|_| 0..events).collect();
    let mut rng = Rng::seeded(seed);
    for i in (1..order.len()).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// One webhook delivery. A transient failure (busy, unknown outcome) is
/// retried with the same key, which is always safe: at worst it is a
/// duplicate.
fn deliver(queue: &AnyQueue, ev: &PaymentEvent) -> Result<Enqueued, Error> {
    let mut delay = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        match queue.enqueue(NewJob::new(JOB_KIND, ev.id.as_str(), ev)) {
            Err(e) if e.is_transient() && tries < 5 => {
                tries += 1;
                std::thread::sleep(delay);
                delay *= 2;
            }
            other => return other,
        }
    }
}

#[derive(Default)]
struct Counters {
    deliveries: AtomicU64,
    new_jobs: AtomicU64,
    duplicates: AtomicU64,
}

impl Counters {
    fn record(&self, r: Enqueued) {
        self.deliveries.fetch_add(1, Ordering::Relaxed);
        match r {
            Enqueued::New(_) => self.new_jobs.fetch_add(1, Ordering::Relaxed),
            Enqueued::Duplicate(_) => self.duplicates.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn snapshot(&self) -> ThisRun {
        ThisRun {
            deliveries: self.deliveries.load(Ordering::Relaxed),
            new_jobs: self.new_jobs.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
        }
    }
}

/// Jobs and receipts of the demo's kinds not finished yet, in this process
/// or any other on the same database.
fn work_left(queue: &AnyQueue) -> Result<i64, Error> {
    match queue {
        AnyQueue::Sqlite(q) => q.read(|c| {
            Ok(c.query_row(
                "SELECT (SELECT count(*) FROM jobs WHERE kind = ?1 AND state IN ('queued', 'running')) \
                      + (SELECT count(*) FROM outbox WHERE kind = ?2 AND state IN ('pending', 'sending'))",
                [JOB_KIND, EFFECT_KIND],
                |r| r.get(0),
            )?)
        }),
        AnyQueue::Postgres(q) => postgres::work_left(q),
        _ => Err(Error::Unsupported("an engine this demo does not know".into())),
    }
}

/// The summary's counts, in plain SQL over the demo's keys (the event
/// ids), and the receipts file read back.
fn summarize(queue: &AnyQueue, events: &[PaymentEvent], receipts: &Path) -> Result<Summary, Error> {
    const SQL: &str = "\
        WITH k(key) AS (SELECT value FROM json_each(?1)),
             j AS (SELECT id, state, deliveries FROM jobs WHERE idempotency_key IN (SELECT key FROM k)),
             o AS (SELECT id, state FROM outbox WHERE key IN (SELECT 'receipt:' || key FROM k))
        SELECT (SELECT count(*) FROM j),
               (SELECT coalesce(sum(deliveries), 0) FROM j),
               (SELECT count(*) FROM invoices WHERE provider_event_id IN (SELECT key FROM k)),
               (SELECT count(*) FROM o WHERE state = 'sent'),
               (SELECT count(*) FROM j WHERE state = 'dead') + (SELECT count(*) FROM o WHERE state = 'dead'),
               (SELECT count(*) - count(DISTINCT job_id) FROM attempts WHERE job_id IN (SELECT id FROM j))
             + (SELECT count(*) - count(DISTINCT outbox_id) FROM attempts WHERE outbox_id IN (SELECT id FROM o)),
               (SELECT count(*) FROM attempts WHERE outbox_id IN (SELECT id FROM o) AND outcome = 'failed')";
    let keys: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let counts: [i64; 7] = match queue {
        AnyQueue::Sqlite(q) => {
            let keys_json =
                serde_json::to_string(&keys).map_err(|e| Error::Internal(e.to_string()))?;
            q.read(|c| {
                Ok(c.query_row(SQL, [keys_json], |r| {
                    let mut v = [0i64; 7];
                    for (i, x) in v.iter_mut().enumerate() {
                        *x = r.get(i)?;
                    }
                    Ok(v)
                })?)
            })?
        }
        AnyQueue::Postgres(q) => postgres::summary(q, &keys)?,
        _ => {
            return Err(Error::Unsupported(
                "an engine this demo does not know".into(),
            ))
        }
    };
    let [jobs, deliveries, invoices, receipts_sent, dead, retries, failed_sends] = counts;
    let mut s = Summary {
        jobs,
        deliveries,
        invoices,
        receipts_sent,
        dead,
        retries,
        failed_sends,
        ..Summary::default()
    };
    s.duplicates_absorbed = s.deliveries - s.jobs;
    let text = std::fs::read_to_string(receipts)?;
    let mut seen: HashMap<&str, i64> = HashMap::new();
    for line in text.lines() {
        *seen.entry(line).or_default() += 1;
    }
    s.receipt_lines = seen.values().sum();
    s.duplicate_receipt_lines = seen.values().map(|n| n - 1).sum();
    Ok(s)
}

/// Prints the summary for people. A closed pipe (`litejob demo | head`) is
/// not an error.
fn print_summary(s: &Summary, args: &DemoArgs) {
    let mut out = format!(
        "litejob demo{}: a payment provider delivered {} events {} times each, shuffled; {} workers\n",
        if s.interrupted {
            " (interrupted, partial)"
        } else {
            ""
        },
        s.events,
        args.redeliver,
        args.workers
    );
    let mut line = |label: &str, value: i64, note: String| {
        let l = format!("  {label:<20} {value:>8}   {note}");
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line("events", s.events as i64, String::new());
    line(
        "deliveries",
        s.deliveries,
        format!(
            "enqueues seen, all runs (this run: {})",
            s.this_run.deliveries
        ),
    );
    line(
        "duplicates absorbed",
        s.duplicates_absorbed,
        "deliveries that created no job".into(),
    );
    line(
        "invoices",
        s.invoices,
        "rows in `invoices`, one per event".into(),
    );
    line(
        "receipts sent",
        s.receipts_sent,
        format!("{} lines in {}", s.receipt_lines, s.receipts),
    );
    if s.duplicate_receipt_lines > 0 {
        line(
            "receipts sent twice",
            s.duplicate_receipt_lines,
            "a crash landed between a send and its acknowledgement".into(),
        );
    }
    line(
        "retries",
        s.retries,
        format!("runs beyond the first ({} failed sends)", s.failed_sends),
    );
    line("dead", s.dead, "jobs and receipts out of attempts".into());
    let shell = if litejob::admin::is_postgres_url(&s.db) {
        // The URL is shown without its password: put it back to run these.
        format!("psql '{}' -c", s.db)
    } else {
        format!("sqlite3 {}", s.db)
    };
    out.push_str(&format!(
        "Run it again: only the delivery counts grow. Then look closer:\n  \
         litejob --db '{db}' explain evt_000001\n  \
         litejob --db '{db}' stats\n  \
         {shell} 'SELECT * FROM key_summary LIMIT 5'\n",
        db = s.db
    ));
    print_out(&out);
}

fn print_out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// First Ctrl-C or SIGTERM: stop gracefully (the caller polls the count);
/// second: exit at once. Installs nothing if another handler already exists
/// (the process can have only one).
fn install_signal_handler() -> Arc<AtomicUsize> {
    let signals = Arc::new(AtomicUsize::new(0));
    let s = signals.clone();
    let installed = ctrlc::set_handler(move || {
        if s.fetch_add(1, Ordering::SeqCst) >= 1 {
            std::process::exit(130);
        }
        eprintln!("\nstopping: finishing running jobs (Ctrl-C again to quit at once)");
    });
    if let Err(e) = installed {
        log::warn!("demo: no signal handler ({e}); Ctrl-C stops at once");
    }
    signals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_order_is_every_event_k_times_and_reproducible() {
        let a = delivery_order(10, 3, 42);
        assert_eq!(a, delivery_order(10, 3, 42));
        assert_ne!(a, delivery_order(10, 3, 43));
        let mut sorted = a.clone();
        sorted.sort();
        let want: Vec<usize> = (0..10).flat_map(|i| [i, i, i]).collect();
        assert_eq!(sorted, want);
    }

    #[test]
    fn events_are_the_same_for_the_same_seed() {
        assert_eq!(event(42, 7).amount_cents, event(42, 7).amount_cents);
        assert_eq!(event(42, 7).id, "evt_000007");
    }
}
