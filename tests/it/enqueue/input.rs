//! Bad input: refused with an error naming what is wrong and nothing
//! written, the payload limit configurable, and arbitrary strings never
//! panic.

use std::collections::HashMap;

use litejob::admin::AnyQueue;
use litejob::{Enqueued, Error, NewJob, QueueOptions};
use proptest::prelude::*;
use serde_json::json;

use super::jobs;
use crate::backends::TestQueue;
use crate::both;

/// Asserts that `job` is refused as bad input naming `needle`, with nothing written.
fn refused(queue: &AnyQueue, q: &TestQueue, job: NewJob, needle: &str) {
    let before = jobs(q);
    let err = queue.enqueue(job).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(
        err.to_string().contains(needle),
        "{err} does not mention {needle:?}"
    );
    assert_eq!(jobs(q), before, "something was written for a refused job");
}

both! {
    /// Empty or blank kinds, keys and queues, payloads that are not one
    /// JSON value, an impossible retry count and a payload over the default
    /// 1 MiB limit: each refused, naming what is wrong.
    fn bad_input_is_refused_and_nothing_is_written(q) {
        let queue = q.open();
        refused(&queue, q, NewJob::new("", "k1", &json!({})), "kind");
        refused(&queue, q, NewJob::new("  \t", "k1", &json!({})), "kind");
        refused(&queue, q, NewJob::new("k", "", &json!({})), "key");
        refused(&queue, q, NewJob::new("k", " \n", &json!({})), "key");
        refused(
            &queue,
            q,
            NewJob::new("k", "k1", &json!({})).with_queue(""),
            "queue",
        );
        refused(&queue, q, NewJob::from_json("k", "k1", "{\"a\":"), "JSON");
        refused(&queue, q, NewJob::from_json("k", "k1", ""), "JSON");
        refused(&queue, q, NewJob::from_json("k", "k1", "{} {}"), "JSON");
        // A payload serde cannot turn into JSON (map keys must be strings).
        let mut m: HashMap<(i32, i32), i32> = HashMap::new();
        m.insert((1, 2), 3);
        refused(&queue, q, NewJob::new("k", "k1", &m), "JSON");
        refused(
            &queue,
            q,
            NewJob::new("k", "k1", &json!({})).with_max_retries(u32::MAX),
            "max_retries",
        );
        // Over the default 1 MiB limit.
        let big = "x".repeat(1024 * 1024);
        refused(&queue, q, NewJob::new("k", "k1", &big), "limit");
        // Just under it is fine.
        let ok = "x".repeat(1024 * 1024 - 2);
        assert!(!queue
            .enqueue(NewJob::new("k", "fits", &ok))
            .unwrap()
            .is_duplicate());
        assert_eq!(jobs(q), 1);
    }
}

both! {
    /// A payload of exactly the limit fits; one byte more is refused,
    /// naming the limit.
    fn the_payload_limit_is_configurable(q) {
        let queue = q.open_with(QueueOptions::default().with_max_payload_bytes(100));
        let exactly = "y".repeat(98); // 100 bytes with the quotes
        queue.enqueue(NewJob::new("k", "at-limit", &exactly)).unwrap();
        refused(&queue, q, NewJob::new("k", "over", &"y".repeat(99)), "100");
        assert_eq!(jobs(q), 1);
    }
}

both! {
    /// Arbitrary strings never panic; what is refused writes nothing, what
    /// is accepted is stored as given. The cases share one queue.
    fn arbitrary_input_never_panics_and_refusals_write_nothing(q) {
        let queue = q.open();
        let config = proptest::test_runner::Config {
            source_file: Some(file!()),
            ..crate::support::proptest_config(64)
        };
        let strings = (
            "\\PC{0,12}|[ \\t\\n]{0,3}",
            "\\PC{0,12}|[ \\t\\n]{0,3}|\\x00",
            "\\PC{0,24}|\\{\"[a-z]{0,4}\": ?[0-9]{0,3}\\}|\\[[0-9, ]{0,8}\\]",
        );
        let checked = proptest::test_runner::TestRunner::new(config).run(&strings, |(kind, key, payload)| {
            let before = jobs(q);
            let existed = queue.job_by_key(&key).ok().flatten();
            match queue.enqueue(NewJob::from_json(kind.clone(), key.clone(), payload)) {
                Ok(Enqueued::New(id)) => {
                    let j = queue.job(id).unwrap().unwrap();
                    prop_assert_eq!(&j.kind, &kind);
                    prop_assert_eq!(&j.idempotency_key, &key);
                    prop_assert_eq!(jobs(q), before + 1);
                }
                Ok(Enqueued::Duplicate(id)) => {
                    prop_assert_eq!(existed.map(|j| j.id), Some(id));
                    prop_assert_eq!(jobs(q), before);
                }
                Err(e) => {
                    prop_assert!(e.is_invalid_input(), "{:?}", e);
                    prop_assert_eq!(jobs(q), before);
                    if let Some(j) = existed {
                        let now = queue.job(j.id).unwrap().unwrap();
                        prop_assert_eq!(now.deliveries, j.deliveries);
                    }
                }
            }
            Ok(())
        });
        if let Err(e) = checked {
            panic!("{e}");
        }
    }
}
