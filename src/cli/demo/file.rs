//! The demo's app on a file: its table, its handler and its queries in
//! SQLite's dialect, run through the queue's SQLite API (`write`, `read`,
//! the handler's `JobTx`); `postgres.rs` is its twin. Writes the app table
//! `invoices`; the outbox row through the job's transaction.

use litejob::rusqlite::OptionalExtension;
use litejob::sqlite::JobTx;
use litejob::{Error, Outcome, Queue};

use super::{PaymentEvent, Receipt, EFFECT_KIND, JOB_KIND};

/// The app's own table. `provider_event_id` UNIQUE is the app's last line of
/// defence; litejob's ledger already makes a second insert unreachable.
const CREATE_INVOICES: &str = "\
CREATE TABLE IF NOT EXISTS invoices (
    id                INTEGER PRIMARY KEY,
    provider_event_id TEXT    NOT NULL UNIQUE,
    amount_cents      INTEGER NOT NULL,
    created_at        INTEGER NOT NULL -- ms since the Unix epoch, like litejob's tables
);";

const PROGRESS: &str = "SELECT (SELECT count(*) FROM invoices), \
     (SELECT count(*) FROM outbox WHERE kind = ?1 AND state = 'sent')";

const WORK_LEFT: &str =
    "SELECT (SELECT count(*) FROM jobs WHERE kind = ?1 AND state IN ('queued', 'running')) \
     + (SELECT count(*) FROM outbox WHERE kind = ?2 AND state IN ('pending', 'sending'))";

/// The summary's counts over the demo's keys (`?1`, a JSON array); the
/// same query as on PostgreSQL.
const SUMMARY: &str = "\
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

/// Creates `invoices` if it is missing.
pub(super) fn create_invoices(queue: &Queue) -> Result<(), Error> {
    queue.write(|tx| Ok(tx.execute_batch(CREATE_INVOICES)?))
}

/// The job handler: one invoice and one receipt to send, in the job's
/// transaction. It runs at most once per event id (litejob's ledger), and the
/// `ON CONFLICT` is what the app would write without litejob.
pub(super) fn record_invoice(
    tx: &mut JobTx<'_>,
    ev: PaymentEvent,
) -> Result<Outcome, litejob::HandlerError> {
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

/// Invoices, and receipts sent.
pub(super) fn progress(queue: &Queue) -> Result<(i64, i64), Error> {
    queue.read(|c| Ok(c.query_row(PROGRESS, [EFFECT_KIND], |r| Ok((r.get(0)?, r.get(1)?)))?))
}

/// Jobs and receipts of the demo's kinds not finished yet.
pub(super) fn work_left(queue: &Queue) -> Result<i64, Error> {
    queue.read(|c| Ok(c.query_row(WORK_LEFT, [JOB_KIND, EFFECT_KIND], |r| r.get(0))?))
}

/// The summary's counts: jobs, deliveries, invoices, receipts sent, dead,
/// retries, failed sends.
pub(super) fn summary(queue: &Queue, keys: &[&str]) -> Result<[i64; 7], Error> {
    let keys_json = serde_json::to_string(keys).map_err(|e| Error::Internal(e.to_string()))?;
    queue.read(|c| {
        Ok(c.query_row(SUMMARY, [keys_json], |r| {
            let mut v = [0i64; 7];
            for (i, x) in v.iter_mut().enumerate() {
                *x = r.get(i)?;
            }
            Ok(v)
        })?)
    })
}
