//! Schedules on both backends: two runtimes (two processes' worth: each
//! with its own queue handle) declaring the same schedule create each
//! slot's job once, with no gap; `litejob schedules` lists it.

use crate::backends::Runtimes;
use std::time::Duration;

use serde_json::Value;

use super::{app_handler, done};
use crate::both;
use crate::support::{bin, wait_until, LONG};

both! {
    /// Every second's slot becomes one job, whichever runtime fired it.
    fn two_runtimes_declaring_one_schedule_fire_each_slot_once(q) {
        q.create_app_table();
        let (a, b) = (q.open(), q.open());
        let start = |queue: &litejob::admin::AnyQueue| {
            app_handler(q.engine, queue.runtime(), "tick", done)
                .schedule("every-second", "* * * * * *", "tick", &serde_json::json!({}))
                .start()
                .unwrap()
        };
        let (mut ra, mut rb) = (start(&a), start(&b));
        wait_until("four slots", LONG, || {
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'") >= 4
        });
        ra.stop();
        rb.stop();
        let keys = q.strings(
            "SELECT idempotency_key FROM jobs WHERE idempotency_key LIKE 'schedule:every-second:%' \
             ORDER BY idempotency_key",
        );
        let seconds: Vec<i64> = keys
            .iter()
            .map(|k| {
                let t = k.rsplit(':').next().unwrap().trim_end_matches('Z');
                t.parse::<i64>().unwrap()
            })
            .collect();
        // Consecutive seconds: no slot missed while the runtimes ran.
        for w in seconds.windows(2) {
            assert!(w[1] == w[0] + 1 || (w[0] == 59 && w[1] == 0), "a gap: {keys:?}");
        }
        assert_eq!(
            q.count("SELECT count(*) FROM app_rows"),
            q.count("SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
            "each slot's work committed once"
        );
        let out = std::process::Command::new(bin())
            .args(["--db", &q.location, "schedules", "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let s = &v["schedules"][0];
        assert_eq!((s["name"].as_str(), s["cron"].as_str(), s["tz"].as_str()), (Some("every-second"), Some("* * * * * *"), Some("UTC")));
        assert!(s["last_slot_at"].as_i64().is_some() && s["next_slot_at"].as_i64().is_some(), "{v}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
