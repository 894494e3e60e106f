//! A PostgreSQL server the command cannot use: the message says why, not
//! only that it failed.

use crate::support::{litejob, show};

it! {
    /// A local port nothing listens on: connecting is refused at once, and the
    /// message says so (the client's own words are only "error connecting to
    /// server").
    fn an_unreachable_server_is_named_with_its_cause() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("postgres://litejob:litejob@127.0.0.1:{port}/litejob");
        for args in [vec!["stats"], vec!["jobs", "--json"], vec!["init"]] {
            let out = litejob(std::path::Path::new(&url), &args);
            assert_eq!(out.status.code(), Some(1), "{}", show(&args, &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("cannot reach the database server") && err.contains("refused"),
                "{}",
                show(&args, &out)
            );
            assert!(out.stdout.is_empty(), "{}", show(&args, &out));
        }
    }
}
