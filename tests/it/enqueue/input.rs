//! Bad input: refused with an error naming what is wrong and nothing
//! written, the payload limit configurable, and arbitrary strings never
//! panic.

use std::collections::HashMap;

use litejob::{Enqueued, Error, NewJob, Queue, QueueOptions};
use proptest::prelude::*;
use serde_json::json;

use super::jobs;
use crate::support::TestDb;

/// Asserts that `job` is refused as bad input naming `needle`, with nothing written.
fn refused(q: &Queue, db: &TestDb, job: NewJob, needle: &str) {
    let before = jobs(db);
    let err = q.enqueue(job).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(
        err.to_string().contains(needle),
        "{err} does not mention {needle:?}"
    );
    assert_eq!(jobs(db), before, "something was written for a refused job");
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let db = TestDb::new();
    let q = db.open();
    refused(&q, &db, NewJob::new("", "k1", &json!({})), "kind");
    refused(&q, &db, NewJob::new("  \t", "k1", &json!({})), "kind");
    refused(&q, &db, NewJob::new("k", "", &json!({})), "key");
    refused(&q, &db, NewJob::new("k", " \n", &json!({})), "key");
    refused(
        &q,
        &db,
        NewJob::new("k", "k1", &json!({})).with_queue(""),
        "queue",
    );
    refused(&q, &db, NewJob::from_json("k", "k1", "{\"a\":"), "JSON");
    refused(&q, &db, NewJob::from_json("k", "k1", ""), "JSON");
    refused(&q, &db, NewJob::from_json("k", "k1", "{} {}"), "JSON");
    // A payload serde cannot turn into JSON (map keys must be strings).
    let mut m: HashMap<(i32, i32), i32> = HashMap::new();
    m.insert((1, 2), 3);
    refused(&q, &db, NewJob::new("k", "k1", &m), "JSON");
    refused(
        &q,
        &db,
        NewJob::new("k", "k1", &json!({})).with_max_retries(u32::MAX),
        "max_retries",
    );
    // Over the default 1 MiB limit.
    let big = "x".repeat(1024 * 1024);
    refused(&q, &db, NewJob::new("k", "k1", &big), "limit");
    // Just under it is fine.
    let ok = "x".repeat(1024 * 1024 - 2);
    assert!(!q
        .enqueue(NewJob::new("k", "fits", &ok))
        .unwrap()
        .is_duplicate());
    assert_eq!(jobs(&db), 1);
}

#[test]
fn the_payload_limit_is_configurable() {
    let db = TestDb::new();
    let q = db.open_with(QueueOptions::default().with_max_payload_bytes(100));
    let exactly = "y".repeat(98); // 100 bytes with the quotes
    q.enqueue(NewJob::new("k", "at-limit", &exactly)).unwrap();
    refused(&q, &db, NewJob::new("k", "over", &"y".repeat(99)), "100");
    assert_eq!(jobs(&db), 1);
}

proptest! {
    #![proptest_config(crate::support::proptest_config(64))]

    /// Arbitrary strings never panic; what is refused writes nothing, what is
    /// accepted is stored as given.
    #[test]
    fn arbitrary_input_never_panics_and_refusals_write_nothing(
        kind in "\\PC{0,12}|[ \\t\\n]{0,3}",
        key in "\\PC{0,12}|[ \\t\\n]{0,3}|\\x00",
        payload in "\\PC{0,24}|\\{\"[a-z]{0,4}\": ?[0-9]{0,3}\\}|\\[[0-9, ]{0,8}\\]",
    ) {
        thread_local! {
            static DB: (TestDb, Queue) = {
                let db = TestDb::new();
                let q = db.open();
                (db, q)
            };
        }
        DB.with(|(db, q)| {
            let before = jobs(db);
            let existed = q.job_by_key(&key).ok().flatten();
            match q.enqueue(NewJob::from_json(kind.clone(), key.clone(), payload.clone())) {
                Ok(Enqueued::New(id)) => {
                    let j = q.job(id).unwrap().unwrap();
                    prop_assert_eq!(&j.kind, &kind);
                    prop_assert_eq!(&j.idempotency_key, &key);
                    prop_assert_eq!(jobs(db), before + 1);
                }
                Ok(Enqueued::Duplicate(id)) => {
                    prop_assert_eq!(existed.map(|j| j.id), Some(id));
                    prop_assert_eq!(jobs(db), before);
                }
                Err(e) => {
                    prop_assert!(e.is_invalid_input(), "{:?}", e);
                    prop_assert_eq!(jobs(db), before);
                    if let Some(j) = existed {
                        let now = q.job(j.id).unwrap().unwrap();
                        prop_assert_eq!(now.deliveries, j.deliveries);
                    }
                }
            }
            Ok(())
        })?;
    }
}
