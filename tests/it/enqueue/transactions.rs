//! Transactional enqueue: `write` (`pg_write` on PostgreSQL) commits the
//! application's row and the job together or neither, and `enqueue_in`
//! (`pg_enqueue_in`) commits or rolls back with the application's own
//! transaction (a duplicate's delivery too).

use crate::backends::Runtimes;
use litejob::admin::AnyQueue;
use litejob::{Enqueued, Error, NewJob};
use serde_json::json;

use super::jobs;
use crate::backends::{Engine, TestQueue};
use crate::both;

/// `Queue::write` on a file, `Queue::pg_write` on PostgreSQL: inserts
/// `note` into `app_rows`, then enqueues what `f` gives it.
fn write<R>(
    queue: &AnyQueue,
    note: &'static str,
    f: impl FnOnce(&mut dyn FnMut(NewJob) -> litejob::Result<Enqueued>) -> litejob::Result<R>
        + Send
        + 'static,
) -> litejob::Result<R>
where
    R: Send + 'static,
{
    match queue.engine() {
        litejob::admin::EngineKind::Sqlite => queue.file().write(move |tx| {
            tx.execute("INSERT INTO app_rows (key) VALUES (?1)", [note])?;
            f(&mut |job| tx.enqueue(job))
        }),
        litejob::admin::EngineKind::Postgres => queue.pg().write(move |tx| {
            tx.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&note])
                .map_err(Error::Postgres)?;
            f(&mut |job| tx.enqueue(job))
        }),
    }
}

both! {
    /// The closure's row and its job commit together; its own error, or an
    /// invalid enqueue propagated with `?`, undoes the row too.
    fn write_commits_the_app_row_and_the_job_together_or_neither(q) {
        q.create_app_table();
        let queue = q.open();
        let id = write(&queue, "first", |enqueue| {
            Ok(enqueue(NewJob::new("ship", "order:1", &json!({"order": 1})))?.id())
        })
        .unwrap();
        assert!(queue.job(id).unwrap().is_some());
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);

        let err = write(&queue, "second", |enqueue| {
            enqueue(NewJob::new("ship", "order:2", &json!({"order": 2})))?;
            Err::<(), _>(Error::InvalidInput("the app changed its mind".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("changed its mind"), "{err}");
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);
        assert!(queue.job_by_key("order:2").unwrap().is_none());

        let err = write(&queue, "third", |enqueue| {
            enqueue(NewJob::new("ship", " ", &json!({})))?;
            Ok(())
        })
        .unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["first"]);
        assert_eq!(jobs(q), 1);
    }
}

/// The application's own connection: `Queue::connect` on a file, its own
/// client on PostgreSQL.
enum Own {
    Sqlite(rusqlite::Connection),
    Postgres(litejob::pg::Client),
}

/// The application's own transaction, as the test drives it.
trait OwnTx {
    /// Inserts `note` into `app_rows`.
    fn insert(&mut self, note: &str);
    /// `enqueue_in` on a file, `pg_enqueue_in` on PostgreSQL.
    fn enqueue_in(&mut self, queue: &AnyQueue, job: &NewJob) -> litejob::Result<Enqueued>;
}

impl OwnTx for rusqlite::Transaction<'_> {
    fn insert(&mut self, note: &str) {
        self.execute("INSERT INTO app_rows (key) VALUES (?1)", [note])
            .unwrap();
    }
    fn enqueue_in(&mut self, queue: &AnyQueue, job: &NewJob) -> litejob::Result<Enqueued> {
        queue.file().enqueue_in(self, job)
    }
}

impl OwnTx for litejob::pg::Transaction<'_> {
    fn insert(&mut self, note: &str) {
        self.execute("INSERT INTO app_rows (key) VALUES ($1)", &[&note])
            .unwrap();
    }
    fn enqueue_in(&mut self, queue: &AnyQueue, job: &NewJob) -> litejob::Result<Enqueued> {
        queue.pg().enqueue_in(self, job)
    }
}

impl Own {
    fn open(q: &TestQueue, queue: &AnyQueue) -> Own {
        match q.engine {
            Engine::Sqlite => Own::Sqlite(queue.file().connect().unwrap()),
            Engine::Postgres => Own::Postgres(
                litejob::pg::Client::connect(&q.sql_location, litejob::pg::NoTls).unwrap(),
            ),
        }
    }

    /// Runs `f` in a transaction of the application's, then commits it
    /// (`commit`) or rolls it back.
    fn transaction(&mut self, commit: bool, f: impl FnOnce(&mut dyn OwnTx)) {
        match self {
            Own::Sqlite(c) => {
                let mut tx = litejob::sqlite::immediate(c).unwrap();
                f(&mut tx);
                if commit { tx.commit() } else { tx.rollback() }.unwrap();
            }
            Own::Postgres(c) => {
                let mut tx = c.transaction().unwrap();
                f(&mut tx);
                if commit { tx.commit() } else { tx.rollback() }.unwrap();
            }
        }
    }
}

both! {
    /// The job exists if and only if the application's transaction
    /// commits; a duplicate's delivery rolls back with it; bad input is
    /// refused and leaves the transaction usable.
    fn enqueue_in_commits_or_rolls_back_with_the_apps_own_transaction(q) {
        q.create_app_table();
        let queue = q.open();
        let mut own = Own::open(q, &queue);
        own.transaction(true, |tx| {
            tx.insert("kept");
            let e = tx.enqueue_in(&queue, &NewJob::new("ship", "own:1", &json!({}))).unwrap();
            assert!(!e.is_duplicate());
            // Not visible to others before the commit.
            assert!(queue.job_by_key("own:1").unwrap().is_none());
        });
        queue.notify();
        assert!(queue.job_by_key("own:1").unwrap().is_some());
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["kept"]);
        own.transaction(false, |tx| {
            tx.insert("dropped");
            tx.enqueue_in(&queue, &NewJob::new("ship", "own:2", &json!({}))).unwrap();
            // A duplicate inside the app's transaction counts a delivery...
            assert!(tx
                .enqueue_in(&queue, &NewJob::new("ship", "own:1", &json!({})))
                .unwrap()
                .is_duplicate());
        });
        assert!(queue.job_by_key("own:2").unwrap().is_none());
        // ...that rolls back with it.
        assert_eq!(queue.job_by_key("own:1").unwrap().unwrap().deliveries, 1);
        assert_eq!(q.strings("SELECT key FROM app_rows"), ["kept"]);
        // Bad input inside the app's transaction: refused, the transaction
        // is still usable.
        own.transaction(true, |tx| {
            let err = tx
                .enqueue_in(&queue, &NewJob::from_json("ship", "own:3", "nope"))
                .unwrap_err();
            assert!(err.is_invalid_input());
            tx.insert("after");
        });
        assert!(queue.job_by_key("own:3").unwrap().is_none());
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 2);
    }
}
