//! The demo's app on PostgreSQL: the same table, handler and queries as
//! on a file, in PostgreSQL's dialect (`$1` parameters, arrays for the
//! keys, an identity column), run through the queue's PostgreSQL API
//! (``write`, `handler`). Writes the app table `invoices`; the outbox
//! row through the job's transaction.

use litejob::postgres::{PgJobTx, Postgres};
use litejob::{Error, HandlerError, Outcome, Queue};

use super::{PaymentEvent, Receipt, EFFECT_KIND, JOB_KIND};

/// The app's own table, as on a file.
const CREATE_INVOICES: &str = "\
CREATE TABLE IF NOT EXISTS invoices (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_event_id text   NOT NULL UNIQUE,
    amount_cents      bigint NOT NULL,
    created_at        bigint NOT NULL -- ms since the Unix epoch, like litejob's tables
);";

/// Held while the table is created: two copies starting at once on one
/// database (two machines) would otherwise race in `CREATE TABLE IF NOT
/// EXISTS`, and one would fail on the catalog's unique index.
const CREATE_LOCK: &str = "SELECT pg_advisory_xact_lock(7021600001)";

const INSERT_INVOICE: &str = "\
INSERT INTO invoices (provider_event_id, amount_cents, created_at) VALUES ($1, $2, $3)
ON CONFLICT (provider_event_id) DO NOTHING RETURNING id";

const PROGRESS: &str = "SELECT (SELECT count(*) FROM invoices), \
     (SELECT count(*) FROM outbox WHERE kind = $1 AND state = 'sent')";

const WORK_LEFT: &str =
    "SELECT (SELECT count(*) FROM jobs WHERE kind = $1 AND state IN ('queued', 'running')) \
     + (SELECT count(*) FROM outbox WHERE kind = $2 AND state IN ('pending', 'sending'))";

/// The summary's counts over the demo's keys (`$1`, a text array); the
/// same query as on a file.
const SUMMARY: &str = "\
WITH k(key) AS (SELECT unnest($1::text[])),
     j AS (SELECT id, state, deliveries FROM jobs WHERE idempotency_key IN (SELECT key FROM k)),
     o AS (SELECT id, state FROM outbox WHERE key IN (SELECT 'receipt:' || key FROM k))
SELECT (SELECT count(*) FROM j),
       (SELECT coalesce(sum(deliveries), 0)::bigint FROM j),
       (SELECT count(*) FROM invoices WHERE provider_event_id IN (SELECT key FROM k)),
       (SELECT count(*) FROM o WHERE state = 'sent'),
       (SELECT count(*) FROM j WHERE state = 'dead') + (SELECT count(*) FROM o WHERE state = 'dead'),
       (SELECT count(*) - count(DISTINCT job_id) FROM attempts WHERE job_id IN (SELECT id FROM j))
     + (SELECT count(*) - count(DISTINCT outbox_id) FROM attempts WHERE outbox_id IN (SELECT id FROM o)),
       (SELECT count(*) FROM attempts WHERE outbox_id IN (SELECT id FROM o) AND outcome = 'failed')";

/// Creates `invoices` if it is missing.
pub(super) fn create_invoices(queue: &Queue<Postgres>) -> Result<(), Error> {
    queue.write(|tx| {
        tx.batch_execute(CREATE_LOCK)?;
        Ok(tx.batch_execute(CREATE_INVOICES)?)
    })
}

/// The job handler, as on a file: one invoice and one receipt to send, in
/// the job's transaction.
pub(super) fn record_invoice(
    tx: &mut PgJobTx<'_, '_>,
    ev: PaymentEvent,
) -> Result<Outcome, HandlerError> {
    let now = tx.now();
    let invoice = tx.query_opt(INSERT_INVOICE, &[&ev.id, &ev.amount_cents, &now])?;
    let Some(invoice) = invoice else {
        // Already invoiced: nothing to do, and above all no second receipt.
        return Ok(Outcome::Done);
    };
    tx.outbox(
        EFFECT_KIND,
        &format!("receipt:{}", ev.id),
        &Receipt {
            invoice_id: invoice.get(0),
            event_id: ev.id,
        },
    )?;
    Ok(Outcome::Done)
}

/// Invoices, and receipts sent. A read, in a transaction of its own.
pub(super) fn progress(queue: &Queue<Postgres>) -> Result<(i64, i64), Error> {
    queue.write(|tx| {
        let r = tx.query_one(PROGRESS, &[&EFFECT_KIND])?;
        Ok((r.get(0), r.get(1)))
    })
}

/// Jobs and receipts of the demo's kinds not finished yet.
pub(super) fn work_left(queue: &Queue<Postgres>) -> Result<i64, Error> {
    queue.write(|tx| Ok(tx.query_one(WORK_LEFT, &[&JOB_KIND, &EFFECT_KIND])?.get(0)))
}

/// The summary's counts, in [`super::summarize`]'s order.
pub(super) fn summary(queue: &Queue<Postgres>, keys: &[&str]) -> Result<[i64; 7], Error> {
    queue.write(|tx| {
        let r = tx.query_one(SUMMARY, &[&keys])?;
        let mut v = [0i64; 7];
        for (i, x) in v.iter_mut().enumerate() {
            *x = r.get(i);
        }
        Ok(v)
    })
}
