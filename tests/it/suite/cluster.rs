//! The PostgreSQL the tests use: the server `LITEJOB_TEST_PG` names, or
//! else a throwaway cluster of this process, so that `cargo test` covers
//! both engines wherever PostgreSQL's server binaries are installed.
//!
//! The cluster is made by `initdb` in a temporary directory (127.0.0.1 on a
//! free port, its socket in that directory; the superuser `litejob` logs in
//! over TCP with the password `litejob`, as in CI's server, because tests
//! check that a wrong password is refused and never printed), started by
//! `pg_ctl` without fsync (nothing outlives the process), and removed when
//! the process ends
//! however it ends: a guardian shell, in a process group of its own (so
//! Ctrl-C leaves it be), waits for the end of its standard input, which
//! only this process holds open, then stops the server and removes the
//! directory. `initdb` and `pg_ctl` refuse to run as root; as root they run
//! as `postgres` (or `nobody`), who is given the directory.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use litejob::pg::{Client, NoTls};

use super::Missing;

/// The cluster the tests share, once started.
static SHARED: Mutex<Option<Cluster>> = Mutex::new(None);

/// A running throwaway cluster.
pub struct Cluster {
    pub url: String,
    /// Its directory (data, socket, log), removed when it stops.
    pub dir: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Runs PostgreSQL's programs as the server's user.
    pub tools: Tools,
    /// The server's settings (`pg_ctl -o`), kept for a restart.
    options: String,
    /// Closing its input stops the cluster and removes the directory.
    guardian: Child,
    input: Option<ChildStdin>,
}

impl Cluster {
    /// Stops the server and waits until its directory is gone.
    pub fn stop(mut self) {
        self.input.take();
        let _ = self.guardian.wait();
    }

    /// Its data directory.
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `pg_ctl -D <data> args`, as the server's user.
    pub fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut ctl = self.tools.command("pg_ctl");
        ctl.arg("-D")
            .arg(self.data())
            .args(args)
            .current_dir(&self.dir);
        run(ctl, &format!("pg_ctl {}", args.join(" ")))
    }

    /// Stops the server (`pg_ctl stop -m <mode>`), keeping its data.
    pub fn stop_server(&self, mode: &str) -> Result<(), String> {
        self.pg_ctl(&["-m", mode, "-w", "-t", "120", "stop"])
    }

    /// Starts the server again on its port, with its settings.
    pub fn start_server(&self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let log = log.to_str().ok_or("the log's path is not UTF-8")?;
        self.pg_ctl(&["-l", log, "-w", "-t", "120", "-o", &self.options, "start"])
    }
}

/// PostgreSQL's programs, run as the server's user (see [`server_user`]).
#[derive(Clone)]
pub struct Tools {
    bin: PathBuf,
    user: Option<(String, u32, u32)>,
}

impl Tools {
    /// `program` (`pg_ctl`, `pg_basebackup`, …) as the server's user.
    pub fn command(&self, program: &str) -> Command {
        command(&self.user, &self.bin.join(program))
    }

    /// Runs `cmd`; its output is the error if it fails.
    pub fn run(&self, cmd: Command, what: &str) -> Result<(), String> {
        run(cmd, what)
    }
}

/// The server's URL (a database the tests may create schemas in), checked
/// to answer; the cluster is started the first time it is asked for.
pub fn base_url() -> Result<&'static str, Missing> {
    static URL: OnceLock<Result<String, Missing>> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("LITEJOB_TEST_PG") {
        Ok(url) if !url.is_empty() => match Client::connect(&url, NoTls) {
            Ok(_) => Ok(url),
            Err(e) => Err(Missing {
                why: format!("LITEJOB_TEST_PG={url} is set but the server does not answer: {e}"),
                fatal: true,
            }),
        },
        _ => start()
            .map(|c| {
                let url = c.url.clone();
                *SHARED.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
                url
            })
            .map_err(|why| {
                Missing::here(format!(
                    "{why}; install PostgreSQL's server (apt-get install postgresql) \
                 or set LITEJOB_TEST_PG to a database's URL"
                ))
            }),
    })
    .as_ref()
    .map(String::as_str)
    .map_err(Clone::clone)
}

/// Stops the cluster, if this process started one, and waits until its
/// directory is gone.
pub fn stop() {
    let taken = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(c) = taken {
        c.stop();
    }
}

/// The directory of `initdb` and `pg_ctl`: the newest of Debian's
/// `/usr/lib/postgresql/<version>/bin`, else the `PATH`'s.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
    })
}

/// Who runs the server: None for this process's own user, or the
/// unprivileged user (name, uid, gid) when this process is root.
fn server_user() -> Result<Option<(String, u32, u32)>, String> {
    let id = |args: &[&str]| -> Option<u32> {
        let o = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id(&["-u"]) != Some(0) {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let (Some(uid), Some(gid)) = (id(&["-u", name]), id(&["-g", name])) {
            return Ok(Some((name.to_string(), uid, gid)));
        }
    }
    Err("running as root, and neither a postgres nor a nobody user exists to run initdb".into())
}

/// `program args` as the server's user.
fn command(user: &Option<(String, u32, u32)>, program: &Path) -> Command {
    match user {
        None => Command::new(program),
        Some((_, uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(program);
            c
        }
    }
}

fn run(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(l.local_addr().unwrap().port())
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Starts a throwaway cluster.
pub fn start() -> Result<Cluster, String> {
    start_with("")
}

/// A throwaway cluster started with more settings (`-c name=value …`).
pub fn start_with(settings: &str) -> Result<Cluster, String> {
    start_made(settings, initdb)
}

/// Makes a cluster's data directory the usual way: `initdb`, the
/// superuser `litejob` with the password `litejob`.
fn initdb(tools: &Tools, dir: &Path) -> Result<(), String> {
    let pwfile = dir.join("password");
    std::fs::write(&pwfile, "litejob\n").map_err(|e| format!("{}: {e}", pwfile.display()))?;
    if let Some((name, uid, gid)) = &tools.user {
        std::os::unix::fs::chown(&pwfile, Some(*uid), Some(*gid))
            .map_err(|e| format!("chown {} to {name}: {e}", pwfile.display()))?;
    }
    let mut initdb = tools.command("initdb");
    initdb
        .arg("-D")
        .arg(dir.join("data"))
        .arg(format!("--pwfile={}", pwfile.display()))
        .args([
            "-U",
            "litejob",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .args(["-E", "UTF8", "--locale=C", "--no-sync"])
        .current_dir(dir);
    run(initdb, "initdb")
}

/// A throwaway cluster that speaks TLS (`ssl=on`) with the certificate
/// and key in `cert` and `key` (PEM), copied into its directory for the
/// server's user.
pub fn start_with_tls(cert: &Path, key: &Path) -> Result<Cluster, String> {
    let (cert, key) = (cert.to_path_buf(), key.to_path_buf());
    start_made("", |tools, dir| {
        initdb(tools, dir)?;
        for (from, to) in [(&cert, "server.crt"), (&key, "server.key")] {
            let at = dir.join("data").join(to);
            std::fs::copy(from, &at).map_err(|e| format!("copy {}: {e}", from.display()))?;
            std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .map_err(|e| format!("chmod {}: {e}", at.display()))?;
            if let Some((name, uid, gid)) = &tools.user {
                std::os::unix::fs::chown(&at, Some(*uid), Some(*gid))
                    .map_err(|e| format!("chown {} to {name}: {e}", at.display()))?;
            }
        }
        // Read at the server's start: ssl_cert_file and ssl_key_file
        // default to these names in the data directory.
        let conf = dir.join("data/postgresql.auto.conf");
        std::fs::write(&conf, "ssl = on\n").map_err(|e| format!("{}: {e}", conf.display()))?;
        if let Some((name, uid, gid)) = &tools.user {
            std::os::unix::fs::chown(&conf, Some(*uid), Some(*gid))
                .map_err(|e| format!("chown {} to {name}: {e}", conf.display()))?;
        }
        Ok(())
    })
}

/// A throwaway cluster whose data directory (`<dir>/data`) `make` writes,
/// started with `settings` besides the usual ones; the directory `dir`
/// belongs to the server's user.
pub fn start_made(
    settings: &str,
    make: impl FnOnce(&Tools, &Path) -> Result<(), String>,
) -> Result<Cluster, String> {
    let bin = bin_dir().ok_or("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")?;
    let user = server_user()?;
    let dir = tempfile::Builder::new()
        .prefix("litejob-test-pg-")
        .tempdir()
        .map_err(|e| format!("tempdir: {e}"))?
        .keep();
    // From here on the guardian owns the directory's removal.
    let data = dir.join("data");
    let log = dir.join("server.log");
    if let Some((name, uid, gid)) = &user {
        std::os::unix::fs::chown(&dir, Some(*uid), Some(*gid))
            .map_err(|e| format!("chown {} to {name}: {e}", dir.display()))?;
    }
    let pg_ctl = bin.join("pg_ctl");
    let user_prefix = match &user {
        None => String::new(),
        Some((_, uid, gid)) => format!("setpriv --reuid={uid} --regid={gid} --clear-groups -- "),
    };
    let script = format!(
        "read -r _; {user_prefix}{} -D {} -m immediate -w stop >/dev/null 2>&1; rm -rf {}",
        quote(&pg_ctl),
        quote(&data),
        quote(&dir)
    );
    let tools = Tools {
        bin: bin.clone(),
        user: user.clone(),
    };
    let mut cluster = Cluster {
        url: String::new(),
        dir: dir.clone(),
        port: 0,
        tools: tools.clone(),
        options: String::new(),
        guardian: Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("sh: {e}"))?,
        input: None,
    };
    cluster.input = cluster.guardian.stdin.take();

    make(&tools, &dir)?;
    // A port can be taken between the look and the server's bind.
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port()?;
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={} \
             -c fsync=off -c max_connections=200 {settings}",
            dir.display()
        );
        let mut ctl = command(&user, &pg_ctl);
        ctl.arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "120", "-o", &options, "start"])
            .current_dir(&dir);
        match run(ctl, "pg_ctl start") {
            Ok(()) => {
                cluster.url = format!("postgres://litejob:litejob@127.0.0.1:{port}/postgres");
                cluster.port = port;
                cluster.options = options;
                Client::connect(&cluster.url, NoTls).map_err(|e| {
                    format!("the cluster at {} does not answer: {e}", dir.display())
                })?;
                return Ok(cluster);
            }
            Err(e) => {
                let server_log = std::fs::read_to_string(&log).unwrap_or_default();
                last = format!("{e}\n{server_log}");
            }
        }
    }
    Err(last)
}

/// Whether PostgreSQL's server binaries are installed.
pub fn installed() -> Result<(), super::Missing> {
    bin_dir().map(|_| ()).ok_or_else(|| {
        super::Missing::here(
            "PostgreSQL's server binaries (initdb, pg_ctl) are not installed \
             (apt-get install postgresql)"
                .into(),
        )
    })
}

/// Whether anything answers on `url`'s server.
fn answers(url: &str) -> bool {
    Client::connect(url, NoTls).is_ok()
}

child! {
    /// Starts a cluster, writes its URL and directory to the file
    /// `LITEJOB_CLUSTER_READY`, and waits to be killed.
    fn cluster_child() {
        let c = start().expect("start a cluster");
        let ready = std::env::var("LITEJOB_CLUSTER_READY").expect("LITEJOB_CLUSTER_READY");
        std::fs::write(&ready, format!("{}\n{}\n", c.url, c.dir.display())).unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
}

it! {
    /// The cluster `cargo test` starts when no server is named: it answers
    /// the password the tests use and no other, and is gone, directory
    /// and all, once stopped.
    #[needs(PostgresBinaries)]
    fn a_throwaway_cluster_answers_its_password_only_and_is_removed_when_stopped() {
        let c = start().unwrap_or_else(|e| panic!("{e}"));
        assert!(answers(&c.url), "{}", c.url);
        let wrong = c.url.replacen(":litejob@", ":wrong@", 1);
        assert!(!answers(&wrong), "a wrong password is refused");
        let (url, dir) = (c.url.clone(), c.dir.clone());
        assert!(dir.join("data").is_dir());
        c.stop();
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(!answers(&url), "the server still answers after the stop");
    }
}

it! {
    /// A test process killed outright (SIGKILL, like a second Ctrl-C or an
    /// OOM kill) leaves no server and no directory behind.
    #[needs(PostgresBinaries)]
    fn a_cluster_is_removed_when_its_test_process_is_killed() {
        let tmp = tempfile::tempdir().unwrap();
        let ready = tmp.path().join("ready");
        let mut child = super::as_child(
            &mut Command::new(crate::reliability::harness::self_exe()),
            "suite::cluster::cluster_child",
        )
        .env("LITEJOB_CLUSTER_READY", &ready)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
        crate::support::wait_until("the child's cluster is up", crate::support::LONG * 3, || {
            std::fs::read_to_string(&ready).is_ok_and(|s| s.lines().count() == 2)
                || child.try_wait().unwrap().is_some()
        });
        let text = std::fs::read_to_string(&ready).expect("the child started no cluster");
        let mut lines = text.lines();
        let (url, dir) = (lines.next().unwrap(), PathBuf::from(lines.next().unwrap()));
        assert!(answers(url));
        crate::reliability::harness::kill(&mut child);
        crate::support::wait_until("the cluster's directory is removed", crate::support::LONG, || {
            !dir.exists()
        });
        assert!(!answers(url), "the server still answers after its process died");
    }
}
