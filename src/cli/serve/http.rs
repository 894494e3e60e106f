//! Requests and responses as the pages see them: the method, the path's
//! segments and the query's pairs, percent-decoded and checked against
//! their limits (a request line too long is 414, a malformed one 400), the
//! headers and cookies, a POST form read within a size cap; and responses
//! with the headers every answer carries.

use std::io::Read;

/// The longest request target (path and query) accepted, in bytes.
pub const MAX_TARGET: usize = 4096;

/// The largest POST body accepted, in bytes (a form sends a token and a
/// path). tiny_http reads a body this small with the request head, on the
/// connection's own thread, so a handler never waits for a slow sender.
pub const MAX_BODY: usize = 1024;

/// A request method the server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET (and HEAD, which tiny_http answers without the body).
    Get,
    /// POST.
    Post,
    /// Anything else: 405.
    Other,
}

/// A request, decoded.
#[derive(Debug)]
pub struct Req {
    /// Its method.
    pub method: Method,
    /// The path's segments, percent-decoded, empty ones dropped.
    pub segments: Vec<String>,
    /// The query's pairs, percent-decoded (`+` is a space).
    pub query: Vec<(String, String)>,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// A POST's form pairs.
    pub form: Vec<(String, String)>,
}

impl Req {
    /// The first value of query parameter `name`, if set and not empty.
    pub fn param(&self, name: &str) -> Option<&str> {
        first(&self.query, name)
    }

    /// The first value of form field `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        first(&self.form, name)
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }
}

fn first<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v.as_str())
}

/// An answer.
#[derive(Debug)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// More headers (`Location`, `Set-Cookie`).
    pub headers: Vec<(&'static str, String)>,
}

impl Resp {
    /// An HTML page.
    pub fn html(status: u16, body: String) -> Resp {
        Resp {
            status,
            content_type: "text/html; charset=utf-8",
            body: body.into_bytes(),
            headers: Vec::new(),
        }
    }

    /// Plain text.
    pub fn text(status: u16, body: impl Into<String>) -> Resp {
        Resp {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
            headers: Vec::new(),
        }
    }

    /// A redirect after a POST (303: the browser GETs `to`).
    pub fn see_other(to: &str) -> Resp {
        let mut r = Resp::text(303, format!("see {to}\n"));
        r.headers.push(("Location", to.to_string()));
        r
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &'static str, value: String) -> Resp {
        self.headers.push((name, value));
        self
    }
}

/// Why a request could not be decoded: its status and the message shown.
#[derive(Debug)]
pub struct Refused(pub u16, pub String);

/// Decodes a tiny_http request (reading a POST's body).
pub fn decode(rq: &mut tiny_http::Request) -> Result<Req, Refused> {
    let target = rq.url();
    if target.len() > MAX_TARGET {
        return Err(Refused(
            414,
            format!("request target longer than {MAX_TARGET} bytes"),
        ));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segments = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(pct_decode)
        .collect::<Result<Vec<_>, _>>()?;
    let query = pairs(query)?;
    let method = match rq.method() {
        tiny_http::Method::Get | tiny_http::Method::Head => Method::Get,
        tiny_http::Method::Post => Method::Post,
        _ => Method::Other,
    };
    let headers = rq
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_ascii_lowercase(),
                h.value.as_str().to_string(),
            )
        })
        .collect();
    let mut form = Vec::new();
    if method == Method::Post {
        match rq.body_length() {
            Some(n) if n <= MAX_BODY => {}
            Some(_) => return Err(Refused(413, format!("request body over {MAX_BODY} bytes"))),
            None => {
                return Err(Refused(
                    411,
                    "a POST needs a Content-Length (no chunked body)".into(),
                ))
            }
        }
        let mut body = Vec::new();
        rq.as_reader()
            .take(MAX_BODY as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| Refused(400, format!("reading the request body: {e}")))?;
        if body.len() > MAX_BODY {
            return Err(Refused(413, format!("request body over {MAX_BODY} bytes")));
        }
        let body = String::from_utf8(body)
            .map_err(|_| Refused(400, "the request body is not UTF-8".into()))?;
        form = pairs(&body)?;
    }
    Ok(Req {
        method,
        segments,
        query,
        headers,
        form,
    })
}

/// `a=1&b=two+words` into pairs.
fn pairs(s: &str) -> Result<Vec<(String, String)>, Refused> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((
                pct_decode(&k.replace('+', " "))?,
                pct_decode(&v.replace('+', " "))?,
            ))
        })
        .collect()
}

/// Decodes `%XX` escapes; the result must be UTF-8.
pub fn pct_decode(s: &str) -> Result<String, Refused> {
    let bad = || Refused(400, format!("bad percent-encoding in {s:?}"));
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Sends `resp`, with the headers every answer carries: no caching, no
/// sniffing, and a content security policy that allows no script at all
/// (a second wall behind the escaping) and forms only to this server.
/// Sends `resp`; false when the client did not take it (it stopped reading
/// past the write timeout): the connection is no use any more.
pub fn send(rq: tiny_http::Request, resp: Resp) -> bool {
    let mut r = tiny_http::Response::from_data(resp.body).with_status_code(resp.status);
    let fixed = [
        ("Content-Type", resp.content_type.to_string()),
        ("Cache-Control", "no-store".to_string()),
        ("X-Content-Type-Options", "nosniff".to_string()),
        ("Referrer-Policy", "no-referrer".to_string()),
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
                .to_string(),
        ),
    ];
    for (name, value) in fixed.into_iter().chain(resp.headers) {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            r.add_header(h);
        }
    }
    // A client gone before its answer is not this server's failure (and
    // tiny_http reports no error for it).
    rq.respond(r).is_ok()
}

/// Lets go of a request without writing anything: what a connection whose
/// client stopped reading gets (tiny_http would otherwise write a 500 for
/// it, and wait the write timeout again).
pub fn discard(rq: tiny_http::Request) {
    drop(rq.into_writer());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_bad_escapes_are_refused() {
        let q = pairs("kind=a+b&key=evt%2F1&empty=&x").unwrap();
        assert_eq!(q[0], ("kind".into(), "a b".into()));
        assert_eq!(q[1], ("key".into(), "evt/1".into()));
        assert_eq!(q[2], ("empty".into(), "".into()));
        assert!(pct_decode("%zz").is_err());
        assert!(pct_decode("%4").is_err());
        assert!(pct_decode("%ff").is_err(), "not UTF-8");
    }
}
