//! TLS to PostgreSQL with real parts: a throwaway server with `ssl=on`
//! whose certificate names `localhost` and is signed by a certificate
//! authority the test makes with the `openssl` command. `verify-full`
//! connects to the host the certificate names through the authority in
//! `sslrootcert`, and refuses another host, another authority, or the
//! system's (which never signed it), before anything is written;
//! `require` encrypts without checking; `disable` does not encrypt; a bad
//! `sslmode` is bad input (exit 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use litejob::pg::{Client, NoTls};
use litejob::postgres::Postgres;
use litejob::{NewJob, Queue, QueueOptions};
use serde_json::json;

use crate::suite::cluster;
use crate::support::show;

/// A certificate authority, a server certificate it signed for
/// `localhost`, and another authority that signed nothing.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "{}", show(args, &out));
}

impl Pki {
    fn make() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "litejob test CA"), ("other", "someone else's CA")] {
            let (k, c, subj) = (
                format!("{name}.key"),
                format!("{name}.crt"),
                format!("/CN={cn}"),
            );
            let mut args = vec![
                "req", "-x509", "-days", "2", "-subj", &subj, "-keyout", &k, "-out", &c,
            ];
            args.extend(key);
            openssl(d, &args);
        }
        let mut args = vec![
            "req",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ];
        args.extend(key);
        openssl(d, &args);
        std::fs::write(
            d.join("ext.cnf"),
            "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
                "-out",
                "server.crt",
            ],
        );
        Pki {
            ca: d.join("ca.crt"),
            other_ca: d.join("other.crt"),
            cert: d.join("server.crt"),
            key: d.join("server.key"),
            _dir: dir,
        }
    }
}

fn open(url: &str) -> litejob::Result<Queue<Postgres>> {
    Queue::<Postgres>::open_with(url, QueueOptions::default())
}

fn litejob(db: &str, args: &[&str]) -> Output {
    crate::support::litejob(Path::new(db), args)
}

/// The connections of `database` as (encrypted, not encrypted).
fn encrypted(admin: &mut Client, database: &str) -> (i64, i64) {
    let r = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = $1 AND a.pid <> pg_backend_pid()",
            &[&database],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

it! {
    /// The one test of the server: each mode against it, in turn.
    #[needs(PostgresBinaries, Openssl)]
    fn verify_full_trusts_the_named_authority_and_host_and_refuses_any_other() {
        let pki = Pki::make();
        let server = cluster::start_with_tls(&pki.cert, &pki.key).unwrap_or_else(|e| panic!("{e}"));
        let mut admin = Client::connect(&server.url, NoTls).unwrap();
        for db in ["verified", "refused", "plain", "unchecked"] {
            admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
        }
        let url = |host: &str, db: &str, query: &str| {
            format!("postgres://litejob:litejob@{host}:{}/{db}?{query}", server.port)
        };
        let ca = pki.ca.display().to_string();

        // The host the certificate names, through the authority that signed it.
        let verified = url("localhost", "verified", &format!("sslmode=verify-full&sslrootcert={ca}"));
        let queue = open(&verified).unwrap_or_else(|e| panic!("{verified}: {e}"));
        queue.enqueue(NewJob::new("mail", "m-1", &json!({}))).unwrap();
        let (tls, clear) = encrypted(&mut admin, "verified");
        assert!(tls >= 1 && clear == 0, "verify-full: {tls} encrypted, {clear} not");
        drop(queue);

        // Another host, the system's authorities, another authority: each
        // refused before anything was written.
        let other = pki.other_ca.display().to_string();
        for refused in [
            url("127.0.0.1", "refused", &format!("sslmode=verify-full&sslrootcert={ca}")),
            url("localhost", "refused", "sslmode=verify-full"),
            url("localhost", "refused", &format!("sslmode=verify-full&sslrootcert={other}")),
            url("localhost", "refused", &format!("sslmode=verify-ca&sslrootcert={other}")),
        ] {
            let e = open(&refused).err().unwrap_or_else(|| panic!("{refused} was accepted"));
            assert!(e.to_string().contains("TLS with the server failed"), "{refused}: {e}");
            assert!(!e.is_transient(), "a refused certificate is not retried: {e:?}");
            let out = litejob(&refused, &["jobs"]);
            assert_eq!(out.status.code(), Some(1), "{}", show(&["jobs"], &out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("TLS with the server failed") && !err.contains(":litejob@"), "{err}");
        }
        let mut c = Client::connect(&server.url.replace("/postgres", "/refused"), NoTls).unwrap();
        let tables: i64 = c
            .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", &[])
            .unwrap()
            .get(0);
        assert_eq!(tables, 0, "a refused server got no table");

        // verify-ca checks the authority, not the host.
        let any_host = url("127.0.0.1", "verified", &format!("sslmode=verify-ca&sslrootcert={ca}"));
        open(&any_host).unwrap_or_else(|e| panic!("{any_host}: {e}"));

        // require encrypts and checks nothing; disable does not encrypt.
        let unchecked = open(&url("127.0.0.1", "unchecked", "sslmode=require")).unwrap();
        unchecked.enqueue(NewJob::new("mail", "m-2", &json!({}))).unwrap();
        let (tls, clear) = encrypted(&mut admin, "unchecked");
        assert!(tls >= 1 && clear == 0, "require: {tls} encrypted, {clear} not");
        let plain = open(&url("127.0.0.1", "plain", "sslmode=disable")).unwrap();
        plain.enqueue(NewJob::new("mail", "m-3", &json!({}))).unwrap();
        let (tls, clear) = encrypted(&mut admin, "plain");
        assert!(tls == 0 && clear >= 1, "disable: {tls} encrypted, {clear} not");
        drop((unchecked, plain));

        // A mode that does not exist is bad input, and nothing connects.
        let out = litejob(&url("localhost", "verified", "sslmode=verify"), &["jobs"]);
        assert_eq!(out.status.code(), Some(2), "{}", show(&["jobs"], &out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("sslmode=verify"), "{}", show(&["jobs"], &out));
        server.stop();
    }
}
