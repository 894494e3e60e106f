//! What a declaration is: refused whole at `start()` when anything is wrong
//! (with nothing written), its options carried by every slot's job, and a
//! new declaration of a name replacing the row (the last start wins).

use std::time::Duration;

use litejob::{CatchUp, Error, JobState, QueueOptions, Schedule};
use serde_json::json;

use crate::support::{wait_state, wait_until, TestDb, LONG};

use super::{slots_of, ticking};

/// Starting with `bad` (beside a good schedule) fails with InvalidInput
/// saying `says`, and writes nothing.
fn refused(db: &TestDb, rt: litejob::RuntimeBuilder, says: &str) {
    let e = rt
        .schedule("good", "* * * * *", "tick", &json!({}))
        .start()
        .err()
        .unwrap_or_else(|| panic!("started although {says}"));
    assert!(matches!(e, Error::InvalidInput(_)), "{says}: {e:?}");
    assert!(e.to_string().contains(says), "{says}: {e}");
    assert_eq!(db.count("SELECT count(*) FROM schedules"), 0, "{says}");
    assert_eq!(db.count("SELECT count(*) FROM jobs"), 0, "{says}");
}

it! {
    fn bad_declarations_are_refused_at_start_and_nothing_is_written() {
        let db = TestDb::new();
        let q = db.open_with(QueueOptions::default().with_max_payload_bytes(64));
        let s = |cron: &str| Schedule::new("s", cron, "tick", &json!({}));
        for (cron, says) in [
            ("61 * * * *", "\"61 * * * *\""),
            ("* * *", "cron expression"),
            ("* * * * * * *", "cron expression"),
            ("", "cron expression is empty"),
            ("@reboot", "cron expression"),
            ("0 0 30 2 *", "no slot to come"),
        ] {
            refused(&db, ticking(&q).schedule_with(s(cron)), says);
        }
        refused(
            &db,
            ticking(&q).schedule_with(s("* * * * *").with_tz("Europe/Atlantis")),
            "unknown time zone \"Europe/Atlantis\"",
        );
        refused(
            &db,
            ticking(&q).schedule("", "* * * * *", "tick", &1),
            "name must not be empty",
        );
        refused(
            &db,
            ticking(&q).schedule("s", "* * * * *", "unhandled", &1),
            "no handler for its kind \"unhandled\"",
        );
        refused(
            &db,
            ticking(&q).schedule("good", "0 * * * *", "tick", &1),
            "declared twice",
        );
        refused(
            &db,
            ticking(&q).schedule("s", "* * * * *", "tick", &"x".repeat(100)),
            "over the limit",
        );
        refused(
            &db,
            ticking(&q)
                .queues(["mail"])
                .schedule("s", "* * * * *", "tick", &1),
            "does not claim from",
        );
    }
}

it! {
    fn each_slot_is_a_job_with_the_schedules_options_run_like_any_other() {
        let db = TestDb::new();
        let q = db.open();
        let beat = Schedule::new("beat", "* * * * * *", "tick", &json!({"n": 7}))
            .with_tz("America/New_York")
            .with_queue("cron")
            .with_priority(3)
            .with_max_retries(4);
        let mut rt = ticking(&q).schedule_with(beat).start().unwrap();
        wait_until("a slot fired", LONG, || !slots_of(&q, "beat").is_empty());
        rt.stop();
        let slot = slots_of(&q, "beat")[0];
        let jobs = q.jobs(&litejob::JobFilter::default()).unwrap();
        let job = jobs
            .iter()
            .find(|j| j.idempotency_key.starts_with("schedule:beat:"))
            .unwrap();
        let key = job.idempotency_key.clone();
        assert_eq!(slot % 1000, 0, "a slot is a whole second");
        assert_eq!(
            (
                job.kind.as_str(),
                job.queue.as_str(),
                job.priority,
                job.max_attempts
            ),
            ("tick", "cron", 3, 5)
        );
        assert_eq!(job.payload, r#"{"n":7}"#);
        // It runs through the normal path: a ledger row and an attempt.
        let mut rt = ticking(&q).queues(["cron"]).start().unwrap();
        wait_state(&q, job.id, JobState::Succeeded);
        rt.stop();
        assert_eq!(q.attempts(job.id).unwrap().len(), 1);
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM processed_jobs WHERE key = '{key}'"
            )),
            1
        );
    }
}

it! {
    fn a_new_declaration_of_a_name_replaces_its_row_and_keeps_its_slots() {
        let db = TestDb::new();
        let q = db.open();
        let first = Schedule::new("digest", "* * * * * *", "tick", &json!({"v": 1}));
        let mut rt = ticking(&q).schedule_with(first.clone()).start().unwrap();
        wait_until("a slot fired", LONG, || !slots_of(&q, "digest").is_empty());
        rt.stop();
        let before = q.admin().schedules().unwrap().remove(0);
        assert_eq!(
            (before.cron.as_str(), before.kind.as_str()),
            ("* * * * * *", "tick")
        );
        assert!(before.last_slot_at.is_some());

        let second = Schedule::new("digest", "0 6 * * *", "digest.v2", &json!({"v": 2}))
            .with_tz("Europe/Berlin")
            .with_catch_up(CatchUp::Window(Duration::from_secs(3600)));
        let mut rt = ticking(&q)
            .handler("digest.v2", |_tx, _p: serde_json::Value| {
                Ok(litejob::Outcome::Done)
            })
            .schedule_with(second)
            .start()
            .unwrap();
        rt.stop();
        let rows = q.admin().schedules().unwrap();
        assert_eq!(rows.len(), 1);
        let after = &rows[0];
        assert_eq!(
            (after.cron.as_str(), after.tz.as_str(), after.kind.as_str()),
            ("0 6 * * *", "Europe/Berlin", "digest.v2")
        );
        assert_eq!(after.payload, r#"{"v":2}"#);
        assert_eq!(
            (after.catch_up.as_str(), after.catch_up_window_ms),
            ("window", Some(3_600_000))
        );
        assert!(after.updated_at >= before.updated_at);
        assert_eq!(
            after.last_slot_at, before.last_slot_at,
            "the slots fired are kept"
        );
        let next = after.next_slot_at.unwrap();
        assert_eq!(next % 3_600_000, 0, "06:00 in Berlin is a whole UTC hour");

        // The first declaration started again: the last start wins again.
        let mut rt = ticking(&q).schedule_with(first).start().unwrap();
        rt.stop();
        let again = q.admin().schedules().unwrap().remove(0);
        assert_eq!(
            (again.cron.as_str(), again.kind.as_str(), again.tz.as_str()),
            ("* * * * * *", "tick", "UTC")
        );
    }
}
