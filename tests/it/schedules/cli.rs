//! The command on schedules: `litejob schedules` lists them (text and the
//! `--json` contract), `explain` answers for a slot's key like any key, and
//! `stats` counts them.

use std::time::Duration;

use litejob::{CatchUp, Schedule};
use serde_json::{json, Value};

use crate::support::{litejob_ok, now_ms, TestDb};

use super::{stopped_earlier, ticking, wait_all_succeeded};

fn json_of(db: &TestDb, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = litejob_ok(&db.path, &all, 0);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}):\n{out}"))
}

it! {
    fn schedules_lists_every_schedule_with_its_last_and_next_slot() {
        let db = TestDb::new();
        let q = db.open();
        assert_eq!(
            litejob_ok(&db.path, &["schedules"], 0).trim(),
            "no schedules"
        );
        assert_eq!(json_of(&db, &["schedules"]), json!({"schedules": []}));

        let t0 = now_ms();
        let mut rt = ticking(&q)
            .schedule("nightly", "0 3 * * *", "tick", &json!({"full": true}))
            .schedule_with(
                Schedule::new("hourly", "@hourly", "tick", &1)
                    .with_tz("Europe/Berlin")
                    .with_queue("reports")
                    .with_max_retries(2)
                    .with_catch_up(CatchUp::Window(Duration::from_secs(7200))),
            )
            .start()
            .unwrap();
        rt.stop();

        let v = json_of(&db, &["schedules"]);
        let list = v["schedules"].as_array().unwrap();
        assert_eq!(list.len(), 2, "{v}");
        let (hourly, nightly) = (&list[0], &list[1]);
        assert_eq!(nightly["name"], "nightly");
        assert_eq!(nightly["cron"], "0 3 * * *");
        assert_eq!(nightly["tz"], "UTC");
        assert_eq!(nightly["kind"], "tick");
        assert_eq!(nightly["last_slot_at"], Value::Null, "none fired yet");
        let next = nightly["next_slot_at"].as_i64().unwrap();
        assert!(next > t0 && next <= t0 + 86_400_000, "{next}");
        assert_eq!(next % 86_400_000, 3 * 3_600_000, "03:00 UTC");
        assert_eq!(nightly["payload"], r#"{"full":true}"#);
        assert_eq!(nightly["catch_up"], "latest");
        assert_eq!(nightly["catch_up_window_ms"], Value::Null);
        assert_eq!(nightly["max_retries"], Value::Null);
        assert_eq!(hourly["tz"], "Europe/Berlin");
        assert_eq!(hourly["queue"], "reports");
        assert_eq!(hourly["max_retries"], 2);
        assert_eq!(hourly["catch_up"], "window");
        assert_eq!(hourly["catch_up_window_ms"], 7_200_000);
        assert_eq!(hourly["next_slot_at"].as_i64().unwrap() % 3_600_000, 0);
        assert!(hourly["updated_at"].as_i64().unwrap() >= t0);

        let text = litejob_ok(&db.path, &["schedules"], 0);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("NAME") && lines[0].contains("NEXT SLOT"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("hourly") && lines[1].contains("Europe/Berlin"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("nightly") && lines[2].contains("0 3 * * *"),
            "{text}"
        );

        let stats = json_of(&db, &["stats"]);
        assert_eq!(stats["schedules"], 2);
        assert!(litejob_ok(&db.path, &["stats"], 0).contains("schedules  2"));
    }
}

it! {
    fn explain_answers_for_a_slots_key() {
        let key = "schedule:digest:2026-12-01T06:00:00Z";
        let slot = 1_796_104_800_000; // that slot
        assert!(now_ms() > slot, "the machine's clock is before the slot");
        let db = TestDb::new();
        let q = db.open();
        // 06:00 UTC each December 1st, declared and stopped; then, as if it
        // had stopped before that slot, started again with a window that
        // reaches back to it.
        let digest = Schedule::new("digest", "0 6 1 12 *", "tick", &json!({}))
            .with_catch_up(CatchUp::Window(Duration::from_secs(100 * 366 * 86_400)));
        let mut rt = ticking(&q).schedule_with(digest.clone()).start().unwrap();
        rt.stop();
        let next = q.admin().schedules().unwrap()[0].next_slot_at.unwrap();
        stopped_earlier(&q, "digest", next - slot);
        let mut rt = ticking(&q).schedule_with(digest).start().unwrap();
        wait_all_succeeded(&q);
        rt.stop();

        let text = litejob_ok(&db.path, &["explain", key], 0);
        assert_eq!(
            text.lines().next(),
            Some("1 event, delivered once, run once"),
            "{text}"
        );
        let v = json_of(&db, &["explain", key]);
        assert_eq!(v["key"], key);
        assert_eq!(v["job"]["kind"], "tick");
        assert_eq!(v["job"]["state"], "succeeded");
        assert_eq!(v["ledger"]["key"], key);
        assert_eq!(v["attempts"][0]["outcome"], "succeeded");
    }
}
