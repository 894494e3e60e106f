//! A job's durable steps as the command shows them: `explain` answers "did
//! we charge twice?" in one line per step, `explain --json` and `show
//! --json` list them with their attempt, reuses and result, and a job
//! without steps shows none.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{json_of, ok};
use crate::backends::{handler, handler_with_prepare, Runtimes, TestQueue};
use crate::both;
use crate::support::{tiny_backoff, wait_state};

/// Job `order:1`: its charge (a result with markup in it) is recorded by
/// attempt 1, whose booking fails; attempt 2 reuses the charge and books.
/// Job `plain:1` has no steps. Returns their ids.
pub(crate) fn jobs_with_and_without_steps(q: &TestQueue) -> (i64, i64) {
    let queue = q.open();
    let books = Arc::new(AtomicUsize::new(0));
    let b = queue
        .runtime()
        .backoff(tiny_backoff())
        .poll_interval(Duration::from_millis(10));
    let b = handler_with_prepare(
        b,
        "order",
        move |ctx, _: Value| {
            let charge: String =
                ctx.step("charge", |key| Ok::<_, String>(format!("<b>{key}</b>")))?;
            ctx.step("book", |_| match books.fetch_add(1, Ordering::SeqCst) {
                0 => Err("the carrier is down".to_string()),
                _ => Ok(77_i64),
            })?;
            Ok(charge)
        },
        |_, _: String| Ok(Outcome::Done),
    );
    let mut rt = handler(b, "plain", |_, _: Value| Ok(Outcome::Done))
        .start()
        .unwrap();
    let order = queue
        .enqueue(NewJob::new("order", "order:1", &json!({})))
        .unwrap()
        .id();
    let plain = queue
        .enqueue(NewJob::new("plain", "plain:1", &json!({})))
        .unwrap()
        .id();
    wait_state(&queue, order, JobState::Succeeded);
    wait_state(&queue, plain, JobState::Succeeded);
    rt.stop();
    (order, plain)
}

both! {
    fn explain_and_show_list_each_step_with_the_attempt_that_recorded_it_and_those_that_reused_it(q) {
        let (order, plain) = jobs_with_and_without_steps(q);
        let text = ok(q, &["explain", "order:1"], 0);
        assert!(text.contains("step charge recorded in attempt 1, reused in attempt 2"), "{text}");
        assert!(text.contains("step book recorded in attempt 2, not reused"), "{text}");
        assert!(text.contains(r#"result "<b>order:1/charge</b>""#), "{text}");
        let shown = ok(q, &["show", &order.to_string()], 0);
        assert!(shown.contains("step charge recorded in attempt 1, reused in attempt 2"), "{shown}");

        let expected = |v: &Value| {
            let steps = v["steps"].as_array().unwrap();
            let brief: Vec<(&str, i64, &Value)> = steps
                .iter()
                .map(|s| (s["name"].as_str().unwrap(), s["attempt"].as_i64().unwrap(), &s["reused_in"]))
                .collect();
            assert_eq!(brief, [("charge", 1, &json!([2])), ("book", 2, &json!([]))], "{v}");
            assert_eq!(steps[0]["output"], "\"<b>order:1/charge</b>\"", "{v}");
            assert_eq!(steps[1]["output"], "77", "{v}");
            assert!(steps[0]["finished_at"].as_i64() >= steps[0]["started_at"].as_i64(), "{v}");
        };
        expected(&json_of(q, &["explain", "order:1"], 0));
        expected(&json_of(q, &["show", &order.to_string()], 0));

        let text = ok(q, &["explain", "plain:1"], 0);
        assert!(!text.contains("steps:"), "{text}");
        assert_eq!(json_of(q, &["explain", "plain:1"], 0)["steps"], json!([]));
        assert_eq!(json_of(q, &["show", &plain.to_string()], 0)["steps"], json!([]));
    }
}
