//! Reaching the server: a URL that does not parse is bad input (exit 2);
//! a refused login, a database that does not exist and a server that
//! cannot be reached are failures (exit 1) with a message that says which,
//! names the login and never prints the password; the library reports the
//! unreachable server as a transient error.

use std::process::{Command, Output};

use crate::backends::pg_base_url;
use crate::support::show;

fn litejob(db: &str, args: &[&str]) -> Output {
    Command::new(crate::support::bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LITEJOB_DB")
        .env_remove("LITEJOB_FAULT")
        .output()
        .expect("run litejob")
}

/// Runs each command on `db`, expecting `status` and `says` on stderr, and
/// no password.
fn refused(db: &str, status: i32, says: &str, secret: &str) {
    for args in [
        &["init"][..],
        &["jobs"][..],
        &["enqueue", "mail", "--key", "k"][..],
        &["stats", "--json"][..],
    ] {
        let out = litejob(db, args);
        assert_eq!(out.status.code(), Some(status), "{}", show(args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.contains(secret),
            "{args:?} printed the password: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

it! {
    fn a_url_that_does_not_parse_is_bad_input() {
        for url in [
            "postgres://litejob:s3cret@127.0.0.1:notaport/db",
            "postgres://litejob:s3cret@127.0.0.1:5432/db?connect_timeout=soon",
            "postgresql://litejob:s3cret@[::1/db",
        ] {
            refused(url, 2, "not a PostgreSQL URL", "s3cret");
        }
    }
}

it! {
    #[needs(Postgres)]
    fn a_refused_password_names_the_login_and_not_the_password() {
        let base = pg_base_url();
        let wrong = base.replacen(":litejob@", ":Wr0ngPassw0rd@", 1);
        assert_ne!(wrong, base, "the test URL names its password");
        refused(&wrong, 1, "refused the login", "Wr0ngPassw0rd");
        let err = String::from_utf8_lossy(&litejob(&wrong, &["jobs"]).stderr).into_owned();
        assert!(err.contains("\"litejob\""), "the login is named: {err}");
        let e = litejob::Queue::<litejob::postgres::Postgres>::open_with(
            wrong.as_str(),
            litejob::QueueOptions::default(),
        )
        .unwrap_err();
        assert!(!e.is_transient(), "a refused login is not retried: {e:?}");
    }
}

it! {
    #[needs(Postgres)]
    fn a_database_that_does_not_exist_is_named() {
        let base = pg_base_url();
        let (head, _) = base.rsplit_once('/').unwrap();
        refused(
            &format!("{head}/no_such_db_here"),
            1,
            "no such database",
            ":litejob@",
        );
    }
}

it! {
    fn a_server_out_of_reach_is_a_transient_failure() {
        let url = format!(
            "postgres://litejob:s3cret@127.0.0.1:{}/litejob_test",
            closed_port()
        );
        refused(&url, 1, "cannot reach the database server", "s3cret");
        let e = litejob::Queue::<litejob::postgres::Postgres>::open_with(
            url.as_str(),
            litejob::QueueOptions::default(),
        )
        .unwrap_err();
        assert!(e.is_transient(), "{e:?}");
        assert!(matches!(e, litejob::Error::Connection(_)), "{e:?}");
    }
}

it! {
    /// An application that writes its own SQL through the queue can tell a
    /// unique violation from other errors by its SQLSTATE.
    #[needs(Postgres)]
    fn an_error_of_the_servers_says_its_sqlstate() {
        let q = crate::backends::TestQueue::new(crate::backends::Engine::Postgres);
        let litejob::admin::AnyQueue::Postgres(queue) = q.open() else {
            panic!("a PostgreSQL queue")
        };
        queue
            .write(|tx| {
                tx.batch_execute("CREATE TABLE uniq (k text PRIMARY KEY); INSERT INTO uniq VALUES ('a')")?;
                Ok(())
            })
            .unwrap();
        let e = queue
            .write(|tx| {
                tx.execute("INSERT INTO uniq VALUES ('a')", &[])?;
                Ok(())
            })
            .unwrap_err();
        assert_eq!(e.sqlstate(), Some("23505"), "{e:?}");
        // A file's errors have none.
        let file = crate::backends::TestQueue::new(crate::backends::Engine::Sqlite);
        let litejob::admin::AnyQueue::Sqlite(file) = file.open() else {
            panic!("a file")
        };
        let e = file
            .write(|tx| {
                tx.execute_batch("CREATE TABLE uniq (k TEXT PRIMARY KEY); INSERT INTO uniq VALUES ('a'); INSERT INTO uniq VALUES ('a')")?;
                Ok(())
            })
            .unwrap_err();
        assert_eq!(e.sqlstate(), None, "{e:?}");
    }
}
