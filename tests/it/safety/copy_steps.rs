//! A job part way through its durable steps, copied to the other engine
//! (`copy_to` either way), carries on there: the steps its first run
//! recorded are handed back, not called again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::admin::AnyQueue;
use litejob::{JobState, NewJob, Outcome};

use crate::backends::{handler_with_prepare, Engine, Runtimes, TestBuilder, TestQueue};
use crate::support::{tiny_backoff, wait_state};

/// An order's handler: charge (counted), then book, which fails on its
/// first call ever; the apply step checks it reads the charge back.
fn charge_then_book(
    b: TestBuilder,
    charges: &Arc<AtomicUsize>,
    books: &Arc<AtomicUsize>,
) -> TestBuilder {
    let (c, k) = (charges.clone(), books.clone());
    handler_with_prepare(
        b.backoff(tiny_backoff())
            .poll_interval(Duration::from_millis(20)),
        "order",
        move |ctx, cents: i64| {
            let charge: String = ctx.step("charge", |key| {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("ch:{key}:{cents}"))
            })?;
            ctx.step("book", |_| {
                if k.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err("the carrier is down".to_string());
                }
                Ok(77_i64)
            })?;
            Ok(charge)
        },
        |tx, charge: String| {
            let read: Option<String> = tx.step_output("charge")?;
            if read.as_deref() != Some(charge.as_str()) {
                return Err(format!("apply read {read:?}, prepare had {charge}").into());
            }
            Ok(Outcome::Done)
        },
    )
}

fn copy(from: &AnyQueue, to: &AnyQueue) -> litejob::admin::CopyReport {
    match (from, to) {
        (AnyQueue::Sqlite(f), AnyQueue::Postgres(p)) => f.copy_to(p).unwrap(),
        (AnyQueue::Postgres(p), AnyQueue::Sqlite(f)) => p.copy_to(f).unwrap(),
        _ => unreachable!("a copy goes between the two engines"),
    }
}

it! {
    #[needs(Postgres)]
    fn a_job_copied_between_its_steps_does_not_call_a_recorded_step_again() {
        for (from, to) in [(Engine::Sqlite, Engine::Postgres), (Engine::Postgres, Engine::Sqlite)] {
            let (src, dest) = (TestQueue::new(from), TestQueue::new(to));
            let (charges, books) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let source = src.open();
            let mut rt = charge_then_book(source.runtime(), &charges, &books).start().unwrap();
            let id = source
                .enqueue(NewJob::new("order", "order:1", &4200_i64).with_max_retries(0))
                .unwrap()
                .id();
            // Charged, then dead at the booking: the charge is recorded.
            wait_state(&source, id, JobState::Dead);
            rt.stop();
            assert_eq!((charges.load(Ordering::SeqCst), books.load(Ordering::SeqCst)), (1, 1));

            let target = dest.open();
            let report = copy(&source, &target);
            assert_eq!((report.jobs, report.job_steps), (1, 1), "{from:?} to {to:?}: {report:?}");
            target.admin().retry_job(id).unwrap();
            let mut rt = charge_then_book(target.runtime(), &charges, &books).start().unwrap();
            wait_state(&target, id, JobState::Succeeded);
            rt.stop();
            assert_eq!(
                charges.load(Ordering::SeqCst),
                1,
                "{from:?} to {to:?}: the copied job charged again"
            );
            assert_eq!(books.load(Ordering::SeqCst), 2);
            let steps = target.steps(id).unwrap();
            // The retry of a dead job renews its budget: its attempts count
            // from 1 again, and the charge is reused by that attempt 1.
            assert_eq!(
                steps.iter().map(|s| s.summary()).collect::<Vec<_>>(),
                [
                    "step charge recorded in attempt 1, reused in attempt 1",
                    "step book recorded in attempt 1, not reused",
                ],
                "{from:?} to {to:?}"
            );
            assert_eq!(steps[0].output, "\"ch:order:1/charge:4200\"");
        }
    }
}
