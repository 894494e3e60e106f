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

use litejob::__command::lock;
use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Backoff, Enqueued, Error, NewJob, QueueOptions};
use serde::{Deserialize, Serialize};

use super::rng::{below, Rng};
use super::time::parse_duration;

mod file;
mod postgres;
mod summary;

use summary::{print_out, print_summary, summarize, ThisRun};

/// The job kind the provider's webhook enqueues.
const JOB_KIND: &str = "payment.succeeded";
/// The outbox kind the job writes.
const EFFECT_KIND: &str = "send_receipt";

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

/// Runs the demo on the file or the PostgreSQL database at `db`; returns
/// the exit status.
pub fn run(db: &Path, args: &DemoArgs, json: bool) -> Result<i32, Error> {
    let lease = check_args(args)?;
    let location = db.to_string_lossy().into_owned();
    let on_postgres = litejob::__command::is_postgres_url(&location);
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
    patient("creating the invoices table", || create_invoices(&queue))?;
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

    let mut s = patient("counting", || summarize(&queue, &events, &receipts))?;
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
            let left = patient("counting the work left", || work_left(queue))?;
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
    let done = patient("reading progress", || progress(queue))?;
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
        AnyQueue::Sqlite(q) => file::create_invoices(q),
        AnyQueue::Postgres(q) => postgres::create_invoices(q),
        _ => Err(Error::Unsupported(
            "an engine this demo does not know".into(),
        )),
    }
}

/// Invoices, and receipts sent.
fn progress(queue: &AnyQueue) -> Result<(i64, i64), Error> {
    match queue {
        AnyQueue::Sqlite(q) => file::progress(q),
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
        let fail = lock(&mail_rng).unit() < failure_rate;
        if fail {
            return Err("mail provider unavailable (simulated), nothing sent".into());
        }
        send_receipt(&receipts, &r)?;
        Ok(())
    };
    match queue {
        AnyQueue::Sqlite(q) => configure(
            q.runtime().handler(JOB_KIND, file::record_invoice),
            args,
            lease,
        )
        .effect(EFFECT_KIND, effect)
        .start(),
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

/// One webhook delivery. A transient failure (busy, unknown outcome, the
/// server out of reach) is retried with the same key, which is always
/// safe: at worst it is a duplicate.
fn deliver(queue: &AnyQueue, ev: &PaymentEvent) -> Result<Enqueued, Error> {
    patient("enqueueing", || {
        queue.enqueue(NewJob::new(JOB_KIND, ev.id.as_str(), ev))
    })
}

/// How long the demo rides through a database that is away (a restart, a
/// failover) before it gives up.
const RIDE_THROUGH: Duration = Duration::from_secs(120);

/// `f` until it answers, while it fails for a reason that passes: busy,
/// the server out of reach, or a server that refuses writes (a standby,
/// while a failover promotes another: see `Error::Connection`). As an application would: its calls
/// are safe to repeat (an enqueue by its key, the rest reads).
fn patient<T>(what: &str, mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let since = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut said = false;
    loop {
        match f() {
            Err(e) if e.is_transient() && since.elapsed() < RIDE_THROUGH => {
                if !said {
                    log::warn!(
                        "demo: {what}: {e}; retrying for up to {} s",
                        RIDE_THROUGH.as_secs()
                    );
                    said = true;
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(2));
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
        AnyQueue::Sqlite(q) => file::work_left(q),
        AnyQueue::Postgres(q) => postgres::work_left(q),
        _ => Err(Error::Unsupported(
            "an engine this demo does not know".into(),
        )),
    }
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
mod tests;
