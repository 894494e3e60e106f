//! Transactional enqueue: `write` commits the application's row and the job
//! together or neither, and `enqueue_in` commits or rolls back with the
//! application's own transaction (a duplicate's delivery too).

use litejob::{Error, NewJob, Queue};
use serde_json::json;

use super::jobs;
use crate::support::TestDb;

/// The application's own `orders` table.
fn app_table(q: &Queue) {
    q.write(|tx| {
        tx.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)")?;
        Ok(())
    })
    .unwrap();
}

#[test]
fn write_commits_the_app_row_and_the_job_together_or_neither() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let id = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('first')", [])?;
            let e = tx.enqueue(NewJob::new("ship", "order:1", &json!({"order": 1})))?;
            Ok(e.id())
        })
        .unwrap();
    assert!(q.job(id).unwrap().is_some());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);

    let err = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('second')", [])?;
            tx.enqueue(NewJob::new("ship", "order:2", &json!({"order": 2})))?;
            Err::<(), _>(Error::InvalidInput("the app changed its mind".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("changed its mind"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    assert!(q.job_by_key("order:2").unwrap().is_none());

    // An invalid enqueue inside the closure, propagated with `?`, undoes the
    // app row too.
    let err = q
        .write(|tx| {
            tx.execute("INSERT INTO orders (note) VALUES ('third')", [])?;
            tx.enqueue(NewJob::new("ship", " ", &json!({})))?;
            Ok(())
        })
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    assert_eq!(jobs(&db), 1);
}

#[test]
fn enqueue_in_commits_or_rolls_back_with_the_apps_own_transaction() {
    let db = TestDb::new();
    let q = db.open();
    app_table(&q);
    let mut conn = q.connect().unwrap();
    {
        let tx = litejob::immediate(&mut conn).unwrap();
        tx.execute("INSERT INTO orders (note) VALUES ('kept')", [])
            .unwrap();
        let e = q
            .enqueue_in(&tx, &NewJob::new("ship", "own:1", &json!({})))
            .unwrap();
        assert!(!e.is_duplicate());
        // Not visible to others before the commit.
        assert!(q.job_by_key("own:1").unwrap().is_none());
        tx.commit().unwrap();
    }
    q.notify();
    assert!(q.job_by_key("own:1").unwrap().is_some());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    {
        let tx = litejob::immediate(&mut conn).unwrap();
        tx.execute("INSERT INTO orders (note) VALUES ('dropped')", [])
            .unwrap();
        q.enqueue_in(&tx, &NewJob::new("ship", "own:2", &json!({})))
            .unwrap();
        // A duplicate inside the app's transaction counts a delivery...
        assert!(q
            .enqueue_in(&tx, &NewJob::new("ship", "own:1", &json!({})))
            .unwrap()
            .is_duplicate());
        tx.rollback().unwrap();
    }
    assert!(q.job_by_key("own:2").unwrap().is_none());
    // ...that rolls back with it.
    assert_eq!(q.job_by_key("own:1").unwrap().unwrap().deliveries, 1);
    assert_eq!(db.count("SELECT count(*) FROM orders"), 1);
    // Bad input inside the app's transaction: refused, the transaction is
    // still usable.
    let tx = litejob::immediate(&mut conn).unwrap();
    let err = q
        .enqueue_in(&tx, &NewJob::from_json("ship", "own:3", "nope"))
        .unwrap_err();
    assert!(err.is_invalid_input());
    tx.execute("INSERT INTO orders (note) VALUES ('after')", [])
        .unwrap();
    tx.commit().unwrap();
    assert!(q.job_by_key("own:3").unwrap().is_none());
    assert_eq!(db.count("SELECT count(*) FROM orders"), 2);
}
