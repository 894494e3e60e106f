//! A TCP proxy between litejob and the test server that a test can cut
//! (every connection closed, new ones refused) and restore, standing in
//! for a server that goes away (a restart, a failover, a network cut);
//! and that can drop the server's notifications, like a pooler in
//! transaction mode does. Threads and `std::net` only.
//!
//! It can also hold back, for good, the answer to one kind of statement (a
//! claim the server committed), so that the cut after it loses an answer
//! whose write happened — a connection breaking at the worst moment.
//!
//! Both streams are read as PostgreSQL frames (a type byte and a
//! big-endian length that counts itself): a NotificationResponse is type
//! `A`, a row `D`, the end of an answer `Z`; a request's SQL is in its
//! `Q` (simple query) or `P` (parse, named, then bound with `B`). A
//! client's request for TLS (litejob's default `sslmode=prefer` asks) is
//! answered `N` by the proxy itself, as a proxy without TLS would, so after
//! the client's startup packet both streams are frames in the clear.

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the proxy's threads share with the test.
#[derive(Default)]
struct State {
    up: AtomicBool,
    drop_notifications: AtomicBool,
    /// While set, the answer to a statement whose text holds this and
    /// that returned rows is held back until the next cut.
    hold_marker: Mutex<Option<String>>,
    answers_held: AtomicU64,
    stopping: AtomicBool,
    /// Both ends of every live connection, to close them on a cut.
    streams: Mutex<Vec<TcpStream>>,
    accepted: AtomicU64,
    refused: AtomicU64,
    notifications_passed: AtomicU64,
    notifications_dropped: AtomicU64,
}

/// A running proxy; dropping it closes everything.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`), up.
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        state.up.store(true, Ordering::SeqCst);
        let upstream = upstream.to_string();
        let s = state.clone();
        let acceptor = std::thread::Builder::new()
            .name("test-proxy-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    if !s.up.load(Ordering::SeqCst) {
                        s.refused.fetch_add(1, Ordering::Relaxed);
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    s.accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    {
                        let mut streams = s.streams.lock().unwrap();
                        streams.push(client.try_clone().unwrap());
                        streams.push(server.try_clone().unwrap());
                    }
                    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let armed = Arc::new(AtomicBool::new(false));
                    let (st, a) = (s.clone(), armed.clone());
                    std::thread::spawn(move || pump_requests(client, server, &st, &a));
                    let st = s.clone();
                    std::thread::spawn(move || pump_frames(s2, c2, &st, &armed));
                }
            })
            .unwrap();
        Proxy {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// `url` (of the upstream server) with its host and port replaced by
    /// the proxy's.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (userinfo, hostpart) = rest.rsplit_once('@').unwrap();
        let path = hostpart.find('/').map_or("", |i| &hostpart[i..]);
        format!("{scheme}://{userinfo}@{}{path}", self.addr)
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.state.up.store(false, Ordering::SeqCst);
        for s in self.state.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.state.up.store(true, Ordering::SeqCst);
    }

    /// Whether NotificationResponse messages are dropped from now on.
    pub fn drop_notifications(&self, on: bool) {
        self.state.drop_notifications.store(on, Ordering::SeqCst);
    }

    /// From now on, the answer to a statement whose SQL contains `marker`
    /// and that returned rows is held back (the server ran and committed
    /// it) until the next [`Proxy::cut`] loses it; that connection's
    /// later traffic waits behind it. `None` stops holding new ones.
    pub fn hold_answers_to(&self, marker: Option<&str>) {
        *self.state.hold_marker.lock().unwrap() = marker.map(str::to_string);
    }

    /// Answers held back so far.
    pub fn answers_held(&self) -> u64 {
        self.state.answers_held.load(Ordering::SeqCst)
    }

    /// Connections refused while cut.
    pub fn refused(&self) -> u64 {
        self.state.refused.load(Ordering::Relaxed)
    }

    /// Notifications passed on to a client.
    pub fn notifications_passed(&self) -> u64 {
        self.state.notifications_passed.load(Ordering::Relaxed)
    }

    /// Notifications dropped.
    pub fn notifications_dropped(&self) -> u64 {
        self.state.notifications_dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        self.cut();
        // Wake the acceptor so it sees `stopping`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Reads one typed frame (type byte, length counting itself, body).
fn read_frame(r: &mut impl Read, frame: &mut Vec<u8>) -> bool {
    let mut head = [0u8; 5];
    if r.read_exact(&mut head).is_err() {
        return false;
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len < 4 {
        return false;
    }
    frame.clear();
    frame.extend_from_slice(&head);
    frame.resize(1 + len, 0);
    r.read_exact(&mut frame[5..]).is_ok()
}

/// The NUL-terminated strings at the start of a frame's body.
fn strings(body: &[u8], n: usize) -> Vec<String> {
    body.split(|b| *b == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Client to server, frame by frame after the startup packet (which has
/// no type byte): a statement whose SQL holds the hold marker, run with
/// `Q` or bound with `B` (its text learnt from its `P`), arms the
/// connection's answer to be held.
fn pump_requests(from: TcpStream, mut to: TcpStream, s: &State, armed: &AtomicBool) {
    let mut r = BufReader::with_capacity(64 * 1024, from.try_clone().unwrap());
    let mut parsed: std::collections::HashMap<String, String> = Default::default();
    let mut frame = Vec::with_capacity(8192);
    let mut len = [0u8; 4];
    // The SSLRequest: a length of 8 and the code 80877103.
    const SSL_REQUEST: [u8; 4] = 80_877_103u32.to_be_bytes();
    let mut startup = || {
        if r.read_exact(&mut len).is_err() {
            return None;
        }
        let n = u32::from_be_bytes(len) as usize;
        let mut rest = vec![0u8; n.saturating_sub(4)];
        r.read_exact(&mut rest).ok().map(|()| rest)
    };
    let mut first = startup();
    if first.as_deref() == Some(&SSL_REQUEST[..]) && (&from).write_all(b"N").is_ok() {
        first = startup();
    }
    let startup_ok =
        first.is_some_and(|rest| to.write_all(&len).is_ok() && to.write_all(&rest).is_ok());
    while startup_ok && read_frame(&mut r, &mut frame) {
        let body = &frame[5..];
        let sql = match frame[0] {
            b'P' => {
                let f = strings(body, 2);
                parsed.insert(f[0].clone(), f.get(1).cloned().unwrap_or_default());
                None
            }
            b'B' => strings(body, 2)
                .get(1)
                .and_then(|st| parsed.get(st).cloned()),
            b'Q' => strings(body, 1).pop(),
            _ => None,
        };
        if let (Some(sql), Some(marker)) = (sql, s.hold_marker.lock().unwrap().as_deref()) {
            if sql.contains(marker) {
                armed.store(true, Ordering::SeqCst);
            }
        }
        if to.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Server to client, frame by frame: notifications dropped when asked;
/// an armed connection's next answer (up to its ReadyForQuery) gathered,
/// and held back for good if it carries rows.
fn pump_frames(from: TcpStream, mut to: TcpStream, s: &State, armed: &AtomicBool) {
    let mut r = BufReader::with_capacity(64 * 1024, from.try_clone().unwrap());
    let mut frame = Vec::with_capacity(8192);
    let mut answer: Vec<u8> = Vec::new();
    let mut rows = false;
    while read_frame(&mut r, &mut frame) {
        if frame[0] == b'A' {
            if s.drop_notifications.load(Ordering::SeqCst) {
                s.notifications_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            s.notifications_passed.fetch_add(1, Ordering::Relaxed);
        }
        if armed.load(Ordering::SeqCst) {
            answer.extend_from_slice(&frame);
            rows |= frame[0] == b'D';
            if frame[0] != b'Z' {
                continue;
            }
            armed.store(false, Ordering::SeqCst);
            if rows {
                s.answers_held.fetch_add(1, Ordering::SeqCst);
                // Lost with the connection at the next cut.
                while s.up.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                break;
            }
            if to.write_all(&answer).is_err() {
                break;
            }
            answer.clear();
            continue;
        }
        if to.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
