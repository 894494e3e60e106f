//! An application that embeds litejob as a user does (`default-features =
//! false`, no test helpers of the repository): it runs the README's durable
//! steps example and exits 1 if a promise of it does not hold.

use litejob::testing::temp_queue;
use litejob::{NewJob, Outcome};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

static CHARGES: AtomicU32 = AtomicU32::new(0);
static BOOKINGS: AtomicU32 = AtomicU32::new(0);

fn main() -> Result<(), litejob::Error> {
    // The README's example, line for line (a test of the library checks
    // that they stay the same).
    let (queue, clock) = temp_queue()?;
    queue.enqueue(NewJob::new("ship", "order-7", &4200_u32))?;
    let runtime = || queue.runtime().handler_with_prepare(
        "ship",
        |ctx, cents: u32| {
            let charge: String = ctx.step("charge", |key| {
                CHARGES.fetch_add(1, SeqCst); // the payment API, Idempotency-Key: key
                Ok::<_, String>(format!("ch_{cents}"))
            })?;
            let label: String = ctx.step("book", |_key| match BOOKINGS.fetch_add(1, SeqCst) {
                0 => Err("carrier timeout".to_string()),
                _ => Ok(format!("label paid by {charge}")),
            })?;
            Ok(label)
        },
        |tx, label: String| {
            let charge: Option<String> = tx.step_output("charge")?; // the recorded value
            Outcome::done_with(&(charge, label))
        },
    );
    assert_eq!(runtime().drain()?.retried, 1); // charged, then the booking failed
    clock.advance(Duration::from_secs(60));
    assert_eq!(runtime().drain()?.succeeded, 1); // booked, not charged again
    assert_eq!((CHARGES.load(SeqCst), BOOKINGS.load(SeqCst)), (1, 2));
    let job = queue.job_by_key("order-7")?.unwrap();
    let steps = queue.steps(job.id)?;
    assert_eq!(steps[0].summary(), "step charge recorded in attempt 1, reused in attempt 2");

    // What the application's operator would see.
    for s in &steps {
        println!("{}", s.summary());
    }
    println!("output: {}", job.output.as_deref().unwrap_or("-"));
    Ok(())
}
