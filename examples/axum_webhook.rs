//! A payment provider's webhook on axum, with litejob's workers in the same
//! process. Each event is enqueued with the provider's event id as its
//! idempotency key, so a redelivered event is a duplicate of the same job:
//! both answer 200 with the job id, and the provider stops retrying.
//!
//! ```sh
//! cargo run --example axum_webhook          # LITEJOB_DB, else ./webhooks.db
//! curl -s localhost:3000/webhook -H 'content-type: application/json' \
//!      -d '{"id": "evt_1", "cents": 4200}'   # {"job_id":1,"duplicate":false}
//! # the same again: {"job_id":1,"duplicate":true}
//! sqlite3 webhooks.db 'SELECT * FROM payments'   # one row per event
//! ```
//!
//! The handler awaits `enqueue_async`, which never blocks the executor's
//! thread: the writer thread commits and answers it. One executor thread
//! serves every request here. Ctrl-C (or SIGTERM) stops the server, then the
//! runtime: running jobs finish, nothing is lost.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use litejob::{NewJob, Outcome, Queue};
use serde::{Deserialize, Serialize};

/// What the provider posts (the fields this example uses).
#[derive(Deserialize, Serialize)]
struct PaymentEvent {
    id: String,
    cents: i64,
}

/// The answer: the job that holds the event, new or not.
#[derive(Serialize)]
struct Accepted {
    job_id: i64,
    duplicate: bool,
}

async fn webhook(
    State(queue): State<Queue>,
    Json(event): Json<PaymentEvent>,
) -> Result<Json<Accepted>, (StatusCode, String)> {
    let job = NewJob::new("payment.received", event.id.clone(), &event);
    match queue.enqueue_async(job).await {
        // New or Duplicate: the event is recorded, once.
        Ok(e) => Ok(Json(Accepted {
            job_id: e.id(),
            duplicate: e.is_duplicate(),
        })),
        Err(e) if e.is_invalid_input() => Err((StatusCode::BAD_REQUEST, e.to_string())),
        // Busy, or outcome unknown: the provider's retry, with the same
        // key, is safe.
        Err(e) => Err((StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// Ctrl-C, or SIGTERM (systemd's stop).
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var("LITEJOB_DB").unwrap_or_else(|_| "webhooks.db".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let queue = Queue::open(&path)?;
    queue
        .write_async(|tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS payments (event_id TEXT PRIMARY KEY, cents INTEGER)",
            )?;
            Ok(())
        })
        .await?;

    // The workers: threads of their own, beside the executor.
    let mut runtime = queue
        .runtime()
        .workers(2)
        .handler("payment.received", |tx, e: PaymentEvent| {
            // Commits with the job's ledger row: once per event, ever.
            tx.execute(
                "INSERT INTO payments (event_id, cents) VALUES (?1, ?2)",
                (&e.id, e.cents),
            )?;
            Ok(Outcome::Done)
        })
        .start()?;

    let app = Router::new()
        .route("/webhook", post(webhook))
        .with_state(queue.clone());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/webhook", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;

    // No request is in flight any more, so blocking this thread is fine:
    // stop claiming, let running jobs finish, release the rest.
    let report = runtime.stop();
    println!("stopped: {report:?}");
    Ok(())
}
