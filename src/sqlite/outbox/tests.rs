//! The outbox on a real file, the clock a parameter: adding, claiming,
//! acknowledging, retrying and reaping rows.

//! An effect's lease, its fencing, reaping and retry times with the
//! clock as a parameter: every `now` is a number the test picks.

use super::*;
use crate::core::job::{Enqueued, NewJob};

/// Reads one row.
fn get(conn: &Connection, id: i64) -> Result<Option<OutboxRow>> {
    let sql = format!("SELECT {COLUMNS} FROM outbox WHERE id = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([id], from_row)
        .optional()?)
}

const T0: Millis = 1_000_000;
const LEASE: Millis = 30_000;
const KINDS: &str = r#"["mail"]"#;

/// A fresh migrated file holding one job and its outbox row `mail:1`
/// (kind `mail`, two attempts) written at T0.
fn fresh() -> (tempfile::TempDir, Connection, i64) {
    let (dir, conn) = crate::sql_check::fresh_file();
    let job = crate::core::validate::into_valid(NewJob::new("k", "evt", &0), T0, 2);
    let Enqueued::New(job_id) = crate::sqlite::enqueue::insert(&conn, &job, T0).unwrap() else {
        panic!("not new")
    };
    let (id, new) = add(&conn, job_id, "mail", "mail:1", "{}", 2, T0).unwrap();
    assert!(new);
    (dir, conn, id)
}

fn claim(conn: &Connection, now: Millis) -> Option<ClaimedEffect> {
    super::claim(conn, KINDS, "1/test", "1/effects", now + LEASE, now).unwrap()
}

/// `(state, attempts, next_attempt_at, lease_expires_at)`.
fn row(conn: &Connection, id: i64) -> (String, i64, i64, Option<i64>) {
    conn.query_row(
        "SELECT state, attempts, next_attempt_at, lease_expires_at FROM outbox WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
    .unwrap()
}

fn outcomes(conn: &Connection, id: i64) -> Vec<String> {
    let mut st = conn
        .prepare("SELECT outcome FROM attempts WHERE outbox_id = ?1 ORDER BY id")
        .unwrap();
    let rows = st.query_map([id], |r| r.get(0)).unwrap();
    rows.collect::<rusqlite::Result<_>>().unwrap()
}

#[test]
fn a_claim_takes_a_due_row_of_its_kinds_and_counts_the_attempt_first() {
    let (_dir, conn, id) = fresh();
    assert!(
        claim(&conn, T0 - 1).is_none(),
        "not due before it was written"
    );
    assert!(
        super::claim(&conn, r#"["sms"]"#, "1/test", "w", T0 + LEASE, T0)
            .unwrap()
            .is_none()
    );
    let c = claim(&conn, T0).unwrap();
    assert_eq!(c.row.id, id);
    assert_eq!(c.row.attempts, 1);
    assert_eq!(row(&conn, id), ("sending".into(), 1, T0, Some(T0 + LEASE)));
    assert_eq!(outcomes(&conn, id), ["running"]);
    assert!(claim(&conn, T0).is_none(), "one sender at a time");
}

#[test]
fn an_expired_lease_is_abandoned_and_counted_then_dead_when_out_of_attempts() {
    let (_dir, conn, id) = fresh();
    claim(&conn, T0).unwrap();
    let ids = format!("[{id}]");
    assert_eq!(
        renew_leases(&conn, "1/test", &ids, T0 + 2 * LEASE).unwrap(),
        1
    );
    assert_eq!(
        renew_leases(&conn, "2/other", &ids, T0 + 9 * LEASE).unwrap(),
        0
    );
    let expiry = T0 + 2 * LEASE;
    assert_eq!(row(&conn, id).3, Some(expiry));
    assert_eq!(reap(&conn, expiry).unwrap(), 0, "valid at its expiry");
    assert_eq!(reap(&conn, expiry + 1).unwrap(), 1);
    // The effect may have reached the world: the attempt counts.
    assert_eq!(row(&conn, id), ("pending".into(), 1, expiry + 1, None));
    assert_eq!(outcomes(&conn, id), ["abandoned"]);
    let now = expiry + 1;
    claim(&conn, now).unwrap();
    assert_eq!(reap(&conn, now + LEASE + 1).unwrap(), 1);
    assert_eq!(row(&conn, id).0, "dead");
    assert_eq!(outcomes(&conn, id), ["abandoned", "abandoned"]);
    assert!(claim(&conn, now + 10 * LEASE).is_none());
}

#[test]
fn an_ack_is_fenced_on_its_attempt_and_a_failure_of_the_last_attempt_is_dead() {
    let (_dir, conn, id) = fresh();
    let first = claim(&conn, T0).unwrap();
    reap(&conn, T0 + LEASE + 1).unwrap();
    // The reaped sender acknowledges late: nothing changes.
    assert_eq!(
        ack(
            &conn,
            id,
            first.attempt_id,
            &EffectResult::Sent,
            T0 + LEASE + 2
        )
        .unwrap(),
        None
    );
    assert_eq!(row(&conn, id).0, "pending");
    // A second sender fails its last attempt.
    let now = T0 + LEASE + 3;
    let second = claim(&conn, now).unwrap();
    let failed = EffectResult::Failed {
        error: "smtp 451".into(),
        panicked: false,
        retry_at: now + 5_000,
    };
    let state = ack(&conn, id, second.attempt_id, &failed, now).unwrap();
    // Its second attempt of two: dead, not retried.
    assert_eq!(state, Some(OutboxState::Dead));
    assert_eq!(outcomes(&conn, id), ["abandoned", "failed"]);
}

#[test]
fn a_failed_attempt_is_retried_at_its_retry_time_and_a_sent_row_is_done() {
    let (_dir, conn, id) = fresh();
    let first = claim(&conn, T0).unwrap();
    let failed = EffectResult::Failed {
        error: "smtp 451".into(),
        panicked: true,
        retry_at: T0 + 5_000,
    };
    assert_eq!(
        ack(&conn, id, first.attempt_id, &failed, T0 + 10).unwrap(),
        Some(OutboxState::Pending)
    );
    assert_eq!(row(&conn, id), ("pending".into(), 1, T0 + 5_000, None));
    assert!(claim(&conn, T0 + 4_999).is_none());
    let second = claim(&conn, T0 + 5_000).unwrap();
    assert_eq!(
        ack(
            &conn,
            id,
            second.attempt_id,
            &EffectResult::Sent,
            T0 + 5_001
        )
        .unwrap(),
        Some(OutboxState::Sent)
    );
    assert_eq!(get(&conn, id).unwrap().unwrap().sent_at, Some(T0 + 5_001));
    assert_eq!(outcomes(&conn, id), ["panicked", "succeeded"]);
    assert!(claim(&conn, T0 + 10 * LEASE).is_none());
}

#[test]
fn a_release_at_shutdown_gives_the_row_back_with_its_attempt_counted() {
    let (_dir, conn, id) = fresh();
    let c = claim(&conn, T0).unwrap();
    assert!(release(&conn, id, c.attempt_id, T0 + 7).unwrap());
    assert!(!release(&conn, id, c.attempt_id, T0 + 8).unwrap());
    assert_eq!(row(&conn, id), ("pending".into(), 1, T0 + 7, None));
    assert_eq!(outcomes(&conn, id), ["released"]);
}
