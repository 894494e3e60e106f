//! The pages, one file each, and what they share: the layout (navigation,
//! the embedded style sheet, the mode), badges, count cells that link to
//! the matching job list, action forms (with the CSRF token and the page
//! to come back to), pagers, and the error page.
//!
//! Navigation is [`NAV`]: a page is one entry there and one file here.

pub mod failures;
pub mod job;
pub mod jobs;
pub mod key;
pub mod outbox;
pub mod overview;
pub mod schedules;
pub mod workflow;

use super::html::{url, Html};
use super::http::Resp;
use super::routes::App;

/// The style sheet, embedded in every page (one request per page).
const STYLE: &str = include_str!("../style.css");

/// The navigation: path and title.
pub const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/failures", "Failures"),
    ("/outbox", "Outbox"),
    ("/schedules", "Schedules"),
];

/// The rows a list page shows by default, and at most.
pub const PAGE_ROWS: u32 = 50;
const MAX_PAGE_ROWS: u32 = 500;

/// A whole page around `body`.
pub fn layout(app: &App, title: &str, active: &str, now: i64, body: Html) -> Resp {
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        // No favicon request (it would be a 404 in the browser's console).
        .raw("<link rel=\"icon\" href=\"data:,\">");
    h.tag("title", &[], &format!("{title} · litejob"));
    h.raw("<style>")
        .raw(STYLE)
        .raw("</style></head><body><header>");
    h.raw("<span class=\"brand\">litejob</span><nav>");
    for (path, name) in NAV {
        let class = if *path == active { "on" } else { "" };
        h.tag("a", &[("href", path), ("class", class)], name);
    }
    h.raw("</nav>");
    h.tag("span", &[("class", "file")], app.queue.location());
    if app.actions {
        h.raw("<span class=\"mode live\" id=\"mode\">actions allowed</span>");
    } else {
        h.raw("<span class=\"mode\" id=\"mode\">read-only</span>");
    }
    h.raw("</header><main>");
    h.append(body);
    h.raw("</main><footer>read ");
    h.time(Some(now), now);
    h.raw(" · times in UTC</footer></body></html>");
    Resp::html(200, h.finish())
}

/// The error page: its status and what happened, in plain words.
pub fn error(status: u16, msg: &str) -> Resp {
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<link rel=\"icon\" href=\"data:,\">");
    h.tag("title", &[], &format!("{status} · litejob"));
    h.raw("<style>")
        .raw(STYLE)
        .raw("</style></head><body><main>");
    h.tag("h1", &[], &format!("{status} {}", reason(status)));
    h.tag("p", &[("id", "error")], msg);
    h.raw("<p><a href=\"/\">Overview</a></p></main></body></html>");
    Resp::html(status, h.finish())
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// A state or outcome as a coloured badge.
pub fn badge(h: &mut Html, word: &str) {
    let class = format!("badge s-{word}");
    h.tag("span", &[("class", &class)], word);
}

/// A count in a table cell, linking to the jobs it counts (none for 0).
pub fn count_cell(h: &mut Html, n: i64, href: &str) {
    h.raw("<td class=\"num\">");
    if n == 0 {
        h.raw("<span class=\"none\">0</span>");
    } else {
        h.link(href, &n.to_string());
    }
    h.raw("</td>");
}

/// A POST button for an action on `path`, with the CSRF token and the page
/// to come back to; nothing when actions are off.
pub fn action(h: &mut Html, app: &App, path: &str, back: &str, label: &str, danger: bool) {
    if !app.actions {
        return;
    }
    h.open(
        "form",
        &[("class", "inline"), ("method", "post"), ("action", path)],
    );
    h.open(
        "input",
        &[("type", "hidden"), ("name", "csrf"), ("value", &app.csrf)],
    );
    h.open(
        "input",
        &[("type", "hidden"), ("name", "back"), ("value", back)],
    );
    let class = if danger { "danger" } else { "" };
    h.tag("button", &[("type", "submit"), ("class", class)], label);
    h.close("form");
}

/// The note an action leaves on the page it comes back to.
pub fn flash(h: &mut Html, done: Option<&str>) {
    let msg = match done {
        Some("retried") => "Requeued with a fresh attempt budget.",
        Some("cancelled") => "Cancelled: it will not run, nor will the jobs that depend on it.",
        Some("paused") => "Paused: nothing new of the queue starts; its running jobs finish.",
        Some("resumed") => "Resumed: its jobs start again (a cap or a rate stays in force).",
        _ => return,
    };
    h.tag("p", &[("class", "flash"), ("id", "flash")], msg);
}

/// Newer / older links for a list shown newest first: `first` and `last`
/// are the ids on the page, `more` whether an older page exists.
pub fn pager(h: &mut Html, base: &[(&str, Option<&str>)], path: &str, page: Pager) {
    h.raw("<div class=\"pager\">");
    if page.newer {
        if let Some(first) = page.first {
            let a = first.to_string();
            let mut q = base.to_vec();
            q.push(("after", Some(&a)));
            h.tag("a", &[("href", &url(path, &q)), ("id", "newer")], "← newer");
        }
    }
    if page.older {
        if let Some(last) = page.last {
            let b = last.to_string();
            let mut q = base.to_vec();
            q.push(("before", Some(&b)));
            h.tag("a", &[("href", &url(path, &q)), ("id", "older")], "older →");
        }
    }
    h.raw("</div>");
}

/// Where a page of a list stands.
pub struct Pager {
    /// The first (newest) id shown.
    pub first: Option<i64>,
    /// The last (oldest) id shown.
    pub last: Option<i64>,
    /// A newer page exists.
    pub newer: bool,
    /// An older page exists.
    pub older: bool,
}

/// The page size asked for (`limit`), within bounds; a bad one is 400.
pub fn limit(req: &super::http::Req) -> Result<u32, Resp> {
    match req.param("limit") {
        None => Ok(PAGE_ROWS),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if (1..=MAX_PAGE_ROWS).contains(&n) => Ok(n),
            _ => Err(error(
                400,
                &format!("limit must be 1 to {MAX_PAGE_ROWS}, not {s:?}"),
            )),
        },
    }
}

/// A cursor (`before`, `after`) from the query; a bad one is 400.
pub fn cursor(req: &super::http::Req, name: &str) -> Result<Option<i64>, Resp> {
    match req.param(name) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(error(400, &format!("{name} must be an id, not {s:?}"))),
        },
    }
}
