//! `litejob serve`: a dashboard to look at, metrics to alert on, and a
//! health check, over HTTP from the queue file or PostgreSQL database.
//! Writes nothing unless `--allow-actions`: the queue is opened read-only
//! (a file: no writer, no write lock, ever; PostgreSQL: read-only sessions,
//! no notifier); with actions the repairs go through the queue like the
//! command's `retry` and `cancel`, and every page is read before it is
//! rendered, so no transaction is open while a page is built.
//!
//! The parts: [`http`] (requests, limits, responses), [`auth`] (the token
//! and the CSRF token), [`routes`] (which page answers what), [`pages`]
//! (one file per page), [`html`] (the escaping builder), [`svg`] (charts),
//! [`graph`] (a workflow drawn).
//!
//! Threads: tiny_http reads each connection's request head on a thread of
//! its own pool (so a slow client holds only its own), and [`HANDLERS`]
//! threads here answer the requests it hands over, one connection's
//! requests in order on one thread at a time (a client that pipelines
//! requests and reads none of the answers holds one handler, not all).
//! Every connection has a write timeout, so a client that stops reading
//! lets go of its handler, and its connection is then dead: what it
//! pipelined is dropped unanswered, without waiting the timeout again for
//! each. The few bytes of a form's body are read by tiny_http with the
//! head (a larger body is refused unread).

mod auth;
mod graph;
mod html;
mod http;
mod pages;
mod routes;
mod svg;

use litejob::__command::lock;
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litejob::admin::AnyQueue;
use litejob::{Error, QueueOptions};

use super::time::parse_duration;
use super::{CliError, CliResult};

pub use routes::App;

/// Threads that answer requests.
pub const HANDLERS: usize = 4;

/// Flags of `litejob serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    litejob --db /var/lib/app/jobs.db serve\n  \
    litejob serve --bind 0.0.0.0:7878 --token \"$(cat /etc/litejob/token)\" --allow-actions\n\n\
    Pages: / (overview), /jobs, /jobs/ID, /keys/KEY, /failures, /outbox, /schedules.\n\
    Also /metrics (Prometheus text) and /healthz (200, or 503 when the queue cannot be read).\n\
    --db takes a file or a postgres:// URL.\n\
    The first line on stdout is the address it listens on.")]
pub struct ServeArgs {
    /// Address and port to listen on (port 0: any free port). A non-loopback
    /// address requires --token.
    #[arg(long, default_value = "127.0.0.1:7878", value_name = "ADDR")]
    pub bind: SocketAddr,
    /// Every request must carry this token: `Authorization: Bearer T`, or
    /// the cookie set by visiting /login?token=T.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
    /// Offer the repairs as buttons (retry a dead job or outbox row, cancel
    /// a queued or waiting job). Without it the queue is opened read-only.
    #[arg(long)]
    pub allow_actions: bool,
    /// How long an answer may wait for a client that does not read it.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DUR")]
    pub timeout: Duration,
}

/// Runs the server until Ctrl-C or SIGTERM.
// Long: the checks of the arguments, the open, the listener and the
// accept loop, in the order an operator sees their messages.
pub fn run(db: &Path, a: &ServeArgs) -> CliResult<i32> {
    if let Some(t) = &a.token {
        auth::check_token(t).map_err(CliError::Input)?;
    }
    if !a.bind.ip().is_loopback() && a.token.is_none() {
        return Err(CliError::Input(format!(
            "--bind {} is not a loopback address: anyone who can reach it would see the queue; \
             set --token T (or bind 127.0.0.1)",
            a.bind
        )));
    }
    if a.timeout.is_zero() {
        return Err(CliError::Input("--timeout must be more than 0".into()));
    }
    let queue = open(db, a.allow_actions)?;
    let location = queue.location().to_string();
    let listener = TcpListener::bind(a.bind)
        .map_err(|e| CliError::Failed(format!("cannot listen on {}: {e}", a.bind)))?;
    set_timeouts(&listener, a.timeout)?;
    let addr = listener.local_addr()?;
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| CliError::Failed(format!("cannot serve on {addr}: {e}")))?;
    let app = Arc::new(App::new(
        queue,
        a.token.clone(),
        auth::random_token()?,
        a.allow_actions,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst)) {
        log::warn!("serve: no signal handler ({e}); Ctrl-C stops at once");
    }
    // The address first, alone on its line: a script (or a test that asked
    // for port 0) reads where to connect.
    say(&format!("listening on http://{addr}/"))?;
    say(&format!(
        "serving {} {}",
        location,
        if a.allow_actions {
            "with actions allowed"
        } else {
            "read-only"
        }
    ))?;
    let server = Arc::new(server);
    let busy = Arc::new(Busy::default());
    let failed = Arc::new(std::sync::Mutex::new(None::<String>));
    let threads: Vec<_> = (0..HANDLERS)
        .map(|i| {
            let (server, app, stop) = (server.clone(), app.clone(), stop.clone());
            let (busy, failed) = (busy.clone(), failed.clone());
            std::thread::Builder::new()
                .name(format!("litejob-http-{i}"))
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        match server.recv_timeout(Duration::from_millis(200)) {
                            Ok(Some(rq)) => busy.answer(&app, rq),
                            Ok(None) => {}
                            // tiny_http stops accepting after any accept
                            // error: exit, so a supervisor restarts it,
                            // rather than run on deaf.
                            Err(e) => {
                                *lock(&failed) = Some(e.to_string());
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = lock(&failed).take() {
        return Err(CliError::Failed(format!(
            "the server stopped accepting connections: {e}"
        )));
    }
    Ok(0)
}

/// How long a request waits for a PostgreSQL connection (the pool's wait,
/// the connect timeout): `/healthz` answers 503 within about this long when
/// the server is down.
const PG_WAIT: Duration = Duration::from_secs(5);

/// Opens the queue `--db` names, read-only unless actions are allowed. A
/// file must exist; a database must hold litejob's tables: serve never
/// creates a queue (a typo in `--db` must not make an empty one).
fn open(db: &Path, actions: bool) -> CliResult<AnyQueue> {
    if let Some(url) = db.to_str().filter(|_| super::is_url(db)) {
        let opts = || QueueOptions::default().with_busy_timeout(PG_WAIT);
        // Read-only first: it refuses a database without the tables,
        // where a read-write open would create them.
        let read_only = AnyQueue::open_with(url, opts().with_read_only(true));
        if !actions {
            return Ok(read_only?);
        }
        return match read_only {
            // An older schema is migrated, as a file is by a read-write open.
            Ok(_) | Err(Error::Open(_)) => Ok(AnyQueue::open_with(url, opts())?),
            Err(e) => Err(e.into()),
        };
    }
    if !db.exists() {
        return Err(CliError::Failed(format!(
            "no queue file at {} (create it with `litejob --db {} init`, or set --db / LITEJOB_DB)",
            db.display(),
            db.display()
        )));
    }
    let opts = QueueOptions::default().with_read_only(!actions);
    Ok(AnyQueue::open_with(db, opts)?)
}

/// The connections a handler is answering, each with the requests that
/// came in on it meanwhile: they wait for that handler instead of taking
/// another one (an HTTP connection answers in order anyway). A connection
/// whose client stopped reading (an answer hit the write timeout) is dead:
/// its waiting requests and the ones it sends after are let go unanswered,
/// at once, rather than each holding a handler for another write timeout
/// while other clients wait.
#[derive(Default)]
struct Busy(std::sync::Mutex<HashMap<SocketAddr, Conn>>);

/// A connection a handler is on, or one found dead (and when it last sent
/// a request).
enum Conn {
    Answering(VecDeque<tiny_http::Request>),
    Dead(Instant),
}

/// How long a dead connection's mark outlives its last request (a closed
/// client's port is not reused for a new connection that soon).
const DEAD_FOR: Duration = Duration::from_secs(60);

impl Busy {
    fn answer(&self, app: &App, rq: tiny_http::Request) {
        let Some(conn) = rq.remote_addr().copied() else {
            routes::answer(app, rq);
            return;
        };
        {
            let mut busy = lock(&self.0);
            busy.retain(|_, c| !matches!(c, Conn::Dead(at) if at.elapsed() > DEAD_FOR));
            match busy.get_mut(&conn) {
                Some(Conn::Answering(waiting)) => {
                    waiting.push_back(rq);
                    return;
                }
                Some(Conn::Dead(at)) => {
                    *at = Instant::now();
                    drop(busy);
                    http::discard(rq);
                    return;
                }
                None => {
                    busy.insert(conn, Conn::Answering(VecDeque::new()));
                }
            }
        }
        let mut next = Some(rq);
        while let Some(rq) = next {
            let taken = routes::answer(app, rq);
            let mut busy = lock(&self.0);
            if !taken {
                let dead = busy.insert(conn, Conn::Dead(Instant::now()));
                drop(busy);
                if let Some(Conn::Answering(waiting)) = dead {
                    waiting.into_iter().for_each(http::discard);
                }
                return;
            }
            next = match busy.get_mut(&conn) {
                Some(Conn::Answering(waiting)) => waiting.pop_front(),
                _ => None,
            };
            if next.is_none() {
                busy.remove(&conn);
            }
        }
    }
}

/// One line on stdout, flushed at once (stdout is a pipe under a test or
/// a service manager, where it would otherwise wait in a buffer).
fn say(line: &str) -> CliResult {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// A write timeout on the listening socket: Linux copies it to every
/// connection it accepts, which tiny_http then writes with plain blocking
/// calls (it sets no timeout of its own). Not a read timeout: accept()
/// obeys that one, and tiny_http stops accepting at its first error.
fn set_timeouts(listener: &TcpListener, d: Duration) -> CliResult {
    use nix::sys::socket::{setsockopt, sockopt};
    let tv = nix::sys::time::TimeVal::new(d.as_secs() as _, d.subsec_micros() as _);
    setsockopt(listener, sockopt::SendTimeout, &tv)
        .map_err(|e| CliError::Failed(format!("setting the socket's write timeout: {e}")))?;
    Ok(())
}
