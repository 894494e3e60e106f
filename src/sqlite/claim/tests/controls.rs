//! Claims under queue controls: a paused queue, a cap across owners and
//! claims ahead, priority inside a capped queue, a rate's window.

use super::*;

/// Enqueues job `key` in `queue` at `priority`, due at T0.
fn enqueue_in(conn: &Connection, queue: &str, key: &str, priority: i64) -> i64 {
    let job = NewJob::new("k", key, &0)
        .with_queue(queue)
        .with_priority(priority);
    let job = crate::core::validate::into_valid(job, T0, 2);
    crate::sqlite::enqueue::insert(conn, &job, T0).unwrap().id()
}

/// Claims up to `limit` at `now` for `owner`, each as `take` says;
/// the ids, and whether a control held jobs back.
fn claim_as(
    conn: &Connection,
    owner: &str,
    limit: usize,
    now: Millis,
    take: fn() -> Take<()>,
) -> (Vec<i64>, bool) {
    let batch = claim_batch::<()>(
        conn,
        &ClaimAsk {
            kinds: &["k".to_string()],
            queues_json: None,
            limit,
            for_workers: usize::MAX,
            owner,
            lease_until: now + LEASE,
            now,
        },
        |_, _, _| take(),
    )
    .unwrap();
    let ids = batch.taken.iter().map(|(c, _)| c.id).collect();
    (ids, batch.held_back)
}

fn set(
    conn: &Connection,
    queue: &str,
    paused: Option<bool>,
    l: crate::core::controls::QueueLimits,
) {
    crate::sqlite::controls::change(conn, queue, paused, &l, T0).unwrap();
}

#[test]
fn a_paused_queue_gives_nothing_and_the_others_go_on() {
    let (_dir, conn) = fresh();
    let held = enqueue_in(&conn, "held", "h", 0);
    let free = enqueue_in(&conn, "free", "f", 5);
    set(
        &conn,
        "held",
        Some(true),
        crate::core::controls::QueueLimits::new(),
    );
    assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [free]);
    set(
        &conn,
        "held",
        Some(false),
        crate::core::controls::QueueLimits::new(),
    );
    assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [held]);
}

#[test]
fn a_cap_counts_claimed_ahead_jobs_across_owners_until_their_lease_expires() {
    let (_dir, conn) = fresh();
    let ids: Vec<i64> = (0..5)
        .map(|i| enqueue_in(&conn, "capped", &format!("c{i}"), 0))
        .collect();
    set(
        &conn,
        "capped",
        None,
        crate::core::controls::QueueLimits::new().concurrency(2),
    );
    // A claim asking for 10 takes the 2 slots, in priority order.
    let (first, held) = claim_as(&conn, OWNER, 10, T0, || Take::Claim);
    assert_eq!(first, ids[..2]);
    assert!(held);
    // Claimed, not started: they hold the slots against another owner.
    assert!(claim_as(&conn, "2/other", 10, T0 + 1, || Take::Claim)
        .0
        .is_empty());
    // A run that ends frees its slot.
    conn.execute(
        "UPDATE jobs SET state = 'succeeded', finished_at = ?2, lease_owner = NULL, \
                  lease_expires_at = NULL WHERE id = ?1",
        rusqlite::params![ids[0], T0 + 2],
    )
    .unwrap();
    assert_eq!(
        claim_as(&conn, "2/other", 10, T0 + 2, || Take::Claim).0,
        [ids[2]]
    );
    // Once a lease has expired its slot counts no more, reaped or not.
    let later = T0 + LEASE + 1;
    let (got, _) = claim_as(&conn, "2/other", 10, later, || Take::Claim);
    assert_eq!(got.len(), 1, "{got:?}");
}

#[test]
fn priority_order_holds_inside_a_capped_queue() {
    let (_dir, conn) = fresh();
    let low = enqueue_in(&conn, "capped", "low", 9);
    let high = enqueue_in(&conn, "capped", "high", 1);
    let mid = enqueue_in(&conn, "capped", "mid", 5);
    set(
        &conn,
        "capped",
        None,
        crate::core::controls::QueueLimits::new().concurrency(1),
    );
    let mut order = Vec::new();
    for n in 0..3 {
        let (got, _) = claim_as(&conn, OWNER, 10, T0 + n, || Take::Claim);
        assert_eq!(got.len(), 1);
        order.push(got[0]);
        conn.execute(
            "UPDATE jobs SET state = 'succeeded', finished_at = 1, lease_owner = NULL, \
                      lease_expires_at = NULL WHERE id = ?1",
            [got[0]],
        )
        .unwrap();
    }
    assert_eq!(order, [high, mid, low]);
}

#[test]
fn a_full_queue_ahead_in_priority_does_not_crowd_out_the_others() {
    let (_dir, conn) = fresh();
    for i in 0..8 {
        enqueue_in(&conn, "capped", &format!("c{i}"), 0);
    }
    let free: Vec<i64> = (0..3)
        .map(|i| enqueue_in(&conn, "free", &format!("f{i}"), 5))
        .collect();
    set(
        &conn,
        "capped",
        None,
        crate::core::controls::QueueLimits::new().concurrency(1),
    );
    // The claim's first look (4 candidates) sees only the capped queue's
    // jobs; it looks again past the full queue.
    let (got, held) = claim_as(&conn, OWNER, 4, T0, || Take::Claim);
    assert_eq!(got.len(), 4);
    assert!(held);
    assert_eq!(got[1..], free[..]);
}

#[test]
fn a_rate_counts_starts_and_claims_to_come_and_frees_them_after_the_window() {
    let (_dir, conn) = fresh();
    let ids: Vec<i64> = (0..8)
        .map(|i| enqueue_in(&conn, "rated", &format!("r{i}"), 0))
        .collect();
    let rate = crate::core::controls::Rate::new(3, std::time::Duration::from_millis(1000)).unwrap();
    set(
        &conn,
        "rated",
        None,
        crate::core::controls::QueueLimits::new().rate(rate),
    );
    let starts = |conn: &Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM queue_starts", [], |r| r.get(0))
            .unwrap()
    };
    // Two started in the claim (recorded), one claimed for a worker.
    let batch = claim_batch::<()>(
        &conn,
        &ClaimAsk {
            kinds: &["k".to_string()],
            queues_json: None,
            limit: 2,
            for_workers: usize::MAX,
            owner: OWNER,
            lease_until: T0 + LEASE,
            now: T0,
        },
        |_, _, _| Take::Start((), "w".into()),
    )
    .unwrap();
    assert_eq!(batch.taken.len(), 2);
    assert_eq!(starts(&conn), 2);
    let (claimed, _) = claim_as(&conn, OWNER, 10, T0 + 10, || Take::Claim);
    assert_eq!(claimed, [ids[2]]);
    // The claimed one is a start to come: nothing more now.
    let (none, held) = claim_as(&conn, OWNER, 10, T0 + 20, || Take::Claim);
    assert!(none.is_empty() && held);
    // Its worker's start is recorded at the start's time.
    start(&conn, ids[2], OWNER, "w", true, T0 + 500)
        .unwrap()
        .unwrap();
    assert_eq!(starts(&conn), 3);
    // The two first starts leave the window at T0 + 1000, the third at
    // T0 + 1500.
    assert!(claim_as(&conn, OWNER, 10, T0 + 999, || Take::Claim)
        .0
        .is_empty());
    let batch = claim_batch::<()>(
        &conn,
        &ClaimAsk {
            kinds: &["k".to_string()],
            queues_json: None,
            limit: 10,
            for_workers: usize::MAX,
            owner: OWNER,
            lease_until: T0 + 1000 + LEASE,
            now: T0 + 1000,
        },
        |_, _, _| Take::Start((), "w".into()),
    )
    .unwrap();
    assert_eq!(batch.taken.len(), 2);
    assert_eq!(batch.frees_at, Some(T0 + 1500));
    assert_eq!(starts(&conn), 5);
    // A claim deletes the rows a window older than the counted ones.
    claim_as(&conn, OWNER, 10, T0 + 2001, || Take::Claim);
    assert_eq!(starts(&conn), 3);
}

#[test]
fn a_claim_takes_a_capped_queues_jobs_for_its_free_workers_only() {
    let (_dir, conn) = fresh();
    let ids: Vec<i64> = (0..6)
        .map(|i| enqueue_in(&conn, "capped", &format!("c{i}"), 0))
        .collect();
    set(
        &conn,
        "capped",
        None,
        crate::core::controls::QueueLimits::new().concurrency(6),
    );
    let claim = |for_workers: usize| {
        let batch = claim_batch::<()>(
            &conn,
            &ClaimAsk {
                kinds: &["k".to_string()],
                queues_json: None,
                limit: 10,
                for_workers,
                owner: OWNER,
                lease_until: T0 + LEASE,
                now: T0,
            },
            |_, _, _| Take::Claim,
        )
        .unwrap();
        let ids: Vec<i64> = batch.taken.iter().map(|(c, _)| c.id).collect();
        (ids, batch.held_back)
    };
    // Two free workers: two of the six slots, the rest left to others.
    assert_eq!(claim(2), (ids[..2].to_vec(), true));
    assert_eq!(claim(0), (vec![], true));
    assert_eq!(claim(10).0, ids[2..]);
}

#[test]
fn a_job_claimed_ahead_does_not_start_once_its_queue_is_paused() {
    let (_dir, conn) = fresh();
    let id = enqueue_in(&conn, "mail", "m", 0);
    assert_eq!(claim_as(&conn, OWNER, 10, T0, || Take::Claim).0, [id]);
    set(
        &conn,
        "mail",
        Some(true),
        crate::core::controls::QueueLimits::new(),
    );
    assert!(start(&conn, id, OWNER, "w", false, T0 + 1)
        .unwrap()
        .is_none());
    // Back to queued, uncharged, with no attempt row.
    assert_eq!(job(&conn, id), ("queued".into(), 0, 0, None, None));
    assert!(outcomes(&conn, id).is_empty());
}

#[test]
fn a_limited_queues_job_is_started_in_the_claim_never_left_for_later() {
    let (_dir, conn) = fresh();
    let capped = enqueue_in(&conn, "capped", "c", 5);
    let free = enqueue_in(&conn, "free", "f", 5);
    set(
        &conn,
        "capped",
        None,
        crate::core::controls::QueueLimits::new().concurrency(1),
    );
    let batch = claim_batch::<()>(
        &conn,
        &ClaimAsk {
            kinds: &["k".to_string()],
            queues_json: None,
            limit: 10,
            for_workers: usize::MAX,
            owner: OWNER,
            lease_until: T0 + LEASE,
            now: T0,
        },
        |_, _, _| Take::Later((), "w".into()),
    )
    .unwrap();
    let started: Vec<i64> = batch.taken.iter().map(|(c, _)| c.id).collect();
    let later: Vec<i64> = batch.later.iter().map(|(c, _, _)| c.id).collect();
    assert_eq!((started, later), (vec![capped], vec![free]));
    assert_eq!(job(&conn, capped).0, "running");
}
