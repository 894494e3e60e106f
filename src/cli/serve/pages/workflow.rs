//! The workflow section of a job's page (and of its key's): the graph
//! around the job drawn as a picture, then its dependencies with their
//! states, which of them a waiting job still waits for, and the jobs that
//! depend on it. Nothing for a job outside any workflow.

use litejob::admin::{Linked, Workflow};
use litejob::{Job, JobState};

use super::super::graph;
use super::super::html::Html;
use super::badge;

/// Links listed by name before the rest are counted.
const LISTED: usize = 20;

/// The section; `w` is the workflow read for the job, if it has one.
pub fn section<'a>(
    h: &mut Html,
    j: &Job,
    dependencies: &'a [Linked],
    dependents: &'a [Linked],
    w: Option<&Workflow>,
) {
    if dependencies.is_empty() && dependents.is_empty() {
        return;
    }
    h.raw("<section id=\"workflow\"><h2>Workflow</h2>");
    if let Some(w) = w {
        graph::workflow(h, w);
        let drawn = graph::drawn(w).len();
        if drawn < w.jobs.len() || w.truncated {
            h.raw("<p class=\"note\">");
            h.num(drawn)
                .raw(" jobs drawn, the nearest to this one, of ");
            if w.truncated {
                h.raw("more than ").num(Workflow::LIMIT);
            } else {
                h.num(w.jobs.len());
            }
            h.raw(": <code>litejob workflow ");
            h.text(&j.idempotency_key);
            h.raw("</code> lists them.</p>");
        }
    }
    h.raw("<dl class=\"facts\">");
    let all = |l: &'a [Linked]| l.iter().collect::<Vec<_>>();
    links(h, "depends on", "dependencies", &all(dependencies));
    if j.state == JobState::Waiting {
        let pending: Vec<&Linked> = dependencies
            .iter()
            .filter(|d| d.state != JobState::Succeeded)
            .collect();
        links(h, "waiting on", "waiting-on", &pending);
    }
    links(h, "dependents", "dependents", &all(dependents));
    h.raw("</dl></section>");
}

/// One fact: each job linked to its page with its state, the first
/// [`LISTED`], then how many more.
fn links(h: &mut Html, name: &str, id: &'static str, list: &[&Linked]) {
    let n = list.len();
    if n == 0 {
        return;
    }
    h.tag("dt", &[], name);
    h.open("dd", &[("id", id)]);
    for (i, l) in list.iter().take(LISTED).enumerate() {
        if i > 0 {
            h.raw(", ");
        }
        h.open("span", &[("class", "key")]);
        h.link(&format!("/jobs/{}", l.id), &l.key);
        h.close("span");
        h.raw(" ");
        badge(h, l.state.as_str());
    }
    if n > LISTED {
        h.raw(" and ").num(n - LISTED).raw(" more");
    }
    h.close("dd");
}
