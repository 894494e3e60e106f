//! A job's page draws the workflow around it: a box per job linking to its
//! page, coloured by state, the job itself marked, an arrow per
//! dependency; it lists the dependencies, what a waiting job still waits
//! on and the dependents, and shows a job's output. A job outside any
//! workflow shows none of it; the overview counts waiting jobs.

use litejob::{JobState, NewJob, Outcome};
use serde_json::{json, Value};

use super::{between, numbers, strip_tags, Server};
use crate::backends::{Runtimes, TestQueue};
use crate::both;

/// `a` and `b` fan in to `c`, `d` follows `c`, `x` stands alone; `a`, `b`
/// and `x` ran, each with an output: `c` is queued, `d` waiting. Returns
/// the ids of a, b, c, d, x.
pub fn fan_in(q: &TestQueue) -> [i64; 5] {
    let queue = q.open();
    let got = queue
        .enqueue_many(vec![
            NewJob::new("part", "a", &json!({"n": 2})),
            NewJob::new("part", "b", &json!({"n": 3})),
            NewJob::new("merge", "c", &json!({})).with_depends_on(["a", "b"]),
            NewJob::new("mail", "d", &json!({})).with_depends_on(["c"]),
            NewJob::new("part", "x", &json!({"n": 4})),
        ])
        .unwrap();
    queue
        .runtime()
        .handler("part", |_, v: Value| {
            Outcome::done_with(&json!({"doubled": v["n"].as_i64().unwrap() * 2}))
        })
        .drain()
        .unwrap();
    let ids: Vec<i64> = got.iter().map(|e| e.id()).collect();
    ids.try_into().unwrap()
}

/// The `<svg class="workflow" …>…</svg>` of a page.
pub fn picture(page: &str) -> &str {
    between(page, "<svg class=\"workflow\"", "</svg>")
}

/// The node of job `id` in a picture: its `<a …>` tag's attributes.
fn node(svg: &str, id: i64) -> &str {
    between(svg, &format!("<a href=\"/jobs/{id}\""), ">")
}

both! {
    fn a_job_page_draws_its_workflow_and_lists_its_links(q) {
        let [a, b, c, d, x] = fan_in(q);
        let s = Server::on(&q.location, &[]);
        let page = s.get(&format!("/jobs/{c}")).ok();
        let svg = picture(&page);
        assert_eq!(svg.matches("<a href=").count(), 4, "a node per job: {svg}");
        assert!(node(svg, a).contains("class=\"node n-succeeded\""), "{svg}");
        assert!(node(svg, b).contains("class=\"node n-succeeded\""), "{svg}");
        assert!(node(svg, c).contains("class=\"node n-queued self\""), "{svg}");
        assert!(node(svg, d).contains("class=\"node n-waiting\""), "{svg}");
        assert!(!svg.contains(&format!("/jobs/{x}\"")), "x is not in the workflow");
        assert_eq!(svg.matches("class=\"edge\"").count(), 3, "an arrow per dependency: {svg}");
        let deps = strip_tags(between(&page, "id=\"dependencies\">", "</dd>"));
        assert_eq!(deps, "a succeeded, b succeeded");
        let after = strip_tags(between(&page, "id=\"dependents\">", "</dd>"));
        assert_eq!(after, "d waiting");
        assert!(!page.contains("id=\"waiting-on\""), "c waits on nothing: {page}");
        assert!(!page.contains("id=\"output\""), "c has not run");

        let waiting = s.get(&format!("/jobs/{d}")).ok();
        let on = strip_tags(between(&waiting, "id=\"waiting-on\">", "</dd>"));
        assert_eq!(on, "c queued");
        assert_eq!(picture(&waiting).matches("<a href=").count(), 4);

        let first = s.get(&format!("/jobs/{a}")).ok();
        let output = between(&first, "id=\"output\"", "</section>");
        assert!(output.contains("&quot;doubled&quot;: 4"), "{output}");

        let alone = s.get(&format!("/jobs/{x}")).ok();
        assert!(alone.contains("id=\"output\""), "x ran with an output");
        assert!(!alone.contains("id=\"workflow\"") && !alone.contains("<svg class=\"workflow\""), "{alone}");

        let key_page = s.get("/keys/c").ok();
        assert_eq!(picture(&key_page).matches("<a href=").count(), 4);

        let overview = s.get("/").ok();
        let row = between(&overview, "<tr data-queue=\"default\">", "</tr>");
        let waiting_cell = JobState::ALL.iter().position(|s| *s == JobState::Waiting).unwrap();
        assert_eq!(numbers(row)[waiting_cell], 1, "{row}");
        assert!(row.contains("/jobs?queue=default&amp;state=waiting"), "{row}");
    }
}
