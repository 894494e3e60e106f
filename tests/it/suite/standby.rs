//! A primary and its synchronous standby, two throwaway clusters
//! ([`super::cluster`]) on ports of their own, for a failover: the
//! primary commits only once the standby has the commit's WAL
//! (`synchronous_standby_names = '*'`), so whatever a client was told is
//! committed is on the standby when the primary dies and the standby is
//! promoted. The standby is `pg_basebackup -R` of the primary, streaming
//! over the primary's socket (initdb's `pg_hba.conf` trusts local
//! replication connections). Its settings come from its own command line,
//! not the primary's: once promoted it waits for no standby of its own.

use std::time::{Duration, Instant};

use litejob::pg::{Client, NoTls};

use super::cluster::{self, Cluster};

/// A primary and its synchronous standby, streaming.
pub struct Pair {
    pub primary: Cluster,
    pub standby: Cluster,
}

impl Pair {
    /// Starts the primary, makes its standby, and waits until the standby
    /// is the primary's synchronous one.
    pub fn start() -> Result<Pair, String> {
        let primary = cluster::start_with("-c synchronous_standby_names='*' -c wal_level=replica")?;
        let (socket, port) = (primary.dir.clone(), primary.port.to_string());
        let standby = cluster::start_made("", |tools, dir| {
            let mut backup = tools.command("pg_basebackup");
            backup
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-R", "-X", "stream", "-c", "fast", "--no-sync", "-h"])
                .arg(&socket)
                .args(["-p", &port, "-U", "litejob"])
                .current_dir(dir);
            tools.run(backup, "pg_basebackup")
        })?;
        let pair = Pair { primary, standby };
        let t0 = Instant::now();
        loop {
            let state = Client::connect(&pair.primary.url, NoTls)
                .and_then(|mut c| {
                    c.query_opt(
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
                        &[],
                    )
                })
                .map(|r| r.map(|r| r.get::<_, String>(0)));
            if matches!(&state, Ok(Some(s)) if s == "sync") {
                return Ok(pair);
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the standby is not the primary's synchronous one after 60 s: {state:?}\n{}",
                    std::fs::read_to_string(pair.standby.dir.join("server.log"))
                        .unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The URL naming both servers, primary first, for a client that must
    /// find the one that takes writes (`target_session_attrs=read-write`).
    pub fn url(&self) -> String {
        format!(
            "postgres://litejob:litejob@127.0.0.1:{},127.0.0.1:{}/postgres\
             ?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// Kills the primary's postmaster with SIGKILL, as a machine lost
    /// would stop it: no shutdown, no goodbye to its clients; its backends
    /// exit on their own once they notice. Waits until it refuses
    /// connections.
    pub fn kill_primary(&self) {
        let pidfile = self.primary.data().join("postmaster.pid");
        let text = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()));
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", pidfile.display()));
        let st = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(st.success(), "kill -KILL {pid}: {st}");
        crate::support::wait_until(
            "the killed primary refuses connections",
            crate::support::LONG,
            || std::net::TcpStream::connect(("127.0.0.1", self.primary.port)).is_err(),
        );
    }

    /// Promotes the standby (`pg_ctl promote`), waiting until it takes
    /// writes.
    pub fn promote(&self) {
        self.standby
            .pg_ctl(&["-w", "-t", "60", "promote"])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Both clusters stopped and their directories removed.
    pub fn stop(self) {
        self.primary.stop();
        self.standby.stop();
    }
}

it! {
    /// What the failover tests stand on: a commit on the primary is on the
    /// standby before the primary answers; after the primary is killed and
    /// the standby promoted, the URL naming both reaches the new primary,
    /// which takes writes without waiting for a standby.
    #[needs(PostgresBinaries)]
    fn a_promoted_synchronous_standby_has_every_commit_and_takes_writes() {
        let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
        let mut p = Client::connect(&pair.url(), NoTls).unwrap();
        let port: i32 = p.query_one("SELECT inet_server_port()", &[]).unwrap().get(0);
        assert_eq!(port, i32::from(pair.primary.port), "the URL reaches the primary first");
        p.batch_execute("CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 100)")
            .unwrap();
        drop(p);
        pair.kill_primary();
        pair.promote();
        let mut s = Client::connect(&pair.url(), NoTls).unwrap();
        let port: i32 = s.query_one("SELECT inet_server_port()", &[]).unwrap().get(0);
        assert_eq!(port, i32::from(pair.standby.port), "the URL reaches the new primary");
        let n: i64 = s.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
        assert_eq!(n, 100, "commits the primary answered are on the standby");
        s.batch_execute("INSERT INTO t VALUES (101)").unwrap();
        pair.stop();
    }
}
