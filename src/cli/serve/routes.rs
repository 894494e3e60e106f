//! Which page answers what: the token check first, then the method and
//! path. GETs only read; a POST is an action (retry a dead job, cancel a
//! queued or waiting one with its dependents, retry a dead outbox row,
//! pause or resume a queue), refused (403, nothing written) unless
//! actions are allowed and its form carries this process's CSRF token.
//! Unknown paths are 404, a bad id or an empty queue name 400, a known
//! path with the wrong method 405.

use litejob::admin::{AnyQueue, EngineKind};
use litejob::Error;

use super::auth;
use super::http::{self, Method, Refused, Req, Resp};
use super::pages;

/// What every request handler shares.
pub struct App {
    /// The queue: read-only unless actions are allowed.
    pub queue: AnyQueue,
    /// `--token`, if set.
    pub token: Option<String>,
    /// This process's CSRF token, carried by every action form.
    pub csrf: String,
    /// `--allow-actions`.
    pub actions: bool,
}

impl App {
    /// The state of a server.
    pub fn new(queue: AnyQueue, token: Option<String>, csrf: String, actions: bool) -> App {
        App {
            queue,
            token,
            csrf,
            actions,
        }
    }
}

/// Decodes, answers and sends one request; false when the client did not
/// take the answer.
pub fn answer(app: &App, mut rq: tiny_http::Request) -> bool {
    let resp = match http::decode(&mut rq) {
        Ok(req) => route(app, &req),
        Err(Refused(status, msg)) => pages::error(status, &msg),
    };
    http::send(rq, resp)
}

/// The answer to a decoded request.
pub fn route(app: &App, req: &Req) -> Resp {
    let seg: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    if seg == ["login"] {
        return login(app, req);
    }
    if !auth::allowed(req, app.token.as_deref()) {
        return pages::error(
            401,
            "this server needs its token: send `Authorization: Bearer <token>`, \
             or open /login?token=<token> once in the browser",
        )
        .with_header("WWW-Authenticate", "Bearer".into());
    }
    let r = match (req.method, seg.as_slice()) {
        (Method::Get, []) => pages::overview::page(app, req),
        (Method::Get, ["jobs"]) => pages::jobs::page(app, req),
        (Method::Get, ["jobs", id]) => match parse_id(id) {
            Ok(id) => pages::job::page(app, req, id),
            Err(r) => Ok(r),
        },
        (Method::Get, ["keys", ..]) => pages::key::page(app, req, &req.segments[1..].join("/")),
        (Method::Get, ["failures"]) => pages::failures::page(app),
        (Method::Get, ["outbox"]) => pages::outbox::page(app, req),
        (Method::Get, ["schedules"]) => pages::schedules::page(app),
        (Method::Get, ["metrics"]) => metrics(app),
        (Method::Get, ["healthz"]) => Ok(health(app)),
        (Method::Post, ["jobs", id, action]) => {
            act(app, req, parse_id(id), |q, id| match *action {
                "retry" => Some(q.admin().retry_job(id).map(|()| "retried")),
                "cancel" => Some(q.admin().cancel_job(id).map(|_| "cancelled")),
                _ => None,
            })
        }
        (Method::Post, ["outbox", id, "retry"]) => act(app, req, parse_id(id), |q, id| {
            Some(q.admin().retry_outbox(id).map(|()| "retried"))
        }),
        (Method::Post, ["queues", name, action]) => {
            act(app, req, queue_name(name), |q, name| match *action {
                "pause" => Some(q.admin().pause_queue(name).map(|()| "paused")),
                "resume" => Some(q.admin().resume_queue(name).map(|()| "resumed")),
                _ => None,
            })
        }
        // `/queues//pause`: the empty segment is dropped, the name is empty.
        (Method::Post, ["queues", "pause" | "resume"]) => {
            act(app, req, queue_name(""), |_, _| None)
        }
        (_, path) if known(path) => Ok(pages::error(405, "method not allowed here")),
        _ => Ok(pages::error(404, "no such page")),
    };
    r.unwrap_or_else(|e| lib_error(&e))
}

/// Paths that exist for some method.
fn known(path: &[&str]) -> bool {
    matches!(
        path,
        [] | ["jobs"]
            | ["jobs", _]
            | ["jobs", _, "retry" | "cancel"]
            | ["keys", ..]
            | ["failures"]
            | ["outbox"]
            | ["outbox", _, "retry"]
            | ["queues", _, "pause" | "resume"]
            | ["queues", "pause" | "resume"]
            | ["schedules"]
            | ["metrics"]
            | ["healthz"]
    )
}

/// A row id from the path: a positive integer, or 400.
fn parse_id(s: &str) -> Result<i64, Resp> {
    match s.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(pages::error(
            400,
            &format!("{s:?} is not an id: ids are positive integers"),
        )),
    }
}

/// A queue's name from the path (percent-decoded already): not blank, or
/// 400.
fn queue_name(s: &str) -> Result<&str, Resp> {
    if s.trim().is_empty() {
        return Err(pages::error(400, "the queue's name is empty"));
    }
    Ok(s)
}

/// An action on `target` (a row id, a queue's name, parsed from the path):
/// refused unless [`may_act`]; then a bad target is answered (400), or `f`
/// writes through the queue and says what it did, and the browser goes
/// back to the page the form was on (its `back` field). `f` returns `None`
/// for an action it does not know.
fn act<T>(
    app: &App,
    req: &Req,
    target: Result<T, Resp>,
    f: impl FnOnce(&AnyQueue, T) -> Option<litejob::Result<&'static str>>,
) -> litejob::Result<Resp> {
    if let Err(refused) = may_act(app, req) {
        return Ok(refused);
    }
    let target = match target {
        Ok(t) => t,
        Err(r) => return Ok(r),
    };
    match f(&app.queue, target) {
        None => Ok(pages::error(404, "no such action")),
        Some(Ok(done)) => {
            let back = back_to(req.field("back"));
            let sep = if back.contains('?') { '&' } else { '?' };
            Ok(Resp::see_other(&format!("{back}{sep}done={done}")))
        }
        Some(Err(e)) => Ok(lib_error(&e)),
    }
}

/// Whether a POST may write: actions are allowed and its form carries
/// this process's CSRF token; otherwise the 403 that says which is missing.
fn may_act(app: &App, req: &Req) -> Result<(), Resp> {
    if !app.actions {
        return Err(pages::error(
            403,
            "actions are off: this server was started without --allow-actions, and the file \
             is open read-only",
        ));
    }
    if !req.field("csrf").is_some_and(|t| auth::same(t, &app.csrf)) {
        return Err(pages::error(
            403,
            "this form is missing this server's CSRF token (or it is from another server \
             process): reload the page and try again",
        ));
    }
    Ok(())
}

/// Where to go after an action: the form's own page, if it is a path on
/// this server (never `//host` or a scheme: no redirect elsewhere).
fn back_to(back: Option<&str>) -> String {
    match back {
        Some(b)
            if b.starts_with('/')
                && !b.starts_with("//")
                && !b.contains('\\')
                && !b.chars().any(char::is_control) =>
        {
            b.into()
        }
        _ => "/".into(),
    }
}

/// A library failure as a page: not found 404, a refused state 409, a busy
/// file or an unreachable database server 503, anything else 500.
fn lib_error(e: &Error) -> Resp {
    let status = match e {
        Error::NotFound(_) => 404,
        Error::WrongState { .. } => 409,
        Error::InvalidInput(_) => 400,
        Error::Busy(_) | Error::Connection(_) => 503,
        _ => 500,
    };
    pages::error(status, &e.to_string())
}

/// `/login?token=T`: sets the cookie and goes to the overview.
fn login(app: &App, req: &Req) -> Resp {
    let Some(token) = &app.token else {
        return Resp::see_other("/");
    };
    match req.param("token") {
        Some(t) if auth::same(t, token) => Resp::see_other("/").with_header(
            "Set-Cookie",
            format!("{}={t}; Path=/; HttpOnly; SameSite=Strict", auth::COOKIE),
        ),
        _ => pages::error(403, "wrong or missing token"),
    }
}

/// `/metrics`: the library's Prometheus text.
fn metrics(app: &App) -> litejob::Result<Resp> {
    let mut r = Resp::text(200, app.queue.admin().metrics()?);
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    Ok(r)
}

/// `/healthz`: 200 when a read of the queue succeeds (the file is there;
/// the database server answers), and finds litejob's tables.
fn health(app: &App) -> Resp {
    let path = std::path::Path::new(app.queue.location());
    if app.queue.engine() == EngineKind::Sqlite && !path.is_file() {
        return Resp::text(503, format!("unhealthy: {} is gone\n", path.display()));
    }
    match app.queue.schema_version() {
        Ok(0) => Resp::text(
            503,
            format!("unhealthy: {}: no litejob tables\n", app.queue.location()),
        ),
        Ok(v) => Resp::text(200, format!("ok: schema version {v}\n")),
        Err(e) => Resp::text(503, format!("unhealthy: {e}\n")),
    }
}
