//! `explain`: one event delivered three times and run once, in a sentence
//! and as JSON, and an unknown key said so.

use serde_json::{json, Value};

use super::{init, json_of, run_jobs};
use crate::support::{litejob_ok, TestDb};

#[test]
fn explain_answers_one_event_delivered_three_times_run_once() {
    let db = TestDb::new();
    for _ in 0..3 {
        litejob_ok(&db.path, &["enqueue", "k", "--key", "evt_42"], 0);
    }
    run_jobs(&db, "k");

    let text = litejob_ok(&db.path, &["explain", "evt_42"], 0);
    let first = text.lines().next().unwrap();
    assert_eq!(first, "1 event, delivered 3 times, run once", "{text}");
    assert!(
        text.contains("succeeded") && text.contains("committed"),
        "{text}"
    );

    let v = json_of(&db, &["explain", "evt_42"], 0);
    assert_eq!(v["summary"], "1 event, delivered 3 times, run once");
    assert_eq!(v["deliveries"], 3);
    assert_eq!(v["job"]["state"], "succeeded");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(v["attempts"][0]["outcome"], "succeeded");
    assert!(!v["attempts"][0]["worker"].as_str().unwrap().is_empty());
    assert_eq!(v["ledger"]["key"], "evt_42");
    assert_eq!(v["ledger"]["job_id"], 1);
    assert_eq!(v["outbox"], json!([]));
}

#[test]
fn explain_an_unknown_key_says_so() {
    let db = TestDb::new();
    init(&db);
    let text = litejob_ok(&db.path, &["explain", "nobody"], 0);
    assert_eq!(text.lines().next(), Some("no job has this key"), "{text}");
    let v = json_of(&db, &["explain", "nobody"], 0);
    assert_eq!(v["summary"], "no job has this key");
    assert_eq!(v["job"], Value::Null);
    assert_eq!(v["ledger"], Value::Null);
    assert_eq!(v["deliveries"], 0);
}
