//! `litejob serve`, run as the real binary on a loopback port, a file per
//! behaviour: the pages show what the queue holds, the metrics parse and
//! match it, who may ask and act (token, CSRF, read-only), how it holds up
//! (slow clients, workers on the queue), and the pages in a real browser.
//! What a queue file and a PostgreSQL database share runs on both
//! (`both!`); what only one has (the file's bytes and descriptors, the
//! database's sessions and server) has its own tests.
//!
//! The helpers the files share live here: a server on a free port (it
//! prints the address it bound first), and a small HTTP/1.1 client.

mod access;
mod browser;
mod metrics;
mod pages;
mod robustness;
mod workflow;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use crate::support::{bin, TestDb, LONG};

/// A `litejob serve` child process; killed on drop.
pub struct Server {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Server {
    /// Starts `litejob --db <db> serve --bind 127.0.0.1:0 <args>` and waits
    /// for the address it prints.
    pub fn start(db: &TestDb, args: &[&str]) -> Server {
        Server::on(&db.path.display().to_string(), args)
    }

    /// [`Server::start`] on a queue file's path or a PostgreSQL URL.
    pub fn on(location: &str, args: &[&str]) -> Server {
        let mut cmd = Command::new(bin());
        cmd.arg("--db")
            .arg(location)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(args);
        Server::spawn(cmd)
    }

    /// Starts `cmd`, a `litejob serve` command line (run by another user,
    /// say), and waits for the address it prints.
    pub fn spawn(mut cmd: Command) -> Server {
        let mut child = cmd
            .env_remove("LITEJOB_DB")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn litejob serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep reading, so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let first = rx.recv_timeout(LONG).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("litejob serve printed no address: {:?}", child.wait())
        });
        let addr = first
            .strip_prefix("listening on http://")
            .and_then(|a| a.strip_suffix('/'))
            .unwrap_or_else(|| panic!("first line {first:?}"))
            .to_string();
        Server { child, addr }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], "")
    }

    /// A request with extra headers and a body (a form, for a POST).
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(LONG)).unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if method == "POST" {
            head.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        head.push_str(body);
        s.write_all(head.as_bytes()).expect("send");
        read_reply(&mut s)
    }

    /// The process id, for reading its open files.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first value of a header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts a 200 and returns the body.
    pub fn ok(self) -> String {
        assert_eq!(self.status, 200, "{}", self.body);
        self.body
    }
}

/// Reads one whole answer of a `Connection: close` request.
pub fn read_reply(s: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_string()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn unchunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// The text between `from` and the next `to` after it, in `page`.
pub fn between<'a>(page: &'a str, from: &str, to: &str) -> &'a str {
    let i = page
        .find(from)
        .unwrap_or_else(|| panic!("{from:?} not in the page:\n{page}"));
    let rest = &page[i + from.len()..];
    &rest[..rest.find(to).unwrap_or(rest.len())]
}

/// The numbers of the `<td class="num">` cells in an HTML fragment.
pub fn numbers(fragment: &str) -> Vec<i64> {
    fragment
        .split("<td class=\"num\">")
        .skip(1)
        .map(|cell| {
            let cell = &cell[..cell.find("</td>").unwrap()];
            // The number is the cell's text, inside a link or a span.
            let text: String = strip_tags(cell);
            text.trim().parse().unwrap_or(-1)
        })
        .collect()
}

/// The text of an HTML fragment without its tags.
pub fn strip_tags(s: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for ch in s.chars() {
        match ch {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}
