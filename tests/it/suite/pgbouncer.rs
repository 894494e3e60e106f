//! A transaction pooler in front of the tests' PostgreSQL ([`super::cluster`]'s
//! server): one pgbouncer for the test process, started the first time a
//! test needs it, as managed providers put one in front of a database;
//! and, for the tests that need one, a second in session mode
//! ([`Mode::Session`], [`session_pooled_url_for`]), started the first time
//! one of them asks for it.
//!
//! The first runs with `pool_mode = transaction`, the second with `pool_mode
//! = session` ([`SESSION_POOL_SIZE`] server connections, one held by each
//! client for as long as it is connected), each on a free port of 127.0.0.1,
//! from a configuration in a temporary directory: any database name maps
//! through to the server (`* = host=… port=…`), the login is the server
//! URL's (its password in the `auth_file`, in plain text, so pgbouncer can
//! answer the server's SCRAM challenge), a few server connections
//! ([`POOL_SIZE`]) are shared by however many clients connect, and the
//! `options` startup parameter is refused, as pgbouncer refuses it by
//! default (only `extra_float_digits` is ignored). Like the cluster, it is
//! removed when the process ends however it ends: a guardian shell, in a
//! process group of its own, starts it and waits for the end of its
//! standard input, which only this process holds open, then kills it and
//! removes the directory. pgbouncer refuses to run as root; as root it
//! runs as `postgres` (or `nobody`), who is given the directory.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use litejob::pg::{Client, NoTls, SimpleQueryMessage};

use super::Missing;

/// Server connections per database and user of the transaction pooler:
/// fewer than the clients a test opens, so that clients share them.
pub const POOL_SIZE: usize = 10;

/// Server connections per database and user of the session pooler: each
/// client holds one for its whole session, so there are enough for the
/// connections of the few processes that use it at once (a queue opens up
/// to `4 × pool_size` and a few of its own; one more waits, up to
/// `query_wait_timeout`, for another client to disconnect).
pub const SESSION_POOL_SIZE: usize = 40;

/// How a pgbouncer hands its server connections to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `pool_mode = transaction`: a server connection for each
    /// transaction, shared by every client ([`POOL_SIZE`] of them).
    Transaction,
    /// `pool_mode = session`: a server connection for the whole of a
    /// client's session ([`SESSION_POOL_SIZE`] of them).
    Session,
}

impl Mode {
    /// Its `pool_mode` setting.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Transaction => "transaction",
            Mode::Session => "session",
        }
    }

    /// Its server connections per database and user.
    pub fn pool_size(self) -> usize {
        match self {
            Mode::Transaction => POOL_SIZE,
            Mode::Session => SESSION_POOL_SIZE,
        }
    }

    /// How long a server connection nobody uses stays open: the session
    /// pooler's are many, and are closed soon so that they do not take the
    /// server's connections from the tests that connect directly.
    fn server_idle_timeout(self) -> u32 {
        match self {
            Mode::Transaction => 600,
            Mode::Session => 5,
        }
    }
}

/// How long a start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The poolers the tests share, once started: the transaction pooler's,
/// then the session pooler's (indexed by [`Mode`]).
static SHARED: [Mutex<Option<Pgbouncer>>; 2] = [const { Mutex::new(None) }; 2];

/// A running pgbouncer.
pub struct Pgbouncer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its directory (configuration, `auth_file`, socket, log), removed
    /// when it stops.
    pub dir: PathBuf,
    /// The login of the server URL it was started for.
    user: String,
    password: Option<String>,
    /// Closing its input stops pgbouncer and removes the directory.
    guardian: Child,
    input: Option<ChildStdin>,
}

impl Pgbouncer {
    /// The URL of its admin console (the `pgbouncer` database).
    pub fn admin_url(&self) -> String {
        let login = match &self.password {
            Some(p) => format!("{}:{}", encode(&self.user), encode(p)),
            None => encode(&self.user),
        };
        format!("postgres://{login}@127.0.0.1:{}/pgbouncer", self.port)
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Kills pgbouncer and waits until its directory is gone.
    pub fn stop(mut self) {
        self.input.take();
        let _ = self.guardian.wait();
    }
}

/// The port of the pooler the tests share, started (in front of
/// [`super::cluster::base_url`]) the first time it is asked for, and
/// checked to answer in transaction mode.
pub fn shared_port() -> Result<u16, Missing> {
    shared_port_of(Mode::Transaction)
}

/// The port of the session pooler the tests share, started (in front of
/// [`super::cluster::base_url`]) the first time it is asked for, and
/// checked to answer in session mode.
pub fn shared_session_port() -> Result<u16, Missing> {
    shared_port_of(Mode::Session)
}

fn shared_port_of(mode: Mode) -> Result<u16, Missing> {
    static PORTS: [OnceLock<Result<u16, Missing>>; 2] = [const { OnceLock::new() }; 2];
    PORTS[mode as usize]
        .get_or_init(|| {
            let bin = installed()?;
            let base = super::cluster::base_url()
                .map_err(|m| Missing::here(format!("no PostgreSQL to pool: {}", m.why)))?;
            let p = start_with(&bin, base, mode).map_err(Missing::here)?;
            let port = p.port;
            *SHARED[mode as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(p);
            Ok(port)
        })
        .clone()
}

/// `url`, a direct URL to the tests' server, through the shared pooler.
/// Panics unless the pooler is here: a test that uses it declares
/// `#[needs(Pgbouncer)]`.
pub fn pooled_url_for(url: &str) -> String {
    super::Need::Pgbouncer.require();
    let port = shared_port().expect("checked");
    rewrite_authority(url, &format!("127.0.0.1:{port}")).unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// `url`, a direct URL to the tests' server, through the shared session
/// pooler, started now if it is not yet. Panics unless pgbouncer is here
/// (a test that uses it declares `#[needs(Pgbouncer)]`) or if it does not
/// start.
pub fn session_pooled_url_for(url: &str) -> String {
    super::Need::Pgbouncer.require();
    let port = shared_session_port()
        .unwrap_or_else(|m| panic!("the session pooler did not start: {}", m.why));
    rewrite_authority(url, &format!("127.0.0.1:{port}")).unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// The shared pooler's admin console (`SHOW POOLS`, `SHOW CONFIG`, …).
pub fn admin_url() -> String {
    super::Need::Pgbouncer.require();
    admin_url_of(Mode::Transaction)
}

/// The shared session pooler's admin console, started now if it is not
/// yet (as [`session_pooled_url_for`]).
pub fn session_admin_url() -> String {
    super::Need::Pgbouncer.require();
    shared_session_port().unwrap_or_else(|m| panic!("the session pooler did not start: {}", m.why));
    admin_url_of(Mode::Session)
}

fn admin_url_of(mode: Mode) -> String {
    let shared = SHARED[mode as usize]
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    shared.as_ref().expect("started").admin_url()
}

/// Stops the shared poolers, if this process started them, and waits until
/// their directories are gone.
pub fn stop() {
    for shared in &SHARED {
        let taken = shared.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = taken {
            p.stop();
        }
    }
}

/// The pgbouncer binary: on the `PATH`, else Debian's `/usr/sbin`.
pub fn installed() -> Result<PathBuf, Missing> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("pgbouncer"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/pgbouncer")).filter(|p| p.is_file()))
        .ok_or_else(|| {
            Missing::here("pgbouncer is not installed (apt-get install pgbouncer)".into())
        })
}

/// Starts a pgbouncer in transaction mode in front of the server
/// `upstream` names (a `postgres://user:password@host:port/db` URL).
pub fn start(upstream: &str) -> Result<Pgbouncer, String> {
    start_mode(upstream, Mode::Transaction)
}

/// Starts a pgbouncer in `mode` in front of the server `upstream` names.
pub fn start_mode(upstream: &str, mode: Mode) -> Result<Pgbouncer, String> {
    let bin = installed().map_err(|m| m.why)?;
    start_with(&bin, upstream, mode)
}

fn start_with(bin: &Path, upstream: &str, mode: Mode) -> Result<Pgbouncer, String> {
    let target = Target::parse(upstream)?;
    // A port can be taken between the look and pgbouncer's bind.
    let mut last = String::new();
    for _ in 0..5 {
        match start_on(bin, &target, free_port()?, mode) {
            Ok(p) => return Ok(p),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// What pgbouncer needs of the server URL.
struct Target {
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let parts = Parts::of(url)?;
        let (userinfo, hostport) = parts
            .authority
            .rsplit_once('@')
            .ok_or_else(|| format!("{}: the URL names no user", redact(url)))?;
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (decode(u), Some(decode(p))),
            None => (decode(userinfo), None),
        };
        // `host`, `host:port`, `[v6]` or `[v6]:port`.
        let (host, port) = match hostport.strip_prefix('[') {
            Some(v6) => {
                let (h, rest) = v6.split_once(']').unwrap_or((v6, ""));
                (h, rest.strip_prefix(':'))
            }
            None => match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            },
        };
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| format!("{}: the port is not a number", redact(url)))?,
            None => 5432,
        };
        let host = host.to_string();
        if host.is_empty() || host.contains(',') || user.is_empty() {
            return Err(format!(
                "{}: a pooler is started in front of one host:port and a user",
                redact(url)
            ));
        }
        Ok(Target {
            host,
            port,
            user,
            password,
        })
    }
}

/// A URL cut where the pooler changes it.
struct Parts<'a> {
    /// `postgres://`.
    scheme: &'a str,
    /// `user:password@host:port`.
    authority: &'a str,
    /// `/db?query`, as it was.
    tail: &'a str,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Result<Parts<'a>, String> {
        let i = url
            .find("://")
            .filter(|_| url.starts_with("postgres://") || url.starts_with("postgresql://"))
            .ok_or_else(|| "not a postgres:// URL".to_string())?;
        let (scheme, rest) = url.split_at(i + 3);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        Ok(Parts {
            scheme,
            authority,
            tail,
        })
    }
}

/// `url` with its host and port replaced by `hostport`.
fn rewrite_authority(url: &str, hostport: &str) -> Result<String, String> {
    let p = Parts::of(url)?;
    let login = p.authority.rsplit_once('@').map(|(u, _)| u);
    Ok(match login {
        Some(u) => format!("{}{u}@{hostport}{}", p.scheme, p.tail),
        None => format!("{}{hostport}{}", p.scheme, p.tail),
    })
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match Parts::of(url) {
        Ok(p) => match p.authority.rsplit_once('@') {
            Some((u, h)) => {
                let user = u.split(':').next().unwrap_or("");
                format!("{}{user}:***@{h}{}", p.scheme, p.tail)
            }
            None => url.to_string(),
        },
        Err(_) => "the URL".into(),
    }
}

/// `%XX` decoded.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Everything but unreserved characters `%XX` encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

/// A quoted value of pgbouncer's `auth_file` (a `"` is doubled).
fn auth_quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Who runs pgbouncer: None for this process's own user, or the
/// unprivileged user (name, uid, gid) when this process is root.
fn pooler_user() -> Result<Option<(String, u32, u32)>, String> {
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
    Err("running as root, and neither a postgres nor a nobody user exists to run pgbouncer".into())
}

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(l.local_addr().unwrap().port())
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

fn write(path: &Path, text: &str, owner: &Option<(String, u32, u32)>) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some((name, uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(*uid), Some(*gid))
            .map_err(|e| format!("chown {} to {name}: {e}", path.display()))?;
    }
    Ok(())
}

fn start_on(bin: &Path, target: &Target, port: u16, mode: Mode) -> Result<Pgbouncer, String> {
    let user = pooler_user()?;
    let dir = tempfile::Builder::new()
        .prefix("litejob-test-pgbouncer-")
        .tempdir()
        .map_err(|e| format!("tempdir: {e}"))?;
    let conf = dir.path().join("pgbouncer.ini");
    let log = dir.path().join("pgbouncer.log");
    let auth = dir.path().join("userlist.txt");
    if let Some((name, uid, gid)) = &user {
        std::os::unix::fs::chown(dir.path(), Some(*uid), Some(*gid))
            .map_err(|e| format!("chown {} to {name}: {e}", dir.path().display()))?;
    }
    let password = target.password.as_deref().unwrap_or("");
    write(
        &auth,
        &format!("{} {}\n", auth_quoted(&target.user), auth_quoted(password)),
        &user,
    )?;
    let auth_type = if target.password.is_some() {
        "scram-sha-256"
    } else {
        "trust"
    };
    write(
        &conf,
        &format!(
            "[databases]\n\
             * = host={host} port={upstream}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir = {dir}\n\
             auth_type = {auth_type}\n\
             auth_file = {auth}\n\
             admin_users = {admin}\n\
             pool_mode = {mode}\n\
             default_pool_size = {pool_size}\n\
             server_idle_timeout = {idle}\n\
             max_client_conn = 1000\n\
             ignore_startup_parameters = extra_float_digits\n\
             query_wait_timeout = 60\n\
             log_connections = 0\n\
             log_disconnections = 0\n",
            host = target.host,
            upstream = target.port,
            dir = dir.path().display(),
            auth = auth.display(),
            admin = target.user,
            mode = mode.name(),
            pool_size = mode.pool_size(),
            idle = mode.server_idle_timeout(),
        ),
        &user,
    )?;
    // From here on the guardian owns the directory's removal.
    let dir = dir.keep();
    let user_prefix = match &user {
        None => String::new(),
        Some((_, uid, gid)) => format!("setpriv --reuid={uid} --regid={gid} --clear-groups -- "),
    };
    let script = format!(
        "{user_prefix}{} {} >>{} 2>&1 </dev/null & p=$!; echo \"$p\"; read -r _; \
         kill -KILL \"$p\" 2>/dev/null; wait \"$p\" 2>/dev/null; rm -rf {}",
        quote(bin),
        quote(&conf),
        quote(&log),
        quote(&dir)
    );
    let guardian = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    let mut guardian = match guardian {
        Ok(g) => g,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("sh: {e}"));
        }
    };
    let input = guardian.stdin.take();
    let stdout = guardian.stdout.take();
    let p = Pgbouncer {
        port,
        dir,
        user: target.user.clone(),
        password: target.password.clone(),
        guardian,
        input,
    };
    let mut pid = String::new();
    let ready = stdout
        .ok_or_else(|| "the guardian has no output".to_string())
        .and_then(|out| {
            BufReader::new(out)
                .read_line(&mut pid)
                .map_err(|e| format!("the guardian: {e}"))
        })
        .and_then(|_| {
            pid.trim()
                .parse::<u32>()
                .map_err(|_| format!("the guardian printed no pid: {pid:?}"))
        })
        .and_then(|pid| wait_ready(&p, pid, mode));
    match ready {
        Ok(()) => Ok(p),
        Err(e) => {
            let log = p.log();
            p.stop();
            Err(format!("pgbouncer on port {port}: {e}\n{log}"))
        }
    }
}

/// Waits until pgbouncer answers on its port in `mode`, or has exited, or
/// [`START_TIMEOUT`] has passed.
fn wait_ready(p: &Pgbouncer, pid: u32, mode: Mode) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        if exited(pid) {
            return Err("pgbouncer exited".into());
        }
        let last = match pool_mode(&p.admin_url()) {
            Ok(m) if m == mode.name() => return Ok(()),
            Ok(m) => return Err(format!("pgbouncer answers in pool_mode {m}")),
            Err(e) => e,
        };
        if t0.elapsed() > START_TIMEOUT {
            return Err(format!(
                "pgbouncer did not answer within {START_TIMEOUT:?}: {last}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` is gone or a zombie.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// `SHOW CONFIG`'s `pool_mode`, read on the admin console (which takes
/// simple queries only).
pub fn pool_mode(admin_url: &str) -> Result<String, String> {
    show_config(admin_url, "pool_mode")
}

/// One setting of `SHOW CONFIG` on the admin console at `admin_url`.
pub fn show_config(admin_url: &str, key: &str) -> Result<String, String> {
    let mut c = Client::connect(admin_url, NoTls).map_err(|e| e.to_string())?;
    let rows = c.simple_query("SHOW CONFIG").map_err(|e| e.to_string())?;
    rows.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) if r.get(0) == Some(key) => r.get(1).map(str::to_string),
            _ => None,
        })
        .ok_or_else(|| format!("SHOW CONFIG has no {key}"))
}

/// The backend of one transaction on `c`, by a simple query (no prepared
/// statement, which would not outlive it behind the pooler).
fn backend(c: &mut Client, sql: &str) -> i64 {
    c.simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).and_then(|v| v.parse().ok()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no number"))
}

child! {
    /// Starts a pgbouncer in front of `LITEJOB_PGBOUNCER_UPSTREAM`, writes
    /// its port and directory to the file `LITEJOB_PGBOUNCER_READY`, and
    /// waits to be killed.
    fn pgbouncer_child() {
        let upstream = std::env::var("LITEJOB_PGBOUNCER_UPSTREAM").expect("upstream");
        let p = start(&upstream).unwrap_or_else(|e| panic!("{e}"));
        let ready = std::env::var("LITEJOB_PGBOUNCER_READY").expect("LITEJOB_PGBOUNCER_READY");
        std::fs::write(&ready, format!("{}\n{}\n", p.port, p.dir.display())).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

it! {
    /// What the pooled tests rely on: the pooler is in transaction mode
    /// with a pool of [`POOL_SIZE`] server connections, more clients than
    /// that are connected and answered at once (a session pooler would
    /// make the extra ones wait for a whole session), two clients'
    /// transactions run on different backends while one is open, and the
    /// `options` startup parameter is refused.
    #[needs(Postgres, Pgbouncer)]
    fn the_tests_pooler_shares_a_few_server_connections_and_refuses_options() {
        let admin = admin_url();
        assert_eq!(pool_mode(&admin).unwrap(), "transaction");
        assert_eq!(
            show_config(&admin, "default_pool_size").unwrap(),
            POOL_SIZE.to_string()
        );
        let base = super::cluster::base_url().unwrap();
        let pooled = pooled_url_for(base);
        assert_ne!(pooled, base);
        let direct_tail = base.split_once('@').unwrap().1.split_once('/').unwrap().1;
        assert!(pooled.ends_with(direct_tail), "{pooled} keeps the database of {base}");

        let mut clients: Vec<Client> = (0..POOL_SIZE * 3)
            .map(|i| {
                Client::connect(&pooled, NoTls)
                    .unwrap_or_else(|e| panic!("client {i} through {pooled}: {e}"))
            })
            .collect();
        let mut backends = std::collections::HashSet::new();
        for round in 0..3 {
            for c in &mut clients {
                let pid = backend(c, "SELECT pg_backend_pid()");
                assert!(pid > 0, "round {round}");
                backends.insert(pid);
            }
        }
        assert!(
            backends.len() <= POOL_SIZE,
            "{} clients ran on {} backends, more than the pool's {POOL_SIZE}",
            clients.len(),
            backends.len()
        );
        let (a, rest) = clients.split_first_mut().unwrap();
        let held = backend(a, "BEGIN; SELECT pg_backend_pid()");
        let other = backend(&mut rest[0], "SELECT pg_backend_pid()");
        assert_ne!(held, other, "a transaction's backend is its own while it is open");
        a.simple_query("COMMIT").unwrap();

        let sep = if pooled.contains('?') { '&' } else { '?' };
        let with_options = format!("{pooled}{sep}options=-csearch_path%3Dpublic");
        let e = Client::connect(&with_options, NoTls).map(drop).unwrap_err();
        let message = e.as_db_error().map(|d| d.message().to_string());
        assert_eq!(
            message.as_deref(),
            Some("unsupported startup parameter: options"),
            "{e:?}"
        );
    }
}

it! {
    /// What the session-mode tests rely on: the session pooler is in
    /// session mode with a pool of [`SESSION_POOL_SIZE`] server
    /// connections, each client keeps one server backend of its own from
    /// one transaction to the next (while another client holds a
    /// transaction open), and the `options` startup parameter is refused
    /// there too.
    #[needs(Postgres, Pgbouncer)]
    fn the_tests_session_pooler_keeps_each_clients_server_connection_and_refuses_options() {
        let admin = session_admin_url();
        assert_eq!(pool_mode(&admin).unwrap(), "session");
        assert_eq!(
            show_config(&admin, "default_pool_size").unwrap(),
            SESSION_POOL_SIZE.to_string()
        );
        let base = super::cluster::base_url().unwrap();
        let pooled = session_pooled_url_for(base);
        assert_ne!(pooled, base);
        assert_ne!(pooled, pooled_url_for(base), "another pooler than the transaction one");

        let mut clients: Vec<Client> = (0..4)
            .map(|i| {
                Client::connect(&pooled, NoTls)
                    .unwrap_or_else(|e| panic!("client {i} through {pooled}: {e}"))
            })
            .collect();
        let first: Vec<i64> = clients
            .iter_mut()
            .map(|c| backend(c, "SELECT pg_backend_pid()"))
            .collect();
        let distinct: std::collections::HashSet<&i64> = first.iter().collect();
        assert_eq!(distinct.len(), clients.len(), "a backend each: {first:?}");
        let (a, rest) = clients.split_first_mut().unwrap();
        let held = backend(a, "BEGIN; SELECT pg_backend_pid()");
        assert_eq!(held, first[0]);
        for round in 0..3 {
            for (c, pid) in rest.iter_mut().zip(&first[1..]) {
                assert_eq!(backend(c, "SELECT pg_backend_pid()"), *pid, "round {round}");
            }
        }
        a.simple_query("COMMIT").unwrap();
        assert_eq!(backend(a, "SELECT pg_backend_pid()"), first[0]);

        let sep = if pooled.contains('?') { '&' } else { '?' };
        let with_options = format!("{pooled}{sep}options=-csearch_path%3Dpublic");
        let e = Client::connect(&with_options, NoTls).map(drop).unwrap_err();
        let message = e.as_db_error().map(|d| d.message().to_string());
        assert_eq!(
            message.as_deref(),
            Some("unsupported startup parameter: options"),
            "{e:?}"
        );
    }
}

it! {
    /// A test process killed outright leaves no pgbouncer and no directory
    /// behind.
    #[needs(Postgres, Pgbouncer)]
    fn a_pooler_is_removed_when_its_test_process_is_killed() {
        let tmp = tempfile::tempdir().unwrap();
        let ready = tmp.path().join("ready");
        let mut child = super::as_child(
            &mut Command::new(crate::reliability::harness::self_exe()),
            "suite::pgbouncer::pgbouncer_child",
        )
        .env("LITEJOB_PGBOUNCER_UPSTREAM", super::cluster::base_url().unwrap())
        .env("LITEJOB_PGBOUNCER_READY", &ready)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
        crate::support::wait_until("the child's pooler is up", crate::support::LONG, || {
            std::fs::read_to_string(&ready).is_ok_and(|s| s.lines().count() == 2)
                || child.try_wait().unwrap().is_some()
        });
        let text = std::fs::read_to_string(&ready).expect("the child started no pooler");
        let mut lines = text.lines();
        let (port, dir) = (lines.next().unwrap(), PathBuf::from(lines.next().unwrap()));
        let base = super::cluster::base_url().unwrap();
        let url = rewrite_authority(base, &format!("127.0.0.1:{port}")).unwrap();
        assert!(Client::connect(&url, NoTls).is_ok(), "{url}");
        crate::reliability::harness::kill(&mut child);
        crate::support::wait_until(
            "the pooler's directory is removed",
            crate::support::LONG,
            || !dir.exists(),
        );
        assert!(
            Client::connect(&url, NoTls).is_err(),
            "the pooler still answers after its process died"
        );
    }
}
