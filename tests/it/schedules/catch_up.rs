//! Slots missed while no process ran, on a real file: a runtime declares a
//! schedule every minute and stops; its row is moved back ten minutes (as if
//! it had stopped then); the next start fires what its policy says, and the
//! jobs exist when `start()` returns.

use std::time::Duration;

use litejob::{CatchUp, Schedule};
use serde_json::json;

use crate::support::{now_ms, TestDb};

use super::{slots_of, stopped_earlier, ticking};

/// Declares `minutely` with `policy`, stops, moves its row back ten minutes
/// and starts again; returns the slots fired and the minute of the second
/// start, and when it began. Tried again when a minute turned during it.
fn restart_ten_minutes_later(policy: CatchUp) -> (Vec<i64>, i64, i64) {
    for _ in 0..3 {
        let db = TestDb::new();
        let q = db.open();
        let decl = Schedule::new("minutely", "* * * * *", "tick", &json!({})).with_catch_up(policy);
        let mut rt = ticking(&q).schedule_with(decl.clone()).start().unwrap();
        rt.stop();
        assert!(
            slots_of(&q, "minutely").is_empty(),
            "a new schedule missed nothing"
        );
        stopped_earlier(&q, "minutely", 10 * 60_000);
        let t0 = now_ms();
        let mut rt = ticking(&q).schedule_with(decl).start().unwrap();
        let fired = slots_of(&q, "minutely");
        rt.stop();
        let t1 = now_ms();
        let minute = t0.div_euclid(60_000) * 60_000;
        if t1.div_euclid(60_000) * 60_000 == minute {
            return (fired, minute, t0);
        }
    }
    panic!("a minute turned during every try");
}

it! {
    fn a_restart_fires_only_the_latest_missed_slot_by_default() {
        let (fired, minute, _) = restart_ten_minutes_later(CatchUp::default());
        assert_eq!(fired, vec![minute]);
    }
}

it! {
    fn a_restart_with_a_window_fires_every_missed_slot_inside_it() {
        let (fired, minute, t0) = restart_ten_minutes_later(CatchUp::Window(Duration::from_secs(300)));
        // Five minutes back from a time inside `minute`: the four minutes
        // before it too (and a fifth if the start fell on the minute itself).
        let back = |n: i64| {
            (0..=n)
                .rev()
                .map(|i| minute - i * 60_000)
                .collect::<Vec<i64>>()
        };
        assert!(
            fired == back(4) || (t0 == minute && fired == back(5)),
            "{fired:?} for a start at {t0}"
        );
    }
}

it! {
    fn a_restart_with_catch_up_none_fires_nothing_missed() {
        let (fired, _, _) = restart_ten_minutes_later(CatchUp::None);
        assert!(fired.is_empty(), "{fired:?}");
    }
}
