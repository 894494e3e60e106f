//! `/`: the overview. Totals on top, then its sections in [`SECTIONS`]
//! order: jobs per queue and state with each queue's backlog age and its
//! controls (paused, a cap, a rate; with actions allowed, a button to pause
//! or resume it), the last hour's runs per minute, the outbox's backlog,
//! the schedules (when there are any), the file or database. A section is a
//! function of the overview read once for the page.

use litejob::admin::{EngineKind, JobCounts, Overview, QueueOverview};
use litejob::{JobState, OutboxState};

use super::super::super::queues::{at_limit, describe};

use super::super::html::{human_span, pct, url, Html};
use super::super::http::{Req, Resp};
use super::super::routes::App;
use super::super::svg;
use super::{action, count_cell, flash, layout};

/// One part of the overview.
type Section = fn(&mut Html, &App, &Overview);

/// The sections, in page order.
const SECTIONS: &[Section] = &[queues, activity, outbox, schedules, storage];

/// Schedules listed on the overview; the schedules page has them all.
const SCHEDULES_SHOWN: usize = 10;

/// The overview page.
pub fn page(app: &App, req: &Req) -> litejob::Result<Resp> {
    let o = app.queue.admin().overview()?;
    let mut h = Html::new();
    h.raw("<h1>Overview</h1>");
    flash(&mut h, req.param("done"));
    cards(&mut h, &o);
    for section in SECTIONS {
        section(&mut h, app, &o);
    }
    Ok(layout(app, "Overview", "/", o.now, h))
}

fn cards(h: &mut Html, o: &Overview) {
    let oldest = o.queues.values().filter_map(|q| q.oldest_due_wait_ms).max();
    let hour_ok: i64 = o.activity.succeeded.iter().sum();
    let hour_bad: i64 = o.activity.failed.iter().sum();
    h.raw("<div class=\"cards\">");
    let card = |h: &mut Html, id: &'static str, n: &str, label: &str, href: &str| {
        h.open("div", &[("class", "card"), ("id", id)]);
        h.open("a", &[("href", href)]);
        h.tag("div", &[("class", "n")], n);
        h.tag("div", &[("class", "l")], label);
        h.close("a").close("div");
    };
    for (id, state) in [
        ("card-queued", JobState::Queued),
        ("card-running", JobState::Running),
        ("card-dead", JobState::Dead),
    ] {
        let href = url("/jobs", &[("state", Some(state.as_str()))]);
        card(h, id, &o.jobs.get(state).to_string(), state.as_str(), &href);
    }
    let wait = oldest.map_or("-".to_string(), |ms| human_span(ms as u64));
    card(
        h,
        "card-oldest",
        &wait,
        "oldest runnable job waiting",
        "/jobs?state=queued",
    );
    card(
        h,
        "card-done",
        &hour_ok.to_string(),
        "runs succeeded, last hour",
        "/jobs?state=succeeded",
    );
    card(
        h,
        "card-failed",
        &hour_bad.to_string(),
        "runs failed, last hour",
        "/failures",
    );
    let backlog = o.outbox.pending + o.outbox.sending;
    card(
        h,
        "card-outbox",
        &backlog.to_string(),
        "outbox backlog",
        "/outbox?state=pending",
    );
    h.raw("</div>");
}

/// A row of counts per state, each linking to the jobs it counts.
fn state_cells(h: &mut Html, c: &JobCounts, filter: &[(&str, Option<&str>)]) {
    for state in JobState::ALL {
        let mut q = filter.to_vec();
        q.push(("state", Some(state.as_str())));
        count_cell(h, c.get(state), &url("/jobs", &q));
    }
}

fn queues(h: &mut Html, app: &App, o: &Overview) {
    h.raw("<section id=\"queues\"><h2>Jobs per queue</h2>");
    if o.queues.is_empty() && o.controls.is_empty() {
        h.raw("<p class=\"none\">No jobs in the queue yet.</p></section>");
        return;
    }
    h.raw("<table><thead><tr><th>queue</th>");
    for state in JobState::ALL {
        h.tag("th", &[("class", "num")], state.as_str());
    }
    h.raw("<th class=\"num\">oldest runnable waiting</th><th>controls</th></tr></thead><tbody>");
    // Every queue with jobs, and the controlled ones that have none yet.
    let none = QueueOverview::default();
    let mut rows: Vec<(&str, &QueueOverview)> =
        o.queues.iter().map(|(n, q)| (n.as_str(), q)).collect();
    for c in &o.controls {
        if !o.queues.contains_key(&c.name) {
            rows.push((c.name.as_str(), &none));
        }
    }
    rows.sort_by_key(|(n, _)| *n);
    for (name, q) in rows {
        h.open("tr", &[("data-queue", name)]);
        h.raw("<td>");
        h.link(&url("/jobs", &[("queue", Some(name))]), name);
        h.raw("</td>");
        state_cells(h, &q.jobs, &[("queue", Some(name))]);
        h.raw("<td class=\"num\">");
        match q.oldest_due_wait_ms {
            Some(ms) => h.text(&human_span(ms as u64)),
            None => h.raw("<span class=\"none\">-</span>"),
        };
        h.raw("</td><td class=\"controls\">");
        let control = o.controls.iter().find(|c| c.name == name);
        match control {
            Some(c) if c.partitions_at_limit_count > 0 => h.text(&format!(
                "{} (at their limit: {})",
                describe(c),
                at_limit(c)
            )),
            Some(c) => h.text(&describe(c)),
            None => h.raw("<span class=\"none\">-</span>"),
        };
        if app.actions {
            let (verb, label) = match control {
                Some(c) if c.paused => ("resume", "Resume"),
                _ => ("pause", "Pause"),
            };
            h.raw(" ");
            let path = format!("/queues/{}/{verb}", pct(name));
            action(h, app, &path, "/", label, false);
        }
        h.raw("</td></tr>");
    }
    if o.queues.len() > 1 {
        h.raw("<tr><th>all</th>");
        state_cells(h, &o.jobs, &[]);
        h.raw("<td></td><td></td></tr>");
    }
    h.raw("</tbody></table></section>");
}

fn activity(h: &mut Html, _app: &App, o: &Overview) {
    let a = &o.activity;
    let ok: i64 = a.succeeded.iter().sum();
    let bad: i64 = a.failed.iter().sum();
    h.raw("<section id=\"activity\"><h2>Runs in the last hour</h2>");
    h.raw("<p class=\"legend\"><span><i style=\"background:#2e9e5b\"></i>");
    h.num(ok)
        .raw(" succeeded</span><span><i style=\"background:#d14343\"></i>");
    h.num(bad).raw(" failed or panicked</span>");
    if a.truncated {
        h.raw("<span>(over a million runs: the oldest minutes are short)</span>");
    }
    h.raw("</p>");
    svg::runs_per_minute(h, a.start, &a.succeeded, &a.failed);
    h.raw("</section>");
}

fn outbox(h: &mut Html, _app: &App, o: &Overview) {
    h.raw("<section id=\"outbox\"><h2>Outbox</h2>");
    if o.outbox_by_kind.is_empty() {
        h.raw("<p class=\"none\">No outbox rows.</p></section>");
        return;
    }
    h.raw("<table><thead><tr><th>effect kind</th>");
    for state in OutboxState::ALL {
        h.tag("th", &[("class", "num")], state.as_str());
    }
    h.raw("</tr></thead><tbody>");
    for (kind, c) in &o.outbox_by_kind {
        h.open("tr", &[("data-kind", kind)]);
        h.tag("td", &[], kind);
        for state in OutboxState::ALL {
            count_cell(
                h,
                c.get(state),
                &url("/outbox", &[("state", Some(state.as_str()))]),
            );
        }
        h.raw("</tr>");
    }
    h.raw("</tbody></table></section>");
}

fn schedules(h: &mut Html, _app: &App, o: &Overview) {
    if o.schedules.is_empty() {
        return;
    }
    h.raw("<section id=\"schedules-section\"><h2>Schedules</h2>");
    let shown = &o.schedules[..o.schedules.len().min(SCHEDULES_SHOWN)];
    super::schedules::table(h, shown, o.now, false);
    if shown.len() < o.schedules.len() {
        h.raw("<p>");
        h.link(
            "/schedules",
            &format!("all {} schedules", o.schedules.len()),
        );
        h.raw("</p>");
    }
    h.raw("</section>");
}

/// Where the queue lives: the file (its size and its write-ahead log's),
/// or the PostgreSQL database (the size of litejob's tables there).
fn storage(h: &mut Html, app: &App, o: &Overview) {
    match app.queue.engine() {
        EngineKind::Sqlite => {
            h.raw("<section id=\"file\"><h2>The file</h2><dl class=\"facts\">");
            h.raw("<dt>path</dt><dd>");
            h.text(app.queue.location());
            h.raw("</dd><dt>size</dt><dd>");
            h.text(&bytes(o.file_bytes));
            h.raw(" (write-ahead log ");
            h.text(&bytes(o.wal_bytes));
            h.raw(")</dd>");
        }
        _ => {
            h.raw("<section id=\"file\"><h2>The database</h2><dl class=\"facts\">");
            h.raw("<dt>PostgreSQL</dt><dd>");
            h.text(app.queue.location());
            h.raw("</dd><dt>size</dt><dd>");
            h.text(&bytes(o.file_bytes));
            h.raw(" (litejob's tables with their indexes)</dd>");
        }
    }
    h.raw("<dt>ledger</dt><dd>");
    h.num(o.ledger_rows);
    h.raw(" keys whose work committed</dd></dl></section>");
}

/// `12.3 MB`.
fn bytes(n: u64) -> String {
    match n {
        0..=9_999 => format!("{n} B"),
        10_000..=9_999_999 => format!("{:.1} kB", n as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} MB", n as f64 / 1e6),
        _ => format!("{:.2} GB", n as f64 / 1e9),
    }
}
