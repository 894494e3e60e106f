//! Bad input, property-tested: arbitrary kinds, keys and payload bytes
//! through the library (and the real binary's `enqueue`) never panic and
//! never write anything when refused.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use litejob::{Enqueued, NewJob, Queue};

use crate::support::{self, TestDb};

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(" \t\n".to_string()),
        Just("a\0b".to_string()),
        Just("k".repeat(1025)),
        Just("k".repeat(1024)),
        "[a-z:_0-9]{1,6}",
        any::<String>(),
    ]
}

fn payload() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{}".to_string()),
        Just("null".to_string()),
        Just(String::new()),
        Just("{\"a\":".to_string()),
        Just(format!("\"{}\"", "p".repeat(1024 * 1024))),
        Just(format!("\"{}\"", "p".repeat(1024 * 1024 - 2))),
        Just("[1, 2.5e3, true, {\"k\": \"\\u00e9\"}]".to_string()),
        Just("1e999".to_string()),
        Just("\"\\ud800\"".to_string()),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        any::<String>(),
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z ]{0,10}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ]
}

/// What the documented rules accept.
fn acceptable(kind: &str, key: &str, payload: &str) -> bool {
    let name_ok = |s: &str| !s.trim().is_empty() && s.len() <= 1024 && !s.contains('\0');
    name_ok(kind)
        && name_ok(key)
        && payload.len() <= 1024 * 1024
        && serde_json::from_str::<serde::de::IgnoredAny>(payload).is_ok()
}

fn snapshot(db: &TestDb) -> (i64, i64, i64) {
    let c = db.sql();
    c.query_row(
        "SELECT (SELECT count(*) FROM jobs), (SELECT coalesce(sum(deliveries), 0) FROM jobs), \
                (SELECT count(*) FROM attempts)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        failure_persistence: None,
        ..crate::support::proptest_config(cases)
    })
}

fn check_one(db: &TestDb, q: &Queue, kind: &str, key: &str, payload: &str) {
    let before = snapshot(db);
    let r = q.enqueue(NewJob::from_json(kind, key, payload));
    let after = snapshot(db);
    match r {
        Err(e) => {
            assert!(e.is_invalid_input(), "{kind:?}/{key:?}: {e:?}");
            assert_eq!(before, after, "refused input wrote something: {e}");
            assert!(
                !acceptable(kind, key, payload) || e.to_string().contains("constraint"),
                "valid input refused: {kind:?} {key:?} {payload:?}: {e}"
            );
        }
        Ok(Enqueued::New(id)) => {
            assert!(
                acceptable(kind, key, payload),
                "accepted: {kind:?} {key:?} {payload:?}"
            );
            assert_eq!((after.0, after.1), (before.0 + 1, before.1 + 1));
            let job = q.job(id).unwrap().unwrap();
            assert_eq!(
                (job.kind.as_str(), job.idempotency_key.as_str()),
                (kind, key)
            );
            assert_eq!(job.payload, payload);
        }
        Ok(Enqueued::Duplicate(_)) => {
            assert!(acceptable(kind, key, payload));
            assert_eq!((after.0, after.1), (before.0, before.1 + 1));
        }
    }
}

it! {
    fn arbitrary_input_through_the_library_never_panics_and_refusals_write_nothing() {
        let db = TestDb::new();
        let q = db.open();
        runner(300)
            .run(&(name(), name(), payload()), |(kind, key, payload)| {
                check_one(&db, &q, &kind, &key, &payload);
                Ok(())
            })
            .unwrap();
    }
}

it! {
    fn arbitrary_input_through_the_command_never_panics_and_refusals_write_nothing() {
        let db = TestDb::new();
        drop(db.open());
        // A plain enqueue works, so a refusal below is the input's doing.
        let args = ["enqueue", "k", "--key", "probe", "--payload", "{}"];
        let probe = support::litejob(&db.path, &args);
        assert!(
            String::from_utf8_lossy(&probe.stdout).contains("enqueued"),
            "{}",
            support::show(&args, &probe)
        );
        runner(40)
            .run(&(name(), name(), payload()), |(kind, key, payload)| {
                if [&kind, &key, &payload].iter().any(|s| s.contains('\0')) {
                    // A NUL cannot be passed in argv at all.
                    return Ok(());
                }
                let before = snapshot(&db);
                // A single argv string is limited to 128 KiB: big payloads go
                // through --payload-file.
                let file = db.dir.path().join("payload.json");
                let (flag, value) = if payload.len() > 100_000 {
                    std::fs::write(&file, &payload).unwrap();
                    ("--payload-file", file.display().to_string())
                } else {
                    ("--payload", payload.clone())
                };
                let args = ["enqueue", &kind, "--key", &key, flag, &value];
                let out = support::litejob(&db.path, &args);
                let after = snapshot(&db);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    !stderr.contains("panicked"),
                    "{}",
                    support::show(&args, &out)
                );
                match out.status.code() {
                    Some(0) => assert!(after.1 == before.1 + 1, "{}", support::show(&args, &out)),
                    Some(2) => assert_eq!(before, after, "{}", support::show(&args, &out)),
                    _ => panic!("unexpected status: {}", support::show(&args, &out)),
                }
                Ok(())
            })
            .unwrap();
    }
}
