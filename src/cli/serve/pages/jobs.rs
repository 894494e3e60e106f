//! `/jobs`: jobs newest first, filtered by state, kind, queue and key
//! prefix, paged by id (`before`/`after`), so a page costs the same on the
//! millionth job as on the first.

use litejob::{JobFilter, JobState};

use super::super::html::{pct, url, Html};
use super::super::http::{Req, Resp};
use super::super::routes::App;
use super::{badge, cursor, error, layout, limit, pager, Pager};

/// The jobs page.
pub fn page(app: &App, req: &Req) -> litejob::Result<Resp> {
    let state = match req.param("state").map(str::parse::<JobState>) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return Ok(error(400, &e.to_string())),
    };
    let (limit, before, after) = match (limit(req), cursor(req, "before"), cursor(req, "after")) {
        (Ok(l), Ok(b), Ok(a)) => (l, b, a),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return Ok(r),
    };
    let (kind, queue, prefix) = (req.param("kind"), req.param("queue"), req.param("key"));
    // One more than shown: whether a further page exists.
    let mut f = JobFilter::default().with_state(state).with_limit(limit + 1);
    if let Some(k) = kind {
        f = f.with_kind(k);
    }
    if let Some(q) = queue {
        f = f.with_queue(q);
    }
    if let Some(p) = prefix {
        f = f.with_key_prefix(p);
    }
    if let Some(b) = before {
        f = f.with_before(b);
    } else if let Some(a) = after {
        f = f.with_after(a);
    }
    let now = super::super::super::time::now_ms();
    let mut jobs = app.queue.jobs(&f)?;
    let more = jobs.len() > limit as usize;
    if more {
        // Going newer, the extra row is the newest; going older, the oldest.
        if before.is_none() && after.is_some() {
            jobs.remove(0);
        } else {
            jobs.pop();
        }
    }
    let mut h = Html::new();
    h.raw("<h1>Jobs</h1>");
    filters(&mut h, state, kind, queue, prefix);
    table(&mut h, &jobs, now);
    let state_s = state.map(|s| s.as_str());
    let limit_s = (limit != super::PAGE_ROWS).then(|| limit.to_string());
    let base = [
        ("state", state_s),
        ("kind", kind),
        ("queue", queue),
        ("key", prefix),
        ("limit", limit_s.as_deref()),
    ];
    pager(
        &mut h,
        &base,
        "/jobs",
        Pager {
            first: jobs.first().map(|j| j.id),
            last: jobs.last().map(|j| j.id),
            // Came from an older page: newer ones exist; came going newer:
            // only if the extra row was there.
            newer: before.is_some() || (after.is_some() && more),
            older: if after.is_some() && before.is_none() {
                true
            } else {
                more
            },
        },
    );
    Ok(layout(app, "Jobs", "/jobs", now, h))
}

/// The page's table of jobs, or a line saying none matches.
fn table(h: &mut Html, jobs: &[litejob::Job], now: i64) {
    if jobs.is_empty() {
        h.raw("<p class=\"none\" id=\"empty\">No job matches.</p>");
    } else {
        h.raw("<table id=\"jobs\"><thead><tr><th class=\"num\">id</th><th>state</th>")
            .raw("<th>kind</th><th>queue</th><th class=\"num\">attempts</th>")
            .raw(
                "<th class=\"num\">deliveries</th><th>created</th><th>key</th></tr></thead><tbody>",
            );
        for j in jobs {
            let id = j.id.to_string();
            h.open("tr", &[("data-id", &id)]);
            h.raw("<td class=\"num\">");
            h.link(&format!("/jobs/{id}"), &id);
            h.raw("</td><td>");
            badge(h, j.state.as_str());
            h.raw("</td>");
            h.tag("td", &[], &j.kind);
            h.tag("td", &[], &j.queue);
            h.tag(
                "td",
                &[("class", "num")],
                &format!("{}/{}", j.attempts, j.max_attempts),
            );
            h.tag("td", &[("class", "num")], &j.deliveries.to_string());
            h.raw("<td>");
            h.time(Some(j.created_at), now);
            h.raw("</td><td class=\"key\">");
            h.link(
                &format!("/keys/{}", pct(&j.idempotency_key)),
                &j.idempotency_key,
            );
            h.raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
}

fn filters(
    h: &mut Html,
    state: Option<JobState>,
    kind: Option<&str>,
    queue: Option<&str>,
    prefix: Option<&str>,
) {
    h.raw("<form class=\"filters\" method=\"get\" action=\"/jobs\" id=\"filters\">");
    h.raw("<label>state<select name=\"state\"><option value=\"\">any</option>");
    for s in JobState::ALL {
        let mut attrs = vec![("value", s.as_str())];
        if state == Some(s) {
            attrs.push(("selected", "selected"));
        }
        h.tag("option", &attrs, s.as_str());
    }
    h.raw("</select></label>");
    for (name, label, value) in [
        ("kind", "kind", kind),
        ("queue", "queue", queue),
        ("key", "key starts with", prefix),
    ] {
        h.raw("<label>").text(label);
        h.open(
            "input",
            &[
                ("type", "text"),
                ("name", name),
                ("value", value.unwrap_or("")),
            ],
        );
        h.raw("</label>");
    }
    h.raw("<button type=\"submit\">Filter</button>");
    h.link(&url("/jobs", &[]), "clear");
    h.raw("</form>");
}
