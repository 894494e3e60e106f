//! `/outbox`: outbox rows newest first, filtered by state and paged by id,
//! with a retry button on each dead row when actions are allowed.

use litejob::{OutboxRow, OutboxState};

use super::super::html::{url, Html};
use super::super::http::{Req, Resp};
use super::super::routes::App;
use super::{action, badge, cursor, error, flash, layout, limit, pager, Pager};

/// The outbox page.
pub fn page(app: &App, req: &Req) -> litejob::Result<Resp> {
    let state = match req.param("state").map(str::parse::<OutboxState>) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return Ok(error(400, &e.to_string())),
    };
    let (limit, before, after) = match (limit(req), cursor(req, "before"), cursor(req, "after")) {
        (Ok(l), Ok(b), Ok(a)) => (l, b, a),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return Ok(r),
    };
    let now = super::super::super::time::now_ms();
    let after = if before.is_some() { None } else { after };
    let mut rows = app
        .queue
        .admin()
        .outbox_page(state, before, after, limit + 1)?;
    let more = rows.len() > limit as usize;
    if more {
        if after.is_some() {
            rows.remove(0);
        } else {
            rows.pop();
        }
    }
    let mut h = Html::new();
    h.raw("<h1>Outbox</h1>");
    flash(&mut h, req.param("done"));
    h.raw("<form class=\"filters\" method=\"get\" action=\"/outbox\">");
    h.raw("<label>state<select name=\"state\"><option value=\"\">any</option>");
    for s in OutboxState::ALL {
        let mut attrs = vec![("value", s.as_str())];
        if state == Some(s) {
            attrs.push(("selected", "selected"));
        }
        h.tag("option", &attrs, s.as_str());
    }
    h.raw("</select></label><button type=\"submit\">Filter</button></form>");
    let state_s = state.map(|s| s.as_str());
    let back = url("/outbox", &[("state", state_s)]);
    table(&mut h, app, &rows, &back, now);
    pager(
        &mut h,
        &[("state", state_s)],
        "/outbox",
        Pager {
            first: rows.first().map(|r| r.id),
            last: rows.last().map(|r| r.id),
            newer: before.is_some() || (after.is_some() && more),
            older: if after.is_some() { true } else { more },
        },
    );
    Ok(layout(app, "Outbox", "/outbox", now, h))
}

/// The page's table of outbox rows (a dead one with its retry button), or
/// a line saying none matches.
fn table(h: &mut Html, app: &App, rows: &[OutboxRow], back: &str, now: i64) {
    if rows.is_empty() {
        h.raw("<p class=\"none\" id=\"empty\">No outbox row matches.</p>");
    } else {
        h.raw("<table id=\"outbox\"><thead><tr><th class=\"num\">id</th><th>state</th>")
            .raw("<th>kind</th><th>key</th><th class=\"num\">attempts</th><th>job</th>")
            .raw("<th>created</th><th>last error</th><th></th></tr></thead><tbody>");
        for r in rows {
            let id = r.id.to_string();
            h.open("tr", &[("data-id", &id)]);
            h.tag("td", &[("class", "num")], &id);
            h.raw("<td>");
            badge(h, r.state.as_str());
            h.raw("</td>");
            h.tag("td", &[], &r.kind);
            h.tag("td", &[("class", "key")], &r.key);
            h.tag(
                "td",
                &[("class", "num")],
                &format!("{}/{}", r.attempts, r.max_attempts),
            );
            h.raw("<td>");
            match r.job_id {
                Some(j) => h.link(&format!("/jobs/{j}"), &j.to_string()),
                None => h.raw("<span class=\"none\">pruned</span>"),
            };
            h.raw("</td><td>");
            h.time(Some(r.created_at), now);
            h.raw("</td><td>");
            if let Some(e) = &r.last_error {
                h.tag("pre", &[("class", "error")], e);
            }
            h.raw("</td><td>");
            if r.state == OutboxState::Dead {
                action(h, app, &format!("/outbox/{id}/retry"), back, "Retry", false);
            }
            h.raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
}
