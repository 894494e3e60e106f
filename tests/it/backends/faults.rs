//! The database's schema on both backends: one without litejob's tables
//! gets them (the library creates them), one whose schema is newer than
//! this litejob is refused by every command and left untouched.

use std::process::Command;

use super::{Engine, TestQueue};
use crate::both;
use crate::support::{bin, show};

fn litejob(q: &TestQueue, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("--db")
        .arg(&q.location)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .unwrap()
}

/// The schema's version, as plain SQL reads it.
fn version(q: &TestQueue) -> i64 {
    match q.engine {
        Engine::Sqlite => q.count("PRAGMA user_version"),
        Engine::Postgres => q.count("SELECT max(version) FROM litejob_schema"),
    }
}

/// Every table, view and column the database holds, and the jobs' keys.
fn picture(q: &TestQueue) -> (Vec<String>, Vec<String>) {
    let columns = match q.engine {
        Engine::Sqlite => q.strings(
            "SELECT m.name || '.' || p.name || ' ' || p.type FROM sqlite_master m, \
             pragma_table_info(m.name) p ORDER BY 1",
        ),
        Engine::Postgres => q.strings(
            "SELECT table_name || '.' || column_name || ' ' || data_type FROM \
             information_schema.columns WHERE table_schema = current_schema() ORDER BY 1",
        ),
    };
    (
        columns,
        q.strings("SELECT idempotency_key FROM jobs ORDER BY id"),
    )
}

both! {
    /// An empty database (a 0-byte file, a schema without tables) is
    /// given the tables by the first command that opens it.
    fn a_database_without_the_tables_gets_them(q) {
        if q.engine == Engine::Sqlite {
            std::fs::write(&q.location, b"").unwrap();
        }
        let out = litejob(q, &["jobs", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&["jobs"], &out));
        assert_eq!(version(q), litejob::admin::SCHEMA_VERSION);
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 0);
        let queue = q.open();
        assert!(!queue.enqueue(litejob::NewJob::new("mail", "k", &serde_json::json!({}))).unwrap().is_duplicate());
    }
}

both! {
    /// A schema newer than this binary: every command refuses it (exit 1,
    /// naming both versions), the library too, and nothing changes.
    fn a_newer_schema_is_refused_by_every_command_and_left_untouched(q) {
        let queue = q.open();
        queue.enqueue(litejob::NewJob::new("mail", "before", &serde_json::json!({}))).unwrap();
        drop(queue);
        match q.engine {
            Engine::Sqlite => q.exec("PRAGMA user_version = 99"),
            Engine::Postgres => q.exec("UPDATE litejob_schema SET version = 99"),
        }
        let before = picture(q);
        for args in [
            &["init"][..],
            &["enqueue", "mail", "--key", "after"][..],
            &["jobs"][..],
            &["stats"][..],
            &["demo", "--events", "3"][..],
        ] {
            let out = litejob(q, args);
            assert_eq!(out.status.code(), Some(1), "{}", show(args, &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("99") && err.contains(&format!("version {}", litejob::admin::SCHEMA_VERSION)), "{args:?}: {err}");
        }
        let e = litejob::admin::AnyQueue::open_with(&q.location, Default::default()).unwrap_err();
        assert!(matches!(e, litejob::Error::SchemaTooNew { found: 99, .. }), "{e:?}");
        assert_eq!(version(q), 99);
        assert_eq!(picture(q), before, "the database changed");
    }
}
