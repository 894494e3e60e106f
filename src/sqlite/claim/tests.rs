//! The tests of `claim`, on a real file with the clock as a parameter.

//! Claims, starts, lease expiry and reaping with the clock as a
//! parameter: every `now` is a number the test picks, nothing sleeps.

use super::*;
use crate::core::job::{Enqueued, NewJob};
use crate::core::lifecycle::poison_message;
use crate::sql_check::fresh_file as fresh;
use crate::sqlite::leases::{reap, release, renew_leases};

mod controls;

/// A moment in the file's unit; the tests move it by hand.
const T0: Millis = 1_000_000;
const LEASE: Millis = 30_000;
const OWNER: &str = "1/test";

/// Enqueues job `key` of kind `k`, due at `run_at`, with two attempts.
fn enqueue(conn: &Connection, key: &str, run_at: Millis) -> i64 {
    let job = crate::core::validate::into_valid(NewJob::new("k", key, &0), run_at, 2);
    match crate::sqlite::enqueue::insert(conn, &job, T0).unwrap() {
        Enqueued::New(id) => id,
        other => panic!("{key}: {other:?}"),
    }
}

/// Claims everything due at `now` for [`OWNER`], leased until now + LEASE.
fn claim(conn: &Connection, now: Millis) -> Vec<i64> {
    let batch = claim_batch::<()>(
        conn,
        &ClaimAsk {
            kinds: &["k".to_string()],
            queues_json: None,
            limit: 10,
            for_workers: usize::MAX,
            owner: OWNER,
            lease_until: now + LEASE,
            now,
        },
        |_, _, _| Take::Claim,
    )
    .unwrap();
    batch.taken.iter().map(|(c, _)| c.id).collect()
}

/// `(state, attempts, abandoned, lease_expires_at, current_attempt)`.
fn job(conn: &Connection, id: i64) -> (String, i64, i64, Option<i64>, Option<i64>) {
    conn.query_row(
        "SELECT state, attempts, abandoned, lease_expires_at, current_attempt \
         FROM jobs WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .unwrap()
}

fn outcomes(conn: &Connection, id: i64) -> Vec<String> {
    let sql = "SELECT outcome FROM attempts WHERE job_id = ?1 ORDER BY id";
    let mut st = conn.prepare(sql).unwrap();
    let rows = st.query_map([id], |r| r.get(0)).unwrap();
    rows.collect::<rusqlite::Result<_>>().unwrap()
}

#[test]
fn a_claim_takes_due_jobs_only_and_leases_them_until_now_plus_the_lease() {
    let (_dir, conn) = fresh();
    let due = enqueue(&conn, "due", T0);
    let later = enqueue(&conn, "later", T0 + 5_000);
    assert_eq!(claim(&conn, T0), [due]);
    assert_eq!(
        job(&conn, due),
        ("running".into(), 0, 0, Some(T0 + LEASE), None)
    );
    assert_eq!(job(&conn, later).0, "queued");
    // One millisecond early it still waits; at its run_at it is due.
    assert!(claim(&conn, T0 + 4_999).is_empty());
    assert_eq!(claim(&conn, T0 + 5_000), [later]);
}

#[test]
fn a_claim_charges_nothing_until_the_run_starts() {
    let (_dir, conn) = fresh();
    let id = enqueue(&conn, "a", T0);
    claim(&conn, T0);
    assert_eq!(job(&conn, id).1, 0);
    assert!(outcomes(&conn, id).is_empty());
    let st = start(&conn, id, OWNER, "w", false, T0 + 1)
        .unwrap()
        .unwrap();
    assert_eq!(st.attempt, 1);
    let (state, attempts, _, lease, current) = job(&conn, id);
    assert_eq!((state.as_str(), attempts), ("running", 1));
    assert_eq!(current, Some(st.attempt_id));
    // A start keeps the claim's lease: renewing it is the heartbeat's.
    assert_eq!(lease, Some(T0 + LEASE));
    assert_eq!(outcomes(&conn, id), ["running"]);
    // Another owner cannot start it, nor start it twice.
    assert!(start(&conn, id, "2/other", "w", false, T0 + 2)
        .unwrap()
        .is_none());
    assert!(start(&conn, id, OWNER, "w", false, T0 + 2)
        .unwrap()
        .is_none());
}

#[test]
fn a_lease_holds_through_its_last_millisecond_and_is_reaped_after_it() {
    let (_dir, conn) = fresh();
    let id = enqueue(&conn, "a", T0);
    claim(&conn, T0);
    start(&conn, id, OWNER, "w", false, T0).unwrap().unwrap();
    // The lease is `lease_expires_at >= now`: valid at T0 + LEASE.
    assert_eq!(reap(&conn, T0 + LEASE - 1, 3).unwrap(), 0);
    assert_eq!(reap(&conn, T0 + LEASE, 3).unwrap(), 0);
    assert_eq!(job(&conn, id).0, "running");
    assert_eq!(reap(&conn, T0 + LEASE + 1, 3).unwrap(), 1);
    // Abandoned, back to queued, due at once, not charged.
    assert_eq!(job(&conn, id), ("queued".into(), 0, 1, None, None));
    let (run_at, err): (i64, String) = conn
        .query_row(
            "SELECT run_at, last_error FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(run_at, T0 + LEASE + 1);
    assert!(err.contains("lease expired"), "{err}");
    assert_eq!(outcomes(&conn, id), ["abandoned"]);
    // Reaping again finds nothing.
    assert_eq!(reap(&conn, T0 + 10 * LEASE, 3).unwrap(), 0);
}

#[test]
fn a_heartbeat_moves_the_expiry_and_a_reaped_run_cannot_start() {
    let (_dir, conn) = fresh();
    let (a, b) = (enqueue(&conn, "a", T0), enqueue(&conn, "b", T0));
    claim(&conn, T0);
    let ids = format!("[{a}]");
    assert_eq!(renew_leases(&conn, OWNER, &ids, T0 + 2 * LEASE).unwrap(), 1);
    assert_eq!(
        renew_leases(&conn, "2/other", &ids, T0 + 9 * LEASE).unwrap(),
        0
    );
    assert_eq!(job(&conn, a).3, Some(T0 + 2 * LEASE));
    // Only b's lease ran out. A claimed job never started goes back
    // without an attempt row.
    assert_eq!(reap(&conn, T0 + LEASE + 1, 3).unwrap(), 1);
    assert_eq!(job(&conn, a).0, "running");
    assert_eq!(job(&conn, b), ("queued".into(), 0, 0, None, None));
    assert!(outcomes(&conn, b).is_empty());
    // Its old claim is gone: starting it under that claim finds nothing.
    assert!(start(&conn, b, OWNER, "w", false, T0 + LEASE + 2)
        .unwrap()
        .is_none());
}

#[test]
fn the_max_abandoned_th_abandoned_run_makes_a_poison_pill_dead() {
    let (_dir, conn) = fresh();
    let id = enqueue(&conn, "pill", T0);
    let mut now = T0;
    for n in 1..=3 {
        assert_eq!(claim(&conn, now), [id], "run {n}");
        start(&conn, id, OWNER, "w", false, now).unwrap().unwrap();
        now += LEASE + 1;
        assert_eq!(reap(&conn, now, 3).unwrap(), 1);
        let (state, attempts, abandoned, _, _) = job(&conn, id);
        assert_eq!(abandoned, n);
        // Never charged: a crash is not the job's failure.
        assert_eq!(attempts, 0);
        assert_eq!(state, if n < 3 { "queued" } else { "dead" }, "run {n}");
    }
    let (err, finished): (String, i64) = conn
        .query_row(
            "SELECT last_error, finished_at FROM jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(err, poison_message(3));
    assert_eq!(finished, now);
    assert_eq!(outcomes(&conn, id), ["abandoned"; 3]);
    assert!(claim(&conn, now + 1).is_empty());
}

#[test]
fn a_release_gives_the_job_back_uncharged_and_only_to_its_owner() {
    let (_dir, conn) = fresh();
    let (a, b) = (enqueue(&conn, "a", T0), enqueue(&conn, "b", T0));
    claim(&conn, T0);
    let st = start(&conn, b, OWNER, "w", false, T0).unwrap().unwrap();
    assert!(!release(&conn, a, "2/other", None, "stop", T0).unwrap());
    assert!(release(&conn, a, OWNER, None, "stop", T0).unwrap());
    assert!(release(&conn, b, OWNER, Some(st.attempt_id), "stop", T0).unwrap());
    assert_eq!(job(&conn, a), ("queued".into(), 0, 0, None, None));
    assert_eq!(job(&conn, b), ("queued".into(), 0, 0, None, None));
    assert_eq!(outcomes(&conn, b), ["released"]);
    // A second release of the same run changes nothing.
    assert!(!release(&conn, b, OWNER, Some(st.attempt_id), "stop", T0).unwrap());
}
