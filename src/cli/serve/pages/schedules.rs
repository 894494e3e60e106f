//! `/schedules`: every schedule declared on the queue — its cron and time
//! zone, the kind and queue of its jobs, its catch-up policy, the last slot
//! fired and the next one, each slot a link to its job's key page — and
//! the same table, shorter, as a section of the overview.

use litejob::admin::ScheduleRow;

use super::super::html::{human_span, pct, url, Html};
use super::super::http::Resp;
use super::super::routes::App;
use super::layout;

/// The schedules page.
pub fn page(app: &App) -> litejob::Result<Resp> {
    let now = super::super::super::time::now_ms();
    let rows = app.queue.admin().schedules()?;
    let mut h = Html::new();
    h.raw("<h1>Schedules</h1>");
    if rows.is_empty() {
        h.raw(
            "<p class=\"none\" id=\"empty\">No schedule is declared: a runtime declares them \
             (<code>RuntimeBuilder::schedule</code>) when it starts.</p>",
        );
    } else {
        h.raw("<p class=\"note\">Each slot fires one job whose key is ")
            .raw("<code>schedule:&lt;name&gt;:&lt;slot in UTC&gt;</code>: ")
            .raw("a slot links to its key's page.</p>");
        table(&mut h, &rows, now, true);
    }
    Ok(layout(app, "Schedules", "/schedules", now, h))
}

/// The schedules as a table (`id="schedules"`); `full` adds the queue, the
/// catch-up policy and a link to each schedule's jobs.
pub fn table(h: &mut Html, rows: &[ScheduleRow], now: i64, full: bool) {
    h.raw("<table id=\"schedules\"><thead><tr><th>name</th><th>cron</th><th>time zone</th>")
        .raw("<th>kind</th>");
    if full {
        h.raw("<th>queue</th><th>catch-up</th>");
    }
    h.raw("<th>last slot</th><th>next slot</th>");
    if full {
        h.raw("<th></th>");
    }
    h.raw("</tr></thead><tbody>");
    for r in rows {
        h.open("tr", &[("data-name", &r.name)]);
        h.tag("td", &[("class", "key")], &r.name);
        h.raw("<td><code>").text(&r.cron).raw("</code></td>");
        h.tag("td", &[], &r.tz);
        h.raw("<td>");
        h.link(&url("/jobs", &[("kind", Some(&r.kind))]), &r.kind);
        h.raw("</td>");
        if full {
            h.raw("<td>");
            h.link(&url("/jobs", &[("queue", Some(&r.queue))]), &r.queue);
            h.raw("</td>");
            let catch_up = match r.catch_up_window_ms {
                Some(ms) => format!("{} {}", r.catch_up, human_span(ms.max(0) as u64)),
                None => r.catch_up.clone(),
            };
            h.tag("td", &[], &catch_up);
        }
        slot(h, r, r.last_slot_at, "last", now);
        slot(h, r, r.next_slot_at, "next", now);
        if full {
            h.raw("<td>");
            let prefix = format!("schedule:{}:", r.name);
            h.link(&url("/jobs", &[("key", Some(&prefix))]), "its jobs");
            h.raw("</td>");
        }
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
}

/// A slot's cell: its time (UTC and relative), linking to its key's page.
fn slot(h: &mut Html, r: &ScheduleRow, at: Option<i64>, which: &str, now: i64) {
    h.raw("<td>");
    if let Some(ms) = at {
        let href = format!("/keys/{}", pct(&r.slot_key(ms)));
        let class = format!("slot {which}");
        h.open("a", &[("href", &href), ("class", &class)]);
        h.time_s(Some(ms), now);
        h.close("a");
    } else {
        h.time(None, now);
    }
    h.raw("</td>");
}
