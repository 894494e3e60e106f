//! `/failures`: dead jobs and dead outbox rows grouped by their last error
//! and kind, the largest group first, each with its newest row one click
//! away.

use litejob::admin::FailureGroup;

use super::super::html::{url, Html};
use super::super::http::Resp;
use super::super::routes::App;
use super::layout;

/// Groups shown per table.
const GROUPS: u32 = 100;

/// The failures page.
pub fn page(app: &App) -> litejob::Result<Resp> {
    let now = super::super::super::time::now_ms();
    let f = app.queue.admin().failures(GROUPS)?;
    let mut h = Html::new();
    h.raw("<h1>Failures</h1>");
    h.raw("<section id=\"dead-jobs\"><h2>Dead jobs, by last error</h2>");
    table(
        &mut h,
        &f.jobs,
        now,
        |g| format!("/jobs/{}", g.newest_id),
        true,
    );
    h.raw("</section><section id=\"dead-outbox\"><h2>Dead outbox rows, by last error</h2>");
    table(
        &mut h,
        &f.outbox,
        now,
        |_| url("/outbox", &[("state", Some("dead"))]),
        false,
    );
    h.raw("</section>");
    Ok(layout(app, "Failures", "/failures", now, h))
}

fn table(
    h: &mut Html,
    groups: &[FailureGroup],
    now: i64,
    newest: impl Fn(&FailureGroup) -> String,
    jobs: bool,
) {
    if groups.is_empty() {
        h.raw("<p class=\"none\">Nothing dead.</p>");
        return;
    }
    h.raw("<table class=\"failures\"><thead><tr><th class=\"num\">count</th><th>kind</th>")
        .raw("<th>last error</th><th>first</th><th>latest</th><th>newest</th></tr></thead><tbody>");
    for g in groups {
        h.raw("<tr><td class=\"num\">");
        if jobs {
            let href = url("/jobs", &[("state", Some("dead")), ("kind", Some(&g.kind))]);
            h.link(&href, &g.count.to_string());
        } else {
            h.num(g.count);
        }
        h.raw("</td>");
        h.tag("td", &[], &g.kind);
        h.raw("<td>");
        match &g.error {
            Some(e) => h.tag("pre", &[("class", "error")], e),
            None => h.raw("<span class=\"none\">no error recorded</span>"),
        };
        h.raw("</td><td>");
        h.time(g.first_at, now);
        h.raw("</td><td>");
        h.time(g.last_at, now);
        h.raw("</td><td>");
        let label = if jobs { "job " } else { "row " };
        h.link(&newest(g), &format!("{label}{}", g.newest_id));
        h.raw("</td></tr>");
    }
    h.raw("</tbody></table>");
}
