//! Firing costs nothing while no slot is due: a runtime whose schedule's
//! next slot is far away commits nothing at all, however often its
//! scheduler wakes (at least once a second).

use std::time::Duration;

use serde_json::json;

use crate::support::TestDb;

use super::ticking;

/// Commits by any other connection since the last call (`PRAGMA
/// data_version` moves when another connection commits).
fn data_version(c: &rusqlite::Connection) -> i64 {
    c.query_row("PRAGMA data_version", [], |r| r.get(0))
        .unwrap()
}

it! {
    fn a_scheduler_with_no_slot_due_writes_nothing() {
        let db = TestDb::new();
        let q = db.open();
        // Midnight on January 1st: months away, or a moment away on New Year's
        // Eve, which this test then leaves alone.
        let mut rt = ticking(&q)
            .schedule("new-year", "0 0 1 1 *", "tick", &json!({}))
            .start()
            .unwrap();
        let next = q.admin().schedules().unwrap()[0].next_slot_at.unwrap();
        let watcher = db.sql();
        let before = data_version(&watcher);
        std::thread::sleep(Duration::from_millis(2500));
        let after = data_version(&watcher);
        let end = crate::support::now_ms();
        rt.stop();
        if next > end {
            assert_eq!(before, after, "the runtime committed while no slot was due");
        }
        // The watcher does see commits: a slot every second moves it.
        let mut rt = ticking(&q)
            .schedule("beat", "* * * * * *", "tick", &json!({}))
            .start()
            .unwrap();
        let before = data_version(&watcher);
        std::thread::sleep(Duration::from_millis(2500));
        let after = data_version(&watcher);
        rt.stop();
        assert_ne!(
            before, after,
            "no commit seen from a schedule firing every second"
        );
    }
}
